"""``pure-dp-mf releases STATE``: print what a single counter's state has released, read back from
its release log (``Counter.releases``): the same counts, std and intervals as when released;
nothing is drawn. A job that crashed after a release recovers it here."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.engines import io
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.runs import check_output_options, metadata
from pure_dp_mf.errors import InvalidInputError

_STATE = typer.Argument(..., exists=True, dir_okay=False, help="a single counter's state file (count --state)")
_FORMAT = typer.Option("csv", "--format", help="csv (with a header line), jsonl (a header record first) or plain")
_FIRST = typer.Option(1, "--first-step", help="the first step to print")
_LAST = typer.Option(None, "--last-step", help="the last step to print (default: the last released)")
_BETA = typer.Option(0.05, "--beta", help="each interval covers the noise on the bounded count with probability ≥ 1 − β")


@app.command()
def releases(
    state: Path = _STATE,
    output_format: str = _FORMAT,
    first_step: int = _FIRST,
    last_step: int = _LAST,
    beta: float = _BETA,
) -> None:
    """Print the released steps of a single counter's state (read back; nothing is drawn)."""
    if last_step is not None and first_step > last_step:
        raise InvalidInputError(f"--first-step {first_step} is after --last-step {last_step}: no step lies between them")
    counter = Counter.open(state, beta=beta, read_only=True)
    try:
        if counter.seeded:  # the export of a seeded state says so (csv and plain: here; jsonl: its header too)
            error_console.print("warning: seeded noise (--seed): not private, for tests and research only", markup=False)
        check_output_options(output_format=output_format, dimension=counter.counter.dimension, beta=beta, invalid="refuse")
        done = counter.releases(first_step=first_step, last_step=last_step)
        header = io.header_text(output_format, metadata(counter, beta=beta, policy="refuse"))
        if header is not None:
            sys.stdout.write(header + "\n")
        if len(done.steps):
            sys.stdout.write(
                io.renderer(output_format, dimension=counter.counter.dimension)(int(done.steps[0]) - 1, done.columns())
            )
    finally:
        counter.close()
