"""Keyed counts and event rows past their horizon (``KeyedCounters.extend_horizon``, ``count
--extend`` with --step-column): the first n releases are those of the run that never went on
(nothing redrawn), the later steps' noise does not depend on the data, a state resumes the
extended run across processes, and what the privacy argument does not cover is refused."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import one_error_line, run_cli, run_main

from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.journal import StateFileError
from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, run_keyed
from pure_dp_mf.errors import InvalidInputError

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")

KEYS = ["de", "fr", "it"]
N = 8  # the horizon the counters are made for


def _inputs(seed: int, steps: int, keys: int = len(KEYS)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, size=(steps, keys))


def _counters(*, seed: int = 3, keys=KEYS, **options) -> KeyedCounters:
    options = {"epsilon": 1.0, "horizon": N, **options}
    return KeyedCounters(keys=keys, generator=NoiseGenerator.from_seed(seed), **options)


def _release(counters: KeyedCounters, inputs: np.ndarray) -> np.ndarray:
    """The counts of every step of ``inputs`` (steps, keys), shape (steps, keys)."""
    return np.array([counters.release(row) for row in inputs])


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"privacy_unit": "user-step", "max_keys": 2},
        {"privacy_unit": "user", "max_keys": 2, "max_per_key": 1},
        {"privacy_unit": "event", "max_value": 3},
        {"privacy_unit": "step", "keys": ["count"]},
    ],
    ids=["event", "user-step", "user-C1", "event-m3", "step"],
)
def test_the_first_n_releases_are_not_redrawn_and_the_counts_go_on(options):
    keys = options.get("keys", KEYS)
    inputs = _inputs(1, 3 * N, keys=len(keys))
    plain = _counters(**options)
    known = _release(plain, inputs[:N])
    with pytest.raises(InvalidInputError, match="all 8 steps"):
        plain.release(inputs[N])
    for extend_at in (0, 5, N):  # the extension's schedule depends on n only, not on when it is made
        counters = _counters(**options)
        before = _release(counters, inputs[:extend_at])
        counters.extend_horizon()
        assert counters.horizon is None and counters.extended_from["horizon"] == N
        after = _release(counters, inputs[extend_at:])
        counts = np.concatenate([before.reshape(-1, len(keys)), after])
        assert np.array_equal(counts[:N], known)  # steps 1 … n: exactly the known-horizon release
        assert counts.shape == (3 * N, len(keys))
        if extend_at == 0:
            first = counts
        else:
            assert np.array_equal(counts, first)


def test_the_noise_past_the_horizon_does_not_depend_on_the_data_and_the_bars_grow():
    noises = []
    for data_seed in (1, 2):
        inputs = _inputs(data_seed, 4 * N)
        counters = _counters()
        counters.extend_horizon()
        counts = _release(counters, inputs)
        noises.append(counts - np.cumsum(inputs, axis=0))
    assert np.array_equal(noises[0], noises[1])
    assert np.any(noises[0][N:] != 0)
    plain = _counters()
    extended = _counters()
    extended.extend_horizon()
    bars, own = extended.bars(0, 4 * N, beta=0.05), plain.bars(0, N, beta=0.05)
    assert np.allclose(bars.std[:N], own.std) and np.array_equal(bars.half_width[:N], own.half_width)
    assert bars.std[N] > 0 and np.all(np.isfinite(bars.std))


def test_run_keyed_releases_past_the_horizon_only_when_extended():
    events = [KeyedEvent(key=KEYS[t % 3], step=t, value=1) for t in range(1, 3 * N + 1)]
    with pytest.raises(InvalidInputError, match="--through"):
        list(run_keyed(_counters(), iter(events), through=2 * N))
    counters = _counters()
    counters.extend_horizon()
    steps = [step for step, *_ in run_keyed(counters, iter(events), through=2 * N)]
    assert steps == list(range(1, 2 * N + 1))


def test_what_the_argument_does_not_cover_is_refused_and_nothing_changes():
    counters = _counters(privacy_unit="user", max_keys=2, max_per_key=3)
    with pytest.raises(InvalidInputError, match="--max-per-key 1"):
        counters.extend_horizon()
    assert counters.horizon == N and counters.extended_from is None
    anytime = _counters(horizon=None)
    with pytest.raises(InvalidInputError, match="no horizon"):
        anytime.extend_horizon()
    once = _counters()
    once.extend_horizon()
    with pytest.raises(InvalidInputError, match="no horizon"):
        once.extend_horizon()
    closed = _counters()
    closed.close()
    with pytest.raises(StateFileError, match="closed"):
        closed.extend_horizon()


def test_an_extended_state_resumes_with_its_horizon_or_none(tmp_path):
    inputs = _inputs(5, 3 * N)
    whole = _counters()
    whole.extend_horizon()
    expected = _release(whole, inputs)
    state = tmp_path / "s.db"
    counters = _counters()
    counters.save_state(state)
    first = _release(counters, inputs[:N])
    counters.extend_horizon()
    second = _release(counters, inputs[N : N + 3])
    counters.close()
    for horizon in (N, None):  # the horizon it was made with, or none: the state says it went on
        resumed = KeyedCounters.resume(state, keys=KEYS, epsilon=1.0, horizon=horizon, generator=NoiseGenerator.from_seed(3))
        assert resumed.horizon is None and resumed.extended_from["horizon"] == N and resumed.released == N + 3
        resumed.close()
    with pytest.raises(StateFileError, match="horizon"):
        KeyedCounters.resume(state, keys=KEYS, epsilon=1.0, horizon=N + 1, generator=NoiseGenerator.from_seed(3))
    resumed = KeyedCounters.resume(state, keys=KEYS, epsilon=1.0, horizon=N, generator=NoiseGenerator.from_seed(3))
    third = _release(resumed, inputs[N + 3 :])
    resumed.close()
    assert np.array_equal(np.concatenate([first, second, third]), expected)


# ------------------------------------------------------------------ the command


def _events(tmp_path, days: int = 30) -> None:
    rng = np.random.default_rng(7)
    rows = [
        (f"u{rng.integers(1, 9)}", KEYS[rng.integers(0, 3)], day) for day in range(1, days + 1) for _ in range(rng.integers(0, 4))
    ]
    (tmp_path / "keys.txt").write_text("".join(f"{key}\n" for key in KEYS))
    (tmp_path / "events.csv").write_text("uid,country,day\n" + "".join(f"{u},{k},{d}\n" for u, k, d in rows))


def _count(tmp_path, *extra: str, keyed: bool = True, cli=run_cli):
    arguments = ["count", str(tmp_path / "events.csv"), "--step-column", "day", "--epsilon", "1", "--seed", "4"]
    if keyed:
        arguments += ["--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    result = cli(*arguments, *extra)
    return result if cli is run_main else (result.returncode, result.stdout, result.stderr)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "event-rows"])
def test_the_command_goes_past_the_horizon_across_processes(tmp_path, keyed):
    _events(tmp_path)
    rows = len(KEYS) if keyed else 1
    code, plain, err = _count(tmp_path, "--horizon", "10", keyed=keyed)
    assert code == 0, err
    code, whole, err = _count(tmp_path, "--horizon", "10", "--extend", "--through", "25", keyed=keyed)
    assert code == 0, err
    lines = whole.splitlines()
    assert len(lines) == 1 + 25 * rows
    assert lines[: 1 + 10 * rows] == plain.splitlines()  # nothing redrawn
    assert "then anytime" in err and '"extended_past_horizon": 10' in err
    state = tmp_path / "s.db"
    code, first, err = _count(tmp_path, "--horizon", "10", "--state", str(state), keyed=keyed)  # a yearly job ends …
    assert code == 0, err
    code, second, err = _count(tmp_path, "--horizon", "10", "--extend", "--through", "18", "--state", str(state), keyed=keyed)
    assert code == 0, err  # … and goes on past its horizon, in new processes
    code, third, err = _count(tmp_path, "--horizon", "10", "--extend", "--through", "25", "--state", str(state), keyed=keyed)
    assert code == 0 and "resuming after step 18" in err, err
    assert (first + second + third).splitlines() == lines
    code, fourth, err = _count(tmp_path, "--extend", "--through", "25", "--state", str(state), keyed=keyed)
    assert code == 0 and fourth == "", err  # without --horizon: the state says it went on; nothing left to release


def test_the_command_refuses_what_extend_does_not_cover(tmp_path):
    _events(tmp_path)
    one_error_line(*_count(tmp_path, "--horizon", "10", "--extend", "--through", "20", "--engine", "spark"), "--extend", "spark")
    one_error_line(*_count(tmp_path, "--horizon", "10", "--extend"), "--extend needs --through")
    one_error_line(*_count(tmp_path, "--extend", "--through", "20"), "--extend", "no horizon")
    user = ["--privacy-unit", "user", "--user-column", "uid", "--max-keys", "2", "--max-per-key", "2"]
    state = tmp_path / "u.db"
    one_error_line(
        *_count(tmp_path, "--horizon", "10", *user, "--extend", "--through", "20", "--state", str(state)), "--max-per-key 1"
    )
    assert not state.exists()  # refused before a state is made
    one_error_line(*_count(tmp_path, "--horizon", "10", "--first-step", "3"), "--first-step")
    code, out, err = _count(tmp_path, "--horizon", "10", "--privacy-unit", "user", "--user-column", "uid", "--max-keys", "2",
                            "--max-per-key", "1", "--extend", "--through", "20")  # fmt: skip
    assert code == 0 and len(out.splitlines()) == 1 + 20 * len(KEYS), err


def test_a_key_file_publication_goes_on_past_its_horizon(ledger_url, tmp_path):
    """``--key-file`` (no state; the ledger guards the publication): the job run again with
    --extend reproduces steps 1 … n and goes on; a later run with a longer schedule reproduces
    everything before it; corrected input at a released step past n is refused."""
    _events(tmp_path)
    run = ["count", str(tmp_path / "events.csv"), "--step-column", "day", "--key-column", "country"]
    run += ["--keys", str(tmp_path / "keys.txt"), "--epsilon", "1", "--horizon", "10", "--key-file", str(tmp_path / "k.key")]
    first = run_cli(*run)
    assert first.returncode == 0, first.stderr
    extended = run_cli(*run, "--extend", "--through", "15")
    assert extended.returncode == 0, extended.stderr
    assert extended.stdout.startswith(first.stdout) and len(extended.stdout.splitlines()) == 1 + 15 * len(KEYS)
    longer = run_cli(*run, "--extend", "--through", "20")
    assert longer.returncode == 0, longer.stderr
    assert longer.stdout.startswith(extended.stdout) and len(longer.stdout.splitlines()) == 1 + 20 * len(KEYS)
    lines = (tmp_path / "events.csv").read_text().splitlines()
    later = next(number for number, line in enumerate(lines[1:], start=1) if int(line.split(",")[2]) > 12)
    lines.insert(later, "u9,de,12")  # day 12 corrected: one more event
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    corrected = run_cli(*run, "--extend", "--through", "20")
    assert corrected.returncode == 2 and "step 12" in corrected.stderr and "other input" in corrected.stderr, corrected.stderr
