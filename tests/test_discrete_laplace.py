"""The exact discrete Laplace sampler: its pmf by χ² and KS at a fixed false-alarm rate, the power
to reject a 10 % wrong scale, exact Bernoulli probabilities, the keyed stream, bad input."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release import discrete_laplace as dl
from pure_dp_mf.release.lattice import noise_rate

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
    rate = noise_rate(epsilon=Fraction(1, 2), sensitivity=Fraction(3), grid_bits=32)
    assert rate == Fraction(1, 2) / (3 * 2**32)
    s, t = rate.numerator, rate.denominator
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
        lambda: noise_rate(epsilon=Fraction(0), sensitivity=Fraction(1), grid_bits=32),
        lambda: dl.SystemUniform().below(0),
    ],
)
def test_bad_input(call):
    with pytest.raises(InvalidInputError):
        call()


# ---------------------------------------------------------------------------------------------
# The vectorised sampler (discrete_laplace_block): the same law as the scalar one.


@pytest.mark.parametrize("s, t", [(1, 2), (3, 2), (1, 7), (1, 3 * 2**40)])
def test_block_sampler_pmf_by_chi_square_and_ks(s, t):
    n = 40_000
    samples = dl.discrete_laplace_block(s=s, t=t, count=n, key=KEY, index=5)
    assert samples.dtype == np.int64 and len(samples) == n
    if t > 2**20:  # a lattice-sized rate: compare the scaled values with the continuous Laplace law
        scaled = samples / (t / s)
        assert stats.kstest(scaled, stats.laplace.cdf).pvalue > ALPHA
        return
    assert _chi_square_p(samples, s=s, t=t) > ALPHA
    assert _ks_distance(samples, s=s, t=t) < math.sqrt(-math.log(ALPHA / 2) / (2 * n))


def test_block_sampler_has_the_power_to_see_a_ten_percent_wrong_scale():
    samples = dl.discrete_laplace_block(s=10, t=22, count=40_000, key=KEY, index=6)
    assert _chi_square_p(samples, s=1, t=2) < ALPHA


def test_block_and_scalar_samplers_draw_the_same_law():
    """Two-sample χ² between the vectorised and the scalar (the slow obvious) sampler."""
    fast = dl.discrete_laplace_block(s=1, t=3, count=30_000, key=KEY, index=7)
    slow = _draws(30_000, s=1, t=3, key=bytes(range(1, 33)))
    cells = np.arange(-8, 9)
    table = np.array([[np.sum(np.clip(x, -8, 8) == c) for c in cells] for x in (fast, slow)])
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_block_sampler_is_a_function_of_key_index_and_count():
    first = dl.discrete_laplace_block(s=1, t=2**35, count=3000, key=KEY, index=11)
    assert np.array_equal(first, dl.discrete_laplace_block(s=1, t=2**35, count=3000, key=KEY, index=11))
    assert not np.array_equal(first, dl.discrete_laplace_block(s=1, t=2**35, count=3000, key=KEY, index=12))
    assert not np.array_equal(first, dl.discrete_laplace_block(s=1, t=2**35, count=3000, key=bytes(32), index=11))


def test_vector_uniform_below_is_exact_and_uniform():
    stream = dl.WordStream(key=KEY, index=1)
    for m in (1, 2, 3, 6, 1000, 2**61 + 3):
        values = dl.uniform_below(m, 24_000, stream)
        assert values.min() >= 0 and values.max() < m
        if 1 < m <= 1000:
            assert stats.chisquare(np.bincount(values, minlength=m)).pvalue > ALPHA
    # the rejection rule by hand (the slow obvious version): round by round, each pending entry in
    # order takes the next byte's (w ≤ 8) or word's top w bits and keeps them when < m
    raw = dl.WordStream(key=KEY, index=2).octets(1 << 16).tobytes()
    for m, width, unit in ((6, 3, 1), (1000, 10, 8)):
        units = iter(int.from_bytes(raw[i : i + unit], "little") for i in range(0, len(raw), unit))
        expected: list[int | None] = [None] * 300
        while None in expected:
            for i in [i for i, v in enumerate(expected) if v is None]:
                candidate = next(units) >> (8 * unit - width)
                expected[i] = candidate if candidate < m else None
        assert dl.uniform_below(m, 300, dl.WordStream(key=KEY, index=2)).tolist() == expected
    with pytest.raises(InvalidInputError):
        dl.uniform_below(0, 3, stream)
    with pytest.raises(InvalidInputError):
        dl.uniform_below(2**62, 3, stream)


def test_huge_rates_fall_back_to_the_exact_scalar_sampler():
    t = 2**70
    values = dl.discrete_laplace_block(s=1, t=t, count=20, key=KEY, index=0)
    assert values.dtype == object and all(isinstance(v, int) for v in values)
    assert values.tolist() == dl.discrete_laplace_many(s=1, t=t, count=20, source=dl.ShakeStream(key=KEY, index=0))


@pytest.mark.parametrize(
    ("s", "t", "count"),
    [
        (1, 3, 100),  # uniform draws from single bytes
        (3, 7, 1000),
        (5, 2**40 + 3, 1000),  # from 64-bit words
        (2**20, 2**33 - 1, 3000),
        (1, 2**61 + 1, 50),  # t·k ≥ 2^62 (two draws per Bernoulli), and V past int64: the scalar path
        (7, 2**62 + 5, 10),  # t ≥ 2^62: every key by the scalar sampler
        (1, 3 * 2**40, 20_000),  # requests longer than one SHAKE chunk
        (2, 5, 0),
    ],
)
def test_many_keys_in_lockstep_draw_each_keys_own_block(s, t, count, monkeypatch):
    keys = [bytes([i]) * 32 for i in range(7)] + [KEY]
    monkeypatch.setattr(dl, "_LOCKSTEP_KEYS", 3)  # groups of 3, 3 and 2 keys
    monkeypatch.setattr(dl, "_LOCKSTEP_MIN", 1)  # every group in lockstep
    together = dl.discrete_laplace_blocks(s=s, t=t, count=count, keys=keys, index=9)
    assert len(together) == len(keys)
    for key, values in zip(keys, together, strict=True):
        alone = dl.discrete_laplace_block(s=s, t=t, count=count, key=key, index=9)
        assert values.dtype == alone.dtype and values.tolist() == alone.tolist()
    assert dl.discrete_laplace_blocks(s=s, t=t, count=count, keys=[], index=9) == []
