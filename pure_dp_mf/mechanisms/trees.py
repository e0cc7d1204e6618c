"""Tree mechanisms as factorizations T_n = L·R, with exact finite-n costs (Arkhipov & Kalinin, Table 1, App. C).

Five baselines, each (a) an explicit sparse factorization for every n ≥ 1 and (b) its exact
costs ‖L‖₂→∞² (max row norm²), ‖L‖_F²/n (mean row norm²) and ‖R‖₁→₁ (sensitivity Δ) from a
closed form / digit dynamic programme in O(k·log n) integer operations, for any Python-int n:

==============================  =================================================  =================
name                            prefix [1, t] is written as                        Table 1 (n → ∞)
==============================  =================================================  =================
``binary``                      binary digits of t (Dwork et al.; Chan et al.)      2 / 1
``kary``                        base-k digits of t (refs. [5, 40] of Arkhipov & Kalinin)     32/log₂(17)³ / 16/log₂(17)³
``kary-subtraction``            balanced base-k digits (Andersson–Pagh–Steiner–      16/log₂(17)³ /
                                Torkamani): d_j ∈ [−⌊(k−1)/2⌋, k−1−⌊(k−1)/2⌋]      180/(19·log₂(19)³)
``smooth-binary``               data on the leaves of Hamming weight w = ⌈h/2⌉     0.25 / 0.25
                                (Andersson–Pagh), Laplace version
``averaged-kary-subtraction``   ½·(left decomposition) + ½·(root − right            8/log₂(17)³ both
                                decomposition of (t, k^H] by maximal nodes),
                                one noise variable per node
==============================  =================================================  =================

Every node is an interval of the stream; its row of R is the 0/1 indicator of its positions,
so R is 0/1 and the noise of a node is its own independent Laplace variable. L holds the
coefficients: 0/1 (binary, k-ary), ±1 (subtraction), ±½ or 1 (averaged).

Conventions (the finite-n constants depend on them; docs/trees.md has worked examples):

* **Truncation, not completion.** The tree is the one of the infinite stream (levels j ≥ 0,
  level-j nodes the aligned intervals (m·k^j, (m+1)·k^j]); the factorization of T_n keeps
  exactly the nodes that (i) intersect [1, n], their R-row being the indicator of the part
  inside [1, n], and (ii) have a non-zero coefficient in some row t ≤ n. Nodes failing (i) carry
  no data, so their noise is never added (their L-coefficients are dropped); nodes failing (ii)
  are never read. No n is rounded up to a power of the arity; the rows t ≤ n are the same as in
  the tree of any larger horizon, except for nodes dropped by (i).
* **Levels / Δ.** For the digit trees (binary, k-ary, subtraction) H is the number of digits
  needed for n (binary and k-ary: H = ⌊log_k n⌋ + 1; subtraction: the least H with
  n ≤ (k−1−a)(k^H−1)/(k−1), a = ⌊(k−1)/2⌋) and Δ = H: position 1 lies in a used node on every
  level. In particular the binary tree for n = 2^h uses the root [1, n] (for t = n) and Δ = h+1;
  for n = 2^h − 1, Δ = h. The averaged tree has H = ⌈log_k n⌉ levels below a root node [1, n]
  that every row uses (coefficient ½, or 1 for t = k^H), so Δ = H + 1. The smooth binary tree
  has height h, the least h with C(h, ⌈h/2⌉) ≥ n + 1, data item t on the t-th leaf of weight
  w = ⌈h/2⌉, and Δ ≤ h − w (attained for large n; computed exactly).
* **Subtraction with even k** uses the digits [−(k/2−1), k/2]; k = 2 gives the binary tree.

Costs are exact (``fractions.Fraction``); MaxSE = 2·Δ²·‖L‖₂→∞²/ε² and MeanSE = 2·Δ²·‖L‖_F²/(n·ε²)
(``costs.py``). Privacy: a tree mechanism run as L·(R·x + z) with z i.i.d. Laplace(Δ/ε) is ε-DP
for neighbouring streams that differ by one in one position, because every column of R has ℓ1
norm at most Δ; this module only builds the matrices and computes errors.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from pure_dp_mf.cache import read_entry, write_entry
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.costs import leading_constant
from pure_dp_mf.factorizations.factorization import METRICS, Factorization
from pure_dp_mf.validation import UNIT_EPSILON, check_epsilon, check_size

MECHANISMS = ("binary", "kary", "kary-subtraction", "smooth-binary", "averaged-kary-subtraction")
"""Every tree mechanism, by the name used in the API, the CLI and the comparison table."""

ARITY_MECHANISMS = ("kary", "kary-subtraction", "averaged-kary-subtraction")
"""The mechanisms that take an ``arity`` (k ≥ 2)."""

MAX_EXPLICIT_N = 1 << 18
"""Largest n for which an explicit matrix is built; beyond, use ``tree_costs``."""

MAX_EXPLICIT_ENTRIES = 1 << 23
"""Largest number of non-zeros of L and R together in an explicit factorization (memory bound)."""

ARITY_SEARCH_MAX = 128
"""``best_arity`` searches the arities 2 … min(n + 1, ARITY_SEARCH_MAX)."""


# ---------------------------------------------------------------------------------- arguments


def _check_mechanism(mechanism: object) -> str:
    if mechanism not in MECHANISMS:
        raise InvalidInputError(f"unknown tree mechanism {mechanism!r}; expected one of {', '.join(MECHANISMS)}")
    return mechanism  # type: ignore[return-value]


def _required_arity(mechanism: str, arity: object) -> int:
    """The arity of an arity mechanism (clear error when missing or not an integer ≥ 2)."""
    if arity is None:
        raise InvalidInputError(f"mechanism {mechanism!r} needs an arity (an integer ≥ 2; see trees.best_arity)")
    return check_size(arity, name="arity", minimum=2)


def _check_arity(mechanism: str, arity: object) -> int | None:
    if mechanism in ARITY_MECHANISMS:
        if arity is None:
            raise InvalidInputError(f"mechanism {mechanism!r} needs an arity (an integer ≥ 2; see trees.best_arity)")
        return check_size(arity, name="arity", minimum=2)
    if arity is not None:
        raise InvalidInputError(f"mechanism {mechanism!r} takes no arity, got arity = {arity!r}")
    return None


def _check_explicit_n(n: object, mechanism: str, arity: int | None) -> int:
    """n as an int, refused when n > MAX_EXPLICIT_N or L and R would hold > MAX_EXPLICIT_ENTRIES non-zeros."""
    n = check_size(n, name="n")
    call = f"trees.tree_costs(mechanism={mechanism!r}, n={n}" + (f", arity={arity})" if arity else ")")
    if n <= MAX_EXPLICIT_N:
        closed = _tree_costs(mechanism, n, arity)
        # entries of L are ±1 (±½ for the averaged tree), so nnz(L) = Σ_t ‖L_t‖² (·4); nnz(R) ≤ n·Δ
        scale = 4 if mechanism == "averaged-kary-subtraction" else 1
        entries = int(closed.mean_row_norm_squared * n * scale + closed.sensitivity * n)
        if entries <= MAX_EXPLICIT_ENTRIES:
            return n
        reason = f"about {entries} non-zeros, limit {MAX_EXPLICIT_ENTRIES}"
    else:
        reason = f"limit n = {MAX_EXPLICIT_N}"
    raise InvalidInputError(
        f"n = {n} is too large for an explicit matrix ({reason}); its exact costs come in closed form from {call}"
    )


# -------------------------------------------------------------------- digit trees (offset a)
# t = Σ_j d_j·k^j with digits d_j ∈ [−a, k−1−a]; a = 0: ordinary k-ary digits, a = ⌊(k−1)/2⌋:
# balanced digits (subtraction trick). With u = t + M, M = a·(k^H−1)/(k−1), the digits of t are
# the ordinary base-k digits e_j of u minus a. P_j = Σ_{i≥j} d_i·k^i. On level j the interval
# between P_{j+1} and P_j is covered by |d_j| level-j nodes, added (d_j > 0) or subtracted (d_j < 0).


def _offset_levels(n: int, k: int, a: int) -> int:
    """Least H with n ≤ (k−1−a)·(k^H − 1)/(k − 1), the largest t with H digits."""
    levels = 1
    while (k - 1 - a) * (k**levels - 1) // (k - 1) < n:
        levels += 1
    return levels


def _offset_entries(n: int, k: int, a: int):
    """(row, level, node index, coefficient) arrays of the digit tree restricted to [1, n]."""
    levels = _offset_levels(n, k, a)
    return levels, _offset_parts(np.arange(1, n + 1, dtype=np.int64), k, a, levels)


def _offset_parts(t: np.ndarray, k: int, a: int, levels: int) -> list:
    """The (row, level, node index, coefficient) parts of the rows t (1-based) of the digit tree
    with ``levels`` levels: per level j, the nodes of the digits of u = t + M above or below 0."""
    u = t + a * (k**levels - 1) // (k - 1)
    parts = []
    for j in range(levels):
        size = k**j
        digit = (u // size) % k - a
        above = a * (k**levels - k ** (j + 1)) // (k - 1)
        base = ((u // (size * k)) * (size * k) - above) // size  # P_{j+1} / k^j
        for c in range(k - 1 - a):
            mask = digit > c
            parts.append((t[mask] - 1, j, base[mask] + c, 1))
        for c in range(a):
            mask = digit < -c
            parts.append((t[mask] - 1, j, base[mask] - (c + 1), -1))
    return parts


def _offset_costs(n: int, k: int, a: int) -> tuple[int, int, int]:
    """(H, max_t ‖L_t‖², Σ_t ‖L_t‖²) by a digit DP over u = t + M ∈ [M+1, M+n].

    ‖L_t‖² = Σ_j |d_j| minus the subtracted nodes that start at or beyond n (dropped, they hold
    no data). A subtracted level-j node (c = 0 … |d_j|−1) starts at (V_j + c)·k^j − M_j with
    V_j = ⌊u/k^j⌋ and M_j = a·(k^H − k^j)/(k−1); it is dropped iff c ≥ D_j := W_j − V_j with
    W_j = ⌈(n + M_j)/k^j⌉. D_j ≥ 0 for every feasible u (D_0 ≥ 0 is u ≤ M + n) and
    D_j = k·D_{j+1} + (W_j − k·W_{j+1}) − e_j; once D ≥ 2 it stays ≥ a + 2 (no drops), so the
    DP state is (min(D, 2), u still equal to M+1 on the digits so far).
    """
    levels = _offset_levels(n, k, a)
    shift = a * (k**levels - 1) // (k - 1)
    low = shift + 1
    low_digits = [(low // k**j) % k for j in range(levels)]
    bound = [-(-(n + a * (k**levels - k**j) // (k - 1)) // k**j) for j in range(levels + 1)]
    states = {(bound[levels], True): (1, 0, 0)}  # (count, total, best) of the prefixes
    for j in range(levels - 1, -1, -1):
        delta = bound[j] - k * bound[j + 1]
        following: dict = {}
        for (slack, tight), (count, total, best) in states.items():
            for e in range(low_digits[j] if tight else 0, k):
                d_slack = k * slack + delta - e
                if d_slack < 0:
                    continue
                value = abs(e - a) - (max(0, (a - e) - d_slack) if e < a else 0)
                key = (min(d_slack, 2), tight and e == low_digits[j])
                old = following.get(key)
                new = (count, total + count * value, best + value)
                following[key] = new if old is None else (old[0] + count, old[1] + new[1], max(old[2], new[2]))
        states = following
    count = sum(entry[0] for entry in states.values())
    assert count == n, (count, n)
    return levels, max(entry[2] for entry in states.values()), sum(entry[1] for entry in states.values())


# ------------------------------------------------------------------------ averaged k-ary tree
# H = ⌈log_k n⌉, root (0, k^H] ∩ [1, n] = [1, n]. For 1 ≤ t < k^H with base-k digits e_j and
# v = ν_k(t) (the lowest non-zero digit): left(t) = Σ_j Σ_{c<e_j} child_c is the k-ary
# decomposition of [1, t]; right(t) is the k-ary decomposition of the suffix (t, k^H] into maximal
# aligned nodes, Σ_{c≥e_v} child_c on level v and Σ_{c>e_j} child_c on the levels j > v (nothing
# below v: for k | t the k leaves (t, t+k] are the one node child_{e_1} of level 1, and so on up).
# Row t is ½·left + ½·(root − right); for t = k^H both halves are the root (coefficient 1).
# Suffix nodes starting at or beyond n hold no data and are dropped.


def _averaged_levels(n: int, k: int) -> int:
    levels = 0
    while k**levels < n:
        levels += 1
    return levels


def _averaged_parts(t: np.ndarray, k: int, levels: int) -> list:
    """(row t − 1, level, node index, 2·coefficient) parts of the averaged rows t (1-based int64
    array; t ≤ k^H), the nodes that start at or beyond n not yet dropped.

    ½·left + ½·(root − right) with right(t) the maximal-node decomposition of (t, k^H]: it starts
    on level v = ν_k(t) with the children c ≥ e_v and takes the children c > e_j above. Against
    the suffix written from the leaves up (children c ≥ e_0 on level 0, c > e_j on every level
    j ≥ 1) it replaces, for k | t, the nodes of levels < v that lie in the level-v node (t, t+k^v]
    by that one node: the same R (that node is read by row t − e_v·k^v + 1, whose suffix takes
    the children c > 0 of level v), ‖L_t‖² never larger and smaller by ≥ ¼ when t ≤ n − 2.
    """
    rows = t - 1
    parts = [(rows, levels, np.zeros(len(t), dtype=np.int64), 1 + (t == k**levels))]
    valuation = np.zeros(len(t), dtype=np.int64)  # min(ν_k(t), H)
    for j in range(1, levels + 1):
        valuation += t % k**j == 0
    for j in range(levels):
        size = k**j
        digit = (t // size) % k
        base = (t // (size * k)) * k
        for c in range(k):
            left = c < digit
            right = np.where(valuation == j, c >= digit, c > digit) & (valuation <= j)
            parts.append((rows[left], j, base[left] + c, 1))
            parts.append((rows[right], j, base[right] + c, -1))
    return parts


def _averaged_entries(n: int, k: int):
    """(row, level, node index, 2·coefficient) arrays of the averaged tree restricted to [1, n]."""
    levels = _averaged_levels(n, k)
    return levels, _averaged_parts(np.arange(1, n + 1, dtype=np.int64), k, levels)


def _averaged_row_norm4(t: int, n: int, k: int, levels: int) -> int:
    """4·‖L_t‖² of the averaged tree, straight from the definition (one row, O(k·H))."""
    if t == k**levels:
        return 4
    valuation = next(j for j in range(levels) if (t // k**j) % k)
    total = 1  # root, coefficient ½
    for j in range(valuation, levels):
        size = k**j
        digit = (t // size) % k
        base = (t // (size * k)) * k
        first = digit if j == valuation else digit + 1
        total += digit + sum(1 for c in range(first, k) if (base + c) * size < n)
    return total


def _averaged_costs(n: int, k: int) -> tuple[int, Fraction, Fraction]:
    """(Δ, max_t ‖L_t‖², Σ_t ‖L_t‖²) in O(H), by classes of the rows t ≤ n − 1; t = n directly.

    Let g_j be the base-k digits of n − 1, S_q = Σ_{j≥q} g_j. Row t with v = ν_k(t) reads only
    levels ≥ v: it is row t/k^v of the averaged tree over the stream of level-v nodes, horizon
    ⌈n/k^v⌉, whose last row index ⌊(n−1)/k^v⌋ has the digits g_v, g_{v+1}, …, and t/k^v is not
    a multiple of k. In that tree, with p the highest digit where a row differs from the last
    index (p = 0 for the last index itself), a suffix node starts below n on every level below
    p and, on the levels ≥ p, exactly for the children c ≤ g_j; so 4‖L_t‖² = 2 + S_q + (k−1)·p
    with q = v + p, for g_q·(k−1)·k^{p−1} rows t (p ≥ 1) or g_q rows (p = 0). Summing over
    p = 1 … q with D_q = Σ_{p≤q} p·k^{p−1} and 1 + (k−1)·Σ_{p≤q} k^{p−1} = k^q:
    Σ_{t<n} 4‖L_t‖² = Σ_q g_q·(k^q·(2 + S_q) + (k−1)²·D_q). The maximum is v = 0, p = q, over
    the q with g_q > 0: 2 + S_q + (k−1)·q (or row n).
    """
    if n == 1:
        return 1, Fraction(1), Fraction(1)
    levels = _averaged_levels(n, k)
    g = [((n - 1) // k**j) % k for j in range(levels)]
    suffix = [sum(g[q:]) for q in range(levels + 1)]
    total, weighted = 0, 0  # weighted = D_q
    for q in range(levels):
        weighted += q * k ** (q - 1) if q else 0
        total += g[q] * (k**q * (2 + suffix[q]) + (k - 1) ** 2 * weighted)
    last = _averaged_row_norm4(n, n, k, levels)
    top = max([last] + [2 + suffix[q] + (k - 1) * q for q in range(levels) if g[q]])
    return levels + 1, Fraction(top, 4), Fraction(total + last, 4)


# ------------------------------------------------------------------------- smooth binary tree
# Height h, weight w = ⌈h/2⌉, v_0 < v_1 < … the h-bit numbers of Hamming weight w. Data item t
# sits on leaf v_{t−1}; the prefix [1, t] is the leaf range [0, v_t), written with the dyadic
# nodes of the 1-bits of v_t (node of bit j: [⌊v_t/2^{j+1}⌋·2^{j+1}, … + 2^j), a left child).
# The nodes of the trailing ones of v_t hold no weight-w leaf and are dropped, so
# ‖L_t‖² = w − (trailing ones of v_t).


def _smooth_shape(n: int) -> tuple[int, int]:
    height = 1
    while math.comb(height, (height + 1) // 2) < n + 1:
        height += 1
    return height, (height + 1) // 2


def _unrank(index: int, height: int, weight: int) -> int:
    """The index-th (0-based) h-bit number of Hamming weight w, in increasing order."""
    value = 0
    for bit in range(height - 1, -1, -1):
        below = math.comb(bit, weight)
        if index >= below:
            value |= 1 << bit
            index -= below
            weight -= 1
    return value


def _count_weight_upto(limit: int, weight: int) -> int:
    """#{0 ≤ y ≤ limit : popcount(y) = weight}."""
    if limit < 0 or weight < 0:
        return 0
    bound, count, ones = limit + 1, 0, 0
    for bit in range(bound.bit_length() - 1, -1, -1):
        if bound >> bit & 1:
            if weight - ones >= 0:
                count += math.comb(bit, weight - ones)
            ones += 1
    return count


def _smooth_costs(n: int) -> tuple[int, int, int, int, int]:
    """(h, w, Δ, max_t ‖L_t‖², Σ_t ‖L_t‖²), exactly, in O(h²).

    Δ: a data leaf v_s (s < n) counts its level-j ancestor iff bit j of v_s is 0, v_s has a 1
    below j, and the least useful query through that node, v_s's bits above j, then 1, then the
    lowest possible ones, is ≤ v_n. Maximising over v_s < v_n: v_s agrees with v_n above the
    first bit j₀ where v_n has 1 and v_s has 0, then puts its m = w − popcount(v_n ≫ (j₀+1))
    remaining ones at the bottom: 1 + j₀ − m counted ancestors (needs m ≤ j₀).
    """
    height, weight = _smooth_shape(n)
    last = _unrank(n, height, weight)
    sensitivity = max(
        1 + j - (weight - (last >> (j + 1)).bit_count())
        for j in range(height)
        if last >> j & 1 and weight - (last >> (j + 1)).bit_count() <= j
    )
    least_trailing = min(r for r in range(weight) if (((1 << (weight - r)) - 1) << (r + 1)) | ((1 << r) - 1) <= last)
    trailing_sum = sum(_count_weight_upto(((last + 1) >> r) - 1, weight - r) - 1 for r in range(1, weight + 1))
    return height, weight, sensitivity, weight - least_trailing, n * weight - trailing_sum


def _smooth_entries(n: int):
    """Leaves, nodes and coefficients of the smooth binary tree for n data items."""
    height, weight = _smooth_shape(n)
    candidates = np.arange(1 << height, dtype=np.int64)
    leaves = candidates[np.bitwise_count(candidates) == weight][: n + 1]
    query = leaves[1:]  # v_t, t = 1 … n
    trailing = np.bitwise_count(query ^ (query + 1)) - 1
    rows = np.arange(n, dtype=np.int64)
    parts = []
    for j in range(height):
        mask = ((query >> j) & 1 == 1) & (j >= trailing)
        parts.append((rows[mask], j, query[mask] >> (j + 1), 1))
    return height, leaves[:n], parts


# --------------------------------------------------------------------------------- assembling


def _assemble(n: int, parts, intervals, scale: int, metadata: dict) -> Factorization:
    """Build CSR (L, R) from (row, level, index, coefficient) parts (no (row, node) pair twice).

    ``intervals(level, index)`` gives the 0-based column range [lo, hi) of each node inside
    [0, n); nodes with an empty range are dropped with their coefficients. L = coefficients / scale.
    Nodes are ordered by (level, index); R's rows are the node indicators.
    """
    import scipy.sparse

    rows = np.concatenate([np.asarray(part[0], dtype=np.int64) for part in parts])
    levels = np.concatenate([np.full(len(part[0]), part[1], dtype=np.int64) for part in parts])
    indices = np.concatenate([np.asarray(part[2], dtype=np.int64) for part in parts])
    values = np.concatenate([np.broadcast_to(np.asarray(part[3], dtype=np.int64), len(part[0])) for part in parts])
    low, high = intervals(levels, indices)
    keep = low < high
    rows, levels, indices, values, low, high = (x[keep] for x in (rows, levels, indices, values, low, high))
    unique, first, inverse = np.unique(levels * (1 << 44) + indices, return_index=True, return_inverse=True)
    order = np.lexsort((inverse, rows))
    decoder = scipy.sparse.csr_matrix(
        (values[order] / scale, inverse[order], np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n))))),
        shape=(n, len(unique)),
    )
    node_low, lengths = low[first], high[first] - low[first]
    ends = np.cumsum(lengths)
    columns = np.arange(int(ends[-1]), dtype=np.int64) - np.repeat(ends - lengths - node_low, lengths)
    encoder = scipy.sparse.csr_matrix((np.ones(len(columns)), columns, np.concatenate(([0], ends))), shape=(len(unique), n))
    return Factorization(decoder=decoder, encoder=encoder, metadata=metadata)


def _aligned_intervals(k: int, n: int):
    def intervals(levels, indices):
        sizes = np.power(np.int64(k), levels)
        return np.minimum(indices * sizes, n), np.minimum((indices + 1) * sizes, n)

    return intervals


def _digit_tree(n: int, k: int, a: int, mechanism: str, arity: int | None) -> Factorization:
    levels, parts = _offset_entries(n, k, a)
    metadata = {"mechanism": mechanism, "arity": arity, "levels": levels, "made_by": "pure_dp_mf.mechanisms.trees"}
    return _assemble(n, parts, _aligned_intervals(k, n), 1, metadata)


def binary_tree(*, n: int) -> Factorization:
    """The binary tree mechanism (Dwork et al. 2010; Chan et al. 2011) for T_n, any n ≥ 1.

    [1, t] is the union of the dyadic intervals of the 1-bits of t (largest first); R has one
    0/1 row per used node (exactly the nodes (t − 2^{ν(t)}, t], ν = 2-adic valuation, so R is
    n×n), L is 0/1. Δ = ⌊log₂ n⌋ + 1 (the root [1, n] is used when n is a power of two),
    ‖L‖₂→∞² = max popcount(t), t ≤ n. Same as ``kary_tree(n=n, arity=2)``.
    """
    n = _check_explicit_n(n, "binary", None)
    return _digit_tree(n, 2, 0, "binary", None)


def kary_tree(*, n: int, arity: int) -> Factorization:
    """The k-ary tree mechanism (k = ``arity``): [1, t] from the base-k digits of t.

    Level j contributes d_j consecutive level-j nodes (the children 0 … d_j−1 of the level-(j+1)
    node containing them); the last child of a node is never used and not stored. L, R are 0/1.
    Δ = number of base-k digits of n; ‖L‖₂→∞² = max digit sum of t ≤ n.
    """
    arity = _required_arity("kary", arity)
    n = _check_explicit_n(n, "kary", arity)
    return _digit_tree(n, arity, 0, "kary", arity)


def kary_subtraction_tree(*, n: int, arity: int) -> Factorization:
    """The k-ary tree with the subtraction trick (Andersson, Pagh, Steiner, Torkamani 2025).

    t = Σ d_j·k^j with balanced digits d_j ∈ [−a, k−1−a], a = ⌊(k−1)/2⌋ (odd k: |d_j| ≤ (k−1)/2;
    even k: [−(k/2−1), k/2]). Level j adds d_j nodes right of P_{j+1} = Σ_{i>j} d_i·k^i, or
    subtracts |d_j| nodes left of it. Nodes reaching beyond n are cut at n; subtracted nodes lying
    wholly beyond n are dropped. L ∈ {0, ±1}, R 0/1, Δ = H = least H with n ≤ (k−1−a)(k^H−1)/(k−1).
    """
    arity = _required_arity("kary-subtraction", arity)
    n = _check_explicit_n(n, "kary-subtraction", arity)
    return _digit_tree(n, arity, (arity - 1) // 2, "kary-subtraction", arity)


def averaged_kary_tree(*, n: int, arity: int) -> Factorization:
    """The averaged k-ary tree with subtraction (Arkhipov & Kalinin, App. C.3; Imola et al.'s code).

    Row t is ½·left + ½·(root − right), H = ⌈log_k n⌉, independent noise on every node: left is
    the k-ary decomposition of [1, t], right the decomposition of the suffix (t, k^H] into maximal
    aligned nodes, which starts on level v = ν_k(t) (the lowest non-zero base-k digit of t).
    Level v holds k coefficients ±½ (e_v left, k − e_v right), every level above k − 1 (the
    suffix's node of digit e_j cancels against the parent), the root ½: 4‖L_t‖² = 2 + (k−1)·(H − v)
    before truncation (t < k^H; t = k^H reads the root alone, coefficient 1), Δ = H + 1 (root
    included). Writing the suffix from the leaves up instead (children c ≥ e_0 on level 0,
    c > e_j above) gives 2 + (k−1)·H for every t: the same R, Δ and MaxSE but a larger ‖L_t‖²
    wherever k | t ≤ n − 2 (MeanSE 774.99 against 762.50 at n = 2^16, k = 16, ε = 1). L has
    entries 0, ±½, 1 (exact in float64); R is 0/1.
    """
    arity = _required_arity("averaged-kary-subtraction", arity)
    n = _check_explicit_n(n, "averaged-kary-subtraction", arity)
    levels, parts = _averaged_entries(n, arity)
    metadata = {
        "mechanism": "averaged-kary-subtraction",
        "arity": arity,
        "levels": levels,
        "made_by": "pure_dp_mf.mechanisms.trees",
    }
    return _assemble(n, parts, _aligned_intervals(arity, n), 2, metadata)


def smooth_binary_tree(*, n: int) -> Factorization:
    """The smooth binary mechanism (Andersson & Pagh 2023), Laplace version.

    Height h = least h with C(h, ⌈h/2⌉) ≥ n + 1; data item t sits on the t-th leaf of Hamming
    weight w = ⌈h/2⌉, every other leaf is empty. [1, t] is the leaf range [0, v_t) (v_t the next
    weight-w leaf), covered by the nodes of the 1-bits of v_t: at most w nodes per row (nodes
    without any weight-w leaf are dropped), and a leaf lies in at most h − w used nodes (its 0-bits).
    L and R are 0/1.
    """
    n = _check_explicit_n(n, "smooth-binary", None)
    height, leaves, parts = _smooth_entries(n)

    def intervals(levels, indices):
        start = indices << (levels + 1)
        return np.searchsorted(leaves, start), np.searchsorted(leaves, start + (np.int64(1) << levels))

    metadata = {"mechanism": "smooth-binary", "arity": None, "levels": height, "made_by": "pure_dp_mf.mechanisms.trees"}
    return _assemble(n, parts, intervals, 1, metadata)


def tree_factorization(*, mechanism: str, n: int, arity: int | None = None) -> Factorization:
    """The explicit factorization of ``mechanism`` (one of ``MECHANISMS``) for T_n."""
    mechanism = _check_mechanism(mechanism)
    arity = _check_arity(mechanism, arity)
    if mechanism == "binary":
        return binary_tree(n=n)
    if mechanism == "smooth-binary":
        return smooth_binary_tree(n=n)
    builder = {"kary": kary_tree, "kary-subtraction": kary_subtraction_tree, "averaged-kary-subtraction": averaged_kary_tree}
    return builder[mechanism](n=n, arity=_required_arity(mechanism, arity))


# -------------------------------------------------------------------------------------- costs


@dataclass(frozen=True)
class TreeCosts:
    """Exact costs of a tree mechanism's factorization of T_n (same values as ``tree_factorization``).

    ``sensitivity`` = ‖R‖₁→₁ = Δ, ``max_row_norm_squared`` = ‖L‖₂→∞², ``mean_row_norm_squared``
    = ‖L‖_F²/n; ``levels`` is H (digit trees, averaged tree) or the height h (smooth binary).
    """

    mechanism: str
    n: int
    arity: int | None
    levels: int
    sensitivity: Fraction
    max_row_norm_squared: Fraction
    mean_row_norm_squared: Fraction

    @property
    def c2_squared(self) -> Fraction:
        """c₂² = ‖L‖₂→∞²·Δ²."""
        return self.max_row_norm_squared * self.sensitivity**2

    @property
    def cf_squared(self) -> Fraction:
        """c_F² = ‖L‖_F²·Δ²/n."""
        return self.mean_row_norm_squared * self.sensitivity**2

    def max_se(self, *, epsilon: float = UNIT_EPSILON) -> float:
        """MaxSE = 2·c₂²/ε² (Laplace noise of scale Δ/ε)."""
        return float(2 * self.c2_squared) / check_epsilon(epsilon) ** 2

    def mean_se(self, *, epsilon: float = UNIT_EPSILON) -> float:
        """MeanSE = 2·c_F²/ε²."""
        return float(2 * self.cf_squared) / check_epsilon(epsilon) ** 2

    def max_se_constant(self) -> float:
        """MaxSE·ε²/log₂(n)³ (NaN for n = 1)."""
        return leading_constant(2 * self.c2_squared, n=self.n)

    def mean_se_constant(self) -> float:
        """MeanSE·ε²/log₂(n)³ (NaN for n = 1)."""
        return leading_constant(2 * self.cf_squared, n=self.n)


_CODE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]  # the code that computes the costs
_STORED: dict[int, dict[str, list[str]]] = {}  # n → the costs of the cache entry of n (``cache.py``)
_UNSAVED: set[int] = set()


def _stored(n: int) -> dict[str, list[str]]:
    """The exact tree costs at horizon n kept by earlier processes (an entry named by this file's
    code digest and n, so that other code or another n is never read)."""
    if n not in _STORED:
        record = read_entry(f"tree-costs-{_CODE}-{n}.json") or {}
        valid = record.get("code") == _CODE and record.get("n") == n and isinstance(record.get("costs"), dict)
        _STORED[n] = dict(record["costs"]) if valid else {}
    return _STORED[n]


def _save_stored(n: int) -> None:
    """Write the costs computed at n since the entry was read (one entry per horizon)."""
    if n in _UNSAVED:
        _UNSAVED.discard(n)
        write_entry(f"tree-costs-{_CODE}-{n}.json", {"code": _CODE, "n": n, "costs": _STORED[n]})


@functools.lru_cache(maxsize=4096)
def _tree_costs(mechanism: str, n: int, arity: int | None) -> TreeCosts:
    """``tree_costs`` (checked arguments), from the cache entry of n when it holds them."""
    name = f"{mechanism}:{arity}"
    kept = _stored(n).get(name)
    if kept is not None:
        try:
            levels, sensitivity, maximum, mean = int(kept[0]), Fraction(kept[1]), Fraction(kept[2]), Fraction(kept[3])
            return TreeCosts(mechanism, n, arity, levels, sensitivity, maximum, mean)
        except (ValueError, TypeError, IndexError, ZeroDivisionError):
            pass
    costs = _computed_costs(mechanism, n, arity)
    _stored(n)[name] = [
        str(costs.levels),
        str(costs.sensitivity),
        str(costs.max_row_norm_squared),
        str(costs.mean_row_norm_squared),
    ]
    _UNSAVED.add(n)
    return costs


def _computed_costs(mechanism: str, n: int, arity: int | None) -> TreeCosts:
    maximum: Fraction
    mean: Fraction
    if mechanism == "smooth-binary":
        height, _, sensitivity, top, total = _smooth_costs(n)
        levels, maximum, mean = height, Fraction(top), Fraction(total, n)
    elif mechanism == "averaged-kary-subtraction":
        sensitivity, maximum, total_norms = _averaged_costs(n, _required_arity(mechanism, arity))
        levels, mean = sensitivity - 1, total_norms / n
    else:
        k = 2 if mechanism == "binary" else _required_arity(mechanism, arity)
        a = (k - 1) // 2 if mechanism == "kary-subtraction" else 0
        levels, top, total = _offset_costs(n, k, a)
        sensitivity, maximum, mean = levels, Fraction(top), Fraction(total, n)
    return TreeCosts(mechanism, n, arity, levels, Fraction(sensitivity), maximum, mean)


def tree_costs(*, mechanism: str, n: int, arity: int | None = None) -> TreeCosts:
    """Exact ‖L‖₂→∞², ‖L‖_F²/n and ‖R‖₁→₁ of ``tree_factorization`` without building it.

    Closed forms and digit DPs in O(k·log n) integer operations (O(log² n) for smooth-binary);
    any Python-int n ≥ 1 works (n = 2^40 in milliseconds). Equal to the explicit factorization's
    costs for every n (tested exactly for all n ≤ 512). The costs at a horizon are kept as exact
    fractions in the per-machine cache (``cache.py``), so the next process that ranks the
    mechanisms at that horizon reads them instead of recomputing the arity search.
    """
    mechanism = _check_mechanism(mechanism)
    arity = _check_arity(mechanism, arity)
    n = check_size(n, name="n")
    costs = _tree_costs(mechanism, n, arity)
    _save_stored(n)
    return costs


def best_arity(*, mechanism: str, n: int, metric: str) -> int:
    """The arity in 2 … min(n+1, ARITY_SEARCH_MAX) minimising MaxSE (``"maxse"``) or MeanSE (``"meanse"``).

    Exact comparison of c₂² or c_F²; ties go to the smaller arity. Arity n + 1 is the one-level
    tree (for the k-ary tree: L = T_n, R = I), which wins for small n.
    """
    mechanism = _check_mechanism(mechanism)
    if mechanism not in ARITY_MECHANISMS:
        raise InvalidInputError(f"mechanism {mechanism!r} has no arity to choose")
    if metric not in METRICS:
        raise InvalidInputError(f"unknown metric {metric!r}; expected one of {METRICS}")
    n = check_size(n, name="n")
    attribute = "c2_squared" if metric == "maxse" else "cf_squared"
    arities = range(2, min(n + 1, ARITY_SEARCH_MAX) + 1)
    best = min(arities, key=lambda k: (getattr(_tree_costs(mechanism, n, k), attribute), k))
    _save_stored(n)
    return best


# --------------------------------------------------------------------------- streaming decoders


@dataclass
class TreeState:
    """The next row of a tree decoder (its noise is read by node address: no other state)."""

    t: int


def _unrank_array(ranks: np.ndarray, height: int, weight: int) -> np.ndarray:
    """``_unrank`` vectorised: the rank-th h-bit numbers of Hamming weight w (int64)."""
    table = np.zeros((height + 1, weight + 2), dtype=np.int64)
    for bit in range(height + 1):
        for w in range(weight + 1):
            table[bit, w] = math.comb(bit, w)
    value = np.zeros(len(ranks), dtype=np.int64)
    remaining = np.asarray(ranks, dtype=np.int64).copy()
    left = np.full(len(ranks), weight, dtype=np.int64)
    for bit in range(height - 1, -1, -1):
        below = table[bit, np.clip(left, 0, weight + 1)]
        below = np.where(left < 0, 0, below)
        take = (remaining >= below) & (left > 0)
        value |= take.astype(np.int64) << bit
        remaining -= np.where(take, below, 0)
        left -= take
    return value


class TreeDecoder:
    """The decoder of a tree mechanism for horizon n as a ``StreamingDecoder`` (``streaming.py``).

    Every node is its own noise coordinate, addressed (level j + 1, index i) for the node i of
    height j (the aligned interval (i·k^j, (i + 1)·k^j] of the digit and averaged trees, the
    leaf range [i·2^{j+1}, i·2^{j+1} + 2^j) of the smooth binary tree): the address does not
    depend on n, so a tree's noise at a node is the same for every horizon. The atoms are the
    1×1 matrix [1]; a row's terms are its nodes with their coefficients (``_entries``, the same
    (row, height, index, coefficient) arrays ``tree_factorization`` assembles, computed for a
    range of rows only). Nodes that do not intersect [1, n] carry no data and are dropped, as in
    ``tree_factorization``. Memory: the pages of the noise source (one per height in use),
    O(log n); the row range being evaluated. ``sensitivity`` = Δ = ‖R‖₁→₁ (``tree_costs``).
    """

    def __init__(self, *, mechanism: str, n: int, arity: int | None = None) -> None:
        self.mechanism = _check_mechanism(mechanism)
        self.arity = _check_arity(mechanism, arity)
        self.n = check_size(n, name="n")
        self.atoms = np.ones((1, 1))
        costs = tree_costs(mechanism=mechanism, n=self.n, arity=self.arity)
        self.sensitivity = costs.sensitivity
        self.k = 2 if mechanism in ("binary", "smooth-binary") else int(self.arity or 2)
        if mechanism == "averaged-kary-subtraction":
            self.heights, self.scale, self.offset_digits = _averaged_levels(self.n, self.k), 2, 0
            self._max_terms = 2 + (self.k - 1) * self.heights if self.heights else 1  # root, k on level ν_k(t), k − 1 above
        elif mechanism == "smooth-binary":
            self.heights, self.weight = _smooth_shape(self.n)
            self.scale, self.last = 1, _unrank(self.n, self.heights, self.weight)
            self._max_terms = self.weight
        else:
            self.offset_digits = (self.k - 1) // 2 if mechanism == "kary-subtraction" else 0
            self.heights, self.scale = _offset_levels(self.n, self.k, self.offset_digits), 1
            self._max_terms = self.heights * max(self.k - 1 - self.offset_digits, self.offset_digits)

    @property
    def rows(self) -> int:
        return self.n

    def max_terms(self, stop: int) -> int:
        return self._max_terms

    def init(self, *, start: int = 0) -> TreeState:
        if not 0 <= start <= self.n:
            raise InvalidInputError(f"row {start} is outside the tree's {self.n} rows")
        return TreeState(t=start)

    def next(self, state: TreeState, noise, *, steps: int = 1) -> tuple[np.ndarray, TreeState]:
        """Rows state.t … state.t + steps − 1 of L·z: every node's noise read by its address,
        one block per height."""
        start, stop = state.t, state.t + steps
        if not 0 <= start <= stop <= self.n:
            raise InvalidInputError(f"rows [{start}, {stop}) are outside the tree's {self.n} rows")
        rows, heights, indices, coefficients = self._entries(start, stop)
        columns = getattr(noise, "columns", None)
        out = np.zeros((stop - start,) + (() if columns is None else (columns,)))
        for height in np.unique(heights):
            mine = heights == height
            low, high = int(indices[mine].min()), int(indices[mine].max())
            block = noise.block(low, high - low + 1, int(height) + 1)
            picked = block[indices[mine] - low]
            weights = coefficients[mine].astype(np.float64) / self.scale
            np.add.at(out, rows[mine] - start, picked * (weights if columns is None else weights[:, None]))
        state.t = stop
        return out, state

    def terms(self, t: int) -> list:
        from pure_dp_mf.mechanisms.streaming import Term

        if not 0 <= t < self.n:
            raise InvalidInputError(f"row {t} is outside the tree's {self.n} rows")
        _, heights, indices, coefficients = self._entries(t, t + 1)
        return [
            Term(int(h) + 1, int(i), 0, Fraction(int(c), self.scale))
            for h, i, c in sorted(zip(heights.tolist(), indices.tolist(), coefficients.tolist(), strict=True))
        ]

    def term_arrays(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(row position, level, atom row, weight) of the terms of rows start … stop − 1."""
        rows, heights, _, coefficients = self._entries(start, stop)
        return rows - start, heights + 1, np.zeros(len(rows), dtype=np.int64), coefficients / self.scale

    def _entries(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(row t − 1, height, node index, coefficient·scale) of the rows start … stop − 1, the nodes
        that intersect [1, n] only."""
        t = np.arange(start + 1, stop + 1, dtype=np.int64)
        if self.mechanism == "smooth-binary":
            return self._smooth_entries(t)
        if self.mechanism == "averaged-kary-subtraction":
            parts = _averaged_parts(t, self.k, self.heights)
        else:
            parts = self._digit_parts(t)
        rows = np.concatenate([np.asarray(part[0], dtype=np.int64) for part in parts])
        heights = np.concatenate([np.full(len(part[0]), part[1], dtype=np.int64) for part in parts])
        indices = np.concatenate([np.asarray(part[2], dtype=np.int64) for part in parts])
        values = np.concatenate([np.broadcast_to(np.asarray(part[3], dtype=np.int64), len(part[0])) for part in parts])
        sizes = np.power(np.int64(self.k), heights)
        keep = (np.minimum(indices * sizes, self.n) < np.minimum((indices + 1) * sizes, self.n)) & (values != 0)
        return rows[keep], heights[keep], indices[keep], values[keep]

    def _digit_parts(self, t: np.ndarray) -> list:
        """``_offset_entries`` for the rows t (1-based) only."""
        return _offset_parts(t, self.k, self.offset_digits, self.heights)

    def _smooth_entries(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``_smooth_entries`` for the rows t (1-based) only: the nodes of the 1-bits of v_t above
        its trailing ones."""
        query = _unrank_array(t, self.heights, self.weight)
        trailing = np.bitwise_count(query ^ (query + 1)).astype(np.int64) - 1
        rows, heights, indices = [], [], []
        for j in range(self.heights):
            mask = ((query >> j) & 1 == 1) & (j >= trailing)
            rows.append(t[mask] - 1)
            heights.append(np.full(int(mask.sum()), j, dtype=np.int64))
            indices.append(query[mask] >> (j + 1))
        rows_all = np.concatenate(rows)
        return rows_all, np.concatenate(heights), np.concatenate(indices), np.ones(len(rows_all), dtype=np.int64)


def tree_decoder(*, mechanism: str, n: int, arity: int | None = None) -> TreeDecoder:
    """The streaming decoder of ``mechanism`` for horizon n (any n, O(log n) memory)."""
    return TreeDecoder(mechanism=mechanism, n=n, arity=arity)
