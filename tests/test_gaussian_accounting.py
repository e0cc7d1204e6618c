"""(ε, δ) of the single Gaussian release G·C via dp-accounting's PLD accountant (Choquette-Choo et al., D.2)."""

import numpy as np
import pytest
import scipy.optimize
from scipy.stats import norm
from typer.testing import CliRunner

from pure_dp_mf.cli import all_commands
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.accounting import epsilon_for, noise_multiplier_for

app = all_commands()


def exact_gaussian_epsilon(z, delta):
    """ε of the Gaussian mechanism with sensitivity 1 and std z, from the exact tradeoff
    δ(ε) = Φ(1/(2z) − εz) − e^ε·Φ(−1/(2z) − εz) (Balle & Wang 2018, Theorem 8)."""

    def excess(eps):
        return norm.cdf(0.5 / z - eps * z) - np.exp(eps) * norm.cdf(-0.5 / z - eps * z) - delta

    return scipy.optimize.brentq(excess, 0.0, 100.0, xtol=1e-12)


@pytest.mark.parametrize("z,delta", [(1.0, 1e-5), (2.0, 1e-6), (10.0, 1e-3)])
def test_epsilon_is_a_tight_upper_bound_on_the_exact_gaussian_epsilon(z, delta):
    exact = exact_gaussian_epsilon(z, delta)
    accounted = epsilon_for(noise_multiplier=z, delta=delta)
    assert exact <= accounted <= exact * 1.01 + 1e-3


# (2, 1e-5): the accountant's ε at the exact Gaussian multiplier is a hair below 2, which once
# left the calibration without a bracket.
@pytest.mark.parametrize("epsilon, delta", [(4.0, 1e-6), (2.0, 1e-5)])
def test_noise_multiplier_inverts_epsilon(epsilon, delta):
    z = noise_multiplier_for(epsilon=epsilon, delta=delta)
    assert epsilon_for(noise_multiplier=z, delta=delta) <= epsilon
    assert epsilon_for(noise_multiplier=z * 0.999, delta=delta) > epsilon  # and it is (nearly) the smallest
    exact = scipy.optimize.brentq(lambda x: exact_gaussian_epsilon(x, delta) - epsilon, 0.1, 10.0, xtol=1e-12)
    # conservative, and only just; `exact` itself is known to brentq's xtol = 1e-12
    assert exact - 1e-12 <= z <= exact * 1.001


def test_bad_input():
    with pytest.raises(InvalidInputError, match="noise_multiplier must be a positive"):
        epsilon_for(noise_multiplier=0, delta=1e-5)
    with pytest.raises(InvalidInputError, match="delta must be in"):
        epsilon_for(noise_multiplier=1, delta=1.5)
    with pytest.raises(InvalidInputError, match="epsilon must be a positive"):
        noise_multiplier_for(epsilon=float("nan"), delta=1e-5)


def test_cli():
    result = CliRunner().invoke(app, ["multi-epoch", "epsilon", "--noise-multiplier", "1", "--delta", "1e-5", "--json"])
    assert result.exit_code == 0, result.output
    assert '"epsilon": 4.377' in result.output
