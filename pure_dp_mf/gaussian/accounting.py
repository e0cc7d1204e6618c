"""Privacy accounting for the Gaussian matrix mechanism (Choquette-Choo et al., Appendix D.2).

The whole run of a matrix mechanism A = B·C is one Gaussian mechanism: it releases
C·x + z with z ~ N(0, (sens(C)·σ)²), i.e. with noise multiplier σ relative to a unit-sensitivity
query (C normalised so that sens(C) = 1). Its (ε, δ) guarantee therefore comes from a single
Gaussian event, computed with the privacy-loss-distribution (PLD) accountant of Google's
``dp-accounting`` package (a real dependency, not a re-implementation), under the
add-or-remove-one neighbouring relation. The PLD accountant discretises pessimistically: its
ε is an upper bound on the exact ε of the Gaussian mechanism.
"""

from __future__ import annotations

import math

import dp_accounting
import scipy.optimize
from dp_accounting.pld import pld_privacy_accountant
from scipy.stats import norm

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_positive

MIN_NOISE_MULTIPLIER = 0.1
"""Smallest z accounted: the PLD grows as 1/z² (z = 0.1 is ε ≈ 97 at δ = 10⁻⁶, 5 s; 10⁻⁴ would need TiB)."""
MAX_NOISE_MULTIPLIER = 1e4


def _check_noise_multiplier(value: object) -> float:
    z = check_positive(value, name="noise_multiplier")
    if not MIN_NOISE_MULTIPLIER <= z <= MAX_NOISE_MULTIPLIER:
        raise InvalidInputError(
            f"noise_multiplier must be in [{MIN_NOISE_MULTIPLIER:g}, {MAX_NOISE_MULTIPLIER:g}], got {value!r} "
            "(below, the accountant's distribution would not fit in memory; the ε there is useless anyway)"
        )
    return z


def _check_delta(delta: object) -> float:
    value = check_positive(delta, name="delta")
    if value >= 1:
        raise InvalidInputError(f"delta must be in (0, 1), got {delta!r}")
    return value


def _accountant() -> pld_privacy_accountant.PLDAccountant:
    return pld_privacy_accountant.PLDAccountant()


def epsilon_for(*, noise_multiplier: float, delta: float) -> float:
    """ε of the Gaussian release G·C with noise multiplier z (sens(C) = 1) at δ.

    Guarantee: the run is (ε, δ)-DP for the returned ε (an upper bound from the PLD accountant).
    """
    z = _check_noise_multiplier(noise_multiplier)
    delta = _check_delta(delta)
    accountant = _accountant()
    accountant.compose(dp_accounting.GaussianDpEvent(z))
    return float(accountant.get_epsilon(delta))


def _exact_gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
    """z with δ(ε) = Φ(1/(2z) − εz) − e^ε·Φ(−1/(2z) − εz) (Balle & Wang 2018): only a bracket end."""

    def excess(z: float) -> float:
        return norm.cdf(0.5 / z - epsilon * z) - math.exp(epsilon) * norm.cdf(-0.5 / z - epsilon * z) - delta

    low, high = MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER
    if epsilon > 700 or not excess(low) > 0 > excess(high):  # e^700 is near the float64 limit
        raise InvalidInputError(
            f"epsilon = {epsilon:g} at delta = {delta:g} needs a noise multiplier outside "
            f"[{low:g}, {high:g}], the range this accountant supports"
        )
    return scipy.optimize.brentq(excess, low, high, xtol=1e-12)


def noise_multiplier_for(*, epsilon: float, delta: float) -> float:
    """The smallest noise multiplier (to relative precision 1e−5) giving (ε, δ)-DP per the PLD accountant.

    The search is ``dp_accounting.calibrate_dp_mechanism`` (brentq on the accountant's ε) started
    from a bracket [z₀, 1.02·z₀] around the exact Gaussian multiplier z₀ (the PLD ε is an upper
    bound up to its discretisation, so the answer is close to z₀), moved until it brackets; this saves most of the
    accountant's evaluations, each of which builds a privacy loss distribution.

    Guarantee: ``epsilon_for(noise_multiplier=result, delta=delta) ≤ epsilon``.
    """
    epsilon = check_positive(epsilon, name="epsilon")
    delta = _check_delta(delta)
    low = _exact_gaussian_noise_multiplier(epsilon, delta)
    # The accountant's ε is computed on a discretised PLD and can sit a hair below ε at z₀:
    # move the lower end down until it truly brackets (ε(low) > ε ≥ ε(high)).
    while epsilon_for(noise_multiplier=low, delta=delta) <= epsilon:
        low /= 1.02
    high = 1.02 * low
    while epsilon_for(noise_multiplier=high, delta=delta) > epsilon:
        low, high = high, 1.1 * high
    return float(
        dp_accounting.calibrate_dp_mechanism(
            _accountant,
            dp_accounting.GaussianDpEvent,
            epsilon,
            delta,
            bracket_interval=dp_accounting.ExplicitBracketInterval(low, high),
            tol=1e-5 * low,
        )
    )
