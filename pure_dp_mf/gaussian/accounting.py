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
    z = check_positive(noise_multiplier, name="noise_multiplier")
    delta = _check_delta(delta)
    accountant = _accountant()
    accountant.compose(dp_accounting.GaussianDpEvent(z))
    return float(accountant.get_epsilon(delta))


def _exact_gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
    """z with δ(ε) = Φ(1/(2z) − εz) − e^ε·Φ(−1/(2z) − εz) (Balle & Wang 2018): only a bracket end."""

    def excess(z: float) -> float:
        return norm.cdf(0.5 / z - epsilon * z) - math.exp(epsilon) * norm.cdf(-0.5 / z - epsilon * z) - delta

    return scipy.optimize.brentq(excess, 1e-3, 1e4, xtol=1e-12)


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
