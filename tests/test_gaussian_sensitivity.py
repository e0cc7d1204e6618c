"""(k,b)-participation sensitivity and per-query errors (Choquette-Choo et al., section 2)."""

import itertools

import numpy as np
import pytest

from pure_dp_mf.errors import InvalidInputError, PureDPMFError
from pure_dp_mf.factorizations.workloads import prefix_sum
from pure_dp_mf.gaussian.participation import Participation, participation
from pure_dp_mf.gaussian.sensitivity import (
    gram_sensitivity_squared,
    optimal_decoder,
    per_query_errors,
    sensitivity_squared,
    single_participation_sensitivity_squared,
    total_loss,
)

METHODS = ("nonnegative", "exact", "upper-bound")


def brute_force_sensitivity_squared(C, k, b):
    """max over every pattern π = {i, i+b, …} (|π| ≤ k) and every u ∈ {−1, 0, 1}^π of ‖C u‖²: d = 1 by definition."""
    n = C.shape[1]
    best = 0.0
    for start in range(n):
        members = list(range(start, n, b))[:k]
        for signs in itertools.product((-1, 0, 1), repeat=len(members)):
            u = np.zeros(n)
            u[members] = signs
            best = max(best, float(np.sum((C @ u) ** 2)))
    return best


def test_patterns_of_the_paper_example():
    # (k=3, b=2) on n = 6: Π = {{1,3,5}, {2,4,6}} (0-based here)
    assert Participation(max_participations=3, min_sep=2).patterns.tolist() == [[0, 2, 4], [1, 3, 5]]
    assert participation(max_participations=3, n=6).min_sep == 2
    # n = 8, b = 2, k = 3: windows of 3 consecutive members of each residue class
    assert Participation(max_participations=3, min_sep=2, n=8).patterns.tolist() == [[0, 2, 4], [1, 3, 5], [2, 4, 6], [3, 5, 7]]


def test_per_query_errors_of_the_fixed_epoch_schema():
    A = prefix_sum(2)
    np.testing.assert_allclose(per_query_errors(workload=A, encoder=[[1, 0], [0.5, 1]]), [1.0, 1.25], rtol=1e-15)
    # non-square encoder: the pseudo-inverse decoder B = A·C⁺ gives 2/3 on both steps
    C = np.array([[1, 0], [0, 1], [1, 1]], dtype=float)
    np.testing.assert_allclose(per_query_errors(workload=A, encoder=C), [2 / 3, 2 / 3], rtol=1e-14)
    np.testing.assert_allclose(optimal_decoder(workload=A, encoder=C) @ C, A, atol=1e-14)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k,b", [(1, 6), (2, 3), (3, 2), (6, 1), (2, 2)])
def test_identity_has_sensitivity_sqrt_k(method, k, b):
    n = 6 if (k, b) != (2, 2) else 8
    assert sensitivity_squared(encoder=np.eye(n), max_participations=k, min_sep=b, method=method) == pytest.approx(k, rel=1e-14)


@pytest.mark.parametrize("seed", range(5))
def test_single_participation_is_the_largest_column_norm(seed):
    C = np.random.default_rng(seed).normal(size=(7, 5))
    expected = max(float(C[:, j] @ C[:, j]) for j in range(5))
    assert single_participation_sensitivity_squared(encoder=C) == pytest.approx(expected, rel=1e-14)
    for method in METHODS:
        assert sensitivity_squared(encoder=C, max_participations=1, min_sep=5, method=method) == pytest.approx(
            expected, rel=1e-12
        )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k,b", [(2, 3), (3, 2), (2, 4)])
def test_methods_against_brute_force(seed, k, b):
    rng = np.random.default_rng(seed)
    n = k * b
    C = np.tril(rng.normal(size=(n, n)))
    truth = brute_force_sensitivity_squared(C, k, b)
    assert sensitivity_squared(encoder=C, max_participations=k, min_sep=b, method="exact") == pytest.approx(truth, rel=1e-12)
    upper = sensitivity_squared(encoder=C, max_participations=k, min_sep=b, method="upper-bound")
    assert upper >= truth * (1 - 1e-12)
    # vector contributions (d = 3): random unit rows never beat the eigenvalue bound
    X = C.T @ C
    for pattern in Participation(max_participations=k, min_sep=b).patterns:
        G = rng.normal(size=(k, 3))
        G /= np.linalg.norm(G, axis=1, keepdims=True)
        assert np.trace(G.T @ X[np.ix_(pattern, pattern)] @ G) <= upper * (1 + 1e-12)
    # a nonnegative encoder has CᵀC ≥ 0: Theorem 2.1's formula equals the brute force
    P = np.abs(C)
    assert sensitivity_squared(encoder=P, max_participations=k, min_sep=b, method="nonnegative") == pytest.approx(
        brute_force_sensitivity_squared(P, k, b), rel=1e-12
    )


def test_nonnegative_formula_refuses_negative_gram_entries():
    C = np.array([[1.0, -1.0], [0.0, 1.0]])  # X[0,1] = −1 within the pattern {0, 1}
    with pytest.raises(InvalidInputError, match="negative entry X\\[0,1\\]"):
        sensitivity_squared(encoder=C, max_participations=2, min_sep=1)
    # entries of X outside every pattern may be negative: (k=1) only the diagonal matters
    assert sensitivity_squared(encoder=C, max_participations=1, min_sep=2) == pytest.approx(2.0)


def test_rounding_negatives_are_absorbed_as_an_upper_bound():
    X = np.array([[1.0, -1e-13], [-1e-13, 1.0]])
    schema = Participation(max_participations=2, min_sep=1)
    value = gram_sensitivity_squared(gram=X, schema=schema)
    assert value >= 2.0 - 2e-13 and value == pytest.approx(2.0 - 2e-13 + 4e-13, abs=1e-15)


def test_total_loss():
    assert total_loss(workload=prefix_sum(2), encoder=np.eye(2), max_participations=1, min_sep=2) == pytest.approx(3.0)
    assert total_loss(workload=prefix_sum(4), encoder=np.eye(4), max_participations=2, min_sep=2) == pytest.approx(20.0)


def test_bad_input():
    with pytest.raises(InvalidInputError, match="not a multiple of min_sep"):
        Participation(max_participations=2, min_sep=3, n=7)
    with pytest.raises(InvalidInputError, match="max_participations must be at least 1"):
        Participation(max_participations=0, min_sep=3)
    with pytest.raises(InvalidInputError, match="exceeds n/min_sep"):
        Participation(max_participations=3, min_sep=3, n=6)
    with pytest.raises(InvalidInputError, match="NaN"):
        sensitivity_squared(encoder=[[1.0, np.nan], [0.0, 1.0]], max_participations=1, min_sep=2)
    with pytest.raises(InvalidInputError, match="unknown sensitivity method"):
        sensitivity_squared(encoder=np.eye(2), max_participations=1, min_sep=2, method="magic")
    with pytest.raises(InvalidInputError, match="sign vectors"):
        sensitivity_squared(encoder=np.eye(48), max_participations=24, min_sep=2, method="exact")
    with pytest.raises(InvalidInputError, match="3 columns but the participation schema has n = 4"):
        gram_sensitivity_squared(gram=np.eye(3), schema=Participation(max_participations=2, min_sep=2))
    with pytest.raises(PureDPMFError, match="workload must have 3 columns"):
        per_query_errors(workload=np.eye(2), encoder=np.eye(3))
