"""mechanisms/anytime.py: the anytime counter (no horizon) and extending a known-horizon counter.

Checked against slow, obvious constructions: the release equals the sum of the segments' own
known-horizon counters (each run alone under its child generator); the error bars equal the
profile variances; ``errors`` equals the max and mean of the per-step variances; a tiny instance
is exactly ε-DP (output laws in ball arithmetic); the intervals cover at the promised rate;
states resume exactly, extension keeps every released value."""

from __future__ import annotations

from fractions import Fraction

import flint
import numpy as np
import pytest
from conftest import run_cli

from pure_dp_mf import resources
from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import anytime
from pure_dp_mf.mechanisms import mechanism as mechanisms
from pure_dp_mf.mechanisms.anytime import AnytimeMechanism, Schedule, Segment
from pure_dp_mf.release import segmented
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

TWO = Schedule(  # two-release segments: counters at (1 − θ_s)ε, totals at θ_s·ε
    metric="maxse",
    segments=(
        Segment(length=7, base="k004_maxse.npz", theta=Fraction(1, 4), weight=Fraction(3, 8)),
        Segment(length=30, base="k008_maxse.npz", top_alpha=Fraction(3, 4), theta=Fraction(1, 8), weight=Fraction(13, 16)),
        Segment(length=25, base="k004_meanse.npz"),
    ),
    growth=2,
)


def _small(schedule: Schedule = SMALL) -> AnytimeMechanism:
    return AnytimeMechanism(schedule=schedule, name="anytime (test schedule)")


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
    counter = ContinualCounter(epsilon=0.7, mechanism=_small(), generator=rng)
    released = np.concatenate([counter.counts(x[:3]), counter.counts(x[3:40]), counter.counts(x[40:])])
    expected, carried, start, index = [], 0, 0, 0
    while start < len(x):
        segment = SMALL.segment(index)
        mechanism = anytime._segment_mechanism(segment)
        own = ContinualCounter(epsilon=0.7, mechanism=mechanism, generator=rng.child(f"anytime segment {index}"))
        stop = min(start + segment.length, len(x))
        counts = own.counts(x[start:stop])
        expected.extend(carried + counts)
        if stop - start == segment.length:
            carried += int(counts[-1])
        start, index = stop, index + 1
    assert released.tolist() == expected


def test_two_release_segments_are_public_and_checked():
    assert Schedule.from_record(TWO.to_record()) == TWO
    assert "theta" not in SMALL.to_record()["segments"][0]  # one-release records are unchanged
    assert TWO.segment(1).counter_share() == Fraction(7, 8) and TWO.segment(3).theta is None
    for bad in (
        {"theta": Fraction(1, 4)},
        {"theta": Fraction(1, 3), "weight": Fraction(1, 2)},
        {"theta": Fraction(1), "weight": Fraction(1, 2)},
        {"theta": Fraction(1, 4), "weight": Fraction(5, 4)},
    ):
        with pytest.raises(InvalidInputError):
            Segment(length=4, base="k004_maxse.npz", **bad)


def test_two_release_release_combines_each_segments_counter_and_total():
    """The slow, obvious construction with segment totals: segment s's own counter at
    (1 − θ_s)ε under "anytime segment s", its total S⁽ˢ⁾ + Z_s with Z_s ~ DLap(θ_s·ε) under
    "anytime total s", and the carried value ⌊w·F_s + (1 − w)·(S⁽ˢ⁾ + Z_s) + ½⌋ in rationals."""
    rng = NoiseGenerator.from_seed(8)
    epsilon = 0.7
    x = np.random.default_rng(2).integers(0, 2, 120)
    counter = ContinualCounter(epsilon=epsilon, mechanism=_small(TWO), generator=rng)
    released = np.concatenate([counter.counts(x[:5]), counter.counts(x[5:50]), counter.counts(x[50:])])
    expected, carried, start, index = [], 0, 0, 0
    while start < len(x):
        segment = TWO.segment(index)
        share = segment.counter_share()
        mechanism = anytime._segment_mechanism(segment)
        own = ContinualCounter(
            epsilon=float(Fraction(epsilon) * share), mechanism=mechanism, generator=rng.child(f"anytime segment {index}")
        )
        stop = min(start + segment.length, len(x))
        counts = own.counts(x[start:stop])
        expected.extend(carried + counts)
        if stop - start == segment.length:
            if segment.theta is None:
                carried += int(counts[-1])
            else:
                rate = Fraction(epsilon) * segment.theta
                Z = segmented.total_noise(rng.child(f"anytime total {index}"), rate)
                total = int(x[start:stop].sum()) + Z
                carried += round_half_up(segment.weight * int(counts[-1]) + (1 - segment.weight) * total)
        start, index = stop, index + 1
    assert released.tolist() == expected


def test_two_release_error_bars_add_the_scaled_parts():
    """std² of every step: the own counter's variance at (1 − θ_s)ε plus, per completed segment,
    w²·(its final row's variance) + (1 − w)²·σ²(DLap(θ_s·ε)); the profile model ``variances``
    uses 2/θ² for the latter (Laplace), within 1 % here."""
    from pure_dp_mf.release.error_bars import dlap_variance

    epsilon = 0.5
    counter = ContinualCounter(epsilon=epsilon, mechanism=_small(TWO), generator=NoiseGenerator.from_seed(2))
    bars = counter.bars(0, 200, beta=0.05)
    expected, carried, start, index = [], 0.0, 0, 0
    while start < 200:
        segment = TWO.segment(index)
        own = (
            ContinualCounter(
                epsilon=float(Fraction(epsilon) * segment.counter_share()),
                mechanism=anytime._segment_mechanism(segment),
                generator=NoiseGenerator.from_seed(3),
            )
            .bars(0, segment.length, beta=0.05)
            .std
            ** 2
        )
        count = min(segment.length, 200 - start)
        expected.extend(carried + own[:count])
        if segment.theta is None:
            carried += float(own[-1])
        else:
            w = float(segment.weight)
            carried += w * w * float(own[-1]) + (1 - w) ** 2 * dlap_variance(Fraction(epsilon) * segment.theta)
        start, index = start + count, index + 1
    assert np.allclose(bars.std**2, expected, rtol=1e-12)
    model = anytime.variances(schedule=TWO, n=200, epsilon=epsilon)
    assert np.allclose(bars.std**2, model, rtol=1e-2) and not np.allclose(bars.std**2, model, rtol=1e-9)
    max_se, mean_se = anytime.errors(schedule=TWO, n=150, epsilon=epsilon)
    assert max_se == pytest.approx(model[:150].max(), rel=1e-9) and mean_se == pytest.approx(model[:150].mean(), rel=1e-9)


def test_error_bars_equal_the_profile_variances_and_errors_their_max_and_mean():
    counter = ContinualCounter(epsilon=0.5, mechanism=_small(), generator=NoiseGenerator.from_seed(2))
    bars = counter.bars(0, 300, beta=0.05)
    variances = anytime.variances(schedule=SMALL, n=300, epsilon=0.5)
    assert np.allclose(bars.std**2, variances, rtol=1e-9)
    assert np.all(np.diff(bars.std[[6, 7]]) > 0)  # a new segment adds its noise on top of the carried
    for n in (1, 6, 7, 8, 36, 37, 38, 120, 300):
        max_se, mean_se = anytime.errors(schedule=SMALL, n=n, epsilon=0.5)
        assert max_se == pytest.approx(variances[:n].max(), rel=1e-9)
        assert mean_se == pytest.approx(variances[:n].mean(), rel=1e-9)


@pytest.mark.parametrize("schedule", [SMALL, TWO], ids=["one release", "two releases"])
def test_intervals_cover_at_the_promised_rate(schedule):
    """200 seeded runs of 120 steps (three segments and a continued one), β = 0.2: every
    per-step miss rate within sampling error of β (binomial, 4.5 standard deviations). The runs
    draw their noise in pages of 256 (``page_size``: another layout of the same law, so that a
    run does not draw 16 384 values per level for 120 steps)."""
    beta, runs, n = 0.2, 200, 120
    misses = np.zeros(n)
    mechanism = _small(schedule)
    bars = mechanism.release(generators=[NoiseGenerator.from_seed(1)], epsilon=1.0).bars(0, n, beta=beta)
    for run in range(runs):
        release = mechanism.release(generators=[NoiseGenerator.from_seed(1000 + run)], epsilon=1.0, page_size=256)
        noise = np.asarray(release.noise(0, n)).reshape(-1)
        misses += np.abs(noise) > np.floor(bars.half_width)
    rate = misses / runs
    assert rate.max() <= beta + 4.5 * np.sqrt(beta * (1 - beta) / runs)
    assert rate.mean() <= beta  # the interval is guaranteed, not approximate: on average it over-covers


def test_a_resumed_anytime_counter_releases_what_an_uninterrupted_one_would(tmp_path):
    x = np.random.default_rng(4).integers(0, 2, 90)
    whole = ContinualCounter(epsilon=1.0, mechanism=_small(), generator=NoiseGenerator.from_seed(9)).counts(x)
    first = ContinualCounter(epsilon=1.0, mechanism=_small(), generator=NoiseGenerator.from_seed(9))
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
    plain = ContinualCounter(epsilon=1.0, base=base, horizon=20, generator=NoiseGenerator.from_seed(3))
    reference = plain.counts(x[:20])
    counter = ContinualCounter(epsilon=1.0, base=base, horizon=20, generator=NoiseGenerator.from_seed(3))
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
    again = ContinualCounter(epsilon=1.0, base=base, horizon=20, generator=NoiseGenerator.from_seed(3))
    again.extend_horizon()
    assert again.counts(x).tolist() == [*reference.tolist()[:12], *go_on.tolist(), *more.tolist()]
    schedule = resumed.mechanism.schedule
    assert schedule.segments[0].length == 20 and schedule.first(2) >= 40  # the bridge ends at a scheme boundary ≥ 2n
    bars = resumed.bars(0, 80, beta=0.05)
    assert np.allclose(bars.std[:20], plain.bars(0, 20, beta=0.05).std)


def test_counter_without_a_horizon_and_the_command(tmp_path):
    with Counter(epsilon=1.0, generator=NoiseGenerator.from_seed(1), state=tmp_path / "s.db") as counter:
        assert counter.counter.horizon is None and counter.mechanism.startswith("anytime")
        releases = counter.release([1, 0, 1])
        assert releases.std is not None and len(releases.lower) == 3
    with pytest.raises(InvalidInputError, match="anytime"):
        Counter(epsilon=1.0, mechanism="binary", generator=NoiseGenerator.from_seed(1))
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
    segments = (*(Segment(length=1, mechanism=record) for _ in range(3)), Segment(length=2, base="k004_maxse.npz"))
    schedule = Schedule(metric="maxse", segments=segments, growth=2)  # steps 1 … 3: the three one-step segments
    epsilon = Fraction(1)
    rng = NoiseGenerator.from_seed(11)
    counter = ContinualCounter(epsilon=float(epsilon), mechanism=AnytimeMechanism(schedule=schedule), generator=rng)
    noise = counter.counts([0, 0, 0]).tolist()
    g = counter.mechanism.segment_mechanism(0).atoms.grid_bits
    own = []
    for index in range(3):
        generator = segmented.segment_generator(rng, index, schedule)
        single = ContinualCounter(epsilon=float(epsilon), mechanism=mechanisms.lifted(base=path, horizon=1), generator=generator)
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

    checked, largest = 0, 0.0
    bound = flint.arb(epsilon.numerator) / epsilon.denominator + flint.arb(2) ** -150
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
                        loss = (top / low).log()
                        assert loss.upper() <= bound  # ≤ ε up to the balls' 200-bit radius
                        largest = max(largest, float(loss.mid()))
                    checked += 1
    assert checked == 3 * 9**3
    assert largest > float(epsilon) - 1e-9  # and ε is attained: the noise is not larger than it must be


def test_tiny_two_release_segment_is_exactly_epsilon_dp(tmp_path):
    """A one-step two-release segment of the k = 1 base (θ = 1/4, w = 3/8, ε = 1), then a
    one-step segment: the code's noise is ν₀ = ⌊(4/3)·2^-g·Y + ½⌋, Y ~ DLap((1 − θ)ε·2^-g/(3/4))
    ("anytime segment 0"), Z ~ DLap(θε) ("anytime total 0"), carried ⌊w·ν₀ + (1 − w)·Z + ½⌋
    (checked on its own integers). Everything released is a function of (x₀ + ν₀, x₀ + Z) and
    segment 1's release; from the exact laws (ball arithmetic, closed forms) the pair's privacy
    loss for x₀ changed by 1 is ≤ ε on a grid holding almost all the mass, and attains ε."""
    path = tmp_path / "k001.npz"
    Factorization(decoder=np.array([[4 / 3]]), encoder=np.array([[0.75]]), metadata={"metric": "maxse"}).save(
        path, store_decoder=False
    )
    record = mechanisms.lifted(base=path, horizon=1).record
    theta, weight, epsilon = Fraction(1, 4), Fraction(3, 8), Fraction(1)
    segments = (
        Segment(length=1, mechanism=record, theta=theta, weight=weight),
        Segment(length=1, mechanism=record),
        Segment(length=2, base="k004_maxse.npz"),
    )
    schedule = Schedule(metric="maxse", segments=segments, growth=2)
    rng = NoiseGenerator.from_seed(12)
    counter = ContinualCounter(epsilon=float(epsilon), mechanism=AnytimeMechanism(schedule=schedule), generator=rng)
    noise = counter.counts([0, 0]).tolist()
    g = counter.mechanism.segment_mechanism(0).atoms.grid_bits

    def own(index: int, share: Fraction) -> int:
        generator = segmented.segment_generator(rng, index, schedule)
        single = ContinualCounter(
            epsilon=float(epsilon * share), mechanism=mechanisms.lifted(base=path, horizon=1), generator=generator
        )
        return round_half_up(Fraction(4, 3) * Fraction(single.lattice_sources[0].integers(0, 1, 1)[0], 2**g))

    nu0, nu1 = own(0, 1 - theta), own(1, Fraction(1))
    Z = segmented.total_noise(
        segmented.total_generator(rng, 0), segmented.total_rate(epsilon=epsilon, theta=theta, step_sensitivity=1)
    )
    assert segmented.total_rate(epsilon=epsilon, theta=theta, step_sensitivity=1) == theta * epsilon
    assert noise == [nu0, round_half_up(weight * nu0 + (1 - weight) * Z) + nu1]

    flint.ctx.prec = 200

    def dlap_mass(rate: Fraction, a: int, b: int) -> flint.arb:
        """P(a ≤ Y ≤ b) for Y ~ DLap(rate), exactly (geometric sums)."""
        e = (flint.arb(-rate.numerator) / rate.denominator).exp()
        power = lambda k: (flint.arb(-rate.numerator * k) / rate.denominator).exp()  # noqa: E731
        if a > b:
            return flint.arb(0)
        if a >= 0:
            return (power(a) - power(b + 1)) / (1 + e)
        if b <= 0:
            return dlap_mass(rate, -b, -a)
        return dlap_mass(rate, a, -1) + dlap_mass(rate, 0, b)

    counter_rate = (1 - theta) * epsilon / (2**g * Fraction(3, 4))
    width = 3 * 2 ** (g - 2)

    def law_nu(v: int) -> flint.arb:
        return dlap_mass(counter_rate, -((-(2 * v - 1) * width) // 2), -((-(2 * v + 1) * width) // 2) - 1)

    def law_z(z: int) -> flint.arb:
        return dlap_mass(theta * epsilon, z, z)

    bound = flint.arb(epsilon.numerator) / epsilon.denominator + flint.arb(2) ** -150
    largest, checked = 0.0, 0
    for r in range(-5, 6):
        for e in range(-8, 9):
            p = law_nu(r) * law_z(e)
            q = law_nu(r - 1) * law_z(e - 1)  # x₀ one larger: both views shift by 1
            for top, low in ((p, q), (q, p)):
                loss = (top / low).log()
                assert loss.upper() <= bound
                largest = max(largest, float(loss.mid()))
            checked += 1
    assert checked == 11 * 17
    assert largest > float(epsilon) - 1e-9  # (1 − θ)ε + θε = ε is attained


def _keyed_files(tmp_path, rows):
    (tmp_path / "keys.txt").write_text("de\nfr\n")
    (tmp_path / "events.csv").write_text("uid,country,day\n" + "".join(f"{u},{k},{d}\n" for u, k, d in rows))
    return ["count", str(tmp_path / "events.csv"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]


def test_keyed_counts_without_a_horizon_release_the_public_schedule(tmp_path):
    """Keyed counts without --horizon are anytime: --through (the public schedule) is required;
    the std of every step is the anytime counter's, for event level (Δ_step = m) and user level
    (each segment at K·m·C times its largest column norm, so the per-segment losses sum to ε:
    the std is exactly K·m·C times the event-level one); a state resumes to the same output."""
    rows = [("u1", "de", 1), ("u2", "fr", 2), ("u1", "de", 2), ("u3", "de", 40)]
    arguments = [*_keyed_files(tmp_path, rows), "--step-column", "day", "--epsilon", "1", "--seed", "5", "--format", "csv"]
    refused = run_cli(*arguments)
    assert refused.returncode == 2 and refused.stderr.startswith("error:") and "--through" in refused.stderr
    event = run_cli(*arguments, "--through", "50")
    assert event.returncode == 0, event.stderr
    table = [line.split(",") for line in event.stdout.splitlines()[1:]]
    assert [(key, int(step)) for key, step, *_ in table] == [(k, s) for s in range(1, 51) for k in ("de", "fr")]
    single = ContinualCounter(epsilon=1.0, mechanism=anytime.anytime(metric="maxse"), generator=NoiseGenerator.from_seed(1))
    expected = single.bars(0, 50, beta=0.05).std
    assert np.allclose([float(row[3]) for row in table[::2]], expected, rtol=1e-5)  # std printed to 6 digits
    user = run_cli(
        *arguments, "--through", "50", "--privacy-unit", "user", "--user-column", "uid", "--max-keys", "2", "--max-per-key", "3"
    )
    assert user.returncode == 0, user.stderr
    user_std = [float(line.split(",")[3]) for line in user.stdout.splitlines()[1::2]]
    assert np.allclose(user_std, 6 * expected, rtol=1e-5)
    state = [*arguments, "--state", str(tmp_path / "s.db"), "--output", str(tmp_path / "out.csv")]
    assert run_cli(*state, "--through", "20").returncode == 0
    resumed = run_cli(*state, "--through", "50")
    assert resumed.returncode == 0 and "resuming after step 20" in resumed.stderr, resumed.stderr
    assert (tmp_path / "out.csv").read_text() == event.stdout


def test_keyed_anytime_noise_is_each_segments_own_and_carried(tmp_path):
    """Every key's noise: within segment s, the key's own segment counter (its generator
    rng.child(key).child("anytime segment s")) plus the carried finals of the earlier segments;
    ``release_steps`` from given totals equals the step-by-step releases."""
    from pure_dp_mf.engines.keyed import KEYED_PAGE, KeyedCounters

    rng = NoiseGenerator.from_seed(7)
    mechanism = _small()
    counters = KeyedCounters(keys=["a", "b"], epsilon=1.0, horizon=None, mechanism=mechanism, generator=rng)
    steps = 70
    stepwise = np.array([counters.release(np.zeros(2, dtype=np.int64)) for _ in range(steps)])
    again = KeyedCounters(keys=["a", "b"], epsilon=1.0, horizon=None, mechanism=_small(), generator=NoiseGenerator.from_seed(7))
    counts, std, lower, upper = again.release_steps(
        np.zeros((2, steps), dtype=np.int64), start=0, totals=np.zeros(2, dtype=np.int64)
    )
    assert np.array_equal(counts.T, stepwise)
    for j, key in enumerate(["a", "b"]):
        carried, expected = 0, []
        for index in range(4):
            first, length = SMALL.first(index), SMALL.segment(index).length
            own = segmented.segment_generator(rng.child(key), index, SMALL)
            release = mechanism.segment_mechanism(index).release(generators=[own], epsilon=1.0, page_size=KEYED_PAGE)
            noise = np.asarray(release.noise(0, length)).reshape(-1)
            expected += [carried + v for v in noise[: max(0, min(length, steps - first))]]
            carried += int(noise[-1])
        assert stepwise[:, j].tolist() == expected[:steps]


def test_keyed_two_release_noise_is_each_keys_own_anytime_release():
    """Keyed counts over two-release segments: every key's noise is the one-key release of the
    same mechanism under rng.child(key) (same layout), step by step and vectorised alike; at user
    level (Δ_step = K·m·C) both releases of a segment are scaled by Δ_step."""
    from pure_dp_mf.engines.keyed import KEYED_PAGE, KeyedCounters

    steps = 70
    for unit, bounds, step_sensitivity in (("event", {}, 1), ("user", {"max_keys": 2, "max_per_key": 3}, 6)):
        rng = NoiseGenerator.from_seed(17)
        options = {"keys": ["a", "b"], "epsilon": 1.0, "horizon": None, "privacy_unit": unit, **bounds}
        counters = KeyedCounters(mechanism=_small(TWO), generator=rng, **options)
        stepwise = np.array([counters.release(np.zeros(2, dtype=np.int64)) for _ in range(steps)])
        again = KeyedCounters(mechanism=_small(TWO), generator=NoiseGenerator.from_seed(17), **options)
        counts, _, _, _ = again.release_steps(np.zeros((2, steps), dtype=np.int64), start=0, totals=np.zeros(2, dtype=np.int64))
        assert np.array_equal(counts.T, stepwise)
        for j, key in enumerate(["a", "b"]):
            alone = _small(TWO).release(
                generators=[rng.child(key)], epsilon=1.0, step_sensitivity=step_sensitivity, page_size=KEYED_PAGE
            )
            assert stepwise[:, j].tolist() == np.asarray(alone.noise(0, steps)).reshape(-1).tolist()
