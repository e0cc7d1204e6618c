"""The averaged k-ary tree with subtraction (Arkhipov & Kalinin, App. C.3): row t is
½·left + ½·(root − right), right the decomposition of the suffix (t, k^H] into maximal aligned
nodes. Brute force, written here independently of trees.py: every row as a dict of nodes, for
this estimator and for the suffix written from the leaves up (the estimator shipped before);
dense L, R against the explicit factorization, the closed-form costs and the streaming decoder."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from pure_dp_mf.mechanisms import trees
from pure_dp_mf.mechanisms.streaming import ArraySource

MECHANISM = "averaged-kary-subtraction"
CASES = [(k, n) for k in (2, 3, 4, 5, 7) for n in (*range(1, 40), k**2 - 1, k**2, k**2 + 1, k**3 - 2, k**3 - 1, k**3, 100)]


def _levels(n: int, k: int) -> int:
    return next(h for h in range(n + 1) if k**h >= n)


def _row(t: int, n: int, k: int, maximal: bool) -> dict[tuple[int, int], Fraction]:
    """Row t: {(level j, index i): coefficient}, node (j, i) = (i·k^j, (i+1)·k^j], root (H, 0).
    ``maximal``: the suffix (t, k^H] by maximal nodes (from level ν_k(t) up); otherwise from the
    leaves up (k − e_0 leaves, then the children c > e_j). Nodes starting at or beyond n dropped."""
    h = _levels(n, k)
    if t == k**h:
        return {(h, 0): Fraction(1)}
    row = {(h, 0): Fraction(1, 2)}
    digits = [t // k**j % k for j in range(h)]
    lowest = next(j for j in range(h) if digits[j]) if maximal else 0
    for j in range(h):
        parent = t // k ** (j + 1) * k
        for c in range(digits[j]):
            row[(j, parent + c)] = Fraction(1, 2)
        if j >= lowest:
            for c in range(digits[j] if j == lowest else digits[j] + 1, k):
                if (parent + c) * k**j < n:
                    row[(j, parent + c)] = Fraction(-1, 2)
    return row


def _dense(n: int, k: int, maximal: bool):
    """(rows, sorted nodes, 2L as int array, R as int array) of the brute-force factorization."""
    rows = [_row(t, n, k, maximal) for t in range(1, n + 1)]
    nodes = sorted({node for row in rows for node in row})
    column = {node: index for index, node in enumerate(nodes)}
    decoder2 = np.zeros((n, len(nodes)), dtype=np.int64)
    for t, row in enumerate(rows):
        for node, value in row.items():
            decoder2[t, column[node]] = int(2 * value)
    encoder = np.zeros((len(nodes), n), dtype=np.int64)
    for index, (j, i) in enumerate(nodes):
        encoder[index, i * k**j : min((i + 1) * k**j, n)] = 1
    return rows, nodes, decoder2, encoder


@pytest.mark.parametrize("k, n", CASES)
def test_brute_force_against_factorization_costs_and_stream(k, n):
    rows, nodes, decoder2, encoder = _dense(n, k, maximal=True)
    assert (decoder2 @ encoder == 2 * np.tril(np.ones((n, n), dtype=np.int64))).all()
    # the explicit factorization: columns ordered by (level, index), so the matrices are equal
    factorization = trees.averaged_kary_tree(n=n, arity=k)
    decoder, built_encoder = factorization.dense()
    assert np.array_equal(built_encoder, encoder) and np.array_equal(decoder * 2, decoder2)
    # exact costs: closed form = brute force
    norms4 = (decoder2**2).sum(axis=1)
    costs = trees.tree_costs(mechanism=MECHANISM, n=n, arity=k)
    assert costs.sensitivity == int(encoder.sum(axis=0).max()) == _levels(n, k) + 1
    assert costs.max_row_norm_squared == Fraction(int(norms4.max()), 4)
    assert costs.mean_row_norm_squared == Fraction(int(norms4.sum()), 4 * n)
    # streaming: the terms are the rows (addressed (level + 1, index)), next() is L·z in any pieces
    decoder_stream = trees.tree_decoder(mechanism=MECHANISM, n=n, arity=k)
    for t, row in enumerate(rows):
        assert {(term.level - 1, term.offset): term.weight for term in decoder_stream.terms(t)} == row
    assert max(len(row) for row in rows) <= decoder_stream.max_terms(n)
    rng = np.random.default_rng(n * 10 + k)
    z = {j + 1: rng.standard_normal(max(i for level, i in nodes if level == j) + 1) for j in {j for j, _ in nodes}}
    dense = (decoder2 @ np.array([z[j + 1][i] for j, i in nodes])) / 2
    state, pieces = decoder_stream.init(), []
    for steps in (1, 3, n):
        steps = min(steps, n - state.t)
        if steps:
            part, state = decoder_stream.next(state, ArraySource(z), steps=steps)
            pieces.append(part)
    assert np.allclose(np.concatenate(pieces), dense, atol=1e-12, rtol=0)


@pytest.mark.parametrize("k, n", CASES)
def test_maximal_suffix_is_better_exactly_where_k_divides_t(k, n):
    """Against the suffix from the leaves up: the same R (so Δ), every ‖L_t‖² at most as large,
    strictly smaller exactly for k | t ≤ n − 2 and then by at least ¼; the same max."""
    rows, nodes, decoder2, encoder = _dense(n, k, maximal=True)
    old_rows, old_nodes, old_decoder2, old_encoder = _dense(n, k, maximal=False)
    assert nodes == old_nodes and np.array_equal(encoder, old_encoder)
    assert (old_decoder2 @ old_encoder == 2 * np.tril(np.ones((n, n), dtype=np.int64))).all()
    new, old = (decoder2**2).sum(axis=1), (old_decoder2**2).sum(axis=1)
    t = np.arange(1, n + 1)
    better = (t % k == 0) & (t <= n - 2)
    assert np.array_equal(new < old, better) and np.all(new <= old)
    # the rows differ for k | t < n (for t = n − 1 in the node only: (t, n] as a leaf or as level ν_k(t))
    assert np.array_equal(np.array([a != b for a, b in zip(rows, old_rows, strict=True)]), (t % k == 0) & (t < n))
    assert new.max() == old.max()


def test_the_issue_numbers_at_two_to_the_16():
    """n = 2^16 = 16^4 at the best arity 16 (both metrics), ε = 1, Laplace: MaxSE 2·Δ²·max ‖L_t‖²
    = 775 for both estimators; MeanSE 762.50 (maximal suffix) against 774.99 (from the leaves up,
    4‖L_t‖² = 2 + (k−1)·h for every t < n and 4 for t = n)."""
    n, k, h = 2**16, 16, 4
    assert all(trees.best_arity(mechanism=MECHANISM, n=n, metric=metric) == k for metric in trees.METRICS)
    costs = trees.tree_costs(mechanism=MECHANISM, n=n, arity=k)
    old_mean = Fraction((n - 1) * (2 + (k - 1) * h) + 4, 4 * n)
    assert costs.sensitivity == h + 1 and costs.max_se() == 775.0
    assert costs.mean_se() == pytest.approx(762.5006, abs=1e-4)
    assert float(2 * costs.sensitivity**2 * old_mean) == pytest.approx(774.9889, abs=1e-4)
    # sum over t < n of 2 + (k−1)(h − ν_k(t)): the rows with k | t save (k−1)·ν_k(t) quarters
    saved = sum((k - 1) * k ** (h - 1 - v) * (k - 1) * v for v in range(h))
    assert costs.mean_row_norm_squared == old_mean - Fraction(saved, 4 * n)
