"""The counter as an OpenDP measurement (``interop.opendp``): its privacy map, its release (the
counter's own, to the integer), and OpenDP's composition adding the maps."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import pytest

dp = pytest.importorskip("opendp.prelude")

from pure_dp_mf import Counter  # noqa: E402
from pure_dp_mf.engines.generator import NoiseGenerator  # noqa: E402
from pure_dp_mf.errors import InvalidInputError  # noqa: E402
from pure_dp_mf.interop.opendp import epsilon_for_distance, make_private_running_counts  # noqa: E402


def test_the_map_is_epsilon_per_m_of_l1_distance_rounded_up():
    one = make_private_running_counts(epsilon=0.7, max_value=1)
    assert one.map(0) == 0 and one.map(1) == 0.7
    assert Fraction(one.map(3)) >= 3 * Fraction(0.7) > Fraction(math.nextafter(one.map(3), -math.inf))
    five = make_private_running_counts(epsilon=1.0, max_value=5)
    assert five.map(5) == 1.0 and five.map(1) >= 0.2 and five.map(10) == 2.0
    for epsilon, m, d in ((0.1, 3, 1), (0.3, 7, 4), (1e-3, 9, 2), (2.0, 3, 1)):
        value = epsilon_for_distance(epsilon=epsilon, max_value=m, distance=d)
        exact = Fraction(epsilon) * d / m
        assert Fraction(value) >= exact and Fraction(math.nextafter(value, -math.inf)) < exact
    assert (one.input_domain, one.input_metric, one.output_measure) == (
        dp.vector_domain(dp.atom_domain(bounds=(0, 1), T=int)),
        dp.l1_distance(T=int),
        dp.max_divergence(),
    )
    with pytest.raises(InvalidInputError):
        epsilon_for_distance(epsilon=1.0, max_value=1, distance=-1)


def test_the_measurement_releases_what_the_counter_releases():
    values = [0, 2, 1, 2, 0, 1, 2, 2, 0, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        measurement = make_private_running_counts(epsilon=0.5, max_value=2, seed=11)
        released = measurement(values)
        counter = Counter(epsilon=0.5, horizon=len(values), max_value=2, generator=NoiseGenerator.from_seed(11))
        expected = [release.count for release in counter.update_many(values)]
        longer = make_private_running_counts(epsilon=0.5, horizon=16, max_value=2, seed=11, mechanism="binary")
        prefix = longer(values[:4])
        reference = Counter(epsilon=0.5, horizon=16, max_value=2, mechanism="binary", generator=NoiseGenerator.from_seed(11))
        assert prefix == [release.count for release in reference.update_many(values[:4])]
        with pytest.raises(Exception, match="horizon"):
            longer(values * 2)
    assert released == expected and all(type(count) is int for count in released)
    assert measurement([]) == []
    secure = make_private_running_counts(epsilon=0.5, max_value=2)
    assert len(secure(values)) == len(values)


def test_bad_arguments_are_refused_when_the_measurement_is_made():
    for options in ({"epsilon": 0}, {"epsilon": 1, "max_value": 0}, {"epsilon": 1, "max_value": 2**31}):
        with pytest.raises(InvalidInputError):
            make_private_running_counts(**options)
    with pytest.raises(InvalidInputError, match="metric"):
        make_private_running_counts(epsilon=1, metric="nope")
    with pytest.raises(InvalidInputError, match="mechanism"):
        make_private_running_counts(epsilon=1, mechanism="nope")


def test_composition_in_opendp_adds_the_maps():
    first = make_private_running_counts(epsilon=0.5, max_value=2)
    second = make_private_running_counts(epsilon=0.25, max_value=2, mechanism="binary")
    composed = dp.c.make_composition([first, second])
    for distance in (1, 2, 3):
        assert composed.map(distance) == first.map(distance) + second.map(distance)
    assert composed.map(2) == 0.75 and composed.check(2, 0.75) and not composed.check(2, 0.7)
    released = composed([1, 0, 1, 1])
    assert len(released) == 2 and all(len(counts) == 4 for counts in released)


def test_refusals_stay_opendp_exceptions_and_carry_our_message():
    """What the measurement refuses when invoked or mapped reaches the caller as OpenDP's own
    exception (what OpenDP code catches), its message ending with this package's one line."""
    measurement = make_private_running_counts(epsilon=1.0, horizon=4, max_value=2, seed=1)
    cases = [
        (lambda: measurement([0] * 5), "the vector has 5 steps, more than the horizon 4"),
        (lambda: measurement([0, 7]), "is not an integer from 0 to 2"),
        (lambda: measurement([-1]), "is not an integer from 0 to 2"),
        (lambda: measurement.map(-1), "the input distance must be an integer ≥ 0"),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for call, message in cases:
            with pytest.raises(dp.OpenDPException) as raised:
                call()
            last = raised.value.message.strip().splitlines()[-1]
            assert last.startswith("pure_dp_mf.errors.InvalidInputError: ") and message in last, last
