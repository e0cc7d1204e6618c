"""Streams in and out: the single stream's input lines, the released rows' outputs, their metadata.

Input (``step_batches``): one step per line (a value, or d values separated by spaces or commas;
``column``: one field of a CSV with a header line), read in groups of the complete lines
available without waiting (``read1``), so a live stream is answered line by line and a file in
large groups; a run of lines that are each exactly "0" or "1" is taken without parsing. Every
value is an exact integer (``validation.parse_integer``: ASCII digits, no "_", no exponent).

What happens to an invalid line is a policy fixed before the first step (``INVALID_POLICIES``,
stated in the output's metadata): "refuse" checks a file whole before anything is released and
refuses it with an error naming the line (nothing released); on a pipe it is "zero". "zero"
counts an invalid line as a step of value 0 and "clamp" as the nearest value in [0, m] (an
unparsable line as 0): the release goes on, and where it stops never depends on the data.
"stop" stops at the first invalid line of a stream: the number of steps released then depends
on the data, so it is not private (docs/privacy.md, "Invalid input").

Output: "plain" (one count per line), "csv" (RFC 4180: the column names on the first line, then
one row per step) and "jsonl" (a header record, then one record per step); the run's metadata
(what runs, ε, horizon, unit, policy) goes to the JSON Lines header and, for csv, to a sidecar
``OUT.meta.json``. ``open_sink`` opens the output so that it holds each released step exactly
once across restarts (``complete_output``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import MAX_DIGITS, exact_integers, parse_integer

INVALID_POLICIES = ("refuse", "zero", "clamp", "stop")
FORMATS = ("plain", "csv", "jsonl")
CSV_COLUMNS = ("step", "count", "std", "lower", "upper")
MAX_FIELD = 1 << 20  # characters of one CSV field or line
_PLACES = np.array([10**k for k in range(18)], dtype=np.int64)  # the place values of a line of ≤ 18 digits

csv.field_size_limit(MAX_FIELD)


def standard_input() -> IO[bytes]:
    """The bytes of standard input (a text-only stand-in, as in tests, is read whole and encoded)."""
    binary = getattr(sys.stdin, "buffer", None)
    return binary if binary is not None else io.BytesIO(sys.stdin.read().encode("utf-8"))


class StepReader:
    """The steps of an input, in batches (module docstring): ``batches()`` yields (first line
    number, (m, d) array of exact integers). Invalid lines follow ``policy``; ``invalid`` counts
    them (an operator diagnostic: never released)."""

    def __init__(
        self,
        *,
        dimension: int,
        max_value: int,
        policy: str,
        header: bool = False,
        column: str | None = None,
        largest: int = 1 << 16,
    ) -> None:
        if policy not in INVALID_POLICIES:
            raise InvalidInputError(f"--invalid must be one of {', '.join(INVALID_POLICIES)}, got {policy!r}")
        self.dimension, self.max_value, self.policy = dimension, max_value, policy
        self.header = header or column is not None
        self.column, self.largest = column, largest
        self.invalid = 0
        self._select: int | None = None

    def batches(self, stream: IO[bytes]) -> Iterator[tuple[int, np.ndarray]]:
        number, pending, first = 0, b"", True
        while True:
            chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
            if not chunk:
                break
            if first and chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
            first = False
            pending += chunk
            cut = pending.rfind(b"\n")
            if cut < 0:
                if len(pending) > MAX_FIELD * 4:
                    raise InvalidInputError(f"line {number + 1}: longer than {MAX_FIELD * 4} bytes")
                continue
            complete, pending = pending[: cut + 1], pending[cut + 1 :]
            if self.header and number == 0:
                line, complete = complete.split(b"\n", 1)
                number = 1
                self._select = self._column_index(_decode(line, number=1))
            yield from self._steps(complete, number)
            number += complete.count(b"\n")
        if pending and not (self.header and number == 0):  # an unterminated last line is a step too
            yield from self._steps(pending + b"\n", number)

    def _steps(self, complete: bytes, number: int) -> Iterator[tuple[int, np.ndarray]]:
        codes = np.frombuffer(complete, dtype=np.uint8)
        if (
            self._select is None
            and self.dimension == 1
            and codes.size % 2 == 0
            and np.all(codes[1::2] == 10)
            and np.all((codes[0::2] == 48) | (codes[0::2] == 49))
        ):
            values: np.ndarray | None = codes[0::2].astype(np.int64) - 48  # every line is "0" or "1": no parsing needed
        else:
            values = self._plain_integers(codes) if self._select is None and self.dimension == 1 else None
        if values is not None:
            for start in range(0, len(values), self.largest):
                yield number + start + 1, values[start : start + self.largest].reshape(-1, 1)
            return
        rows: list[list[int]] = []
        first = number + 1
        for line in complete.split(b"\n")[:-1]:
            number += 1
            try:
                rows.append(self._row(line, number))
            except InvalidInputError:
                if rows and self.policy == "stop":  # the lines before the bad one, as one at a time would
                    yield first, exact_integers(rows)
                raise
            if len(rows) == self.largest:
                yield first, exact_integers(rows)
                rows, first = [], number + 1
        if rows:
            yield first, exact_integers(rows)

    def _plain_integers(self, codes: np.ndarray) -> np.ndarray | None:
        """The values of complete lines that are each 1 to 18 ASCII digits and at most m, read in
        one numpy pass (exact int64: every value is below 10^18); None when any line is anything
        else (the line-by-line parser then decides, with its messages and the policy)."""
        newline = codes == 10
        ends = np.flatnonzero(newline)
        starts = np.concatenate([[0], ends[:-1] + 1])
        lengths = ends - starts
        if not len(ends) or lengths.min() < 1 or lengths.max() > 18 or np.any((codes - 48 > 9) & ~newline):
            return None
        places = np.repeat(ends, lengths + 1) - np.arange(len(codes)) - 1  # a digit's power of ten; −1 at the line break
        terms = np.where(newline, 0, (codes.astype(np.int64) - 48) * _PLACES[np.maximum(places, 0)])
        values = np.add.reduceat(terms, starts)
        if self.max_value < 10**18 and int(values.max()) > self.max_value:
            return None
        return values

    def _row(self, line: bytes, number: int) -> list[int]:
        """One step's values, or the policy's stand-in for an invalid line."""
        try:
            text = _field(_decode(line, number=number), self._select, number=number)
            tokens = text.replace(",", " ").split()
            if len(tokens) != self.dimension:
                raise InvalidInputError(f"line {number}: expected {self.dimension} value(s), got {len(tokens)}")
            values = [parse_integer(token, what=f"line {number}", data=True) for token in tokens]
            expected = "0 or 1" if self.max_value == 1 else f"an integer from 0 to {self.max_value}"
            for value in values:
                if not 0 <= value <= self.max_value:
                    raise InvalidInputError(f"line {number}: a value is not {expected}")
            if sum(values) > self.max_value:
                raise InvalidInputError(f"line {number}: the values sum to more than --max-value {self.max_value}")
            return values
        except InvalidInputError:
            if self.policy in ("refuse", "stop"):
                raise
            self.invalid += 1
            if self.policy == "zero":
                return [0] * self.dimension
            return self._clamped(line)

    def _clamped(self, line: bytes) -> list[int]:
        """The nearest valid step to an invalid line (values clamped to [0, m], then scaled down
        to ℓ1 norm ≤ m by cutting from the last coordinate); an unparsable line is all zeros."""
        try:
            text = _field(line.decode("utf-8", errors="strict").strip(), self._select, number=0)
            values = [
                min(max(parse_integer(t, what="value", data=True), 0), self.max_value) for t in text.replace(",", " ").split()
            ]
        except (InvalidInputError, UnicodeDecodeError):
            return [0] * self.dimension
        if len(values) != self.dimension:
            return [0] * self.dimension
        excess = sum(values) - self.max_value
        for i in range(len(values) - 1, -1, -1):
            if excess <= 0:
                break
            cut = min(values[i], excess)
            values[i] -= cut
            excess -= cut
        return values

    def _column_index(self, header: str) -> int | None:
        if self.column is None:
            return None
        if len(header) > MAX_FIELD:
            raise InvalidInputError(f"line 1: a header of {len(header)} characters is too long")
        try:
            names = [name.strip() for name in next(csv.reader([header], strict=True))]
        except csv.Error as error:
            raise InvalidInputError(f"line 1: not a CSV header line ({error})") from None
        if self.column not in names:
            raise InvalidInputError(f"--column {self.column!r}: no such column in the header line 1 ({', '.join(names)})")
        return names.index(self.column)


def _field(text: str, select: int | None, *, number: int) -> str:
    """The step's value text: the whole line, or the selected CSV field; a blank is an error."""
    if select is not None:
        if len(text) > MAX_FIELD:
            raise InvalidInputError(f"line {number}: longer than {MAX_FIELD} characters")
        try:
            fields = next(csv.reader([text], strict=True)) if text else []
        except csv.Error as error:
            raise InvalidInputError(f"line {number}: not a CSV line ({error})") from None
        if len(fields) <= select:
            raise InvalidInputError(f"line {number}: {len(fields)} field(s), no column {select + 1}")
        text = fields[select].strip()
    if not text:
        raise InvalidInputError(f"line {number}: blank; every line is one step (write 0 for a step without events)")
    if len(text) > MAX_DIGITS * 4:
        raise InvalidInputError(f"line {number}: longer than {MAX_DIGITS * 4} characters")
    return text


def _decode(line: bytes, *, number: int) -> str:
    try:
        return line.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InvalidInputError(f"line {number}: not UTF-8 text") from None


def spool(path: Path) -> IO[bytes]:
    """The bytes of ``path`` read once into a private temporary file (no name, removed when
    closed), rewound: checked and then released from this copy, a FIFO, a process substitution
    or a file rewritten meanwhile can never release bytes that were not checked."""
    import shutil
    import tempfile

    copy = tempfile.TemporaryFile()
    try:
        with open(path, "rb") as stream:
            shutil.copyfileobj(stream, copy, 1 << 20)
        copy.seek(0)
    except BaseException:
        copy.close()
        raise
    return copy


def check_file(
    path: Path, reader: StepReader, *, horizon: int | None, skip: int = 0, first_step: int = 1, stream: IO[bytes] | None = None
) -> int:
    """Read a whole input file with ``reader`` before anything is released: the number of steps,
    or the error of its first invalid line (``InvalidInputError``); more steps than ``horizon``
    (the first line being step ``first_step``) is an error too, and fewer lines than ``skip``.
    With ``stream`` (its ``spool``) that is read instead of ``path``, and rewound after."""
    steps = 0
    with contextlib.nullcontext(stream) if stream is not None else open(path, "rb") as stream:
        for first, batch in reader.batches(stream):
            steps += len(batch)
            if horizon is not None and steps + first_step - 1 > horizon:
                steps += first_step - 1
                raise InvalidInputError(
                    f"line {first + len(batch) - (steps - horizon)}: more steps than the horizon {horizon} "
                    "(--extend goes on as an anytime counter)"
                )
        stream.seek(0)
    if steps < skip:
        raise InvalidInputError(f"{path} has {steps} steps, fewer than the {skip} already released")
    return steps


def schedule_progress(*, through: int, released: int, rows_on_terminal: bool):
    """A rich progress bar on standard error, over the public schedule (steps released of
    ``through``, from ``released`` for a resumed run), or None: shown only when standard error is
    a terminal and the rows do not go to that terminal too. It counts public steps only, never
    anything about the data."""

    def terminal(stream) -> bool:
        try:
            return bool(stream.isatty())
        except (AttributeError, ValueError):
            return False

    if not terminal(sys.stderr) or (rows_on_terminal and terminal(sys.stdout)):
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn("steps released"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    )
    progress.add_task("steps", total=through, completed=released)
    return progress


# ------------------------------------------------------------------------------------- output


def renderer(output_format: str, *, dimension: int) -> Callable[[int, dict], str]:
    """render(first 0-based step, columns) → the text of those steps; ``columns`` holds "counts"
    ((m,) or (m, d)) and, for csv and jsonl, "std", "lower", "upper". Int64 columns are written
    by numpy in one pass (``join_columns``); anything else (Python ints beyond int64) by
    ``obvious_renderer``, the same text line by line."""
    obvious = obvious_renderer(output_format, dimension=dimension)

    def render(first: int, columns: dict) -> str:
        counts = np.asarray(columns["counts"])
        fields: list[np.ndarray | Texts]
        pieces: Sequence[str]
        if output_format == "plain":
            fields = [counts] if dimension == 1 else list(counts.reshape(len(counts), -1).T)
            pieces = ["", *[" "] * (len(fields) - 1), "\n"]
        else:
            fields = [np.arange(first + 1, first + 1 + len(counts), dtype=np.int64), counts]
            fields += [_float_texts(columns["std"], json_float=output_format == "jsonl"), columns["lower"], columns["upper"]]
            pieces = ["", ",", ",", ",", ",", "\n"] if output_format == "csv" else JSON_PIECES
        text = join_columns(fields, pieces) if len(counts) else ""
        return obvious(first, columns) if text is None else text

    return render


def obvious_renderer(output_format: str, *, dimension: int) -> Callable[[int, dict], str]:
    """``renderer`` line by line in Python (any exact integers): the reference the fast path is
    tested against."""
    if output_format == "plain":
        if dimension == 1:
            return lambda first, columns: "".join(f"{count}\n" for count in columns["counts"].tolist())
        return lambda first, columns: "".join(" ".join(str(v) for v in row) + "\n" for row in columns["counts"].tolist())

    def render(first: int, columns: dict) -> str:
        records = zip(
            range(first + 1, first + 1 + len(columns["counts"])),
            columns["counts"].tolist(),
            columns["std"].tolist(),
            columns["lower"].tolist(),
            columns["upper"].tolist(),
            strict=True,
        )
        if output_format == "csv":
            return "".join(f"{step},{count},{std:.6g},{low},{high}\n" for step, count, std, low, high in records)
        return "".join(
            json.dumps({"step": step, "count": count, "std": float(f"{std:.6g}"), "lower": low, "upper": high}) + "\n"
            for step, count, std, low, high in records
        )

    return render


JSON_PIECES = ('{"step": ', ', "count": ', ', "std": ', ', "lower": ', ', "upper": ', "}\n")  # json.dumps of a record
_POWERS = np.array([10**k for k in range(1, 19)], dtype=np.int64)  # the digit counts of int64 values


@dataclass(frozen=True)
class Texts:
    """A text column for ``join_columns``: row i holds distinct text ``inverse[i]``, the bytes
    ``data[offsets[j] : offsets[j] + lengths[j]]`` (UTF-8) for text j."""

    data: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    inverse: np.ndarray

    @classmethod
    def of(cls, texts: Sequence[str]) -> Texts:
        """One row per text, in order."""
        joined = "\n".join(texts) + "\n"
        if joined.count("\n") == len(texts):  # no text holds a line break: cut the encoded whole at them
            data = np.frombuffer(joined.encode("utf-8"), dtype=np.uint8)
            ends = np.flatnonzero(data == 10)
            starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
        else:
            encoded = [text.encode("utf-8") for text in texts]
            data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
            ends = np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))
            starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        return cls(data=data, offsets=starts, lengths=ends - starts, inverse=np.arange(len(texts), dtype=np.int64))


def _float_texts(values, *, json_float: bool) -> Texts:
    """The column ``f"{v:.6g}"`` (csv) or ``json.dumps(float(f"{v:.6g}"))`` (jsonl) of float ``values``."""
    shown = list(map("{:.6g}".format, np.asarray(values, dtype=np.float64).reshape(-1).tolist()))
    if json_float:
        shown = [json.dumps(float(text)) for text in shown]
    return Texts.of(shown)


def join_columns(fields: Sequence[np.ndarray | Texts], pieces: Sequence[str]) -> str | None:
    """Rows of text, row i = pieces[0] field₀[i] pieces[1] field₁[i] … pieces[-1], written by numpy
    in one buffer: integer fields in decimal as ``str`` writes them, ``Texts`` as they are. None
    (the caller writes the rows itself) when an integer field is not of an integer dtype or
    reaches 10^18 in magnitude."""
    columns: list[np.ndarray | Texts] = []
    widths = []
    for field in fields:
        if isinstance(field, Texts):
            columns.append(field)
            widths.append(field.lengths[field.inverse])
            continue
        array = np.asarray(field)
        if array.dtype.kind not in "iu" or (array.size and not -(10**18) < int(array.min()) <= int(array.max()) < 10**18):
            return None
        array = array.astype(np.int64, copy=False)
        columns.append(array)
        widths.append(1 + np.searchsorted(_POWERS, np.abs(array), side="right") + (array < 0))
    encoded = [np.frombuffer(piece.encode("utf-8"), dtype=np.uint8) for piece in pieces]
    row_widths = sum(widths) + sum(len(piece) for piece in encoded)
    ends = np.cumsum(row_widths)
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    position = ends - row_widths
    for index, piece in enumerate(encoded):
        for offset, byte in enumerate(piece.tolist()):
            out[position + offset] = byte
        position = position + len(piece)
        if index < len(columns):
            column = columns[index]
            if isinstance(column, Texts):
                _write_texts(out, column, position)
            else:
                _write_integers(out, column, position, position + widths[index])
            position = position + widths[index]
    return out.tobytes().decode("utf-8")


def _write_integers(out: np.ndarray, values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """The decimal digits of int64 ``values`` (|v| < 10^18), each in [starts, ends): a '-' at the
    start of the negative ones, the digits ending just before ``ends``."""
    out[starts[values < 0]] = 45
    left, position = np.abs(values), ends - 1
    while True:
        out[position] = (48 + left % 10).astype(np.uint8)
        left //= 10
        more = left > 0
        if not more.any():
            break
        left, position = left[more], position[more] - 1


def _write_texts(out: np.ndarray, texts: Texts, starts: np.ndarray) -> None:
    """Each row's text at ``starts``."""
    lengths = texts.lengths[texts.inverse]
    total = int(lengths.sum())
    if total:
        within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[np.repeat(starts, lengths) + within] = texts.data[np.repeat(texts.offsets[texts.inverse], lengths) + within]


def header_text(output_format: str, summary: dict) -> str | None:
    """The output's first line(s): csv the column names (its metadata goes to the sidecar), jsonl a
    header record, plain none."""
    if output_format == "csv":
        return ",".join(CSV_COLUMNS)
    if output_format == "jsonl":
        return json.dumps({"header": summary}, ensure_ascii=False, sort_keys=True)
    return None


def write_sidecar(output: Path, summary: dict) -> Path:
    """``OUT.meta.json``: the run's metadata (seeded or not included) beside a csv or plain output (atomic)."""
    from pure_dp_mf.atomic import atomic_write_text

    path = output.with_name(output.name + ".meta.json")
    atomic_write_text(path, json.dumps(summary, ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    os.chmod(path, 0o644)
    return path
