"""Running a single-stream counter over an input into an output: what ``pure-dp-mf count`` does.

``run_stream`` reads the steps of a file or of standard input (``io.StepReader``), releases them
through a ``Counter`` in groups (one durable commit per group with a state) and writes each
group to the output before reading on, so a live stream is answered line by line.

Exactly once: with a state, the output holds every released step once across kills and
restarts. A resumed run reads a file again from its beginning and skips the steps the state has
released; the output is completed from the state's kept rows (``continual.complete_output``)
before anything new is released. A file is checked whole before its first step is released
(the "refuse" policy), so an invalid file releases nothing and leaves the state untouched.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pure_dp_mf.engines import io
from pure_dp_mf.engines.continual import complete_output
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.journal import storage_error
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_beta


@dataclass
class RunReport:
    """What a run did: steps released by this run, the policy's invalid-line count (operator
    diagnostic: never released), and whether the state was resumed."""

    released: int
    invalid: int
    resumed: bool


def check_output_options(*, output_format: str, dimension: int, beta: object, invalid: str) -> None:
    """The run's options, checked before anything is built or read (one ``error:`` line each)."""
    if output_format not in io.FORMATS:
        raise InvalidInputError(f"--format must be one of {', '.join(io.FORMATS)}, got {output_format!r}")
    if output_format != "plain" and dimension != 1:
        raise InvalidInputError("--format csv and jsonl are for --dimension 1 (one running count per line)")
    check_beta(beta)
    if invalid not in io.INVALID_POLICIES:
        raise InvalidInputError(f"--invalid must be one of {', '.join(io.INVALID_POLICIES)}, got {invalid!r}")


def run_stream(
    counter: Counter,
    *,
    source: Path | None,
    reader: io.StepReader,
    output: Path | None,
    output_format: str,
    summary: dict,
    first_step: int | None = None,
) -> RunReport:
    """Release every step of ``source`` (a file, or standard input when None) into ``output``
    (standard output when None) in ``output_format`` (module docstring), with a progress bar on a
    terminal over the public steps (the horizon, or a checked file's lines). The first line is step
    ``first_step`` (default: a file's first line is step 1, standard input's the next step); lines
    of steps already released must repeat their inputs (``Counter.release``). With an explicit
    ``first_step`` their stored releases are written again to standard output; a file run again
    writes only its new steps, and a file output, which holds the old ones, is left as it is."""
    check_output_options(
        output_format=output_format, dimension=counter.counter.dimension, beta=counter.beta, invalid=reader.policy
    )
    resumed = counter.resumed
    step = first_step if first_step is not None else (1 if source is not None else counter.released + 1)
    if not 1 <= step <= counter.released + 1:
        raise InvalidInputError(f"--first-step {step}: the next step is {counter.released + 1} (steps have no gaps)")
    total = counter.counter.horizon
    checked = None
    if source is not None and reader.policy == "refuse":  # read once: checked and released from one private copy
        try:
            checked = io.spool(source)
        except OSError as error:
            raise InvalidInputError(f"cannot read {source}: {error.strerror or error}") from None
        try:
            lines = io.check_file(
                source, reader, horizon=counter.counter.horizon, skip=counter.released - step + 1, first_step=step, stream=checked
            )
        except BaseException:
            checked.close()
            raise
        total = step - 1 + lines  # the file's steps: its lines, public once checked
    progress = io.schedule_progress(through=total, released=counter.released, rows_on_terminal=output is None) if total else None
    render = io.renderer(output_format, dimension=counter.counter.dimension)
    header = io.header_text(output_format, summary)
    sink = _open_sink(counter, output=output, output_format=output_format, render=render, header=header, summary=summary)
    stream = checked if checked is not None else open(source, "rb") if source is not None else io.standard_input()
    durable = output is not None and counter.counter.journal is not None
    released = 0
    try:
        if progress is not None:
            progress.start()
        for first, batch in reader.batches(stream):
            horizon = counter.counter.horizon
            if horizon is not None and step + len(batch) - 1 > horizon:
                raise InvalidInputError(
                    f"line {first + horizon - step + 1}: more steps than the horizon {horizon} "
                    "(--extend goes on as an anytime counter)"
                )
            before = counter.released
            done = counter.release(batch, first_step=step, error_bars=output_format != "plain")  # plain shows none
            fresh = counter.released - before
            shown = done if output is None and first_step is not None else done.last(fresh)
            if len(shown.steps):
                _write(sink, render(int(shown.steps[0]) - 1, shown.columns()), durable=durable, path=output)
            released += fresh
            step += len(batch)
            if progress is not None:
                progress.update(progress.task_ids[0], completed=min(counter.released, total or 0))
        if source is not None and step <= counter.released:
            raise InvalidInputError(f"{source} has fewer lines than the {counter.released} steps already released")
    finally:
        if progress is not None:
            progress.stop()
        if source is not None:
            stream.close()
        closing: OSError | None = None
        if output is not None:
            try:
                sink.close()  # the last buffered text is written here: a full disk can surface now
            except OSError as error:
                closing = error
    if closing is not None:  # only when nothing else went wrong (that error is the one raised)
        raise storage_error(output, closing, state=durable)
    return RunReport(released=released, invalid=reader.invalid, resumed=resumed)


def _open_sink(
    counter: Counter, *, output: Path | None, output_format: str, render, header: str | None, summary: dict
) -> IO[str]:
    """The output stream: standard output, a new file (refused when it exists and is not empty),
    or, for a resumed run, the run's file completed from the state."""
    if output is None:
        if header is not None and not counter.resumed:
            sys.stdout.write(header + "\n")
        return sys.stdout
    journal = counter.counter.journal
    if output_format in ("csv", "plain"):  # plain and csv lines carry no metadata: seeded or not, it is beside them
        try:
            io.write_sidecar(output, summary)
        except OSError as error:  # before any release: a state, if any, holds nothing new
            raise storage_error(error.filename or output, error, state=journal is not None) from None
    if counter.resumed and journal is not None:
        return complete_output(output, journal=journal, render=render, header=header, rows_of=_kept_columns(counter))
    if output.exists() and output.stat().st_size > 0:
        raise InvalidInputError(f"--output {output} already exists and is not empty; the counter would append to it")
    try:
        stream = open(output, "w", encoding="utf-8")
        if header is not None:
            stream.write(header + "\n")
        stream.flush()
    except OSError as error:
        raise storage_error(output, error, state=journal is not None) from None
    return stream


def _kept_columns(counter: Counter):
    """The output columns of kept rows: the releases of the last ``len(rows)`` released steps read
    back from the state (``Counter.releases``: the same values as when they were released)."""

    def columns(rows: list) -> dict:
        return counter.releases(first_step=counter.released - len(rows) + 1).columns()

    return columns


def _write(sink: IO[str], text: str, *, durable: bool, path: Path | None) -> None:
    """Write released text; with a state and an output file, durably (fsync) before reading on."""
    try:
        sink.write(text)
        sink.flush()
        if durable:
            os.fsync(sink.fileno())
    except OSError as error:
        raise storage_error(path or "standard output", error, state=durable) from None


def describe(counter: Counter) -> str:
    """One line for the operator: the mechanism, why, its expected errors and what the intervals
    cover (public facts only)."""
    summary = counter.summary
    expected = summary.get("expected") or {}
    inner = counter.counter
    chosen = f", best for {inner.mechanism_metric}" if inner.mechanism_metric else ""
    certified = " (certified)" if summary.get("certificate") else ""
    where = f"at horizon {inner.horizon}" if inner.horizon is not None else "without a horizon"
    line = f"mechanism: {summary['mechanism']}{certified}{chosen} {where}, ε = {inner.epsilon:g} per step's whole value (≤ {inner.max_value})"
    if expected:
        line += (
            f": MaxSE {expected['max_se']:.6g} (std ≤ {expected['max_se'] ** 0.5:.4g}), "
            f"MeanSE {expected['mean_se']:.6g} (rms std {expected['mean_se'] ** 0.5:.4g})"
        )
    return line + "; intervals cover the noise on the bounded count (values ≤ m, after --invalid), not the raw data"


def metadata(counter: Counter, *, beta: float, policy: str) -> dict:
    """The run's metadata for headers and sidecars: what runs, its privacy unit (one step's
    whole value, at most m), what its intervals cover (the noise on the count as admitted) and the
    policy on invalid input."""
    from pure_dp_mf.engines.keyed import INTERVAL_WORDS, UNIT_WORDS

    unit = {
        "privacy_unit": "step",
        "privacy_unit_meaning": UNIT_WORDS["step"].format(m=counter.counter.max_value),
        "interval_meaning": INTERVAL_WORDS,
    }
    return json.loads(json.dumps({**counter.summary, **unit, "beta": beta, "invalid": policy}, default=str))
