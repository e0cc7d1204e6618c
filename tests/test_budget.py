"""Named pure-DP budgets (``engines.budget``, ``pure-dp-mf budget``): exact sums, refusals that
record nothing, idempotent charges per lineage, and no two processes both taking the last ε."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from fractions import Fraction

import pytest
from conftest import one_error_line  # noqa: E402
from test_fuzz_inputs import run_cli

from pure_dp_mf.engines import registry as registry_module
from pure_dp_mf.engines.budget import Budget, BudgetError, Spend, charge, charge_counter
from pure_dp_mf.errors import InvalidInputError, PureDPMFError


@pytest.fixture
def registry(tmp_path):
    return tmp_path / "registry.sqlite3"


def test_create_open_and_show(registry):
    created = Budget.create("census", epsilon=1.5, registry=registry)
    assert created.epsilon == Fraction(3, 2) and created.spent == 0 and created.remaining == Fraction(3, 2)
    assert Budget.create("census", epsilon=1.5, registry=registry) == created  # idempotent
    with pytest.raises(BudgetError, match="already exists with ε = 1.5, not 2.0"):
        Budget.create("census", epsilon=2.0, registry=registry)
    with pytest.raises(BudgetError, match="no budget named 'other'"):
        Budget.open("other", registry=registry)
    assert Budget.open("census", registry=registry) == created
    assert issubclass(BudgetError, PureDPMFError) and BudgetError.exit_code == 2


def test_a_charge_that_fits_and_the_one_that_would_exceed(registry):
    budget = Budget.create("b", epsilon=1.0, registry=registry)
    assert charge(budget="b", epsilon=0.75, lineage="one", what="counter one", registry=registry) is True
    with pytest.raises(BudgetError) as refused:
        charge(budget="b", epsilon=0.5, lineage="two", what="counter two", registry=registry)
    message = str(refused.value)
    for needle in ("'b'", "ε = 1.0", "spent 0.75", "0.25 left", "counter two asks ε = 0.5", "refused"):
        assert needle in message, (needle, message)
    assert [(s.lineage, s.epsilon, s.what) for s in budget.spends()] == [("one", Fraction(3, 4), "counter one")]
    assert budget.spent == Fraction(3, 4) and budget.remaining == Fraction(1, 4)
    assert charge(budget="b", epsilon=0.25, lineage="two", what="counter two", registry=registry) is True
    assert budget.remaining == 0 and isinstance(budget.spends()[0], Spend)
    with pytest.raises(BudgetError, match="no budget named 'nope'"):
        charge(budget="nope", epsilon=0.1, lineage="three", what="x", registry=registry)


def test_recharging_a_lineage_is_a_no_op_and_another_epsilon_is_refused(registry):
    budget = Budget.create("b", epsilon=1.0, registry=registry)
    assert charge(budget="b", epsilon=0.6, lineage="L", what="counter", registry=registry) is True
    assert charge(budget="b", epsilon=0.6, lineage="L", what="counter, resumed", registry=registry) is False
    assert budget.spent == Fraction(0.6)
    with pytest.raises(BudgetError, match="already charged ε = 0.6 to budget 'b', not 0.3"):
        charge(budget="b", epsilon=0.3, lineage="L", what="counter", registry=registry)
    assert len(budget.spends()) == 1
    assert charge_counter(budget=None, epsilon=5.0, lineage="M", what="counter", registry=registry) is False
    assert charge_counter(budget="b", epsilon=0.4, lineage="M", what="counter", registry=registry) is True
    assert budget.remaining == 1 - Fraction(0.6) - Fraction(0.4)


def test_amounts_are_the_exact_values_of_the_floats(registry):
    Budget.create("tight", epsilon=0.3, registry=registry)
    charge(budget="tight", epsilon=0.1, lineage="a", what="a", registry=registry)
    # Fraction(0.1) + Fraction(0.2) > Fraction(0.3): the floats' exact values do not fit
    with pytest.raises(BudgetError, match="asks ε = 0.2"):
        charge(budget="tight", epsilon=0.2, lineage="b", what="b", registry=registry)
    roomy = Budget.create("roomy", epsilon=0.1 + 0.2, registry=registry)  # the float 0.30000000000000004
    charge(budget="roomy", epsilon=0.1, lineage="a", what="a", registry=registry)
    charge(budget="roomy", epsilon=0.2, lineage="b", what="b", registry=registry)
    assert roomy.spent == Fraction(0.1) + Fraction(0.2) and roomy.remaining == Fraction(0.1 + 0.2) - roomy.spent > 0
    connection = sqlite3.connect(registry)
    texts = dict(connection.execute("SELECT lineage, epsilon FROM spends WHERE budget = 'roomy'").fetchall())
    connection.close()
    assert Fraction(texts["a"]) == Fraction(0.1) and texts["a"].count("/") == 1


def test_bad_arguments_are_refused(registry):
    for epsilon in (0, -1.0, float("nan"), float("inf"), "x"):
        with pytest.raises(InvalidInputError):
            Budget.create("b", epsilon=epsilon, registry=registry)
    for name in ("", " b", "a\nb", "x" * 201, 3):
        with pytest.raises(InvalidInputError):
            Budget.create(name, epsilon=1.0, registry=registry)
    Budget.create("b", epsilon=1.0, registry=registry)
    with pytest.raises(InvalidInputError, match="lineage"):
        charge(budget="b", epsilon=0.1, lineage="", what="x", registry=registry)


def test_a_charge_joins_the_transaction_of_a_connection_with_the_registry_attached(tmp_path, registry):
    Budget.create("b", epsilon=1.0, registry=registry)
    connection = sqlite3.connect(tmp_path / "state.sqlite3", isolation_level=None)
    connection.execute("ATTACH DATABASE ? AS registry", (str(registry),))
    connection.execute("BEGIN IMMEDIATE")
    assert charge(budget="b", epsilon=0.5, lineage="L", what="x", connection=connection, schema="registry")
    connection.execute("ROLLBACK")  # the caller's transaction decides: nothing recorded
    assert Budget.open("b", registry=registry).spends() == []
    assert charge(budget="b", epsilon=0.5, lineage="L", what="x", connection=connection, schema="registry")  # its own
    connection.close()
    assert Budget.open("b", registry=registry).spent == Fraction(1, 2)
    assert registry_module.registry_path(registry) == Budget.open("b", registry=registry).registry


def _race(registry: str, rounds: int, lineage: str, barrier, results) -> None:
    won = []
    for round_ in range(rounds):
        barrier.wait()
        try:
            charge(budget=f"race{round_}", epsilon=0.5, lineage=lineage, what=lineage, registry=registry)
            won.append(round_)
        except BudgetError:
            pass
    results.put((lineage, won))


def test_two_processes_racing_for_the_last_epsilon_exactly_one_wins(registry):
    rounds = 8
    for round_ in range(rounds):
        Budget.create(f"race{round_}", epsilon=1.0, registry=registry)
        charge(budget=f"race{round_}", epsilon=0.5, lineage="first", what="first", registry=registry)
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    workers = [context.Process(target=_race, args=(str(registry), rounds, name, barrier, results)) for name in ("p", "q")]
    for worker in workers:
        worker.start()
    won = dict(results.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    for round_ in range(rounds):
        assert (round_ in won["p"]) != (round_ in won["q"]), (round_, won)
        budget = Budget.open(f"race{round_}", registry=registry)
        assert budget.spent == 1 and len(budget.spends()) == 2


def test_the_budget_command(registry, monkeypatch):
    monkeypatch.setenv("PURE_DP_MF_REGISTRY", str(registry))
    code, out, err = run_cli("budget", "create", "study", "--epsilon", "2", "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["epsilon"] == 2.0 and record["spent"] == 0.0 and record["remaining"] == 2.0 and record["spends"] == []
    charge(budget="study", epsilon=0.1, lineage="abc", what="counter of steps.txt", registry=registry)
    code, out, err = run_cli("budget", "show", "study", "--json")
    record = json.loads(out)
    assert code == 0 and record["spent_exact"] == "3602879701896397/36028797018963968"
    assert Fraction(record["remaining_exact"]) == 2 - Fraction(0.1) and Fraction(record["remaining"]) <= 2 - Fraction(0.1)
    assert [(s["lineage"], s["epsilon"], s["what"]) for s in record["spends"]] == [("abc", 0.1, "counter of steps.txt")]
    code, out, err = run_cli("budget", "show", "study")
    assert code == 0 and "remaining ε" in out and "counter of steps.txt" in out and "abc" in out
    code, out, err = run_cli("budget", "create", "study", "--epsilon", "2")
    assert code == 0  # the same total again: shown


@pytest.mark.parametrize(
    "arguments, needles",
    [
        (["budget", "create", "b", "--epsilon", "-1"], ["--epsilon", "positive"]),
        (["budget", "create", "b", "--epsilon", "abc"], ["--epsilon"]),
        (["budget", "create", "b", "--epsilon", "nan"], ["--epsilon"]),
        (["budget", "create", "b"], ["--epsilon"]),
        (["budget", "create", " b", "--epsilon", "1"], ["NAME"]),
        (["budget", "show", "missing"], ["no budget named 'missing'"]),
        (["budget", "show", "b", "--bogus"], ["--bogus"]),
    ],
)
def test_the_budget_command_refuses_bad_input_in_one_line(registry, monkeypatch, arguments, needles):
    monkeypatch.setenv("PURE_DP_MF_REGISTRY", str(registry))
    one_error_line(*run_cli(*arguments), *needles)


@pytest.mark.parametrize("epsilon", ["0", "-1", "1e-300", "1e300", "nan", "inf"])
def test_every_bad_epsilon_of_the_budget_command_isone_error_line(registry, monkeypatch, epsilon):
    monkeypatch.setenv("PURE_DP_MF_REGISTRY", str(registry))
    one_error_line(*run_cli("budget", "create", "b", "--epsilon", epsilon), "--epsilon")


def test_the_budget_command_refuses_another_total(registry, monkeypatch):
    monkeypatch.setenv("PURE_DP_MF_REGISTRY", str(registry))
    assert run_cli("budget", "create", "b", "--epsilon", "1")[0] == 0
    one_error_line(*run_cli("budget", "create", "b", "--epsilon", "0.5"), "already exists", "1.0", "0.5")
