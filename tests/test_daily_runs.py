"""Daily partitions: one day's file per run against a state, the events of released steps refused
or set aside (``engines.partitions``), the operator log's rows each in one category, and the
DataFrame function resumed from a state and charged to a budget."""

from __future__ import annotations

import csv
import io
import json
import warnings

import pandas as pd
import pytest
from conftest import run_cli

from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.errors import InvalidInputError

KEYS = ("de", "fr", "it")
DAY_1 = [("u1", "de", "2026-03-01", 1), ("u2", "fr", "2026-03-01", 1), ("u3", "de", "2026-03-01", 1)]
DAY_2 = [("u1", "fr", "2026-03-02", 1), ("u4", "it", "2026-03-02", 1)]
DAY_3 = [("u2", "de", "2026-03-03", 1)]


def _file(path, rows):
    path.write_text("uid,country,day,value\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))
    return path


def _run(tmp_path, events, through, *extra):
    (tmp_path / "keys.txt").write_text("".join(f"{key}\n" for key in KEYS))
    arguments = ["count", str(events), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    arguments += ["--step-column", "day", "--start", "2026-03-01", "--horizon", "30", "--through", through]
    arguments += ["--epsilon", "1", "--seed", "7", "--state", str(tmp_path / "s.db"), "--output", str(tmp_path / "out.csv")]
    return run_cli(*arguments, *extra)


def _released(tmp_path):
    return list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text())))


@pytest.fixture
def two_days(tmp_path):
    """Day 1's file, then day 2's, each run against one state: steps 1 and 2 released."""
    for day, rows in (("2026-03-01", DAY_1), ("2026-03-02", DAY_2)):
        run = _run(tmp_path, _file(tmp_path / f"{day}.csv", rows), day)
        assert run.returncode == 0, run.stderr
    return tmp_path


def test_daily_files_release_the_same_as_one_cumulative_file(two_days, tmp_path_factory):
    other = tmp_path_factory.mktemp("cumulative")
    assert _run(other, _file(other / "all.csv", DAY_1 + DAY_2), "2026-03-02").returncode == 0
    assert _released(two_days) == _released(other)
    assert [int(row["step"]) for row in _released(two_days)] == [1, 1, 1, 2, 2, 2]


def test_a_corrected_file_for_a_released_day_is_refused_and_nothing_changes(two_days):
    tmp_path = two_days
    before, state = (tmp_path / "out.csv").read_text(), (tmp_path / "s.db").read_bytes()
    corrected = _file(tmp_path / "day1-corrected.csv", DAY_1 + [("u9", "it", "2026-03-01", 1)])
    for through in ("2026-03-01", "2026-03-02", "2026-03-03"):
        refused = _run(tmp_path, corrected, through)
        assert refused.returncode == 2, refused.stderr
        lines = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "events of step 1, released by an earlier run, differ" in lines[0]
        assert "--released-events set-aside" in lines[0] and "u9" not in refused.stderr and "Traceback" not in refused.stderr
        assert (tmp_path / "out.csv").read_text() == before and (tmp_path / "s.db").read_bytes() == state
    moved = _file(tmp_path / "moved.csv", DAY_1[:2] + [("u3", "de", "2026-03-02", 1)] + DAY_2)  # an event moved a day
    assert "events of step 1, released by an earlier run, differ" in _run(tmp_path, moved, "2026-03-02").stderr


def test_an_earlier_days_file_given_as_todays_is_refused(two_days):
    tmp_path = two_days
    before = (tmp_path / "out.csv").read_text()
    for day in ("2026-03-01", "2026-03-02"):  # each released exactly so; neither is day 3's
        refused = _run(tmp_path, tmp_path / f"{day}.csv", "2026-03-03")
        assert refused.returncode == 2, refused.stderr
        assert "none of the steps 3 … 3 this run releases: an earlier run's input given again?" in refused.stderr
        assert (tmp_path / "out.csv").read_text() == before
    today = _run(tmp_path, _file(tmp_path / "2026-03-03.csv", DAY_3), "2026-03-03")
    assert today.returncode == 0, today.stderr
    assert [int(row["step"]) for row in _released(tmp_path)] == [1] * 3 + [2] * 3 + [3] * 3


def test_a_rerun_of_identical_input_gives_the_same_output(two_days):
    tmp_path = two_days
    before = (tmp_path / "out.csv").read_text()
    again = _run(tmp_path, tmp_path / "2026-03-02.csv", "2026-03-02")  # yesterday's command, as it was
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "out.csv").read_text() == before
    cumulative = _file(tmp_path / "all.csv", list(reversed(DAY_1)) + DAY_2)  # lines of a day in another order
    assert _run(tmp_path, cumulative, "2026-03-02").returncode == 0
    assert (tmp_path / "out.csv").read_text() == before
    quiet = _run(tmp_path, cumulative, "2026-03-03")  # a cumulative file whose new day had no events
    assert quiet.returncode == 0, quiet.stderr
    assert [int(row["step"]) for row in _released(tmp_path)][-3:] == [3, 3, 3]


def test_set_aside_counts_the_events_of_released_steps_exactly(two_days):
    tmp_path = two_days
    log = tmp_path / "ops.jsonl"
    late = [("u7", "it", "2026-03-01", 1), ("u8", "fr", "2026-03-02", 1)]  # late events of released days
    mixed = _file(tmp_path / "mixed.csv", sorted(late + DAY_3, key=lambda row: row[2]))
    aside = _run(tmp_path, mixed, "2026-03-03", "--released-events", "set-aside", "--operator-log", str(log))
    assert aside.returncode == 0, aside.stderr
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["rows"] == 3
    assert record["rows_by_fate"]["released_step_set_aside"] == 2 and record["rows_by_fate"]["counted"] == 1
    assert sum(record["rows_by_fate"].values()) == record["rows"]
    assert "set aside" not in aside.stderr and "u7" not in aside.stderr  # data only in the operator log
    bad = _run(tmp_path, mixed, "2026-03-03", "--released-events", "ignore")
    assert bad.returncode == 2 and "error: --released-events must be one of refuse, set-aside, got 'ignore'" in bad.stderr
    lines = run_cli("count", "--epsilon", "1", "--horizon", "8", "--released-events", "set-aside", input_text="1\n")
    assert lines.returncode == 2 and "error: --released-events is for event rows: give --step-column too" in lines.stderr


def test_same_input_of_a_released_step_is_its_own_category(two_days):
    tmp_path = two_days
    log = tmp_path / "ops.jsonl"
    window = _file(tmp_path / "window.csv", DAY_2 + DAY_3)  # a rolling window: yesterday's events, as released, and today's
    run = _run(tmp_path, window, "2026-03-03", "--operator-log", str(log))
    assert run.returncode == 0, run.stderr
    fates = json.loads(log.read_text())["rows_by_fate"]
    assert fates["released_step_same_input"] == 2 and fates["counted"] == 1 and fates["released_step_set_aside"] == 0


def test_operator_log_categories_add_up_to_the_rows_of_a_messy_input(tmp_path):
    rows = [
        ("u1", "de", "2026-02-27", 1),  # before step 1
        ("u1", "xx", "2026-03-01", 1),  # unknown key
        ("u1", "de", "2026-03-01", 1),  # counted
        ("u1", "fr", "2026-03-01", 1),  # over K = 1 key per user: cut by the bounds
        ("u2", "de", "2026-03-01", 5),  # value outside [0, 1]: dropped (zero)
        ("u2", "de", "2026-03-01", "x"),  # value not an integer: dropped
        ("", "it", "2026-03-01", 1),  # no user: dropped
        ("u3", "de", "not-a-date", 1),  # step does not parse: dropped
        ("u3", "it", "2026-03-02", 1),  # counted
        ("u3", "it", "2026-03-02", 1),  # same user, key and step: clipped to m = 1 (cut)
        ("u4", "fr", "2026-03-01", 1),  # step goes backwards: dropped
        ("u4", "fr", "2026-03-04", 1),  # after --through
    ]
    events = _file(tmp_path / "messy.csv", rows)
    (tmp_path / "short.csv").write_text(events.read_text() + "u5,de\n")  # a short row: dropped
    log = tmp_path / "ops.jsonl"
    extra = ["--invalid", "zero", "--column", "value", "--max-value", "1"]
    extra += ["--privacy-unit", "user-step", "--user-column", "uid", "--max-keys", "1"]
    run = _run(tmp_path, tmp_path / "short.csv", "2026-03-03", *extra, "--operator-log", str(log))
    assert run.returncode == 0, run.stderr
    record = json.loads(log.read_text())
    assert record["rows"] == len(rows) + 1
    assert record["rows_by_fate"] == {
        "counted": 2,
        "unknown_key": 1,
        "before_step_1": 1,
        "after_through": 1,
        "invalid_dropped": 5,
        "empty_user_dropped": 1,
        "released_step_same_input": 0,
        "released_step_set_aside": 0,
        "cut_by_contribution_bounds": 2,
    }
    assert sum(record["rows_by_fate"].values()) == record["rows"]
    assert record["dropped_unlisted_or_outside_schedule"] == 3 and record["over_contribution_bounds"] == 2
    counts = {(row["key"], int(row["step"])): row for row in _released(tmp_path)}
    assert len(counts) == 9
    clamp_log = tmp_path / "clamp.jsonl"
    (tmp_path / "out.csv").unlink()
    (tmp_path / "s.db").unlink()
    clamped = _run(tmp_path, events, "2026-03-03", *extra[2:], "--invalid", "clamp", "--operator-log", str(clamp_log))
    assert clamped.returncode == 0, clamped.stderr
    record = json.loads(clamp_log.read_text())
    assert record["values_clamped"] == 1 and sum(record["rows_by_fate"].values()) == record["rows"] == len(rows)
    assert record["rows_by_fate"]["counted"] == 3  # the clamped event is counted, at 1


def test_a_state_without_recorded_inputs_takes_partitions_and_refuses_released_steps(tmp_path):
    import sqlite3

    assert _run(tmp_path, _file(tmp_path / "day1.csv", DAY_1), "2026-03-01").returncode == 0
    with sqlite3.connect(tmp_path / "s.db") as connection:  # as a state written before the digests were recorded
        connection.execute("DROP TABLE step_inputs")
    cumulative = _run(tmp_path, _file(tmp_path / "all.csv", DAY_1 + DAY_2), "2026-03-02")
    assert (
        cumulative.returncode == 2 and "differ from those it was released from (its input was not recorded)" in cumulative.stderr
    )
    assert _run(tmp_path, _file(tmp_path / "day2.csv", DAY_2), "2026-03-02").returncode == 0


def test_the_step_input_digest_is_of_the_multiset_of_events():
    from pure_dp_mf.engines.partitions import input_mac_key, step_input_digest

    mac_key = input_mac_key(bytes(32))
    events = {("de", 1, "u1"): 2, ("fr", 3, "u2"): 1}
    same = step_input_digest(mac_key, step=4, events=dict(reversed(events.items())))
    assert step_input_digest(mac_key, step=4, events=events) == same  # the order of the lines does not matter
    changed = [
        {("de", 1, "u1"): 1, ("fr", 3, "u2"): 1},  # one event fewer
        {("de", 1, "u1"): 2, ("fr", 2, "u2"): 1},  # a value changed
        {("de", 1, "u1"): 2, ("fr", 3, "u3"): 1},  # a user changed
        {("de", 1, None): 2, ("fr", 3, None): 1},  # no users
    ]
    assert all(step_input_digest(mac_key, step=4, events=other) != same for other in changed)
    assert step_input_digest(mac_key, step=5, events=events) != same  # another step
    assert step_input_digest(input_mac_key(bytes(31) + b"\x01"), step=4, events=events) != same  # another key


# ---------------------------------------------------------------- the DataFrame function


def _frame(rows):
    return pd.DataFrame(rows, columns=["uid", "country", "day", "value"])


def _counts(frame, **options):
    from pure_dp_mf.engines.dataframe import private_running_counts

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="seeded noise", category=UserWarning)
        return private_running_counts(
            frame,
            keys=list(KEYS),
            epsilon=1.0,
            horizon=30,
            key_column="country",
            step_column="day",
            start="2026-03-01",
            generator=NoiseGenerator.from_seed(11),
            **options,
        )


def test_dataframe_with_a_state_two_days_equal_one_call_over_both(tmp_path):
    both = _counts(_frame(DAY_1 + DAY_2), through="2026-03-02", state=tmp_path / "both.db")
    first = _counts(_frame(DAY_1), through="2026-03-01", state=tmp_path / "daily.db")
    second = _counts(_frame(DAY_2), through="2026-03-02", state=tmp_path / "daily.db")
    assert list(first["step"]) == [1, 1, 1] and list(second["step"]) == [2, 2, 2]
    pd.testing.assert_frame_equal(pd.concat([first, second], ignore_index=True), both)
    again = _counts(_frame(DAY_2), through="2026-03-02", state=tmp_path / "daily.db")  # a re-run releases nothing new
    assert again.empty and list(again.columns) == list(both.columns)
    with pytest.raises(InvalidInputError, match=r"state .*events of step 1, released by an earlier run, differ"):
        _counts(_frame(DAY_1[:1]), through="2026-03-03", state=tmp_path / "daily.db")
    with pytest.raises(InvalidInputError, match="an earlier run's input given again"):
        _counts(_frame(DAY_2), through="2026-03-03", state=tmp_path / "daily.db")
    aside = _counts(_frame(DAY_1[:1] + DAY_3), through="2026-03-03", state=tmp_path / "daily.db", released_events="set-aside")
    assert list(aside["step"]) == [3, 3, 3]
    from pure_dp_mf.engines.dataframe import private_running_counts

    with pytest.raises(InvalidInputError, match="--released-events must be one of refuse, set-aside, got 'skip'"):
        private_running_counts(
            _frame(DAY_3),
            keys=list(KEYS),
            epsilon=1.0,
            horizon=30,
            key_column="country",
            step_column="day",
            released_events="skip",
        )


def test_dataframe_budget_is_charged_once_across_days(tmp_path):
    from fractions import Fraction

    from pure_dp_mf.engines.budget import Budget, BudgetError

    budget = Budget.create(f"daily-{tmp_path.name}", epsilon=1.5)
    _counts(_frame(DAY_1), through="2026-03-01", state=tmp_path / "s.db", budget=budget.name)
    _counts(_frame(DAY_2), through="2026-03-02", state=tmp_path / "s.db", budget=budget.name)
    assert budget.spent == Fraction(1) and len(budget.spends()) == 1
    with pytest.raises(BudgetError):  # a second publication does not fit
        _counts(_frame(DAY_1), through="2026-03-01", state=tmp_path / "other.db", budget=budget.name)
    assert budget.spent == Fraction(1)
