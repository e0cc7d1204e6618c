"""Argument checks shared by every module, each raising ``InvalidInputError`` with a clear message."""

from __future__ import annotations

import math
import numbers
import re
import sys

import numpy as np

from pure_dp_mf.errors import InvalidInputError


def check_size(value: object, *, name: str, minimum: int = 1, maximum: int | None = None) -> int:
    """Return ``value`` as an int, refusing non-integers and values outside [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InvalidInputError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise InvalidInputError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{name} must be at most {maximum}, got {value}")
    return value


LARGEST_N = 2**1000
"""The longest stream the closed forms (compare, lift) evaluate: their errors grow as log(n)³ and
their sizes as n, and past this float64 cannot hold them."""

LARGEST_STEP = 2**62
"""The largest step an engine addresses (steps and term positions are int64 indices)."""


def check_positive(value: object, *, name: str) -> float:
    """Return ``value`` as a float, refusing NaN, infinities and values ≤ 0."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be a positive number, got {value!r}") from None
    if not np.isfinite(number) or number <= 0:
        raise InvalidInputError(f"{name} must be a positive finite number, got {value!r}")
    return number


class Epsilon(float):
    """A checked privacy parameter ε (made only by ``check_epsilon``): a float that carries its
    check, so that the layers a counter passes it through (the spec, the planner's ranking, the
    mechanisms) use it as it is and ε is validated once per counter built."""

    __slots__ = ()


def check_epsilon(value: object, *, name: str = "epsilon") -> Epsilon:
    """A privacy parameter ε: positive, finite, and with 1/ε² finite (errors scale as 1/ε²).
    An ``Epsilon`` (already checked) is returned as it is."""
    if type(value) is Epsilon:
        return value
    epsilon = check_positive(value, name=name)
    square = epsilon * epsilon  # a float product: inf or 0 on overflow or underflow, never an exception
    if square == 0 or not np.isfinite(square) or not np.isfinite(1 / square) or 1 / square == 0:
        direction = "overflow" if epsilon < 1 else "underflow to 0"
        raise InvalidInputError(
            f"{name} = {value!r} is out of range: the errors, which scale as 1/{name}², {direction} in float64"
        )
    return Epsilon(epsilon)


def check_beta(value: object, *, name: str = "--beta") -> float:
    """β, the probability an interval may miss: a number in (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise InvalidInputError(f"{name} must be a number in (0, 1), got {value!r}")
    return float(value)


UNIT_EPSILON = check_epsilon(1.0)
"""ε = 1, checked: the default ε at which the mechanisms' errors are stated (they scale as 1/ε²)."""


def check_matrix(matrix: object, *, name: str, rows: int | None = None, columns: int | None = None) -> np.ndarray:
    """Return ``matrix`` as a finite float64 2-D array, naming the first problem found."""
    try:
        array = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be a numeric matrix") from None
    if array.ndim != 2:
        raise InvalidInputError(f"{name} must be 2-dimensional, got shape {array.shape}")
    if rows is not None and array.shape[0] != rows:
        raise InvalidInputError(f"{name} must have {rows} rows, got shape {array.shape}")
    if columns is not None and array.shape[1] != columns:
        raise InvalidInputError(f"{name} must have {columns} columns, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise InvalidInputError(f"{name} contains NaN or infinity (first at index {bad})")
    return array


_INTEGER_TEXT = re.compile(r"-?[0-9]+(?:\.0*)?")
MAX_DIGITS = 4000  # longer integer text is refused (Python's own limit is 4300 digits)


def parse_integer(text: str, *, what: str, data: bool = False) -> int:
    """An integer written in ASCII decimal digits ("12", "-3", also "12.0"), exactly, as a Python
    int. Anything else is refused with ``InvalidInputError`` naming ``what``: no "_", no exponent,
    no fraction, no digits of other scripts, no text longer than ``MAX_DIGITS`` characters.
    ``data``: the text is private input, so the refusal names ``what`` (a line, a column) only,
    never the text (a flag's value is shown, to help the user correct it)."""
    text = text.strip()
    if len(text) > MAX_DIGITS:
        raise InvalidInputError(
            f"{what}: the number is too long" if data else f"{what}: a number of {len(text)} characters is too long"
        )
    if not text.isascii() or not _INTEGER_TEXT.fullmatch(text):
        if data:
            raise InvalidInputError(f"{what}: not an integer (ASCII decimal digits)")
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise InvalidInputError(f"{what}: {shown!r} is not an integer")
    return int(text.split(".")[0])


def _as_integer(value: object, *, expected: str) -> int:
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if math.isfinite(number) and number.is_integer() and abs(number) <= 2**53:
            return int(number)
    raise InvalidInputError(f"a stream value (of type {type(value).__name__}) is not {expected}")


def exact_integers(values: object) -> np.ndarray:
    """Exact integers (nested lists or an array of Python ints) as an int64 array when every one
    lies in (−2⁶², 2⁶²), where sums of two stay exact, else as Python ints (dtype object)."""
    array = np.asarray(values, dtype=object)
    small = all(-(2**62) < int(value) < 2**62 for value in array.ravel())
    return np.array(values, dtype=np.int64) if small else array


def check_steps(values: object, *, dimension: int, max_value: int = 1) -> np.ndarray:
    """A batch of steps as an (m, d) array of exact integers in [0, m] (m = ``max_value``) with
    row sums ≤ m (int64 when every value fits, else Python ints), or a clear error. Integers
    (Python or numpy) are taken exactly; a float is accepted only when it is an integer below
    2^53 (exact); strings, NaN and other types are refused."""
    expected = "0 or 1" if max_value == 1 else f"an integer from 0 to {max_value}"
    if isinstance(values, np.ndarray) and values.dtype.kind in "iub":
        array = values.astype(np.int64)
    else:
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, np.ndarray)):
            if isinstance(values, (numbers.Number, np.generic)):
                values = [values]
            else:
                raise InvalidInputError(f"stream values must be integers ({expected}), got {type(values).__name__}")
        try:
            raw = np.asarray(values, dtype=object)
        except ValueError:
            raise InvalidInputError(
                "stream values must form a rectangular batch (every step with the same number of values)"
            ) from None
        flat = [_as_integer(value, expected=expected) for value in raw.ravel()]
        array = exact_integers(flat).reshape(raw.shape)
    if dimension == 1 and array.ndim <= 1:
        array = array.reshape(-1, 1)
    if array.ndim != 2 or array.shape[1] != dimension:
        raise InvalidInputError(f"expected steps of dimension {dimension}, got an array of shape {array.shape}")
    where = (lambda row: f" (row {row} of the batch)") if array.shape[0] > 1 else (lambda row: "")
    bad = (array < 0) | (array > max_value)
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise InvalidInputError(f"a stream value is not {expected}{where(row)}")
    if dimension > 1:
        totals = array.astype(object).sum(axis=1)
        over = [i for i, total in enumerate(totals.tolist()) if total > max_value]
        if over:
            row = over[0]
            if max_value == 1:
                raise InvalidInputError(f"a step has {totals[row]} ones{where(row)}; at most one per step is allowed")
            raise InvalidInputError(
                f"a step's values sum to {totals[row]}{where(row)}; at most {max_value} per step is allowed (ℓ1 bound)"
            )
    return array


# ------------------------------------------------------------------ hostile inputs: JSON, numbers, sizes

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in any JSON document the package reads."""
MAX_JSON_BYTES = 64 << 20
"""Largest JSON document read (64 MiB): claims, certificates, strategies, factorization metadata."""
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)


def _shown(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def parse_json(text: str | bytes, *, what: str, parse_float=None, parse_int=None, max_depth: int = MAX_JSON_DEPTH) -> object:
    """A JSON document, or ``InvalidInputError`` naming ``what``: malformed JSON, a document
    larger than ``MAX_JSON_BYTES``, nesting deeper than ``max_depth`` (also the 200 000-deep
    documents that exhaust Python's recursion), or an error raised by a number hook."""
    if len(text) > MAX_JSON_BYTES:
        raise InvalidInputError(f"{what}: a JSON document of {len(text)} bytes is above the limit of {MAX_JSON_BYTES} bytes")
    import json  # here, so that the module's imports stay as they are

    try:
        document = json.loads(text, parse_float=parse_float, parse_int=parse_int)
    except RecursionError:
        raise InvalidInputError(f"{what}: JSON nested deeper than {max_depth} levels") from None
    except InvalidInputError:
        raise
    except (ValueError, TypeError) as error:  # JSONDecodeError, UnicodeDecodeError, integers beyond 4300 digits
        raise InvalidInputError(f"{what}: not valid JSON ({_shown(str(error), 200)})") from None
    stack = [(document, 1)]
    while stack:  # iterative: a deep document must not exhaust the stack here either
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > max_depth:
                raise InvalidInputError(f"{what}: JSON nested deeper than {max_depth} levels")
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
    return document


def parse_float_text(text: str, *, what: str) -> float:
    """A float written in ASCII decimal notation ("1.5", "-2e-3", also "nan" and "inf", which
    callers refuse as not finite where they must), or ``InvalidInputError``: no "_", no digits
    of other scripts, no text longer than ``MAX_DIGITS`` characters."""
    text = text.strip()
    if len(text) > MAX_DIGITS:
        raise InvalidInputError(f"{what}: a number of {len(text)} characters is too long")
    if not text.isascii() or not _FLOAT_TEXT.fullmatch(text):
        raise InvalidInputError(f"{what}: {_shown(text)!r} is not a number")
    return float(text)


def check_entries(shape: tuple[int, ...], *, limit: int, what: str) -> int:
    """The number of entries of an array of ``shape``, refused (``InvalidInputError``) above
    ``limit`` before anything of that size is allocated."""
    entries = math.prod(int(size) for size in shape)
    if entries > limit:
        shown = tuple(int(size) for size in shape)
        raise InvalidInputError(f"{what}: shape {shown} has {entries} entries, above the limit of {limit} entries")
    return entries


def read_bytes_limited(path, *, limit: int, what: str) -> bytes:
    """The bytes of the file ``path``, refused (``InvalidInputError``) when it holds more than
    ``limit`` bytes, without reading more than ``limit + 1`` of them."""
    chunks, total = [], 0
    try:
        with open(path, "rb") as stream:
            while total <= limit:  # in blocks: read(limit + 1) would reserve limit + 1 bytes at once
                block = stream.read(min(1 << 20, limit + 1 - total))
                if not block:
                    break
                chunks.append(block)
                total += len(block)
    except OSError as error:
        raise InvalidInputError(f"{what}: cannot read {path} ({error.strerror or type(error).__name__})") from None
    if total > limit:
        raise InvalidInputError(f"{what}: the file is larger than the limit of {limit} bytes")
    return b"".join(chunks)


def issparse(matrix: object) -> bool:
    """``scipy.sparse.issparse`` without importing scipy.sparse: a sparse matrix exists only once
    that module has been imported (counting never imports it)."""
    module = sys.modules.get("scipy.sparse")
    return module is not None and bool(module.issparse(matrix))
