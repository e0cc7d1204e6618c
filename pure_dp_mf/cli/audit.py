"""``pure-dp-mf audit``: empirical ε lower bounds for a counter (audit.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from pure_dp_mf.cli.app import app, console, error_console, print_json, print_table
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.mechanisms import trees

MECHANISMS = ("lifted", *trees.MECHANISMS)  # audit.MECHANISMS, without importing scipy.stats at start-up


@app.command()
def audit(
    mechanism: str = typer.Option(..., "--mechanism", help=f"one of: {', '.join(MECHANISMS)}"),
    n: int = typer.Option(..., "--n", "--horizon", help="stream length n, the horizon"),
    epsilon: float = typer.Option(..., "--epsilon", help="the claimed privacy budget ε"),
    trials: int = typer.Option(100_000, "--trials", help="releases per stream (half choose the events, half estimate)"),
    seed: int = typer.Option(0, "--seed", help="seed of the trials' generators (seeded noise: an audit, not a release)"),
    confidence: float = typer.Option(0.99, "--confidence", help="simultaneous confidence of all lower bounds"),
    arity: int = typer.Option(None, "--arity", help="arity of a k-ary tree (default: best for MaxSE)"),
    base: Path = typer.Option(None, "--base", help="base factorization of the lifted counter (default: largest shipped maxse)"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Estimate lower bounds on the counter's privacy loss from seeded runs; exit 1 if ε is contradicted."""
    if mechanism not in MECHANISMS:
        raise InvalidInputError(f"unknown mechanism {mechanism!r}; expected one of {', '.join(MECHANISMS)}")
    from pure_dp_mf.reports.audit import audit as run_audit
    from pure_dp_mf.reports.audit import counter_target  # scipy.optimize and scipy.stats: only for this command

    target = counter_target(mechanism=mechanism, n=n, epsilon=epsilon, arity=arity, base=base)
    with console.status("auditing", spinner="dots") as status:
        report = run_audit(
            target, trials=trials, seed=seed, confidence=confidence, progress=lambda message: status.update(message)
        )
    if as_json:
        print_json(report.to_json())
    else:
        console.print(report.description, markup=False)
        print_table(
            f"audit of {mechanism}, claimed ε = {epsilon:g}, {trials} trials, confidence {confidence:g}",
            [
                "pair",
                "position",
                "event",
                "favoured",
                "count",
                "other count",
                "ε estimate",
                "ε lower bound",
                "exact loss",
                "contradicted",
            ],
            [
                (
                    p.name,
                    p.position,
                    p.event,
                    p.favoured,
                    p.count_favoured,
                    p.count_other,
                    p.epsilon_estimate,
                    p.epsilon_lower,
                    p.exact_loss,
                    p.contradicted,
                )
                for p in report.pairs
            ],
        )
        console.print(report.statement, markup=False)
    if report.contradicted:
        error_console.print(f"claimed ε = {epsilon:g} contradicted: ε ≥ {report.epsilon_lower:.4f}", markup=False)
        raise typer.Exit(1)
