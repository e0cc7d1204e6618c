"""``pure-dp-mf count``: the ε-DP continual counter on a stream of 0/1 values (stream.py)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import typer

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.engines.continual import MAX_BLOCK, ContinualCounter, check_steps, format_release, open_release_log
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.error_bars import ErrorBarModel
from pure_dp_mf.release.generator import NoiseGenerator
from pure_dp_mf.validation import check_size


def _batches(
    stream: IO[bytes], *, largest: int, header: bool = False, column: str | None = None
) -> Iterator[list[tuple[int, str]] | tuple[int, np.ndarray]]:
    """The lines of the input, in groups of at most ``largest`` that hold the complete lines
    available without waiting (``read1``: one read of what the pipe or file has), so a live stream
    is answered line by line and a bulk one in large groups. A group is a list of (line number,
    text), or, for a run of lines that are each exactly "0" or "1", (first line number, int64
    values). A UTF-8 byte order mark is dropped; a blank line is an error naming it (every line is
    one step). ``header``: the first line names the columns and is not a step; ``column``: take
    that column of each CSV line (implies ``header``)."""
    number, pending, first = 0, b"", True
    select: int | None = None
    header = header or column is not None
    while True:
        chunk = stream.read1(1 << 16)  # type: ignore[attr-defined]
        if not chunk:
            break
        if first and chunk.startswith(b"\xef\xbb\xbf"):
            chunk = chunk[3:]
        first = False
        pending += chunk
        cut = pending.rfind(b"\n")
        if cut < 0:
            continue
        complete, pending = pending[: cut + 1], pending[cut + 1 :]
        if header and number == 0:
            line, complete = complete.split(b"\n", 1)
            number = 1
            select = _column_index(_decode(line, number=1), column)
        codes = np.frombuffer(complete, dtype=np.uint8)
        if (
            select is None
            and codes.size % 2 == 0
            and np.all(codes[1::2] == 10)
            and np.all((codes[0::2] == 48) | (codes[0::2] == 49))
        ):
            values = codes[0::2].astype(np.int64) - 48  # every line is "0" or "1": no parsing needed
            for start in range(0, len(values), largest):
                yield number + start + 1, values[start : start + largest]
            number += len(values)
            continue
        batch: list[tuple[int, str]] = []
        for line in complete.split(b"\n")[:-1]:
            number += 1
            try:
                batch.append((number, _field(_decode(line, number=number), select, number=number)))
            except InvalidInputError:
                if batch:  # the lines before a bad one are released first, as one at a time would
                    yield batch
                raise
            if len(batch) == largest:
                yield batch
                batch = []
        if batch:
            yield batch
    if pending.strip():
        if header and number == 0:
            return  # a header alone: no steps
        yield [(number + 1, _field(_decode(pending, number=number + 1), select, number=number + 1))]


def _column_index(header: str, column: str | None) -> int | None:
    """The position of ``column`` in a CSV header line (None: the whole line is the value)."""
    if column is None:
        return None
    names = [name.strip() for name in next(csv.reader([header]))]
    if column not in names:
        raise InvalidInputError(f"--column {column!r}: no such column in the header line 1 ({', '.join(names)})")
    return names.index(column)


def _field(text: str, select: int | None, *, number: int) -> str:
    """The step's value text: the whole line, or the selected CSV field; a blank is an error."""
    if select is not None:
        fields = next(csv.reader([text])) if text else []
        if len(fields) <= select:
            raise InvalidInputError(f"line {number}: {len(fields)} field(s), no column {select + 1}")
        text = fields[select].strip()
    if not text:
        raise InvalidInputError(f"line {number}: blank; every line is one step (write 0 for a step without events)")
    return text


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
        raise InvalidInputError(f"line {number}: {text!r} is not a number") from None
    if any(math.isnan(v) for v in values):
        raise InvalidInputError(f"line {number}: NaN is not a stream value")
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
    mechanism: str = typer.Option(
        "auto",
        "--mechanism",
        help="auto (the best that compare ranks for the horizon, ε and --metric), lifted, or a tree: binary, kary, …",
    ),
    metric: str = typer.Option("maxse", "--metric", help="what auto minimises: maxse (the worst step) or meanse (the average)"),
    max_value: int = typer.Option(
        1, "--max-value", help="m: each line is an integer from 0 to m (sums of bounded contributions; noise scaled to m)"
    ),
    header_line: bool = typer.Option(False, "--header", help="the first input line names the columns; it is not a step"),
    column: str = typer.Option(None, "--column", help="read this column of a CSV input with a header line"),
    output_format: str = typer.Option(
        "plain",
        "--format",
        help="plain (one count per line), csv or jsonl (step, count, std, lower, upper: a guaranteed 1 − β interval); parquet for keyed counts",
    ),
    beta: float = typer.Option(
        0.05, "--beta", help="with csv/jsonl: each interval holds the true count with probability ≥ 1 − β"
    ),
    monotone: bool = typer.Option(
        False,
        "--monotone",
        help="post-process to non-negative, non-decreasing counts (isotonic fit of what was released; no privacy cost)",
    ),
    key_column: str = typer.Option(
        None, "--key-column", help="keyed counts: the CSV column of each event's key (with --keys, --step-column)"
    ),
    keys_file: Path = typer.Option(None, "--keys", help="keyed counts: the public keys, one per line; other keys are dropped"),
    step_column: str = typer.Option(None, "--step-column", help="keyed counts: the column of each event's step, 1 … horizon"),
    privacy_unit: str = typer.Option("event", "--privacy-unit", help="keyed counts: event or user (with contribution bounds)"),
    user_column: str = typer.Option(None, "--user-column", help="keyed counts with --privacy-unit user: the user column"),
    max_keys: int = typer.Option(None, "--max-keys", help="--privacy-unit user: K, keys kept per user (the first K)"),
    max_per_key: int = typer.Option(
        None, "--max-per-key", help="--privacy-unit user: C, steps kept per user and key (the first C)"
    ),
    engine: str = typer.Option("local", "--engine", help="keyed counts: local (in-process) or spark (the spark extra)"),
    commit_every: int = typer.Option(
        4096,
        "--commit-every",
        help="with --state: at most this many available lines per durable commit (one state write and fsync per group)",
    ),
) -> None:
    """Release a noisy running count for every input line, flushing each (Arkhipov & Kalinin, Algorithm 3).

    With --key-column: private running counts of every public key at every step (docs/streaming.md)."""
    if key_column is not None:
        if certificate is not None or dimension != 1 or monotone or mechanism not in ("auto", "lifted"):
            raise InvalidInputError(
                "--key-column runs lifted bases: no --certificate, --dimension, --monotone or tree --mechanism"
            )
        from pure_dp_mf.cli.count_keyed import count_keyed

        count_keyed(
            input_file=input_file,
            keys_file=keys_file,
            key_column=key_column,
            step_column=step_column,
            value_column=column,
            user_column=user_column,
            privacy_unit=privacy_unit,
            max_keys=max_keys,
            max_per_key=max_per_key,
            max_value=max_value,
            epsilon=epsilon,
            horizon=horizon,
            base=base,
            metric=metric,
            seed=seed,
            output=output,
            output_format="csv" if output_format == "plain" else output_format,
            beta=beta,
            engine=engine,
            state=state,
        )
        return
    if engine != "local":
        raise InvalidInputError("--engine is for keyed counts: give --key-column too")
    for flag, given in (
        ("--keys", keys_file),
        ("--step-column", step_column),
        ("--user-column", user_column),
        ("--max-keys", max_keys),
        ("--max-per-key", max_per_key),
    ):
        if given is not None:
            raise InvalidInputError(f"{flag} is for keyed counts: give --key-column too")
    if privacy_unit != "event":
        raise InvalidInputError("--privacy-unit is for keyed counts: give --key-column too")
    check_size(commit_every, name="--commit-every", maximum=MAX_BLOCK)
    if output_format not in FORMATS:
        raise InvalidInputError(f"--format must be one of {', '.join(FORMATS)}, got {output_format!r}")
    if monotone and dimension != 1:
        raise InvalidInputError("--monotone is for --dimension 1 (one running count per line)")
    if output_format != "plain" and dimension != 1:
        raise InvalidInputError("--format csv and jsonl are for --dimension 1 (one running count per line)")
    if not 0 < beta < 1:
        raise InvalidInputError(f"--beta must be in (0, 1), got {beta!r}")
    rng = NoiseGenerator.from_seed(seed) if seed is not None else None
    resumed = state is not None and state.exists()
    if resumed:
        counter = ContinualCounter.resume(
            state, base=base, epsilon=epsilon, horizon=horizon, rng=rng, max_value=max_value, monotone=monotone
        )
        if counter.dimension != dimension:
            raise InvalidInputError(f"{state}: the state is for dimension {counter.dimension}, not {dimension}")
        error_console.print(f"resuming after step {counter.released} of {horizon}", markup=False)
    elif base is not None and certificate is not None:
        raise InvalidInputError("give --base or --certificate, not both (a certificate names its base)")
    elif (base is not None or certificate is not None) and mechanism not in ("auto", "lifted"):
        raise InvalidInputError(f"--mechanism {mechanism} is a tree; --base and --certificate choose a lifted base")
    elif base is not None:
        counter = ContinualCounter(
            base=base, epsilon=epsilon, horizon=horizon, dimension=dimension, rng=rng, max_value=max_value, monotone=monotone
        )
    elif certificate is not None:
        counter = ContinualCounter.from_certificate(
            certificate, epsilon=epsilon, horizon=horizon, dimension=dimension, rng=rng, max_value=max_value, monotone=monotone
        )
    else:
        counter = ContinualCounter.for_horizon(
            epsilon=epsilon,
            horizon=horizon,
            metric=metric,
            mechanism=mechanism,
            dimension=dimension,
            rng=rng,
            max_value=max_value,
            monotone=monotone,
        )
        error_console.print(_describe_choice(counter, metric=metric), markup=False, highlight=False, soft_wrap=True)
    if counter.seeded:
        error_console.print("warning: seeded noise (--seed): not for production, not private", markup=False)
    render = _renderer(counter, output_format=output_format, beta=beta)
    header = _header(counter, output_format=output_format, beta=beta)
    if output is not None:
        sink = open_release_log(output, counter=counter, resumed=resumed, render=render, header=header)
    else:
        sink = sys.stdout
        if header is not None and not resumed:
            sink.write(header + "\n")
    if state is not None and not resumed:
        counter.save_state(state)
    source = open(input_file, "rb") if input_file is not None else _standard_input()
    try:
        batches = _batches(source, largest=commit_every, header=header_line, column=column)
        skip = counter.released if resumed and input_file is not None else 0  # a file restarts from its beginning
        for batch in batches:
            steps, line, problem = _prepare(batch, dimension=dimension, max_value=max_value)
            used = min(skip, len(steps))  # lines of a file already counted before the restart
            steps, skip = steps[used:], skip - used
            allowed = horizon - counter.released
            if len(steps) > allowed:
                problem = InvalidInputError(f"line {line(used + allowed)}: more steps than the horizon {horizon}")
                steps = steps[:allowed]
            if len(steps):  # the valid lines before a bad one are released, as one line at a time would
                first = counter.released
                released = counter.counts(steps)
                rows = np.column_stack([released, counter.last_raw]) if counter.monotone else released.reshape(len(released), -1)
                sink.write(render(first, rows.tolist()))
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


FORMATS = ("plain", "csv", "jsonl")
CSV_HEADER = "step,count,std,lower,upper"


def _header(counter: ContinualCounter, *, output_format: str, beta: float) -> str | None:
    """The output's header: for csv a comment line ``# {…}`` (read with ``comment="#"``) with
    what runs, then the column names; for jsonl a first record ``{"header": {…}}``; none for
    plain (one line per input line)."""
    if output_format == "plain":
        return None
    summary = {**counter.summary(), "beta": beta}
    if output_format == "csv":
        return "# " + json.dumps(summary, ensure_ascii=False) + "\n" + CSV_HEADER
    return json.dumps({"header": summary}, ensure_ascii=False)


def _renderer(counter: ContinualCounter, *, output_format: str, beta: float) -> Callable[[int, list], str]:
    """render(first 0-based step, rows of released values) -> the output text of those steps."""
    if output_format == "plain":
        if counter.dimension == 1:
            return lambda first, rows: "".join(f"{row[0]}\n" for row in rows)
        return lambda first, rows: "".join(format_release(row) + "\n" for row in rows)
    model = ErrorBarModel(counter)

    def render(first: int, rows: list) -> str:
        counts = np.array([row[0] for row in rows], dtype=np.int64)
        centres = np.array([row[-1] for row in rows], dtype=np.int64)  # with --monotone: the unprocessed release
        bars = model.bars(first, first + len(counts), beta=beta)
        lower, upper = bars.bounds(centres, first_step=first, max_value=counter.max_value)
        records = zip(
            range(first + 1, first + 1 + len(counts)), counts.tolist(), bars.std.tolist(), lower.tolist(), upper.tolist()
        )
        if output_format == "csv":
            return "".join(f"{step},{count},{std:.6g},{low},{high}\n" for step, count, std, low, high in records)
        return "".join(
            json.dumps({"step": step, "count": count, "std": float(f"{std:.6g}"), "lower": low, "upper": high}) + "\n"
            for step, count, std, low, high in records
        )

    return render


def _describe_choice(counter: ContinualCounter, *, metric: str) -> str:
    """One stderr line: the mechanism chosen for the horizon, its expected errors and noise std."""
    summary = counter.summary()
    expected = summary["expected"]
    certified = "certified" if counter.certificate else "no certificate"
    what = f"{expected['mechanism']} ({certified})" if expected["mechanism"].startswith("lifted") else expected["mechanism"]
    return (
        f"mechanism: {what}, best for {metric} at horizon {counter.horizon}, ε = {counter.epsilon:g}: "
        f"MaxSE {expected['max_se']:.6g} (std ≤ {math.sqrt(expected['max_se']):.4g}), "
        f"MeanSE {expected['mean_se']:.6g} (rms std {math.sqrt(expected['mean_se']):.4g})"
    )


def _standard_input() -> IO[bytes]:
    """The bytes of standard input (a text-only stand-in, as in tests, is read whole and encoded)."""
    binary = getattr(sys.stdin, "buffer", None)
    return binary if binary is not None else io.BytesIO(sys.stdin.read().encode("utf-8"))


def _prepare(
    batch: list[tuple[int, str]] | tuple[int, np.ndarray], *, dimension: int, max_value: int = 1
) -> tuple[Any, Callable[[int], int], InvalidInputError | None]:
    """(the steps to release, position → line number, the error of the first bad line or None)."""
    if isinstance(batch, tuple):
        first, bits = batch
        if dimension == 1:
            return bits, lambda position: first + position, None
        return [], lambda position: first + position, InvalidInputError(f"line {first}: expected {dimension} value(s), got 1")
    rows, problem = _valid_rows(batch, dimension=dimension, max_value=max_value)
    steps = [row[0] for row in rows] if dimension == 1 else rows
    return steps, lambda position: batch[position][0] if position < len(batch) else batch[-1][0] + 1, problem


def _valid_rows(
    batch: list[tuple[int, str]], *, dimension: int, max_value: int = 1
) -> tuple[list[list[float]], InvalidInputError | None]:
    """The parsed rows up to the first bad line, and the error naming that line (None if all are good)."""
    rows: list[list[float]] = []
    for number, text in batch:
        if dimension == 1 and text in _BITS:  # the common case, checked by the lookup itself
            rows.append([_BITS[text]])
            continue
        try:
            row = _parse(text, number=number, dimension=dimension)
            check_steps([row], dimension=dimension, max_value=max_value)
        except InvalidInputError as error:
            message = str(error)
            return rows, InvalidInputError(message if message.startswith("line ") else f"line {number}: {message}")
        rows.append(row)
    return rows, None
