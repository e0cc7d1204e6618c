"""Accuracy planning for one private running counter: the ε that meets a target, or the error an ε gives.

Two questions about the release at step t of a counter of horizon n (or of the anytime counter,
``anytime.py``, without a horizon), for a privacy unit with its contribution bounds:

* ``plan_epsilon``: the smallest ε whose release at step t has noise standard deviation ≤ s, or
  a guaranteed (1 − β) interval of half-width ≤ w;
* ``accuracy``: the standard deviation and the half-width that ε gives at step t.

Every number is read from the engine that releases, never derived beside it: a counter is built
for ε without a state and without releasing anything, and its error bars at step t are the ones
``Counter``, ``count`` and keyed counts attach to the release of step t (``ContinualCounter.bars``,
``KeyedCounters.bars``, both ``release.error_bars``). The mechanism is chosen as ``count`` chooses
it and built once; only the noise rates depend on ε.

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

* ``step``: one step's whole value, in [0, m]: Δ_step = m, Δ = m·‖R‖₁→₁ (``Counter``, ``count``);
* ``event``: one event of value ≤ m: it changes one key's input at one step by ≤ m, Δ = m·‖R‖₁→₁,
  as keyed counts (``count --key-column``) run it: their counter, and their default mechanism
  (the best lifted base for the horizon);
* ``user-step``: one user's events within one step, K keys each clipped to m: Δ_step = K·m at one
  step (the single counter with m replaced by K·m);
* ``user``: one user over the whole stream, K keys, C steps per key, m per step:
  Δ = K·m·(sum of the C largest column ℓ1 norms of R) (``keyed.user_sensitivity``), read from the
  keyed counter with ``privacy_unit="user"``; without a horizon each anytime segment is scaled to
  K·m·C times its own ‖R‖₁→₁, as the keyed engine does.

Arguments are checked first; an ``InvalidInputError`` names the command-line flag.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any

from pure_dp_mf.engines.keyed import check_privacy_unit
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import METRICS
from pure_dp_mf.mechanisms import trees
from pure_dp_mf.validation import LARGEST_STEP, check_beta, check_epsilon, check_positive, check_size

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


@dataclass(frozen=True)
class _Setting:
    """Everything a plan depends on but ε (checked)."""

    step: int
    horizon: int | None
    beta: float
    metric: str
    mechanism: str
    base: str | None
    privacy_unit: str
    max_value: int
    max_keys: int | None
    max_per_key: int | None

    @property
    def step_sensitivity(self) -> int:
        """Δ_step: what the unit changes one step by (for ``user`` without a horizon: K·m·C)."""
        if self.privacy_unit in ("step", "event"):
            return self.max_value
        assert self.max_keys is not None
        if self.privacy_unit == "user" and self.horizon is None:
            assert self.max_per_key is not None
            return self.max_keys * self.max_value * self.max_per_key
        return self.max_keys * self.max_value

    @property
    def lowest_epsilon(self) -> float:
        if self.horizon is None:
            return max(EPSILON_RANGE[0], self.step_sensitivity / ANYTIME_SCALE_LIMIT)
        return EPSILON_RANGE[0]


def plan(
    *,
    step: int,
    horizon: int | None = None,
    epsilon: float | None = None,
    target_std: float | None = None,
    target_half_width: float | None = None,
    **options: Any,
) -> Plan:
    """``accuracy`` for a given ``epsilon``, else ``plan_epsilon`` for the one target given
    (exactly one of the three); ``options`` are theirs."""
    given = [name for name, value in (("--epsilon", epsilon), ("--target-std", target_std)) if value is not None]
    given += ["--target-half-width"] if target_half_width is not None else []
    if len(given) != 1:
        raise InvalidInputError(
            f"give exactly one of --epsilon, --target-std, --target-half-width (got {', '.join(given) or 'none'})"
        )
    if epsilon is not None:
        return accuracy(epsilon=epsilon, step=step, horizon=horizon, **options)
    return plan_epsilon(step=step, horizon=horizon, target_std=target_std, target_half_width=target_half_width, **options)


def accuracy(
    *,
    epsilon: float,
    step: int,
    horizon: int | None = None,
    beta: float = 0.05,
    metric: str = "maxse",
    mechanism: str = "auto",
    base: str | os.PathLike | None = None,
    privacy_unit: str = "step",
    max_value: int = 1,
    max_keys: int | None = None,
    max_per_key: int | None = None,
) -> Plan:
    """The noise std and the guaranteed (1 − β) half-width of the release at 1-based ``step`` of
    the counter that ``count`` runs for ``epsilon``, ``horizon`` (None: the anytime counter),
    ``metric``, ``mechanism`` ("auto", "lifted", a tree; "anytime" without a horizon) or ``base``,
    and the privacy unit with its bounds (module docstring): the numbers that counter reports."""
    setting = _setting(
        step=step,
        horizon=horizon,
        beta=beta,
        metric=metric,
        mechanism=mechanism,
        base=base,
        privacy_unit=privacy_unit,
        max_value=max_value,
        max_keys=max_keys,
        max_per_key=max_per_key,
    )
    epsilon = check_epsilon(epsilon, name="--epsilon")
    if setting.horizon is None and epsilon < setting.lowest_epsilon:
        raise InvalidInputError(
            f"--epsilon must be at least {setting.lowest_epsilon:g} without --horizon (Δ_step/ε at most "
            f"{ANYTIME_SCALE_LIMIT:g}: below it the anytime counter's exact release runs in rational arithmetic)"
        )
    return _plan_at(setting, epsilon)


def plan_epsilon(
    *,
    step: int,
    horizon: int | None = None,
    target_std: float | None = None,
    target_half_width: float | None = None,
    beta: float = 0.05,
    metric: str = "maxse",
    mechanism: str = "auto",
    base: str | os.PathLike | None = None,
    privacy_unit: str = "step",
    max_value: int = 1,
    max_keys: int | None = None,
    max_per_key: int | None = None,
    tolerance: float = RELATIVE_TOLERANCE,
) -> Plan:
    """The smallest ε (to ``tolerance`` relative, module docstring) whose release at 1-based
    ``step`` has std ≤ ``target_std``, or guaranteed (1 − β) half-width ≤ ``target_half_width``
    (exactly one), for the counter ``accuracy`` describes; the plan's std and half-width are those
    of the returned ε, which meets the target. Raises ``InvalidInputError`` for a target no ε in
    ``EPSILON_RANGE`` meets (a half-width below the lattice floor A_t + ½), or one that every ε
    there meets."""
    if (target_std is None) == (target_half_width is None):
        raise InvalidInputError("give exactly one of --target-std, --target-half-width")
    setting = _setting(
        step=step,
        horizon=horizon,
        beta=beta,
        metric=metric,
        mechanism=mechanism,
        base=base,
        privacy_unit=privacy_unit,
        max_value=max_value,
        max_keys=max_keys,
        max_per_key=max_per_key,
    )
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
    cache: dict[float, Plan] = {}

    def plan_at(epsilon: float) -> Plan:
        if epsilon not in cache:
            cache[epsilon] = _plan_at(setting, epsilon)
        return cache[epsilon]

    epsilon = _smallest_epsilon(
        lambda e: getattr(plan_at(e), quantity),
        target,
        low=setting.lowest_epsilon,
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
    value_at: Callable[[float], float], target: float, *, low: float, high: float, tolerance: float, flag: str
) -> float:
    """The search of the module docstring over [low, high] for a decreasing ``value_at``."""
    reference = min(max(1.0, low), high)
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


def _setting(
    *,
    step: int,
    horizon: int | None,
    beta: float,
    metric: str,
    mechanism: str,
    base: str | os.PathLike | None,
    privacy_unit: str,
    max_value: int,
    max_keys: int | None,
    max_per_key: int | None,
) -> _Setting:
    """The arguments checked, one error naming the flag."""
    horizon = None if horizon is None else check_size(horizon, name="--horizon")
    step = check_size(step, name="--step", maximum=LARGEST_STEP)
    if horizon is not None and step > horizon:
        raise InvalidInputError(f"--step must be in 1 … {horizon} (--horizon), got {step}")
    check_beta(beta)
    if metric not in METRICS:
        raise InvalidInputError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    check_privacy_unit(privacy_unit)
    max_value = check_size(max_value, name="--max-value")
    _check_mechanism(mechanism=mechanism, base=base, horizon=horizon, privacy_unit=privacy_unit)
    if privacy_unit in ("user-step", "user"):
        max_keys = 1 if max_keys is None else check_size(max_keys, name="--max-keys")
    elif max_keys is not None:
        raise InvalidInputError("--max-keys is for --privacy-unit user-step or user")
    if privacy_unit == "user":
        if max_per_key is None:
            raise InvalidInputError("--privacy-unit user needs --max-per-key C (the steps kept per user and key)")
        max_per_key = check_size(max_per_key, name="--max-per-key")
    elif max_per_key is not None:
        raise InvalidInputError("--max-per-key is for --privacy-unit user")
    return _Setting(
        step=step,
        horizon=horizon,
        beta=float(beta),
        metric=metric,
        mechanism=mechanism,
        base=None if base is None else str(base),
        privacy_unit=privacy_unit,
        max_value=max_value,
        max_keys=max_keys,
        max_per_key=max_per_key,
    )


def _check_mechanism(*, mechanism: str, base: str | os.PathLike | None, horizon: int | None, privacy_unit: str) -> None:
    """The mechanism choices ``count`` accepts for this horizon and unit."""
    if horizon is None:
        if mechanism not in ("auto", "anytime"):
            raise InvalidInputError(f"--mechanism {mechanism} needs --horizon: without one the counter runs the anytime schedule")
        if base is not None:
            raise InvalidInputError("--base needs --horizon: without one the counter runs the anytime schedule")
        return
    choices = ("auto", "lifted", *trees.MECHANISMS)
    if mechanism not in choices:
        raise InvalidInputError(
            f"--mechanism must be one of {', '.join(choices)} (anytime: without --horizon), got {mechanism!r}"
        )
    if base is not None and mechanism not in ("auto", "lifted"):
        raise InvalidInputError(f"--base runs a lifted base, not --mechanism {mechanism}")
    if privacy_unit in ("event", "user") and mechanism not in ("auto", "lifted"):
        raise InvalidInputError(
            f"--privacy-unit {privacy_unit} is counted per key (count --key-column) with lifted bases, not --mechanism {mechanism}"
        )


@functools.lru_cache(maxsize=8)
def _mechanism(*, horizon: int | None, metric: str, mechanism: str, base: str | None, keyed: bool):
    """The mechanism ``count`` runs (built once per process and choice): without a horizon the
    anytime schedule; a ``base`` lifted to the horizon; else the planner's choice, where "auto"
    is for keyed counts the best lifted base (their default). The planner's ranking does not
    depend on ε (every row's errors scale as 1/ε²), so it is chosen at ε = 1."""
    from pure_dp_mf.mechanisms.resolve import resolve_mechanism

    if horizon is None:
        return resolve_mechanism(horizon=None, metric=metric).mechanism
    return resolve_mechanism(horizon=horizon, metric=metric, mechanism=mechanism, base=base, keyed=keyed).mechanism


def _plan_at(setting: _Setting, epsilon: float) -> Plan:
    """The plan of ``epsilon``: the error bars of ``setting.step`` read from a counter built for
    it (no state; nothing is released, its generator is a fresh secure one and is dropped)."""
    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.engines.generator import NoiseGenerator
    from pure_dp_mf.engines.keyed import KeyedCounters

    keyed = setting.privacy_unit in ("event", "user")
    mechanism = _mechanism(
        horizon=setting.horizon, metric=setting.metric, mechanism=setting.mechanism, base=setting.base, keyed=keyed
    )
    sensitivity: float | None
    if keyed:
        user = setting.privacy_unit == "user"
        counters = KeyedCounters(
            keys=["planned key"],
            epsilon=epsilon,
            horizon=setting.horizon,
            mechanism=mechanism,
            metric=setting.metric,
            max_value=setting.max_value,
            privacy_unit=setting.privacy_unit,
            max_keys=setting.max_keys if user else None,
            max_per_key=setting.max_per_key if user else None,
            generator=NoiseGenerator.secure(),
        )
        bars = counters.bars(setting.step - 1, setting.step, beta=setting.beta)
        sensitivity = None if setting.horizon is None else float(counters.sensitivity)
        name = counters.mechanism.name
    else:
        counter = ContinualCounter(
            epsilon=epsilon, mechanism=mechanism, max_value=setting.step_sensitivity, generator=NoiseGenerator.secure()
        )
        bars = counter.bars(setting.step - 1, setting.step, beta=setting.beta)
        sensitivity = None if counter.sensitivity is None else float(counter.step_sensitivity * counter.sensitivity)
        name = counter.mechanism.name
    return Plan(
        epsilon=float(epsilon),
        step=setting.step,
        std=float(bars.std[0]),
        half_width=float(bars.half_width[0]),
        beta=setting.beta,
        mechanism=name,
        privacy_unit=setting.privacy_unit,
        sensitivity=sensitivity,
        horizon=setting.horizon,
        metric=setting.metric,
        max_value=setting.max_value,
        max_keys=setting.max_keys,
        max_per_key=setting.max_per_key,
    )
