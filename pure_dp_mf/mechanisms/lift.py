"""The diamond-alpha lifting: factorizations of T_n for any n from one base (Arkhipov & Kalinin, section 2).

Arkhipov & Kalinin, Lemma 2.3 / Construction 2.4: from A·B = T_n (A: n×r) and C·D = T_k (C: k×s) and any
α > 0, ``diamond`` builds (L, R) = (A, B) ◇α (C, D) with L·R = T_N, N = 2kn + n + k, inner size
M = (2k+1)·r + s, and (Theorem 2.1's proof)

    ‖L‖₂→∞² = ‖A‖₂→∞² + α²‖C‖₂→∞²,   ‖L‖_F² = (2k+1)‖A‖_F² + (2n+1)α²‖C‖_F²,
    ‖R‖₁→₁ = ‖B‖₁→₁ + ‖D‖₁→₁/α.

Repeating with a fixed base (A, B) = (L_1, R_1) of T_k, (L_{i+1}, R_{i+1}) = (L_i, R_i) ◇_{α_i} (A, B),
gives sizes N_i = ((2k+1)^i − 1)/2 (N_{i+1} = (2k+1)N_i + k) and inner sizes
M_i = r·((2k+1)^i − 1)/(2k) (M_{i+1} = (2k+1)M_i + r). Arkhipov & Kalinin's section 3 states
M_p = (r + (k+r)/(2k))(2k+1)^{p−1} − (k+r)/(2k), i.e. M_{i+1} = (2k+1)M_i + r + k: that count
belongs to a variant with one extra all-zero inner column per group; this module uses
Construction 2.4 as defined in section 2 (no zero columns), which changes no cost.

A factorization of T_n for any n is the p-fold lift, p the least level with N_p ≥ n, truncated to
the first n rows of L_p and the first n columns of R_p (then L_p[:n]·R_p[:, :n] = T_n because T is
lower triangular). ``lift_plan`` computes every cost of that truncation in O(p) operations without
building a matrix (see ``_Profile`` for the recursion and its proof), in float64 or, for an exact
base, exactly in rationals.

Exactness: floats may search; only integers and rationals prove. Every α used by ``lift_plan`` is
a dyadic rational with 32 significant bits (exactly representable in float64), so the float plan
and the exact plan of the same base use the same α and the same matrices.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, TypeAlias

import numpy as np

from pure_dp_mf.errors import InvalidInputError, NotAFactorizationError
from pure_dp_mf.factorizations.costs import (
    FactorizationCosts,
    column_abs_sums_exact,
    costs_from_norms,
    frobenius_norm_squared_exact,
    max_column_abs_sum_exact,
    row_norms_squared,
)
from pure_dp_mf.factorizations.factorization import DEFAULT_TOLERANCE, METRICS, Factorization, file_sha256
from pure_dp_mf.validation import UNIT_EPSILON, check_epsilon, check_positive, check_size

#: An exact factorization: (decoder, encoder) as numpy object arrays of ``int`` / ``Fraction``.
ExactPair: TypeAlias = tuple[np.ndarray, np.ndarray]
Operand: TypeAlias = Factorization | ExactPair
Number: TypeAlias = Any  # float or Fraction: the plan's arithmetic runs on either (see ``_Profile``)

ALPHA_BITS = 32  # significant bits of every α chosen by lift_plan
ALPHA_RULES = ("paper", "truncated")  # see LiftedFamily.plan
MAX_EXPLICIT_ENTRIES = 50_000_000  # explicit_lift refuses larger dense matrices


# ---------------------------------------------------------------------------------------------
# Operands: a float Factorization or an exact (decoder, encoder) pair.


def _exact_entry(value, *, name: str):
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else value
    raise InvalidInputError(f"{name} has a non-exact entry {value!r} ({type(value).__name__}); use int or Fraction")


def _exact_matrix(matrix, *, name: str) -> np.ndarray:
    array = np.asarray(matrix)
    if array.ndim != 2 or 0 in array.shape:
        raise InvalidInputError(f"{name} must be a non-empty 2-dimensional matrix, got shape {array.shape}")
    if array.dtype != object and not np.issubdtype(array.dtype, np.integer):
        raise InvalidInputError(f"{name} has dtype {array.dtype}; an exact matrix holds int or Fraction entries")
    out = np.empty(array.shape, dtype=object)
    for index, value in np.ndenumerate(array):
        out[index] = _exact_entry(value, name=name)
    return out


def _matrices(operand: Operand, *, name: str) -> tuple[np.ndarray, np.ndarray, bool]:
    """(L, R, exact): dense float64 arrays for a Factorization, object arrays for an exact pair."""
    if isinstance(operand, Factorization):
        decoder, encoder = operand.dense()
        return decoder, encoder, False
    if not (isinstance(operand, (tuple, list)) and len(operand) == 2):
        raise InvalidInputError(
            f"{name} must be a Factorization or an exact (decoder, encoder) pair, got {type(operand).__name__}"
        )
    decoder = _exact_matrix(operand[0], name=f"{name} decoder")
    encoder = _exact_matrix(operand[1], name=f"{name} encoder")
    if encoder.shape != decoder.shape[::-1]:
        raise InvalidInputError(
            f"{name}: decoder is {decoder.shape} but encoder is {encoder.shape}; expected {decoder.shape[::-1]}"
        )
    return decoder, encoder, True


def as_exact(factorization: Factorization) -> ExactPair:
    """The exact pair of a float factorization's entries (every float64 is a dyadic rational).

    Only useful when those rationals factor T_n exactly (0/1 tree factorizations, dyadic grids).
    """
    decoder, encoder = factorization.dense()
    convert = np.vectorize(lambda x: _exact_entry(Fraction(float(x)), name="entry"), otypes=[object])
    return convert(decoder), convert(encoder)


def check_factorizes(operand: Operand, *, name: str = "base", tolerance: float = DEFAULT_TOLERANCE) -> int:
    """Raise ``NotAFactorizationError`` unless L·R = T_n (exactly for an exact pair, else within
    ``tolerance`` in max-entry norm); return n."""
    decoder, encoder, exact = _matrices(operand, name=name)
    n = decoder.shape[0]
    if isinstance(operand, Factorization):
        operand.validate(tolerance=tolerance)
        return n
    difference = decoder.dot(encoder) - np.tri(n, dtype=np.int64).astype(object)
    bad = [(i, j) for (i, j), value in np.ndenumerate(difference) if value != 0]
    if bad:
        i, j = bad[0]
        raise NotAFactorizationError(
            f"{name}: L·R is not T_{n} exactly ({len(bad)} wrong entries, first at ({i}, {j}): "
            f"{difference[i, j] + (1 if j <= i else 0)} instead of {1 if j <= i else 0})"
        )
    return n


def _as_alpha(alpha, *, exact: bool) -> Number:
    """α > 0 as a Fraction (exact operands: only int or Fraction accepted) or a float."""
    if exact:
        if isinstance(alpha, bool) or not isinstance(alpha, (numbers.Integral, Fraction)):
            raise InvalidInputError(f"alpha must be an int or a Fraction for exact operands, got {alpha!r}")
        alpha = Fraction(alpha)
        if alpha <= 0:
            raise InvalidInputError(f"alpha must be positive, got {alpha}")
        return alpha
    if isinstance(alpha, Fraction):
        alpha = float(alpha)
    return check_positive(alpha, name="alpha")


# ---------------------------------------------------------------------------------------------
# The diamond operation (Construction 2.4).


def diamond(*, first: Operand, second: Operand, alpha, check: bool = True, tolerance: float = DEFAULT_TOLERANCE) -> Operand:
    """(A, B) ◇α (C, D): a factorization of T_N, N = 2kn + n + k (Arkhipov & Kalinin, Construction 2.4).

    ``first`` = (A, B) factors T_n (A: n×r), ``second`` = (C, D) factors T_k (C: k×s), α > 0.
    Two ``Factorization`` operands give a float64 dense ``Factorization``; two exact pairs (object
    arrays of int/Fraction, α an int or Fraction) give an exact pair; a mixed call is float.
    With ``check`` both operands are first verified to factor T_n and T_k.

    Block layout (0-based; E reverses order, so E·A is A with its rows reversed and B·E is B with
    its columns reversed). Rows of L / columns of R: N = n + k·(2n+1). Inner index: M = (2k+1)r + s.

    * rows [0, n): the head block, L = A in inner columns [0, r);
    * for each group g = 0..k−1, with row offset o_g = n + g(2n+1) and inner offset q_g = r + 2gr:
      - rows o_g + [0, n): the reversed block −E·A in inner columns q_g + [0, r)
        (row o_g + u holds −A[n−1−u]);
      - row o_g + n: zero in the diagonal part (the last row of Ā = [E·A; 0]);
      - rows o_g + n+1 + [0, n): the forward block A in inner columns q_g + r + [0, r);
      - all 2n+1 rows of the group: α·C[g] in the coarse inner columns [(2k+1)r, (2k+1)r + s)
        (this is α·C⊗1_{2n+1} below the n head rows).
    * R = diag(B, B̄, B, B̄, …, B) over the coarse rows: inner rows [0, r) hold B in columns
      [0, n); inner rows q_g + [0, r) hold B̄ = [0, B·E] in columns g(2n+1) + n + [0, n+1)
      (column g(2n+1)+n is zero, column g(2n+1)+n+1+v holds B[:, n−1−v]); inner rows
      q_g + r + [0, r) hold B in columns (g+1)(2n+1) + [0, n); the coarse inner rows
      [(2k+1)r, (2k+1)r + s) hold D[:, g]/α in the 2n+1 columns [g(2n+1), (g+1)(2n+1)) for every
      g, and zero in the last n columns (this is [(1/α)D⊗1ᵀ_{2n+1}, 0]).

    So L·z for z = (z_head, z_1, z_1', …, z_k, z_k', z_coarse) is: A·z_head, then for each group g
    the rows of −A·z_g in reverse order, a 0, the rows of A·z_g', each plus α·(C·z_coarse)[g].

    Why L·R = T_N (Lemma 2.3): the diagonal parts multiply to diag(T_n, −U_{n+1}, T_n, …, T_n)
    (Ā·B̄ = [[0, E·T_n·E], [0, 0]] = U_{n+1}, the strictly upper all-ones matrix), the coarse parts
    to [[0, 0], [T_k⊗J_{2n+1}, 0]], and their sum is T_N (checked exactly in tests/test_lift.py).
    """
    A, B, exact_first = _matrices(first, name="first")
    C, D, exact_second = _matrices(second, name="second")
    exact = exact_first and exact_second
    if check:
        check_factorizes(first, name="first", tolerance=tolerance)
        check_factorizes(second, name="second", tolerance=tolerance)
    a = _as_alpha(alpha, exact=exact)
    if exact:
        return _diamond_matrices(A, B, C, D, a, kind="exact")
    A, B, C, D = (np.asarray(m, dtype=np.float64) for m in (A, B, C, D))
    L, R = _diamond_matrices(A, B, C, D, a, kind="dense")
    made_by = {"operation": "diamond", "alpha": float(a), "first_n": A.shape[0], "second_n": C.shape[0]}
    return Factorization(decoder=L, encoder=R, metadata={"made_by": made_by})


def _diamond_matrices(A, B, C, D, a, *, kind: str):
    """(L, R) of (A, B) ◇_a (C, D) in the layout documented in ``diamond``.

    ``kind``: "exact" (object arrays), "dense" (float64 arrays) or "sparse" (float64 CSR; A and B
    may be CSR). The blocks are listed once and assembled by ``_assemble``.
    """
    n, r = A.shape
    k, s = C.shape
    N, M = 2 * k * n + n + k, (2 * k + 1) * r + s
    backwards = np.arange(n)[::-1]
    coarse = (2 * k + 1) * r
    decoder_blocks, encoder_blocks = [(0, 0, A)], [(0, 0, B)]
    for g in range(k):
        o, q, c = n + g * (2 * n + 1), r + 2 * g * r, g * (2 * n + 1)
        decoder_blocks += [
            (o, q, -A[backwards]),  # −E·A: the reversed block
            (o + n + 1, q + r, A),  # the forward block
            (o, coarse, np.tile(a * C[g], (2 * n + 1, 1))),  # α·C[g] on the group's 2n+1 rows
        ]
        encoder_blocks += [
            (q, c + n + 1, B[:, backwards]),  # B·E: B̄ = [0, B·E] without its zero column
            (q + r, c + 2 * n + 1, B),
            (coarse, c, np.tile((D[:, g] / a)[:, None], (1, 2 * n + 1))),  # D[:, g]/α on 2n+1 columns
        ]
    return _assemble((N, M), decoder_blocks, kind=kind), _assemble((M, N), encoder_blocks, kind=kind)


def _assemble(shape, blocks, *, kind: str):
    import scipy.sparse

    if kind == "sparse":
        rows, columns, values = [], [], []
        for row, column, block in blocks:
            block = scipy.sparse.coo_matrix(block)
            rows.append(block.row + row)
            columns.append(block.col + column)
            values.append(block.data)
        return scipy.sparse.csr_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))), shape=shape)
    out = np.zeros(shape, dtype=object if kind == "exact" else np.float64)
    for row, column, block in blocks:
        block = block.toarray() if scipy.sparse.issparse(block) else block
        out[row : row + block.shape[0], column : column + block.shape[1]] = block
    return out


# ---------------------------------------------------------------------------------------------
# Norm summaries and the optimal alpha.


@dataclass(frozen=True)
class LevelNorms:
    """The three quantities the costs of a factorization T_size = L·R depend on (float or exact)."""

    size: int
    max_row_norm_squared: Number  # ‖L‖₂→∞²
    frobenius_squared: Number  # ‖L‖_F²
    sensitivity: Number  # ‖R‖₁→₁


def level_norms(operand: Operand) -> LevelNorms:
    """``LevelNorms`` of a Factorization (float64) or of an exact pair (Fractions)."""
    decoder, encoder, exact = _matrices(operand, name="factorization")
    if exact:
        rows = [sum((Fraction(x) ** 2 for x in row), Fraction(0)) for row in decoder]
        return LevelNorms(
            size=decoder.shape[0],
            max_row_norm_squared=max(rows),
            frobenius_squared=frobenius_norm_squared_exact(decoder),
            sensitivity=max_column_abs_sum_exact(encoder),
        )
    norms = row_norms_squared(decoder)
    return LevelNorms(
        size=decoder.shape[0],
        max_row_norm_squared=float(norms.max()),
        frobenius_squared=float(norms.sum()),
        sensitivity=float(np.abs(encoder).sum(axis=0).max()),
    )


def _norms_of(costs, *, name: str) -> LevelNorms:
    if isinstance(costs, LevelNorms):
        return costs
    if isinstance(costs, FactorizationCosts):
        return LevelNorms(
            size=costs.n,
            max_row_norm_squared=costs.decoder_max_row_norm**2,
            frobenius_squared=costs.decoder_frobenius_norm**2,
            sensitivity=costs.encoder_max_column_sum,
        )
    raise InvalidInputError(f"{name} must be LevelNorms or FactorizationCosts, got {type(costs).__name__}")


def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise InvalidInputError(f"unknown metric {metric!r}; expected one of {METRICS}")
    return metric


def optimal_alpha(
    *, first_costs: LevelNorms | FactorizationCosts, second_costs: LevelNorms | FactorizationCosts, metric: str
) -> float:
    """The α > 0 minimising the c₂ (``maxse``) or c_F (``meanse``) cost of first ◇α second.

    With the identities of Theorem 2.1, both costs squared are, up to the constant factor 1/N for
    c_F, g(α) = (a + α²c)·(b + d/α)² with b = ‖B‖₁→₁, d = ‖D‖₁→₁ and
    ``maxse``: a = ‖A‖₂→∞², c = ‖C‖₂→∞²; ``meanse``: a = (2k+1)‖A‖_F², c = (2n+1)‖C‖_F²
    (n = first's size, k = second's size).

    Claim: for a, b, c, d > 0 the unique minimiser is α* = (a·d / (b·c))^{1/3}, and
    g(α*) = ((a·b²)^{1/3} + (c·d²)^{1/3})³.
    Proof: (log g)'(α) = 2αc/(a + α²c) − 2d/(α(bα + d)) = 2(bcα³ − ad) / (α(a + α²c)(bα + d)),
    whose sign is that of bcα³ − ad: negative below α*, positive above, so α* is the unique
    minimum on (0, ∞). Writing u = (ab²)^{1/3}, v = (cd²)^{1/3}: a + α*²c = a^{2/3}b^{−2/3}(u + v)
    and b + d/α* = a^{−1/3}b^{1/3}(u + v), hence g(α*) = (u + v)³. (For ``maxse`` this is
    Theorem 2.1's c₂^{2/3} ≤ c₂(A,B)^{2/3} + c₂(C,D)^{2/3} with equality at α*.)
    """
    metric = _check_metric(metric)
    first = _norms_of(first_costs, name="first_costs")
    second = _norms_of(second_costs, name="second_costs")
    if metric == "maxse":
        a, c = float(first.max_row_norm_squared), float(second.max_row_norm_squared)
    else:
        a = (2 * second.size + 1) * float(first.frobenius_squared)
        c = (2 * first.size + 1) * float(second.frobenius_squared)
    b, d = float(first.sensitivity), float(second.sensitivity)
    if not min(a, b, c, d) > 0:
        raise InvalidInputError("optimal_alpha needs nonzero norms (a factorization of T_n has them)")
    return (a * d / (b * c)) ** (1.0 / 3.0)


def dyadic(value: float, *, bits: int = ALPHA_BITS) -> Fraction:
    """``value`` > 0 rounded to ``bits`` significant bits: a dyadic Fraction exactly equal to a float64."""
    mantissa, exponent = math.frexp(check_positive(value, name="alpha"))
    return Fraction(round(mantissa * 2**bits)) * Fraction(2) ** (exponent - bits)


# ---------------------------------------------------------------------------------------------
# Implicit per-row / per-column structure of the p-fold lift.


class _Profile:
    """Range sums and maxima of a per-entry quantity of the p-fold lift, in O(p) per query.

    Two quantities are tracked, each a nonnegative sequence of length N_i at level i:
    ρ_i(t) = ‖(L_i)_t‖₂² (row norms squared) and γ_i(j) = ‖(R_i)_{:, j}‖₁ (column ℓ1 norms).

    Recursion (from the block layout of ``diamond`` with first = level i, second = the base,
    N = N_i, α = α_i, v = the base's sequence ρ_1 or γ_1, w_g the coarse weight of group g):

    * rows:    ρ_{i+1} = ρ_i, then for g = 0..k−1: (reverse of ρ_i, 0, ρ_i) + w_g, w_g = α²·ρ_1(g);
    * columns: γ_{i+1} = for g = 0..k−1: (γ_i, 0, reverse of γ_i) + w_g, then γ_i; w_g = γ_1(g)/α.

    Rows: a row of L_{i+1} in group g is a row of ±(E·)L_i (or the zero row of Ā) beside
    α·C[g] on disjoint inner columns, so its squared norm is the sum. Columns: a column of R_{i+1}
    in coarse group g is a column of B, of B·E or the zero column of B̄, stacked over D[:, g]/α on
    disjoint inner rows, so the ℓ1 norms add; the last N columns carry no coarse part.

    A prefix query (first m entries) at level i+1 walks these segments: whole segments and whole
    groups use the level-i totals S_i = Σρ_i and maxima M_i = max ρ_i (a whole group g adds
    2S_i + (2N+1)w_g to the sum and M_i + w_g to the max, as M_i ≥ 0 = the zero entry), and the
    one partial segment is a prefix (forward copy) or a suffix (reversed copy) query at level i;
    suffix queries are symmetric. Each query therefore recurses once per level: O(p) operations
    (group prefix sums/maxima of v are precomputed in O(k)). The same arithmetic runs on floats
    or, for an exact base and dyadic α, on Fractions, so exact results are exact.
    """

    def __init__(self, *, values: Sequence[Number], rows: bool):
        self.rows = rows
        self.k = len(values)
        zero = values[0] * 0
        self.prefix_sum, self.prefix_max = [zero], [None]
        for value in values:
            self.prefix_sum.append(self.prefix_sum[-1] + value)
            self.prefix_max.append(value if self.prefix_max[-1] is None else max(self.prefix_max[-1], value))
        self.suffix_sum, self.suffix_max = [zero], [None]
        for value in reversed(values):
            self.suffix_sum.append(self.suffix_sum[-1] + value)
            self.suffix_max.append(value if self.suffix_max[-1] is None else max(self.suffix_max[-1], value))
        self.values = list(values)
        self.sizes = [self.k]  # N_1, N_2, ...
        self.totals = [self.prefix_sum[-1]]
        self.maxima = [self.prefix_max[-1]]
        self.scales: list[Number] = []  # coarse weight scale of level i+1 (α² for rows, 1/α for columns)
        self.zero = zero
        # segment kinds of level i+1: 'F' = level i, 'R' = level i reversed, 'Z' = one zero entry
        self.head: tuple[str, ...]
        self.group: tuple[str, ...]
        self.tail: tuple[str, ...]
        self.head, self.group, self.tail = (("F",), ("R", "Z", "F"), ()) if rows else ((), ("F", "Z", "R"), ("F",))

    def next_totals(self, level: int, scale: Number) -> tuple[Number, Number]:
        """(Σ, max) of level+1 built on ``level`` with coarse scale ``scale`` (Theorem 2.1's
        identities: Σ' = (2k+1)Σ + (2N+1)·scale·Σv, max' = max + scale·max v)."""
        N, S, M = self.sizes[level - 1], self.totals[level - 1], self.maxima[level - 1]
        return (2 * self.k + 1) * S + (2 * N + 1) * scale * self.prefix_sum[-1], M + scale * self.prefix_max[-1]

    def add_level(self, scale: Number) -> None:
        total, maximum = self.next_totals(len(self.sizes), scale)
        self.scales.append(scale)
        self.sizes.append((2 * self.k + 1) * self.sizes[-1] + self.k)
        self.totals.append(total)
        self.maxima.append(maximum)

    # A query returns (sum, max) over a range, max None for an empty range. ``scale`` replaces the
    # coarse scale of the queried level only (the levels below keep theirs).
    def prefix(self, level: int, m: int, scale: Number | None = None) -> tuple[Number, Number]:
        if level == 1:
            return self.prefix_sum[m], self.prefix_max[m]
        return self._walk(level, m, from_end=False, scale=scale)

    def suffix(self, level: int, m: int) -> tuple[Number, Number]:
        if level == 1:
            return self.suffix_sum[m], self.suffix_max[m]
        return self._walk(level, m, from_end=True)

    def sequence(self, level: int, m: int, *, scale: Number | None = None) -> np.ndarray:
        """The first m entries of the level's sequence (ρ or γ), float64, built by the same
        segment layout as the queries (head, then per group g the group segments + w_g, tail):
        O(m + N_{level−1}) work, the top level cut after m entries; ``scale`` replaces the coarse
        scale of the top level."""
        if not 1 <= level <= len(self.sizes) or not 0 <= m <= self.sizes[level - 1]:
            raise InvalidInputError(
                f"{m} entries at level {level} exceed the lift (size {self.sizes[min(level, len(self.sizes)) - 1]})"
            )
        current = np.array([float(v) for v in self.values])
        for i in range(1, level):
            top = i == level - 1
            pieces = {"F": current, "R": current[::-1], "Z": np.zeros(1)}
            weight_scale = float(scale if (top and scale is not None) else self.scales[i - 1])
            parts = [pieces[kind] for kind in self.head]
            length = sum(len(part) for part in parts)
            for g in range(self.k):
                if top and length >= m:
                    break
                parts += [pieces[kind] + weight_scale * float(self.values[g]) for kind in self.group]
                length += 2 * len(current) + 1
            if not (top and length >= m):
                parts += [pieces[kind] for kind in self.tail]
            current = np.concatenate(parts)
        return current[:m]

    def entries(self, level: int, m: int, *, scale: Number | None = None) -> list:
        """The first m entries of the level's sequence in the values' own arithmetic (Fractions
        for an exact base: exact), by the segment layout of ``sequence``; ``scale`` replaces the
        coarse scale of the top level. O(m + N_{level−1}) numbers."""
        if not 1 <= level <= len(self.sizes) or not 0 <= m <= self.sizes[level - 1]:
            raise InvalidInputError(f"{m} entries at level {level} exceed the lift")
        current = list(self.values)
        for i in range(1, level):
            top = i == level - 1
            weight_scale = scale if (top and scale is not None) else self.scales[i - 1]
            pieces = {"F": current, "R": current[::-1], "Z": [self.zero]}
            out = [value for kind in self.head for value in pieces[kind]]
            for g in range(self.k):
                if top and len(out) >= m:
                    break
                w = weight_scale * self.values[g]
                out += [value + w for kind in self.group for value in pieces[kind]]
            if not (top and len(out) >= m):
                out += [value for kind in self.tail for value in pieces[kind]]
            current = out
        return current[:m]

    def _walk(self, level: int, m: int, *, from_end: bool, scale: Number | None = None):
        i = level - 1  # the level the segments copy
        N, S, M = self.sizes[i - 1], self.totals[i - 1], self.maxima[i - 1]
        scale = self.scales[i - 1] if scale is None else scale
        state = [self.zero, None, m]  # sum, max, remaining

        def add(piece_sum, piece_max, count, weight):
            state[0] += piece_sum + count * weight
            if piece_max is not None:
                candidate = piece_max + weight
                state[1] = candidate if state[1] is None else max(state[1], candidate)
            state[2] -= count

        def take(segments, weight):
            for kind in reversed(segments) if from_end else segments:
                remaining = state[2]
                if remaining == 0:
                    return
                if kind == "Z":
                    add(self.zero, self.zero, 1, weight)
                elif remaining >= N:
                    add(S, M, N, weight)
                else:  # the one partial segment: recurse one level down
                    forward = (kind == "F") != from_end
                    piece = self.prefix(i, remaining) if forward else self.suffix(i, remaining)
                    add(piece[0], piece[1], remaining, weight)

        period = 2 * N + 1
        take(self.tail if from_end else self.head, self.zero)
        whole = min(self.k, state[2] // period)
        if whole:  # whole groups: 2 copies of level i, one zero entry, weights w_g on all 2N+1 entries
            sums, maxima = (self.suffix_sum, self.suffix_max) if from_end else (self.prefix_sum, self.prefix_max)
            add(2 * whole * S, M + scale * maxima[whole], whole * period, self.zero)
            state[0] += period * scale * sums[whole]
        if state[2] and whole < self.k:
            g = self.k - 1 - whole if from_end else whole
            take(self.group, scale * self.values[g])
        take(self.head if from_end else self.tail, self.zero)
        if state[2]:
            raise InvalidInputError(f"range of {m} entries exceeds level {level} (size {self.sizes[level - 1]})")
        return state[0], state[1]


# ---------------------------------------------------------------------------------------------
# The plan: levels, alphas and costs of the truncated p-fold lift.


def lifted_constant(*, c_squared: Number, base_size: int) -> float:
    """Theorem 2.5: the leading constant 2c²/log₂(2k+1)³ of the lifts of a base of T_k with cost c
    (c₂ for MaxSE, c_F for MeanSE). ``c_squared`` may be a Fraction (converted once, at the end)."""
    k = check_size(base_size, name="base_size", minimum=1)
    try:
        value = float(2 * c_squared)
    except OverflowError:
        raise InvalidInputError("the base's cost c² is too large for float64; it cannot be a useful factorization") from None
    return value / math.log2(2 * k + 1) ** 3


def lifted_size(*, base_size: int, levels: int) -> int:
    """N_p = ((2k+1)^p − 1)/2, the size of the p-fold lift of a base of T_k."""
    k = check_size(base_size, name="base_size")
    p = check_size(levels, name="levels")
    return ((2 * k + 1) ** p - 1) // 2


def levels_for(*, n: int, base_size: int) -> int:
    """The least p with N_p ≥ n."""
    n = check_size(n, name="n")
    k = check_size(base_size, name="base_size")
    p, size = 1, k
    while size < n:
        p, size = p + 1, (2 * k + 1) * size + k
    return p


@dataclass(frozen=True)
class LiftPlan:
    """The p-fold lift of a base of T_k truncated to n, with its α and its costs (no matrix built).

    (L_1, R_1) = base, (L_{i+1}, R_{i+1}) = (L_i, R_i) ◇_{α_i} base for i = 1..p−1; the mechanism
    uses L = L_p[:n], R = R_p[:, :n]. Per-level tuples have p entries (index i−1 for level i).
    ``sensitivity_exact`` is ‖R_p[:, :n]‖₁→₁ as an exact Fraction, for every base (a float base's
    entries are dyadic rationals and every α is dyadic): the ℓ1 sensitivity of x ↦ R·x for streams
    of length ≤ n, so Laplace noise z of scale sensitivity_exact/ε makes L·(R·x + z) = T_n·x + L·z
    ε-DP (when L·R = T_n; for a float base within its residual). ``sensitivity`` is its float
    rounding, used in ``costs``. The other ``*_exact`` fields are Fractions for an exact base
    (else None); the floats are their roundings.
    """

    base_size: int
    base_inner_size: int
    metric: str
    alpha_rule: str
    n: int
    epsilon: float
    levels: int
    sizes: tuple[int, ...]
    inner_sizes: tuple[int, ...]
    alphas: tuple[float, ...]
    alphas_exact: tuple[Fraction, ...]
    max_row_norm_squared: tuple[float, ...]
    frobenius_squared: tuple[float, ...]
    sensitivities: tuple[float, ...]
    truncated_max_row_norm_squared: float
    truncated_frobenius_squared: float
    sensitivity: float
    sensitivity_exact: Fraction | None  # None when planned with exact_sensitivity=False (ranking only)
    costs: FactorizationCosts
    untruncated_costs: FactorizationCosts
    asymptotic_constant: float
    truncated_max_row_norm_squared_exact: Fraction | None = None
    truncated_frobenius_squared_exact: Fraction | None = None
    per_level_exact: dict | None = field(default=None, repr=False)

    @property
    def lifted_size(self) -> int:
        return self.sizes[-1]

    @property
    def leading_constant(self) -> float:
        """The plan metric's leading constant at n (MaxSE or MeanSE times ε²/log₂(n)³)."""
        return self.costs.max_se_constant if self.metric == "maxse" else self.costs.mean_se_constant

    def as_dict(self) -> dict:
        """JSON-ready record (Fractions as "numerator/denominator" strings)."""
        record = asdict(self)

        def clean(value):
            if isinstance(value, Fraction):
                return f"{value.numerator}/{value.denominator}"
            if isinstance(value, dict):
                return {key: clean(item) for key, item in value.items()}
            if isinstance(value, (list, tuple)):
                return [clean(item) for item in value]
            return value

        record = clean(record)
        record["lifted_size"] = self.lifted_size
        record["leading_constant"] = self.leading_constant
        return record


class LiftedFamily:
    """All lifts of one base for one metric: α_i chosen level by level, costs at any n in O(p).

    The α_i do not depend on the final level p (each is the ``optimal_alpha`` of level i against
    the base, rounded to a dyadic with ``ALPHA_BITS`` significant bits), so one family serves
    every n; ``plan(n)`` uses the least p with N_p ≥ n.
    """

    def __init__(self, *, base: Operand, metric: str, tolerance: float = DEFAULT_TOLERANCE):
        decoder, encoder, exact = _matrices(base, name="base")
        k = check_factorizes(base, name="base", tolerance=tolerance)
        # the columns are also tracked exactly for a float base (its entries are dyadic rationals):
        # the sensitivity sets the privacy of the noise, so it is reported exactly in every plan
        row_values: list[Number]
        if exact:
            row_values = [sum((Fraction(x) ** 2 for x in row), Fraction(0)) for row in decoder]
        else:
            row_values = [float(x) for x in row_norms_squared(decoder)]
        self._setup(
            metric=metric, k=k, inner_size=decoder.shape[1], exact=exact, rows=row_values, columns=column_abs_sums_exact(encoder)
        )

    @classmethod
    def from_profile(
        cls, *, metric: str, inner_size: int, row_norms_squared: Sequence[float], column_sums: Sequence[Fraction]
    ) -> LiftedFamily:
        """The family of a float base known by its profile alone: the squared row norms of its
        decoder (floats: they rank, they do not prove) and the exact column ℓ1 norms of its
        encoder (they set the sensitivity). The planner builds every shipped base's family this
        way, from ``certificates/profiles.json``, without loading or solving a matrix."""
        family = cls.__new__(cls)
        rows = [float(v) for v in row_norms_squared]
        if len(rows) != len(column_sums) or not rows:
            raise InvalidInputError("a base profile needs as many row norms as column sums (k of each)")
        family._setup(
            metric=metric, k=len(rows), inner_size=inner_size, exact=False, rows=rows, columns=[Fraction(c) for c in column_sums]
        )
        return family

    def _setup(self, *, metric: str, k: int, inner_size: int, exact: bool, rows: list, columns: list[Fraction]) -> None:
        self.metric = _check_metric(metric)
        self.exact, self.k, self.base_inner_size = exact, k, inner_size
        self.rows = _Profile(values=rows, rows=True)
        self.columns = _Profile(values=columns if self.exact else [float(x) for x in columns], rows=False)
        self._column_values: list = columns
        self._exact_profile: _Profile | None = None
        self.base_norms = self._norms(1)
        self.alphas_exact: list[Fraction] = []
        self.inner_sizes = [self.base_inner_size]

    def _norms(self, level: int) -> LevelNorms:
        return LevelNorms(
            size=self.rows.sizes[level - 1],
            max_row_norm_squared=self.rows.maxima[level - 1],
            frobenius_squared=self.rows.totals[level - 1],
            sensitivity=self.columns.maxima[level - 1],
        )

    def _extend(self, levels: int) -> None:
        while len(self.rows.sizes) < levels:
            alpha = dyadic(
                optimal_alpha(first_costs=self._norms(len(self.rows.sizes)), second_costs=self.base_norms, metric=self.metric)
            )
            self.alphas_exact.append(alpha)
            row_scale, column_scale = self._scaled(alpha)
            self.rows.add_level(row_scale)
            self.columns.add_level(column_scale)
            self.inner_sizes.append((2 * self.k + 1) * self.inner_sizes[-1] + self.base_inner_size)

    @property
    def exact_columns(self) -> _Profile:
        """The column profile in exact rationals (for a float base: its dyadic entries summed
        exactly), built on first use: planning ranks with floats, only the sensitivity of the
        lift that runs needs it."""
        if self.exact:
            return self.columns
        profile = self._exact_profile or _Profile(values=self._column_values, rows=False)
        while len(profile.sizes) < len(self.columns.sizes):
            profile.add_level(1 / self.alphas_exact[len(profile.sizes) - 1])
        self._exact_profile = profile
        return profile

    def asymptotic_constant(self) -> float:
        """2c²/log₂(2k+1)³ = 2C²·(log₂k / log₂(2k+1))³ (Theorem 2.5), c = c₂ or c_F of the base."""
        norms = self.base_norms
        # Exact product first: the factors may over/underflow in floats while c² does not.
        L2 = Fraction(norms.max_row_norm_squared) if self.metric == "maxse" else Fraction(norms.frobenius_squared) / self.k
        return lifted_constant(c_squared=L2 * Fraction(norms.sensitivity) ** 2, base_size=self.k)

    def row_norms_squared(self, *, n: int) -> np.ndarray:
        """‖(L_p)_t‖² for t = 0 … n−1 of the plan's lift for n (α's of the "paper" rule), float64:
        the per-step noise variance of the counter is 2b²·‖(L_p)_t‖² (``_Profile`` recursion)."""
        p = levels_for(n=check_size(n, name="n"), base_size=self.k)
        self._extend(p)
        return self.rows.sequence(p, n)

    def _scaled(self, alpha: Fraction) -> tuple[Number, Number]:
        value = alpha if self.exact else float(alpha)
        return value * value, 1 / value

    def _truncated(self, p: int, n: int, alpha: Fraction) -> tuple[Number, Number, Number]:
        """(‖L_p[:n]‖_F², ‖L_p[:n]‖₂→∞², ‖R_p[:, :n]‖₁→₁) with α_{p−1} = alpha (p ≥ 2)."""
        row_scale, column_scale = self._scaled(alpha)
        row_sum, row_max = self.rows.prefix(p, n, scale=row_scale)
        return row_sum, row_max, self.columns.prefix(p, n, scale=column_scale)[1]

    def _tuned_top_alpha(self, p: int, n: int) -> Fraction:
        """α_{p−1} minimising the metric's cost of the truncation to n, levels below fixed.

        As a function of t = log α the truncated cost is f(t) = X(t)·Y(t)² (times 1/n), with
        X = max_rows(x_t + e^{2t}·y_t) (``maxse``) or Σ_rows(x_t + e^{2t}·y_t) (``meanse``) and
        Y = max_columns(u_j + e^{−t}·v_j), all x, y, u, v ≥ 0 (``_Profile``'s recursion: a row's
        norm² is its level-(p−1) part plus α²·its coarse part, a column's ℓ1 norm its level-(p−1)
        part plus its coarse part/α). Each x + e^{2t}y and u + e^{−t}v is log-convex in t; sums,
        maxima and products of log-convex functions are log-convex; so log f is convex and the
        golden-section search below (on t, 200 steps over [−40, 40] after bracketing) converges
        to the global minimum. The result is rounded to a dyadic α like every α of the plan.
        """

        def log_cost(alpha: Fraction) -> float:
            row_sum, row_max, sensitivity = self._truncated(p, n, alpha)
            return math.log(float(row_max if self.metric == "maxse" else row_sum)) + 2 * math.log(float(sensitivity))

        def objective(t: float) -> float:
            return log_cost(dyadic(math.exp(t)))

        low, high = -40.0, 40.0
        ratio = (math.sqrt(5) - 1) / 2
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        fa, fb = objective(a), objective(b)
        for _ in range(200):
            if fa <= fb:
                high, b, fb = b, a, fa
                a = high - ratio * (high - low)
                fa = objective(a)
            else:
                low, a, fa = a, b, fb
                b = low + ratio * (high - low)
                fb = objective(b)
            if high - low < 1e-12:
                break
        candidates = [dyadic(math.exp((low + high) / 2)), self.alphas_exact[p - 2]]
        return min(candidates, key=log_cost)

    def column_norms_exact(self, *, n: int) -> list[Fraction]:
        """‖(R_p)_{:, j}‖₁ for the first n columns, exactly (Fractions), for the plan of n with
        the "paper" α rule (the one counters run): the column profile of ``_Profile``."""
        n = check_size(n, name="n")
        p = levels_for(n=n, base_size=self.k)
        self._extend(p)
        if p == 1:
            return [Fraction(v) for v in self.exact_columns.entries(1, n)]
        scale = 1 / Fraction(self.alphas_exact[p - 2])
        return [Fraction(v) for v in self.exact_columns.entries(p, n, scale=scale)]

    def column_norms_exact_of(self, n: int) -> list[Fraction]:
        """``column_norms_exact`` with n positional (a ``Mechanism.column_norms``)."""
        return self.column_norms_exact(n=n)

    def plan(
        self,
        *,
        n: int,
        epsilon: float = UNIT_EPSILON,
        alpha_rule: str = "paper",
        exact_sensitivity: bool = True,
        top_alpha: Fraction | None = None,
    ) -> LiftPlan:
        """The plan of the truncation to n of the least lift with N_p ≥ n.

        ``alpha_rule``: "paper" (every α_i the level-by-level optimum of ``optimal_alpha``, as in
        Arkhipov & Kalinin section 3) or "truncated" (the same α_1 … α_{p−2}, and α_{p−1} minimising the
        plan metric's cost of the truncation to n: see ``_tuned_top_alpha``; never worse).
        ``top_alpha`` (a positive dyadic rational) fixes α_{p−1} instead (p ≥ 2; ignored at p = 1):
        the tilted segments of the anytime counter (``mechanisms.anytime``).
        """
        n = check_size(n, name="n")
        epsilon = check_epsilon(epsilon)
        if alpha_rule not in ALPHA_RULES:
            raise InvalidInputError(f"unknown alpha_rule {alpha_rule!r}; expected one of {ALPHA_RULES}")
        p = levels_for(n=n, base_size=self.k)
        self._extend(p)
        alphas = list(self.alphas_exact[: p - 1])
        if p == 1:
            row_sum, row_max = self.rows.prefix(1, n)
            sensitivity = self.columns.prefix(1, n)[1]
            sensitivity_exact = self.exact_columns.prefix(1, n)[1] if exact_sensitivity else None
            top = (self.rows.totals[0], self.rows.maxima[0], self.columns.maxima[0])
        else:
            if top_alpha is not None:
                alphas[-1] = _dyadic_alpha(top_alpha)
            elif alpha_rule == "truncated":
                alphas[-1] = self._tuned_top_alpha(p, n)
            row_sum, row_max, sensitivity = self._truncated(p, n, alphas[-1])
            sensitivity_exact = self.exact_columns.prefix(p, n, scale=1 / alphas[-1])[1] if exact_sensitivity else None
            row_scale, column_scale = self._scaled(alphas[-1])
            top = (*self.rows.next_totals(p - 1, row_scale), self.columns.next_totals(p - 1, column_scale)[1])
        N_p, M_p = self.rows.sizes[p - 1], self.inner_sizes[p - 1]
        per_level = {
            "max_row_norm_squared": (*self.rows.maxima[: p - 1], top[1]),
            "frobenius_squared": (*self.rows.totals[: p - 1], top[0]),
            "sensitivities": (*self.columns.maxima[: p - 1], top[2]),
        }
        return LiftPlan(
            base_size=self.k,
            base_inner_size=self.base_inner_size,
            metric=self.metric,
            alpha_rule=alpha_rule,
            n=n,
            epsilon=epsilon,
            levels=p,
            sizes=tuple(self.rows.sizes[:p]),
            inner_sizes=tuple(self.inner_sizes[:p]),
            alphas=tuple(float(a) for a in alphas),
            alphas_exact=tuple(alphas),
            max_row_norm_squared=tuple(float(x) for x in per_level["max_row_norm_squared"]),
            frobenius_squared=tuple(float(x) for x in per_level["frobenius_squared"]),
            sensitivities=tuple(float(x) for x in per_level["sensitivities"]),
            truncated_max_row_norm_squared=float(row_max),
            truncated_frobenius_squared=float(row_sum),
            sensitivity=float(sensitivity),
            costs=costs_from_norms(
                n=n,
                inner_size=M_p,
                epsilon=epsilon,
                max_row_norm_squared=row_max,
                frobenius_squared=row_sum,
                sensitivity=sensitivity,
            ),
            untruncated_costs=costs_from_norms(
                n=N_p,
                inner_size=M_p,
                epsilon=epsilon,
                max_row_norm_squared=top[1],
                frobenius_squared=top[0],
                sensitivity=top[2],
            ),
            asymptotic_constant=self.asymptotic_constant(),
            truncated_max_row_norm_squared_exact=row_max if self.exact else None,
            truncated_frobenius_squared_exact=row_sum if self.exact else None,
            sensitivity_exact=sensitivity_exact,
            per_level_exact=per_level if self.exact else None,
        )


def _dyadic_alpha(alpha) -> Fraction:
    """A given α as an exact positive dyadic rational (the lattice of a coarse level is 2^-g/α:
    the release needs α exact)."""
    value = Fraction(alpha)
    if value <= 0 or value.denominator & (value.denominator - 1):
        raise InvalidInputError(f"alpha must be a positive dyadic rational, got {alpha}")
    return value


def lift_plan(
    *,
    base: Operand,
    n: int,
    metric: str,
    epsilon: float = UNIT_EPSILON,
    alpha_rule: str = "paper",
    tolerance: float = DEFAULT_TOLERANCE,
) -> LiftPlan:
    """The ``LiftPlan`` of ``base`` truncated to n: levels, α's, costs, exact sensitivity.

    Args:
        base: a Factorization of T_k (float64) or an exact (decoder, encoder) pair.
        n: the stream length; the plan uses the least p with N_p ≥ n and truncates to n.
        metric: "maxse" or "meanse", the cost the α's minimise.
        epsilon: ε of the reported MaxSE / MeanSE.
        alpha_rule: "paper" (level-by-level optimal α) or "truncated" (last α tuned to n).
        tolerance: max-entry residual allowed for a float base.

    Returns:
        The ``LiftPlan``; its ``sensitivity_exact`` is ‖R_p[:, :n]‖₁→₁ as a Fraction.

    Raises:
        NotAFactorizationError: the base does not factor T_k (beyond ``tolerance`` for floats,
            exactly for an exact pair).
        InvalidInputError: n < 1, ε ≤ 0 or an unknown metric or rule.
    """
    n = check_size(n, name="n")
    return LiftedFamily(base=base, metric=metric, tolerance=tolerance).plan(n=n, epsilon=epsilon, alpha_rule=alpha_rule)


def asymptotic_constant(*, base: Operand, metric: str) -> float:
    """Theorem 2.5: the lifted leading constant 2C²·(log₂k / log₂(2k+1))³ = 2c²/log₂(2k+1)³,
    c = c₂ (``maxse``) or c_F (``meanse``) of the base."""
    return LiftedFamily(base=base, metric=metric).asymptotic_constant()


# ---------------------------------------------------------------------------------------------
# Explicit matrices (tests, small n).


def explicit_lift(
    *, base: Operand, levels: int, alphas: Sequence, n: int | None = None, tolerance: float = DEFAULT_TOLERANCE
) -> Operand:
    """The explicit p-fold lift (L_p, R_p), truncated to L_p[:n], R_p[:, :n] when n is given.

    ``alphas`` = [α_1, …, α_{p−1}] (ints/Fractions for an exact base, e.g. ``plan.alphas_exact``).
    Returns a ``Factorization`` holding float64 CSR matrices (``.dense()`` gives arrays) for a
    float base, an exact pair of object arrays for an exact one; the layout is ``diamond``'s,
    applied as (L_{i+1}, R_{i+1}) = (L_i, R_i) ◇_{α_i} base. Refuses lifts whose dense L_p would
    have more than ``MAX_EXPLICIT_ENTRIES`` entries (it is meant for tests and small n).
    """
    import scipy.sparse

    p = check_size(levels, name="levels")
    alphas = list(alphas)
    if len(alphas) != p - 1:
        raise InvalidInputError(f"{p} levels need {p - 1} alphas, got {len(alphas)}")
    k = check_factorizes(base, name="base", tolerance=tolerance)
    decoder = _matrices(base, name="base")[0]
    size, inner = k, decoder.shape[1]
    for _ in range(p - 1):
        size, inner = (2 * k + 1) * size + k, (2 * k + 1) * inner + decoder.shape[1]
    if size * inner > MAX_EXPLICIT_ENTRIES:
        raise InvalidInputError(
            f"the explicit {p}-fold lift has {size}×{inner} entries, more than {MAX_EXPLICIT_ENTRIES}; use lift_plan"
        )
    if n is not None:
        n = check_size(n, name="n", maximum=size)
    A, B, exact = _matrices(base, name="base")
    if exact:
        values = [_as_alpha(alpha, exact=True) for alpha in alphas]
        L, R = A, B
        for alpha in values:
            L, R = _diamond_matrices(L, R, A, B, alpha, kind="exact")
        return (L, R) if n is None else (L[:n].copy(), R[:, :n].copy())
    values = [_as_alpha(alpha, exact=False) for alpha in alphas]
    L, R = scipy.sparse.csr_matrix(A), scipy.sparse.csr_matrix(B)
    for alpha in values:
        L, R = _diamond_matrices(L, R, A, B, alpha, kind="sparse")
    if n is not None:
        L, R = L[:n], R[:, :n]
    metadata = {"made_by": {"operation": "lift", "levels": p, "alphas": [float(a) for a in values], "n": n}}
    return Factorization(decoder=L, encoder=R, metadata=metadata)


def lifted_factorization(*, base: Factorization, plan: LiftPlan, base_file: str | os.PathLike | None = None) -> Factorization:
    """The explicit lift of ``plan`` (L_p[:n], R_p[:, :n]) with its metadata: the metric, the
    base file and its sha256 (when given), levels, α's and the untruncated size."""
    lifted = explicit_lift(base=base, levels=plan.levels, alphas=plan.alphas_exact, n=plan.n)
    if not isinstance(lifted, Factorization):
        raise InvalidInputError("lifted_factorization needs a float base (a Factorization)")
    lifted.metadata = {
        "metric": plan.metric,
        "made_by": {
            "operation": "lift",
            "base": None if base_file is None else str(base_file),
            "base_sha256": None if base_file is None else file_sha256(base_file),
            "levels": plan.levels,
            "alphas": list(plan.alphas),
            "alpha_rule": plan.alpha_rule,
            "n": plan.n,
            "truncated_from": plan.lifted_size,
        },
    }
    return lifted


# ---------------------------------------------------------------------------------------------
# The leading constant against n.


def constant_curve(*, base: Operand, metric: str, sizes: Sequence[int]) -> np.ndarray:
    """The lifted leading constant of ``metric`` at every n in ``sizes`` (n ≥ 2), float64 (the
    curve notebooks/01_certify_and_lift.ipynb plots against its Theorem 2.5 asymptote)."""
    family = LiftedFamily(base=base, metric=metric)
    return np.array([family.plan(n=check_size(n, name="n", minimum=2)).leading_constant for n in sizes])
