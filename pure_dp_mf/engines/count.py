"""``count``: one checked ``CountSpec`` run over an input into an output, on any engine.

The one library function behind the command ``pure-dp-mf count``: ``run_count(spec, files=…)``.
The spec (``engines.spec``) says what is released and how (ε, the publication, the horizon, the
mechanism, the privacy unit and its bounds, the intervals, the invalid policy, the calendar and
the schedule, the keys); ``CountFiles`` says where the data is and where the releases go (the
input file and its columns, the output and its format, the operator log, the engine). The route
follows from the two: one value per line (``runs.run_stream`` through ``Counter``), event rows
of one stream or of public keys (``keyed_io.run_keyed_file`` through ``KeyedCounters``), or
keyed event rows on Spark (``spark.count_file_on_spark``). Each route first asks the spec to
refuse what it does not do (``CountSpec.check_route``: the parity table).

What a run says while it runs goes to ``say`` (the command prints it on stderr): public facts
only (what runs, where it resumes, seeded noise). Diagnostics about the data go to the operator
log, on request only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pure_dp_mf.engines.journal import storage_error
from pure_dp_mf.engines.spec import CountSpec, check_user_column
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_size

SEEDED_WARNING = "warning: seeded noise (--seed): not for production, not private"
MAX_COMMIT_EVERY = 1 << 20


@dataclass(frozen=True)
class CountFiles:
    """Where a count's data is and where its releases go.

    ``input_file`` (None: standard input); one value per line: ``header`` (the first line names
    the columns) and ``column`` (the CSV column read); event rows: ``step_column`` (required),
    ``key_column`` (keyed counts), ``column`` (each event's value; default 1) and
    ``user_column`` (user-level units). ``output`` (None: standard output) in ``output_format``
    ("plain", "csv", "jsonl"; "parquet" for event rows); ``commit_every`` lines per durable
    commit and ``first_step`` (one value per line with a state); ``operator_log`` (diagnostics
    about the data: not private); ``engine`` ("local" or "spark": keyed event rows)."""

    input_file: Path | None = None
    header: bool = False
    column: str | None = None
    step_column: str | None = None
    key_column: str | None = None
    user_column: str | None = None
    output: Path | None = None
    output_format: str = "plain"
    commit_every: int = 1 << 16
    first_step: int | None = None
    operator_log: Path | None = None
    engine: str = "local"

    def check_columns(self, *, privacy_unit: str | None) -> None:
        """The columns of event rows against the privacy unit (before the spec checks its bounds)."""
        if self.step_column is None:
            raise InvalidInputError("--key-column needs --step-column NAME: the step (1 … horizon) or date of each event")
        check_user_column(str(privacy_unit), self.user_column, command=True)

    @property
    def route(self) -> str:
        """The route of the parity table (``spec.ROUTES``) these files take."""
        if self.engine == "spark":
            return "spark-batch"
        if self.key_column is not None:
            return "cli-keyed"
        return "cli-rows" if self.step_column is not None else "cli-lines"


def run_count(spec: CountSpec, *, files: CountFiles, say: Callable[[str], None] = lambda text: None) -> None:
    """Release ``spec``'s counts of ``files.input_file`` into ``files.output`` (module
    docstring). Privacy: that of the counter the route runs (``Counter``: ε-DP per step's value;
    ``KeyedCounters``: ε-DP per privacy unit; docs/privacy.md), with every option public."""
    if files.engine not in ("local", "spark"):
        raise InvalidInputError(f"--engine must be local or spark, got {files.engine!r}")
    spec.check_route(files.route)
    if files.route == "cli-lines":
        _count_lines(spec, files=files, say=say)
    else:
        _count_rows(spec, files=files, say=say)


# ---------------------------------------------------------------------- one value per line


def _count_lines(spec: CountSpec, *, files: CountFiles, say: Callable[[str], None]) -> None:
    """One value per line: ``Counter.from_spec`` run over the input (``runs.run_stream``)."""
    from pure_dp_mf.engines import io
    from pure_dp_mf.engines.counter import Counter
    from pure_dp_mf.engines.runs import check_output_options, describe, metadata, run_stream

    check_size(files.commit_every, name="--commit-every", maximum=MAX_COMMIT_EVERY)
    if spec.band == "simultaneous" and files.output_format == "plain":
        raise InvalidInputError(
            "--band simultaneous sets the intervals, and --format plain shows none: use --format csv or jsonl"
        )
    check_output_options(output_format=files.output_format, dimension=spec.dimension, beta=spec.beta, invalid=spec.invalid)
    policy = spec.invalid if spec.invalid != "refuse" or files.input_file is not None else "zero"
    reader = io.StepReader(
        dimension=spec.dimension,
        max_value=spec.max_value,
        policy=policy,
        header=files.header,
        column=files.column,
        largest=files.commit_every,
    )
    counter = Counter.from_spec(spec, route=files.route)
    inner = counter.counter
    of = f" of {inner.horizon}" if inner.horizon is not None else ""
    say(f"resuming after step {counter.released}{of} ({spec.publication.state})" if counter.resumed else describe(counter))
    if counter.seeded:
        say(SEEDED_WARNING)
    if policy != spec.invalid:
        say("standard input is a stream: an invalid line counts as 0 (--invalid zero); --invalid stop stops at it (not private)")
    summary = {**metadata(counter, beta=spec.beta, policy=policy), "band": spec.band, "beta_per_step": counter.beta}
    report = run_stream(
        counter,
        source=files.input_file,
        reader=reader,
        output=files.output,
        output_format=files.output_format,
        summary=summary,
        first_step=files.first_step,
    )
    if files.operator_log is not None:  # the lines the policy replaced are about the data: never stderr
        record = {"invalid_policy": policy, "invalid_lines": report.invalid, "released_steps": report.released}
        _append_operator_log(files.operator_log, record)


def _append_operator_log(path: Path, record: dict) -> None:
    """Append one record of data diagnostics (not private: never publish) to ``path``."""
    record = {"not_private": "diagnostics about the data: for the operator only, never publish", **record}
    try:
        with open(path, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")
    except OSError as error:
        raise storage_error(path, error, state=False) from None


# ---------------------------------------------------------------------- event rows


def _count_rows(spec: CountSpec, *, files: CountFiles, say: Callable[[str], None]) -> None:
    """Event rows, of one stream (the one key ``SINGLE_KEY``, not shown) or of public keys:
    ``KeyedCounters.from_spec`` over the file (``keyed_io.run_keyed_file``), or Spark."""
    from pure_dp_mf.engines.keyed import KeyedCounters
    from pure_dp_mf.engines.keyed_io import EventReader, KeyedSink, Layout, check_events, operator_log, run_keyed_file
    from pure_dp_mf.engines.keys import SINGLE_KEY

    single = spec.keys is None
    keys = [SINGLE_KEY] if single else list(spec.keys or ())
    output_format = "csv" if files.output_format == "plain" else files.output_format
    through = spec.schedule()
    assert through is not None
    # every key at every step of the schedule, together: the union bound over keys × steps
    beta = spec.step_beta(intervals=len(keys) * through)
    band = {"band": spec.band, "beta_per_step": beta}
    if files.engine == "spark":
        _count_on_spark(spec, files=files, keys=keys, through=through, beta=beta, output_format=output_format, say=say)
        return
    policy = spec.invalid if spec.invalid != "refuse" or files.input_file is not None else "zero"
    assert files.step_column is not None  # ``CountFiles.check_columns``
    reader = EventReader(
        keys=keys,
        key_column=files.key_column,
        step_column=files.step_column,
        value_column=files.column,
        user_column=files.user_column,
        through=through,
        max_value=spec.max_value,
        policy=policy,
        calendar=spec.calendar,
        released_events=spec.released_events,
    )
    check_events(files.input_file, reader)  # a file is checked whole: nothing is created or released before this
    counters = KeyedCounters.from_spec(spec.replace(keys=tuple(keys)))
    resumed = counters.resumed
    if resumed:
        say(f"resuming after step {counters.released} ({spec.publication.state})")
    summary = {**counters.summary(), "beta": spec.beta, "through": through, "invalid": policy, **band}
    if spec.calendar is not None:
        summary["calendar"] = spec.calendar.record()
    if single:
        summary.pop("keys")
    say(f"{'counts of event rows' if single else 'keyed counts'}: {json.dumps(summary, ensure_ascii=False)}")
    if counters.generator.seeded:
        say(SEEDED_WARNING)
    layout = Layout(keys=keys, show_keys=not single, calendar=spec.calendar)
    sink = KeyedSink(
        counters=counters,
        output=files.output,
        output_format=output_format,
        summary=summary,
        beta=beta,
        resumed=resumed,
        layout=layout,
    )
    run_keyed_file(counters, source=files.input_file, reader=reader, sink=sink, through=through, beta=beta)
    operator_log(files.operator_log, counters=counters, reader=reader)


def _count_on_spark(
    spec: CountSpec,
    *,
    files: CountFiles,
    keys: list[str],
    through: int,
    beta: float,
    output_format: str,
    say: Callable[[str], None],
) -> None:
    """``--engine spark``: ``engines.spark.count_file_on_spark`` (which refuses an existing
    non-empty ``--output`` before Spark starts, as the local engine does)."""
    from pure_dp_mf.engines.spark import count_file_on_spark

    if files.operator_log is not None:
        raise InvalidInputError("--operator-log is for the local engine")
    if spec.publication.seeded:  # as the local engine says it (the output's metadata says it too)
        say(SEEDED_WARNING)
    columns = {
        "key_column": files.key_column,
        "step_column": files.step_column,
        "value_column": files.column,
        "user_column": files.user_column,
    }
    count_file_on_spark(
        spec=spec.replace(keys=tuple(keys)),
        input_file=files.input_file,
        columns=columns,
        output=files.output,
        output_format=output_format,
        beta=beta,
        through=through,
    )
