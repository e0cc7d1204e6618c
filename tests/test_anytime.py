"""mechanisms/anytime.py: the anytime counter (no horizon) and extending a known-horizon counter.

Checked against slow, obvious constructions: the release equals the sum of the segments' own
known-horizon counters (each run alone under its child generator); the error bars equal the
profile variances; ``errors`` equals the max and mean of the per-step variances; a tiny instance
is exactly ε-DP (output laws in ball arithmetic); the intervals cover at the promised rate;
states resume exactly, extension keeps every released value."""

from __future__ import annotations

import warnings
from fractions import Fraction

import flint
import numpy as np
import pytest
from conftest import run_cli

from pure_dp_mf import resources
from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import anytime
from pure_dp_mf.mechanisms import mechanism as mechanisms
from pure_dp_mf.mechanisms.anytime import AnytimeMechanism, Schedule, Segment
from pure_dp_mf.release.generator import NoiseGenerator
from pure_dp_mf.release.lattice import round_half_up

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")

SMALL = Schedule(
    metric="maxse",
    segments=(
        Segment(length=7, base="k004_maxse.npz"),
        Segment(length=30, base="k008_maxse.npz", top_alpha=Fraction(3, 4)),
        Segment(length=25, base="k004_meanse.npz"),
    ),
    growth=2,
)


def _small() -> AnytimeMechanism:
    return AnytimeMechanism(schedule=SMALL, name="anytime (test schedule)")


def test_schedule_is_public_and_continues_geometrically():
    assert [SMALL.segment(i).length for i in range(6)] == [7, 30, 25, 50, 100, 200]
    assert SMALL.segment(4).base == "k004_meanse.npz" and SMALL.segment(4).top_alpha is None
    assert [SMALL.first(i) for i in range(5)] == [0, 7, 37, 62, 112]
    for t in range(0, 400):
        index = SMALL.index_of(t)
        assert SMALL.first(index) <= t < SMALL.first(index) + SMALL.segment(index).length
    assert Schedule.from_record(SMALL.to_record()) == SMALL
    shipped = anytime.shipped_schedule("maxse")
    assert shipped.segments[0].base_sha256 and len(shipped.segments) >= 2


def test_release_is_the_sum_of_each_segments_own_counter():
    """The slow, obvious construction: each segment alone, a known-horizon counter on its own
    steps under the child generator "anytime segment s"; release = earlier finals + own count."""
    rng = NoiseGenerator.from_seed(5)
    x = np.random.default_rng(1).integers(0, 2, 150)
    counter = ContinualCounter(epsilon=0.7, mechanism=_small(), rng=rng)
    released = np.concatenate([counter.counts(x[:3]), counter.counts(x[3:40]), counter.counts(x[40:])])
    expected, carried, start, index = [], 0, 0, 0
    while start < len(x):
        segment = SMALL.segment(index)
        mechanism = anytime._segment_mechanism(segment)
        own = ContinualCounter(epsilon=0.7, mechanism=mechanism, rng=rng.child(f"anytime segment {index}"))
        stop = min(start + segment.length, len(x))
        counts = own.counts(x[start:stop])
        expected.extend(carried + counts)
        if stop - start == segment.length:
            carried += int(counts[-1])
        start, index = stop, index + 1
    assert released.tolist() == expected


def test_error_bars_equal_the_profile_variances_and_errors_their_max_and_mean():
    counter = ContinualCounter(epsilon=0.5, mechanism=_small(), rng=NoiseGenerator.from_seed(2))
    bars = counter.bars(0, 300, beta=0.05)
    variances = anytime.variances(schedule=SMALL, n=300, epsilon=0.5)
    assert np.allclose(bars.std**2, variances, rtol=1e-9)
    assert np.all(np.diff(bars.std[[6, 7]]) > 0)  # a new segment adds its noise on top of the carried
    for n in (1, 6, 7, 8, 36, 37, 38, 120, 300):
        max_se, mean_se = anytime.errors(schedule=SMALL, n=n, epsilon=0.5)
        assert max_se == pytest.approx(variances[:n].max(), rel=1e-9)
        assert mean_se == pytest.approx(variances[:n].mean(), rel=1e-9)


def test_intervals_cover_at_the_promised_rate():
    """150 seeded runs of 120 steps (three segments and a continued one), β = 0.2: every
    per-step miss rate within sampling error of β (binomial, 4.5 standard deviations)."""
    beta, runs, n = 0.2, 150, 120
    misses = np.zeros(n)
    x = np.random.default_rng(3).integers(0, 2, n)
    truth = np.cumsum(x)
    for run in range(runs):
        counter = ContinualCounter(epsilon=1.0, mechanism=_small(), rng=NoiseGenerator.from_seed(1000 + run))
        counts = counter.counts(x)
        lower, upper = counter.bars(0, n, beta=beta).bounds(counts, first_step=0, max_value=1)
        misses += (truth < lower) | (truth > upper)
    rate = misses / runs
    assert rate.max() <= beta + 4.5 * np.sqrt(beta * (1 - beta) / runs)


def test_a_resumed_anytime_counter_releases_what_an_uninterrupted_one_would(tmp_path):
    x = np.random.default_rng(4).integers(0, 2, 90)
    whole = ContinualCounter(epsilon=1.0, mechanism=_small(), rng=NoiseGenerator.from_seed(9)).counts(x)
    first = ContinualCounter(epsilon=1.0, mechanism=_small(), rng=NoiseGenerator.from_seed(9))
    first.save_state(tmp_path / "c.db")
    head = first.counts(x[:20])
    first.close()
    resumed = ContinualCounter.resume(tmp_path / "c.db")
    assert resumed.horizon is None and resumed.mechanism.schedule == SMALL
    tail = resumed.counts(x[20:])
    assert np.concatenate([head, tail]).tolist() == whole.tolist()
    assert resumed.releases(0, 90)[-1][1] == whole[-1]


def test_extending_a_counter_keeps_every_released_value_and_goes_on(tmp_path):
    base = tmp_path / "k004.npz"
    Factorization.load(resources.BASE_FOLDER / "k004_maxse.npz").save(base, store_decoder=False)
    x = np.random.default_rng(6).integers(0, 2, 80)
    plain = ContinualCounter(epsilon=1.0, base=base, horizon=20, rng=NoiseGenerator.from_seed(3))
    reference = plain.counts(x[:20])
    counter = ContinualCounter(epsilon=1.0, base=base, horizon=20, rng=NoiseGenerator.from_seed(3))
    counter.save_state(tmp_path / "c.db")
    assert counter.counts(x[:12]).tolist() == reference[:12].tolist()
    with pytest.raises(InvalidInputError, match="horizon"):
        counter.counts(x[12:30])
    counter.extend_horizon()
    assert counter.horizon is None
    go_on = counter.counts(x[12:60])
    assert go_on[:8].tolist() == reference[12:].tolist()  # the known-horizon steps, their own noise
    counter.close()
    resumed = ContinualCounter.resume(tmp_path / "c.db")
    assert resumed.horizon is None and resumed.mechanism.kind == "anytime"
    more = resumed.counts(x[60:])
    again = ContinualCounter(epsilon=1.0, base=base, horizon=20, rng=NoiseGenerator.from_seed(3))
    again.extend_horizon()
    assert again.counts(x).tolist() == [*reference.tolist()[:12], *go_on.tolist(), *more.tolist()]
    schedule = resumed.mechanism.schedule
    assert schedule.segments[0].length == 20 and schedule.first(2) >= 40  # the bridge ends at a scheme boundary ≥ 2n
    bars = resumed.bars(0, 80, beta=0.05)
    assert np.allclose(bars.std[:20], plain.bars(0, 20, beta=0.05).std)


def test_counter_without_a_horizon_and_the_command(tmp_path):
    with Counter(epsilon=1.0, rng=NoiseGenerator.from_seed(1), state=tmp_path / "s.db") as counter:
        assert counter.counter.horizon is None and counter.mechanism.startswith("anytime")
        releases = counter.release([1, 0, 1])
        assert releases.std is not None and len(releases.lower) == 3
    with pytest.raises(InvalidInputError, match="anytime"):
        Counter(epsilon=1.0, mechanism="binary", rng=NoiseGenerator.from_seed(1))
    data = tmp_path / "bits.txt"
    data.write_text("1\n0\n1\n1\n" * 10)
    result = run_cli("count", str(data), "--epsilon", "1", "--seed", "3", "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert "without a horizon" in result.stderr
    assert result.stdout.splitlines()[0] == "step,count,std,lower,upper" and len(result.stdout.splitlines()) == 41
    state = tmp_path / "k.db"
    first = run_cli("count", str(data), "--epsilon", "1", "--horizon", "20", "--seed", "3", "--state", str(state))
    assert first.returncode == 2 and "more steps than the horizon 20" in first.stderr and "--extend" in first.stderr
    go_on = run_cli("count", str(data), "--epsilon", "1", "--horizon", "20", "--seed", "3", "--state", str(state), "--extend")
    assert go_on.returncode == 0, go_on.stderr
    assert len(go_on.stdout.splitlines()) == 40


def test_tiny_anytime_instance_is_exactly_epsilon_dp(tmp_path):
    """Three one-step segments on the k = 1 base R̃ = [3/4], L = [4/3], ε = 1: the release is
    r_t = S_t + Σ_{s≤t} ν_s with ν_s = ⌊(4/3)·2^-g·Y_s + ½⌋, Y_s ~ DLap(ε·2^-g/(3/4)) drawn by
    segment s's own generator. The code's noise has exactly this structure (checked on its own
    integers), and from the exact law of ν (closed-form geometric sums in ball arithmetic, no
    truncation) every neighbouring pair (one step changed by 1) has privacy loss ≤ ε at every
    output of a grid holding almost all the mass."""
    path = tmp_path / "k001.npz"
    Factorization(decoder=np.array([[4 / 3]]), encoder=np.array([[0.75]]), metadata={"metric": "maxse"}).save(
        path, store_decoder=False
    )
    record = mechanisms.lifted(base=path, horizon=1).record
    schedule = Schedule(metric="maxse", segments=tuple(Segment(length=1, mechanism=record) for _ in range(3)), growth=2)
    epsilon = Fraction(1)
    rng = NoiseGenerator.from_seed(11)
    counter = ContinualCounter(epsilon=float(epsilon), mechanism=AnytimeMechanism(schedule=schedule), rng=rng)
    noise = counter.counts([0, 0, 0]).tolist()
    g = counter.mechanism.segment_mechanism(0).atoms.grid_bits
    own = []
    for index in range(3):
        generator = anytime.segment_generator(rng, index, schedule)
        single = ContinualCounter(epsilon=float(epsilon), mechanism=mechanisms.lifted(base=path, horizon=1), rng=generator)
        Y = single.lattice_sources[0].integers(0, 1, 1)[0]
        own.append(round_half_up(Fraction(4, 3) * Fraction(Y, 2**g)))
    assert noise == [own[0], own[0] + own[1], own[0] + own[1] + own[2]]

    rate = epsilon / (2**g * Fraction(3, 4))
    flint.ctx.prec = 200
    e = (flint.arb(-rate.numerator) / rate.denominator).exp()

    def power(a: int) -> flint.arb:
        return (flint.arb(-rate.numerator * a) / rate.denominator).exp()

    def mass(a: int, b: int) -> flint.arb:
        """P(a ≤ Y ≤ b) for Y ~ DLap(rate), exactly (geometric sums)."""
        if a > b:
            return flint.arb(0)
        if a >= 0:
            return (power(a) - power(b + 1)) / (1 + e)
        if b <= 0:
            return mass(-b, -a)
        return mass(a, -1) + mass(0, b)

    def law(v: int) -> flint.arb:
        """P(ν = v): ν = v ⟺ (v − ½)·3·2^(g−2) ≤ Y < (v + ½)·3·2^(g−2)."""
        width = 3 * 2 ** (g - 2)
        low = -((-(2 * v - 1) * width) // 2)  # ⌈(v − ½)·width⌉
        high = -((-(2 * v + 1) * width) // 2) - 1
        return mass(low, high)

    laws = {v: law(v) for v in range(-12, 13)}

    def probability(r):
        total = flint.arb(1)
        for v in (r[0], r[1] - r[0], r[2] - r[1]):
            total *= laws[v] if v in laws else law(v)
        return total

    checked = 0
    grid = range(-4, 5)
    for r0 in grid:
        for d1 in grid:
            for d2 in grid:
                r = (r0, r0 + d1, r0 + d1 + d2)
                p = probability(r)
                for position in range(3):
                    shifted = tuple(v - int(t >= position) for t, v in enumerate(r))
                    q = probability(shifted)
                    for top, low in ((p, q), (q, p)):
                        assert (top / low).log().upper() <= float(epsilon) + 1e-30
                    checked += 1
    assert checked == 3 * 9**3


def test_keyed_counts_need_a_schedule_without_a_horizon():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run_cli("count", "x.csv", "--key-column", "k", "--keys", "k.txt", "--step-column", "s", "--epsilon", "1")
    assert result.returncode == 2 and result.stderr.startswith("error:")
