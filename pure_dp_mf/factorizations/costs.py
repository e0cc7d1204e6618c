"""Factorization costs and errors (Arkhipov & Kalinin, section 1.1; docs/architecture.md "Notation").

For T_n = L·R and Laplace noise z of scale b = ‖R‖₁→₁/ε (variance 2b² per coordinate), the
mechanism L·(R·x + z) has per-step error variance 2b²·‖L_t‖², hence

* ‖L‖₂→∞ = max_t ‖L_t‖₂ (largest row ℓ2 norm), ‖R‖₁→₁ = max_j Σ_i |R_ij| (largest column ℓ1 norm);
* c₂ = ‖L‖₂→∞·‖R‖₁→₁ and MaxSE = 2·c₂²/ε²;
* c_F = ‖L‖_F·‖R‖₁→₁/√n and MeanSE = 2·c_F²/ε², n the number of rows of L (steps);
* leading constants MaxSE·ε²/log₂(n)³ and MeanSE·ε²/log₂(n)³ (Arkhipov & Kalinin's "2C₂²", "2C_F²").

Float64 functions take dense arrays or scipy.sparse matrices. The ``*_exact`` functions take
integer or rational matrices (ints, ``fractions.Fraction``) and return squared norms and
errors as exact ``Fraction`` values; square roots are never taken in exact form.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.exact import GRID_BITS, column_abs_sums
from pure_dp_mf.validation import UNIT_EPSILON, check_epsilon, check_size, issparse


def _absolute(matrix):
    if issparse(matrix):
        return abs(matrix.tocsr().astype(np.float64))
    array = np.asarray(matrix, dtype=np.float64)
    if array.ndim != 2:
        raise InvalidInputError(f"expected a matrix, got shape {array.shape}")
    return np.abs(array)


def _flat(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).ravel()


def row_norms_squared(matrix) -> np.ndarray:
    """‖L_t‖₂² for every row t."""
    absolute = _absolute(matrix)
    if isinstance(absolute, np.ndarray):
        return _flat((absolute**2).sum(axis=1))
    return _flat(absolute.multiply(absolute).sum(axis=1))


def max_row_norm(matrix) -> float:
    """‖L‖₂→∞: the largest ℓ2 norm of a row."""
    return float(math.sqrt(row_norms_squared(matrix).max()))


def max_column_abs_sum(matrix) -> float:
    """‖R‖₁→₁: the largest ℓ1 norm of a column (the ℓ1 sensitivity of x ↦ R·x)."""
    return float(_flat(_absolute(matrix).sum(axis=0)).max())


def frobenius_norm(matrix) -> float:
    """‖L‖_F."""
    return float(math.sqrt(row_norms_squared(matrix).sum()))


def leading_constant(error: float | Fraction, *, n: int, epsilon: float = UNIT_EPSILON) -> float:
    """error·ε²/log₂(n)³, the constant in front of log₂(n)³/ε²; NaN for n = 1 (log₂ 1 = 0).

    The one implementation of the leading constant: trees, lifts, comparison rows and the trainer
    all call it. ``error`` may be a Fraction (it is converted once, at the end)."""
    if n < 1:
        raise InvalidInputError(f"the leading constant needs n >= 1, got n = {n}")
    if n == 1:
        return math.nan
    return float(error) * epsilon**2 / math.log2(n) ** 3


def lift_factor(base_size: int) -> float:
    """(log₂k / log₂(2k+1))³: Theorem 2.5's factor from a base's constant 2C² = 2c²/log₂(k)³ to
    its lifted constant 2c²/log₂(2k+1)³ (float; certificates prove it with rational logarithms)."""
    k = check_size(base_size, name="base_size", minimum=2)
    return (math.log2(k) / math.log2(2 * k + 1)) ** 3


@dataclass(frozen=True)
class FactorizationCosts:
    """All float64 costs of a factorization at one ε (field names match ``info --json``)."""

    n: int
    inner_size: int
    epsilon: float
    decoder_max_row_norm: float
    encoder_max_column_sum: float
    decoder_frobenius_norm: float
    c2: float
    cf: float
    max_se: float
    mean_se: float
    max_se_constant: float
    mean_se_constant: float

    def as_dict(self) -> dict:
        return asdict(self)


def costs_from_norms(
    *, n: int, inner_size: int, epsilon: float, max_row_norm_squared, frobenius_squared, sensitivity
) -> FactorizationCosts:
    """Every cost from the three norms ‖L‖₂→∞², ‖L‖_F² and ‖R‖₁→₁ (floats or Fractions).

    c₂ = ‖L‖₂→∞·‖R‖₁→₁, c_F = ‖L‖_F·‖R‖₁→₁/√n, MaxSE = 2c₂²/ε², MeanSE = 2c_F²/ε², and the
    leading constants error·ε²/log₂(n)³ (``leading_constant``). The one place these formulas are
    written: explicit factorizations (``factorization_costs``) and implicit lifts (``lift``) both
    call it.
    """
    row_max, frobenius, sensitivity = float(max_row_norm_squared), float(frobenius_squared), float(sensitivity)
    c2 = math.sqrt(row_max) * sensitivity
    cf = math.sqrt(frobenius / n) * sensitivity
    max_se, mean_se = 2 * c2**2 / epsilon**2, 2 * cf**2 / epsilon**2
    return FactorizationCosts(
        n=n,
        inner_size=inner_size,
        epsilon=epsilon,
        decoder_max_row_norm=math.sqrt(row_max),
        encoder_max_column_sum=sensitivity,
        decoder_frobenius_norm=math.sqrt(frobenius),
        c2=c2,
        cf=cf,
        max_se=max_se,
        mean_se=mean_se,
        max_se_constant=leading_constant(max_se, n=n, epsilon=epsilon),
        mean_se_constant=leading_constant(mean_se, n=n, epsilon=epsilon),
    )


def factorization_costs(*, decoder, encoder, epsilon: float = UNIT_EPSILON) -> FactorizationCosts:
    """Every cost of T_n = L·R (L = ``decoder``, R = ``encoder``) in float64."""
    epsilon = check_epsilon(epsilon)
    n, inner_size = decoder.shape
    if encoder.shape[0] != inner_size:
        raise InvalidInputError(f"decoder is {decoder.shape} but encoder is {encoder.shape}: inner sizes differ")
    norms = row_norms_squared(decoder)
    return costs_from_norms(
        n=n,
        inner_size=inner_size,
        epsilon=epsilon,
        max_row_norm_squared=norms.max(),
        frobenius_squared=norms.sum(),
        sensitivity=max_column_abs_sum(encoder),
    )


# ---------------------------------------------------------------------------------------------
# Exact versions: integer / rational matrices, squared quantities as Fractions.


def _rational_rows(matrix) -> list[list[Fraction]]:
    if issparse(matrix):
        matrix = matrix.toarray()
    array = np.asarray(matrix, dtype=object)
    if array.ndim != 2:
        raise InvalidInputError(f"expected a matrix, got shape {array.shape}")
    rows = []
    for row in array:
        converted = []
        for entry in row:
            if isinstance(entry, (float, np.floating)):
                raise InvalidInputError("exact costs need integer or Fraction entries, not floats")
            converted.append(Fraction(int(entry)) if isinstance(entry, np.integer) else Fraction(entry))
        rows.append(converted)
    return rows


def row_norms_squared_exact(matrix) -> list[Fraction]:
    """‖L_t‖₂² for every row t, exactly."""
    return [sum((x * x for x in row), Fraction(0)) for row in _rational_rows(matrix)]


def max_row_norm_squared_exact(matrix) -> Fraction:
    """‖L‖₂→∞², exactly."""
    return max(row_norms_squared_exact(matrix))


def column_abs_sums_exact(matrix) -> list[Fraction]:
    """‖R_{:,j}‖₁ for every column j, exactly. Integer, Fraction or float64 entries (every
    float64 is a dyadic rational and is converted exactly); dense or scipy.sparse.

    Fast path: float64 entries on the grid 2^-GRID_BITS are summed as integers (``exact``)."""
    if issparse(matrix):
        matrix = matrix.toarray()
    array = np.asarray(matrix)
    if array.ndim != 2:
        raise InvalidInputError(f"expected a matrix, got shape {array.shape}")
    if array.dtype.kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):  # inf / NaN take the checked path below
            scaled = np.ldexp(array.astype(np.float64), GRID_BITS)  # exact: scaling by a power of two
        if np.all(np.abs(scaled) < 2.0**52) and np.array_equal(scaled, np.rint(scaled)):
            sums = column_abs_sums(scaled.astype(np.int64))
            return [Fraction(v, 1 << GRID_BITS) for v in sums]
        if not np.all(np.isfinite(array)):
            raise InvalidInputError("exact costs need finite entries, got NaN or infinity")
        return [sum((Fraction(float(x)) for x in np.abs(column)), Fraction(0)) for column in array.T]
    rows = _rational_rows(array)
    return [sum((abs(row[j]) for row in rows), Fraction(0)) for j in range(array.shape[1])]


def max_column_abs_sum_exact(matrix) -> Fraction:
    """‖R‖₁→₁, exactly (see ``column_abs_sums_exact`` for the accepted entries)."""
    return max(column_abs_sums_exact(matrix))


def frobenius_norm_squared_exact(matrix) -> Fraction:
    """‖L‖_F², exactly."""
    return sum(row_norms_squared_exact(matrix), Fraction(0))


def c2_squared_exact(*, decoder, encoder) -> Fraction:
    """c₂² = ‖L‖₂→∞²·‖R‖₁→₁², exactly."""
    return max_row_norm_squared_exact(decoder) * max_column_abs_sum_exact(encoder) ** 2


def cf_squared_exact(*, decoder, encoder) -> Fraction:
    """c_F² = ‖L‖_F²·‖R‖₁→₁²/n, exactly (n = rows of L)."""
    n = len(decoder)
    return frobenius_norm_squared_exact(decoder) * max_column_abs_sum_exact(encoder) ** 2 / n


def max_se_exact(*, decoder, encoder, epsilon: Fraction | int = 1) -> Fraction:
    """MaxSE = 2·c₂²/ε², exactly (ε rational)."""
    return 2 * c2_squared_exact(decoder=decoder, encoder=encoder) / Fraction(epsilon) ** 2
