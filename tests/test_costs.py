"""Costs of hand-computed factorizations, exactly and in float64 (Arkhipov & Kalinin, section 1.1)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse
from conftest import dyadic_binary_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations import costs
from pure_dp_mf.factorizations.workloads import prefix_sum, reversal, strictly_upper


def test_workloads():
    assert prefix_sum(3, exact=True).tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert strictly_upper(3, exact=True).tolist() == [[0, 1, 1], [0, 0, 1], [0, 0, 0]]
    assert reversal(3, exact=True).tolist() == [[0, 0, 1], [0, 1, 0], [1, 0, 0]]
    assert prefix_sum(4).dtype == np.float64 and prefix_sum(4, exact=True).dtype == np.int64
    np.testing.assert_array_equal(prefix_sum(5) + strictly_upper(5), np.ones((5, 5)))
    for bad in (0, -3, 2.5, "4", True):
        with pytest.raises(InvalidInputError):
            prefix_sum(bad)


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_trivial_factorizations(n):
    T, identity = prefix_sum(n, exact=True), np.eye(n, dtype=np.int64)
    # T_n = T_n · I: the input-perturbation-free "noise on every prefix" mechanism.
    assert costs.max_row_norm_squared_exact(T) == n
    assert costs.max_column_abs_sum_exact(identity) == 1
    assert costs.c2_squared_exact(decoder=T, encoder=identity) == n
    assert costs.cf_squared_exact(decoder=T, encoder=identity) == Fraction(n * (n + 1), 2 * n)
    # T_n = I · T_n: noise on every input.
    assert costs.max_column_abs_sum_exact(T) == n
    assert costs.c2_squared_exact(decoder=identity, encoder=T) == n * n
    assert costs.cf_squared_exact(decoder=identity, encoder=T) == n * n
    assert costs.max_se_exact(decoder=identity, encoder=T, epsilon=Fraction(1, 2)) == 8 * n * n


@pytest.mark.parametrize(
    "n, c2_squared, cf_squared",
    # n = 4: rows of L use 1, 1, 2, 1 nodes, every leaf lies in 3 nodes.
    # n = 8: rows use 1, 1, 2, 1, 2, 2, 3, 1 nodes, every leaf lies in 4 nodes.
    [(4, 2 * 9, Fraction(5 * 9, 4)), (8, 3 * 16, Fraction(13 * 16, 8))],
)
def test_binary_tree_costs_by_hand(n, c2_squared, cf_squared):
    L, R = dyadic_binary_tree(n)
    np.testing.assert_array_equal(L @ R, prefix_sum(n))
    Le, Re = L.astype(np.int64), R.astype(np.int64)
    assert costs.c2_squared_exact(decoder=Le, encoder=Re) == c2_squared
    assert costs.cf_squared_exact(decoder=Le, encoder=Re) == cf_squared
    result = costs.factorization_costs(decoder=L, encoder=R, epsilon=2.0)
    assert result.c2 == pytest.approx(math.sqrt(c2_squared), rel=1e-15)
    assert result.cf == pytest.approx(math.sqrt(cf_squared), rel=1e-15)
    assert result.max_se == pytest.approx(2 * c2_squared / 4, rel=1e-15)
    assert result.mean_se == pytest.approx(2 * float(cf_squared) / 4, rel=1e-15)
    assert result.max_se_constant == pytest.approx(2 * c2_squared / math.log2(n) ** 3, rel=1e-15)
    # sparse input gives the same numbers
    sparse = costs.factorization_costs(decoder=scipy.sparse.csr_matrix(L), encoder=scipy.sparse.csr_matrix(R), epsilon=2.0)
    assert sparse == result


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.fractions(-5, 5, max_denominator=8), min_size=n, max_size=n), min_size=1, max_size=5),
            st.lists(st.lists(st.fractions(-5, 5, max_denominator=8), min_size=n, max_size=n), min_size=1, max_size=5),
        )
    )
)
def test_float_and_exact_agree(matrices):
    L, R = (np.array(m, dtype=object) for m in matrices)
    floats = {name: np.array(m, dtype=float) for name, m in (("L", L), ("R", R))}
    assert float(costs.max_row_norm_squared_exact(L)) == pytest.approx(costs.max_row_norm(floats["L"]) ** 2, rel=1e-12, abs=1e-12)
    assert float(costs.max_column_abs_sum_exact(R)) == pytest.approx(costs.max_column_abs_sum(floats["R"]), rel=1e-12, abs=1e-12)
    assert float(costs.frobenius_norm_squared_exact(L)) == pytest.approx(
        costs.frobenius_norm(floats["L"]) ** 2, rel=1e-12, abs=1e-12
    )


def test_exact_refuses_floats_and_leading_constant_is_nan_at_n_1():
    with pytest.raises(InvalidInputError, match="Fraction"):
        costs.max_row_norm_squared_exact(np.ones((2, 2)))
    assert math.isnan(costs.leading_constant(1.0, n=1))
    assert costs.leading_constant(Fraction(27, 2), n=8, epsilon=2.0) == 2.0
    with pytest.raises(InvalidInputError, match="n >= 1"):
        costs.leading_constant(1.0, n=0)
    with pytest.raises(InvalidInputError, match="inner sizes"):
        costs.factorization_costs(decoder=np.ones((3, 2)), encoder=np.ones((3, 3)))
    with pytest.raises(InvalidInputError, match="epsilon"):
        costs.factorization_costs(decoder=np.eye(2), encoder=np.eye(2), epsilon=float("nan"))
