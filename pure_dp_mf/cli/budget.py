"""``pure-dp-mf budget create NAME --epsilon E`` and ``budget show NAME``: named pure-DP budgets
(``engines.budget``) in the lineage registry (``$PURE_DP_MF_REGISTRY``).

Thin: parses, calls ``engines.budget``, prints."""

from __future__ import annotations

import datetime
from fractions import Fraction

import typer

from pure_dp_mf.cli.app import app, console, print_json, print_table
from pure_dp_mf.engines.budget import Budget, check_name, epsilon_text, exact_epsilon, float_below, show_epsilon
from pure_dp_mf.engines.registry import registry_path
from pure_dp_mf.errors import InvalidInputError

budget_app = typer.Typer(
    name="budget",
    help="Named pure-DP budgets: a total ε that counters draw on, checked exactly (docs/privacy.md, Budgets).",
    no_args_is_help=True,
)
app.add_typer(budget_app, name="budget")

_NAME = typer.Argument(..., help="the budget's name (1 to 200 printable characters)")
_EPSILON = typer.Option(..., "--epsilon", help="the budget's total ε (its exact binary value; it never changes)")
_JSON = typer.Option(False, "--json", help="print JSON instead of a table")


def _record(budget: Budget) -> dict:
    """The budget as printed: amounts as floats (spent nearest, remaining rounded down) and exact "p/q"."""
    spends = budget.spends()
    spent = sum((spend.epsilon for spend in spends), Fraction(0))
    return {
        "name": budget.name,
        "registry": str(budget.registry),
        "epsilon": float(budget.total),
        "epsilon_exact": epsilon_text(budget.total),
        "spent": float(spent),
        "spent_exact": epsilon_text(spent),
        "remaining": float_below(budget.total - spent),
        "remaining_exact": epsilon_text(budget.total - spent),
        "spends": [
            {
                "lineage": s.lineage,
                "epsilon": float(s.epsilon),
                "epsilon_exact": epsilon_text(s.epsilon),
                "what": s.what,
                "created": s.created,
            }
            for s in spends
        ],
    }


def _print(budget: Budget, as_json: bool) -> None:
    record = _record(budget)
    if as_json:
        print_json(record)
        return
    total = budget.total
    spent = Fraction(record["spent_exact"])
    print_table(
        f"budget {budget.name}",
        ["quantity", "value"],
        [
            ("total ε", show_epsilon(total)),
            ("spent ε", show_epsilon(spent)),
            ("remaining ε", show_epsilon(total - spent)),
            ("registry", budget.registry),
        ],
    )
    if record["spends"]:
        print_table(
            "spends (one per counter lineage)",
            ["lineage", "ε", "what", "charged"],
            [
                (s["lineage"], show_epsilon(Fraction(s["epsilon_exact"])), s["what"], _when(s["created"]))
                for s in record["spends"]
            ],
        )
    else:
        console.print("no spends yet")


def _when(created: float) -> str:
    return datetime.datetime.fromtimestamp(created, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@budget_app.command("create")
def create(name: str = _NAME, epsilon: float = _EPSILON, as_json: bool = _JSON) -> None:
    """Create a budget with a total ε (again with the same ε: shown; with another: refused)."""
    budget = Budget.create(check_name(name, flag="NAME"), epsilon=exact_epsilon(epsilon, name="--epsilon"))
    _print(budget, as_json)


@budget_app.command("show")
def show(name: str = _NAME, as_json: bool = _JSON) -> None:
    """Show a budget: its total, what is spent, what remains, and each counter that drew on it."""
    name = check_name(name, flag="NAME")
    registry = registry_path(None)
    if not registry.exists():  # reading creates nothing: no registry, no budget
        raise InvalidInputError(
            f"no budget named {name!r}: the lineage registry {registry} does not exist (pure-dp-mf budget create)"
        )
    _print(Budget.open(name), as_json)
