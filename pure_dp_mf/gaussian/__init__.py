"""Gaussian multi-epoch matrix factorization (Choquette-Choo et al.): (k,b)-participation, sensitivity,
the dual optimizer with a duality-gap certificate, and (ε, δ) accounting.

Notation (docs/architecture.md): workload A, decoder B, encoder C, ``max_participations`` k, ``min_sep`` b.
"""

from pure_dp_mf.gaussian.participation import Participation, participation
from pure_dp_mf.gaussian.sensitivity import (
    gram,
    gram_sensitivity_squared,
    optimal_decoder,
    per_query_errors,
    sensitivity_squared,
    single_participation_sensitivity_squared,
    total_loss,
)

__all__ = [
    "Participation",
    "gram",
    "gram_sensitivity_squared",
    "optimal_decoder",
    "participation",
    "per_query_errors",
    "sensitivity_squared",
    "single_participation_sensitivity_squared",
    "total_loss",
]
