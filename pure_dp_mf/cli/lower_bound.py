"""``pure-dp-mf lower-bound``: Arkhipov & Kalinin's 0/1 lower bounds on a file, a tree, a sweep of trees,
or the exhaustive minimum for n ≤ 7 (see pure_dp_mf/lower_bounds.py, docs/lower_bounds.md).

Exit codes: 0 the theorem applies and every condition and both bounds hold; 1 it applies but a
condition fails or is undecided (a checker bug or a gap in the paper); 3 outside the class
(not 0/1, or L·R ≠ T_n); 2 bad input (from ``main``).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import track

from pure_dp_mf.cli.app import app, console, print_json, print_table
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import lower_bounds, trees
from pure_dp_mf.reports.figures import plot_tree_ratios
from pure_dp_mf.validation import check_size

TREES = ("binary", "kary", "kary-subtraction")
SWEEP_ARITIES = range(2, 9)


def _exit_code(report: lower_bounds.LowerBoundReport) -> int:
    if not report.applies:
        return 3
    return 0 if report.status == lower_bounds.STATUS_HOLDS else 1


def _print_report(report: lower_bounds.LowerBoundReport, title: str) -> None:
    rows = [("n", report.n), ("inner size", report.inner_size), ("status", report.status), ("verdict", report.reason)]
    if report.applies:
        rows += [
            ("c₂ = ‖L‖₂→∞·‖R‖₁→₁", report.c2),
            ("bound 0.290·log₂^{3/2}(n−1)", report.c2_bound),
            ("c₂ / bound", report.c2_ratio),
            ("c_F = ‖L‖_F·‖R‖₁→₁/√n", report.cf),
            ("bound (ln2/6)^{3/2}√(1−1/n)·log₂^{3/2}(n−1)", report.cf_bound),
            ("c_F / bound", report.cf_ratio),
            ("a = max|A_i|, b = max|B_i|", f"{report.a}, {report.b}"),
        ]
        rows += [(f"condition {c.name}", f"{c.status}: {c.detail}") for c in report.conditions]
    print_table(title, ["quantity", "value"], rows)


def _powers_up_to(n: int) -> list[int]:
    values = [1 << h for h in range(2, n.bit_length()) if 1 << h < n]
    return values + [n]


@app.command("lower-bound")
def lower_bound(
    file: Path | None = typer.Argument(None, help="factorization file (.npz) to check"),
    tree: str | None = typer.Option(None, "--tree", help="check a tree instead: binary, kary or kary-subtraction"),
    arity: int = typer.Option(2, "--arity", help="arity of the k-ary tree"),
    n: int | None = typer.Option(None, "--n", help="size n of the tree (largest n for --sweep, default 65536)"),
    sweep: bool = typer.Option(False, "--sweep", help="binary and k-ary trees (arity 2…8) at n = 4, 8, …, N"),
    exhaustive: int | None = typer.Option(None, "--exhaustive", help="least c₂, c_F over all 0/1 factorizations of T_n, n ≤ 7"),
    max_inner_size: int | None = typer.Option(None, "--max-inner-size", help="inner-size bound for --exhaustive (default none)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    plot: Path | None = typer.Option(None, "--plot", help="write a PNG of cost/bound against n (--tree, --sweep)"),
) -> None:
    """Check Arkhipov & Kalinin's 0/1 lower bounds c₂ ≥ 0.290·log₂^{3/2}(n−1) and c_F ≥ (ln2/6)^{3/2}√(1−1/n)·log₂^{3/2}(n−1)."""
    modes = [file is not None, tree is not None, sweep, exhaustive is not None]
    if sum(modes) != 1:
        raise InvalidInputError("give exactly one of FILE, --tree, --sweep, --exhaustive")
    if plot is not None and not (tree or sweep):
        raise InvalidInputError("--plot needs --tree or --sweep (a ratio against n)")
    if plot is not None and not plot.parent.exists():
        raise InvalidInputError(f"cannot write {plot}: folder {plot.parent} does not exist")
    if file is not None:
        report = lower_bounds.check_factorization_lower_bound(Factorization.load(file))
        print_json({"file": str(file), **report.as_dict()}) if as_json else _print_report(report, str(file))
        raise typer.Exit(_exit_code(report))
    if exhaustive is not None:
        _exhaustive(exhaustive, max_inner_size, as_json)
        return
    if sweep:
        largest = check_size(65536 if n is None else n, name="--n", minimum=4, maximum=trees.MAX_EXPLICIT_N)  # explicit trees
        kinds = [("binary", 2)] + [("kary", k) for k in SWEEP_ARITIES]
        jobs = [(kind, k, size) for kind, k in kinds for size in _powers_up_to(largest)]
        rows = [
            next(lower_bounds.tree_ratios(tree=kind, n_values=[size], arity=k))
            for kind, k, size in track(jobs, description="checking trees", console=console, disable=as_json)
        ]
        _print_tree_rows(rows, as_json)
        if plot is not None:
            plot_tree_ratios(rows, plot)
        raise typer.Exit(0 if all(row.status == lower_bounds.STATUS_HOLDS for row in rows) else 1)
    if tree not in TREES:
        raise InvalidInputError(f"unknown tree {tree!r}; expected one of {', '.join(TREES)}")
    if n is None:
        raise InvalidInputError("--tree needs --n")
    n = check_size(n, name="--n", maximum=trees.MAX_EXPLICIT_N)  # an explicit matrix is checked
    factorization = trees.tree_factorization(mechanism=tree, n=n, arity=None if tree == "binary" else arity)
    report = lower_bounds.check_factorization_lower_bound(factorization)
    label = f"{tree} tree" + ("" if tree == "binary" else f", arity {arity}") + f", n = {n}"
    if plot is not None:
        if not report.applies:
            raise InvalidInputError(f"{label}: {report.reason}")
        rows = list(lower_bounds.tree_ratios(tree=tree, n_values=_powers_up_to(n), arity=arity))
        plot_tree_ratios(rows, plot)
    print_json({"tree": label, **report.as_dict()}) if as_json else _print_report(report, label)
    raise typer.Exit(_exit_code(report))


def _print_tree_rows(rows: list[lower_bounds.TreeRatio], as_json: bool) -> None:
    if as_json:
        print_json([row.as_dict() for row in rows])
        return
    print_table(
        "0/1 lower bounds on tree factorizations (ratio ≥ 1 promised)",
        ["tree", "n", "status", "c₂", "c₂ bound", "c₂ ratio", "c_F", "c_F bound", "c_F ratio"],
        [
            (
                "binary" if row.tree == "binary" else f"{row.arity}-ary",
                row.n,
                row.status,
                row.c2,
                row.c2_bound,
                row.c2_ratio,
                row.cf,
                row.cf_bound,
                row.cf_ratio,
            )
            for row in rows
        ],
    )


def _exhaustive(n: int, max_inner_size: int | None, as_json: bool) -> None:
    result = lower_bounds.exhaustive_minimum(n=n, max_inner_size=max_inner_size)
    record = {
        "n": result.n,
        "max_inner_size": result.max_inner_size,
        "min_c2": result.c2,
        "min_c2_squared": result.c2_squared,
        "c2_bound": lower_bounds.c2_bound(result.n),
        "min_cf": result.cf,
        "min_cf_squared": str(result.cf_squared),
        "cf_bound": lower_bounds.cf_bound(result.n),
        "c2_witness_inner_size": int(result.c2_witness[1].shape[0]),
        "cf_witness_inner_size": int(result.cf_witness[1].shape[0]),
        "nodes": result.nodes,
    }
    if as_json:
        print_json(record)
        return
    bound = "none" if max_inner_size is None else str(max_inner_size)
    c2_bound, cf_bound = lower_bounds.c2_bound(result.n), lower_bounds.cf_bound(result.n)
    print_table(
        f"least costs over 0/1 factorizations of T_{n} (inner size bound: {bound})",
        ["cost", "least value", "exact square", "bound", "least / bound", "witness inner size"],
        [
            (
                "c₂",
                result.c2,
                result.c2_squared,
                record["c2_bound"],
                result.c2 / c2_bound if c2_bound else float("inf"),
                record["c2_witness_inner_size"],
            ),
            (
                "c_F",
                result.cf,
                str(result.cf_squared),
                record["cf_bound"],
                result.cf / cf_bound if cf_bound else float("inf"),
                record["cf_witness_inner_size"],
            ),
        ],
    )
