"""The exact discrete Laplace sampler: its pmf by χ² and KS at a fixed false-alarm rate, the power
to reject a 10 % wrong scale, exact Bernoulli probabilities, the keyed stream, bad input."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from pure_dp_mf import discrete_laplace as dl
from pure_dp_mf.errors import InvalidInputError

KEY = bytes(range(32))
ALPHA = 1e-4  # false-alarm rate of each test below (deterministic draws: the result is fixed)


def _draws(count: int, *, s: int, t: int, key: bytes = KEY) -> np.ndarray:
    return np.array([dl.discrete_laplace(s=s, t=t, source=dl.ShakeStream(key=key, index=i)) for i in range(count)])


def _chi_square_p(samples: np.ndarray, *, s: int, t: int, cells: int = 12) -> float:
    """p-value of χ² against DLap(s/t), cells |y| = 0 … cells−1 (split by sign) and a tail."""
    support = list(range(-(cells - 1), cells))
    expected = [dl.pmf(y, s=s, t=t) for y in support]
    expected.append(1 - sum(expected))
    observed = [int(np.sum(samples == y)) for y in support] + [int(np.sum(np.abs(samples) >= cells))]
    expected_counts = np.array(expected) * len(samples)
    return float(stats.chisquare(observed, expected_counts).pvalue)


def _cdf(y: np.ndarray, *, s: int, t: int) -> np.ndarray:
    """P(Y ≤ y) of DLap(s/t) in closed form: q^{|y|}/(1+q) for y < 0, 1 − q^{y+1}/(1+q) else."""
    q = math.exp(-s / t)
    return np.where(y < 0, q ** np.abs(y) / (1 + q), 1 - q ** (y + 1) / (1 + q))


def _ks_distance(samples: np.ndarray, *, s: int, t: int) -> float:
    """sup over the integers of |F_empirical − F|."""
    values = np.arange(samples.min() - 1, samples.max() + 1)
    empirical = np.searchsorted(np.sort(samples), values, side="right") / len(samples)
    return float(np.max(np.abs(empirical - _cdf(values, s=s, t=t))))


@pytest.mark.parametrize("s, t", [(1, 2), (3, 2), (1, 7)])
def test_pmf_by_chi_square_and_ks(s, t):
    n = 30_000
    samples = _draws(n, s=s, t=t)
    assert _chi_square_p(samples, s=s, t=t) > ALPHA
    # KS for a discrete law is conservative: the continuous-case critical value bounds it
    assert _ks_distance(samples, s=s, t=t) < math.sqrt(-math.log(ALPHA / 2) / (2 * n))
    lam = s / t
    assert np.var(samples) == pytest.approx(2 * math.exp(-lam) / (1 - math.exp(-lam)) ** 2, rel=0.05)


def test_power_rejects_a_ten_percent_wrong_scale():
    """Draws of scale 1.1·(t/s) fail the χ² test against t/s: the test above can see such an error."""
    samples = _draws(30_000, s=10, t=22)  # scale 2.2 where 2 is claimed
    assert _chi_square_p(samples, s=1, t=2) < ALPHA


def test_bernoulli_exp_minus_has_the_exact_probability():
    source = dl.ShakeStream(key=KEY, index=10**9)
    for gamma in (Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)):
        hits = sum(dl.bernoulli_exp_minus(gamma, source=source) for _ in range(20_000))
        p = math.exp(-float(gamma))
        assert stats.binomtest(hits, 20_000, p).pvalue > ALPHA, gamma
    assert all(dl.bernoulli_exp_minus(Fraction(0), source=source) for _ in range(100))


def test_bernoulli_is_exact_by_enumeration():
    """below(d) < n: over every value the source can give, exactly n of d are True."""

    class Fixed:
        def __init__(self, value: int) -> None:
            self.value = value

        def below(self, m: int) -> int:
            return self.value % m

    assert sum(dl.bernoulli(3, 7, source=Fixed(v)) for v in range(7)) == 3


def test_uniform_below_is_uniform_and_the_stream_is_a_function_of_key_and_index():
    stream = dl.ShakeStream(key=KEY, index=3)
    values = [stream.below(6) for _ in range(12_000)]
    assert sum(dl.pmf(y, s=1, t=3) for y in range(-200, 201)) == pytest.approx(1.0, abs=1e-12)
    assert stats.chisquare(np.bincount(values, minlength=6)).pvalue > ALPHA
    again = dl.ShakeStream(key=KEY, index=3)
    assert [again.below(6) for _ in range(12_000)] == values
    other = dl.ShakeStream(key=KEY, index=4)
    assert [other.below(6) for _ in range(64)] != values[:64]
    long = dl.ShakeStream(key=KEY, index=3)
    assert [long.below(2**200) for _ in range(3)] != [long.below(2**200) for _ in range(3)]


def test_lattice_rate_is_exact_and_the_lattice_noise_has_the_laplace_spread():
    s, t = dl.lattice_rate(epsilon=Fraction(1, 2), sensitivity=Fraction(3), grid_bits=32)
    assert Fraction(s, t) == Fraction(1, 2) / (3 * 2**32)
    samples = _draws(4000, s=s, t=t) / 2**32
    assert np.std(samples) == pytest.approx(math.sqrt(2) * 3 / 0.5, rel=0.06)


@pytest.mark.parametrize(
    "call",
    [
        lambda: dl.discrete_laplace(s=0, t=1, source=dl.SystemUniform()),
        lambda: dl.discrete_laplace(s=1, t=0, source=dl.SystemUniform()),
        lambda: dl.bernoulli(3, 2, source=dl.SystemUniform()),
        lambda: dl.bernoulli_exp_minus(Fraction(-1), source=dl.SystemUniform()),
        lambda: dl.ShakeStream(key=b"short", index=0),
        lambda: dl.ShakeStream(key=KEY, index=-1),
        lambda: dl.lattice_rate(epsilon=Fraction(0), sensitivity=Fraction(1), grid_bits=32),
        lambda: dl.SystemUniform().below(0),
    ],
)
def test_bad_input(call):
    with pytest.raises(InvalidInputError):
        call()
