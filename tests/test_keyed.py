"""Keyed streams (keyed.py, count --key-column): the privacy rules one test each, the exact
user-level sensitivity against brute force, the vectorised noise against each key's own
release, and the command's output and errors."""

from __future__ import annotations

import csv
import io
import itertools
import json
from fractions import Fraction

import numpy as np
import pytest
from conftest import one_error_line, run_cli

from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.journal import StateFileError
from pure_dp_mf.engines.keyed import (
    ContributionBounder,
    KeyedCounters,
    KeyedEvent,
    PerStepBounder,
    check_keys,
    run_keyed,
    user_sensitivity,
)
from pure_dp_mf.engines.registry import RegistryError
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms.lift import LiftedFamily, explicit_lift, lift_plan
from pure_dp_mf.mechanisms.trees import tree_factorization
from pure_dp_mf.resources import BASE_FOLDER

BASE = BASE_FOLDER / "k004_maxse.npz"


def _lifted_encoder(base, n: int) -> np.ndarray:
    plan = lift_plan(base=base, n=n, metric="maxse")
    pair = explicit_lift(base=base, levels=plan.levels, alphas=list(plan.alphas_exact), n=n)
    encoder = pair[1] if isinstance(pair, tuple) else pair.encoder
    return np.asarray(encoder.toarray() if hasattr(encoder, "toarray") else encoder, dtype=np.float64)


@pytest.mark.parametrize("n", [3, 4, 9, 40, 57])
def test_exact_column_norms_are_the_lifted_encoders(n):
    base = Factorization.load(BASE)
    norms = LiftedFamily(base=base, metric="maxse").column_norms_exact(n=n)
    R = _lifted_encoder(base, n)
    assert [float(v) for v in norms] == pytest.approx(np.abs(R).sum(axis=0).tolist(), rel=1e-12)
    assert max(norms) == lift_plan(base=base, n=n, metric="maxse").sensitivity_exact


def _brute_force_user_change(R: np.ndarray, *, max_per_key: int, max_value: int) -> float:
    """max ‖R·Δx‖₁ over one key's changes: ≤ C steps, each by an integer in [0, m]."""
    n = R.shape[1]
    best = 0.0
    for steps in itertools.combinations(range(n), max_per_key):
        for values in itertools.product(range(max_value + 1), repeat=max_per_key):
            delta = np.zeros(n)
            delta[list(steps)] = values
            best = max(best, float(np.abs(R @ delta).sum()))
    return best


def test_user_sensitivity_against_brute_force():
    n, K, C, m = 6, 2, 2, 2
    for base, tight in ((tree_factorization(mechanism="binary", n=4), True), (Factorization.load(BASE), False)):
        norms = LiftedFamily(base=base, metric="maxse").column_norms_exact(n=n)
        computed = user_sensitivity(norms, max_keys=K, max_per_key=C, max_value=m)
        brute = K * _brute_force_user_change(_lifted_encoder(base, n), max_per_key=C, max_value=m)  # K keys, disjoint blocks
        assert brute <= float(computed) * (1 + 1e-12)
        if tight:  # a non-negative encoder: the bound is attained
            assert brute == pytest.approx(float(computed), rel=1e-12)


def test_bounder_keeps_each_users_first_keys_and_steps_and_depends_on_nothing_else():
    rng = np.random.default_rng(0)
    events = [
        (f"u{rng.integers(4)}", int(rng.integers(6)), int(step), int(rng.integers(0, 4)))
        for step in sorted(rng.integers(1, 20, 300))
    ]
    K, C, m = 2, 3, 3

    def kept(events):
        bounder = ContributionBounder(K, C, m)
        return [(user, key, step, bounder.admit(user, key, step, value)) for user, key, step, value in events]

    result = kept(events)
    for user in {e[0] for e in events}:
        mine = [(key, step, value) for u, key, step, value in result if u == user and value > 0]
        assert len({key for key, _, _ in mine}) <= K
        for key in {key for key, _, _ in mine}:
            steps = {step for k, step, _ in mine if k == key}
            assert len(steps) <= C
            for step in steps:
                assert sum(value for k, s, value in mine if k == key and s == step) <= m
    without = kept([e for e in events if e[0] != "u1"])  # removing a user changes nothing else
    assert without == [r for r in result if r[0] != "u1"]


def _counters(keys, **options) -> KeyedCounters:
    return KeyedCounters(keys=keys, epsilon=1.0, horizon=60, base=BASE, generator=NoiseGenerator.from_seed(3), **options)


def test_every_key_has_its_own_noise_independent_of_the_key_list():
    keys = ["a", "ab", "a\x00b", "b", "", "ba"][0:4] + ["ba"]
    one = _counters(keys)
    noise = np.array([one.release(np.zeros(len(keys), dtype=np.int64)) for _ in range(60)]).T
    assert len({tuple(row) for row in noise}) == len(keys)  # no two keys share a noise stream
    other = _counters(["ba", "zzz", "a"])  # the same key, in another list, in another place
    again = np.array([other.release(np.zeros(3, dtype=np.int64)) for _ in range(60)]).T
    assert again[0].tolist() == noise[keys.index("ba")].tolist() and again[2].tolist() == noise[0].tolist()
    assert len({NoiseGenerator.from_seed(3).child(key).key for key in keys}) == len(keys)


def test_vectorised_noise_is_each_keys_own_release(monkeypatch):
    from pure_dp_mf.release import discrete_laplace

    groups = []
    lockstep = discrete_laplace._lockstep_blocks
    monkeypatch.setattr(discrete_laplace, "_lockstep_blocks", lambda **draw: groups.append(draw) or lockstep(**draw))
    keys = [f"key {i}" for i in range(9)]
    batch = _counters(keys)._noise_of(0, 60)  # every key's pages drawn together, in lockstep (≥ 8 keys)
    assert groups and all(len(group["keys"]) == 9 for group in groups)
    for j, key in enumerate(keys):  # each key alone: its pages drawn by its own sampler
        assert batch[j].tolist() == _counters([key])._noise_of(0, 60)[0].tolist()


def test_unknown_keys_are_never_released_and_change_nothing():
    events = [KeyedEvent("a", 1), KeyedEvent("b", 2, 1), KeyedEvent("a", 4)]
    noisy = [events[0], KeyedEvent("mars", 1), events[1], KeyedEvent("mars", 3), events[2]]
    plain = list(run_keyed(_counters(["a", "b"]), events))
    with_unknown_counters = _counters(["a", "b"])
    with_unknown = list(run_keyed(with_unknown_counters, noisy))
    assert [(s, c.tolist()) for s, c, *_ in plain] == [(s, c.tolist()) for s, c, *_ in with_unknown]
    assert with_unknown_counters.dropped["unknown_key"] == 2


def test_keys_without_events_release_every_step():
    released = list(run_keyed(_counters(["a", "b", "c"]), [KeyedEvent("a", 2), KeyedEvent("a", 5)], through=7))
    assert [step for step, *_ in released] == [1, 2, 3, 4, 5, 6, 7]
    assert all(len(counts) == 3 for _, counts, *_ in released)


def test_bad_events_and_keys_are_refused():
    with pytest.raises(InvalidInputError, match="twice"):
        check_keys(["a", "a"])
    with pytest.raises(InvalidInputError, match="empty"):
        check_keys([])
    beyond = _counters(["a"])
    assert len(list(run_keyed(beyond, [KeyedEvent("a", 61)]))) == 60 and beyond.dropped["unknown_key"] == 1  # unseen
    with pytest.raises(InvalidInputError, match="backwards"):
        list(run_keyed(_counters(["a"]), [KeyedEvent("a", 3), KeyedEvent("a", 2)]))
    with pytest.raises(InvalidInputError, match="outside"):
        list(run_keyed(_counters(["a"]), [KeyedEvent("a", 1, 2)]))
    with pytest.raises(InvalidInputError, match="max-keys"):
        _counters(["a"], privacy_unit="user")


def test_user_level_noise_is_scaled_to_the_exact_sensitivity():
    counters = _counters(["a", "b"], privacy_unit="user", max_keys=2, max_per_key=3, max_value=1)
    norms = LiftedFamily(base=Factorization.load(BASE), metric="maxse").column_norms_exact(n=60)
    assert counters.sensitivity == 2 * sum(sorted(norms, reverse=True)[:3], Fraction(0))
    event = _counters(["a"])
    assert event.sensitivity == lift_plan(base=Factorization.load(BASE), n=60, metric="maxse").sensitivity_exact


def _write(tmp_path, rows, keys=("de", "fr", "it")):
    (tmp_path / "keys.txt").write_text("".join(f"{k}\n" for k in keys))
    (tmp_path / "events.csv").write_text("uid,country,day,value\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))


def _keyed(tmp_path, *extra):
    arguments = ["count", str(tmp_path / "events.csv"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    return run_cli(*arguments, "--step-column", "day", "--epsilon", "1", "--horizon", "30", "--seed", "4", *extra)


def test_count_keyed_csv_and_jsonl(tmp_path):
    _write(tmp_path, [("u1", "de", 1, 2), ("u2", "xx", 1, 1), ("u1", "fr", 3, 1), ("u3", "de", 3, 3)])
    table = _keyed(tmp_path, "--column", "value", "--max-value", "3", "--format", "csv")
    assert table.returncode == 0, table.stderr
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    assert [(r["key"], int(r["step"])) for r in rows] == [(k, s) for s in range(1, 31) for k in ("de", "fr", "it")]
    assert "xx" not in table.stdout and "dropped" not in table.stderr  # nothing about the data, unless asked
    logged = _keyed(tmp_path, "--column", "value", "--max-value", "3", "--operator-log", str(tmp_path / "ops.jsonl"))
    assert json.loads((tmp_path / "ops.jsonl").read_text())["dropped_unlisted_or_outside_schedule"] == 1
    assert logged.stdout == table.stdout
    lines_out = _keyed(tmp_path, "--column", "value", "--max-value", "3", "--format", "jsonl")
    records = [json.loads(line) for line in lines_out.stdout.splitlines()]
    assert records[0]["header"]["max_value"] == 3
    assert [(r["key"], r["step"], r["count"]) for r in records[1:]] == [(r["key"], int(r["step"]), int(r["count"])) for r in rows]
    user = _keyed(tmp_path, "--privacy-unit", "user", "--user-column", "uid", "--max-keys", "1", "--max-per-key", "2")
    assert user.returncode == 0 and '"privacy_unit": "user"' in user.stderr  # what runs is said on stderr


@pytest.mark.parametrize(
    "rows, keys, extra, message",
    [
        ([("u1", "de", 1, 1)], ("de",), ["--column", "amount"], "--column 'amount': no such column"),
        ([("u1", "de", 1, 1)], ("de", "de"), [], "twice"),
        ([("u1", "de", "x", 1)], ("de",), [], "--step-column 'day': not an integer"),
        ([("u1", "de", "1_0", 1)], ("de",), [], "--step-column 'day': not an integer"),
        ([("u1", "de", 3, 1), ("u1", "de", 2, 1)], ("de",), [], "goes backwards"),
        ([("u1", "de", 1, 5)], ("de",), ["--column", "value", "--max-value", "3"], "outside [0, 3]"),
        ([("u1", "de", 1, 1)], ("de",), ["--user-column", "uid"], "--user-column is for --privacy-unit user"),
    ],
)
def test_count_keyed_errors_are_one_line(tmp_path, rows, keys, extra, message):
    _write(tmp_path, rows, keys)
    result = _keyed(tmp_path, *extra)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_releases_are_the_true_running_counts_plus_each_keys_noise():
    rng = np.random.default_rng(7)
    keys = ["a", "b", "c"]
    events = sorted(
        (KeyedEvent(keys[int(rng.integers(3))], int(step), int(rng.integers(0, 3))) for step in rng.integers(2, 40, 80)),
        key=lambda e: e.step,
    )
    counters = KeyedCounters(keys=keys, epsilon=1.0, horizon=60, base=BASE, max_value=2, generator=NoiseGenerator.from_seed(11))
    released = list(run_keyed(counters, events))
    last = events[-1].step
    truth = np.zeros((len(keys), last), dtype=np.int64)
    for event in events:
        truth[keys.index(event.key), event.step - 1 :] += event.value
    noise = counters._noise_of(0, last)
    assert [step for step, *_ in released] == list(range(1, 61))  # the schedule: every step of the horizon
    assert np.array([counts for _, counts, *_ in released[:last]]).T.tolist() == (truth + noise).tolist()


def test_release_steps_from_given_totals_are_the_step_by_step_releases():
    rng = np.random.default_rng(3)
    keys = ["a", "b", "c"]
    increments = rng.integers(0, 3, size=(len(keys), 50))
    one_by_one = KeyedCounters(keys=keys, epsilon=1.0, horizon=60, base=BASE, max_value=2, generator=NoiseGenerator.from_seed(4))
    expected = [one_by_one.release(increments[:, t]) for t in range(50)]
    bars = [one_by_one.intervals(counts, start=t, beta=0.05) for t, counts in enumerate(expected)]
    at_once = KeyedCounters(
        keys=keys, epsilon=1.0, horizon=60, base=BASE, max_value=2, generator=NoiseGenerator.from_seed(4), chunk=7
    )
    first = at_once.release_steps(increments[:, :20], start=0, totals=np.zeros(3, dtype=np.int64))
    second = at_once.release_steps(increments[:, 20:], start=20, totals=increments[:, :20].sum(axis=1))
    counts = np.concatenate([first[0], second[0]], axis=1)
    assert counts.T.tolist() == [row.tolist() for row in expected]
    assert np.concatenate([first[2], second[2]], axis=1).T.tolist() == [lower.tolist() for _, lower, _ in bars]
    assert at_once.released == 0  # the counter's own state is left as it is
    with pytest.raises(InvalidInputError, match="outside"):
        at_once.release_steps(increments, start=20, totals=np.zeros(3, dtype=np.int64))


def test_count_keyed_state_resumes_and_completes_the_output(tmp_path):
    rows = [
        ("u1", "de", 1, 2),
        ("u2", "fr", 2, 1),
        ("u1", "de", 3, 1),
        ("u3", "it", 5, 3),
        ("u2", "de", 6, 1),
        ("u4", "fr", 8, 2),
    ]
    _write(tmp_path, rows)
    whole = _keyed(tmp_path, "--column", "value", "--max-value", "3", "--output", str(tmp_path / "whole.csv"))
    assert whole.returncode == 0, whole.stderr
    expected = (tmp_path / "whole.csv").read_text()
    state = ["--column", "value", "--max-value", "3", "--state", str(tmp_path / "s.db"), "--output", str(tmp_path / "out.csv")]
    _write(tmp_path, rows[:3])  # the first day's run releases steps 1 … 3 (its public schedule)
    assert _keyed(tmp_path, *state, "--through", "3").returncode == 0
    lines = (tmp_path / "out.csv").read_text().splitlines(keepends=True)
    (tmp_path / "out.csv").write_text("".join(lines[:-3]) + "de,3,")  # the rows of step 3 lost, a partial line
    _write(tmp_path, rows)
    resumed = _keyed(tmp_path, *state)
    assert resumed.returncode == 0 and "resuming after step 3" in resumed.stderr, resumed.stderr
    assert (tmp_path / "out.csv").read_text() == expected
    other_keys = _keyed(tmp_path, *state[:-2])  # stdout; same state
    (tmp_path / "keys.txt").write_text("de\nfr\n")
    refused = _keyed(tmp_path, *state)
    assert refused.returncode == 2 and "another keys" in refused.stderr
    assert other_keys.returncode == 0


def test_keyed_state_refuses_stale_copies_and_second_runs(tmp_path):
    counters = _counters(["a", "b"])
    counters.save_state(tmp_path / "s.db")
    with pytest.raises(StateFileError, match="in use"):
        KeyedCounters.resume(tmp_path / "s.db", keys=["a", "b"], epsilon=1.0, horizon=60, base=BASE)
    old = (tmp_path / "s.db").read_bytes()
    counters.release(np.zeros(2, dtype=np.int64))
    counters.close()
    (tmp_path / "s.db").write_bytes(old)  # a backup restored: its steps were released since
    with pytest.raises(RegistryError, match="lineage has released 1"):
        KeyedCounters.resume(tmp_path / "s.db", keys=["a", "b"], epsilon=1.0, horizon=60, base=BASE)
    generator = NoiseGenerator.secure()
    KeyedCounters(keys=["a"], epsilon=1.0, horizon=60, base=BASE, generator=generator)
    with pytest.raises(InvalidInputError, match="already feeds another counter"):
        KeyedCounters(keys=["b"], epsilon=1.0, horizon=60, base=BASE, generator=generator)


def test_count_keyed_parquet_in_and_out_match_csv(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow
    import pyarrow.parquet

    rows = [("u1", "de", 1, 2), ("u2", "fr", 2, 1), ("u1", "de", 3, 1), ("u3", "xx", 3, 1)]
    _write(tmp_path, rows)
    table = pyarrow.table({name: [row[i] for row in rows] for i, name in enumerate(["uid", "country", "day", "value"])})
    pyarrow.parquet.write_table(table, tmp_path / "events.parquet")
    options = ["--column", "value", "--max-value", "2"]
    as_csv = _keyed(tmp_path, *options, "--format", "csv")
    arguments = ["count", str(tmp_path / "events.parquet"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    arguments += ["--step-column", "day", "--epsilon", "1", "--horizon", "30", "--seed", "4", *options]
    as_parquet = run_cli(*arguments, "--format", "parquet", "--output", str(tmp_path / "out.parquet"))
    assert as_csv.returncode == 0 and as_parquet.returncode == 0, as_parquet.stderr
    written = pyarrow.parquet.read_table(tmp_path / "out.parquet")
    assert json.loads(written.schema.metadata[b"pure_dp_mf"])["privacy_unit"] == "event"
    expected = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    got = written.to_pylist()
    assert [(r["key"], r["step"], r["count"], r["lower"], r["upper"]) for r in got] == [
        (r["key"], int(r["step"]), int(r["count"]), int(r["lower"]), int(r["upper"])) for r in expected
    ]
    refused = run_cli(*arguments, "--format", "parquet")
    assert refused.returncode == 2 and "--format parquet needs --output" in refused.stderr


def test_count_keyed_parquet_with_state_writes_each_step_once_across_crashes(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet

    rows = [("u1", "de", 1, 2), ("u2", "fr", 2, 1), ("u1", "de", 3, 1), ("u3", "it", 5, 3), ("u2", "de", 6, 1)]
    _write(tmp_path, rows)
    options = ["--column", "value", "--max-value", "3"]
    whole = _keyed(tmp_path, *options, "--format", "csv")
    assert whole.returncode == 0, whole.stderr
    expected = [
        (r["key"], int(r["step"]), int(r["count"]), int(r["lower"]), int(r["upper"]))
        for r in csv.DictReader(io.StringIO(whole.stdout))
    ]
    folder = tmp_path / "releases"
    state = [*options, "--format", "parquet", "--state", str(tmp_path / "s.db"), "--output", str(folder)]
    _write(tmp_path, rows[:3])  # the first run releases steps 1 … 3 only
    first = _keyed(tmp_path, *state, "--through", "3")
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in folder.iterdir()) == [f"step-{s:08d}.parquet" for s in (1, 2, 3)]
    (folder / "step-00000003.parquet").unlink()  # killed after the state recorded step 3, before its file
    (folder / ".step-00000003.parquet.abc.tmp").write_bytes(b"cut")  # and a write cut short
    _write(tmp_path, rows)
    resumed = _keyed(tmp_path, *state)
    assert resumed.returncode == 0 and "resuming after step 3" in resumed.stderr, resumed.stderr
    assert sorted(p.name for p in folder.iterdir()) == [f"step-{s:08d}.parquet" for s in range(1, 31)]
    table = pyarrow.parquet.read_table(folder)
    got = [(r["key"], r["step"], r["count"], r["lower"], r["upper"]) for r in table.to_pylist()]
    assert sorted(got, key=lambda r: r[1]) == expected
    assert json.loads(table.schema.metadata[b"pure_dp_mf"])["max_value"] == 3
    (folder / "step-00000002.parquet").unlink()  # a file lost that the state says was written
    broken = _keyed(tmp_path, *state)
    assert broken.returncode == 2 and "holds 29 file(s) but the state has released 30" in broken.stderr, broken.stderr
    (tmp_path / "file").write_text("x")
    not_a_folder = _keyed(tmp_path, *state[:-1], str(tmp_path / "file"))
    assert not_a_folder.returncode == 2 and "a folder of one file per step" in not_a_folder.stderr
    plain = _keyed(tmp_path, *options, "--output", str(folder))
    assert plain.returncode == 2 and "is a folder, not a file" in plain.stderr


# ---------------------------------------------------------------------------------------------
# The public schedule: which (key, step) rows are released never depends on the data.


def _rows_released(events, *, keys=("FR", "DE"), **options) -> list[tuple[str, int]]:
    counters = KeyedCounters(keys=keys, epsilon=1.0, horizon=12, base=BASE, generator=NoiseGenerator.from_seed(2), **options)
    return [(key, step) for step, counts, *_ in run_keyed(counters, events) for key in counters.keys]


@pytest.mark.parametrize("unit", ["event", "user"])
def test_one_more_event_of_any_key_at_any_step_never_changes_the_rows_released(unit):
    """FR and DE with events on days 1–3: v0.1 released through the last event's day, so one
    event of the unlisted key ZZ on day 9 turned 6 rows into 18. Now every (key, step) of the
    schedule is released, whatever is added: any key (listed or not), any step (inside the
    schedule, beyond it, out of range)."""
    options = {"privacy_unit": "user", "max_keys": 1, "max_per_key": 2} if unit == "user" else {}
    base = [KeyedEvent("FR", 1, 1, "u1"), KeyedEvent("DE", 2, 1, "u2"), KeyedEvent("FR", 3, 1, "u1")]
    expected = _rows_released(base, **options)
    assert len(expected) == 2 * 12
    for key in ("FR", "DE", "ZZ"):
        for step in (1, 3, 9, 12, 13, 10**6):
            extra = sorted([*base, KeyedEvent(key, step, 1, "u9")], key=lambda e: e.step)
            assert _rows_released(extra, **options) == expected, (key, step)


def test_unsorted_or_invalid_keyed_files_are_refused_before_the_first_release(tmp_path):
    rows = [("u1", "de", 1, 1), ("u2", "fr", 2, 1), ("u1", "de", 5, 1), ("u3", "fr", 3, 1)]  # day 3 after day 5
    _write(tmp_path, rows)
    state = tmp_path / "s.db"
    unsorted = _keyed(tmp_path, "--state", str(state), "--output", str(tmp_path / "out.csv"))
    assert unsorted.returncode == 2 and "goes backwards" in unsorted.stderr and unsorted.stdout == ""
    assert not (tmp_path / "out.csv").exists() or (tmp_path / "out.csv").read_text().count("\n") <= 1
    assert not state.exists()  # refused before anything was created
    _write(tmp_path, [("u1", "de", 1, 1), ("u2", "fr", 2, 7)])
    invalid = _keyed(tmp_path, "--column", "value", "--max-value", "3")
    assert (
        invalid.returncode == 2
        and "a value is outside [0, 3]" in invalid.stderr
        and "7" not in invalid.stderr
        and invalid.stdout == ""
    )
    # the same invalid events of an unlisted key, or beyond the schedule, are never looked at
    _write(tmp_path, [("u1", "de", 1, 1), ("u2", "zz", 2, 7), ("u3", "zz", 1, 1), ("u4", "de", 40, 9)])
    unseen = _keyed(tmp_path, "--column", "value", "--max-value", "3")
    assert unseen.returncode == 0 and unseen.stdout.count("\n") == 1 + 3 * 30


def test_a_keyed_stream_follows_its_invalid_policy(tmp_path):
    _write(tmp_path, [("u1", "de", 1, 1), ("u2", "fr", 2, 7), ("u3", "de", 3, 1)])
    arguments = [
        "count",
        "--key-column",
        "country",
        "--keys",
        str(tmp_path / "keys.txt"),
        "--step-column",
        "day",
        "--column",
        "value",
        "--max-value",
        "3",
        "--epsilon",
        "1",
        "--horizon",
        "5",
        "--seed",
        "4",
    ]
    text = (tmp_path / "events.csv").read_text()
    dropped = run_cli(*arguments, input_text=text)  # standard input: an invalid event is dropped, the run goes on
    assert dropped.returncode == 0 and dropped.stdout.count("\n") == 1 + 3 * 5
    clamped = run_cli(*arguments, "--invalid", "clamp", input_text=text)
    assert clamped.returncode == 0 and clamped.stdout != dropped.stdout
    stopped = run_cli(*arguments, "--invalid", "stop", input_text=text)
    assert stopped.returncode == 2 and "line 3: a value is outside [0, 3]" in stopped.stderr


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_event_without_its_user_is_refused_by_line_or_dropped_by_the_policy(tmp_path, blank):
    """An empty user id (blank once normalised) is no one's: refused with its line number and no
    value, before anything is released; ``--invalid zero`` drops it as it drops other invalid events."""
    rows = [("u1", "de", 1, 1), ("u2", "fr", 2, 1), (blank, "de", 3, 1), ("u3", "de", 4, 1)]
    _write(tmp_path, rows)
    user = ["--privacy-unit", "user", "--user-column", "uid", "--max-keys", "1", "--max-per-key", "2"]
    output = tmp_path / "out.csv"
    refused = _keyed(tmp_path, *user, "--output", str(output))
    one_error_line(refused.returncode, refused.stdout, refused.stderr, "line 4: --user-column 'uid': the user id is empty")
    assert not output.exists() or output.read_text().count("\n") <= 1  # nothing released
    dropped = _keyed(tmp_path, *user, "--invalid", "zero", "--operator-log", str(tmp_path / "ops.jsonl"))
    assert dropped.returncode == 0, dropped.stderr
    assert json.loads((tmp_path / "ops.jsonl").read_text())["invalid_events"] == 1
    _write(tmp_path, [row for row in rows if row[0] != blank])
    assert _keyed(tmp_path, *user).stdout == dropped.stdout  # dropped: as if the row were not there


def test_every_route_through_the_bounds_refuses_an_empty_user():
    """The one check (``keyed.check_user``) sits in ``ContributionBounder.admit``, which every
    route's user bounds call (the CLI, the DataFrame function, Spark): a caller that skips the
    readers' checks is refused too, and the user-step bounder, and the unit "step", still run."""
    for bounder in (ContributionBounder(max_keys=1, max_per_key=1, max_value=1), PerStepBounder(1, 1, 1)):
        for user in ("", " \t", None):
            with pytest.raises(InvalidInputError, match="an event: the user id is empty"):
                bounder.admit(user, 0, 1, 1)  # type: ignore[arg-type]
        assert bounder.admit("u1", 0, 1, 1) == 1
    counters = KeyedCounters(
        keys=["a"], epsilon=1.0, horizon=8, base=BASE, generator=NoiseGenerator.from_seed(1), privacy_unit="user-step"
    )
    with pytest.raises(InvalidInputError, match="the user id is empty"):
        counters.admit(key="a", step=1, value=1, user="")
    whole_step = KeyedCounters(
        keys=["a"], epsilon=1.0, horizon=8, base=BASE, generator=NoiseGenerator.from_seed(2), privacy_unit="step"
    )
    assert whole_step.admit(key="a", step=1, value=1) == (0, 1)
