"""``pure-dp-mf reproduce``: verify the certificates, rebuild the papers' tables and figures, write a report.

Thin: parses, calls ``pure_dp_mf.reports.reproduce.reproduce``, prints a summary; exit code 1 when any
section failed (a certificate that does not verify, a module that raised), 0 otherwise.
"""

from __future__ import annotations

from pathlib import Path

import typer

from pure_dp_mf.cli.app import app, console, error_console, print_table
from pure_dp_mf.errors import InvalidInputError, require_extra
from pure_dp_mf.reports.reproduce import reproduce as run
from pure_dp_mf.validation import LARGEST_N, check_size

SUMMARY_COLUMNS = {  # title prefix: the columns printed (the report has them all)
    "Arkhipov & Kalinin, Table 2": (
        "k",
        "2C₂² paper",
        "2C₂² ours",
        "2C_F² paper",
        "2C_F² ours",
        "lifted MaxSE ours",
        "lifted MeanSE ours",
    ),
    "Arkhipov & Kalinin, Table 1": (
        "mechanism",
        "MaxSE ours",
        "MaxSE paper",
        "MaxSE status",
        "MeanSE ours",
        "MeanSE paper",
        "MeanSE status",
    ),
    "Continual counter": ("quantity", "predicted", "empirical", "empirical / predicted"),
    "n = ": ("rank", "mechanism", "arity / base k", "best for", "MaxSE", "MeanSE", "MaxSE const.", "MeanSE const."),
}


@app.command()
def reproduce(
    out: Path = typer.Option(Path("reproduce_out"), "--out", help="folder for report.md, report.json and the PNG figures"),
    quick: bool = typer.Option(False, "--quick", help="smaller Gaussian instance, fewer streaming runs, coarser figures"),
    n: int | None = typer.Option(None, "--n", help="one more stream length for the comparison and lower-bound tables"),
    certificates: Path | None = typer.Option(
        None, "--certificates", help="certificate folder (default: the repository's certificates/)"
    ),
    bases: Path | None = typer.Option(
        None, "--bases", help="base factorization folder (default: the repository's base_factorizations/)"
    ),
    only: list[str] | None = typer.Option(
        None,
        "--only",
        help="run only this section (repeatable): certificates, table1, comparison, lower_bounds, gaussian, streaming",
    ),
) -> None:
    """Re-verify every certificate and reproduce Arkhipov & Kalinin's Tables 1–2, the comparison, lower bounds,
    Choquette-Choo et al.'s Gaussian comparison and a streaming demonstration, into OUT/report.md."""
    require_extra("matplotlib")  # the report's figures (the `report` extra), refused before any section runs
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"--out {out} exists and is not a folder: give a folder (it is created if missing)")
    if n is not None:
        check_size(n, name="--n", maximum=LARGEST_N)

    with console.status("reproducing") as status:
        result = run(
            out=out,
            quick=quick,
            n=n,
            certificates=certificates,
            bases=bases,
            only=only,
            progress=lambda message: status.update(f"reproducing: {message}"),
        )
    shown_n = f"n = {n if n is not None else 2**20} "
    for section in result.sections:
        for table in section.tables:
            prefix = next((p for p in SUMMARY_COLUMNS if table.title.startswith(p)), None)
            if prefix is not None and (prefix != "n = " or table.title.startswith(shown_n)):
                selected = table.select(SUMMARY_COLUMNS[prefix])
                print_table(table.title, selected.columns, selected.cells())
    print_table(
        f"reproduce ({'quick' if quick else 'full'}): {result.seconds:.1f} s, report {result.report}",
        ["section", "status", "seconds", "figures"],
        [
            (s.title, "ok" if s.ok else f"FAILED: {s.error}", f"{s.seconds:.1f}", ", ".join(f.name for f in s.figures))
            for s in result.sections
        ],
    )
    for warning in result.warnings:
        console.print(f"warning: {warning}", markup=False, highlight=False)
    if result.failures:
        for failure in result.failures:
            error_console.print(f"FAILED {failure}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
