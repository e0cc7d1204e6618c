"""``pure-dp-mf ledger adopt STATE`` and ``ledger show NAME``: the ledger of publications
(``engines.ledger``): ``$PURE_DP_MF_LEDGER`` or ``--ledger URL``, else the lineage registry's file.

Thin: parses, calls ``engines.ledger`` and ``engines.journal``, prints."""

from __future__ import annotations

from pathlib import Path

import typer

from pure_dp_mf.cli.app import app, error_console, print_json
from pure_dp_mf.engines import journal, ledger

ledger_app = typer.Typer(
    name="ledger",
    help="The ledger of publications: one key per publication, one input per released step (docs/privacy.md, Threat model).",
    no_args_is_help=True,
)
app.add_typer(ledger_app, name="ledger")

_STATE = typer.Argument(..., dir_okay=False, help="a counter's state file (count --state), moved here")
_FROM = typer.Option(None, "--from", help="the machine the ledger knows the state on, when it is moved from there")
_LEDGER = typer.Option(None, "--ledger", help="the ledger's URL (postgresql://…, sqlite:///path); default $PURE_DP_MF_LEDGER")
_NAME = typer.Argument(..., help="a publication's name")


@ledger_app.command("adopt")
def adopt(state: Path = _STATE, source: str = _FROM, url: str = _LEDGER) -> None:
    """Take over a state moved here from another machine or registry, explicitly and once (logged
    in the ledger): refused when the ledger knows its lineage on another machine (give --from
    that machine to move it from there) or the registry knows it already."""
    if url is not None:
        ledger.set_default(url)
    found = journal.peek_lineage(state)
    book = ledger.open_ledger()
    previous = book.adopt(lineage=found, home=ledger.machine(), force_from=source)
    adopted = journal.adopt(state)
    where = f" from {previous}" if previous else ""
    error_console.print(
        f"adopted {state}{where} on {ledger.machine()}: {adopted['released']} step(s) released; resume it with --state",
        markup=False,
        highlight=False,
    )


@ledger_app.command("show")
def show(name: str = _NAME, url: str = _LEDGER) -> None:
    """Print a publication: its options, budget, what it corrects and how many steps it has released."""
    if url is not None:
        ledger.set_default(url)
    book = ledger.open_ledger()
    record = book.publication(name)
    if record is None:
        raise ledger.LedgerError(f"no publication named {name!r} in the ledger {ledger._shown(book.url)}")
    print_json({**record, "released_steps": book.released_steps(name)})
