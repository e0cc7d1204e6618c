"""lattice.py: the exact lattice release against slow, obvious exact arithmetic; the fallback path;
the exact output distributions of neighbouring streams on a tiny instance (exactly ε-DP), and the
float Laplace path failing the same check."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import flint
import numpy as np
import pytest

from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.engines.generator import NoiseGenerator, laplace_from_words
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms.lift import explicit_lift
from pure_dp_mf.mechanisms.lifted import LiftedDecoder
from pure_dp_mf.mechanisms.streaming import ArraySource
from pure_dp_mf.release import discrete_laplace as dl
from pure_dp_mf.release.lattice import (
    PAGE,
    ExactDecoder,
    ExactRelease,
    LatticeSource,
    Rates,
    fill_pages,
    integer_product,
    noise_rate,
    round_half_up,
    split_matrix,
)
from pure_dp_mf.resources import BASE_FOLDER

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")


def _source(*, key: bytes, sensitivity: int, alphas=(), page_size: int = PAGE) -> LatticeSource:
    rate = noise_rate(epsilon=Fraction(1), sensitivity=Fraction(sensitivity), grid_bits=G)
    return LatticeSource(key=key, rates=Rates(base=rate, alphas=tuple(alphas)), page_size=page_size)


def _fraction_rows(rows: tuple[list[int], int]) -> list[Fraction]:
    numerators, denominator = rows
    return [Fraction(value, denominator) for value in numerators]


G = 32


def _grid_base(k: int, seed: int) -> Factorization:
    rng = np.random.default_rng(seed)
    encoder = np.round((np.eye(k) + 0.3 * np.triu(rng.normal(size=(k, k)), 1)) * 2**G) / 2**G
    return Factorization.from_encoder(encoder, metadata={"metric": "maxse"})


def _exact_inverse(matrix: np.ndarray) -> list[list[Fraction]]:
    """Gauss–Jordan in Fractions (the slow, obvious inverse)."""
    k = matrix.shape[0]
    rows = [[Fraction(float(v)) for v in row] + [Fraction(int(i == j)) for j in range(k)] for i, row in enumerate(matrix)]
    for c in range(k):
        pivot = next(r for r in range(c, k) if rows[r][c] != 0)
        rows[c], rows[pivot] = rows[pivot], rows[c]
        rows[c] = [v / rows[c][c] for v in rows[c]]
        for r in range(k):
            if r != c and rows[r][c] != 0:
                factor = rows[r][c]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[c], strict=True)]
    return [row[k:] for row in rows]


def _exact_pair(base: Factorization):
    """(L, R̃) as Fraction object arrays, L = T_k·R̃⁻¹ exactly."""
    B = base.dense()[1]
    k = B.shape[0]
    inverse = _exact_inverse(B)
    A = np.array([[sum(inverse[m][j] for m in range(i + 1)) for j in range(k)] for i in range(k)], dtype=object)
    return A, np.array([[Fraction(float(v)) for v in row] for row in B], dtype=object)


def _block_levels(levels: int, k: int) -> list[int]:
    """The level of each base-size block of the columns of L_p, in order: [z₀ | z_{j,a} z_{j,b} … | w]."""
    order = [1]
    for level in range(2, levels + 1):
        order = order * (2 * k + 1) + [level]
    return order


def test_release_is_the_exact_rounding_of_the_dense_lift():
    """Counter releases − S_t = ⌊(L_p·w)_t + ½⌋ with L_p the exact dense lift (real α's, Fractions)
    and w_i = c_i·Y_i, c_i the lattice of row i of R_p; and R_p's rows lie on those lattices."""
    base = _grid_base(4, 1)
    n = 120
    counter = ContinualCounter(base=base, epsilon=1.0, horizon=n, generator=NoiseGenerator.from_seed(9))
    x = (np.random.default_rng(1).random(n) < 0.4).astype(int)
    released = counter.counts(x)
    alphas = list(counter.mechanism.alphas)
    levels = len(alphas) + 1
    L, R = explicit_lift(base=_exact_pair(base), levels=levels, alphas=alphas, n=n)
    k = base.n
    source = counter.lattice_sources[0]
    w, spacing = [], []
    for b, level in enumerate(_block_levels(levels, k)):
        c = Fraction(1, 2**G) / (1 if level == 1 else alphas[level - 2])
        spacing += [c] * k
        w += [c * y for y in source.integers(b * k, k, level)]
    for i in range(R.shape[0]):  # coordinate i of every column of R_p is a multiple of c_i
        assert all((value / spacing[i]).denominator == 1 for value in R[i])
    reference = [round_half_up(sum(L[t, i] * w[i] for i in range(L.shape[1]) if L[t, i] != 0)) for t in range(n)]
    assert np.array_equal(released - np.cumsum(x), reference)
    # the sensitivity the noise is scaled to is the exact ‖R_p[:, :n]‖₁→₁
    assert counter.sensitivity == max(sum(abs(R[i, j]) for i in range(R.shape[0])) for j in range(n))


def test_terms_walk_equals_the_vectorised_engine():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 3))
    z = rng.standard_normal(2000)
    engine = LiftedDecoder(decoder=A, alphas=[0.7, 1.3])
    values = engine.values(ArraySource({1: z, 2: z, 3: z}), 0, engine.n)
    walked = [
        sum(float(term.weight) * (A @ z[term.offset : term.offset + 3])[term.row] for term in engine.terms(t))
        for t in range(engine.n)
    ]
    np.testing.assert_allclose(values, walked, rtol=0, atol=1e-12)
    assert max(len(engine.terms(t)) for t in range(engine.n)) == engine.levels


def test_decoder_bound_is_a_bound():
    """τ bounds max_i ‖L_i − L̃_i‖₂ (computed exactly here); the exact rows are T_k·R̃⁻¹·Y·2^-g."""
    base = _grid_base(6, 3)
    decoder = ExactDecoder.from_factorization(decoder=base.dense()[0], encoder=base.dense()[1])
    A, _ = _exact_pair(base)
    worst = max(sum((A[i, j] - Fraction(float(decoder.decoder[i, j]))) ** 2 for j in range(6)) for i in range(6))
    assert Fraction(decoder.tau) ** 2 >= worst and decoder.rho < 1
    Y = [12345678901, -3, 0, 7, -99999, 2**40]
    expected = [sum(A[i, j] * Y[j] for j in range(6)) / 2**G for i in range(6)]
    assert _fraction_rows(decoder.exact_rows(Y)) == expected


def test_off_lattice_singular_and_inexact_bases_are_refused():
    encoder = np.eye(3) + 1e-3  # not on the 2^-32 lattice
    with pytest.raises(InvalidInputError, match="not on the grid"):
        ExactDecoder.from_factorization(decoder=np.linalg.inv(encoder), encoder=encoder)
    with pytest.raises(InvalidInputError, match="not on the grid"):
        ContinualCounter(base=Factorization.from_encoder(encoder), epsilon=1.0, horizon=3)
    tree_decoder = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # a decoder that does not factor T_2 with this encoder
    with pytest.raises(InvalidInputError, match="not T_2 exactly"):
        ExactDecoder.from_factorization(decoder=tree_decoder, encoder=np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))


class _FixedIntegers:
    """A LatticeSource stand-in with chosen integer blocks (crafted inputs for the fallback)."""

    def __init__(self, blocks: dict[int, list[int]]):
        self.blocks_ = blocks
        self.largest = float(max(abs(v) for b in blocks.values() for v in b))
        self.largest_norm = float(max(math.sqrt(sum(v * v for v in b)) for b in blocks.values())) * (1 + 1e-12)
        self.exact_in_float = self.largest < 2.0**53

    def integers(self, offset, size, level=1):
        return self.blocks_[offset]

    def block(self, offset, size, level=1):
        return np.array(self.blocks_[offset], dtype=np.float64)

    def blocks(self, offsets, size):
        return np.stack([self.block(o, size) for o in offsets])


def _release(decoder: ExactDecoder, blocks: dict[int, list[int]], alphas=()) -> ExactRelease:
    return ExactRelease(
        decoder=LiftedDecoder(decoder=decoder.decoder, alphas=list(alphas)), atoms=decoder, sources=[_FixedIntegers(blocks)]
    )


def test_fallback_decides_near_ties_exactly():
    """R̃ = P·2^-g with P = [[3, 1], [0, 5]]: row 0 of 2^-g·L·Y is u₀ = (5·Y₀ − Y₁)/15. Crafted Y put
    u₀ at m + ½ ± 1/30 with m = 2^50, below the float route's resolution: it must defer, and the
    exact route must round each side correctly."""
    P = np.array([[3.0, 1.0], [0.0, 5.0]])
    decoder = ExactDecoder.from_factorization(decoder=np.zeros((2, 2)), encoder=np.ldexp(P, -G))
    m = 2**50
    for Y1, expected_row0 in ((2, m + 1), (3, m)):  # 5·Y₀ − Y₁ = 15m + 8 (above the tie) or 15m + 7 (below)
        Y = [3 * m + 2, Y1]
        u0 = Fraction(5 * Y[0] - Y[1], 15)
        assert _fraction_rows(decoder.exact_rows(Y)) == [u0, u0 + Fraction(Y[1], 5)]
        release = _release(decoder, {0: Y})
        assert release.noise(0, 2).tolist() == [expected_row0, round_half_up(u0 + Fraction(Y[1], 5))]
        assert release.fallbacks >= 1


def test_ties_round_half_up_and_far_values_need_no_fallback():
    """R̃ = 2·I·2^-g: 2^-g·L·Y is the prefix sums of Y/2, so odd sums are exact ties."""
    decoder = ExactDecoder.from_factorization(decoder=np.zeros((2, 2)), encoder=np.ldexp(2 * np.eye(2), -G))
    for Y, expected in (([5, 0], [3, 3]), ([-5, 0], [-2, -2]), ([7, -2], [4, 3]), ([2**60 + 1, 0], [2**59 + 1, 2**59 + 1])):
        release = _release(decoder, {0: Y})
        assert release.noise(0, 2).tolist() == expected
        assert release.fallbacks == 2  # every value is a tie (or beyond 2^53): the float route defers
    release = _release(decoder, {0: [8, 2]})
    assert release.noise(0, 2).tolist() == [4, 5] and release.fallbacks == 0


def test_lattice_source_rates_and_regeneration():
    source = _source(key=b"k" * 32, sensitivity=3, alphas=[Fraction(1, 2)])
    assert source.rates.levels(2) == [Fraction(1, 3 * 2**G), Fraction(2, 3 * 2**G)]
    again = _source(key=b"k" * 32, sensitivity=3, alphas=[Fraction(1, 2)])
    assert source.integers(0, 50) == again.integers(0, 50)
    assert source.integers(0, 50) != source.integers(50, 50)
    page = dl.discrete_laplace_block(s=1, t=3 * 2**G, count=PAGE, key=source.key, index=(1 << 64) + 0)
    assert source.integers(0, 50) == page[:50].tolist()
    level_2 = dl.discrete_laplace_block(s=2, t=3 * 2**G, count=PAGE, key=source.key, index=(2 << 64) + 1)
    assert source.integers(PAGE + 3, 40, 2) == level_2[3:43].tolist()  # level 2 has its own pages and rate
    straddling = source.integers(PAGE - 5, 10)  # a block across two pages
    next_page = dl.discrete_laplace_block(s=1, t=3 * 2**G, count=PAGE, key=source.key, index=(1 << 64) + 1)
    assert straddling == page[-5:].tolist() + next_page[:5].tolist()


def test_pages_filled_for_many_sources_are_each_sources_own():
    def make(key: bytes, sensitivity: int = 3) -> LatticeSource:
        return _source(key=key, sensitivity=sensitivity, alphas=[Fraction(1, 2)], page_size=64)

    together = [make(bytes([i]) * 32) for i in range(4)]
    together[2].integers(70, 5, 2)  # one source already holds a page: it is kept, not redrawn
    fill_pages(together, offset=60, size=10, level=2)  # pages 0 and 1 of level 2
    for i, source in enumerate(together):
        assert (2, 0) in source._pages and (2, 1) in source._pages
        alone = make(bytes([i]) * 32)
        assert source.integers(60, 10, 2) == alone.integers(60, 10, 2)
    with pytest.raises(InvalidInputError):
        fill_pages([make(b"a" * 32), make(b"b" * 32, sensitivity=5)], offset=0, size=1, level=1)


# ---------------------------------------------------------------------------------------------
# Exact output distributions on a tiny instance.


def test_tiny_instance_is_exactly_epsilon_dp_and_float_laplace_is_not():
    """k = 1, R̃ = [3/4] on the lattice 2^-2 ℤ, α = 1/2, ε = 3, n = 4. The release noise
    ν_t = ⌊Σ_i L_ti·c_i·Y_i + ½⌋ (exact lift, the code's ExactRelease on the same Y) has an output
    law computed here in ball arithmetic (arb) over |Y_i| ≤ B, with the truncated mass bounded;
    for every neighbouring pair (one step changed) and every output s of non-negligible
    probability, P(s|x) ≤ e^ε·P(s|x'). The float Laplace path fails: an output has positive
    probability under one stream and probability 0 under its neighbour."""
    beta, g, alpha, epsilon = Fraction(3, 4), 2, Fraction(1, 2), Fraction(3)
    L, R = explicit_lift(
        base=(np.array([[1 / beta]], dtype=object), np.array([[beta]], dtype=object)), levels=2, alphas=[alpha], n=4
    )
    c = [Fraction(1, 2**g)] * 3 + [Fraction(1, 2**g) / alpha]  # columns: z₀, z_{1a}, z_{1b}, w
    for i in range(4):
        assert all((value / c[i]).denominator == 1 for value in R[i])  # R_2's rows on their lattices
    delta = max(sum(abs(R[i, j]) for i in range(4)) for j in range(4))
    assert delta == beta + beta / alpha
    support = [[i for i in range(4) if L[t, i] != 0] for t in range(4)]
    assert support == [[0], [1, 3], [3], [2, 3]]
    coefficient = [[L[t, i] * c[i] for i in range(4)] for t in range(4)]

    def nu(Y):
        return [round_half_up(sum(coefficient[t][i] * Y[i] for i in range(4))) for t in range(4)]

    # the code's release on the same integers agrees (base k = 1 on the lattice 2^-2)
    decoder = ExactDecoder.from_factorization(decoder=np.zeros((1, 1)), encoder=np.array([[0.75]]), grid_bits=g)
    rng = np.random.default_rng(0)
    for _ in range(50):
        Y = [int(v) for v in rng.integers(-60, 60, size=4)]
        release = _release(decoder, {i: [Y[i]] for i in range(4)}, alphas=[1.0])
        assert release.noise(0, 4).tolist() == nu(Y)

    rates = [epsilon * ci / delta for ci in c]
    flint.ctx.prec = 160

    def decay(rate):
        return (flint.arb(-rate.numerator) / rate.denominator).exp()

    def pmf(y, rate):
        e = decay(rate)
        return (1 - e) / (1 + e) * e ** abs(y)

    B = 130
    tail = sum((2 * decay(rate) ** (B + 1) / (1 + decay(rate)) for rate in rates), flint.arb(0))  # P(some |Y_i| > B)
    values = range(-B, B + 1)
    zero = flint.arb(0)
    first: dict[int, flint.arb] = {}
    for y in values:
        key = round_half_up(coefficient[0][0] * y)
        first[key] = first.get(key, zero) + pmf(y, rates[0])
    by_coarse = {}  # Y_w → (ν₂, law of ν₁ given Y_w, law of ν₃ given Y_w)
    for yw in values:
        shift = coefficient[1][3] * yw
        second: dict[int, flint.arb] = {}
        third: dict[int, flint.arb] = {}
        for y in values:
            a = round_half_up(coefficient[1][1] * y + shift)
            b = round_half_up(coefficient[3][2] * y + coefficient[3][3] * yw)
            second[a] = second.get(a, zero) + pmf(y, rates[1])
            third[b] = third.get(b, zero) + pmf(y, rates[2])
        by_coarse[yw] = (round_half_up(coefficient[2][3] * yw), second, third)
    coarse_of: dict[int, list[int]] = {}
    for yw, (nu2, _, _) in by_coarse.items():
        coarse_of.setdefault(nu2, []).append(yw)

    def probability(v):
        """P_B(ν = v): a lower bound of P(ν = v), at most ``tail`` below it."""
        total = zero
        for yw in coarse_of.get(v[2], []):
            _, second, third = by_coarse[yw]
            if v[1] in second and v[3] in third:
                total += pmf(yw, rates[3]) * second[v[1]] * third[v[3]]
        return first.get(v[0], zero) * total

    checked, worst = 0, 0.0
    grid = range(-6, 7)
    for v0 in grid:
        for v2 in grid:
            for d1 in grid:
                for d3 in grid:
                    v = (v0, v2 + d1, v2, v2 + d3)
                    p = probability(v)
                    if not p > 1e-9:
                        continue
                    for position in range(4):  # x = 0, x' = e_position: S(x') − S(x) = 1 from position on
                        shift = [int(t >= position) for t in range(4)]
                        q = probability(tuple(a - b for a, b in zip(v, shift, strict=True)))
                        if not q > 1e-9:
                            continue
                        # P(s|x) ∈ [p, p + tail], P(s|x') ∈ [q, q + tail]: the privacy loss is at most
                        # log((p + tail)/q), proven here to be ≤ ε + 10^-6 (the truncation's slack)
                        for top, low in ((p, q), (q, p)):
                            loss = ((top + tail) / low).log()
                            assert loss.upper() <= float(epsilon) + 1e-6, (v, position)
                            worst = max(worst, float(loss.mid()))
                        checked += 1
    # the bound is tight: some outputs have privacy loss ε (the lattice Laplace ratio e^ε, exactly)
    assert checked > 1000 and float(epsilon) - 1e-9 <= worst <= float(epsilon) + 1e-6

    # Float Laplace (the old path): z = laplace_from_words, |z| ≤ 53·ln 2, ν₀ = round(b·L₀₀·z₀), b = Δ/ε.
    b_times_l = float(delta / epsilon * L[0, 0])
    largest = float(laplace_from_words(np.array([(1 << 53) - 1], dtype=np.uint64))[0])
    assert largest == pytest.approx(53 * math.log(2), rel=1e-12)
    top = int(np.rint(b_times_l * largest))  # the largest ν₀ the float path can produce (round is monotone)
    # s₀ = x₀ + ν₀ = top + 1 has probability ≥ 2^-54 when x₀ = 1 and exactly 0 when x₀ = 0: infinite loss.
    assert int(np.rint(b_times_l * laplace_from_words(np.array([(1 << 53) - 1], dtype=np.uint64))[0])) == top
    assert all(
        abs(int(np.rint(b_times_l * v))) <= top
        for v in laplace_from_words(np.arange(1 << 53 - 8, 1 << 53, 2**40, dtype=np.uint64))
    )


def test_decoder_bounds_are_cached_between_processes_by_the_matrices_they_prove(tmp_path, monkeypatch):
    """A proven bound is stored under the sha256 of its integer matrices and read back instead of
    proven again; a tampered or foreign entry is proven again; ``PURE_DP_MF_CACHE=off`` stores nothing."""
    from pure_dp_mf.release import lattice

    base = Factorization.load(BASE_FOLDER / "k008_maxse.npz")
    decoder, encoder = base.dense()
    monkeypatch.setenv("PURE_DP_MF_CACHE", str(tmp_path / "cache"))
    proven = ExactDecoder.from_factorization(decoder=decoder, encoder=encoder)
    (entry,) = (tmp_path / "cache").glob("*.json")
    calls = []
    real = lattice._decoder_bound
    monkeypatch.setattr(lattice, "_decoder_bound", lambda *a: calls.append(1) or real(*a))
    again = ExactDecoder.from_factorization(decoder=decoder, encoder=encoder)
    assert not calls and (again.tau, again.rho, again.row_abs_sum) == (proven.tau, proven.rho, proven.row_abs_sum)
    record = json.loads(entry.read_text())
    entry.write_text(json.dumps({**record, "tag": "0" * 64, "tau": (0.0).hex()}))  # an entry for other matrices
    third = ExactDecoder.from_factorization(decoder=decoder, encoder=encoder)
    assert calls == [1] and third.tau == proven.tau
    monkeypatch.setenv("PURE_DP_MF_CACHE", "off")
    entry.unlink()
    ExactDecoder.from_factorization(decoder=decoder, encoder=encoder)
    assert calls == [1, 1] and not list((tmp_path / "cache").glob("*.json"))


def test_sampler_rates_never_exceed_the_exact_rate():
    """Rates with a denominator ≥ 2^62 are drawn at the largest multiple of 2^-56 below them
    (more noise: the proof holds); every other rate is drawn exactly."""
    from pure_dp_mf.release.lattice import Rates, sampler_rate

    small = Fraction(1, 3 * 2**40)
    assert sampler_rate(small) == small
    tilted = Fraction(2**31, 15679732454922177741) / Fraction(3006477107, 2**32)  # an anytime segment's coarse level
    assert tilted.denominator >= 2**62
    drawn = sampler_rate(tilted)
    assert drawn <= tilted and drawn.denominator <= 2**56 and tilted - drawn < Fraction(1, 2**56)
    rates = Rates(base=small, alphas=(Fraction(3006477107, 2**32),))
    assert rates(2) == sampler_rate(small * Fraction(2**32, 3006477107)) <= small * Fraction(2**32, 3006477107)


def test_integer_products_are_exact_for_any_integer_size():
    """``integer_product`` against Python integers: entries up to ±2^52, vectors from 0 to 2^300."""
    rng = np.random.default_rng(5)
    for k in (1, 3, 64, 300):
        A = rng.integers(-(2**52), 2**52, size=(k, k), endpoint=True)
        A[0, 0] = 2**52
        A[-1, -1] = -(2**52)
        for bits in (0, 20, 62, 300):
            x = [
                int(v) * (1 << max(bits - 20, 0)) + int(u)
                for v, u in zip(rng.integers(-(2**20), 2**20, size=k), rng.integers(-5, 5, size=k), strict=True)
            ]
            expected = [sum(int(a) * v for a, v in zip(row, x, strict=True)) for row in A.tolist()]
            assert integer_product(split_matrix(A), x) == expected
    # k = 2048 at the extremes: entries ±2^52 and every digit of x at its largest, so the float64
    # partial sums reach the 2^53 the digit size is chosen for
    k = 2048
    A = np.full((3, k), 2**52, dtype=np.int64)
    A[1] = -(2**52)
    A[2] = rng.integers(-(2**52), 2**52, size=k, endpoint=True)
    A = np.vstack([A, np.zeros((k - 3, k), dtype=np.int64)])
    x = [(1 << 300) - 1 if j % 3 else -((1 << 300) - 1) for j in range(k)]
    x[5] = 0
    got = integer_product(split_matrix(A), x)
    assert got[:3] == [sum(int(a) * v for a, v in zip(row, x, strict=True)) for row in A[:3].tolist()]
    assert got[3:] == [0] * (k - 3)
    with pytest.raises(InvalidInputError, match="2\\^52"):
        split_matrix(np.array([[2**52 + 1]]))


@pytest.mark.parametrize("exponent", [40, 70])
def test_noise_beyond_float_precision_is_decided_exactly_without_the_solve(monkeypatch, exponent):
    """ε = 2^-40 draws |Y| near 2^72, beyond float64's exact integers: values are decided in
    floats on fl(Y) with the rounding added to the bound, the rest in integers; at ε = 2^-70 the
    values pass 2^52 and every one is decided in integers. Each equals the exact rounding of the
    dense lift (Fractions), and the exact solve is never called."""

    def no_solve(self, Y):
        raise AssertionError("the exact solve was called")

    monkeypatch.setattr(ExactDecoder, "exact_rows", no_solve)
    base = _grid_base(4, 2)
    n = 40
    counter = ContinualCounter(base=base, epsilon=2.0**-exponent, horizon=n, generator=NoiseGenerator.from_seed(11))
    x = (np.random.default_rng(3).random(n) < 0.5).astype(int)
    released = counter.counts(x)
    source = counter.lattice_sources[0]
    assert not source.exact_in_float
    assert counter.fallbacks == n if exponent == 70 else 0 <= counter.fallbacks < n
    alphas = list(counter.mechanism.alphas)
    levels = len(alphas) + 1
    L, _ = explicit_lift(base=_exact_pair(base), levels=levels, alphas=alphas, n=n)
    k = base.n
    w = []
    for b, level in enumerate(_block_levels(levels, k)):
        c = Fraction(1, 2**G) / (1 if level == 1 else alphas[level - 2])
        w += [c * y for y in source.integers(b * k, k, level)]
    reference = [round_half_up(sum(L[t, i] * w[i] for i in range(L.shape[1]) if L[t, i] != 0)) for t in range(n)]
    assert [int(v) for v in np.asarray(released, dtype=object) - np.cumsum(x)] == reference
    assert source.largest >= 2.0**53


def test_refinement_steps_decide_near_ties_and_exact_ties_reach_the_solve(monkeypatch):
    """Near ties (1/30 from a half-integer at 2^120, as in test_fallback_decides_near_ties_exactly) are
    decided by refinement steps, never the solve; an exact tie of a non-dyadic decoder (P = diag(6, 1),
    Y₀ = 3: u₀ = ½) can never be decided by an interval and reaches the exact solve."""
    calls = []
    solve = ExactDecoder.exact_rows
    monkeypatch.setattr(ExactDecoder, "exact_rows", lambda self, Y: calls.append(Y) or solve(self, Y))
    P = np.array([[3.0, 1.0], [0.0, 5.0]])
    decoder = ExactDecoder.from_factorization(decoder=np.zeros((2, 2)), encoder=np.ldexp(P, -G))
    assert decoder.tau > 0
    m = 2**120  # the first interval (radius about τ·‖Y‖ ≈ 2^70) needs refinement steps
    for Y1, expected_row0 in ((2, m + 1), (3, m)):
        Y = [3 * m + 2, Y1]
        release = _release(decoder, {0: Y})
        u0 = Fraction(5 * Y[0] - Y[1], 15)
        assert release.noise(0, 2).tolist() == [expected_row0, round_half_up(u0 + Fraction(Y[1], 5))]
        assert release.fallbacks >= 1 and release._refined[(0, 0, 1)].steps >= 1
    assert calls == []
    tie = ExactDecoder.from_factorization(decoder=np.zeros((2, 2)), encoder=np.ldexp(np.diag([6.0, 1.0]), -G))
    assert tie.tau > 0
    release = _release(tie, {0: [3, 0]})
    assert release.noise(0, 2).tolist() == [1, 1]  # ½ and ½ + 0, rounded half up
    assert calls == [[3, 0]]
