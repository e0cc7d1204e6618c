"""A private suggestion of contribution bounds: DP quantiles of what each user contributes.

Counting at ``--privacy-unit user`` (or ``user-step``) needs bounds fixed before the data: K keys
per user (``--max-keys``), C steps per user and key (``--max-per-key``) and m, the value of a
user at one key and step (``--max-value``). Bounds read off the data would leak it; bounds picked
blind drop either too much (a small C biases the counts low, docs/streaming.md, "Choosing
contribution bounds") or add too much noise. ``suggest_bounds`` answers with a small declared ε
spent on the data itself, as PipelineDP's contribution-bounds computation does.

**What is measured, per user** (one number per user and quantity, so that one user moves each
count below by at most one):

* K_u = the number of listed keys the user has events for (in the schedule);
* C_u = the largest number of distinct steps the user has events at, over the user's keys;
* m_u = the largest sum of the user's values at one (key, step), capped at the public ``value_range``.

**The quantile** (``private_quantile``): for a public range 1 … U and a quantile q = a/b (exact
rational), the answer is the smallest c with #{u : x_u ≤ c} ≥ q·N (N users), found by a binary
search on [1, U] whose every comparison is noisy: at the midpoint c it compares

    v(c) = b·#{u : x_u ≤ c} − a·N  (an integer)

plus exact discrete Laplace noise Y ~ DLap(λ) (``release.discrete_laplace``, drawn from the
keyed SHAKE-256 stream of a ``NoiseGenerator``) with 0, and goes left when v(c) + Y ≥ 0. The
search makes at most D = ⌈log₂ U⌉ comparisons, each with λ = ε_q/(D·Δ_v), Δ_v = max(a, b − a).

**Guarantee** (docs/privacy.md, "Contribution bounds"): neighbouring inputs differ in all events
of one user. Adding or removing one user changes N by one and each #{x_u ≤ c} by at most one, in
the same direction, so v(c) moves by b − a or a: |Δv| ≤ Δ_v. One comparison is the discrete
Laplace mechanism on an integer query of sensitivity Δ_v at rate λ: P(Y = y) ∝ e^{−λ|y|}, so each
output probability changes by a factor ≤ e^{λ·Δ_v} = e^{ε_q/D}; the decision is post-processing.
At most D comparisons, each chosen after the earlier answers, compose (basic adaptive composition
of pure DP) to ε_q. The three quantiles each get ε_q = ε/3 and independent noise (child
generators), so the suggestion is ε-DP for one user's whole data (basic composition); a user-level
guarantee, so it holds for the units user-step and event too. Exact: integers and rationals
only, no float decides an answer.

Only the three answers are released: no count of users or events, nothing about the data's
range. A budget (``engines.budget``) is checked before the data is read and charged once, right
before the answers are returned: a run that fails returns and charges nothing.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from pure_dp_mf.engines.budget import PendingCharge
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import KeyedEvent, check_user
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.discrete_laplace import ShakeStream, discrete_laplace
from pure_dp_mf.validation import check_epsilon, check_size

DEFAULT_QUANTILE = Fraction(9, 10)
"""The default quantile: bounds that keep every contribution of about 90 % of users. A higher
quantile keeps more of the heavy users (who bring most events) at more noise, and needs more
users for the search to land near it; docs/streaming.md measures the trade-off."""
DEFAULT_VALUE_RANGE = 1000
"""The default U of the search for m: values 1 … 1000 (a user's larger sums count as 1000)."""
MAX_QUANTILE_DENOMINATOR = 10**6
QUANTITIES = ("max_keys", "max_per_key", "max_value")
FLAGS = {"max_keys": "--max-keys", "max_per_key": "--max-per-key", "max_value": "--max-value"}


def parse_quantile(value: object, *, flag: str = "--quantile") -> Fraction:
    """q as an exact rational in (0, 1): a decimal text or number ("0.9" is 9/10, not the float's
    binary value), with a denominator of at most 10⁶."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{flag} must be a number in (0, 1), got {value!r}")
    try:
        quantile = Fraction(str(value).strip()) if not isinstance(value, Fraction) else value
    except (ValueError, ZeroDivisionError):
        raise InvalidInputError(f"{flag} must be a number in (0, 1), got {value!r}") from None
    if not 0 < quantile < 1:
        raise InvalidInputError(f"{flag} must be in (0, 1), got {value!r}")
    if quantile.denominator > MAX_QUANTILE_DENOMINATOR:
        raise InvalidInputError(f"{flag} must have at most 6 decimals, got {value!r}")
    return quantile


def comparisons(upper: int) -> int:
    """D = ⌈log₂ U⌉: the most comparisons the search on 1 … U makes (0 for U = 1)."""
    return (upper - 1).bit_length()


def comparison_rate(*, epsilon: Fraction, quantile: Fraction, upper: int) -> Fraction:
    """λ = ε_q/(D·Δ_v), Δ_v = max(a, b − a) for q = a/b: the rate of every comparison's noise."""
    a, b = quantile.numerator, quantile.denominator
    return epsilon / (comparisons(upper) * max(a, b - a))


def private_quantile(
    *, values: Iterable[int], quantile: Fraction, upper: int, epsilon: Fraction, generator: NoiseGenerator
) -> int:
    """The ε-DP quantile of the module docstring: one value per user (each capped at ``upper``),
    the answer in 1 … ``upper``; the i-th comparison's noise is DLap(λ) from the SHAKE-256 stream
    of (``generator``'s key, i). For one user changing, the output distribution changes by a
    factor ≤ e^ε (docs/privacy.md, "Contribution bounds")."""
    ordered = sorted(min(int(value), upper) for value in values)
    if upper == 1:
        return 1  # one candidate: nothing is looked at
    rate = comparison_rate(epsilon=epsilon, quantile=quantile, upper=upper)
    a, b, users = quantile.numerator, quantile.denominator, len(ordered)
    low, high, index = 1, upper, 0
    while low < high:
        middle = (low + high) // 2
        v = b * bisect.bisect_right(ordered, middle) - a * users
        noise = discrete_laplace(s=rate.numerator, t=rate.denominator, source=ShakeStream(key=generator.key, index=index))
        index += 1
        if v + noise >= 0:
            high = middle
        else:
            low = middle + 1
    return low


class Contributions:
    """Per user, per listed key: [distinct steps, last step, the sum at it, the largest sum at an
    earlier step]. Events come in non-decreasing step order (as ``run_keyed`` takes them)."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, list[int]]] = {}
        self._last_step = 0

    def add(self, event: KeyedEvent, *, where: str = "an event") -> None:
        check_user(event.user, where=where)
        if event.step < self._last_step:
            raise InvalidInputError(f"{where}: step {event.step} goes backwards (after step {self._last_step})")
        if event.value < 0:
            raise InvalidInputError(f"{where}: a value below 0")
        self._last_step = event.step
        keys = self._users.setdefault(str(event.user), {})
        entry = keys.get(event.key)
        if entry is None:
            keys[event.key] = [1, event.step, event.value, 0]
        elif entry[1] == event.step:
            entry[2] += event.value
        else:
            entry[0], entry[1], entry[3] = entry[0] + 1, event.step, max(entry[3], entry[2])
            entry[2] = event.value

    def per_user(self) -> dict[str, list[int]]:
        """The three per-user numbers (module docstring), one list each, in the same user order."""
        values: dict[str, list[int]] = {name: [] for name in QUANTITIES}
        for keys in self._users.values():
            values["max_keys"].append(len(keys))
            values["max_per_key"].append(max(entry[0] for entry in keys.values()))
            values["max_value"].append(max(max(entry[2], entry[3]) for entry in keys.values()))
        return values


@dataclass(frozen=True)
class BoundsSuggestion:
    """The suggested K (``max_keys``), C (``max_per_key``) and m (``max_value``), with what made
    them: ε in all (``epsilon``, split in three), the quantile, each search's range 1 … U
    (``ranges``) and whether the noise was seeded (not private)."""

    max_keys: int
    max_per_key: int
    max_value: int
    epsilon: float
    quantile: float
    ranges: dict[str, int]
    seeded: bool

    def flags(self) -> str:
        """The suggestion as ``count`` flags."""
        return " ".join(f"{FLAGS[name]} {getattr(self, name)}" for name in QUANTITIES)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def suggest_bounds(
    *,
    events: Iterable[KeyedEvent],
    epsilon: float,
    key_range: int,
    step_range: int,
    value_range: int = DEFAULT_VALUE_RANGE,
    quantile: object = DEFAULT_QUANTILE,
    generator: NoiseGenerator | None = None,
    budget: str | None = None,
) -> BoundsSuggestion:
    """ε-DP suggestions of K, C and m for one user's data (module docstring): the ``quantile`` of
    K_u on 1 … ``key_range`` (the number of listed keys), of C_u on 1 … ``step_range`` (the steps
    of the schedule) and of m_u on 1 … ``value_range``, each at ε/3.

    ``events`` are those the counts would read (listed keys, steps in the schedule, valid values),
    each with its user, in non-decreasing step order; an event without its user is refused
    (``keyed.check_user``). ``generator`` defaults to a secure one (``NoiseGenerator.from_seed``
    is not private). Bad arguments raise ``InvalidInputError`` naming the command's flag
    (``--epsilon``, ``--quantile``, ``--value-range``). ``budget``: checked before ``events`` are read, charged ε once, right before
    the suggestion is returned (``budget.PendingCharge``); nothing is charged when this raises."""
    epsilon = check_epsilon(epsilon, name="--epsilon")
    quantile = parse_quantile(quantile)
    ranges = {
        "max_keys": check_size(key_range, name="key_range"),
        "max_per_key": check_size(step_range, name="step_range"),
        "max_value": check_size(value_range, name="--value-range"),
    }
    generator = generator if generator is not None else NoiseGenerator.secure()
    if not isinstance(generator, NoiseGenerator):
        raise InvalidInputError(f"generator must be a NoiseGenerator, got {type(generator).__name__}")
    pending = None
    if budget is not None:  # refused now, before the data is read, when it cannot pay
        what = (
            f"contribution bounds: quantile {float(quantile):g} of keys per user, steps per user and key, value per user and step"
        )
        pending = PendingCharge(budget=budget, epsilon=epsilon, lineage=f"bounds-{uuid.uuid4().hex}", what=what)
        pending.check()
    contributions = Contributions()
    for number, event in enumerate(events, start=1):
        contributions.add(event, where=f"event {number}")
    per_user = contributions.per_user()
    share = Fraction(epsilon) / len(QUANTITIES)  # basic composition: the three answers together are ε-DP
    answers = {
        name: private_quantile(
            values=per_user[name],
            quantile=quantile,
            upper=ranges[name],
            epsilon=share,
            generator=generator.child(f"bounds/{name}"),
        )
        for name in QUANTITIES
    }
    if pending is not None:
        pending.now()  # the answers leave only once they are paid for
    return BoundsSuggestion(**answers, epsilon=epsilon, quantile=float(quantile), ranges=ranges, seeded=generator.seeded)
