"""``pure-dp-mf releases STATE`` and ``KeyedCounters.open(…).releases()`` read back keyed and
event-row states: the rows equal what the count runs wrote (seeded runs), in the same columns
(key, step, [date,] count, std, lower, upper), without changing the state; what a state does
not keep is refused with one clear error."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import one_error_line, run_cli, run_main

from pure_dp_mf.engines import keyed
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.journal import Journal, StateFileError
from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, run_keyed
from pure_dp_mf.errors import InvalidInputError

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")

KEYS = ["de", "fr", "it"]


def _events(tmp_path, days: int = 12, *, dates: bool = False) -> None:
    rng = np.random.default_rng(11)
    rows = [
        (f"u{rng.integers(1, 6)}", KEYS[rng.integers(0, 3)], day) for day in range(1, days + 1) for _ in range(rng.integers(0, 4))
    ]
    day = (lambda d: f"2026-01-{d:02d}") if dates else str
    (tmp_path / "keys.txt").write_text("".join(f"{key}\n" for key in KEYS))
    (tmp_path / "events.csv").write_text("uid,country,day\n" + "".join(f"{u},{k},{day(d)}\n" for u, k, d in rows))


def _count(tmp_path, *extra: str, keyed_rows: bool = True) -> tuple[int, str, str]:
    arguments = ["count", str(tmp_path / "events.csv"), "--step-column", "day", "--epsilon", "1", "--seed", "4"]
    if keyed_rows:
        arguments += ["--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    return run_main(*arguments, *extra)


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--privacy-unit", "user", "--user-column", "uid", "--max-keys", "2", "--max-per-key", "3", "--beta", "0.1"],
        ["--band", "simultaneous"],
    ],
    ids=["event", "user-beta", "simultaneous"],
)
def test_releases_of_a_keyed_state_are_what_the_runs_wrote(tmp_path, extra):
    _events(tmp_path)
    state, output = tmp_path / "s.db", tmp_path / "out.csv"
    code, _, err = _count(tmp_path, "--horizon", "12", "--through", "5", "--state", str(state), "--output", str(output), *extra)
    assert code == 0, err
    code, _, err = _count(tmp_path, "--horizon", "12", "--through", "12", "--state", str(state), "--output", str(output), *extra)
    assert code == 0, err  # a second process, a longer schedule: the output completed in place
    written = output.read_text()
    before = state.read_bytes()
    result = run_cli("releases", str(state))
    assert result.returncode == 0, result.stderr
    assert result.stdout == written
    assert state.read_bytes() == before  # read only
    code, out, err = run_main("releases", str(state), "--first-step", "4", "--last-step", "6")
    lines = written.splitlines()
    assert code == 0 and out.splitlines() == [lines[0], *lines[1 + 3 * 3 : 1 + 6 * 3]], err


def test_a_long_keyed_state_is_printed_in_parts(tmp_path, monkeypatch):
    from pure_dp_mf.cli import releases

    _events(tmp_path)
    state = tmp_path / "s.db"
    for output_format in ("csv", "jsonl"):
        state.unlink(missing_ok=True)
        code, written, err = _count(tmp_path, "--horizon", "12", "--state", str(state), "--format", output_format)
        assert code == 0, err
        code, whole, err = run_main("releases", str(state), "--format", output_format)
        assert code == 0, err
        monkeypatch.setattr(releases, "KEYED_ROWS", 2 * len(KEYS))  # two steps a part
        code, parts, err = run_main("releases", str(state), "--format", output_format, "--first-step", "2")
        monkeypatch.undo()
        assert code == 0 and parts.splitlines()[1:] == written.splitlines()[1 + len(KEYS) :], err
        assert whole.splitlines()[1:] == written.splitlines()[1:]


def test_releases_of_event_rows_with_dates_in_jsonl(tmp_path):
    _events(tmp_path, dates=True)
    state = tmp_path / "s.db"
    dates = ["--start", "2026-01-01", "--step-size", "1d", "--through", "2026-01-09", "--horizon", "10"]
    code, written, err = _count(tmp_path, *dates, "--state", str(state), "--format", "jsonl", keyed_rows=False)
    assert code == 0, err
    code, out, err = run_main("releases", str(state), "--format", "jsonl")
    assert code == 0, err
    assert out.splitlines()[1:] == written.splitlines()[1:]  # the rows; the header names the state read back
    first = json.loads(out.splitlines()[1])
    assert list(first) == ["step", "date", "count", "std", "lower", "upper"] and first["date"] == "2026-01-01"
    assert json.loads(out.splitlines()[0])["header"]["read_back_from"] == str(state)
    code, out, err = run_main("releases", str(state))
    assert code == 0 and out.splitlines()[0] == "step,date,count,std,lower,upper" and len(out.splitlines()) == 10, err


def test_the_library_reads_the_released_rows_back(tmp_path):
    rng = np.random.default_rng(2)
    events = [KeyedEvent(key=KEYS[rng.integers(0, 3)], step=step, value=1) for step in range(1, 21) for _ in range(3)]
    counters = KeyedCounters(keys=KEYS, epsilon=1.0, horizon=10, generator=NoiseGenerator.from_seed(6))
    counters.save_state(tmp_path / "s.db")
    counters.extend_horizon()  # past the horizon too
    released = list(run_keyed(counters, iter(events), through=20, beta=0.05))
    counters.close()
    opened = KeyedCounters.open(tmp_path / "s.db")  # every option from the state
    back = opened.releases()
    assert back.keys == KEYS and back.steps.tolist() == list(range(1, 21))
    for column, (step, counts, std, lower, upper) in enumerate(released):
        assert back.steps[column] == step and back.std[column] == std
        assert np.array_equal(back.counts[:, column], counts)
        assert np.array_equal(back.lower[:, column], lower) and np.array_equal(back.upper[:, column], upper)
    wider = opened.releases(first_step=3, last_step=3, beta=0.01)
    assert np.all(wider.upper[:, 0] >= back.upper[:, 2]) and wider.std[0] == back.std[2]
    with pytest.raises(StateFileError, match="read its releases only"):
        opened.release(np.zeros(len(KEYS), dtype=np.int64))
    with pytest.raises(InvalidInputError, match="only steps 1 … 20"):
        opened.releases(last_step=21)
    opened.close()
    with pytest.raises(InvalidInputError, match="another key list"):
        KeyedCounters.open(tmp_path / "s.db", keys=["de", "fr"])


class _EarlierJournal(Journal):
    """A journal as earlier versions made keyed states: the last step's counts only, no key list."""

    @classmethod
    def create(cls, path, *, header, progress, history, registry=None):
        header = {name: value for name, value in header.items() if name not in ("keys", "kept_from")}
        return Journal.create(path, header=header, progress=progress, history=False, registry=registry)


def test_a_state_that_kept_the_last_step_only_says_so(tmp_path, monkeypatch):
    _events(tmp_path)
    state = tmp_path / "old.db"
    monkeypatch.setattr(keyed, "Journal", _EarlierJournal)
    code, written, err = _count(tmp_path, "--horizon", "12", "--state", str(state))
    assert code == 0, err
    monkeypatch.undo()
    one_error_line(*run_main("releases", str(state)), "does not list its keys", "--keys")
    keys = str(tmp_path / "keys.txt")
    one_error_line(
        *run_main("releases", str(state), "--keys", keys), "last released step only", "steps 1 … 11", "--first-step 12"
    )
    code, out, err = run_main("releases", str(state), "--keys", keys, "--first-step", "12")
    assert code == 0 and out.splitlines() == [written.splitlines()[0], *written.splitlines()[-3:]], err


def test_releases_refuses_what_it_cannot_print(tmp_path):
    _events(tmp_path)
    state = tmp_path / "s.db"
    code, _, err = _count(tmp_path, "--horizon", "12", "--through", "4", "--state", str(state))
    assert code == 0, err
    one_error_line(*run_main("releases", str(state), "--format", "plain"), "--format", "csv or jsonl")
    one_error_line(*run_main("releases", str(state), "--last-step", "5"), "only steps 1 … 4")
    one_error_line(*run_main("releases", str(state), "--beta", "1.5"), "--beta")
    late = KeyedCounters(keys=KEYS, epsilon=1.0, horizon=6, generator=NoiseGenerator.from_seed(8))
    late.release(np.ones(len(KEYS), dtype=np.int64))
    late.save_state(tmp_path / "late.db")  # saved after step 1: its counts are not in the state
    late.release(np.ones(len(KEYS), dtype=np.int64))
    late.close()
    one_error_line(*run_main("releases", str(tmp_path / "late.db")), "from step 2 on", "--first-step 2")
    code, out, err = run_main("releases", str(tmp_path / "late.db"), "--first-step", "2")
    assert code == 0 and [line.split(",")[1] for line in out.splitlines()[1:]] == ["2"] * len(KEYS), err
