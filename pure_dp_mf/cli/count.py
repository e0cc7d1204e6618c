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
from pure_dp_mf.stream import MAX_BLOCK, ContinualCounter, check_steps, format_release, open_release_log
from pure_dp_mf.validation import check_size


def _batches(stream: IO[bytes], *, largest: int) -> Iterator[list[tuple[int, str]]]:
    """Lists of (line number, text) of the non-blank lines, each list at most ``largest`` long and
    holding the complete lines available without waiting (``read1``: one read of what the pipe or
    file has), so a live stream is answered line by line and a bulk one in large groups."""
    number, pending = 0, b""
    while True:
        chunk = stream.read1(1 << 16)  # type: ignore[attr-defined]
        if not chunk:
            break
        pending += chunk
        cut = pending.rfind(b"\n")
        if cut < 0:
            continue
        lines, pending = pending[: cut + 1].split(b"\n")[:-1], pending[cut + 1 :]
        batch: list[tuple[int, str]] = []
        for line in lines:
            number += 1
            text = _decode(line, number=number)
            if text:
                batch.append((number, text))
                if len(batch) == largest:
                    yield batch
                    batch = []
        if batch:
            yield batch
    if pending.strip():
        text = _decode(pending, number=number + 1)
        yield [(number + 1, text)]


def _decode(line: bytes, *, number: int) -> str:
    try:
        return line.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InvalidInputError(f"line {number}: not UTF-8 text") from None


_BITS = {"0": 0.0, "1": 1.0}


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
    commit_every: int = typer.Option(
        4096,
        "--commit-every",
        help="with --state: at most this many available lines per durable commit (one state write and fsync per group)",
    ),
) -> None:
    """Release a noisy running count for every input line, flushing each (Arkhipov & Kalinin, Algorithm 3)."""
    check_size(commit_every, name="--commit-every", maximum=MAX_BLOCK)
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
    source = open(input_file, "rb") if input_file is not None else sys.stdin.buffer
    try:
        batches = _batches(source, largest=commit_every)
        skip = counter.released if resumed and input_file is not None else 0  # a file restarts from its beginning
        for batch in batches:
            if skip:
                used = min(skip, len(batch))
                batch, skip = batch[used:], skip - used
                if not batch:
                    continue
            beyond = None
            if counter.released + len(batch) > horizon:
                number = batch[horizon - counter.released][0]
                beyond = InvalidInputError(f"line {number}: more steps than the horizon {horizon}")
                batch = batch[: horizon - counter.released]
            rows, problem = _valid_rows(batch, dimension=dimension)
            problem = problem or beyond
            if rows:  # the valid lines before a bad one are released, as one line at a time would
                released = counter.counts([row[0] for row in rows] if dimension == 1 else rows)
                sink.write("".join(format_release(int(v) if dimension == 1 else v) + "\n" for v in released))
                sink.flush()
                if output is not None and state is not None:
                    os.fsync(sink.fileno())
            if problem is not None:
                raise problem
        if skip:
            raise InvalidInputError(f"{input_file} has fewer lines than the {counter.released} steps already released")
    finally:
        if input_file is not None:
            source.close()
        if output is not None:
            sink.close()


def _valid_rows(batch: list[tuple[int, str]], *, dimension: int) -> tuple[list[list[float]], InvalidInputError | None]:
    """The parsed rows up to the first bad line, and the error naming that line (None if all are good)."""
    rows: list[list[float]] = []
    for number, text in batch:
        if dimension == 1 and text in _BITS:  # the common case, checked by the lookup itself
            rows.append([_BITS[text]])
            continue
        try:
            row = _parse(text, number=number, dimension=dimension)
            check_steps([row], dimension=dimension)
        except InvalidInputError as error:
            message = str(error)
            return rows, InvalidInputError(message if message.startswith("line ") else f"line {number}: {message}")
        rows.append(row)
    return rows, None
