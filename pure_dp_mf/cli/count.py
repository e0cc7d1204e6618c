"""``pure-dp-mf count``: the ε-DP continual counter on a stream of 0/1 values (stream.py)."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import typer

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.noise import NoiseGenerator
from pure_dp_mf.resources import certificate_file, largest_base_file
from pure_dp_mf.stream import ContinualCounter, format_release, open_release_log


def _steps(stream: IO[str]) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line."""
    for number, line in enumerate(stream, start=1):
        if line.strip():
            yield number, line.strip()


def _parse(text: str, *, number: int, dimension: int) -> list[float]:
    tokens = text.replace(",", " ").split()
    if len(tokens) != dimension:
        raise InvalidInputError(f"line {number}: expected {dimension} value(s), got {len(tokens)}: {text!r}")
    try:
        values = [float(token) for token in tokens]
    except ValueError:
        raise InvalidInputError(f"line {number}: {text!r} is not a number 0 or 1") from None
    if any(math.isnan(v) for v in values):
        raise InvalidInputError(f"line {number}: NaN is not a stream value (expected 0 or 1)")
    return values


@app.command()
def count(
    input_file: Path = typer.Argument(
        None, exists=True, dir_okay=False, help="file of 0/1 values, one per line (default: standard input)"
    ),
    epsilon: float = typer.Option(..., "--epsilon", help="privacy budget ε"),
    horizon: int = typer.Option(..., "--horizon", help="the number of steps n the counter may release"),
    base: Path = typer.Option(
        None, "--base", exists=True, dir_okay=False, help="base factorization file (default: the largest shipped maxse base)"
    ),
    certificate: Path = typer.Option(
        None,
        "--certificate",
        exists=True,
        dir_okay=False,
        help="certificate of the base to count with (default: the shipped certificate of the default base)",
    ),
    state: Path = typer.Option(
        None, "--state", help="state file: created, kept current before every release, resumed if it exists"
    ),
    seed: int = typer.Option(None, "--seed", help="seeded noise, NOT private: for tests and research only"),
    dimension: int = typer.Option(1, "--dimension", help="d counters; each line holds d values with at most one 1"),
    output: Path = typer.Option(
        None, "--output", help="append the counts to this file (exactly once across restarts with --state)"
    ),
) -> None:
    """Release a noisy running count for every input line, flushing each (Arkhipov & Kalinin, Algorithm 3)."""
    rng = NoiseGenerator.from_seed(seed) if seed is not None else None
    resumed = state is not None and state.exists()
    if resumed:
        counter = ContinualCounter.resume(state, base=base, epsilon=epsilon, horizon=horizon, rng=rng)
        if counter.dimension != dimension:
            raise InvalidInputError(f"{state}: the state is for dimension {counter.dimension}, not {dimension}")
        error_console.print(f"resuming after step {counter.released} of {horizon}", markup=False)
    elif base is not None and certificate is not None:
        raise InvalidInputError("give --base or --certificate, not both (a certificate names its base)")
    elif base is not None:
        counter = ContinualCounter(base=base, epsilon=epsilon, horizon=horizon, dimension=dimension, rng=rng)
    else:
        counter = ContinualCounter.from_certificate(
            certificate if certificate is not None else certificate_file(largest_base_file()),
            epsilon=epsilon,
            horizon=horizon,
            dimension=dimension,
            rng=rng,
        )
    if counter.seeded:
        error_console.print("warning: seeded noise (--seed): not for production, not private", markup=False)
    sink = open_release_log(output, counter=counter, resumed=resumed) if output is not None else sys.stdout
    if state is not None and not resumed:
        counter.save_state(state)
    source = open(input_file, encoding="utf-8") if input_file is not None else sys.stdin
    try:
        steps = _steps(source)
        if resumed and input_file is not None:  # a file restarts from its beginning: skip what was counted
            for _ in range(counter.released):
                if next(steps, None) is None:
                    raise InvalidInputError(f"{input_file} has fewer lines than the {counter.released} steps already released")
        for number, text in steps:
            if counter.released >= horizon:
                raise InvalidInputError(f"line {number}: more steps than the horizon {horizon}")
            values = _parse(text, number=number, dimension=dimension)
            try:
                released = counter.update(values[0] if dimension == 1 else values)
            except InvalidInputError as error:
                raise InvalidInputError(f"line {number}: {error}") from None
            sink.write(format_release(released) + "\n")
            sink.flush()
            if output is not None and state is not None:
                os.fsync(sink.fileno())
    finally:
        if input_file is not None:
            source.close()
        if output is not None:
            sink.close()
