"""``pure-dp-mf releases STATE``: print what a state has released, read back from it: a single
counter's release log (``Counter.releases``: the same counts, std and intervals as when released),
or the counts of every step of keyed counts and event rows (``KeyedCounters.releases``: in the
columns ``count`` printed, key, step, [date,] count, std, lower, upper); nothing is drawn. A job
that crashed after a release recovers it here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.engines import io
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.journal import Journal
from pure_dp_mf.engines.keyed import KeyedCounters
from pure_dp_mf.engines.keyed_io import read_keys, releases_text
from pure_dp_mf.engines.runs import check_output_options, metadata
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_beta

_STATE = typer.Argument(..., exists=True, dir_okay=False, help="a state file (count --state): one counter's, keyed or event rows")
_FORMAT = typer.Option(
    None, "--format", help="csv (with a header line), jsonl (a header record first) or plain (one counter); default csv"
)
_FIRST = typer.Option(1, "--first-step", help="the first step to print")
_LAST = typer.Option(None, "--last-step", help="the last step to print (default: the last released)")
_BETA = typer.Option(
    None,
    "--beta",
    help="each interval covers the noise on the bounded count with probability ≥ 1 − β (default 0.05; keyed "
    "states: the β each step was printed with)",
)
KEYED_ROWS = 1 << 20
"""The most (key, step) rows a keyed state's ``releases`` reads at once."""
_KEYS = typer.Option(None, "--keys", help="keyed states made by an earlier version: the public keys, one per line")


@app.command()
def releases(
    state: Path = _STATE,
    output_format: str = _FORMAT,
    first_step: int = _FIRST,
    last_step: int = _LAST,
    beta: float = _BETA,
    keys_file: Path = _KEYS,
) -> None:
    """Print the released steps of a state (read back; nothing is drawn)."""
    if last_step is not None and first_step > last_step:
        raise InvalidInputError(f"--first-step {first_step} is after --last-step {last_step}: no step lies between them")
    if beta is not None:
        check_beta(beta)
    if _engine(state) == "keyed":
        _keyed_releases(state, output_format=output_format or "csv", first_step=first_step, last_step=last_step, beta=beta,
                        keys_file=keys_file)  # fmt: skip
        return
    if keys_file is not None:
        raise InvalidInputError("--keys is for keyed states")
    output_format, beta = output_format or "csv", 0.05 if beta is None else beta
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


def _engine(state: Path) -> object:
    """The engine that made ``state`` (its header, read only)."""
    journal = Journal.open(state, read_only=True)
    try:
        return journal.header.get("engine")
    finally:
        journal.close()


def _keyed_releases(
    state: Path, *, output_format: str, first_step: int, last_step: int | None, beta: float | None, keys_file: Path | None
) -> None:
    """The released rows of a keyed or event-row state (``KeyedCounters.releases``), step by step."""
    if output_format not in ("csv", "jsonl"):
        raise InvalidInputError(f"--format for a keyed state must be csv or jsonl, got {output_format!r}")
    keys = read_keys(keys_file) if keys_file is not None else None
    counters = KeyedCounters.open(state, keys=keys, read_only=True)
    try:
        last = counters.check_kept(first_step=first_step, last_step=last_step)  # the whole range, before any row
        steps = max(1, KEYED_ROWS // len(counters.keys))  # read and printed in parts: memory bounded in the steps
        done = counters.releases(first_step=first_step, last_step=min(last, first_step + steps - 1), beta=beta)
        if counters.generator.seeded:  # after the refusals
            error_console.print("warning: seeded noise (--seed): not private, for tests and research only", markup=False)
        header = json.loads(json.dumps({**counters.summary(), "read_back_from": str(state)}, default=str))
        for start in range(first_step, last + 1, steps):
            if start > first_step:
                done = counters.releases(first_step=start, last_step=min(last, start + steps - 1), beta=beta)
            for text in releases_text(done, output_format, header=header, first=start == first_step):
                sys.stdout.write(text)
        if first_step > last:  # nothing in the range: the first line only
            sys.stdout.write("".join(releases_text(done, output_format, header=header)))
    finally:
        counters.close()
