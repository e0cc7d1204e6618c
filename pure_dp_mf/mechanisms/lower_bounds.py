"""The 0/1 lower-bound checker (Arkhipov & Kalinin, section 4).

Theorem (Arkhipov & Kalinin, §4). If T_n = L·R with every entry of L and R in {0, 1}, then

* c₂ = ‖L‖₂→∞·‖R‖₁→₁ ≥ 0.290·log₂^{3/2}(n−1), and
* c_F = ‖L‖_F·‖R‖₁→₁/√n ≥ (ln 2/6)^{3/2}·√(1−1/n)·log₂^{3/2}(n−1).

The paper's text lost most of the proof; the argument checked here is reconstructed as follows
(docs/lower_bounds.md has it in full). Write m = n−1, rows of L as sets B_i = {k : L_{i,k} = 1}
and columns of R as sets C_j = {k : R_{k,j} = 1}; for 0/1 matrices (L·R)_{i,j} = |B_i ∩ C_j|.
Put A_i = C_{i+1} (1 ≤ i ≤ m).

1. Families. L·R = T_n gives A_i ∩ B_i = ∅ (entry (i, i+1) is 0) and |A_i ∩ B_j| = 1 for
   i < j (entry (j, i+1), i+1 ≤ j, is 1).
2. Counting (Lovász's skew Bollobás theorem): if A_i ∩ B_i = ∅ and A_i ∩ B_j ≠ ∅ for i < j,
   with |A_i| ≤ a and |B_i| ≤ b, then the number of pairs is at most C(a+b, a) (pad every A_i,
   B_i with fresh private elements to sizes exactly a, b: the conditions survive). So m ≤ C(a+b, a).
3. Entropy step. (a+b)^{a+b} ≥ C(a+b, a)·a^a·b^b (one term of the binomial expansion), so
   ln C(a+b, a) ≤ a·ln((a+b)/a) + b·ln((a+b)/b) = a^{2/3}·b^{1/3}·h(b/a) with
   h(t) = t^{-1/3}·ln(1+t) + t^{2/3}·ln(1+1/t), whose maximum is h* = 1.58108 (at t ≈ 5.236;
   h* ≤ 1.5812 by a monotone-bracket grid in floats with margin 5·10⁻⁴, see the tests).
   Hence a^{2/3}b^{1/3} ≥ ln(m)/h* and a·√b ≥ (ln 2/h*)^{3/2}·log₂^{3/2}(m) ≥ 0.290·log₂^{3/2}(m),
   since (ln 2/1.5812)^{3/2} = 0.29024.
4. Norms. For 0/1 matrices ‖R‖₁→₁ ≥ a and ‖L‖₂→∞² = max row sum ≥ b: c₂ ≥ a·√b.
5. Frobenius. With b̄ = (1/m)·Σ_{i≤m} |B_i|, ‖L‖_F² ≥ m·b̄ so c_F² ≥ (1−1/n)·a²·b̄. The set
   S = {i ≤ m : |B_i| ≤ 2b̄} has |S| ≥ m/2 (Markov), and the sub-family indexed by S keeps the
   conditions of step 2 with b_S ≤ 2b̄, so ln(m/2) ≤ ln|S| ≤ h*·2^{1/3}·a^{2/3}·b̄^{1/3}. As
   2^{1/3}·h* < 1.9923 and 6·ln(m/2) ≥ 1.9923·ln m for m ≥ 3, a^{2/3}b̄^{1/3} ≥ ln(m)/6, i.e.
   a²·b̄ ≥ (ln m/6)³ = (ln 2/6)³·log₂³(m). (m = 2: a ≥ 1 and b̄ ≥ 1/2 suffice; m = 1: the bound is 0.)

The checker verifies every hypothesis and every intermediate inequality on the given
factorization, exactly (integers and fractions), and names the first one that fails:

* ``zero_one``: every entry of L and R is 0 or 1 (else the theorem does not apply);
* ``factorization``: L·R = T_n exactly (else the theorem does not apply), checked as
  L·(R·D) = I with the bidiagonal D = T_n⁻¹ (D = I − shift): L·R = T_n ⟺ L·R·D = T_n·D = I since
  D is invertible, and R·D has two entries per run of ones in a row of R, so for tree-like
  factorizations the product costs O(nnz) instead of the n²/2 entries of T_n;
* ``disjoint`` / ``cross``: A_i ∩ B_i = ∅ and A_i ∩ B_j ≠ ∅ for i < j, checked straight from
  the set families, not through the product: for each j the columns {2, …, j} must be covered by
  the runs of ones of the rows {R_k : k ∈ B_j} and column j+1 must not be (A_i = C_{i+1}), a sweep
  over sorted runs costing O(Σ_j Σ_{k∈B_j} runs(R_k)). Step 1 shows the factorization check
  implies both; the implication is one-way (the conditions do not force |A_i ∩ B_j| = 1, nor the
  entries of column 1 or above the superdiagonal), which is why both are checked;
* ``counting``: m ≤ C(a+b, a) at a = max|A_i|, b = max|B_i|;
* ``entropy_c2``: a²·b ≥ 0.290²·log₂³(m);
* ``markov``, ``counting_markov``, ``entropy_cf``: |S| ≥ m/2, |S| ≤ C(a_S+b_S, a_S),
  a²·b̄ ≥ (ln 2/6)³·log₂³(m);
* ``bound_c2``, ``bound_cf``: c₂² and c_F² against the squared bounds.

Irrational bounds are compared through rigorous rational brackets: log₂ m from the bit length of
m^(2^d) (exact integers, refined d = 12, 16, 20 until the comparison is decided) and ln 2 from
Σ 1/(k·2^k) with its tail bound. An undecided comparison (never seen in practice) is reported as
``undecided``, not as a pass.

``exhaustive_minimum`` finds the least c₂ and c_F over all 0/1 factorizations of T_n for n ≤ 6
(any inner size, see its docstring), so the slack of the constants can be read off.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache
from typing import Any, cast

import numpy as np
import scipy.sparse

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.exact import ln2_bounds, log2_bounds
from pure_dp_mf.mechanisms import trees
from pure_dp_mf.validation import check_size

C2_CONSTANT = Fraction(29, 100)
"""The paper's 0.290 in c₂ ≥ 0.290·log₂^{3/2}(n−1)."""

EXHAUSTIVE_MAX_N = 7
"""Largest n for ``exhaustive_minimum`` (n = 6: 0.1 s; n = 7: ≈4 s, Bell(7) = 877 partitions per node)."""

STATUS_HOLDS = "holds"
STATUS_NOT_ZERO_ONE = "not_zero_one"
STATUS_NOT_FACTORIZATION = "not_a_factorization"
STATUS_VIOLATION = "violation"
STATUS_UNDECIDED = "undecided"


# ----------------------------------------------------------------------------- exact constants


def _compare(value: Fraction, bracket) -> str:
    """Decide value ≥ q for the irrational q bracketed by ``bracket(bits)`` = (lower, upper)."""
    for bits in (12, 16, 20):
        lower, upper = bracket(bits)
        if value >= upper:
            return "holds"
        if value < lower:
            return "fails"
    return "undecided"


def c2_bound(n: int) -> float:
    """0.290·log₂^{3/2}(n−1) (float; the checker compares squares exactly)."""
    n = check_size(n, name="n", minimum=2)
    return float(C2_CONSTANT) * math.log2(n - 1) ** 1.5


def cf_bound(n: int) -> float:
    """(ln 2/6)^{3/2}·√(1−1/n)·log₂^{3/2}(n−1) (float; the checker compares squares exactly)."""
    n = check_size(n, name="n", minimum=2)
    return (math.log(2) / 6) ** 1.5 * math.sqrt(1 - 1 / n) * math.log2(n - 1) ** 1.5


def _c2_bound_squared_bracket(n: int):
    """bits ↦ rational bracket of 0.290²·log₂³(n−1)."""

    def bracket(bits: int) -> tuple[Fraction, Fraction]:
        lower, upper = log2_bounds(n - 1, bits=bits)
        return C2_CONSTANT**2 * lower**3, C2_CONSTANT**2 * upper**3

    return bracket


def _ln_cubed_over_216_bracket(m: int, factor: Fraction = Fraction(1)):
    """bits ↦ rational bracket of factor·(ln m / 6)³ = factor·(ln 2·log₂ m)³/216."""
    low2, high2 = ln2_bounds()

    def bracket(bits: int) -> tuple[Fraction, Fraction]:
        lower, upper = log2_bounds(m, bits=bits)
        return factor * (low2 * lower) ** 3 / 216, factor * (high2 * upper) ** 3 / 216

    return bracket


# ----------------------------------------------------------------------------- 0/1 structure


def _zero_one_csr(matrix: Any, *, name: str) -> tuple[scipy.sparse.csr_matrix | None, str | None]:
    """(pattern of ones as CSR int64, None), or (None, reason naming the first non-0/1 entry)."""
    if scipy.sparse.issparse(matrix):
        pattern = scipy.sparse.csr_matrix(matrix)
        if pattern.dtype.kind not in "biuf":
            raise InvalidInputError(f"{name} has dtype {pattern.dtype}; expected numbers")
        if not pattern.has_canonical_format:  # sorted indices, no duplicates; never touch the caller's matrix
            pattern = pattern.copy()
            pattern.sum_duplicates()
        data = pattern.data
        bad = np.flatnonzero(~((data == 0) | (data == 1)))
        if bad.size:
            k = int(bad[0])
            row = int(np.searchsorted(pattern.indptr, k, side="right") - 1)
            return None, f"{name}[{row}, {pattern.indices[k]}] = {data[k].item()!r} is not 0 or 1"
        pattern = pattern.astype(np.int64)
        pattern.eliminate_zeros()
    else:
        array = np.asarray(matrix)
        if array.dtype.kind not in "biuf":
            raise InvalidInputError(f"{name} has dtype {array.dtype}; expected numbers")
        if array.ndim != 2:
            raise InvalidInputError(f"{name} must be 2-dimensional, got shape {array.shape}")
        bad = ~((array == 0) | (array == 1))
        if bad.any():
            i, j = (int(v) for v in np.argwhere(bad)[0])
            return None, f"{name}[{i}, {j}] = {array[i, j].item()!r} is not 0 or 1"
        pattern = scipy.sparse.csr_matrix((array == 1).astype(np.int64))
    pattern.sort_indices()
    return pattern, None


def _check_shapes(decoder: Any, encoder: Any) -> tuple[int, int]:
    for name, matrix in (("decoder", decoder), ("encoder", encoder)):
        shape = getattr(matrix, "shape", None)
        if shape is None or len(shape) != 2:
            raise InvalidInputError(f"{name} must be a 2-dimensional matrix, got shape {shape}")
        if 0 in shape:
            raise InvalidInputError(f"{name} is empty (shape {tuple(shape)})")
    (n, inner), (inner_encoder, columns) = decoder.shape, encoder.shape
    if inner != inner_encoder:
        raise InvalidInputError(f"decoder is {n}×{inner} but encoder is {inner_encoder}×{columns}: inner sizes differ")
    if columns != n:
        raise InvalidInputError(f"L·R is {n}×{columns}, not square: it cannot equal T_n")
    if n < 2:
        raise InvalidInputError(f"the theorem needs n >= 2 (log₂(n−1) is undefined for n = {n})")
    return n, inner


def _difference(n: int) -> scipy.sparse.csr_matrix:
    """D = T_n⁻¹: ones on the diagonal, −1 on the subdiagonal, so (R·D)_{:,j} = R_{:,j} − R_{:,j+1}."""
    return scipy.sparse.diags(
        [np.ones(n, dtype=np.int64), -np.ones(n - 1, dtype=np.int64)], [0, -1], format="csr", dtype=np.int64
    )


def first_product_mismatch(L: scipy.sparse.csr_matrix, R: scipy.sparse.csr_matrix) -> tuple[int, int, int] | None:
    """None if L·R = T_n exactly, else (row, column, value of (L·R)[row, column]) at the first
    wrong entry in row-major order. Integer sparse arithmetic (entries ≤ 2·inner size, no overflow).

    L·R = T_n ⟺ L·(R·D) = I (D = T_n⁻¹ invertible); the first nonzero row of L·R·D − I is the
    first wrong row of L·R (D acts on columns), which is then computed alone."""
    n = L.shape[0]
    error = (L @ (R @ _difference(n))).tocsr() - scipy.sparse.identity(n, dtype=np.int64, format="csr")
    error.eliminate_zeros()
    if error.nnz == 0:
        return None
    row = int(np.flatnonzero(np.diff(error.indptr))[0])
    product = np.asarray((L[row] @ R).toarray()).ravel()
    expected = (np.arange(n) <= row).astype(np.int64)
    column = int(np.flatnonzero(product != expected)[0])
    return row, column, int(product[column])


def _runs(R: scipy.sparse.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of consecutive ones in each row of R: (run pointer per row, first column, last column)."""
    columns, rows = R.indices.astype(np.int64), np.repeat(np.arange(R.shape[0]), np.diff(R.indptr))
    starts = np.ones(columns.size, dtype=bool)
    starts[1:] = (rows[1:] != rows[:-1]) | (columns[1:] != columns[:-1] + 1)
    first = np.flatnonzero(starts)
    last = np.append(first[1:], columns.size)[: first.size] - 1
    pointer = np.zeros(R.shape[0] + 1, dtype=np.int64)
    np.add.at(pointer, rows[first] + 1, 1)
    return np.cumsum(pointer), columns[first], columns[last]


def family_violation(L: scipy.sparse.csr_matrix, R: scipy.sparse.csr_matrix) -> tuple[str, int, int] | None:
    """First violation of A_i ∩ B_i = ∅ or A_i ∩ B_j ≠ ∅ (i < j), 1 ≤ i, j ≤ n−1, or None.

    Returned as ("disjoint", i, i) or ("cross", i, j), 1-based as in the paper. For row j of L the
    runs of ones of the rows {R_k : k ∈ B_j} (0-based columns) must cover columns 1 … j−1 (the
    paper's C_2 … C_j, i.e. A_1 … A_{j−1}) and miss column j (C_{j+1} = A_j). Sorted by
    (j, first column), a cumulative maximum of last columns gives the first uncovered column of
    every j in one vectorized pass."""
    n = L.shape[0]
    m = n - 1
    pointer, first, last = _runs(R)
    Lm = L[:m]
    rows = np.repeat(np.arange(m), np.diff(Lm.indptr))
    counts = pointer[Lm.indices + 1] - pointer[Lm.indices]
    pair_rows = np.repeat(rows, counts)
    run_index = np.repeat(pointer[Lm.indices] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    starts, ends = first[run_index], last[run_index]
    # 0-based row r of L is B_{r+1}: it must miss column r+1 (A_{r+1}) and cover columns 1 … r.
    hits = (starts <= pair_rows + 1) & (ends >= pair_rows + 1)
    disjoint_bad = np.full(m, False)
    disjoint_bad[pair_rows[hits]] = True
    order = np.argsort(pair_rows * (n + 2) + starts, kind="stable")
    r, s, e = pair_rows[order], starts[order], ends[order]
    offset = n + 2
    running = np.maximum.accumulate(r * offset + e) - r * offset  # max end so far within the row group
    previous = np.empty_like(running)
    previous[1:] = running[:-1]
    group_start = np.ones(r.size, dtype=bool)
    group_start[1:] = r[1:] != r[:-1]
    previous[group_start] = 0  # column 0 needs no cover: A_i = C_{i+1}, i ≥ 1
    first_uncovered = np.ones(m, dtype=np.int64)  # a row with no runs covers nothing: column 1 is the first gap
    gaps = s > previous + 1
    candidates = np.where(gaps, previous + 1, n + 1)
    if r.size:
        group_first = np.flatnonzero(group_start)
        gap_min = np.minimum.reduceat(candidates, group_first)
        group_end = np.maximum.reduceat(running, group_first)
        first_uncovered[r[group_first]] = np.minimum(gap_min, group_end + 1)
    cross_bad = first_uncovered <= np.arange(m)  # row r (0-based) needs columns 1 … r covered
    bad = np.flatnonzero(cross_bad | disjoint_bad)
    if bad.size == 0:
        return None
    r0 = int(bad[0])
    if cross_bad[r0]:  # 0-based column c is C_{c+1} = A_c
        return ("cross", int(first_uncovered[r0]), r0 + 1)
    return ("disjoint", r0 + 1, r0 + 1)


# ----------------------------------------------------------------------------- the check


@dataclass(frozen=True)
class Condition:
    """One hypothesis or intermediate inequality of the proof, with its verdict."""

    name: str
    status: str  # "holds", "fails", "undecided"
    detail: str


@dataclass
class LowerBoundReport:
    """Everything ``check_lower_bound`` found (see the module docstring for the conditions)."""

    n: int
    inner_size: int
    status: str
    reason: str
    c2: float | None = None
    cf: float | None = None
    c2_squared: int | None = None
    cf_squared: Fraction | None = None
    c2_bound: float | None = None
    cf_bound: float | None = None
    a: int | None = None
    b: int | None = None
    conditions: list[Condition] = field(default_factory=list)

    @property
    def applies(self) -> bool:
        """Whether the theorem's hypotheses (0/1 entries, L·R = T_n) hold."""
        return self.status not in (STATUS_NOT_ZERO_ONE, STATUS_NOT_FACTORIZATION)

    @property
    def c2_ratio(self) -> float | None:
        if self.c2 is None or self.c2_bound is None:
            return None
        return math.inf if self.c2_bound == 0 else self.c2 / self.c2_bound

    @property
    def cf_ratio(self) -> float | None:
        if self.cf is None or self.cf_bound is None:
            return None
        return math.inf if self.cf_bound == 0 else self.cf / self.cf_bound

    def first_failure(self) -> Condition | None:
        return next((c for c in self.conditions if c.status != "holds"), None)

    def as_dict(self) -> dict:
        return {
            "n": self.n,
            "inner_size": self.inner_size,
            "status": self.status,
            "reason": self.reason,
            "theorem_applies": self.applies,
            **_costs_against_bounds(self),
            "c2_squared": self.c2_squared,
            "cf_squared": None if self.cf_squared is None else [str(self.cf_squared.numerator), str(self.cf_squared.denominator)],
            "a": self.a,
            "b": self.b,
            "conditions": [{"name": c.name, "status": c.status, "detail": c.detail} for c in self.conditions],
        }


def _condition(name: str, holds: bool | str, detail: str) -> Condition:
    status = holds if isinstance(holds, str) else ("holds" if holds else "fails")
    return Condition(name, status, detail)


def _family_conditions(*, L: scipy.sparse.csr_matrix, R: scipy.sparse.csr_matrix, n: int, a: int, b: int) -> list[Condition]:
    """The conditions on the set families (A_i, B_i) of a 0/1 factorization: disjoint, cross, counting, entropy_c2."""
    m = n - 1
    conditions: list[Condition] = [
        _condition("zero_one", True, "every entry of L and R is 0 or 1"),
        _condition("factorization", True, f"L·R = T_{n} exactly (checked as L·(R·D) = I)"),
    ]
    violation = family_violation(L, R)
    if violation is None:
        conditions += [
            _condition("disjoint", True, f"A_i ∩ B_i = ∅ for 1 ≤ i ≤ {m}"),
            _condition("cross", True, f"A_i ∩ B_j ≠ ∅ for 1 ≤ i < j ≤ {m}"),
        ]
    else:
        kind, i, j = violation
        text = f"A_{i} ∩ B_{i} ≠ ∅" if kind == "disjoint" else f"A_{i} ∩ B_{j} = ∅ with {i} < {j}"
        conditions.append(_condition(kind, False, text))
    conditions.append(
        _condition("counting", m <= math.comb(a + b, a), f"n−1 = {m} ≤ C(a+b, a) = C({a + b}, {a}) at a = {a}, b = {b}")
    )
    conditions.append(
        _condition(
            "entropy_c2", _compare(Fraction(a * a * b), _c2_bound_squared_bracket(n)), f"a²·b = {a * a * b} ≥ 0.290²·log₂³(n−1)"
        )
    )
    return conditions


def _markov_conditions(
    *, n: int, a: int, sizes_a: np.ndarray, sizes_b: np.ndarray, c2_squared: int, cf_squared: Fraction
) -> list[Condition]:
    """The Markov-restricted conditions (markov, counting_markov, entropy_cf) and both final bounds."""
    m = n - 1
    mean_b = Fraction(int(sizes_b.sum()), m)
    in_s = sizes_b.astype(np.int64) * m <= 2 * int(sizes_b.sum())  # |B_i| ≤ 2b̄, in integers
    size_s = int(in_s.sum())
    a_s, b_s = int(sizes_a[in_s].max()), int(sizes_b[in_s].max())
    return [
        _condition("markov", 2 * size_s >= m, f"|S| = {size_s} ≥ m/2 = {Fraction(m, 2)}, S = {{i : |B_i| ≤ 2b̄}}, b̄ = {mean_b}"),
        _condition(
            "counting_markov", size_s <= math.comb(a_s + b_s, a_s), f"|S| = {size_s} ≤ C(a_S+b_S, a_S) = C({a_s + b_s}, {a_s})"
        ),
        _condition(
            "entropy_cf",
            _compare(a * a * mean_b, _ln_cubed_over_216_bracket(m)),
            f"a²·b̄ = {a * a * mean_b} ≥ (ln 2/6)³·log₂³(n−1)",
        ),
        _condition(
            "bound_c2", _compare(Fraction(c2_squared), _c2_bound_squared_bracket(n)), f"c₂² = {c2_squared} ≥ 0.290²·log₂³(n−1)"
        ),
        _condition(
            "bound_cf",
            _compare(cf_squared, _ln_cubed_over_216_bracket(m, Fraction(m, n))),
            f"c_F² = {cf_squared} ≥ (ln 2/6)³·(1−1/n)·log₂³(n−1)",
        ),
    ]


def _verdict(conditions: list[Condition]) -> tuple[str, str]:
    """(status, reason) of a report from its conditions: the first one that does not hold decides."""
    failed = next((c for c in conditions if c.status != "holds"), None)
    if failed is None:
        return STATUS_HOLDS, "0/1 factorization of T_n: every condition of the proof and both bounds hold"
    if failed.status == "undecided":
        return STATUS_UNDECIDED, f"condition {failed.name} could not be decided at 2^-20 precision: {failed.detail}"
    reason = f"condition {failed.name} fails on a valid 0/1 factorization ({failed.detail}): a bug in the checker or a gap in the paper"
    return STATUS_VIOLATION, reason


def check_lower_bound(*, decoder: Any, encoder: Any) -> LowerBoundReport:
    """Check Arkhipov & Kalinin's 0/1 lower bounds on T_n = decoder·encoder (dense or scipy.sparse).

    Returns a report whose ``status`` is "holds" (0/1, exact factorization, every condition and
    both bounds proven in exact arithmetic), "not_zero_one" or "not_a_factorization" (the theorem
    does not apply; ``reason`` names the first offending entry), "violation" (the theorem applies
    but a condition fails: a bug in this checker or a gap in the paper; see ``first_failure``) or
    "undecided". Bad input (shapes, non-square product, n < 2, non-numeric) raises
    ``InvalidInputError``."""
    n, inner = _check_shapes(decoder, encoder)
    L, reason = _zero_one_csr(decoder, name="decoder")
    R = None
    if L is not None:
        R, reason = _zero_one_csr(encoder, name="encoder")
    if L is None or R is None:
        return LowerBoundReport(n, inner, STATUS_NOT_ZERO_ONE, f"not a 0/1 factorization: {reason}; the theorem does not apply")
    mismatch = first_product_mismatch(L, R)
    if mismatch is not None:
        row, column, value = mismatch
        return LowerBoundReport(
            n,
            inner,
            STATUS_NOT_FACTORIZATION,
            f"0/1 but L·R ≠ T_{n}: (L·R)[{row}, {column}] = {value}, T_n has {int(column <= row)}; the theorem does not apply",
        )
    m = n - 1
    row_sizes = np.diff(L.indptr)  # |B_i| for i = 1 … n (0-based rows)
    column_sizes = np.bincount(R.indices, minlength=n)  # |C_j| for j = 1 … n
    norm_l = int(row_sizes.max())  # ‖L‖₂→∞² = largest row sum of a 0/1 matrix
    norm_r = int(column_sizes.max())  # ‖R‖₁→₁
    frobenius = int(L.nnz)  # ‖L‖_F²
    c2_squared = norm_l * norm_r**2
    cf_squared = Fraction(frobenius * norm_r**2, n)
    sizes_a, sizes_b = column_sizes[1:], row_sizes[:m]  # |A_i|, |B_i|, i = 1 … m
    a, b = int(sizes_a.max()), int(sizes_b.max())
    conditions = _family_conditions(L=L, R=R, n=n, a=a, b=b)
    conditions += _markov_conditions(n=n, a=a, sizes_a=sizes_a, sizes_b=sizes_b, c2_squared=c2_squared, cf_squared=cf_squared)
    status, reason = _verdict(conditions)
    return LowerBoundReport(
        n,
        inner,
        status,
        reason,
        c2=math.sqrt(c2_squared),
        cf=math.sqrt(cf_squared),
        c2_squared=c2_squared,
        cf_squared=cf_squared,
        c2_bound=c2_bound(n),
        cf_bound=cf_bound(n),
        a=a,
        b=b,
        conditions=conditions,
    )


def check_factorization_lower_bound(factorization) -> LowerBoundReport:
    """``check_lower_bound`` on a ``Factorization`` (its decoder and encoder)."""
    return check_lower_bound(decoder=factorization.decoder, encoder=factorization.encoder)


# ----------------------------------------------------------------------------- exhaustive search


@dataclass(frozen=True)
class ExhaustiveMinimum:
    """Least c₂² and c_F² over 0/1 factorizations of T_n with inner size ≤ ``max_inner_size``
    (None: unrestricted), with a witness (L, R) for each (dense int64)."""

    n: int
    max_inner_size: int | None
    c2_squared: int
    cf_squared: Fraction
    c2_witness: tuple[np.ndarray, np.ndarray]
    cf_witness: tuple[np.ndarray, np.ndarray]
    nodes: int

    @property
    def c2(self) -> float:
        return math.sqrt(self.c2_squared)

    @property
    def cf(self) -> float:
        return math.sqrt(self.cf_squared)


@cache
def _set_partitions(mask: int) -> tuple[tuple[int, ...], ...]:
    """All partitions of the bit set ``mask`` into nonempty blocks (block containing the lowest bit first)."""
    if mask == 0:
        return ((),)
    low = mask & -mask
    rest = mask ^ low
    result = []
    sub = rest
    while True:  # every subset of rest joins the lowest element
        block = low | sub
        result += [(block,) + tail for tail in _set_partitions(rest ^ sub)]
        if sub == 0:
            break
        sub = (sub - 1) & rest
    return tuple(result)


def _witness(n: int, chosen: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    family = sorted({block for blocks in chosen for block in blocks})
    index = {block: k for k, block in enumerate(family)}
    R = np.array([[(block >> c) & 1 for c in range(n)] for block in family], dtype=np.int64)
    L = np.zeros((n, len(family)), dtype=np.int64)
    for i, blocks in enumerate(chosen):
        L[i, [index[block] for block in blocks]] = 1
    return L, R


def _search(n: int, max_inner_size: int | None, objective: str) -> tuple[int, list[tuple[int, ...]], int]:
    """Branch and bound over one set partition of each prefix [i]; returns (best value, choice, nodes).
    Value: max_i p_i·a² ("c2") or Σ_i p_i·a² ("cf", to be divided by n), a = largest column count."""
    options = []
    for i in range(1, n + 1):
        options.append(sorted(_set_partitions((1 << i) - 1), key=len))
    limit = max_inner_size if max_inner_size is not None else 1 << n
    best: list[Any] = [math.inf, None]
    nodes = [0]
    counts = [0] * n
    family: dict[int, int] = {}  # block -> number of prefixes using it
    chosen: list[tuple[int, ...]] = []

    def visit(i: int, blocks_max: int, blocks_sum: int, a: int) -> None:
        nodes[0] += 1
        if i == n:
            value = blocks_max * a * a if objective == "c2" else blocks_sum * a * a
            if value < best[0]:
                best[0], best[1] = value, list(chosen)
            return
        for partition in options[i]:
            p = len(partition)
            new = [block for block in partition if block not in family]
            if len(family) + len(new) > limit:
                continue
            for block in new:
                for c in range(n):
                    if block >> c & 1:
                        counts[c] += 1
            a_next = max(a, max(counts)) if new else a
            m_next, s_next = max(blocks_max, p), blocks_sum + p
            remaining = n - 1 - i
            bound = m_next * a_next**2 if objective == "c2" else (s_next + remaining) * a_next**2
            if bound < best[0]:
                for block in partition:
                    family[block] = family.get(block, 0) + 1
                chosen.append(partition)
                visit(i + 1, m_next, s_next, a_next)
                chosen.pop()
                for block in partition:
                    family[block] -= 1
                    if family[block] == 0:
                        del family[block]
            for block in new:
                for c in range(n):
                    if block >> c & 1:
                        counts[c] -= 1

    visit(0, 0, 0, 0)
    return best[0], best[1], nodes[0]


def exhaustive_minimum(*, n: int, max_inner_size: int | None = None) -> ExhaustiveMinimum:
    """Least c₂ and c_F over all 0/1 factorizations T_n = L·R with inner size ≤ ``max_inner_size``
    (default: no bound), for 2 ≤ n ≤ 7, exactly.

    Reduction (why no inner-size bound is needed): from any 0/1 factorization delete zero columns of
    L with their rows of R and zero rows of R with their columns of L; two equal nonzero rows R_k =
    R_k' are never both used by one row of L (an entry of L·R would be 2), so merge them (column
    L_k + L_k', one row of R). Each step keeps L·R = T_n, keeps 0/1, and does not increase
    ‖L‖₂→∞, ‖L‖_F or ‖R‖₁→₁, nor the inner size. In the reduced form the rows of R are distinct
    nonempty sets F, each used, and row i of L picks members of F partitioning [i] exactly. So the
    search chooses one set partition of every prefix [i] (Bell(i) choices; F is the union of the
    chosen blocks, at most n(n+1)/2 = 21 sets for n = 6) and minimizes max_i p_i·a² (c₂²) or
    Σ_i p_i·a²/n (c_F²), a the largest number of chosen sets containing one column — depth-first,
    fewest blocks first, pruning on max(p)·a² resp. (Σp + prefixes left)·a², both monotone."""
    n = check_size(n, name="n", minimum=2, maximum=EXHAUSTIVE_MAX_N)
    if max_inner_size is not None:
        max_inner_size = check_size(max_inner_size, name="max_inner_size", minimum=1)
    c2_value, c2_choice, nodes_c2 = _search(n, max_inner_size, "c2")
    cf_value, cf_choice, nodes_cf = _search(n, max_inner_size, "cf")
    if c2_choice is None:
        raise InvalidInputError(f"no 0/1 factorization of T_{n} has inner size ≤ {max_inner_size}")
    return ExhaustiveMinimum(
        n=n,
        max_inner_size=max_inner_size,
        c2_squared=int(c2_value),
        cf_squared=Fraction(int(cf_value), n),
        c2_witness=_witness(n, c2_choice),
        cf_witness=_witness(n, cf_choice),
        nodes=nodes_c2 + nodes_cf,
    )


# ----------------------------------------------------------------------------- tree sweep


@dataclass(frozen=True)
class TreeRatio:
    """One row of the tree table: costs, bounds and ratios of a tree factorization at size n."""

    tree: str
    arity: int
    n: int
    status: str
    c2: float
    c2_bound: float
    cf: float
    cf_bound: float

    @property
    def c2_ratio(self) -> float:
        return self.c2 / self.c2_bound

    @property
    def cf_ratio(self) -> float:
        return self.cf / self.cf_bound

    def as_dict(self) -> dict:
        return {
            "tree": self.tree,
            "arity": self.arity,
            "n": self.n,
            "status": self.status,
            **_costs_against_bounds(self),
        }


def _costs_against_bounds(result: LowerBoundReport | TreeRatio) -> dict:
    """The ``as_dict`` entries of c₂, c_F, their lower bounds and the ratios cost/bound."""
    return {
        "c2": result.c2,
        "c2_bound": result.c2_bound,
        "c2_ratio": result.c2_ratio,
        "cf": result.cf,
        "cf_bound": result.cf_bound,
        "cf_ratio": result.cf_ratio,
    }


def tree_ratios(*, tree: str, n_values: list[int], arity: int = 2) -> Iterator[TreeRatio]:
    """Check the tree ``trees.tree_factorization(mechanism=tree, …)`` at each n and yield its
    costs, bounds and ratios (float display values; the status comes from the exact check).
    ``arity`` is ignored for the binary tree (recorded as 2)."""
    for n in n_values:
        factorization = trees.tree_factorization(mechanism=tree, n=n, arity=None if tree == "binary" else arity)
        report = check_factorization_lower_bound(factorization)
        if not report.applies or None in (report.c2, report.c2_bound, report.cf, report.cf_bound):
            raise InvalidInputError(f"{tree} tree (arity {arity}) at n = {n}: {report.reason}")
        yield TreeRatio(
            tree,
            arity,
            n,
            report.status,
            cast(float, report.c2),
            cast(float, report.c2_bound),
            cast(float, report.cf),
            cast(float, report.cf_bound),
        )
