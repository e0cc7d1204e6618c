"""One count, specified once: ``CountSpec``, checked when it is made and resolved once.

Every route that releases running counts builds a ``CountSpec`` and runs what it resolves to:
the command ``count`` (one value per line, event rows, keyed), ``Counter``, ``KeyedCounters``,
the DataFrame function, Spark batch and Spark streaming; ``plan`` (``engines.accuracy``) plans the
error of the count a spec describes. The spec holds, as public options fixed
before any data is read:

* the privacy budget ε and the **publication** (where the noise comes from: a fresh secure key,
  a key file, a state, or a seed, which is not private; the budget charged; the ledger);
* the **horizon** n (None: an anytime counter) and whether the counter **extends** past it;
* the **mechanism** (auto, lifted or a tree), its **metric**, a **base** or a **certificate**;
* the **privacy unit** and its bounds: m (``max_value``), K (``max_keys``), C (``max_per_key``);
* the **dimension** d (counts per step; one value per line only);
* the **intervals**: β and the band ("step": each interval at 1 − β; "simultaneous": all of the
  schedule's intervals together at 1 − β, each at β divided by the number of intervals);
* the **invalid policy** and the policy on events of **released steps** (``released_events``), the **calendar** (dates to steps) and the **public schedule**
  (``through``: the last step released; event rows only), and the public **keys** (None: one
  stream).

A ``CountSpec`` is frozen and validated in ``__post_init__``: a bad option is one
``InvalidInputError`` naming the flag as the command spells it, raised before anything is
read, created, charged or released. ε is checked once (``validation.check_epsilon``): the
checked value is an ``Epsilon``, which no later layer checks again.

``resolve`` turns a spec into what runs (``Resolution``): the mechanism (``mechanisms.resolve``:
the one dispatch over anytime, certificate, base and planner) and the planner row that chose
it; the spec gives the public schedule (``schedule``) and the β of each interval (``step_beta``,
the band). The sensitivity is the engine's, from the resolved mechanism and the unit's bounds:
m or 2m per step (``ContinualCounter``), and for keyed counts Δ_step = m, K·m, or the exact
user-level Δ from the lifted base's column norms (``KeyedCounters``).

**Route parity.** ``ROUTES`` are the eight ways to run a count; ``features`` names what a spec
asks for; ``REFUSED`` is the one table of what a route does not do, each with its reason, and
``check_route`` is the one place that refuses it. docs/streaming.md ("Route parity") shows the
same table (tests/test_route_parity.py checks that they agree and that every route refuses
exactly what the table says).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.mechanisms import trees
from pure_dp_mf.validation import Epsilon, check_beta, check_epsilon, check_size

PRIVACY_UNITS = ("step", "event", "user-step", "user")
USER_UNITS = ("user-step", "user")
BANDS = ("step", "simultaneous")
INVALID_POLICIES = ("refuse", "zero", "clamp", "stop")
METRICS = ("maxse", "meanse")
MECHANISMS = ("auto", "lifted", "anytime", *trees.MECHANISMS)
"""What ``mechanism`` may name: the planner's choice, a lifted base, the anytime schedule (no
horizon), or a tree (``mechanisms.resolve`` says which the horizon allows)."""
RELEASED_EVENTS = ("refuse", "set-aside")
"""What a resumed run of event rows does with events of steps already released (``engines.partitions``)."""
MAX_DIMENSION = 1 << 20
"""The most counters (--dimension) one run keeps: each holds its own noise pages and sums."""

ROUTES = ("cli-lines", "cli-rows", "cli-keyed", "counter", "keyed-counters", "dataframe", "spark-batch", "spark-stream")
"""The ways to run a count: ``count`` on one value per line, on event rows (one stream), on
keyed event rows (``--key-column``); ``Counter``; ``KeyedCounters``; the DataFrame function;
Spark batch (the DataFrame API and ``count --engine spark``); Spark streaming."""

FEATURES = {
    "one-stream": "event rows of one stream (no --key-column)",
    "dates": "dates and calendars (--start, --step-size)",
    "unit-step": "--privacy-unit step",
    "unit-event": "--privacy-unit event",
    "unit-user-step": "--privacy-unit user-step",
    "unit-user": "--privacy-unit user",
    "state": "a state and resume (--state)",
    "budget": "a named budget (--budget)",
    "anytime": "no horizon: the anytime counter",
    "extend": "going on past the horizon (--extend)",
    "monotone": "--monotone",
    "releases": "the release log read back (pure-dp-mf releases, Counter.open)",
    "simultaneous": "simultaneous bands (--band simultaneous)",
    "invalid-policy": "an invalid-input policy other than refuse (--invalid zero, clamp)",
    "invalid-stop": "--invalid stop",
    "dimension": "d > 1 counts per step (--dimension)",
    "key-file": "the noise key in a file (--key-file)",
    "certificate": "a certificate's base (--certificate)",
    "tree": "a tree mechanism (--mechanism binary, …)",
}
"""What a spec may ask for (``features``), in the order of the parity table."""

_LINES = "one value per line is one step's value"
_LIFTED = "event rows run lifted bases: no --certificate, --dimension, --monotone or tree --mechanism"
_ROW_ROUTES = ("cli-rows", "cli-keyed", "keyed-counters", "dataframe", "spark-batch", "spark-stream")
REFUSED: dict[tuple[str, str], str] = {
    **{(feature, route): _LIFTED for feature in ("certificate", "tree") for route in _ROW_ROUTES},
    ("dates", "cli-lines"): f"--start is for event rows: give --step-column too ({_LINES})",
    ("dates", "counter"): "Counter takes one value per step; dates belong to event rows (KeyedCounters, the DataFrame function)",
    ("unit-event", "cli-lines"): f"--privacy-unit event counts event rows: give --step-column ({_LINES}: --privacy-unit step)",
    ("unit-event", "counter"): "Counter protects one step's value (privacy unit step); events are counted by KeyedCounters",
    ("unit-user-step", "cli-lines"): "--privacy-unit user-step counts event rows: give --step-column and --user-column",
    ("unit-user-step", "counter"): "Counter has no users; user-level units are counted by KeyedCounters",
    ("unit-user", "cli-lines"): "--privacy-unit user counts event rows: give --step-column and --user-column",
    ("unit-user", "counter"): "Counter has no users; user-level units are counted by KeyedCounters",
    ("state", "spark-batch"): (
        "--state is for the local engine: a Spark batch run releases every step in one job and keeps no state "
        "(rerun it with a new --output; Spark streaming keeps its state in its checkpoint)"
    ),
    ("state", "spark-stream"): "a Spark stream keeps its state in its checkpoint (checkpointLocation): give no state",
    ("budget", "spark-batch"): "--budget is for the local engine",
    ("budget", "spark-stream"): "--budget is for the local engine",
    ("extend", "spark-batch"): "--extend with --engine spark is not supported: run it on the local engine",
    ("extend", "spark-stream"): "--extend is for the local engine: a Spark stream runs to its horizon",
    ("monotone", "cli-rows"): "--monotone is for one count per line; event rows release their counts as drawn",
    ("monotone", "cli-keyed"): "--monotone is for one count per line; event rows release their counts as drawn",
    ("monotone", "keyed-counters"): "monotone is for one count per line; keyed counts are released as drawn",
    ("monotone", "dataframe"): "monotone is for one count per line; keyed counts are released as drawn",
    ("monotone", "spark-batch"): "--monotone is for one count per line; keyed counts are released as drawn",
    ("monotone", "spark-stream"): "monotone is for one count per line; keyed counts are released as drawn",
    ("releases", "dataframe"): "the DataFrame function returns every release; it keeps no release log",
    ("releases", "spark-batch"): "a Spark batch run writes every release to its sink; it keeps no release log",
    ("releases", "spark-stream"): "a Spark stream writes every release to its sink; its checkpoint keeps no release log",
    ("invalid-stop", "dataframe"): "invalid='stop' is for one count per line; the DataFrame function takes refuse, zero or clamp",
    ("invalid-stop", "spark-batch"): "--invalid stop is for the local engine; --engine spark takes refuse, zero or clamp",
    ("dimension", "cli-rows"): "--dimension is for one count per line: event rows of d streams are d keys (--key-column)",
    ("dimension", "cli-keyed"): "--dimension is for one count per line: keyed counts are one count per key",
    ("dimension", "keyed-counters"): "dimension is for one count per line: keyed counts are one count per key",
    ("dimension", "dataframe"): "dimension is for one count per line: keyed counts are one count per key",
    ("dimension", "spark-batch"): "--dimension is for one count per line: keyed counts are one count per key",
    ("dimension", "spark-stream"): "dimension is for one count per line: keyed counts are one count per key",
    (
        "key-file",
        "cli-lines",
    ): "--key-file is for event rows: give --step-column too (one count per line keeps its key in --state)",
}
"""The one table of refusals: (feature, route) → why that route does not do it. A pair not in it
is supported. docs/streaming.md, "Route parity", is this table."""


def parity_markdown() -> str:
    """The parity table as Markdown (docs/streaming.md, "Route parity"): a row per feature, a
    column per route, "yes" or "no [i]" with the reasons numbered below the table."""
    reasons: list[str] = []
    lines = ["| feature | " + " | ".join(ROUTES) + " |", "| --- |" + " --- |" * len(ROUTES)]
    for feature, words in FEATURES.items():
        cells = []
        for route in ROUTES:
            reason = REFUSED.get((feature, route))
            if reason is None:
                cells.append("yes")
                continue
            if reason not in reasons:
                reasons.append(reason)
            cells.append(f"no [{reasons.index(reason) + 1}]")
        lines.append(f"| {words} | " + " | ".join(cells) + " |")
    notes = [f"[{number}]: {reason}" for number, reason in enumerate(reasons, start=1)]
    return "\n".join([*lines, "", *notes]) + "\n"


@dataclass(frozen=True)
class Publication:
    """Where a count's noise comes from, what it is charged to and where it is claimed.

    At most one source: ``seed`` (``NoiseGenerator.from_seed``: NOT private, marks every
    output), ``key_file`` (a secure key kept in a file: one publication in the ledger, reproduced
    by a run again on the same input and refused on other input), ``generator`` (a library
    caller's own), or none (a fresh secure key; kept in the ``state`` when there is one). A
    ``state`` keeps its own key: a key file or seed beside it is refused. ``budget`` names the
    budget charged ε with the first released step; ``ledger`` the ledger of publications
    (``engines.ledger``)."""

    seed: int | None = None
    key_file: Path | None = None
    generator: NoiseGenerator | None = None
    state: Path | None = None
    budget: str | None = None
    ledger: str | None = None

    def __post_init__(self) -> None:
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise InvalidInputError(f"--seed must be an integer, got {self.seed!r}")
        if self.seed is not None and self.key_file is not None:
            raise InvalidInputError("--key-file and --seed: a key file holds a secure key, a seed a public one; give one of them")
        if self.generator is not None and not isinstance(self.generator, NoiseGenerator):
            raise InvalidInputError(f"generator must be a NoiseGenerator, got {type(self.generator).__name__}")
        if self.generator is not None and (self.seed is not None or self.key_file is not None):
            raise InvalidInputError("give a generator, a seed or a key file, not two of them")
        if self.key_file is not None and self.state is not None:
            raise InvalidInputError("--key-file and --state: a state holds its own key; give one of them")
        if self.state is not None and not isinstance(self.state, (str, os.PathLike)):
            raise InvalidInputError(f"state must be a path, got {type(self.state).__name__}")
        if self.key_file is not None and Path(self.key_file).is_dir():
            raise InvalidInputError(f"--key-file {self.key_file} is a folder, not a file")

    @property
    def seeded(self) -> bool:
        """Whether the noise is seeded (not private)."""
        return self.seed is not None or (self.generator is not None and self.generator.seeded)

    def noise_generator(self) -> NoiseGenerator | None:
        """The run's generator: the given one, the seed's, the key file's (created when missing,
        mode 0600; its publication named after the file's absolute path), or None: a fresh secure
        key (or, resumed, the state's own)."""
        if self.generator is not None:
            return self.generator
        if self.seed is not None:
            return NoiseGenerator.from_seed(self.seed)
        if self.key_file is not None:
            return NoiseGenerator.from_key_file(Path(self.key_file), query=str(Path(self.key_file).resolve()))
        return None


@dataclass(frozen=True)
class CountSpec:
    """A count's public options (module docstring), checked once when made.

    ``keys``: the public keys (None: one stream). ``rows``: the input is event rows (a step
    column; keyed counts always are) rather than one value per line. ``through``: the last step
    of the public schedule of event rows (default the horizon; required without one), a step or
    with a ``calendar`` a date. ``privacy_unit`` defaults to "step" for one value per line and to
    "event" for event rows."""

    epsilon: float
    horizon: int | None = None
    extend: bool = False
    mechanism: str = "auto"
    metric: str = "maxse"
    base: Path | None = None
    certificate: Path | None = None
    privacy_unit: str | None = None
    max_value: int = 1
    max_keys: int | None = None
    max_per_key: int | None = None
    dimension: int = 1
    beta: float = 0.05
    band: str = "step"
    invalid: str = "refuse"
    released_events: str = "refuse"
    monotone: bool = False
    calendar: Calendar | None = None
    through: Any = None
    keys: tuple[str, ...] | None = None
    rows: bool = False
    publication: Publication = field(default_factory=Publication)

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (frozen: set once, here)
        set_("epsilon", check_epsilon(self.epsilon, name="--epsilon"))
        if self.horizon is not None:
            set_("horizon", check_size(self.horizon, name="--horizon"))
        set_("max_value", check_size(self.max_value, name="--max-value"))
        set_("dimension", check_size(self.dimension, name="--dimension"))
        if self.dimension > MAX_DIMENSION:
            raise InvalidInputError(
                f"--dimension {self.dimension} is more than {MAX_DIMENSION:,} counters, the most one run keeps in bounded memory"
            )
        set_("beta", check_beta(self.beta))
        _one_of(self.band, BANDS, flag="--band")
        _one_of(self.invalid, INVALID_POLICIES, flag="--invalid")
        check_released_events(self.released_events)
        _one_of(self.metric, METRICS, flag="--metric")
        _one_of(self.mechanism, MECHANISMS, flag="--mechanism")
        if self.base is not None and self.certificate is not None:
            raise InvalidInputError("give a base or a certificate, not both (a certificate names its base)")
        if (self.base is not None or self.certificate is not None) and self.mechanism not in ("auto", "lifted"):
            raise InvalidInputError(f"mechanism {self.mechanism!r} is a tree; a base or a certificate chooses a lifted base")
        if self.keys is not None:
            from pure_dp_mf.engines.keys import check_keys

            set_("keys", tuple(check_keys(self.keys)))
            set_("rows", True)
        unit = self.privacy_unit or ("event" if self.rows else "step")
        set_("privacy_unit", _one_of(unit, PRIVACY_UNITS, flag="--privacy-unit"))
        self._check_bounds()
        if self.monotone and self.dimension != 1:
            raise InvalidInputError("monotone post-processing is for dimension 1 (one running count)")
        if self.through is not None and not self.rows:
            raise InvalidInputError("--through is for event rows: give --step-column too (every input line is a step)")

    @classmethod
    def of(
        cls,
        *,
        start: Any = None,
        step_size: Any = None,
        seed: int | None = None,
        key_file: Any = None,
        generator: NoiseGenerator | None = None,
        state: Any = None,
        budget: str | None = None,
        ledger: str | None = None,
        **options: Any,
    ) -> CountSpec:
        """A spec from the flat keyword options of the library's functions: the fields of
        ``CountSpec`` (``options``: ``epsilon``, ``keys``, ``horizon``, …), the calendar's
        ``start`` and ``step_size``, and the publication's ``seed``, ``key_file``, ``generator``,
        ``state``, ``budget`` and ``ledger``. An unknown option is refused, naming it."""
        unknown = sorted(set(options) - {field.name for field in dataclasses.fields(cls)} - {"publication", "calendar"})
        if unknown:
            raise InvalidInputError(f"unknown option {unknown[0]!r}")
        publication = Publication(
            seed=seed,
            key_file=None if key_file is None else Path(key_file),
            generator=generator,
            state=None if state is None else Path(state),
            budget=budget,
            ledger=ledger,
        )
        calendar = Calendar.of(start=start, step_size=step_size, flags=("start", "step_size"))
        return cls(**options, calendar=calendar, publication=publication)

    def _check_bounds(self) -> None:
        """The contribution bounds against the privacy unit: K for user-step (required with
        several keys) and user, C for user only."""
        unit, keys = self.privacy_unit, self.keys
        flags = {"user": ("--max-keys", "--max-per-key"), "user-step": ("--max-keys",)}.get(str(unit), ())
        if self.max_keys is not None and "--max-keys" not in flags:
            raise InvalidInputError("--max-keys is for --privacy-unit user or user-step")
        if self.max_per_key is not None and "--max-per-key" not in flags:
            raise InvalidInputError("--max-per-key is for --privacy-unit user")
        if unit == "step" and keys is not None and len(keys) != 1:
            raise InvalidInputError(
                "--privacy-unit step protects a whole step, every key at once: it is for one stream; "
                "keyed counts protect an event, a user-step or a user"
            )
        if unit == "user-step" and self.max_keys is None and keys is not None and len(keys) > 1:
            raise InvalidInputError("--privacy-unit user-step with several keys needs --max-keys K (keys per user and step)")
        if unit == "user" and self.max_keys is None and (keys is None or len(keys) == 1):
            object.__setattr__(self, "max_keys", 1)  # one stream: a user has one key to contribute to
        if unit == "user" and (self.max_keys is None or self.max_per_key is None):
            raise InvalidInputError("--privacy-unit user needs --max-keys and --max-per-key")
        if self.max_keys is not None:
            object.__setattr__(self, "max_keys", check_size(self.max_keys, name="--max-keys"))
        if self.max_per_key is not None:
            object.__setattr__(self, "max_per_key", check_size(self.max_per_key, name="--max-per-key"))

    # ------------------------------------------------------------------ derived, public

    def features(self) -> list[str]:
        """The features of ``FEATURES`` this spec asks for (the parity table's rows)."""
        asked = {
            "one-stream": self.rows and self.keys is None,
            "dates": self.calendar is not None,
            f"unit-{self.privacy_unit}": True,
            "state": self.publication.state is not None,
            "budget": self.publication.budget is not None,
            "anytime": self.horizon is None,
            "extend": self.extend,
            "monotone": self.monotone,
            "simultaneous": self.band == "simultaneous",
            "invalid-policy": self.invalid in ("zero", "clamp"),
            "invalid-stop": self.invalid == "stop",
            "dimension": self.dimension != 1,
            "key-file": self.publication.key_file is not None,
            "certificate": self.certificate is not None,
            "tree": self.mechanism not in ("auto", "lifted", "anytime"),
        }
        return [name for name in FEATURES if asked.get(name)]

    def check_route(self, route: str) -> None:
        """Refuse, with the parity table's reason (``REFUSED``), the first feature this spec asks
        for that ``route`` does not do. The one place where a route refuses a feature."""
        if route not in ROUTES:
            raise ValueError(f"unknown route {route!r}")
        for feature in self.features():
            reason = REFUSED.get((feature, route))
            if reason is not None:
                raise InvalidInputError(reason)

    def schedule(self) -> int | None:
        """The last step of the public schedule of event rows (``through``: a step, or a date
        with the calendar; default the horizon); None for one value per line (every line is a
        step)."""
        if not self.rows:
            return None
        from pure_dp_mf.engines.keys import public_schedule

        if self.extend and self.through is None:  # past the horizon: --through is the public schedule
            raise InvalidInputError("--extend needs --through N: the public schedule of steps to release, past the horizon")
        return public_schedule(None if self.extend else self.horizon, self.through, calendar=self.calendar)

    def step_beta(self, *, intervals: int | None) -> float:
        """The β of each interval: β (band "step"), or β/``intervals`` for a band that holds over
        the whole schedule's ``intervals`` intervals at once (``error_bars.simultaneous_beta``)."""
        if self.band == "step":
            return self.beta
        if intervals is None:
            raise InvalidInputError(
                "--band simultaneous needs --horizon n (or --through): the band holds over steps fixed in advance"
            )
        from pure_dp_mf.release.error_bars import simultaneous_beta

        return simultaneous_beta(self.beta, steps=intervals)

    def replace(self, **changes: Any) -> CountSpec:
        """A copy with ``changes``, checked again."""
        return dataclasses.replace(self, **changes)


def keyed_spec(spec: CountSpec | None, options: dict[str, Any], *, route: str) -> CountSpec:
    """The spec of a library function over event rows (the DataFrame function, Spark): ``spec``,
    or one made from the function's keyword ``options`` (``CountSpec.of``), with its public keys
    (required), checked against ``route``'s column of the parity table."""
    if spec is None:
        spec = CountSpec.of(rows=True, **options)
    elif options:
        raise InvalidInputError(f"give a spec or its options, not both (got {', '.join(sorted(options))})")
    if spec.keys is None:
        raise InvalidInputError("keys: the public list of keys is required")
    spec.check_route(route)
    return spec


@dataclass(frozen=True)
class Resolution:
    """What a spec runs (``resolve``): the mechanism and the planner row that chose it (None
    when a base, a certificate or the anytime schedule was given)."""

    spec: CountSpec
    mechanism: Any
    row: Any = None

    @property
    def epsilon(self) -> Epsilon:
        return self.spec.epsilon  # type: ignore[return-value]


def resolve(spec: CountSpec, *, keyed: bool | None = None) -> Resolution:
    """The mechanism ``spec`` runs (``mechanisms.resolve.resolve_mechanism``: no horizon the
    anytime schedule; a certificate, a base, else the planner's best row for the horizon and
    metric; keyed counts' "auto" is the best lifted base, whose column norms bound a user)."""
    from pure_dp_mf.mechanisms.resolve import resolve_mechanism

    resolved = resolve_mechanism(
        horizon=spec.horizon,
        metric=spec.metric,
        mechanism=spec.mechanism,
        base=spec.base,
        certificate=spec.certificate,
        keyed=spec.rows if keyed is None else keyed,
        epsilon=spec.epsilon,
    )
    return Resolution(spec=spec, mechanism=resolved.mechanism, row=resolved.row)


def check_user_column(privacy_unit: str, user_column: str | None, *, command: bool = False) -> None:
    """The user column goes with the units that bound users ("user", "user-step") and with no
    other; the one check of every route, in the command's words (``command``) or the library's."""
    users = privacy_unit in USER_UNITS
    if users and user_column is None:
        raise InvalidInputError(
            f"--privacy-unit {privacy_unit} needs --user-column NAME"
            if command
            else f"privacy_unit={privacy_unit!r} needs user_column (the user of every event)"
        )
    if not users and user_column is not None:
        raise InvalidInputError(
            "--user-column is for --privacy-unit user or user-step"
            if command
            else f"user_column is for privacy_unit 'user' or 'user-step', not {privacy_unit!r}"
        )


def check_released_events(policy: object, *, flag: str = "--released-events") -> str:
    """One of ``RELEASED_EVENTS``, else one error naming the flag."""
    return _one_of(policy, RELEASED_EVENTS, flag=flag)


def _one_of(value: object, choices: tuple[str, ...], *, flag: str) -> str:
    if value not in choices:
        raise InvalidInputError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


if __name__ == "__main__":  # python -m pure_dp_mf.engines.spec: the parity table of docs/streaming.md
    print(parity_markdown(), end="")
