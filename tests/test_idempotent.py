"""Idempotent releases of a single counter with a state (``Counter.release``/``update``/``extend``
with a step), what a crashed job recovers (``Counter.open(...).releases()``, ``pure-dp-mf
releases``, ``count --first-step``), resuming that says so, and named budgets charged by counters
(``budget=``, ``count --budget``)."""

from __future__ import annotations

import gc
import json
import logging
import sqlite3
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import SAFETY_LIMIT, run_main  # noqa: E402

from pure_dp_mf.engines.budget import Budget, BudgetError
from pure_dp_mf.engines.counter import Counter, Release
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.errors import InvalidInputError, PureDPMFError

ROOT = Path(__file__).resolve().parents[1]
HORIZON, M = 32, 3
VALUES = [1, 0, 2, 3, 1, 0, 0, 2, 3, 1, 1, 0, 2, 2, 3, 0, 1, 1, 0, 2]
pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")


cli = run_main


def cli_process(*arguments: str, stdin: str = "") -> tuple[int, str, str]:
    """The same in a process of its own: a run with --state holds the state's lock until its process ends."""
    done = subprocess.run(
        [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=SAFETY_LIMIT,
        cwd=ROOT,
    )
    return done.returncode, done.stdout, done.stderr


def one_error_line(result: tuple[int, str, str], *needles: str) -> str:
    code, out, err = result
    lines = [line for line in err.splitlines() if line.startswith("error")]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert err.rstrip().splitlines()[-1] == lines[0], err  # the error is the last word
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def counter(seed: int = 7, **options) -> Counter:
    return Counter(epsilon=1.0, horizon=HORIZON, max_value=M, generator=NoiseGenerator.from_seed(seed), **options)


def straight(values, seed: int = 7) -> list[Release]:
    """The releases of a counter without a state, every value once: what a re-submission must give back."""
    return counter(seed).update_many(values)


def journal_of(path: Path) -> tuple:
    """The state's progress record and release log, read from the SQLite file (the counter closed)."""
    connection = sqlite3.connect(path)
    try:
        progress = connection.execute("SELECT released, record FROM progress").fetchall()
        blocks = connection.execute("SELECT first, last, rows FROM blocks ORDER BY first").fetchall()
    finally:
        connection.close()
    return progress, blocks


# ---------------------------------------------------------------------- re-submitted steps


def test_a_released_step_given_again_returns_its_stored_release_and_changes_nothing(tmp_path):
    again, twin = counter(state=tmp_path / "again.db"), counter(state=tmp_path / "twin.db")
    first = [again.update(v) for v in VALUES[:6]]
    assert first == [twin.update(v) for v in VALUES[:6]] == straight(VALUES[:6])
    for step in range(1, 7):
        for _ in range(2):
            assert again.update(VALUES[step - 1], step=step) == first[step - 1]
        assert again.released == 6
    assert again.update_many(VALUES[:6], first_step=1) == first
    assert again.update_many(VALUES[2:5], first_step=3) == first[2:5]
    assert again.release(VALUES[3:6], first_step=4).counts.tolist() == [r.count for r in first[3:]]
    assert again.released == 6
    assert again.update(VALUES[6]) == twin.update(VALUES[6]) == straight(VALUES[:7])[6]  # the next step as if never repeated
    assert again.update(VALUES[7], step=8) == twin.update(VALUES[7])  # the next step may be named
    mine, theirs = again.releases(), twin.releases()
    for name in ("steps", "counts", "std", "lower", "upper"):
        assert getattr(mine, name).tolist() == getattr(theirs, name).tolist(), name
    again.close(), twin.close()
    assert journal_of(tmp_path / "again.db") == journal_of(tmp_path / "twin.db")
    assert journal_of(tmp_path / "again.db")[0][0][0] == 8


def test_a_released_step_with_another_input_is_refused_naming_the_step(tmp_path):
    again = counter(state=tmp_path / "s.db")
    first = again.update_many(VALUES[:5])
    with pytest.raises(InvalidInputError, match=r"step 3 was released from another input") as refused:
        again.update(1, step=3)
    assert "never drawn again" in str(refused.value) and "make a new publication" in str(refused.value)
    assert not any(ch.isdigit() for ch in str(refused.value).replace("step 3", ""))  # neither input is shown
    with pytest.raises(InvalidInputError, match=r"step 4 was released from another input"):
        again.update_many([VALUES[2], 0, VALUES[4], 1, 1], first_step=3)  # refused whole: nothing new released
    assert again.released == 5
    with pytest.raises(InvalidInputError, match="step 7 is ahead of the next step 6"):
        again.update(1, step=7)
    with pytest.raises(InvalidInputError, match="step 9 is ahead of the next step 6"):
        again.update_many([1, 1], first_step=9)
    for bad in (0, -1):
        with pytest.raises(InvalidInputError):
            again.update(1, step=bad)
    with pytest.raises(InvalidInputError):
        again.update(M + 1, step=2)  # not a valid input at all
    assert again.released == 5
    assert again.update_many(VALUES[5:8]) == straight(VALUES[:8])[5:]  # nothing above drew noise
    assert again.releases().counts.tolist() == [r.count for r in first] + [r.count for r in straight(VALUES[:8])[5:]]


def test_a_counter_without_a_state_refuses_a_released_step():
    plain = counter()
    plain.update_many(VALUES[:4])
    with pytest.raises(InvalidInputError, match="step 2 was released; a counter without a state keeps no release log"):
        plain.update(VALUES[1], step=2)
    with pytest.raises(InvalidInputError, match="keeps no release log"):
        plain.update_many(VALUES[2:6], first_step=3)
    assert plain.released == 4
    assert plain.update(VALUES[4], step=5) == straight(VALUES[:5])[4]  # the next step is fine


def test_a_batch_straddling_released_and_new_steps_is_the_straight_run(tmp_path):
    whole = straight(VALUES)
    again = counter(state=tmp_path / "s.db")
    assert again.update_many(VALUES[:6]) == whole[:6]
    both = again.update_many(VALUES[3:12], first_step=4)
    assert [r.step for r in both] == list(range(4, 13)) and both == whole[3:12]
    assert again.released == 12
    both = again.update_many(VALUES[:], first_step=1)  # everything again, then the rest
    assert both == whole and again.released == len(VALUES)
    columns = again.releases(first_step=5, last_step=9)
    assert columns.steps.tolist() == [5, 6, 7, 8, 9] and columns.counts.tolist() == [r.count for r in whole[4:9]]
    assert columns.lower.tolist() == [r.lower for r in whole[4:9]] and columns.upper.tolist() == [r.upper for r in whole[4:9]]
    assert np.allclose(columns.std, [r.std for r in whole[4:9]], rtol=0, atol=0)
    with pytest.raises(InvalidInputError, match="only steps 1"):
        again.releases(first_step=3, last_step=len(VALUES) + 1)


def test_monotone_and_multi_dimensional_counters_return_stored_releases(tmp_path):
    values = [2, 0, 1, 3, 3, 1, 0, 0, 2, 1]
    fitted = counter(state=tmp_path / "m.db", monotone=True)
    first = fitted.update_many(values)
    assert [fitted.update(v, step=t) for t, v in enumerate(values, start=1)] == first
    assert first == counter(monotone=True).update_many(values)  # the stored fit is the straight run's
    assert all(a.count <= b.count for a, b in zip(first, first[1:]))
    wide = counter(state=tmp_path / "d.db", dimension=2)
    rows = [[1, 0], [0, 2], [0, 0], [3, 0]]
    done = wide.release(rows[:3])
    again = wide.release(rows[1:], first_step=2)
    assert again.steps.tolist() == [2, 3, 4] and again.counts[:2].tolist() == done.counts[1:].tolist()
    assert again.std is None and again.counts.tolist() == counter(dimension=2).release(rows).counts[1:].tolist()
    with pytest.raises(InvalidInputError, match=r"step 2 was released from another input"):
        wide.release([[2, 0]], first_step=2)
    assert wide.released == 4


def test_an_empty_range_of_releases_is_empty_not_a_crash(tmp_path):
    fresh = counter(state=tmp_path / "s.db")
    try:
        assert fresh.releases().steps.tolist() == []  # nothing released yet: a job that crashed before its first step
        fresh.update_many([1, 1, 1])
        assert fresh.releases(first_step=4).steps.tolist() == []
        assert fresh.release([], first_step=2).steps.tolist() == []
    finally:
        fresh.close()


def test_the_releases_command_on_a_state_without_releases(tmp_path):
    counter(state=tmp_path / "s.db").close()
    code, out, err = cli("releases", str(tmp_path / "s.db"))
    assert code == 0 and out.splitlines() == ["step,count,std,lower,upper"], err


# ------------------------------------------------------------------------------ a crash

CRASH = textwrap.dedent(
    """
    import os, signal, sys
    from pure_dp_mf import Counter
    from pure_dp_mf.engines.generator import NoiseGenerator
    values = [int(v) for v in sys.argv[3].split(",")]
    counter = Counter(epsilon=1.0, horizon={horizon}, max_value={m}, state=sys.argv[1], generator=NoiseGenerator.from_seed(7))
    counter.update_many(values[:5])          # day 1
    released = counter.update_many(values[5:])  # day 2: released, then the job dies before it prints
    if sys.argv[2] == "exit":
        os._exit(0)
    os.kill(os.getpid(), signal.SIGKILL)
    print(released)
    """
).format(horizon=HORIZON, m=M)


def crash(state: Path, values: list[int], how: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CRASH, str(state), how, ",".join(map(str, values))],
        capture_output=True,
        text=True,
        timeout=SAFETY_LIMIT,
        cwd=ROOT,
    )
    assert done.stdout == "", done.stdout  # nothing was printed
    assert done.returncode == (0 if how == "exit" else -9), done.stderr


def rows_of(text: str) -> list[tuple[int, int, float, int, int]]:
    rows = []
    for line in text.splitlines():
        if line and line[0].isdigit():
            step, count, std, lower, upper = line.split(",")
            rows.append((int(step), int(count), float(std), int(lower), int(upper)))
    return rows


def as_rows(releases: list[Release]) -> list[tuple[int, int, float, int, int]]:
    return [(r.step, r.count, float(f"{r.std:.6g}"), r.lower, r.upper) for r in releases]


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_releases_of_a_crashed_job_are_recovered_and_never_redrawn(tmp_path, how):
    state, day = tmp_path / "s.db", VALUES[:9]
    crash(state, day, how)
    whole = straight(VALUES)
    opened = Counter.open(state)
    kept = opened.releases()
    assert opened.resumed and opened.released == 9
    assert kept.steps.tolist() == list(range(1, 10)) and kept.counts.tolist() == [r.count for r in whole[:9]]
    assert kept.lower.tolist() == [r.lower for r in whole[:9]] and kept.upper.tolist() == [r.upper for r in whole[:9]]
    opened.close()
    code, out, err = cli("releases", str(state))
    assert code == 0, err
    assert out.splitlines()[0] == "step,count,std,lower,upper" and rows_of(out) == as_rows(whole[:9])
    code, out, err = cli("releases", str(state), "--format", "jsonl", "--first-step", "6")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and records[0]["header"]["horizon"] == HORIZON and records[0]["header"]["max_value"] == M
    assert [tuple(r[k] for k in ("step", "count", "std", "lower", "upper")) for r in records[1:]] == as_rows(whole[5:9])
    # day 2 run again by the job's command: its stored rows, nothing new
    command = ["count", "--epsilon", "1", "--horizon", str(HORIZON), "--max-value", str(M), "--state", str(state)]
    command += ["--format", "csv", "--first-step", "6"]
    code, out, err = cli_process(*command, stdin="".join(f"{v}\n" for v in day[5:]))
    assert code == 0, err
    assert rows_of(out) == as_rows(whole[5:9]) and "resuming after step 9" in err
    with Counter.open(state) as reopened:
        assert reopened.released == 9
    one_error_line(cli_process(*command, stdin="".join(f"{v}\n" for v in [day[5], day[6] + 1, day[7]])), "step 7", "released")
    with Counter.open(state) as reopened:
        assert reopened.released == 9
    code, out, err = cli_process(*command, stdin="".join(f"{v}\n" for v in VALUES[5:14]))  # day 2 again, then day 3
    assert code == 0 and rows_of(out) == as_rows(whole[5:14]), err
    with Counter.open(state) as reopened:
        assert reopened.released == 14 and reopened.releases().counts.tolist() == [r.count for r in whole[:14]]
    one_error_line(cli_process(*command[:-2], "--first-step", "16", stdin="1\n"), "--first-step 16", "15")


def test_a_file_run_again_with_a_changed_released_line_is_refused(tmp_path):
    source, state, output = tmp_path / "in.txt", tmp_path / "s.db", tmp_path / "out.csv"
    command = ["count", str(source), "--epsilon", "1", "--horizon", str(HORIZON), "--max-value", str(M), "--seed", "7"]
    command += ["--state", str(state), "--output", str(output), "--format", "csv"]
    source.write_text("".join(f"{v}\n" for v in VALUES[:6]))
    assert cli_process(*command)[0] == 0
    written = output.read_text()
    changed = list(VALUES[:12])
    changed[3] = (changed[3] + 1) % (M + 1)
    source.write_text("".join(f"{v}\n" for v in changed))
    one_error_line(cli_process(*command), "step 4")
    assert output.read_text() == written
    with Counter.open(state) as reopened:
        assert reopened.released == 6
    source.write_text("".join(f"{v}\n" for v in VALUES[:12]))
    code, out, err = cli_process(*command)
    assert code == 0 and "resuming after step 6" in err, err
    assert rows_of(output.read_text()) == as_rows(straight(VALUES[:12]))
    assert output.read_text().count("step,count") == 1
    code, out, err = cli_process(*command)  # the same file once more: nothing to do
    assert code == 0 and rows_of(output.read_text()) == as_rows(straight(VALUES[:12])), err


# ------------------------------------------------------------------------------ resuming


def test_resuming_says_so_and_refuses_another_choice(tmp_path, caplog):
    state = tmp_path / "s.db"
    first = counter(state=state)
    assert first.resumed is False
    first.update_many(VALUES[:4])
    first.close()
    caplog.set_level(logging.INFO, logger="pure_dp_mf")
    again = Counter(epsilon=1.0, horizon=HORIZON, max_value=M, state=state)
    assert again.resumed is True and again.released == 4
    messages = [r.getMessage() for r in caplog.records if r.name == "pure_dp_mf"]
    assert any("resuming" in m and str(state) in m and "after step 4" in m for m in messages), messages
    assert again.update(VALUES[4]) == straight(VALUES[:5])[4]
    again.close()
    for option, needle in [({"mechanism": "binary"}, "not mechanism 'binary'"), ({"metric": "meanse"}, "not 'meanse'")]:
        with pytest.raises(InvalidInputError, match=needle):
            Counter(epsilon=1.0, horizon=HORIZON, max_value=M, state=state, **option)
        gc.collect()  # a refused resume holds the state's lock until collected (test_a_refused_resume_lets_go_of_the_state)
    with pytest.raises(PureDPMFError, match="epsilon 1.0, not 0.5"):
        Counter(epsilon=0.5, horizon=HORIZON, max_value=M, state=state)
    with Counter(epsilon=1.0, horizon=HORIZON, max_value=M, state=state) as still:  # the refusals left it usable
        assert still.released == 5
    command = ["count", "--epsilon", "1", "--horizon", str(HORIZON), "--max-value", str(M), "--state", str(state)]
    code, out, err = cli_process(*command, stdin="1\n")
    assert code == 0 and f"resuming after step 5 of {HORIZON}" in err, err
    one_error_line(cli_process(*command, "--metric", "meanse", stdin="1\n"), "metric")
    one_error_line(cli_process(*command, "--mechanism", "binary", stdin="1\n"), "binary")


@pytest.mark.parametrize("option", [{"mechanism": "binary"}, {"metric": "meanse"}])
def test_a_refused_resume_lets_go_of_the_state(tmp_path, option):
    state = tmp_path / "s.db"
    counter(state=state).close()
    try:
        Counter(epsilon=1.0, horizon=HORIZON, max_value=M, state=state, **option)
    except InvalidInputError as error:
        refused = error  # kept, as a caller that reports it later would
    assert "not" in str(refused)
    with Counter(epsilon=1.0, horizon=HORIZON, max_value=M, state=state) as right:  # the right options, same process
        assert right.released == 0


# ------------------------------------------------------------------------------ budgets


@pytest.fixture
def registry(tmp_path, monkeypatch):
    path = tmp_path / "registry.sqlite3"
    monkeypatch.setenv("PURE_DP_MF_REGISTRY", str(path))
    return path


def test_counters_charge_their_budget_once_and_the_one_past_it_releases_nothing(tmp_path, registry):
    budget = Budget.create("b", epsilon=1.0, registry=registry)
    one = Counter(epsilon=0.5, horizon=16, state=tmp_path / "one.db", generator=NoiseGenerator.from_seed(1), budget="b")
    two = Counter(epsilon=0.5, horizon=16, generator=NoiseGenerator.from_seed(2), budget="b")  # no state: charged too
    assert budget.spent == 0  # checked when made, charged with the first released step
    released = one.update_many([1, 0, 1])
    two.update_many([1])
    assert budget.spent == 1 and budget.remaining == 0 and len(budget.spends()) == 2
    assert {spend.epsilon for spend in budget.spends()} == {Fraction(1, 2)}
    assert all("single counter" in spend.what for spend in budget.spends())
    assert any(str(tmp_path / "one.db") in spend.what for spend in budget.spends())
    with pytest.raises(BudgetError, match=r"budget 'b' .* refused, nothing released"):
        Counter(epsilon=0.5, horizon=16, state=tmp_path / "three.db", generator=NoiseGenerator.from_seed(3), budget="b")
    assert not (tmp_path / "three.db").exists()  # refused before its state was made
    with pytest.raises(BudgetError, match="asks ε = 1e-06"):
        Counter(epsilon=1e-6, horizon=16, budget="b")
    with pytest.raises(BudgetError, match="no budget named 'nope'"):
        Counter(epsilon=0.5, horizon=16, budget="nope")
    assert len(budget.spends()) == 2
    one.close()
    resumed = Counter(epsilon=0.5, horizon=16, state=tmp_path / "one.db", budget="b")  # its lineage charged already
    assert resumed.resumed and budget.spent == 1 and len(budget.spends()) == 2
    assert resumed.releases().counts.tolist() == [r.count for r in released]
    assert resumed.update(1).step == 4
    resumed.close()
    Budget.create("other", epsilon=0.25, registry=registry)
    with pytest.raises(BudgetError, match="'other'"):
        Counter(epsilon=0.5, horizon=16, state=tmp_path / "one.db", budget="other")  # a resumed run charges a new budget
    gc.collect()
    with Counter.open(tmp_path / "one.db") as reopened:
        assert reopened.released == 4  # the refused resume released nothing
    assert Budget.open("other", registry=registry).spent == 0


def test_count_with_a_budget_is_charged_and_refused_past_it(tmp_path, registry):
    budget = Budget.create("study", epsilon=1.0, registry=registry)
    command = ["count", "--epsilon", "0.6", "--horizon", "16", "--seed", "1", "--format", "csv", "--budget", "study"]
    code, out, err = cli(*command, stdin="1\n0\n")
    assert code == 0 and len(out.splitlines()) == 3, err
    assert budget.spent == Fraction(0.6)
    refused = one_error_line(cli(*command, stdin="1\n0\n"), "'study'", "refused")
    assert "0.6" in refused and budget.spent == Fraction(0.6)
    code, out, err = cli(*command, stdin="1\n0\n")
    assert (code, out) == (2, "")  # nothing released, not even the header
    state = ["--state", str(tmp_path / "s.db")]
    small = ["count", "--epsilon", "0.4", "--horizon", "16", "--budget", "study", *state]
    code, out, err = cli_process(*small, stdin="1\n")
    assert code == 0, err
    assert budget.remaining == 1 - Fraction(0.6) - Fraction(0.4)
    code, out, err = cli_process(*small, stdin="0\n")  # resumed: its lineage is charged already
    assert code == 0 and "resuming after step 1" in err and len(budget.spends()) == 2, err
    one_error_line(cli(*command[:-1], "missing", stdin="1\n"), "no budget named 'missing'")


def test_keyed_and_event_row_counts_charge_the_budget(tmp_path, registry):
    budget = Budget.create("keyed", epsilon=1.0, registry=registry)
    (tmp_path / "keys.txt").write_text("de\nfr\n")
    (tmp_path / "events.csv").write_text("day,country\n1,de\n2,fr\n2,de\n4,xx\n")
    keyed = ["count", str(tmp_path / "events.csv"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    keyed += ["--step-column", "day", "--epsilon", "0.5", "--horizon", "8", "--seed", "3", "--budget", "keyed"]
    code, out, err = cli(*keyed)
    assert code == 0 and len(out.splitlines()) == 1 + 2 * 8, err
    (spend,) = budget.spends()
    assert spend.epsilon == Fraction(1, 2) and "keyed counts of 2 key(s)" in spend.what and "one event" in spend.what
    rows = ["count", str(tmp_path / "events.csv"), "--step-column", "day", "--epsilon", "0.5", "--horizon", "8"]
    code, out, err = cli(*rows, "--seed", "3", "--budget", "keyed")
    assert code == 0 and len(out.splitlines()) == 1 + 8, err
    assert budget.remaining == 0 and len(budget.spends()) == 2
    assert (
        "keyed counts of 1 key(s)" in budget.spends()[1].what and "one event" in budget.spends()[1].what
    )  # the default unit of event rows
    one_error_line(cli(*keyed), "'keyed'", "refused")
    one_error_line(cli(*rows, "--budget", "keyed"), "'keyed'", "refused")
    assert len(budget.spends()) == 2
    Budget.create("resumed", epsilon=0.5, registry=registry)
    state = ["--state", str(tmp_path / "keyed.db"), "--budget", "resumed", "--through", "2"]
    code, out, err = cli_process(*keyed[:-1], "resumed", *state)
    assert code == 0 and [line.split(",")[:2] for line in out.splitlines()[1:]] == [["de", "1"], ["fr", "1"]] + [
        ["de", "2"],
        ["fr", "2"],
    ], err
    code, out, err = cli_process(*keyed[:-1], "resumed", *state[:-1], "4")  # resumed: not charged again
    assert code == 0 and "resuming after step 2" in err and len(out.splitlines()) == 2 * 2, (out, err)
    assert len(Budget.open("resumed", registry=registry).spends()) == 1
