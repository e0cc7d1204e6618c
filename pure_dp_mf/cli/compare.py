"""``pure-dp-mf compare --n N``: the Table-1 comparison at one n (exact finite-n errors)."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from pure_dp_mf.atomic import check_writable_file
from pure_dp_mf.cli.app import app, console, print_json, print_table
from pure_dp_mf.mechanisms.anytime import anytime_rows
from pure_dp_mf.mechanisms.planner import DEFAULT_PROVIDERS, comparison_rows
from pure_dp_mf.reports.figures import plot_leading_constants
from pure_dp_mf.validation import LARGEST_N, check_size


@app.command()
def compare(
    n: int = typer.Option(
        ..., "--n", "--horizon", help="stream length n, the horizon (any integer ≥ 1; closed forms, no matrices)"
    ),
    epsilon: float = typer.Option(1.0, "--epsilon", help="privacy budget ε"),
    sort_by: str = typer.Option("maxse", "--sort-by", help="maxse or meanse"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    plot: Path | None = typer.Option(None, "--plot", help="also write a PNG of the leading constants for n = 2^4 … 2^40"),
    anytime: bool = typer.Option(
        False, "--anytime", help="add the anytime counters (no horizon): their errors over steps 1 … n, beside the known-n rows"
    ),
) -> None:
    """MaxSE, MeanSE and leading constants of every mechanism at n, best arity per metric, sorted by error."""
    check_size(n, name="--n", maximum=LARGEST_N)
    if plot is not None:
        check_writable_file(plot, name="--plot")  # before any work
    providers = (*DEFAULT_PROVIDERS, anytime_rows) if anytime else None
    rows = comparison_rows(n=n, epsilon=epsilon, sort_by=sort_by, providers=providers)
    if as_json:
        print_json({"n": n, "epsilon": epsilon, "sort_by": sort_by, "rows": [row.as_dict() for row in rows]})
    else:
        print_table(
            f"n = {n}, ε = {epsilon:g}: MaxSE = the largest per-step noise variance, MeanSE = the mean one "
            "(counts²); std = their square roots (counts); constants = variance·ε²/log₂(n)³",
            [
                "mechanism",
                "arity",
                "best for",
                "MaxSE (var.)",
                "MeanSE (var.)",
                "max std",
                "mean std",
                "MaxSE const.",
                "MeanSE const.",
            ],
            [
                (
                    row.mechanism,
                    "" if row.arity is None else row.arity,
                    ", ".join(row.best_for),
                    row.max_se,
                    row.mean_se,
                    f"{math.sqrt(row.max_se):.4g}",
                    f"{math.sqrt(row.mean_se):.4g}",
                    "n/a" if math.isnan(row.max_se_constant) else row.max_se_constant,
                    "n/a" if math.isnan(row.mean_se_constant) else row.mean_se_constant,
                )
                for row in rows
            ],
        )
    if plot is not None:
        with console.status("computing leading constants for n = 2^4 … 2^40", spinner="dots"):
            written = plot_leading_constants(path=plot)
        if not as_json:
            console.print(f"plot written to {written}")
