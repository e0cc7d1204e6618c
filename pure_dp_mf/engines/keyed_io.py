"""Keyed counts in and out: events from CSV or Parquet, released rows to CSV, JSON Lines or Parquet.

``run_keyed_file`` is what ``pure-dp-mf count --key-column …`` does on the local engine: read
the public keys, check the whole input before the first release (a file: every event of a listed
key in the schedule must parse, lie in [0, m] and come in step order; otherwise nothing is
released and the state is untouched), then release every key at every step of the public
schedule (``keyed.run_keyed``), writing each step before the next.

Events of unlisted keys and of steps outside the schedule are dropped before they are looked
at, so neither their values nor their order can stop a run or change what it says. What happens
to an invalid event of a listed key is a policy fixed up front (``io.INVALID_POLICIES``): a file
is refused whole ("refuse"), or the event is dropped ("zero"), its value clamped to [0, m]
("clamp"), or the run stopped at it ("stop": not private). A resumed run's events of released
steps follow the policy ``released_events`` (``partitions``: refused unless exactly as released,
or set aside). Diagnostics about the data (what became of every row, ``row_fates``) go to an
operator log only when one is asked for.

Outputs: csv (RFC 4180, the column names first; the metadata in ``OUT.meta.json``), jsonl (a
header record first) and parquet (the metadata in the schema's key-value metadata). With a state
the output holds each released step exactly once across kills and restarts: csv and jsonl are
completed from the state, and parquet becomes a folder of one file per step, each written
atomically after the state records the step.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import IO

import numpy as np

from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.io import INVALID_POLICIES, MAX_FIELD, Texts, join_columns, schedule_progress, write_sidecar
from pure_dp_mf.engines.journal import storage_error
from pure_dp_mf.engines.keyed import (
    MAX_LOCAL_KEYS,
    KeyedCounters,
    KeyedEvent,
    KeyedReleases,
    check_keys,
    empty_user_error,
    normalise_key,
    run_keyed,
)
from pure_dp_mf.engines.partitions import StepInputs, check_released_events
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import parse_integer

KEYED_FORMATS = ("csv", "jsonl", "parquet")
COLUMNS = ("key", "step", "count", "std", "lower", "upper")
STEP_FILE = "step-{:08d}.parquet"


def read_keys(path: Path) -> list[str]:
    """One key per line (the lines of ``str.splitlines``); a UTF-8 BOM dropped; blank lines are an
    error. Read line by line and refused at line ``MAX_LOCAL_KEYS`` + 1, so a longer list costs
    no more memory than the limit."""
    lines: list[str] = []
    try:
        with path.open(encoding="utf-8-sig") as handle:
            for physical in handle:
                lines.extend(physical.splitlines())
                if len(lines) > MAX_LOCAL_KEYS:  # before any key is checked or kept
                    raise InvalidInputError(f"--keys {path}: more than {MAX_LOCAL_KEYS:,} keys, the most one local run releases")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"--keys {path}: cannot read it ({error})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise InvalidInputError(f"--keys {path}: line {number} is blank")
    try:
        return check_keys(line.strip() for line in lines)
    except InvalidInputError as error:
        raise InvalidInputError(f"--keys {path}: {error}") from None


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise InvalidInputError(
            "Parquet needs pyarrow: pip install -e '.[parquet]' in a checkout of pure-dp-mf (or pip install pyarrow)"
        ) from None
    return pyarrow


ROW_FATES = ("unknown_key", "before_step_1", "after_through", "invalid_dropped", "empty_user_dropped")
"""What the reader does with a data row it does not hand on (``EventReader.fates``): an unlisted
key, a step before 1 or after --through (all unseen), and under --invalid zero or clamp a row
dropped as invalid or for its empty user. Every other row is an event handed on."""


class EventReader:
    """The events of a CSV (text) or Parquet input as ``KeyedEvent``s (module docstring).
    ``rows`` counts the data rows read and ``fates`` those not handed on, by ``ROW_FATES``;
    ``clamped`` the events handed on with their value clamped (--invalid clamp): operator
    diagnostics, never released. ``released_events`` is the policy for events of steps a resumed
    state has released (``partitions.RELEASED_EVENTS``)."""

    def __init__(
        self,
        *,
        keys: list[str],
        key_column: str | None,
        step_column: str,
        value_column: str | None,
        user_column: str | None,
        through: int,
        max_value: int,
        policy: str,
        calendar: Calendar | None = None,
        released_events: str = "refuse",
    ) -> None:
        if policy not in INVALID_POLICIES:
            raise InvalidInputError(f"--invalid must be one of {', '.join(INVALID_POLICIES)}, got {policy!r}")
        self.released_events = check_released_events(released_events)
        self.keys = set(keys)
        self.only_key = keys[0] if key_column is None and len(keys) == 1 else None  # one stream of event rows
        self.columns = {
            "--key-column": key_column,
            "--step-column": step_column,
            "--column": value_column,
            "--user-column": user_column,
        }
        self.through, self.max_value, self.policy, self.calendar = through, max_value, policy, calendar
        self.reset()

    def reset(self) -> None:
        """Zero the row counts (a file read again after ``check_events``)."""
        self.rows_read = 0
        self.fates = dict.fromkeys(ROW_FATES, 0)
        self.clamped = 0

    @property
    def dropped(self) -> int:
        """Rows dropped unseen: unlisted keys and steps outside the schedule."""
        return self.fates["unknown_key"] + self.fates["before_step_1"] + self.fates["after_through"]

    @property
    def invalid(self) -> int:
        """Invalid rows dropped or clamped by the policy."""
        return self.fates["invalid_dropped"] + self.fates["empty_user_dropped"] + self.clamped

    def rows(self, path: Path | None) -> Iterator[list[str]]:
        """The input's rows as strings, the header first (a Parquet file's columns as text)."""
        if path is not None and path.suffix == ".parquet":
            yield from _parquet_rows(path)
            return
        stream: IO[str] = open(path, encoding="utf-8", newline="", errors="strict") if path is not None else sys.stdin
        csv.field_size_limit(MAX_FIELD)
        try:
            yield from csv.reader(stream, strict=True)  # an unterminated quote is an error, not a value
        except UnicodeDecodeError as error:
            raise InvalidInputError(f"the input is not UTF-8 text (byte {error.start})") from None
        except csv.Error as error:
            raise InvalidInputError(f"the input is not valid CSV: {error}") from None
        finally:
            if path is not None:
                stream.close()

    def events(self, path: Path | None) -> Iterator[KeyedEvent]:
        rows = self.rows(path)
        try:
            header = [name.strip().lstrip("\ufeff") for name in next(rows)]
        except StopIteration:
            raise InvalidInputError("the input is empty: a CSV header line is needed") from None
        positions = {}
        for flag, name in self.columns.items():
            if name is not None:
                if name not in header:
                    raise InvalidInputError(f"{flag} {name!r}: no such column in the header ({', '.join(header)})")
                positions[flag] = header.index(name)
        last = 0
        for number, row in enumerate(rows, start=2):
            self.rows_read += 1
            event = self._event(row, number, positions, last)
            if event is not None:
                last = event.step
                yield event

    def _event(self, row: list[str], number: int, positions: dict, last: int) -> KeyedEvent | None:
        """One row's event, None when dropped (unseen or by the policy)."""
        if len(row) != len(positions) and len(row) < max(positions.values()) + 1:
            return self._invalid(f"line {number}: {len(row)} field(s), fewer than the header's")
        key = normalise_key(row[positions["--key-column"]]) if "--key-column" in positions else self.only_key
        if key not in self.keys:
            self.fates["unknown_key"] += 1
            return None
        try:
            step = self._step(row[positions["--step-column"]], number)
        except InvalidInputError as error:
            return self._invalid(str(error))
        if not 1 <= step <= self.through:
            self.fates["before_step_1" if step < 1 else "after_through"] += 1
            return None
        if step < last:
            return self._invalid(f"line {number}: step {step} goes backwards (after step {last}); sort the input by step")
        try:
            value = (
                parse_integer(row[positions["--column"]], what=f"line {number}: --column", data=True)
                if "--column" in positions
                else 1
            )
        except InvalidInputError as error:
            return self._invalid(str(error))
        if not 0 <= value <= self.max_value:
            if self.policy == "clamp":
                self.clamped += 1
                value = min(max(value, 0), self.max_value)
            else:
                return self._invalid(f"line {number}: a value is outside [0, {self.max_value}] (--max-value)")
        user = row[positions["--user-column"]].strip() if "--user-column" in positions else None
        if user is not None and not user:  # no one's event: refused or dropped by the policy (``keyed.check_user``)
            return self._invalid(
                str(empty_user_error(f"line {number}: --user-column {self.columns['--user-column']!r}")),
                fate="empty_user_dropped",
            )
        return KeyedEvent(key=key, step=step, value=value, user=user)

    def _step(self, text: str, number: int) -> int:
        """The 1-based step of a row: its integer step, or with a calendar its date's step."""
        what = f"line {number}: --step-column {self.columns['--step-column']!r}"
        if self.calendar is not None:
            return self.calendar.step_of(text, what=what)
        try:
            return parse_integer(text, what=what, data=True)
        except InvalidInputError as error:
            if "-" in text or ":" in text:
                raise InvalidInputError(f"{error} (dates and timestamps need --start and --step-size)") from None
            raise

    def _invalid(self, message: str, *, fate: str = "invalid_dropped") -> KeyedEvent | None:
        """None (the event dropped, counted as ``fate``), or the error of policy "refuse" or "stop"."""
        if self.policy in ("refuse", "stop"):
            raise InvalidInputError(message)
        self.fates[fate] += 1
        return None


def _parquet_rows(path: Path) -> Iterator[list[str]]:
    pyarrow = _pyarrow()
    try:
        table = pyarrow.parquet.ParquetFile(path)
    except (OSError, pyarrow.ArrowInvalid) as error:
        raise InvalidInputError(f"{path}: not a Parquet file ({error})") from None
    yield list(table.schema_arrow.names)
    for batch in table.iter_batches():
        columns = [column.to_pylist() for column in batch.columns]
        for row in zip(*columns, strict=True):
            yield ["" if value is None else str(value) for value in row]


# ------------------------------------------------------------------------------------- output


def csv_field(text: str) -> str:
    """A CSV field quoted as RFC 4180 asks (commas, quotes, line breaks)."""
    if any(character in text for character in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


@dataclass(frozen=True)
class Layout:
    """The columns of a keyed output: ``key`` (left out for a single stream given as event rows),
    ``step``, ``date`` (the period's start, with a calendar), count, std, lower, upper."""

    keys: list[str]
    show_keys: bool = True
    calendar: Calendar | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        head = ("key",) if self.show_keys else ()
        return head + ("step",) + (("date",) if self.calendar is not None else ()) + ("count", "std", "lower", "upper")

    @cached_property
    def key_texts(self) -> dict[str, Texts]:
        """Each key as its csv field and as its JSON string, once per layout."""
        return {"csv": Texts.of([csv_field(key) for key in self.keys]), "jsonl": Texts.of([json.dumps(key) for key in self.keys])}

    def text(self, output_format: str, step: int, counts, std: float, lower, upper) -> str:
        """The text of one step's rows (csv or jsonl), every key in one numpy pass
        (``io.join_columns``; ``obvious_text`` where a column is not int64)."""
        date = self.calendar.period(step) if self.calendar is not None else None
        if output_format == "csv":
            middle = f"{step},{date}" if date is not None else f"{step}"
            pieces = [f"{middle},", f",{std:.6g},", ",", "\n"]
        else:
            fixed = f'"step": {step}, ' + (f'"date": {json.dumps(date)}, ' if date is not None else "")
            pieces = [f'{{{fixed}"count": ', f', "std": {json.dumps(float(f"{std:.6g}"))}, "lower": ', ', "upper": ', "}\n"]
        fields: list = [counts, lower, upper]
        if self.show_keys:
            key_piece = "" if output_format == "csv" else '{"key": '
            pieces = [key_piece, ("," if output_format == "csv" else ", ") + pieces[0].lstrip("{"), *pieces[1:]]
            fields.insert(0, self.key_texts[output_format])
        text = join_columns(fields, pieces) if len(self.keys) else ""
        return self.obvious_text(output_format, step, counts, std, lower, upper) if text is None else text

    def obvious_text(self, output_format: str, step: int, counts, std: float, lower, upper) -> str:
        """``text`` key by key in Python: the reference the fast path is tested against."""
        records = zip(self.keys, counts.tolist(), lower.tolist(), upper.tolist(), strict=True)
        if output_format == "csv":
            middle = f"{step},{self.calendar.period(step)}" if self.calendar is not None else f"{step}"
            lead = (lambda key: csv_field(key) + ",") if self.show_keys else (lambda key: "")
            return "".join(f"{lead(key)}{middle},{c},{std:.6g},{lo},{hi}\n" for key, c, lo, hi in records)
        fixed = {"step": step} | ({"date": self.calendar.period(step)} if self.calendar is not None else {})
        return "".join(
            json.dumps(
                ({"key": key} if self.show_keys else {})
                | fixed
                | {"count": c, "std": float(f"{std:.6g}"), "lower": lo, "upper": hi}
            )
            + "\n"
            for key, c, lo, hi in records
        )

    def schema(self, summary: dict):
        """The Parquet columns; the summary in the key-value metadata."""
        pyarrow = _pyarrow()
        kinds = {"key": pyarrow.string(), "date": pyarrow.string(), "std": pyarrow.float64()}
        fields = [(name, kinds.get(name, pyarrow.int64())) for name in self.columns]
        return pyarrow.schema(fields, metadata={"pure_dp_mf": json.dumps(summary, ensure_ascii=False)})

    def table(self, *, step: int, counts, std: float, lower, upper, summary: dict):
        """One step's rows as a Parquet table (``release_columns``)."""
        pyarrow = _pyarrow()
        columns = release_columns(
            keys=self.keys,
            counts=np.asarray(counts).reshape(-1, 1),
            std=np.array([std], dtype=np.float64),
            lower=np.asarray(lower).reshape(-1, 1),
            upper=np.asarray(upper).reshape(-1, 1),
            first=step - 1,
            calendar=self.calendar,
        )
        schema = self.schema(summary)
        return pyarrow.Table.from_arrays(
            [pyarrow.array(columns[name], type=schema.field(name).type) for name in self.columns], schema=schema
        )


def release_columns(
    *,
    keys: Sequence[str],
    counts: np.ndarray,
    std: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    first: int,
    calendar: Calendar | None = None,
    by: str = "step",
) -> dict[str, np.ndarray]:
    """The one row model of released keyed counts, for every output that is a table (pandas, Parquet,
    Spark): the columns key, step, [date,] count, std, lower, upper of ``counts``, ``lower`` and
    ``upper`` (keys × steps) and ``std`` (one per step) for the 1-based steps first + 1, …; the
    rows step by step, every key of a step in list order (``by="step"``: the text outputs' order),
    or key by key (``by="key"``). With a calendar the date is the start of the step's period."""
    size, steps = np.shape(counts)
    numbers = np.arange(first + 1, first + steps + 1, dtype=np.int64)
    names = np.asarray(list(keys), dtype=object)
    if by == "step":
        key_column, step_column = np.tile(names, steps), np.repeat(numbers, size)
        cells, per_step = (lambda array: np.asarray(array).T.ravel()), (lambda values: np.repeat(values, size))
    else:
        key_column, step_column = np.repeat(names, steps), np.tile(numbers, size)
        cells, per_step = (lambda array: np.asarray(array).ravel()), (lambda values: np.tile(values, size))
    columns: dict[str, np.ndarray] = {"key": key_column, "step": step_column}
    if calendar is not None:
        columns["date"] = per_step(np.asarray([calendar.period(int(step)) for step in numbers], dtype=object))
    columns["count"] = cells(counts)
    columns["std"] = per_step(np.asarray(std, dtype=np.float64))
    columns["lower"] = cells(lower)
    columns["upper"] = cells(upper)
    return columns


def write_step_file(folder: Path, *, step: int, table) -> None:
    """One step's Parquet file, written atomically."""
    from pure_dp_mf.atomic import atomic_write_bytes

    pyarrow = _pyarrow()
    buffer = pyarrow.BufferOutputStream()
    pyarrow.parquet.write_table(table, buffer)
    atomic_write_bytes(folder / STEP_FILE.format(step), buffer.getvalue().to_pybytes())


class KeyedSink:
    """Where a keyed run writes: a text file (or standard output) or Parquet, completed after a
    crash from the state (the last released step, kept there: the same values, no new noise)."""

    def __init__(
        self,
        *,
        counters: KeyedCounters,
        output: Path | None,
        output_format: str,
        summary: dict,
        beta: float,
        resumed: bool,
        layout: Layout | None = None,
    ):
        if output_format not in KEYED_FORMATS:
            raise InvalidInputError(f"--format for keyed counts must be csv, jsonl or parquet, got {output_format!r}")
        if output_format == "parquet" and output is None:
            raise InvalidInputError("--format parquet needs --output (a file; with --state, a folder of one file per step)")
        self.counters, self.output, self.format, self.summary, self.beta = counters, output, output_format, summary, beta
        self.keys = counters.keys
        self.folder = output_format == "parquet" and counters.journal is not None
        self.layout = layout if layout is not None else Layout(keys=self.keys)
        self.render = partial(self.layout.text, output_format)
        self.durable = output is not None and counters.journal is not None
        self._writer = None
        self._stream: IO[str] | None = None
        self._open(resumed)
        # the state notes how its steps are printed from here on: ``releases`` prints them alike
        counters.record_output(show_keys=self.layout.show_keys, calendar=self.layout.calendar, beta=beta)

    def _open(self, resumed: bool) -> None:
        output = self.output
        if output is not None and not resumed:
            if output.is_dir() and not self.folder:
                raise InvalidInputError(f"--output {output} is a folder, not a file")
            if (output.is_dir() and any(output.iterdir())) or (output.is_file() and output.stat().st_size > 0):
                raise InvalidInputError(f"--output {output} already exists and is not empty")
            if not output.parent.is_dir():
                raise InvalidInputError(f"--output {output}: folder {output.parent} does not exist")
        if self.format == "csv" and output is not None:
            write_sidecar(output, self.summary)
        if self.folder:
            assert output is not None
            if output.exists() and not output.is_dir():
                raise InvalidInputError(
                    f"--output {output}: with --format parquet and --state the output is a folder of one file per step"
                )
            output.mkdir(exist_ok=True)
            self._complete_folder()
        elif self.format == "parquet":
            assert output is not None
            self._writer = _pyarrow().parquet.ParquetWriter(output, self.layout.schema(self.summary))
        elif output is None:
            self._stream = sys.stdout
            if not resumed:
                self._stream.write(self._header())
        else:
            self._stream = self._completed_text(output) if resumed else open(output, "w", encoding="utf-8")
            if not resumed:
                self._stream.write(self._header())

    def _header(self) -> str:
        if self.format == "csv":
            return ",".join(self.layout.columns) + "\n"
        return json.dumps({"header": self.summary}, ensure_ascii=False, sort_keys=True) + "\n"

    def _completed_text(self, output: Path) -> IO[str]:
        """Whole steps kept, a partial step or line cut, the last released step written if missing."""
        header = self._header()
        if output.exists() and not output.is_file():  # a device such as /dev/full reads forever
            raise InvalidInputError(f"--output {output} is not a regular file: a resumed run completes its output file in place")
        try:
            text = output.read_text(encoding="utf-8") if output.exists() else ""
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidInputError(f"cannot read the output {output} to complete it: {error}") from None
        lines = text[: text.rfind("\n") + 1].splitlines(keepends=True)
        header_lines = header.count("\n")
        body = lines[header_lines:] if len(lines) >= header_lines else []
        steps = len(body) // len(self.keys)
        released = self.counters.released
        if not released - 1 <= steps <= released:
            raise InvalidInputError(f"--output {output} holds {steps} steps but the state has released {released}")
        kept = ("".join(lines[:header_lines]) if len(lines) >= header_lines else header) + "".join(body[: steps * len(self.keys)])
        stream = open(output, "w", encoding="utf-8")
        stream.write(kept)
        if steps < released:
            stream.write(self.render(released, *self.counters.step_rows(released, beta=self.beta)))
        stream.flush()
        os.fsync(stream.fileno())
        return stream

    def _complete_folder(self) -> None:
        assert self.output is not None
        folder, released = self.output, self.counters.released
        for leftover in folder.glob(".step-*.tmp"):
            leftover.unlink()
        names = sorted(path.name for path in folder.iterdir())
        steps = len(names)
        if names != [STEP_FILE.format(step) for step in range(1, steps + 1)] or not released - 1 <= steps <= released:
            raise InvalidInputError(
                f"--output {folder} holds {steps} file(s) but the state has released {released} step(s) "
                f"(expected {STEP_FILE.format(1)} … {STEP_FILE.format(max(released, 1))})"
            )
        if steps < released:
            counts, std, lower, upper = self.counters.step_rows(released, beta=self.beta)
            table = self.layout.table(step=released, counts=counts, std=std, lower=lower, upper=upper, summary=self.summary)
            write_step_file(folder, step=released, table=table)

    def write(self, step: int, counts: np.ndarray, std: float, lower: np.ndarray, upper: np.ndarray) -> None:
        try:
            if self._stream is not None:
                self._stream.write(self.render(step, counts, std, lower, upper))
                self._stream.flush()
                if self.durable:
                    os.fsync(self._stream.fileno())
                return
            table = self.layout.table(step=step, counts=counts, std=std, lower=lower, upper=upper, summary=self.summary)
            if self.folder:
                assert self.output is not None
                write_step_file(self.output, step=step, table=table)
            elif self._writer is not None:
                self._writer.write_table(table)
        except OSError as error:
            raise storage_error(self.output or "standard output", error, state=self.counters.journal is not None) from None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._stream is not None and self.output is not None:
            self._stream.close()


def releases_text(
    releases: KeyedReleases, output_format: str, *, header: dict | None = None, first: bool = True
) -> Iterator[str]:
    """The text of released steps read back from a state (``KeyedCounters.releases``), in the
    columns the count run printed (``Layout``): csv (the column names first) or jsonl (a header
    record first, ``header``), then one step's rows at a time; ``first``: with that first line
    (the first part of an output printed in parts)."""
    if output_format not in ("csv", "jsonl"):
        raise InvalidInputError(f"--format for keyed releases must be csv or jsonl, got {output_format!r}")
    layout = Layout(keys=releases.keys, show_keys=releases.show_keys, calendar=releases.calendar)
    if first and output_format == "csv":
        yield ",".join(layout.columns) + "\n"
    elif first:
        yield json.dumps({"header": header or {}}, ensure_ascii=False, sort_keys=True) + "\n"
    for column, step in enumerate(releases.steps.tolist()):
        counts, lower, upper = releases.counts[:, column], releases.lower[:, column], releases.upper[:, column]
        yield layout.text(output_format, step, counts, float(releases.std[column]), lower, upper)


def run_keyed_file(
    counters: KeyedCounters,
    *,
    source: Path | None,
    reader: EventReader,
    sink: KeyedSink,
    through: int,
    beta: float,
) -> None:
    """Release every step of the schedule into ``sink`` (a file input checked first: ``check_events``),
    with a progress bar over the public schedule on a terminal (``schedule_progress``). The events
    of steps the state has released are checked first (``partitions.StepInputs``, under the
    reader's ``released_events`` policy): a refusal comes before anything is released."""
    inputs = counters.step_inputs = StepInputs(counters, through=through, policy=reader.released_events)
    progress = schedule_progress(through=through, released=counters.released, rows_on_terminal=sink.output is None)
    closing: OSError | None = None
    try:
        if progress is not None:
            progress.start()
        for released in run_keyed(counters, inputs.events(reader.events(source)), beta=beta, through=through):
            sink.write(*released)
            if progress is not None:
                progress.update(progress.task_ids[0], completed=released[0])
    finally:
        if progress is not None:
            progress.stop()
        try:
            sink.close()  # the last buffered text is written here: a full disk can surface now
        except OSError as error:
            closing = error
        finally:
            counters.close()
    if closing is not None:  # only when nothing else went wrong (that error is the one raised)
        raise storage_error(sink.output or "standard output", closing, state=counters.journal is not None)


def check_events(source: Path | None, reader: EventReader) -> None:
    """With the "refuse" policy, read a file input whole and refuse it at its first invalid event
    (``InvalidInputError``) before anything is created or released."""
    if source is not None and reader.policy == "refuse":
        for _ in reader.events(source):
            pass
        reader.reset()


def row_fates(*, counters: KeyedCounters, reader: EventReader) -> dict[str, int]:
    """What became of every data row this run read, each row in exactly one category (so they
    add up to ``reader.rows_read``): the reader's ``ROW_FATES``; of the events handed on, those
    of released steps given exactly as released ("released_step_same_input") or set aside
    ("released_step_set_aside", ``partitions``); of the events of the steps this run releases,
    those the contribution bounds dropped or clipped ("cut_by_contribution_bounds") and the rest,
    counted in full ("counted"). Not private: for the operator log only."""
    inputs: StepInputs = counters.step_inputs
    cut = counters.dropped["over_bounds"] - inputs.cut_before
    fates = {"counted": inputs.tally.passed - cut, **reader.fates}
    fates["released_step_same_input"] = inputs.tally.rerun
    fates["released_step_set_aside"] = inputs.tally.set_aside
    fates["cut_by_contribution_bounds"] = cut
    return fates


def operator_log(path: Path | None, *, counters: KeyedCounters, reader: EventReader) -> None:
    """Append the run's data diagnostics (not private: never publish) to ``path``, when given:
    the rows read, what became of each (``row_fates``, adding up to the rows), the events counted
    with a clamped value, and the sums the record held before ``row_fates`` (this run's too)."""
    if path is None:
        return
    fates = row_fates(counters=counters, reader=reader)
    record = {
        "not_private": "diagnostics about the data: for the operator only, never publish",
        "rows": reader.rows_read,
        "rows_by_fate": fates,
        "values_clamped": reader.clamped,
        "released_events": reader.released_events,
        "dropped_unlisted_or_outside_schedule": reader.dropped,
        "invalid_events": reader.invalid,
        "over_contribution_bounds": fates["cut_by_contribution_bounds"],
        "released_steps": counters.released,
    }
    try:
        with open(path, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")
    except OSError as error:
        raise storage_error(path, error) from None
