"""The counters of this package as OpenDP measurements (the ``opendp`` extra: ``pip install pure_dp_mf[opendp]``).

    >>> import opendp.prelude as dp                                            # doctest: +SKIP
    >>> from pure_dp_mf.interop.opendp import make_private_running_counts
    >>> counts = make_private_running_counts(epsilon=0.5, max_value=1)        # doctest: +SKIP
    >>> counts.map(1), counts([0, 1, 1, 0])                                   # doctest: +SKIP
    (0.5, [0, 2, 1, 3])
    >>> both = dp.c.make_composition([counts, counts])                        # doctest: +SKIP
    >>> both.map(1)                                                           # doctest: +SKIP
    1.0

``make_private_running_counts`` wraps ``pure_dp_mf.Counter`` with OpenDP's user-measurement
constructor, so OpenDP's combinators (composition, odometers, filters) account for it with the
rest of an analysis. That constructor is behind OpenDP's "contrib" and "honest-but-curious"
features: ``make_private_running_counts`` enables both (``dp.enable_features``, process-wide),
which states that the privacy map below is vouched for by this package, not by OpenDP's proofs
(docs/privacy.md, "OpenDP").
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import METRICS
from pure_dp_mf.validation import check_epsilon, check_size

I32_MAX = 2**31 - 1  # OpenDP's ``int`` atoms are i32: the largest step value the domain can bound


def epsilon_for_distance(*, epsilon: float, max_value: int, distance: int) -> float:
    """The privacy map: ε·d/m as the smallest float64 ≥ its exact value (ε the float's exact value).

    Proof that a counter of ε and bound m is (ε·d/m)-DP for streams at ℓ1 distance ≤ d
    (``make_private_running_counts``); refuses a negative or non-integer d."""
    if isinstance(distance, bool) or not isinstance(distance, int) or distance < 0:
        raise InvalidInputError(
            f"the input distance must be an integer ≥ 0 (an ℓ1 distance of integer streams), got {distance!r}"
        )
    exact = Fraction(epsilon) * distance / max_value
    nearest = float(exact)
    return nearest if Fraction(nearest) >= exact else math.nextafter(nearest, math.inf)


def make_private_running_counts(
    *,
    epsilon: float,
    horizon: int | None = None,
    max_value: int = 1,
    metric: str = "maxse",
    mechanism: str = "auto",
    seed: int | None = None,
) -> Any:
    """An OpenDP ``Measurement`` releasing the private running counts of a vector of integers.

    Input domain: vectors of integers in [0, ``max_value``] (``dp.vector_domain(dp.atom_domain(
    bounds=(0, m), T=int))``); input metric ``dp.l1_distance(T=int)``; output measure
    ``dp.max_divergence()`` (pure ε-DP). Invoked on x, it runs ``pure_dp_mf.Counter(epsilon=ε,
    horizon=horizon or len(x), max_value=m, metric=…, mechanism=…)`` over x and returns the
    released counts, a list of Python ints (exact). Each invocation draws fresh noise from a
    secure generator; ``seed`` gives a seeded one (the same noise on every invocation): NOT
    private, for tests. With ``horizon``, vectors longer than it are refused.

    Privacy map: d ↦ ε·d/m, rounded up to a float (``epsilon_for_distance``). Proof. OpenDP's ℓ1
    distance between vectors of different lengths is ∞, so for a finite d the two vectors have
    the same length, and the counter runs the same mechanism (horizon, R_p, noise rates λ_i =
    ε·c_i/(m·‖R_p‖₁→₁)) on both. Proof (a) of docs/privacy.md never uses that x − x′ is non-zero
    at one step only, just that it is an integer vector: every column of R_p lies on the lattice
    ∏ c_iℤ, so R_p·(x − x′) = (μ_i·c_i)_i with μ_i ∈ ℤ, and Σ_i c_i|μ_i| = ‖R_p·(x − x′)‖₁ ≤
    ‖R_p‖₁→₁·‖x − x′‖₁ ≤ ‖R_p‖₁→₁·d. The likelihood ratio of y = R_p·x + w is then at most
    ∏_i e^{λ_i|μ_i|} = e^{ε·Σ_i c_i|μ_i|/(m·‖R_p‖₁→₁)} ≤ e^{ε·d/m}. Proofs (b) and (c) (the release
    is a fixed function of y, computed exactly) do not involve x′ and carry over unchanged, and a
    vector shorter than ``horizon`` releases a prefix of the release of the vector padded with
    zeros (padding keeps the distance). So the release is (ε·d/m)-DP for every integer d ≥ 0;
    at d = m (one step changed by ≤ m) it is the ε of the counter. The bound is conservative for
    changes spread over several steps (the triangle inequality is not always attained).

    Raises:
        InvalidInputError: a bad ε, horizon, m (at most 2³¹ − 1: OpenDP's integer atoms are i32),
            metric or mechanism.
        ModuleNotFoundError: OpenDP is not installed (the ``opendp`` extra).

    The measurement's own refusals (a vector longer than ``horizon``, a value outside [0, m], a
    negative distance) reach the caller as OpenDP raises any error of a user function: an
    ``OpenDPException`` (variant "FFI"), its message ending with this package's error line.
    Values OpenDP cannot convert to its domain (not a list, not integers, beyond i32) are refused
    by OpenDP before the function runs, with its own ``TypeError`` or ``ValueError``. (A subclass
    of ``Measurement`` that re-raised these with only our line would not compose: OpenDP looks
    up a measurement's type by its exact class.)
    """
    import opendp.prelude as dp

    from pure_dp_mf.mechanisms.planner import CHOICES

    epsilon = check_epsilon(epsilon)
    max_value = check_size(max_value, name="max_value", maximum=I32_MAX)
    horizon = None if horizon is None else check_size(horizon, name="horizon")
    seed = None if seed is None else check_size(seed, name="seed", minimum=0)
    if metric not in METRICS:
        raise InvalidInputError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    if mechanism not in CHOICES:
        raise InvalidInputError(f"unknown mechanism {mechanism!r}; expected one of {', '.join(CHOICES)}")

    def release(values: Any) -> list[int]:
        return _running_counts(
            list(values), epsilon=epsilon, horizon=horizon, max_value=max_value, metric=metric, mechanism=mechanism, seed=seed
        )

    def privacy_map(distance: int) -> float:
        return epsilon_for_distance(epsilon=epsilon, max_value=max_value, distance=distance)

    dp.enable_features("contrib", "honest-but-curious")
    return dp.m.make_user_measurement(
        dp.vector_domain(dp.atom_domain(bounds=(0, max_value), T=int)),
        dp.l1_distance(T=int),
        dp.max_divergence(),
        function=release,
        privacy_map=privacy_map,
    )


def _running_counts(
    values: list, *, epsilon: float, horizon: int | None, max_value: int, metric: str, mechanism: str, seed: int | None
) -> list[int]:
    """The measurement's function: one fresh ``Counter`` over ``values``, its counts as Python ints."""
    from pure_dp_mf.engines.counter import Counter
    from pure_dp_mf.engines.generator import NoiseGenerator

    if not values:
        return []
    if horizon is not None and len(values) > horizon:
        raise InvalidInputError(f"the vector has {len(values)} steps, more than the horizon {horizon}")
    generator = NoiseGenerator.from_seed(seed) if seed is not None else None
    counter = Counter(
        epsilon=epsilon,
        horizon=horizon or len(values),
        max_value=max_value,
        metric=metric,
        mechanism=mechanism,
        generator=generator,
    )
    try:
        return [int(count) for count in counter.counter.counts(values)]
    finally:
        counter.close()
