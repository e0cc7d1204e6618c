"""Accuracy planning for one private running counter: the ε that meets a target, or the error an ε gives.

Two questions about the release at step t of one count, given as the project's one count spec
(``engines.spec.CountSpec``: the horizon n or none, the anytime counter of ``anytime.py``; the
mechanism, metric, base or certificate; the privacy unit and its bounds; β):

* ``plan_epsilon``: the smallest ε whose release at step t has noise standard deviation ≤ s, or
  a guaranteed (1 − β) interval of half-width ≤ w (every option of the spec but its ε);
* ``accuracy``: the standard deviation and the half-width that the spec's ε gives at step t;
* ``plan``: the one of the two that ``pure-dp-mf plan`` asks.

Every number is read from the engine that releases, never derived beside it: the engine ``count``
runs for the spec is built for ε without its publication (no state, budget or ledger) and without
releasing anything, and its error bars at step t are the ones ``Counter``, ``count`` and keyed
counts attach to the release of step t (``ContinualCounter.bars``, ``KeyedCounters.bars``, both
``release.error_bars``). ``count``'s route for the spec is one value per line (``Counter``) or,
with ``spec.rows``, event rows (``KeyedCounters``, one stream or public keys); the mechanism is
chosen as that route chooses it (``spec.resolve``; event rows: the best lifted base) and built
once; only the noise rates depend on ε.

**The math** (``release.error_bars``). The noise of step t is N_t = ⌊W_t + ½⌋, W_t = Σ a_i·Y_i,
Y_i ~ DLap(λ_ℓ) on the lattice 2^-g ℤ with rates λ_ℓ = ε·2^-g·s_ℓ/Δ (``lattice.noise_rate``; Δ
the ℓ1 sensitivity of the privacy unit, s_ℓ the lift's level scales). Then

    std_t = √(Σ_i a_i²·σ²(λ_i)),   σ²(λ) = 2q/(1 − q)², q = e^{−λ},

which is (Δ/ε)·√2·‖(L_p)_t‖₂·(1 + O(λ²)): the Laplace mechanism's b·‖row‖₂ of Arkhipov &
Kalinin (arXiv 2607.08963, Algorithm 3; MaxSE = 2c₂²/ε² is its largest square over t). It is
not exactly ∝ 1/ε (exact discrete Laplace, rates the sampler rounds), so ε is found by a
search on the exact reported value, not by scaling. The half-width is

    h_t = √(2ν_t·s) + c_t·s + A_t + ½,   s = ln(2/β),

with ν_t ∝ 1/ε², c_t ∝ 1/ε and the lattice term A_t independent of ε: h_t decreases to A_t + ½
as ε grows, so a target below that floor cannot be met by any ε. The released interval is
[count − ⌊h_t⌋, count + ⌊h_t⌋] cut to [0, m·t] (the true count is an integer).

**The search.** std_t and h_t decrease with ε (σ²(λ) decreases with λ). From a first guess
ε₀ = ε₁·v(ε₁)/target (exact for a quantity ∝ 1/ε) a bracket lo < hi is grown geometrically with
v(lo) > target ≥ v(hi), then halved (geometric means) until hi/lo ≤ 1 + ``tolerance``/16. The
answer is the shortest decimal in [hi, lo·(1 + tolerance)], checked at that very ε: it meets the
target, and it is below (1 + tolerance)·ε_min, ε_min the least ε that meets it (v(lo) > target).

**Privacy units** (the sensitivity the noise is scaled to):

* ``step``: one step's whole value, in [0, m]: Δ_step = m, Δ = m·‖R‖₁→₁ (``Counter``, ``count``
  on one value per line);
* ``event``: one event of value ≤ m: it changes one key's input at one step by ≤ m, Δ = m·‖R‖₁→₁,
  as event rows (``count --step-column``, ``--key-column``) run it: the keyed counter, and its
  default mechanism (the best lifted base for the horizon);
* ``user-step``: one user's events within one step, K keys each clipped to m: Δ_step = K·m at one
  step, the keyed counter of event rows (K = 1 by default for one stream);
* ``user``: one user over the whole stream, K keys, C steps per key, m per step:
  Δ = K·m·(sum of the C largest column ℓ1 norms of R) (``keyed.user_sensitivity``), read from the
  keyed counter with ``privacy_unit="user"``; without a horizon each anytime segment is scaled to
  K·m·C times its own ‖R‖₁→₁, as the keyed engine does.

**Checks.** The spec checked its options when it was made; a plan adds, in one place
(``_check``), what ``count``'s route refuses (``CountSpec.check_route``), the options whose
error bars it does not describe (``--extend``, ``--dimension``, ``--monotone``, ``--band
simultaneous``), the step in 1 … n and the anytime ε floor; the mechanism is then refused or
resolved by the engine as in ``count``. So ``plan`` refuses what ``count`` refuses for the same
options, with the same ``InvalidInputError`` naming the command-line flag. What does not change
the error bars of a step (the publication, the calendar and schedule, the invalid policy, the
other keys) is not used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any

from pure_dp_mf.engines.keys import SINGLE_KEY
from pure_dp_mf.engines.spec import USER_UNITS, CountSpec, Publication, resolve
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import LARGEST_STEP, check_positive, check_size

EPSILON_RANGE = (1e-6, 1e6)
"""The ε the search considers (a known horizon)."""
ANYTIME_SCALE_LIMIT = 1e4
"""Without a horizon, ε ≥ Δ_step/ANYTIME_SCALE_LIMIT: an anytime counter draws the last noise of
every earlier segment to give its error bars, and far beyond this scale the exact release decides
its roundings in rational arithmetic (minutes a value for the large bases)."""
RELATIVE_TOLERANCE = 1e-4
LARGE_EPSILON = 10.0
"""A plan whose ε exceeds this carries a warning (``Plan.warning``): at ε > 10 one unit's data
may change the odds of an output by a factor above e^10 ≈ 22,000: a weak guarantee."""


@dataclass(frozen=True)
class Plan:
    """The error of the release at 1-based ``step`` for ``epsilon``: the noise standard deviation
    ``std`` and the guaranteed half-width ``half_width`` (the interval count ± ⌊half_width⌋ holds
    the bounded count, the input as counted, with probability ≥ 1 − ``beta``: it covers the noise
    only), with what they are for: the ``mechanism``
    that runs, the ``privacy_unit`` and its bounds, and the exact ℓ1 ``sensitivity`` the noise is
    scaled to (None without a horizon: one per anytime segment). ``target_std`` or
    ``target_half_width`` is the target ``epsilon`` was planned for (None: ε was given)."""

    epsilon: float
    step: int
    std: float
    half_width: float
    beta: float
    mechanism: str
    privacy_unit: str
    sensitivity: float | None
    horizon: int | None
    metric: str
    max_value: int
    max_keys: int | None
    max_per_key: int | None
    target_std: float | None = None
    target_half_width: float | None = None
    relative_tolerance: float | None = None

    @property
    def warning(self) -> str | None:
        """One line when ε exceeds ``LARGE_EPSILON`` (None otherwise): what such an ε means."""
        if self.epsilon <= LARGE_EPSILON:
            return None
        return (
            f"ε = {self.epsilon:g} is large (> {LARGE_EPSILON:g}): one {self.privacy_unit}'s data may change the odds "
            f"of any output by a factor up to e^{self.epsilon:g}, a weak guarantee"
        )

    def as_dict(self) -> dict[str, Any]:
        """The fields, and ``warning`` (the ``--json`` document)."""
        return {**asdict(self), "warning": self.warning}


def plan(*, spec: CountSpec, step: int, target_std: float | None = None, target_half_width: float | None = None) -> Plan:
    """The question ``pure-dp-mf plan`` asks: ``accuracy`` at ``spec.epsilon`` when no target is
    given, else ``plan_epsilon`` for the target given, to ``RELATIVE_TOLERANCE`` (there
    ``spec.epsilon`` is not used)."""
    if target_std is None and target_half_width is None:
        return accuracy(spec=spec, step=step)
    return plan_epsilon(spec=spec, step=step, target_std=target_std, target_half_width=target_half_width)


def accuracy(*, spec: CountSpec, step: int) -> Plan:
    """The noise std and the guaranteed (1 − β) half-width of the release at 1-based ``step`` of
    the count ``spec`` describes, at ``spec.epsilon`` (module docstring): the numbers its engine
    reports for that step. The spec's route is ``count``'s: one value per line (``Counter``)
    unless ``spec.rows`` (event rows, ``KeyedCounters``; every unit but "step" is counted so)."""
    _check(spec, step=step, epsilon=spec.epsilon)
    return _plan_at(spec, step=step)[0]


def plan_epsilon(
    *,
    spec: CountSpec,
    step: int,
    target_std: float | None = None,
    target_half_width: float | None = None,
    tolerance: float = RELATIVE_TOLERANCE,
) -> Plan:
    """The smallest ε (to ``tolerance`` relative, module docstring) whose release at 1-based
    ``step`` of the count ``spec`` describes has std ≤ ``target_std``, or guaranteed (1 − β)
    half-width ≤ ``target_half_width`` (exactly one); the plan's std and half-width are those of
    the returned ε, which meets the target. Every option of ``spec`` counts but its ε:
    ``spec.epsilon`` is not used (the search starts from ε₁ = 1, or the anytime floor where that
    is above 1), so any valid ε may stand in for it. Raises ``InvalidInputError`` for a target no
    ε in ``EPSILON_RANGE`` meets (a half-width below the lattice floor A_t + ½), or one that every
    ε there meets."""
    if (target_std is None) == (target_half_width is None):
        raise InvalidInputError("give exactly one of --target-std, --target-half-width")
    lowest = _check(spec, step=step, epsilon=None)
    tolerance = check_positive(tolerance, name="tolerance")
    if tolerance >= 1:
        raise InvalidInputError(f"tolerance must be below 1, got {tolerance}")
    if target_std is not None:
        flag, target, quantity = "--target-std", check_positive(target_std, name="--target-std"), "std"
    else:
        flag, target, quantity = (
            "--target-half-width",
            check_positive(target_half_width, name="--target-half-width"),
            "half_width",
        )
    reference = min(max(1.0, lowest), EPSILON_RANGE[1])  # ε₁, the search's first ε
    first, mechanism = _plan_at(spec.replace(epsilon=reference), step=step)  # resolved once, as ``count`` resolves it
    cache: dict[float, Plan] = {reference: first}

    def plan_at(epsilon: float) -> Plan:
        if epsilon not in cache:
            cache[epsilon] = _plan_at(spec.replace(epsilon=epsilon), step=step, mechanism=mechanism)[0]
        return cache[epsilon]

    epsilon = _smallest_epsilon(
        lambda e: getattr(plan_at(e), quantity),
        target,
        reference=reference,
        low=lowest,
        high=EPSILON_RANGE[1],
        tolerance=tolerance,
        flag=flag,
    )
    found = plan_at(epsilon)
    if getattr(found, quantity) > target:  # never: the search returns a checked ε
        raise ArithmeticError(f"the planned ε = {epsilon} does not meet {flag} {target}")
    if quantity == "std":
        return replace(found, target_std=target, relative_tolerance=tolerance)
    return replace(found, target_half_width=target, relative_tolerance=tolerance)


def _smallest_epsilon(
    value_at: Callable[[float], float], target: float, *, reference: float, low: float, high: float, tolerance: float, flag: str
) -> float:
    """The search of the module docstring over [low, high] for a decreasing ``value_at``, from
    ε₁ = ``reference``."""
    guess = min(max(reference * value_at(reference) / target, low), high)
    closeness = 1 + tolerance / 16  # the bracket's final ratio: room to round up within the tolerance
    factor = closeness
    if value_at(guess) <= target:
        hi, lo = guess, None
        while lo is None:
            candidate = max(low, hi / factor)
            if value_at(candidate) > target:
                lo = candidate
            elif candidate == low:
                raise InvalidInputError(f"{flag} {target:g} is met by every ε ≥ {low:g}, the smallest the planner considers")
            else:
                hi, factor = candidate, factor * factor
    else:
        lo, found = guess, None
        while found is None:
            candidate = min(high, lo * factor)
            if value_at(candidate) <= target:
                found = candidate
            elif candidate == high:
                raise InvalidInputError(
                    f"{flag} {target:g} cannot be met: even ε = {high:g} gives {value_at(high):.6g}"
                    + (" (the half-width never falls below its lattice part A_t + ½)" if "half" in flag else "")
                )
            else:
                lo, factor = candidate, factor * factor
        hi = found
    while hi / lo > closeness:
        middle = math.sqrt(lo * hi)
        if value_at(middle) <= target:
            hi = middle
        else:
            lo = middle
    for digits in range(1, 18):  # the shortest decimal in [hi, lo·(1 + tolerance)] that meets the target
        exponent = Decimal(hi).adjusted() - digits + 1
        rounded = float(Decimal(hi).quantize(Decimal(1).scaleb(exponent), rounding=ROUND_CEILING))
        if rounded <= lo * (1 + tolerance) and value_at(rounded) <= target:
            return rounded
    return hi


def _route(spec: CountSpec) -> str:
    """The route of the parity table (``spec.ROUTES``) that ``count`` runs ``spec`` on: one value
    per line, else event rows of one stream or of public keys."""
    if not spec.rows:
        return "cli-lines"
    return "cli-rows" if spec.keys is None else "cli-keyed"


def _check(spec: CountSpec, *, step: int, epsilon: float | None) -> float:
    """The checks of a plan that ``CountSpec`` does not make, in one place: what ``count``'s route
    refuses (``CountSpec.check_route``; the mechanism is then refused or resolved as ``count``
    resolves it), the options whose error bars a plan does not describe, ``step`` in 1 … n, and
    without a horizon the given ``epsilon`` (None: the search's) at least the lowest ε the
    planner considers (``ANYTIME_SCALE_LIMIT``), which is returned."""
    spec.check_route(_route(spec))
    for refused, why in (
        (spec.extend, "--extend: a plan is for steps 1 … n of the horizon, or for the anytime counter (no --horizon)"),
        (spec.dimension != 1, "--dimension: a plan is for one count per step"),
        (spec.monotone, "--monotone: a plan is for the counts as released, before the monotone fit"),
        (spec.band != "step", "--band simultaneous: a plan is for one step's interval at 1 − β (--beta)"),
    ):
        if refused:
            raise InvalidInputError(why)
    step = check_size(step, name="--step", maximum=LARGEST_STEP)
    if spec.horizon is not None and step > spec.horizon:
        raise InvalidInputError(f"--step must be in 1 … {spec.horizon} (--horizon), got {step}")
    if spec.horizon is not None:
        return EPSILON_RANGE[0]
    from pure_dp_mf.engines.keyed import step_sensitivity

    delta_step = step_sensitivity(
        privacy_unit=str(spec.privacy_unit),
        max_value=spec.max_value,
        max_keys=spec.max_keys or 1,
        max_per_key=spec.max_per_key or 1,
    )
    lowest = max(EPSILON_RANGE[0], delta_step / ANYTIME_SCALE_LIMIT)
    if epsilon is not None and epsilon < lowest:
        raise InvalidInputError(
            f"--epsilon must be at least {lowest:g} without --horizon (Δ_step/ε at most "
            f"{ANYTIME_SCALE_LIMIT:g}: below it the anytime counter's exact release runs in rational arithmetic)"
        )
    return lowest


def _plan_at(spec: CountSpec, *, step: int, mechanism: Any = None) -> tuple[Plan, Any]:
    """The plan of ``spec.epsilon`` and the mechanism it ran: the error bars of ``step`` read
    from the engine ``count`` runs for ``spec`` (``mechanism``: the one resolved for it; None: the
    engine resolves it as ``count`` does), built without the spec's publication (no state, no
    budget, no ledger; nothing is released; its generator is a fresh secure one, dropped) and for
    event rows with one key (every key's error bars are the same)."""
    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.engines.generator import NoiseGenerator
    from pure_dp_mf.engines.keyed import KeyedCounters

    quiet = spec.replace(publication=Publication())
    sensitivity: float | None
    if spec.rows:
        counters = KeyedCounters.from_spec(quiet.replace(keys=(spec.keys or (SINGLE_KEY,))[:1]), mechanism=mechanism)
        bars = counters.bars(step - 1, step, beta=spec.beta)
        sensitivity = None if spec.horizon is None else float(counters.sensitivity)
        engine: Any = counters
    else:
        chosen = resolve(quiet).mechanism if mechanism is None else mechanism
        engine = ContinualCounter(
            epsilon=spec.epsilon, mechanism=chosen, max_value=spec.max_value, generator=NoiseGenerator.secure()
        )
        bars = engine.bars(step - 1, step, beta=spec.beta)
        sensitivity = None if engine.sensitivity is None else float(engine.step_sensitivity * engine.sensitivity)
    plan = Plan(
        epsilon=float(spec.epsilon),
        step=step,
        std=float(bars.std[0]),
        half_width=float(bars.half_width[0]),
        beta=spec.beta,
        mechanism=engine.mechanism.name,
        privacy_unit=str(spec.privacy_unit),
        sensitivity=sensitivity,
        horizon=spec.horizon,
        metric=spec.metric,
        max_value=spec.max_value,
        max_keys=getattr(engine, "max_keys", None) if spec.privacy_unit in USER_UNITS else None,
        max_per_key=spec.max_per_key if spec.privacy_unit == "user" else None,
    )
    return plan, engine.mechanism
