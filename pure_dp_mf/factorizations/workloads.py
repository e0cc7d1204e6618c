"""Workload matrices (Arkhipov & Kalinin, section 1; docs/architecture.md "Notation").

* ``prefix_sum(n)``: T_n, the n×n lower-triangular all-ones matrix, (T_n x)_t = x_1 + … + x_t.
* ``strictly_upper(n)``: U_n, the n×n strictly upper-triangular all-ones matrix.
* ``reversal(n)``: E, the n×n anti-identity (E x reverses x).
* ``momentum(n)``, ``momentum_cooldown(n)``, ``sgd_workload(n, ...)``: Gaussian-side optimizer
  workloads of Choquette-Choo et al. section 5 (float64 only; see below).

The first three come in an exact form (``exact=True``: int64 entries, usable with exact arithmetic) and a
float64 form.
"""

from __future__ import annotations

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_size


def _as(matrix: np.ndarray, exact: bool) -> np.ndarray:
    return matrix.astype(np.int64 if exact else np.float64)


def prefix_sum(n: int, *, exact: bool = False) -> np.ndarray:
    """T_n: lower-triangular all-ones, T[i, j] = 1 for j ≤ i."""
    n = check_size(n, name="n")
    return _as(np.tri(n, dtype=np.int64), exact)


def strictly_upper(n: int, *, exact: bool = False) -> np.ndarray:
    """U_n: strictly upper-triangular all-ones, U[i, j] = 1 for j > i."""
    n = check_size(n, name="n")
    return _as(np.triu(np.ones((n, n), dtype=np.int64), 1), exact)


def reversal(n: int, *, exact: bool = False) -> np.ndarray:
    """E: the anti-identity, E[i, n-1-i] = 1."""
    n = check_size(n, name="n")
    return _as(np.eye(n, dtype=np.int64)[::-1], exact)


# ----------------------------------------------------------------------------------------------
# Gaussian side (Choquette-Choo et al., section 5): SGD with momentum and a learning-rate schedule.
#
# With heavy-ball momentum m_s = β·m_{s−1} + x_s and steps θ_t = θ_{t−1} − η_t·m_t, the model
# after t steps is θ_0 − Σ_{s≤t} η_s·m_s, a linear function of the gradient stream x:
#     A[t, r] = Σ_{s=r}^{t} η_s·β^{s−r}     (r ≤ t),    i.e.  A = T_n·diag(η)·M_β,
# with M_β the lower-triangular Toeplitz matrix of powers β^{t−r}. β = 0 and η = 1 give T_n.

DEFAULT_MOMENTUM = 0.95
DEFAULT_COOLDOWN_FRACTION = 0.25
DEFAULT_FINAL_LEARNING_RATE = 0.05


def cooldown_learning_rates(
    n: int, *, cooldown_fraction: float = DEFAULT_COOLDOWN_FRACTION, final_learning_rate: float = DEFAULT_FINAL_LEARNING_RATE
) -> np.ndarray:
    """η: 1.0 on the first steps, then linear from 1.0 to ``final_learning_rate`` over the last
    round(cooldown_fraction·n) steps (both ends included), as in Choquette-Choo et al. §5.3 / F.2."""
    n = check_size(n, name="n")
    if not 0 <= cooldown_fraction <= 1:
        raise InvalidInputError(f"cooldown_fraction must be in [0, 1], got {cooldown_fraction!r}")
    if not (np.isfinite(final_learning_rate) and final_learning_rate > 0):
        raise InvalidInputError(f"final_learning_rate must be a positive number, got {final_learning_rate!r}")
    rates = np.ones(n)
    steps = int(round(cooldown_fraction * n))
    if steps >= 2:
        rates[n - steps :] = np.linspace(1.0, final_learning_rate, steps)
    elif steps == 1:
        rates[-1] = final_learning_rate
    return rates


def sgd_workload(n: int, *, momentum: float = 0.0, learning_rates: np.ndarray | None = None) -> np.ndarray:
    """A = T_n·diag(η)·M_β (float64): the map from gradients to model updates of SGD with
    momentum β and per-step learning rates η (default all 1)."""
    n = check_size(n, name="n")
    if not (isinstance(momentum, (int, float)) and 0 <= momentum < 1):
        raise InvalidInputError(f"momentum must be a number in [0, 1), got {momentum!r}")
    rates = np.ones(n) if learning_rates is None else np.asarray(learning_rates, dtype=np.float64)
    if rates.shape != (n,) or not np.all(np.isfinite(rates)):
        raise InvalidInputError(f"learning_rates must be {n} finite numbers, got shape {rates.shape}")
    lag = np.subtract.outer(np.arange(n), np.arange(n))
    powers = np.where(lag >= 0, float(momentum) ** np.maximum(lag, 0), 0.0)
    return np.tri(n) @ (rates[:, None] * powers)


def momentum(n: int, *, momentum: float = DEFAULT_MOMENTUM) -> np.ndarray:
    """SGD with momentum β (default 0.95), constant learning rate: A[t, r] = (1 − β^{t−r+1})/(1 − β)."""
    return sgd_workload(n, momentum=momentum)


def momentum_cooldown(
    n: int,
    *,
    momentum: float = DEFAULT_MOMENTUM,
    cooldown_fraction: float = DEFAULT_COOLDOWN_FRACTION,
    final_learning_rate: float = DEFAULT_FINAL_LEARNING_RATE,
) -> np.ndarray:
    """SGD with momentum β (0.95) and linear learning-rate cooldown 1.0 → 0.05 over the last quarter."""
    rates = cooldown_learning_rates(n, cooldown_fraction=cooldown_fraction, final_learning_rate=final_learning_rate)
    return sgd_workload(n, momentum=momentum, learning_rates=rates)


def toeplitz_square_root(n: int) -> np.ndarray:
    """S with S·S = T_n: lower-triangular Toeplitz, S[i, i−j] = binom(2j, j)/4^j (float64).

    The coefficients are those of (1 − x)^(−1/2), whose square is (1 − x)^(−1), the generating
    function of T_n's columns; a classical starting point (T_n = S·S, L = R = S).
    """
    n = check_size(n, name="n")
    coefficients = np.ones(n)
    for j in range(1, n):
        coefficients[j] = coefficients[j - 1] * (2 * j - 1) / (2 * j)
    index = np.subtract.outer(np.arange(n), np.arange(n))
    return np.where(index >= 0, coefficients[np.clip(index, 0, None)], 0.0)


_BUILDERS = {
    "prefix": lambda n, beta: prefix_sum(n),
    "momentum": lambda n, beta: momentum(n, momentum=beta),
    "momentum-cooldown": lambda n, beta: momentum_cooldown(n, momentum=beta),
}
WORKLOADS = tuple(_BUILDERS)
"""The named workloads of ``workload`` (and of ``pure-dp-mf multi-epoch optimize --workload``)."""


def workload(name: str, *, n: int, momentum: float = DEFAULT_MOMENTUM) -> np.ndarray:
    """The workload matrix called ``name`` (one of ``WORKLOADS``) at size n.

    Raises:
        InvalidInputError: for an unknown name (the message lists the known ones).
    """
    if name not in _BUILDERS:
        raise InvalidInputError(f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}")
    return _BUILDERS[name](n, momentum)


def workload_name(name: str, *, momentum: float = DEFAULT_MOMENTUM) -> str:
    """The label recorded for a workload: the name, with β for the momentum workloads."""
    return name if name == "prefix" else f"{name}(beta={momentum})"
