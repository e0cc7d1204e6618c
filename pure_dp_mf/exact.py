"""Exact arithmetic for certificates (docs/certificates.md; Arkhipov & Kalinin, section 2.1).

Floats may search, only integers and rationals prove. This module holds the exact primitives
the certifier and the verifier (``certify.py``) are built from:

* **Dyadic matrices.** A matrix on the grid 2^-g is handled as its integer numerators N (the
  matrix is N·2^-g): numpy int64 arrays while they fit (for the cheap steps: differences,
  sums), flint ``fmpz_mat`` for products (multi-modular, fast), with the exponents added.
  ``round_to_grid`` rounds a float64 matrix to the nearest grid point exactly (multiplying a
  float by 2^g is exact, ``rint`` of a float is exact); ``grid_integers`` returns N for a matrix
  on the grid and refuses one that is not (or rounds first, with ``nearest=True``).
* **Row and column sums** of integer matrices (ℓ1 and squared ℓ2), as Python integers.
* **Square roots from above.** ``sqrt_upper(q)`` = y/2^b with y = ⌈√⌈q·4^b⌉⌉ (integer square
  root): y² ≥ ⌈q·4^b⌉ ≥ q·4^b, hence (y/2^b)² ≥ q, and y/2^b < √q + 2^-b + 2^-b.
* **Logarithms from below.** ``log2_lower_bound(x)`` for an integer x ≥ 2: with 2^e ≤ x < 2^(e+1),
  y = x/2^e ∈ [1, 2) and z = (y − 1)/(y + 1) ∈ [0, 1/3),

      ln y = 2·Σ_{j≥0} z^(2j+1)/(2j+1)           (every term ≥ 0: a partial sum is a lower bound)
      ln 2 = 2·Σ_{j≥0} 3^-(2j+1)/(2j+1)          (a partial sum up to j < J plus the tail bound
             ≤ 2·3^-(2J+1)/((2J+1)·(1 − 1/9)) is an upper bound)

  so log₂ x = e + ln y/ln 2 ≥ e + (partial sum)/(ln 2 upper bound). J = 48 terms leave less than
  2^-150. The result is then rounded down to a multiple of 2^-64 and lowered by one more 2^-64
  (a margin the verifier's check below needs); for a power of two the exact integer e is returned.
* **Checking a logarithm bound with integers only.** ``log2_lower_bound_holds(a/2^s, x)`` decides
  2^(a/2^s) ≤ x, i.e. 2^a ≤ x^(2^s), without forming x^(2^s): it squares s times, keeping the top
  256 bits and truncating (a lower bound of x^(2^s) of the form m·2^f), and tests m·2^f ≥ 2^a.
  Truncation only lowers the left side, so "holds" is a proof; it can say "does not hold" for a
  true bound only within a relative 2^-190 of x^(2^s), which the certifier's margin of a factor
  2 (one unit of 2^-64 in the exponent) excludes. This is the verifier's route, independent of
  the series used by the certifier.
* **Decimal renderings.** ``decimal_ceil(q, digits=12)`` is the smallest decimal with ``digits``
  significant digits that is ≥ q (for upper bounds), ``decimal_floor`` the largest that is ≤ q
  (for lower bounds); ``decimal_string`` writes a decimal-valued rational exactly.
* **JSON fractions.** {"numerator": "…", "denominator": "…"} with decimal-integer strings.
* **Parsing written numbers exactly** (``parse_number``, ``parse_decimal``, ``fraction_from_json``),
  with at most ``MAX_NUMBER_DIGITS`` digits and exponents within ±``MAX_DECIMAL_EXPONENT``, so
  that a hostile ``1e999999999`` is refused at once instead of expanded.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, lru_cache
from typing import TypeAlias

import flint
import gmpy2
import numpy as np

from pure_dp_mf.errors import InvalidInputError

Rational: TypeAlias = Fraction | gmpy2.mpq | int

GRID_BITS = 32
"""g: shipped encoders live on the dyadic grid 2^-g (the trainer rounds to it, certificates use it)."""
LOG_BITS = 64
_SERIES_TERMS = 48
_SQUARING_BITS = 256
_INTEGER = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?")


def mpq(value: Rational) -> gmpy2.mpq:
    """A gmpy2 rational from an int, Fraction or mpq (never from a float)."""
    if isinstance(value, float):
        raise InvalidInputError("exact arithmetic refuses floats")
    if isinstance(value, Fraction):
        return gmpy2.mpq(value.numerator, value.denominator)
    return gmpy2.mpq(value)


def fraction(value: Rational) -> Fraction:
    """A ``fractions.Fraction`` from an int, Fraction or mpq."""
    value = mpq(value)
    return Fraction(int(value.numerator), int(value.denominator))


def floor(value: Rational) -> int:
    """⌊value⌋, exactly (gmpy2's floor/ceil of an mpq go through a 53-bit float: never use them)."""
    q = mpq(value)
    return int(q.numerator) // int(q.denominator)


def ceil(value: Rational) -> int:
    """⌈value⌉, exactly."""
    q = mpq(value)
    return -(-int(q.numerator) // int(q.denominator))


# ------------------------------------------------------------------ dyadic matrices


def round_to_grid(matrix: np.ndarray, *, grid_bits: int) -> tuple[np.ndarray, bool]:
    """(M̃, changed): M̃ = round(M·2^g)·2^-g in float64 (exact), and whether any entry moved.

    Every float64 multiple of 2^-g with |value| < 2^(1023-g) is representable, so M̃ is the
    exact nearest grid point (ties to even) of every entry of M.
    """
    array = np.asarray(matrix, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise InvalidInputError("cannot round a matrix with NaN or infinity to a grid")
    scaled = np.ldexp(array, grid_bits)
    if not np.all(np.isfinite(scaled)):
        raise InvalidInputError(f"matrix entries are too large for the grid 2^-{grid_bits}")
    rounded = np.rint(scaled)
    return np.ldexp(rounded, -grid_bits), not np.array_equal(rounded, scaled)


def grid_integers(matrix: np.ndarray, *, grid_bits: int, nearest: bool = False, name: str = "matrix") -> np.ndarray:
    """N with matrix = N·2^-g exactly, as an int64 array (object array of Python ints when an
    entry reaches 2^62). ``nearest=True`` rounds to the nearest grid point first; otherwise a
    matrix off the grid is refused."""
    array = np.asarray(matrix, dtype=np.float64)
    if nearest:
        array = round_to_grid(array, grid_bits=grid_bits)[0]
    scaled = np.ldexp(array, grid_bits)
    if not np.all(np.isfinite(scaled)) or not np.array_equal(np.rint(scaled), scaled):
        raise InvalidInputError(f"{name} is not on the grid 2^-{grid_bits}")
    if np.all(np.abs(scaled) < 2.0**62):
        return scaled.astype(np.int64)
    return np.array([[int(v) for v in row] for row in scaled.tolist()], dtype=object)  # int(float) is exact


def integer_matrix(values: np.ndarray) -> flint.fmpz_mat:
    """An ``fmpz_mat`` from an integer array (int64 or object of Python ints), exactly."""
    array = np.asarray(values)
    rows, columns = array.shape
    return flint.fmpz_mat(
        rows, columns, [int(v) for v in array.ravel().tolist()] if array.dtype == object else array.ravel().tolist()
    )


@contextlib.contextmanager
def flint_threads(threads: int | None = None) -> Iterator[None]:
    """Let FLINT's matrix products use ``threads`` threads (default: ``PURE_DP_MF_FLINT_THREADS``
    if set, else every core, at most 8) inside the block, and restore the previous setting after. Products stay exact; only their speed changes."""
    previous = flint.ctx.threads
    if threads is None:
        threads = int(os.environ.get("PURE_DP_MF_FLINT_THREADS", 0)) or max(1, min(os.cpu_count() or 1, 8))
    flint.ctx.threads = threads
    try:
        yield
    finally:
        flint.ctx.threads = previous


def subtract_scaled_identity(matrix: flint.fmpz_mat, scale: int) -> flint.fmpz_mat:
    """matrix − scale·I in place (square ``fmpz_mat``), without forming I; returns the matrix."""
    for i in range(matrix.nrows()):
        matrix[i, i] = matrix[i, i] - scale
    return matrix


@dataclass(frozen=True)
class NeumannSeries:
    """The terms of the Neumann-series bound of L = T_k·R̃⁻¹ around a float decoder L̃ (``neumann_series``).

    With G = (L̃R̃ − T_k)·T_k⁻¹ and ρ ≥ ‖G‖ (a norm consistent with the bound sought), ρ < 1 proves
    R̃ invertible and L − L̃ = E₁ − G·(L − L̃) with E₁ = −G·L̃, so row by row (ρ the ∞→∞ norm) or
    in Frobenius norm (ρ the geometric mean of the ∞→∞ and 1→1 norms, a bound of ‖G‖₂)
    ‖L − L̃‖ ≤ ‖E₁‖/(1 − ρ), and L = (L̃ + E₁) + (L − L̃ − E₁) with ‖L − L̃ − E₁‖ ≤ ρ‖E₁‖/(1 − ρ).
    ``first_squares``/``second_squares`` are the row sums of squares of E₁ and of L̃ + E₁, as
    integers scaled by 2^(2·``scale_bits``)."""

    rho: gmpy2.mpq
    first_squares: list[int]
    second_squares: list[int] | None
    scale_bits: int


def neumann_series(
    P: np.ndarray,
    M_exact: flint.fmpz_mat | np.ndarray,
    *,
    grid_bits: int,
    decoder_bits: int,
    norm: str = "rows",
    second_order: bool = True,
    row_block: int | None = None,
) -> NeumannSeries:
    """The Neumann-series terms for R̃ = P·2^-g and L̃ = M·2^-h (``NeumannSeries``), in integers:
    the one assembly of this bound, shared by the certifier, the claims checker and the exact
    release (the verifier keeps its own, independent route). ``norm`` "rows" bounds ‖G‖∞→∞
    (row-wise bounds), "frobenius" ‖G‖₂ ≤ √(‖G‖∞→∞·‖G‖₁→₁).

    ``row_block``: form G, E₁ = −G·L̃ and L̃ + E₁ that many rows at a time (all at once if None).
    Row i of G is M_i·(P·T_k⁻¹) − 2^(g+h)·e_i and row i of E₁ is −G_i·M, so a block of rows needs
    only its own rows of M; the row sums, the column sums |G| (for ‖G‖₁→₁) and the squares are
    accumulated block by block (M as an integer array makes the blocks cheap to cut). Every quantity is an exact integer, so the result is identical
    for every block size; only the peak memory (a few block×k integer matrices besides P, M and
    P·T_k⁻¹) and the speed change."""
    shift = grid_bits + decoder_bits
    M_array = M_exact if isinstance(M_exact, np.ndarray) else None
    M_whole: flint.fmpz_mat = integer_matrix(M_exact) if isinstance(M_exact, np.ndarray) else M_exact
    k = M_whole.nrows()
    block = k if row_block is None else max(1, min(int(row_block), k))
    Q = np.asarray(P).copy()
    Q[:, :-1] -= np.asarray(P)[:, 1:]  # P·T_k⁻¹: each column minus the next
    Q_exact = integer_matrix(Q)
    del Q
    row_sums: list[int] = []
    column_sums = [0] * M_whole.ncols() if norm != "rows" else []
    first: list[int] = []
    second: list[int] | None = [] if second_order else None
    for start in range(0, k, block):
        stop = min(start + block, k)
        if (start, stop) == (0, k):
            M_block = M_whole
        else:
            M_block = integer_matrix(M_array[start:stop]) if M_array is not None else _row_slice(M_whole, start, stop)
        G = M_block * Q_exact  # G·2^(g+h), rows start…stop−1, before the identity
        for i in range(start, stop):
            G[i - start, i] = G[i - start, i] - (1 << shift)
        G_rows = rows_of(G)
        row_sums.extend(row_abs_sums(G_rows))
        if norm != "rows":
            column_sums = [a + b for a, b in zip(column_sums, column_abs_sums(G_rows), strict=True)]
        del G_rows
        E1 = G * M_whole * -1  # E₁·2^(g+2h), the same rows
        del G
        first.extend(row_sums_of_squares(rows_of(E1)))
        if second is not None:
            second.extend(row_sums_of_squares(rows_of(M_block * (1 << shift) + E1)))  # (L̃ + E₁)·2^(g+2h)
        del E1, M_block
    if norm == "rows":
        rho = gmpy2.mpq(max(row_sums), gmpy2.mpz(2) ** shift)
    else:
        rho = sqrt_upper(gmpy2.mpq(max(row_sums) * max(column_sums), gmpy2.mpz(4) ** shift))
    return NeumannSeries(rho=rho, first_squares=first, second_squares=second, scale_bits=shift + decoder_bits)


def _row_slice(matrix: flint.fmpz_mat, start: int, stop: int) -> flint.fmpz_mat:
    """Rows start…stop−1 of an ``fmpz_mat`` as a new one (exact copies of the entries)."""
    columns = matrix.ncols()
    return flint.fmpz_mat(stop - start, columns, [matrix[i, j] for i in range(start, stop) for j in range(columns)])


def rows_of(matrix: flint.fmpz_mat) -> list[list]:
    """The entries of an ``fmpz_mat`` row by row (flint integers: exact, with Python arithmetic)."""
    return matrix.tolist()


def row_sums_of_squares(rows: list[list[int]]) -> list[int]:
    """Σ_j N_ij² for every row i."""
    return [int(sum(v * v for v in row)) for row in rows]


def row_abs_sums(rows: list[list[int]]) -> list[int]:
    """Σ_j |N_ij| for every row i."""
    return [int(sum(abs(v) for v in row)) for row in rows]


def column_abs_sums(rows) -> list[int]:
    """Σ_i |N_ij| for every column j (rows: a list of rows or an integer array), exactly.

    An int64 array whose sums cannot overflow (max |N|·rows < 2^62) is summed by numpy."""
    if isinstance(rows, np.ndarray) and rows.dtype == np.int64 and rows.ndim == 2:
        if int(np.abs(rows).max(initial=0)) * max(rows.shape[0], 1) < 2**62:
            return [int(v) for v in np.abs(rows).sum(axis=0)]
    return [sum(abs(int(v)) for v in column) for column in zip(*rows, strict=True)]


# ------------------------------------------------------------------ square roots, logarithms


def sqrt_upper(value: Rational, *, bits: int = 128) -> gmpy2.mpq:
    """A rational r = y/2^bits with r² ≥ value and r < √value + 2^(1-bits) (value ≥ 0)."""
    q = mpq(value)
    if q < 0:
        raise InvalidInputError("square root of a negative number")
    target = gmpy2.mpz(ceil(q * gmpy2.mpz(4) ** bits))
    y = gmpy2.isqrt(target)
    if y * y < target:
        y += 1
    return gmpy2.mpq(y, gmpy2.mpz(2) ** bits)


def sqrt_lower(value: Rational, *, bits: int = 128) -> gmpy2.mpq:
    """A rational r = y/2^bits with r² ≤ value and r > √value − 2^(-bits) (value ≥ 0)."""
    q = mpq(value)
    if q < 0:
        raise InvalidInputError("square root of a negative number")
    return gmpy2.mpq(gmpy2.isqrt(gmpy2.mpz(floor(q * gmpy2.mpz(4) ** bits))), gmpy2.mpz(2) ** bits)


def _atanh_series(z: gmpy2.mpq, terms: int) -> gmpy2.mpq:
    """2·Σ_{j<terms} z^(2j+1)/(2j+1)."""
    total, power, square = gmpy2.mpq(0), z, z * z
    for j in range(terms):
        total += power / (2 * j + 1)
        power *= square
    return 2 * total


def log2_lower_bound(x: int) -> gmpy2.mpq:
    """A rational a/2^64 ≤ log₂ x (x ≥ 2 an integer), within 2^-62 (see the module docstring)."""
    x = int(x)
    if x < 2:
        raise InvalidInputError(f"log2 lower bounds need an integer x >= 2, got {x}")
    e = x.bit_length() - 1
    if x == 1 << e:
        return gmpy2.mpq(e)
    z = gmpy2.mpq(x - (1 << e), x + (1 << e))
    ln_y_lower = _atanh_series(z, _SERIES_TERMS)
    third = gmpy2.mpq(1, 3)
    tail = 2 * third ** (2 * _SERIES_TERMS + 1) / ((2 * _SERIES_TERMS + 1) * (1 - third * third))
    ln_2_upper = _atanh_series(third, _SERIES_TERMS) + tail
    bound = e + ln_y_lower / ln_2_upper
    scale = gmpy2.mpz(2) ** LOG_BITS
    return gmpy2.mpq(floor(bound * scale) - 1, scale)


@cache
def ln2_bounds(terms: int = 80) -> tuple[Fraction, Fraction]:
    """Rational (lower, upper) bounds on ln 2 = Σ_{k≥1} 1/(k·2^k); the tail after K terms is
    below Σ_{k>K} 2^{-k}/(K+1) = 1/((K+1)·2^K)."""
    lower = sum((Fraction(1, k * 2**k) for k in range(1, terms + 1)), Fraction(0))
    return lower, lower + Fraction(1, (terms + 1) * 2**terms)


@lru_cache(maxsize=256)
def log2_bounds(m: int, *, bits: int = 16) -> tuple[Fraction, Fraction]:
    """Rational (lower, upper) bounds on log₂ m with width ≤ 2^-bits (equal when m is a power of 2).

    With D = 2^bits and x = m^D: 2^(ℓ−1) ≤ x < 2^ℓ for ℓ = bit length of x, so
    (ℓ−1)/D ≤ log₂ m ≤ ℓ/D, with equality on the left exactly when x is a power of two."""
    if int(m) < 1:
        raise InvalidInputError(f"log2 bounds need an integer m >= 1, got {m}")
    m = int(m)
    scale = 1 << bits
    power = gmpy2.mpz(m) ** scale
    length = int(power.bit_length())
    lower = Fraction(length - 1, scale)
    exact = power == gmpy2.mpz(1) << (length - 1)
    return lower, (lower if exact else Fraction(length, scale))


def log2_lower_bound_holds(bound: Rational, x: int) -> bool:
    """Decide ``bound ≤ log₂ x`` with integers only, for bound = a/2^s (s ≤ 64), x ≥ 2.

    Returns True only when proven (truncated repeated squaring, see the module docstring).
    Raises ``InvalidInputError`` for a bound whose denominator is not a power of two ≤ 2^64.
    """
    q = mpq(bound)
    denominator = int(q.denominator)
    s = denominator.bit_length() - 1
    if denominator != 1 << s or s > LOG_BITS:
        raise InvalidInputError(f"a log2 bound must have a power-of-two denominator <= 2^{LOG_BITS}, got {q}")
    a = int(q.numerator)
    if a <= 0:
        return x >= 1
    mantissa, exponent = int(x), 0
    for _ in range(s):
        mantissa *= mantissa
        exponent *= 2
        excess = mantissa.bit_length() - _SQUARING_BITS
        if excess > 0:
            mantissa >>= excess
            exponent += excess
    # mantissa·2^exponent ≤ x^(2^s); is it ≥ 2^a?
    if a <= exponent:
        return True
    if a - exponent >= mantissa.bit_length():  # 2^(a−e) > mantissa: decided without forming 2^(a−e)
        return False
    return mantissa >= 1 << (a - exponent)


# ------------------------------------------------------------------ decimals and JSON fractions


def _decimal_exponent(q: gmpy2.mpq) -> int:
    """e with 10^e ≤ q < 10^(e+1), for q > 0."""
    e = len(str(floor(q))) - 1 if q >= 1 else -len(str(floor(1 / q)))
    while gmpy2.mpq(10) ** e > q:
        e -= 1
    while gmpy2.mpq(10) ** (e + 1) <= q:
        e += 1
    return e


def decimal_ceil(value: Rational, *, digits: int = 12, extra_units: int = 0) -> gmpy2.mpq:
    """The smallest decimal with ``digits`` significant digits that is ≥ value, plus
    ``extra_units`` units in its last place (value ≥ 0)."""
    q = mpq(value)
    if q < 0:
        raise InvalidInputError("decimal_ceil expects a non-negative value")
    if q == 0:
        return gmpy2.mpq(0)
    shift = digits - 1 - _decimal_exponent(q)
    scale = gmpy2.mpq(10) ** shift
    return gmpy2.mpq(ceil(q * scale) + extra_units) / scale


def decimal_floor(value: Rational, *, digits: int = 12) -> gmpy2.mpq:
    """The largest decimal with ``digits`` significant digits that is ≤ value (value > 0), for
    renderings of lower bounds."""
    q = mpq(value)
    if q <= 0:
        raise InvalidInputError("decimal_floor expects a positive value")
    scale = gmpy2.mpq(10) ** (digits - 1 - _decimal_exponent(q))
    return gmpy2.mpq(floor(q * scale)) / scale


def decimal_string(value: Rational) -> str:
    """The exact decimal expansion of a rational whose denominator divides a power of ten."""
    q = mpq(value)
    denominator = int(q.denominator)
    twos = (denominator & -denominator).bit_length() - 1
    rest, fives = denominator >> twos, 0
    while rest % 5 == 0:
        rest, fives = rest // 5, fives + 1
    if rest != 1:
        raise InvalidInputError(f"{q} has no finite decimal expansion")
    places = max(twos, fives)
    digits = int(q.numerator) * (10**places // denominator)
    sign, digits = ("-" if digits < 0 else ""), str(abs(digits)).rjust(places + 1, "0")
    if places == 0:
        return sign + digits
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


MAX_NUMBER_DIGITS = 1000
"""Most digits read in one written number (a decimal, a JSON number, a fraction's numerator or
denominator): exact parsing costs grow with them, and no bound in this library needs more."""
MAX_DECIMAL_EXPONENT = 1000
"""Largest |e| of a number written with an exponent (``1e999999999`` would take 10^9 digits)."""
_NUMBER = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?")


def parse_number(text: str, *, what: str = "number") -> Fraction:
    """The exact value of a number written as JSON writes numbers (``-12``, ``0.5``, ``1e999``:
    also beyond the float range), or ``InvalidInputError`` naming ``what``: not such a number,
    more than ``MAX_NUMBER_DIGITS`` digits, or an exponent beyond ±``MAX_DECIMAL_EXPONENT``.
    Usable as ``json.loads(parse_float=…, parse_int=…)``: the caps keep it fast."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    if len(text) > 2 * MAX_NUMBER_DIGITS + 16:
        raise InvalidInputError(
            f"{what}: a number written with {len(text)} characters; at most {MAX_NUMBER_DIGITS} digits are read"
        )
    match = _NUMBER.fullmatch(text) if text.isascii() else None
    if match is None:
        raise InvalidInputError(f"{what}: {shown!r} is not a number")
    sign, whole, decimals, exponent_text = match.groups()
    decimals = decimals or ""
    if len(whole) + len(decimals) > MAX_NUMBER_DIGITS:
        raise InvalidInputError(
            f"{what}: {shown!r} has {len(whole) + len(decimals)} digits; at most {MAX_NUMBER_DIGITS} are read"
        )
    exponent = 0
    if exponent_text is not None:
        digits = exponent_text.lstrip("+-").lstrip("0")
        if len(digits) > len(str(MAX_DECIMAL_EXPONENT)) or int(digits or "0") > MAX_DECIMAL_EXPONENT:
            raise InvalidInputError(
                f"{what}: {shown!r} has an exponent beyond ±{MAX_DECIMAL_EXPONENT}, the largest this library reads exactly"
            )
        exponent = int(exponent_text)
    exponent -= len(decimals)
    mantissa = int(whole + decimals)
    value = Fraction(mantissa * 10**exponent) if exponent >= 0 else Fraction(mantissa, 10**-exponent)
    return -value if sign else value


def parse_decimal(text: object) -> Fraction | None:
    """The exact value of a non-negative decimal string (digits, an optional fraction, no
    exponent) of at most ``MAX_NUMBER_DIGITS`` digits, or None if it is not one."""
    if not isinstance(text, str) or len(text) > MAX_NUMBER_DIGITS + 1 or not _DECIMAL.fullmatch(text):
        return None
    return Fraction(text)


def fraction_to_json(value: Rational) -> dict:
    """{"numerator": "…", "denominator": "…"} (reduced)."""
    q = mpq(value)
    return {"numerator": str(int(q.numerator)), "denominator": str(int(q.denominator))}


def fraction_from_json(document: object) -> Fraction | None:
    """The Fraction of a {"numerator", "denominator"} document of integer strings, or None."""
    if not isinstance(document, dict):
        return None
    numerator, denominator = document.get("numerator"), document.get("denominator")
    if not (isinstance(numerator, str) and isinstance(denominator, str)):
        return None
    if max(len(numerator), len(denominator)) > MAX_NUMBER_DIGITS + 1:  # int() of longer text is slow, or refused
        return None
    if not (_INTEGER.fullmatch(numerator) and _INTEGER.fullmatch(denominator)) or int(denominator) <= 0:
        return None
    return Fraction(int(numerator), int(denominator))
