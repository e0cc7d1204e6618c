"""The typer application and the few helpers every command shares (printing, errors).

Commands live one module per concept beside this file (``info.py``, ``trees.py``, ...); each
imports ``app`` from here and registers itself with ``@app.command()`` or a sub-``Typer``.
They parse arguments, call the library and print; they hold no logic of their own.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from pure_dp_mf import __version__

app = typer.Typer(
    name="pure-dp-mf",
    help="Pure-DP continual counting by matrix factorization, with machine-checked bounds.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# How to read matrices as published (Factorization.load); shared by info, certify and lift.
ARRAY_OPTION = typer.Option(None, "--array", help="the array to read from an .npz archive holding several")
DECODER_OPTION = typer.Option(
    None, "--decoder", help="a published decoder L̃ (.npy, .npz, text): the bound on L = T_k·R⁻¹ is taken through it"
)
DECODER_ARRAY_OPTION = typer.Option(None, "--decoder-array", help="the array to read from the --decoder archive")
INTEGER_GRID_OPTION = typer.Option(None, "--integer-grid-bits", help="for integer matrices: the entry m stands for m·2^-G")

# Piped output (files, CI logs) gets wide tables rather than names cut to fit 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
error_console = Console(stderr=True)


def print_json(document: Any) -> None:
    """Print a JSON document on stdout (NaN and infinities as null, keys sorted)."""

    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    typer.echo(json.dumps(clean(document), indent=2, sort_keys=True))


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print rows as a rich table; floats with 6 significant digits."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(f"{cell:.6g}" if isinstance(cell, float) else str(cell) for cell in row))
    console.print(table)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"pure-dp-mf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True, help="print the version"),
) -> None:
    """Pure-DP continual counting by matrix factorization, with machine-checked bounds."""
