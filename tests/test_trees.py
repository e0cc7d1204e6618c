"""Tree baselines: explicit factorizations vs closed-form costs, conventions, limits (Arkhipov & Kalinin, Table 1)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse
from conftest import dyadic_binary_tree

from pure_dp_mf import published
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations import costs
from pure_dp_mf.factorizations.workloads import prefix_sum
from pure_dp_mf.mechanisms import trees

ALL_N = range(1, 513)


def _integer_parts(factorization) -> tuple[scipy.sparse.csr_matrix, scipy.sparse.csr_matrix]:
    """(2L, R) as int64 CSR, refusing any entry that is not a multiple of ½ / an integer."""
    decoder2, encoder = factorization.decoder * 2, factorization.encoder
    assert np.array_equal(decoder2.data, np.round(decoder2.data)) and np.array_equal(encoder.data, np.round(encoder.data))
    return (
        scipy.sparse.csr_matrix((decoder2.data.astype(np.int64), decoder2.indices, decoder2.indptr), shape=decoder2.shape),
        scipy.sparse.csr_matrix((encoder.data.astype(np.int64), encoder.indices, encoder.indptr), shape=encoder.shape),
    )


def _assert_exact_factorization(factorization, n: int) -> None:
    """L·R = T_n in integer arithmetic: row t of 2L·R has t distinct columns, all ≤ t, all equal to 2."""
    decoder2, encoder = _integer_parts(factorization)
    product = decoder2 @ encoder  # csr_matmat: at most one entry per (row, column)
    product.eliminate_zeros()
    counts = np.diff(product.indptr)
    assert np.array_equal(counts, np.arange(1, n + 1)), f"L·R != T_{n}: wrong number of non-zeros per row"
    assert np.all(product.data == 2) and np.all(product.indices <= np.repeat(np.arange(n), counts)), f"L·R != T_{n}"


def _assert_costs_match(factorization, n: int, mechanism: str, arity) -> None:
    """costs.py on the explicit matrices equals tree_costs exactly (float64 is exact here: the
    entries are 0, ±½, ±1, the sums small integers or quarters)."""
    closed = trees.tree_costs(mechanism=mechanism, n=n, arity=arity)
    norms = costs.row_norms_squared(factorization.decoder)
    assert Fraction(costs.max_column_abs_sum(factorization.encoder)) == closed.sensitivity
    assert Fraction(float(norms.max())) == closed.max_row_norm_squared
    assert Fraction(float(norms.sum())) / n == closed.mean_row_norm_squared


FULL_CASES = [
    ("binary", None),
    ("smooth-binary", None),
    ("kary", 3),
    ("kary-subtraction", 3),
    ("kary-subtraction", 4),
    ("averaged-kary-subtraction", 3),
]


@pytest.mark.parametrize("mechanism, arity", FULL_CASES)
def test_closed_form_equals_explicit_for_every_n_up_to_512(mechanism, arity):
    for n in ALL_N:
        factorization = trees.tree_factorization(mechanism=mechanism, n=n, arity=arity)
        assert factorization.n == n and factorization.metadata["mechanism"] == mechanism
        assert factorization.metadata["arity"] == arity
        _assert_exact_factorization(factorization, n)
        _assert_costs_match(factorization, n, mechanism, arity)


@pytest.mark.parametrize("mechanism", trees.ARITY_MECHANISMS)
@pytest.mark.parametrize("arity", [2, 5, 8, 17])
def test_closed_form_equals_explicit_other_arities(mechanism, arity):
    for n in [*range(1, 33), 63, 64, 65, 100, 289, 290, 512]:
        factorization = trees.tree_factorization(mechanism=mechanism, n=n, arity=arity)
        _assert_exact_factorization(factorization, n)
        _assert_costs_match(factorization, n, mechanism, arity)


@pytest.mark.parametrize("mechanism, arity", FULL_CASES + [("kary", 4), ("averaged-kary-subtraction", 2)])
@pytest.mark.parametrize("n", [1, 6, 16, 27])
def test_exact_rational_costs_agree(mechanism, arity, n):
    """The Fraction path of costs.py on dense rational matrices, and L·R = T_n in Fractions."""
    decoder, encoder = trees.tree_factorization(mechanism=mechanism, n=n, arity=arity).dense()
    decoder_q = np.array([[Fraction(x) for x in row] for row in decoder], dtype=object)
    encoder_q = np.array([[Fraction(x) for x in row] for row in encoder], dtype=object)
    assert (decoder_q.dot(encoder_q) == prefix_sum(n, exact=True)).all()
    closed = trees.tree_costs(mechanism=mechanism, n=n, arity=arity)
    assert costs.max_column_abs_sum_exact(encoder_q) == closed.sensitivity
    assert costs.c2_squared_exact(decoder=decoder_q, encoder=encoder_q) == closed.c2_squared
    assert costs.cf_squared_exact(decoder=decoder_q, encoder=encoder_q) == closed.cf_squared
    assert costs.max_se_exact(decoder=decoder_q, encoder=encoder_q, epsilon=Fraction(1, 2)) == 8 * closed.c2_squared


@pytest.mark.parametrize("h", [1, 3, 5])
def test_binary_tree_matches_independent_dyadic_tree(h):
    """conftest's complete dyadic tree (root used, unused right children kept) has the same costs."""
    n = 2**h
    decoder, encoder = dyadic_binary_tree(n)
    reference = costs.factorization_costs(decoder=decoder, encoder=encoder)
    ours = trees.binary_tree(n=n).costs()
    assert (ours.c2, ours.cf) == (reference.c2, reference.cf)
    assert trees.tree_costs(mechanism="binary", n=n).sensitivity == h + 1


def test_matrix_types_and_special_arities():
    for n in (1, 7, 64, 100):
        for factorization in (trees.binary_tree(n=n), trees.kary_tree(n=n, arity=5)):
            for matrix in (factorization.decoder, factorization.encoder):
                assert scipy.sparse.issparse(matrix) and set(np.unique(matrix.data)) <= {0.0, 1.0}
        assert set(np.unique(trees.kary_subtraction_tree(n=n, arity=5).decoder.data)) <= {-1.0, 1.0}
        assert set(np.unique(trees.averaged_kary_tree(n=n, arity=3).decoder.data)) <= {-0.5, 0.5, 1.0}
        binary = trees.binary_tree(n=n)
        assert binary.encoder.shape == (n, n)  # one node (t − 2^ν(t), t] per t
        for twin in (trees.kary_tree(n=n, arity=2), trees.kary_subtraction_tree(n=n, arity=2)):
            assert (twin.decoder != binary.decoder).nnz == 0 and (twin.encoder != binary.encoder).nnz == 0


def test_conventions_documented_values():
    # binary: n = 2^h uses the root (Δ = h + 1); n = 2^h − 1 does not (Δ = h).
    assert trees.tree_costs(mechanism="binary", n=8).sensitivity == 4
    assert trees.tree_costs(mechanism="binary", n=7).sensitivity == 3
    # subtraction, k = 3: digits {−1, 0, 1}; n = 4 = (3²−1)/2 fits two levels, n = 5 needs three.
    assert trees.tree_costs(mechanism="kary-subtraction", n=4, arity=3).sensitivity == 2
    assert trees.tree_costs(mechanism="kary-subtraction", n=5, arity=3).sensitivity == 3
    # t = 5 = 9 − 3 − 1: the subtracted nodes (6, 9] and (5, 6] lie beyond n = 5 and are dropped.
    row = trees.kary_subtraction_tree(n=5, arity=3).decoder.toarray()[4]
    assert sorted(row[row != 0]) == [1.0]
    # averaged, k = 4, n = 16 = 4²: root + 2 levels, Δ = 3; t = 16 reads the root alone.
    factorization = trees.averaged_kary_tree(n=16, arity=4)
    assert trees.tree_costs(mechanism="averaged-kary-subtraction", n=16, arity=4).sensitivity == 3
    assert factorization.decoder.toarray()[15].tolist().count(1.0) == 1
    # smooth binary, n = 5: h = 4 (C(4,2) = 6 ≥ n + 1), w = 2.
    assert trees.tree_costs(mechanism="smooth-binary", n=5).levels == 4


# ---------------------------------------------------------------------- exact large-n formulas


@pytest.mark.parametrize("h", [1, 2, 7, 40, 200])
def test_structured_n_closed_forms(h):
    """Hand-derived costs at full trees, checked to n = 2^200 and beyond (Python ints)."""
    binary = trees.tree_costs(mechanism="binary", n=2**h)
    assert (binary.sensitivity, binary.max_row_norm_squared) == (h + 1, h)
    assert binary.mean_row_norm_squared == Fraction(h * 2 ** (h - 1) + 1, 2**h)
    for k in (3, 17):
        n = k**h
        kary = trees.tree_costs(mechanism="kary", n=n, arity=k)
        assert (kary.sensitivity, kary.max_row_norm_squared) == (h + 1, (k - 1) * h)
        assert kary.mean_row_norm_squared == Fraction((k - 1) * h * n // 2 + 1, n)
        averaged = trees.tree_costs(mechanism="averaged-kary-subtraction", n=n, arity=k)
        assert averaged.sensitivity == h + 1
        assert averaged.max_row_norm_squared == Fraction(2 + (k - 1) * h, 4)
        # 4‖L_t‖² = 2 + (k−1)(h − ν_k(t)) for t < n, (k−1)·k^(h−1−v) rows with ν_k(t) = v; 4 for t = n
        rows_by_valuation = sum((k - 1) * k ** (h - 1 - v) * (2 + (k - 1) * (h - v)) for v in range(h))
        assert averaged.mean_row_norm_squared == Fraction(rows_by_valuation + 4, 4 * n)
        full = (k**h - 1) // 2  # the largest t with h balanced digits
        subtraction = trees.tree_costs(mechanism="kary-subtraction", n=full, arity=k)
        assert (subtraction.sensitivity, subtraction.max_row_norm_squared) == (h, Fraction(h * (k - 1), 2))
    height = 2 * h
    full = math.comb(height, h) - 1
    smooth = trees.tree_costs(mechanism="smooth-binary", n=full)
    assert (smooth.levels, smooth.sensitivity, smooth.max_row_norm_squared) == (height, h, h)


def _asymptotic_constants(mechanism: str, k: int) -> tuple[float, float]:
    """n → ∞ limits of MaxSE/log₂(n)³ and MeanSE/log₂(n)³ at arity k, from the formulas above:
    per level, max and mean of ‖L_t‖²-contributions, times 2Δ² with Δ ~ log_k n."""
    cube = math.log2(k) ** 3
    if mechanism == "kary":
        return 2 * (k - 1) / cube, (k - 1) / cube
    if mechanism == "kary-subtraction":
        a = (k - 1) // 2
        digits = range(-a, k - a)
        return 2 * max(map(abs, digits)) / cube, 2 * sum(map(abs, digits)) / k / cube
    return (k - 1) / 2 / cube, (k - 1) / 2 / cube


@pytest.mark.parametrize("mechanism", trees.ARITY_MECHANISMS)
def test_limits_are_table_1(mechanism):
    table = {  # Arkhipov & Kalinin, Table 1, as printed (4 decimals)
        "kary": (0.4686, 0.2343),
        "kary-subtraction": (0.2343, 0.1236),
        "averaged-kary-subtraction": (0.1171, 0.1171),
    }[mechanism]
    best = [min(_asymptotic_constants(mechanism, k)[i] for k in range(2, 400)) for i in (0, 1)]
    assert best == pytest.approx(published.TABLE1[mechanism], rel=1e-12)
    assert best == pytest.approx(table, abs=5e-5)
    # the exact MaxSE constants on full trees converge to the per-arity limit at rate O(1/h) = O(1/log n):
    k = 17
    for h in (10, 100, 1000):
        n = k**h if mechanism != "kary-subtraction" else (k**h - 1) // 2
        ratio = trees.tree_costs(mechanism=mechanism, n=n, arity=k).max_se_constant() / _asymptotic_constants(mechanism, k)[0]
        expected = {
            "kary": (1 + 1 / h) ** 2,  # 2(h+1)²(k−1)h / (2(k−1)h³)
            "averaged-kary-subtraction": (1 + 1 / h) ** 2 * (1 + 2 / ((k - 1) * h)),
            "kary-subtraction": (h * math.log2(k) / math.log2(n)) ** 3,  # (k−1)h³ / log₂((k^h−1)/2)³
        }[mechanism]
        assert ratio == pytest.approx(expected, rel=1e-9) and ratio - 1 < 3.5 / h


def test_binary_and_smooth_limits():
    assert published.TABLE1["binary"] == (2.0, 1.0) and published.TABLE1["smooth-binary"] == (0.25, 0.25)
    for h in (10, 100, 1000):
        binary = trees.tree_costs(mechanism="binary", n=2**h)
        assert binary.max_se_constant() == pytest.approx(2 * (1 + 1 / h) ** 2, rel=1e-12)
        assert binary.mean_se_constant() == pytest.approx((1 + 1 / h) ** 2 * (1 + 2 ** (1 - h) / h), rel=1e-12)
    previous = math.inf
    for half in (10, 50, 250):  # n = C(2·half, half) − 1: c = 0.25·(h / log₂ n)³, log₂ n = h − ½log₂(πh/2) + o(1)
        height = 2 * half
        smooth = trees.tree_costs(mechanism="smooth-binary", n=math.comb(height, half) - 1)
        expected = 0.25 * (height / math.log2(math.comb(height, half) - 1)) ** 3
        assert smooth.max_se_constant() == pytest.approx(expected, rel=1e-12)
        assert 0.25 * (1 - 1.5 / half) < smooth.mean_se_constant() <= smooth.max_se_constant()
        assert expected - 0.25 < previous and expected > 0.25
        previous = expected - 0.25
    assert previous < 0.25 * 0.05  # h = 500: within 5% of 0.25, O(log log n / log n)


@pytest.mark.parametrize("mechanism", trees.MECHANISMS)
def test_value_at_two_to_the_40(mechanism):
    """Best-arity constants at n = 2^40 lie above Table 1 by at most the first-order rate
    3·log₂(k)/log₂(n) (k: Table 1's arity; Δ ≈ log_k n + O(1)), 3·log₂log₂(n)/log₂(n) for smooth."""
    n, log_n = 2**40, 40
    rate = {"binary": 3 / log_n, "smooth-binary": 3 * math.log2(log_n) / log_n}.get(mechanism, 3 * math.log2(17) / log_n)
    for index, metric in enumerate(trees.METRICS):
        arity = trees.best_arity(mechanism=mechanism, n=n, metric=metric) if mechanism in trees.ARITY_MECHANISMS else None
        cost = trees.tree_costs(mechanism=mechanism, n=n, arity=arity)
        value = cost.max_se_constant() if metric == "maxse" else cost.mean_se_constant()
        limit = published.TABLE1[mechanism][index]
        assert limit <= value <= limit * (1 + rate), (metric, arity, value, limit)
        assert arity is None or arity < trees.ARITY_SEARCH_MAX


def test_best_arity():
    # n = 5: arity 6 is the one-level tree L = T_5, R = I (MaxSE = 2·5); k = 3 gives 2·2²·3 = 24.
    assert trees.best_arity(mechanism="kary", n=5, metric="maxse") == 6
    assert trees.tree_costs(mechanism="kary", n=5, arity=6).max_se() == 10
    assert trees.tree_costs(mechanism="kary", n=5, arity=3).max_se() == 24
    assert trees.best_arity(mechanism="kary", n=1, metric="meanse") == 2
    for metric in trees.METRICS:
        chosen = trees.best_arity(mechanism="kary-subtraction", n=1000, metric=metric)
        values = [
            getattr(
                trees.tree_costs(mechanism="kary-subtraction", n=1000, arity=k),
                "c2_squared" if metric == "maxse" else "cf_squared",
            )
            for k in range(2, 129)
        ]
        assert values[chosen - 2] == min(values)


def test_large_n_is_fast_and_exact_types():
    cost = trees.tree_costs(mechanism="kary-subtraction", n=2**40 + 12345, arity=19)
    assert isinstance(cost.max_row_norm_squared, Fraction) and isinstance(cost.sensitivity, Fraction)
    assert cost.max_se(epsilon=0.5) == pytest.approx(4 * cost.max_se())


# ------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", True, None])
def test_bad_n(bad):
    with pytest.raises(InvalidInputError, match="n must"):
        trees.binary_tree(n=bad)
    with pytest.raises(InvalidInputError, match="n must"):
        trees.tree_costs(mechanism="kary", n=bad, arity=3)


@pytest.mark.parametrize("bad", [1, 0, -2, 2.5, "3"])
def test_bad_arity(bad):
    for builder in (trees.kary_tree, trees.kary_subtraction_tree, trees.averaged_kary_tree):
        with pytest.raises(InvalidInputError, match="arity"):
            builder(n=8, arity=bad)


def test_other_bad_input():
    with pytest.raises(InvalidInputError, match="too large for an explicit matrix.*tree_costs"):
        trees.kary_tree(n=trees.MAX_EXPLICIT_N + 1, arity=4)
    with pytest.raises(InvalidInputError, match="tree_costs"):
        trees.smooth_binary_tree(n=2**40)
    with pytest.raises(InvalidInputError, match="non-zeros, limit .*tree_costs"):  # n allowed, L too dense
        trees.averaged_kary_tree(n=trees.MAX_EXPLICIT_N, arity=16)
    with pytest.raises(InvalidInputError, match="unknown tree mechanism"):
        trees.tree_costs(mechanism="ternary", n=8)
    with pytest.raises(InvalidInputError, match="needs an arity"):
        trees.tree_costs(mechanism="kary", n=8)
    with pytest.raises(InvalidInputError, match="takes no arity"):
        trees.tree_costs(mechanism="binary", n=8, arity=2)
    with pytest.raises(InvalidInputError, match="no arity to choose"):
        trees.best_arity(mechanism="smooth-binary", n=8, metric="maxse")
    with pytest.raises(InvalidInputError, match="unknown metric"):
        trees.best_arity(mechanism="kary", n=8, metric="l2")
