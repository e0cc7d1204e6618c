"""Private running counts of many public keys, released together at every step (local engine).

The privacy model (proofs in docs/privacy.md, "Keyed streams"):

* **Keys are public**: a list fixed in advance. An event whose key is not in the list is dropped
  before anything else looks at it, and nothing about it is released (a key set that depends on
  the data cannot be released under pure DP).
* **The schedule is public**: the steps released, 1 … ``through`` (default the horizon; required
  without one), are
  fixed before any data is read, and every key releases at every one of them, with a zero input
  when it had no events (a key that skipped a step would reveal that it had no data). Events of a
  step outside the schedule are dropped unseen, like those of unlisted keys, so which (key, step)
  rows are released never depends on the data.
* Dropped events are counted for the operator (``KeyedCounters.dropped``, written only to an
  operator log on request), never released.
* Each key is one counter of the mechanism (default the lifted base the planner ranks best for
  the horizon, the exact lattice release of ``release.lattice``), with its **own noise**: key j's integer
  noise is keyed by ``generator.child(key)`` (SHA-256 of the run key and the length-prefixed UTF-8 key,
  an injective encoding), so two keys never share a noise stream, and the noise of (key, step) is
  a pure function of (run key, key, step): a replayed step regenerates the same noise.
* **Event level** (``privacy_unit="event"``): neighbours differ in one event, which changes one
  key's input at one step by at most m; each key's counter is ε-DP for that, and the keys' counters
  use independent noise on disjoint data, so the whole release is ε-DP (parallel composition).
* **Step** (``privacy_unit="step"``, one key only: a single stream given as event rows): neighbours
  differ in the whole input of one step; the step's total is clipped to m (``PerStepBounder``
  with every event one user's), so one step changes by ≤ m: the single-stream counter's unit.
* **User-step** (``privacy_unit="user-step"``): neighbours differ in one user's events within one
  step. ``PerStepBounder`` keeps, within each step, a user's first K keys, each (user, key) sum
  clipped to m; one unit then changes at most K keys at one step by ≤ m each, so every key's
  noise is scaled to Δ_step = K·m (the keys' losses add up to ε).
* **User level** (``privacy_unit="user"``) with contribution bounds K keys and C steps per key:
  ``ContributionBounder`` keeps, online and per user, the user's first K keys and, per key, the
  first C distinct steps, and clips the user's sum at one (key, step) to m. A user then changes at
  most K keys' inputs, each at ≤ C steps by ≤ m, so the ℓ1 change of the stacked R·x is at most
  Δ = K·m·(sum of the C largest column ℓ1 norms of R_p[:, :n]) (computed exactly on the lattice,
  ``LiftedFamily.column_norms_exact``), and every key's noise is scaled to that Δ: the release is
  ε-DP for users.

Vectorised across keys: the noise of all keys is computed ahead for a chunk of steps (one
``ExactRelease`` over every key's source: one matrix product per base block for all keys), and
each step is one numpy pass over all keys. With a state (``save_state``) every step is committed
to the journal (``journal.py``) before it is returned, with the registry; the state keeps every
step's counts, the key list and how the steps were printed, so ``open(…).releases()`` reads them
back (``KeyedReleases``; ``pure-dp-mf releases``).

**Past the horizon** (``extend_horizon``): every key's counter so far becomes segment 0 of the
public extended anytime schedule, its noise not redrawn, later steps run the anytime segments
(docs/privacy.md, "Extending keyed counts": ε-DP for the same unit; "user" with C > 1 refused).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from pure_dp_mf.engines import ledger
from pure_dp_mf.engines.budget import charge_with_release
from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.generator import NoiseGenerator, claim_in_process, mark_exported
from pure_dp_mf.engines.journal import Journal, StateFileError
from pure_dp_mf.engines.keys import (  # noqa: F401  (the keyed engine's names, kept importable here)
    MAX_ANYTIME_THROUGH,
    MAX_LOCAL_KEYS,
    SINGLE_KEY,
    check_keys,
    keys_sha256,
    normalise_key,
    public_schedule,
)
from pure_dp_mf.engines.spec import CountSpec, Publication, resolve
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.mechanisms.mechanism import Mechanism
from pure_dp_mf.mechanisms.resolve import from_record
from pure_dp_mf.release.error_bars import ErrorBars, floor_half_widths
from pure_dp_mf.validation import check_size

KEYED_PAGE = 1 << 10  # integer noise drawn in pages of this many per (key, level): small, as keys are many
PRIVACY_UNITS = ("step", "event", "user-step", "user")
INTERVAL_WORDS = (
    "[lower, upper] covers the noise on the bounded count with probability ≥ 1 − β (see band): the running count "
    "of the input as counted, after the contribution bounds, the clipping to m and the invalid policy; it does not "
    "cover what those left out, so it may miss the count of the raw data"
)
"""What every output's interval means (``interval_meaning`` in the metadata; docs/privacy.md,
"Keyed streams"): a statement about the noise alone, never about data the bounds dropped."""
STEP_USER = "step"  # the one "user" of --privacy-unit step: a step's whole input
UNIT_WORDS = {  # what one privacy unit is, in words (``str.format`` with m, K and C)
    "step": "one step: its whole input, at most m = {m}",
    "event": "one event, of value at most m = {m}",
    "user-step": "one user's events within one step: at most K = {K} key(s), m = {m} each",
    "user": "one user over the whole stream: at most K = {K} key(s), C = {C} steps per key, m = {m} each",
}


def check_privacy_unit(privacy_unit: str) -> str:
    """One of ``PRIVACY_UNITS``, else one error naming the flag."""
    if privacy_unit not in PRIVACY_UNITS:
        raise InvalidInputError(f"--privacy-unit must be one of {', '.join(PRIVACY_UNITS)}, got {privacy_unit!r}")
    return privacy_unit


def check_user(user: object, *, where: str) -> None:
    """Refuse a user id that is missing (None) or empty once normalised (``normalise_key``: the
    text without surrounding white space): events without their user would be pooled into one
    "user" whose bounds then cut them all, silently. ``where`` says which event (a line or row
    number, never a value). Every route's bounds pass through it (``ContributionBounder.admit``);
    the readers call it first, under their invalid policy, to name the line and refuse a file
    before anything is released (or drop the event under "zero")."""
    if user is None or not normalise_key(user):
        raise empty_user_error(where)


def empty_user_error(where: str) -> InvalidInputError:
    """The refusal of an event without its user (``check_user``), at ``where``."""
    return InvalidInputError(
        f"{where}: the user id is empty; every event needs its user for the contribution bounds "
        "(the invalid policy 'zero' drops such events)"
    )


def user_sensitivity(column_norms: Sequence[Fraction], *, max_keys: int, max_per_key: int, max_value: int) -> Fraction:
    """Δ = K·m·(sum of the C largest column ℓ1 norms), exactly (see the module docstring)."""
    largest = sorted(column_norms, reverse=True)[:max_per_key]
    return max_keys * max_value * sum(largest, Fraction(0))


def step_sensitivity(*, privacy_unit: str, max_value: int, max_keys: int = 1, max_per_key: int = 1) -> int:
    """Δ_step, what one unit changes one step by, the scale of an anytime segment's noise: m for
    ``step`` and ``event``, K·m for ``user-step``, K·m·C for ``user`` (each segment at K·m·C times
    its largest column norm, so the losses of a user's C steps per key add up to at most ε)."""
    if privacy_unit in ("step", "event"):
        return max_value
    return max_keys * max_value * (max_per_key if privacy_unit == "user" else 1)


@dataclass
class ContributionBounder:
    """Online per-user contribution bounds: the first K keys of each user, the first C distinct
    steps of each (user, key), and each (user, key, step) sum clipped to m. Every decision depends
    on that user's own earlier events only. An event at a step before the (user, key)'s last kept
    step is dropped (a stream engine may deliver it late), so the kept steps of a (user, key) are
    increasing and distinct: the sensitivity proof needs C distinct columns."""

    max_keys: int
    max_per_key: int
    max_value: int
    _keys: dict = field(default_factory=dict)  # user → {key index: [steps kept, last step, sum at it]}
    dropped: int = 0

    def admit(self, user: str | None, key: int, step: int, value: int) -> int:
        """The part of this event that is kept (0 when it is dropped). An empty or missing user is
        refused (``check_user``): it is no one's, and cannot be bounded as anyone's."""
        check_user(user, where="an event")
        keys = self._keys.setdefault(user, {})
        entry = keys.get(key)
        if entry is None:
            if len(keys) >= self.max_keys:
                self.dropped += 1
                return 0
            entry = keys[key] = [0, None, 0]
        if entry[1] is not None and step < entry[1]:
            self.dropped += 1
            return 0
        if entry[1] != step:
            if entry[0] >= self.max_per_key:
                self.dropped += 1
                return 0
            entry[0], entry[1], entry[2] = entry[0] + 1, step, 0
        kept = min(value, self.max_value - entry[2])
        if kept < value:
            self.dropped += 1
        entry[2] += kept
        return kept

    def user_record(self, user: str) -> dict[str, list]:
        """The bounds' state of one user, JSON-ready: {key index: [steps kept, last step, sum at it]}."""
        return {str(key): list(entry) for key, entry in self._keys.get(user, {}).items()}

    def restore_user(self, user: str, record: dict) -> None:
        """Continue one user's bounds from ``user_record`` (a stream engine's state store)."""
        self._keys[user] = {int(key): list(entry) for key, entry in record.items()}


@dataclass
class PerStepBounder(ContributionBounder):
    """The bounds of the units "user-step" and "step": ``ContributionBounder``'s, restarted at
    every step, so a user keeps, within each step, its first K keys, each (user, key) clipped to m
    (for "step" every event is one user's: each key's step total is clipped to m). Events come in
    step order, so only the current step's users are held."""

    _step: int | None = None

    def admit(self, user: str | None, key: int, step: int, value: int) -> int:
        if step != self._step:
            self._keys.clear()
            self._step = step
        return super().admit(user, key, step, value)


class _KeyedState:
    """The state side of ``KeyedCounters``: the journal's progress record, binding to a new
    state (``save_state``), closing, reading the last released step back."""

    journal: Journal | None
    closed: bool
    released: int
    keys: list[str]
    extended_from: dict | None
    sums: np.ndarray
    bounder: ContributionBounder | None
    dropped_unknown: int
    lineage: str
    mechanism: Any
    _keys_sha256: str
    epsilon: float
    horizon: int | None
    max_value: int
    privacy_unit: str
    sensitivity: Fraction
    generator: NoiseGenerator

    def summary(self) -> dict:
        raise NotImplementedError

    def intervals(self, counts: np.ndarray, *, start: int, beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _header(self) -> dict:
        return {
            "engine": "keyed",
            "lineage": self.lineage,
            "what": f"keyed counts, {self.mechanism.name}",
            "mechanism": self.mechanism.record,
            "keys_sha256": self._keys_sha256,
            "epsilon": self.epsilon.hex(),
            "horizon": self.horizon,
            "max_value": self.max_value,
            "privacy_unit": self.privacy_unit,
            "sensitivity": [str(self.sensitivity.numerator), str(self.sensitivity.denominator)],
            "generator": self.generator.to_record(),
            "summary": self.summary(),
            "extended_from": self.extended_from,
        }

    def _progress(self, sums: np.ndarray) -> dict:
        bounder = None
        if self.bounder is not None:
            bounder = {
                "dropped": self.bounder.dropped,
                "users": {user: self.bounder.user_record(user) for user in self.bounder._keys},
            }
        return {"sums": [int(v) for v in sums], "bounder": bounder, "dropped_unknown": self.dropped_unknown}

    def save_state(self, path: str | os.PathLike, *, registry_path: str | os.PathLike | None = None) -> Path:
        """Bind the run to a new state at ``path`` (mode 0600: it holds the generator key) and
        commit every later step there first (a state that exists moves to ``path``)."""
        if self.journal is not None:
            self.journal.move(path)
            return self.journal.path
        # every step's released counts are kept (``releases`` reads them back), from the first step
        # released on this state; the keys are public and name the rows
        header = {**self._header(), "keys": list(self.keys), "kept_from": self.released}
        self.journal = Journal.create(
            path, header=header, progress=self._progress(self.sums), history=True, registry=registry_path
        )
        if self.released:  # steps released before the state: counted, their rows not kept
            self.journal.commit(released=self.released, progress=self._progress(self.sums))
        ledger.claim_home(self.lineage)
        return self.journal.path

    def record_output(self, *, show_keys: bool, calendar: Calendar | None, beta: float) -> None:
        """Note in the state how the steps released from now on are printed (the columns of
        ``keyed_io.Layout`` and the β of their intervals), so that ``KeyedReleases`` prints them
        as the run did: one entry per change, from the next step on (public options only)."""
        if self.journal is None or self.journal.read_only:
            return
        entry = {
            "first": self.released + 1,
            "show_keys": bool(show_keys),
            "calendar": None if calendar is None else _calendar_record(calendar),
            "beta": float(beta).hex(),
        }
        outputs = list(self.journal.header.get("outputs") or [])
        if outputs and {k: v for k, v in outputs[-1].items() if k != "first"} == {k: v for k, v in entry.items() if k != "first"}:
            return
        outputs = [old for old in outputs if old["first"] < entry["first"]] + [entry]
        self.journal.update_header({"outputs": outputs})

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
        self.closed = True

    def step_rows(self, step: int, *, beta: float):
        """(counts, std, lower, upper) of the 1-based step ``step`` = the last released one, as the
        state kept it (to complete an output after a crash: the same values, no new noise)."""
        if step != self.released or step < 1 or self.journal is None:
            raise InvalidInputError(f"only the last released step ({self.released}) can be read back")
        (counts,) = self.journal.rows(step - 1, step)
        counts = np.asarray(counts, dtype=np.int64)
        std, lower, upper = self.intervals(counts, start=step - 1, beta=beta)
        return counts, float(std[0]), lower, upper


class KeyedCounters(_KeyedState):
    """Private running counts of ``keys``, every key released at every step (module docstring).

    Args:
        keys: the public keys (distinct strings).
        epsilon: ε of the whole release (per event, or per user with ``privacy_unit="user"``).
        horizon: n, the number of steps.
        base: a base factorization file to lift; default the lifted base the planner ranks best
            for n (or give ``mechanism``, a ``Mechanism`` for horizon n).
        metric: what the default choice minimises ("maxse" or "meanse").
        max_value: m, each event's value is an integer in [0, m].
        privacy_unit: what one person's data is (``UNIT_WORDS``): "event" (each event ≤ m), "step"
            (one stream only: a step's whole input, its total clipped to m), "user-step" (a user's
            first K = ``max_keys`` keys in each step, each clipped to m; K = 1 by default with one
            key) or "user" (``max_keys`` K and ``max_per_key`` C required).
        generator: the run's generator (default secure; ``NoiseGenerator.from_seed`` is NOT private).
        chunk: steps of noise computed ahead per key.
        budget: the name of a budget (``engines.budget``) charged ε before the first release
            (``BudgetError`` when it does not fit).
    """

    def __init__(
        self,
        *,
        keys: Iterable[str],
        epsilon: float,
        horizon: int | None,
        base: str | Path | None = None,
        mechanism: Mechanism | None = None,
        metric: str = "maxse",
        max_value: int = 1,
        privacy_unit: str = "event",
        max_keys: int | None = None,
        max_per_key: int | None = None,
        generator: NoiseGenerator | None = None,
        chunk: int = 256,
        budget: str | None = None,
        _lineage: str | None = None,
    ) -> None:
        spec = CountSpec(
            epsilon=epsilon,
            horizon=horizon,
            base=base,  # type: ignore[arg-type]
            metric=metric,
            max_value=max_value,
            privacy_unit=check_privacy_unit(privacy_unit),
            max_keys=max_keys,
            max_per_key=max_per_key,
            keys=keys,  # type: ignore[arg-type]
            publication=Publication(generator=generator, budget=budget),
        )
        self._start(spec, mechanism=mechanism, chunk=chunk, lineage=_lineage)

    @classmethod
    def from_spec(
        cls, spec: CountSpec, *, mechanism: Mechanism | None = None, chunk: int = 256, _lineage: str | None = None
    ) -> KeyedCounters:
        """The keyed counters of a checked spec (``engines.spec``) with its ``keys`` (one stream:
        the one key ``count``); ``mechanism``: a resolved one (a state's), else ``spec``'s. With
        the spec's state: resumed when it exists (``resumed`` is then True), else created and saved
        there."""
        spec = spec if spec.keys is not None else spec.replace(keys=(SINGLE_KEY,))
        state = spec.publication.state
        own = mechanism is None and _lineage is None  # not a state's or an executor's rebuild
        if state is not None and own and Path(state).exists():
            counters = cls.resume_spec(state, spec=spec)
            counters.resumed = True
        else:
            counters = cls.__new__(cls)
            counters._start(spec, mechanism=mechanism, chunk=chunk, lineage=_lineage)
        if own and spec.extend and counters.extended_from is None:  # once: a state extended stays so
            counters.extend_horizon(metric=spec.metric)  # refused without a horizon
        if state is not None and own and not counters.resumed:
            counters.save_state(state)
        return counters

    def _start(self, spec: CountSpec, *, mechanism: Mechanism | None, chunk: int, lineage: str | None) -> None:
        """Build the counters of ``spec`` (``__init__``)."""
        assert spec.keys is not None and spec.privacy_unit is not None
        self.spec = spec
        self.resumed = False
        self.keys = list(spec.keys)
        self.index = {key: i for i, key in enumerate(self.keys)}
        self.epsilon = spec.epsilon
        self.horizon = spec.horizon
        self.max_value = spec.max_value
        self.privacy_unit = spec.privacy_unit
        max_keys, max_per_key, metric, budget = spec.max_keys, spec.max_per_key, spec.metric, spec.publication.budget
        self.chunk = check_size(chunk, name="chunk")
        generator = spec.publication.noise_generator()
        self.generator = generator if generator is not None else NoiseGenerator.secure()
        self.lineage = lineage or uuid.uuid4().hex
        claim_in_process(self.generator, lineage=self.lineage)  # one generator, one run: noise never reused on other data
        if lineage is not None:  # a lineage from outside (a state, Spark's executors): its key may serve other runs
            mark_exported(self.generator)
        self.mechanism = mechanism if mechanism is not None else _mechanism(spec)
        if self.mechanism.horizon != self.horizon:
            raise InvalidInputError(f"the mechanism is for horizon {self.mechanism.horizon}, not {self.horizon}")
        self.base_file = self.mechanism.record.get("base")
        self.metric = metric
        self._keys_sha256 = keys_sha256(self.keys)
        anytime = self.mechanism.kind == "anytime"
        step_sensitivity, sensitivity = self._bounds(max_keys=max_keys, max_per_key=max_per_key, anytime=anytime)
        generators = [self.generator.child(key) for key in self.keys]
        if anytime:  # Δ of segment s is Δ_step·Δ_s; ``sensitivity`` records Δ_step
            self.sensitivity = Fraction(step_sensitivity)
            self._release = self.mechanism.release(
                generators=generators, epsilon=self.epsilon, step_sensitivity=step_sensitivity, page_size=KEYED_PAGE
            )
        else:
            assert self.horizon is not None
            self.sensitivity = sensitivity or step_sensitivity * self.mechanism.sensitivity
            self._release = self.mechanism.release(
                generators=generators,
                epsilon=self.epsilon,
                sensitivity=self.sensitivity,
                page_size=KEYED_PAGE,
                cached_pages=self.mechanism.decoder.max_terms(self.horizon) + 2,  # a page per level in use, one ahead
            )
        self.sums = np.zeros(len(self.keys), dtype=np.int64)
        self.released = 0
        self.dropped_unknown = 0
        self.journal: Journal | None = None
        self.closed = False
        self._noise_start, self._noise = 0, np.zeros((len(self.keys), 0), dtype=np.int64)
        self._bars = _BarsAhead(self._release, steps=self.chunk, last=self._last)
        self._guard: Any = None  # the ledger's claim on this run's publication (``ledger.guard_for``)
        self.corrects: str | None = None  # the publication this run corrects, if any
        self.pending_charge: Any = None
        self.step_inputs: Any = None  # the digests of the steps' input events (``partitions.StepInputs``), committed with them
        self.extended_from: dict | None = None  # the known horizon n and its Δ, once ``extend_horizon`` went past it
        if budget is not None:  # checked now, charged with the first released step (``budget.PendingCharge``)
            from pure_dp_mf.engines.budget import PendingCharge

            what = (
                f"keyed counts of {len(self.keys)} key(s), {self.mechanism.name}, unit: {self.summary()['privacy_unit_meaning']}"
            )
            pending = PendingCharge(budget=budget, epsilon=self.epsilon, lineage=self.lineage, what=what)
            if pending.check():
                self.pending_charge = pending

    def publication_spec(self) -> dict:
        """What this run's publication releases (public options only; ``ledger.Publication``)."""
        header = self._header()
        spec = {name: header[name] for name in ("engine", "keys_sha256", "epsilon", "horizon", "max_value", "privacy_unit")}
        return {**spec, "mechanism": self.mechanism.name, "sensitivity": str(self.sensitivity)}

    def claim_steps(self, first: int, increments: Sequence) -> Any:
        """Before the 0-based steps first, … are drawn: the ledger's check of every key's input at
        each step (for a key that left the process, ``ledger.guard_for``; one digest per step over
        every key's input, ``ledger.keyed_step_digest``, the one Spark batch computes on its
        executors, so a publication run here and on Spark is reproduced or refused alike), and the
        pending budget charge, charged now without a state or returned for the journal commit (one
        transaction)."""
        guard = ledger.guard_for(self, self.publication_spec)
        if guard is not None:
            guard.check_keyed(first=first, keys=self.keys, increments=[np.asarray(row, dtype=np.int64) for row in increments])
        return charge_with_release(self)

    def _bounds(self, *, max_keys: int | None, max_per_key: int | None, anytime: bool) -> tuple[int, Fraction | None]:
        """The contribution bounds of the privacy unit (``self.bounder``) and the noise's
        sensitivity: (Δ_step, None) when every key's noise is Δ_step times the mechanism's
        (one unit changes each key at one step by ≤ Δ_step: "step" m with one key, "event" m,
        "user-step" K·m; the anytime "user" K·m·C), or (_, Δ) with Δ the exact "user" sensitivity
        K·m·(sum of the C largest column norms) of a lifted base (docs/privacy.md, "Keyed streams")."""
        unit, m = self.privacy_unit, self.max_value
        self.bounder = None
        self.max_keys = self.max_per_key = 1  # K and C of the units that do not bound them
        if unit == "step":
            if len(self.keys) != 1:
                raise InvalidInputError(
                    "--privacy-unit step protects a whole step, every key at once: it is for one stream; "
                    "keyed counts protect an event, a user-step or a user"
                )
            self.bounder = PerStepBounder(1, 1, m)
            return self._step_sensitivity(), None
        if unit == "event":
            return self._step_sensitivity(), None
        if unit == "user-step":
            if max_keys is None and len(self.keys) > 1:
                raise InvalidInputError("--privacy-unit user-step with several keys needs --max-keys K (keys per user and step)")
            self.max_keys = check_size(1 if max_keys is None else max_keys, name="max_keys")
            self.bounder = PerStepBounder(self.max_keys, 1, m)
            return self._step_sensitivity(), None
        if max_keys is None or max_per_key is None:
            raise InvalidInputError("--privacy-unit user needs --max-keys and --max-per-key")
        if self.mechanism.kind not in ("lifted", "anytime"):
            raise InvalidInputError(f"user-level bounds need the column norms of a lifted base, not a {self.mechanism.kind} tree")
        self.max_keys = check_size(max_keys, name="max_keys")
        self.max_per_key = check_size(max_per_key, name="max_per_key")
        self.bounder = ContributionBounder(self.max_keys, self.max_per_key, m)
        if anytime:  # each segment at K·m·C times its largest column norm: the losses add up to ε
            return self._step_sensitivity(), None
        assert self.horizon is not None
        norms = _column_norms(self.mechanism, self.horizon)
        return m, user_sensitivity(norms, max_keys=self.max_keys, max_per_key=self.max_per_key, max_value=m)

    @property
    def dropped(self) -> dict:
        """Operator counts of dropped events (NOT private: never release them)."""
        return {"unknown_key": self.dropped_unknown, "over_bounds": self.bounder.dropped if self.bounder else 0}

    def summary(self) -> dict:
        """What runs: for the output's metadata."""
        record = {
            "mechanism": self.mechanism.name,
            "keys": len(self.keys),
            "epsilon": self.epsilon,
            "horizon": self.horizon,
            "max_value": self.max_value,
            "privacy_unit": self.privacy_unit,
            "sensitivity": None if self.horizon is None else float(self.sensitivity),
            "seeded": self.generator.seeded,
        }
        record["privacy_unit_meaning"] = UNIT_WORDS[self.privacy_unit].format(
            m=self.max_value, K=self.max_keys, C=self.max_per_key
        )
        record["interval_meaning"] = INTERVAL_WORDS
        if getattr(self, "extended_from", None) is not None:
            record["extended_past_horizon"] = self.extended_from["horizon"]  # type: ignore[index]
        if self.privacy_unit in ("user", "user-step"):
            record["max_keys"] = self.max_keys
        if self.privacy_unit == "user":
            record["max_per_key"] = self.max_per_key
        return record

    def _noise_of(self, start: int, stop: int) -> np.ndarray:
        """The rounded noise of every key at 0-based steps [start, stop), shape (keys, steps)."""
        noise = np.asarray(self._release.noise(start, stop))
        return noise.reshape(stop - start, len(self.keys)).T

    def _last(self, stop: int) -> int:
        """``stop`` capped at the horizon (no cap without one)."""
        return stop if self.horizon is None else min(self.horizon, stop)

    def _step_noise(self, t: int) -> np.ndarray:
        """The rounded noise of every key at 0-based step t (computed ahead by chunks)."""
        offset = t - self._noise_start
        if not 0 <= offset < self._noise.shape[1]:
            self._noise = self._noise_of(t, self._last(t + self.chunk))
            self._noise_start, offset = t, 0
        return self._noise[:, offset]

    def release(self, increments: np.ndarray) -> np.ndarray:
        """Release the next step: ``increments[j]`` is key j's (bounded) input; returns the int64
        private running counts of every key."""
        if self.closed:
            raise StateFileError("the keyed run was closed; it releases nothing more")
        if self.horizon is not None and self.released >= self.horizon:
            raise InvalidInputError(f"all {self.horizon} steps have been released")
        increments = np.asarray(increments, dtype=np.int64)
        if increments.shape != self.sums.shape:
            raise InvalidInputError(f"expected {len(self.keys)} increments, got shape {increments.shape}")
        also = self.claim_steps(self.released, [increments])
        sums = self.sums + increments
        counts = sums + self._step_noise(self.released)
        if self.journal is not None:  # the state first: a crash after it loses no step (``resume``)
            inputs = None if self.step_inputs is None else {self.released: self.step_inputs.digest(self.released)}
            self.journal.commit(
                released=self.released + 1,
                progress=self._progress(sums),
                first=self.released,
                rows=counts[None, :],
                also=also,
                inputs=inputs,
            )
        self.pending_charge = None
        self.sums = sums
        self.released += 1
        return counts

    def release_steps(self, increments: np.ndarray, *, start: int, totals: np.ndarray, beta: float = 0.05):
        """The releases of the 0-based steps start, …, start + s − 1 of every key whose running
        totals before them are ``totals`` (keys,) and whose inputs are ``increments`` (keys, s):
        (counts (keys, s), std (s,), lower, upper (keys, s)), the same values as s calls of
        ``release``. Leaves the counter's own state as it is: for engines that keep each key's
        running total themselves (Spark's groups and state store)."""
        increments = np.asarray(increments, dtype=np.int64)
        if increments.ndim != 2 or increments.shape[0] != len(self.keys):
            raise InvalidInputError(f"expected increments of shape ({len(self.keys)}, steps), got {increments.shape}")
        steps = increments.shape[1]
        if start < 0 or start + steps > self._last(start + steps):
            raise InvalidInputError(f"steps {start + 1} … {start + steps} are outside [1, {self.horizon}]")
        counts = np.empty_like(increments)
        for first in range(0, steps, self.chunk):  # the noise of a chunk of steps at a time, as ``release``
            last = min(steps, first + self.chunk)
            counts[:, first:last] = self._noise_of(start + first, start + last)
        counts += np.asarray(totals, dtype=np.int64)[:, None] + np.cumsum(increments, axis=1)
        return (counts, *self.intervals(counts, start=start, beta=beta))

    def extend_horizon(self, *, metric: str | None = None) -> None:
        """Go on past the horizon n as anytime counters (``anytime.extended_schedule``), as
        ``ContinualCounter.extend_horizon`` does for one stream: every key's mechanism so far
        becomes segment 0 of the extended schedule with its own noise (the generator ``child(key)``
        itself: nothing released is redrawn, steps 1 … n release exactly what they would have),
        later steps run the anytime segments under that key's children "anytime segment s", each
        at Δ_step·Δ_s. Public: the schedule depends on n and ``metric`` (default the one these
        counters were chosen for) only. The contribution bounds go on unchanged.

        Privacy (docs/privacy.md, "Extending keyed counts"): ε-DP for the same unit as before, for
        "step", "event", "user-step", and "user" with C = 1 (``max_per_key``); "user" with C > 1
        is refused: segment 0's noise, scaled to the sum of the C largest column norms, does not
        leave the later segments their share of ε. A state records the new schedule before any
        later step."""
        from pure_dp_mf.mechanisms.anytime import AnytimeMechanism, extended_schedule

        if self.closed or (self.journal is not None and self.journal.read_only):
            raise StateFileError("the keyed run was closed or opened to read only; it cannot be extended")
        if self.horizon is None:
            raise InvalidInputError("--extend: the counts have no horizon; they already go on without one")
        if self.privacy_unit == "user" and self.max_per_key != 1:
            raise InvalidInputError(
                f"--extend at --privacy-unit user needs --max-per-key 1 (given {self.max_per_key}): the noise of steps "
                f"1 … {self.horizon} is scaled to the sum of the C largest column norms, which leaves the steps past the "
                "horizon no share of ε for the user's other steps; use --privacy-unit user-step, or a new publication"
            )
        step_sensitivity = self._step_sensitivity()
        if step_sensitivity * self.mechanism.sensitivity != self.sensitivity:  # segment 0 must be exactly the noise released
            raise InvalidInputError(
                f"--extend: the steps 1 … {self.horizon} were noised for Δ = {self.sensitivity}, not the Δ_step·Δ = "
                f"{step_sensitivity * self.mechanism.sensitivity} of an anytime segment: they cannot go on as one"
            )
        guard = self._guard  # claimed after the change (a publication extended by an earlier run is stored so)
        horizon, sensitivity = self.horizon, self.sensitivity
        metric = metric or self.metric or "maxse"
        schedule = extended_schedule(prefix=self.mechanism.record, horizon=horizon, metric=metric)
        mechanism = AnytimeMechanism(schedule=schedule, name=f"{self.mechanism.name} to step {horizon}, then anytime")
        generators = [self.generator.child(key) for key in self.keys]
        release = mechanism.release(
            generators=generators, epsilon=self.epsilon, step_sensitivity=step_sensitivity, page_size=KEYED_PAGE
        )
        self.mechanism, self.horizon, self._release, self.metric = mechanism, None, release, metric
        self.sensitivity = Fraction(step_sensitivity)  # Δ_step, as for anytime counts: Δ_s is the segment's
        self.base_file = None
        self.extended_from = {"horizon": horizon, "sensitivity": [str(sensitivity.numerator), str(sensitivity.denominator)]}
        self._noise_start, self._noise = 0, np.zeros((len(self.keys), 0), dtype=np.int64)
        self._bars = _BarsAhead(self._release, steps=self.chunk, last=self._last)
        if guard is not None:
            guard.extend(self.publication_spec())
        elif ledger.needs_ledger(self.generator):
            self._guard = ledger.Guard(
                generator=self.generator, spec=self.publication_spec(), corrects=self.corrects, extending=True
            )
        if self.journal is not None:
            changed = ("what", "mechanism", "horizon", "sensitivity", "summary", "extended_from")
            self.journal.update_header({name: value for name, value in self._header().items() if name in changed})

    def _step_sensitivity(self) -> int:
        """Δ_step of an anytime segment for the privacy unit (``_bounds``, ``step_sensitivity``)."""
        return step_sensitivity(
            privacy_unit=self.privacy_unit,
            max_value=self.max_value,
            max_keys=self.max_keys,  # 1 for the units that do not bound it (``_bounds``)
            max_per_key=self.max_per_key,
        )

    def bars(self, start: int, stop: int, *, beta: float) -> ErrorBars:
        """Error bars of steps start … stop − 1 (0-based), the same for every key (``_BarsAhead``)."""
        return self._bars.bars(start, stop, beta=beta)

    def intervals(self, counts: np.ndarray, *, start: int, beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(std per step, lower, upper) of released ``counts``: shape (keys,) for the one 0-based
        step ``start``, or (keys, steps) for the steps start, start + 1, …. The interval is the
        guaranteed (1 − β) one for the bounded count (``INTERVAL_WORDS``: the noise only), cut below
        at 0 only, as a key's bounded count is ≥ 0 but has no upper
        bound per step (many events per step), and never cut past the released count: the
        interval always holds its count (a count below 0 is its own lower end)."""
        counts = np.asarray(counts)
        bars = self.bars(start, start + (counts.shape[-1] if counts.ndim > 1 else 1), beta=beta)
        half = floor_half_widths(bars.half_width if counts.ndim > 1 else bars.half_width[:1])
        half = half if counts.ndim > 1 else half[:1].reshape(())
        if counts.dtype == object or half.dtype == object or np.abs(counts).max(initial=0) >= 2**61:
            counts, half = counts.astype(object), np.asarray(half).astype(object)  # exact at any size
        lower = np.minimum(np.maximum(counts - half, 0), counts)
        upper = counts + half
        return bars.std, lower, upper

    def admit(self, *, key: str, step: int, value: int, user: str | None = None) -> tuple[int, int]:
        """(key index or −1, kept value) of one event, after the key check and the user's bounds."""
        index = self.index.get(key, -1)
        if index < 0:
            index = self.index.get(normalise_key(key), -1)
        if index < 0:
            self.dropped_unknown += 1
            return -1, 0
        if not 0 <= value <= self.max_value:
            raise InvalidInputError(f"a value is outside [0, {self.max_value}]")
        if self.bounder is not None:
            if self.privacy_unit == "step":
                user = STEP_USER  # a step's whole input is one unit
            elif user is None:
                raise InvalidInputError(f"--privacy-unit {self.privacy_unit} needs the user of every event (--user-column)")
            value = self.bounder.admit(user, index, step, value)
        return index, value

    # ------------------------------------------------------------------ the state

    @classmethod
    def resume_spec(cls, path: str | os.PathLike, *, spec: CountSpec) -> KeyedCounters:
        """``resume`` with the options of a checked spec (its keys, ε, horizon, m, unit, bounds,
        generator and budget), which must be those the state was made with."""
        assert spec.keys is not None
        return cls.resume(
            path,
            keys=spec.keys,
            generator=spec.publication.noise_generator(),
            budget=spec.publication.budget,
            epsilon=spec.epsilon,
            horizon=spec.horizon,
            metric=spec.metric,
            max_value=spec.max_value,
            privacy_unit=spec.privacy_unit,
            max_keys=spec.max_keys,
            max_per_key=spec.max_per_key,
        )

    @classmethod
    def resume(
        cls, path: str | os.PathLike, *, keys: Iterable[str], registry_path: str | os.PathLike | None = None, **options
    ) -> KeyedCounters:
        """The keyed run saved in ``path``, bound to it again; ``keys`` and the ``options`` of the
        constructor (ε, horizon, base, m, privacy unit, bounds) must be those it was made with (a
        state extended past its horizon n takes n or no horizon)."""
        journal = Journal.open(path, registry=registry_path)
        return cls._bind(journal, keys=keys, options=options)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        *,
        keys: Iterable[str] | None = None,
        read_only: bool = True,
        registry_path: str | os.PathLike | None = None,
    ) -> KeyedCounters:
        """The keyed run saved in ``path`` as it was made (its keys, ε, horizon or extension,
        mechanism, m, privacy unit and bounds, all read from the state): to read its releases
        back (``releases``), or with ``read_only=False`` to go on (locked and checked like
        ``resume``). ``read_only`` opens it without committing anything, also a state this
        registry does not know. ``keys``: for a state that does not list its keys (made by an
        earlier version), checked against the state's sha256 of them."""
        if not Path(path).exists():
            raise InvalidInputError(f"{path}: no such state")
        journal = Journal.open(path, registry=registry_path, read_only=read_only)
        try:
            header = journal.header
            if header.get("engine") != "keyed":
                raise StateFileError(f"{path}: the state is not a keyed run's (it is {header.get('engine')!r})")
            if keys is None:
                keys = header.get("keys")
            if keys is None:
                raise InvalidInputError(
                    f"{path}: the state does not list its keys (made by an earlier version): give them (--keys FILE)"
                )
            keys = check_keys(keys)
            if keys_sha256(keys) != header["keys_sha256"]:
                raise InvalidInputError(f"{path}: the state was made with another key list than the one given (--keys)")
            summary = header.get("summary") or {}
            options: dict[str, Any] = {
                "epsilon": float.fromhex(header["epsilon"]),
                "horizon": header["horizon"],
                "max_value": header["max_value"],
                "privacy_unit": header["privacy_unit"],
                "max_keys": summary.get("max_keys") if header["privacy_unit"] in ("user", "user-step") else None,
                "max_per_key": summary.get("max_per_key") if header["privacy_unit"] == "user" else None,
            }
        except BaseException:
            journal.close()
            raise
        return cls._bind(journal, keys=keys, options=options)

    @classmethod
    def _bind(cls, journal: Journal, *, keys: Iterable[str], options: dict) -> KeyedCounters:
        """The counters of ``journal``'s run, made again from ``options`` (checked against its
        header) and restored to its progress; the journal is closed when they are refused."""
        path = journal.path
        try:
            header = journal.header
            if header.get("engine") != "keyed":
                raise StateFileError(f"{path}: the state is not a keyed run's (it is {header.get('engine')!r})")
            generator = NoiseGenerator.from_record(header["generator"])
            given = options.pop("generator", None)
            if given is not None and given.key != generator.key:
                raise StateFileError(f"{path}: the state was made with another generator (seed)")
            options.pop("base", None)
            extended = header.get("extended_from")
            if extended is not None and options.get("horizon") not in (None, extended["horizon"]):
                raise StateFileError(
                    f"{path}: the state was made with horizon {extended['horizon']} and extended past it, "
                    f"not horizon {options['horizon']}"
                )
            if extended is not None:
                options["horizon"] = None  # made with that horizon, then extended past it (``extend_horizon``)
            mechanism = from_record(header["mechanism"], horizon=header["horizon"])
            counters = cls(keys=keys, generator=generator, _lineage=header["lineage"], mechanism=mechanism, **options)
            counters.extended_from = extended
            mine = counters._header()
            for name in ("keys_sha256", "epsilon", "horizon", "max_value", "privacy_unit", "sensitivity"):
                if mine[name] != header[name]:
                    raise StateFileError(f"{path}: the state was made with another {name.replace('_sha256', '')}")
            progress = journal.progress
            counters.sums = np.array(progress["sums"], dtype=np.int64)
            counters.released = journal.released
            counters.dropped_unknown = int(progress["dropped_unknown"])
            if counters.bounder is not None and progress["bounder"] is not None:
                counters.bounder.dropped = int(progress["bounder"]["dropped"])
                for user, entries in progress["bounder"]["users"].items():
                    counters.bounder.restore_user(user, entries)
            counters.journal = journal
            if not journal.read_only:
                ledger.claim_home(counters.lineage)
            return counters
        except BaseException:
            journal.close()
            raise

    def releases(self, *, first_step: int = 1, last_step: int | None = None, beta: float | None = None) -> KeyedReleases:
        """The released steps ``first_step`` … ``last_step`` (default the last released) of every
        key, read back from the state: the counts as released (kept per step in the state) and
        their std and intervals, a function of the public mechanism, the step and β (default the
        β each step was printed with, ``record_output``; else 0.05): nothing is drawn.

        A state made by an earlier version keeps the counts of its last released step only; the
        earlier steps' counts cannot be recovered from it (their running sums were not kept, only
        the last), and asking for them is refused (``StateFileError``)."""
        last_step = self.check_kept(first_step=first_step, last_step=last_step)
        assert self.journal is not None
        steps = np.arange(first_step, last_step + 1, dtype=np.int64)
        rows = self.journal.rows(first_step - 1, last_step)
        if rows:
            counts = np.stack([np.asarray(row) for row in rows], axis=1)
        else:
            counts = np.zeros((len(self.keys), 0), dtype=np.int64)
        std = np.zeros(len(steps))
        lower, upper = np.empty_like(counts), np.empty_like(counts)
        for first, stop, step_beta in self._betas(first_step, last_step + 1, beta):
            part = slice(first - first_step, stop - first_step)
            std[part], lower[:, part], upper[:, part] = self.intervals(counts[:, part], start=first - 1, beta=step_beta)
        output = _latest_output(self.journal.header)
        return KeyedReleases(
            keys=list(self.keys),
            steps=steps,
            counts=counts,
            std=std,
            lower=lower,
            upper=upper,
            show_keys=output["show_keys"],
            calendar=None if output["calendar"] is None else _calendar_of(output["calendar"]),
        )

    def check_kept(self, *, first_step: int, last_step: int | None) -> int:
        """The last step of ``releases(first_step=, last_step=)`` (default the last released),
        refused unless the state keeps every step of the range (``releases``)."""
        if self.journal is None:
            raise StateFileError("releases are kept in the state: give the counters a state (save_state)")
        path, released = self.journal.path, self.released
        last_step = released if last_step is None else last_step
        if not 1 <= first_step <= last_step + 1 or last_step > released:
            raise InvalidInputError(f"steps {first_step} … {last_step}: only steps 1 … {released} were released")
        header = self.journal.header
        kept_from = released - 1 if not header.get("history") else int(header.get("kept_from", 0))
        if first_step <= kept_from and first_step <= last_step:
            which = (
                "of its last released step only (made by an earlier version)"
                if not header.get("history")
                else (f"from step {kept_from + 1} on (it was saved after step {kept_from})")
            )
            raise StateFileError(
                f"{path}: the state keeps the released counts {which}: steps {first_step} … {min(last_step, kept_from)} "
                f"cannot be read back from it (the running sums of those steps were not kept); --first-step {kept_from + 1} "
                "prints what it keeps"
            )
        return last_step

    def _betas(self, first: int, stop: int, beta: float | None) -> list[tuple[int, int, float]]:
        """(first step, stop, β) ranges covering the 1-based steps [first, stop): ``beta`` for
        all, else the β each was printed with (``record_output``), 0.05 where none was noted."""
        if beta is not None:
            return [(first, stop, float(beta))] if first < stop else []
        assert self.journal is not None
        marks = [(int(entry["first"]), float.fromhex(entry["beta"])) for entry in self.journal.header.get("outputs") or []]
        ranges, t = [], first
        while t < stop:
            current = [b for start, b in marks if start <= t]
            later = [start for start, _ in marks if start > t]
            end = min([stop, *later])
            ranges.append((t, end, current[-1] if current else 0.05))
            t = end
        return ranges


@dataclass(frozen=True)
class KeyedReleases:
    """Released steps of keyed counts, read back from a state (``KeyedCounters.releases``):
    1-based ``steps`` (s,), ``counts``, ``lower``, ``upper`` of shape (keys, s), ``std`` (s,)
    (the same for every key), and how the run printed them: ``show_keys`` (False for a single
    stream given as event rows) and its ``calendar`` (a date column), as ``keyed_io.Layout``."""

    keys: list[str]
    steps: np.ndarray
    counts: np.ndarray
    std: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    show_keys: bool = True
    calendar: Calendar | None = None


def _latest_output(header: dict) -> dict:
    """How the state's last run printed its rows (``record_output``); keys and no dates if none noted."""
    outputs = header.get("outputs") or []
    return outputs[-1] if outputs else {"show_keys": True, "calendar": None}


def _calendar_record(calendar: Calendar) -> dict:
    """A calendar exactly, for a state: its start (ISO) and step size in integer microseconds."""
    return {"start": calendar.start.isoformat(), "step_size_microseconds": calendar.step_size // timedelta(microseconds=1)}


def _calendar_of(record: dict) -> Calendar:
    """The inverse of ``_calendar_record``."""
    return Calendar(
        start=datetime.fromisoformat(record["start"]), step_size=timedelta(microseconds=int(record["step_size_microseconds"]))
    )


class _BarsAhead:
    """Error bars asked one step at a time (``run_keyed``) are computed ``steps`` steps ahead:
    each step's bars are a function of the public mechanism and the step alone."""

    def __init__(self, release, *, steps: int, last) -> None:
        self.release, self.steps, self.last = release, steps, last
        self.ahead: tuple[int, int, float, ErrorBars] | None = None

    def bars(self, start: int, stop: int, *, beta: float) -> ErrorBars:
        ahead = self.ahead
        if ahead is None or not (ahead[0] <= start and stop <= ahead[1] and ahead[2] == beta):
            if stop - start != 1:
                return self.release.bars(start, stop, beta=beta)
            last = self.last(start + self.steps)
            ahead = self.ahead = (start, last, beta, self.release.bars(start, last, beta=beta))
        first, bars = start - ahead[0], ahead[3]
        return ErrorBars(
            std=bars.std[first : first + stop - start], half_width=bars.half_width[first : first + stop - start], beta=beta
        )


def _mechanism(spec: CountSpec):
    """The keyed default: the lifted base the planner ranks best for the horizon, or the spec's
    base; without a horizon the shipped anytime schedule for its metric (``mechanisms.anytime``)."""
    if spec.horizon is None and spec.base is not None:
        raise InvalidInputError("--base needs --horizon: without a horizon the counts run the anytime schedule")
    return resolve(spec).mechanism


_NORMS: dict[tuple[str, int], tuple[Fraction, ...]] = {}


def _column_norms(mechanism: Mechanism, horizon: int) -> tuple[Fraction, ...]:
    """The exact column norms of the mechanism's R[:, :horizon], once per process and base."""
    tag = (json.dumps(mechanism.record, sort_keys=True), horizon)
    if tag not in _NORMS:
        assert mechanism.column_norms is not None
        _NORMS[tag] = tuple(mechanism.column_norms(horizon))
    return _NORMS[tag]


@dataclass
class KeyedEvent:
    key: str
    step: int
    value: int = 1
    user: str | None = None


def run_keyed(
    counters: KeyedCounters, events: Iterable[KeyedEvent], *, beta: float = 0.05, through: int | None = None
) -> Iterator[tuple[int, np.ndarray, float, np.ndarray, np.ndarray]]:
    """Release every key at every step of the public schedule 1 … ``through`` (default the
    horizon), yielding (step, counts of every key, std, lower, upper) per step; a resumed run
    skips the steps its state has released.

    ``events`` (1-based steps, non-decreasing) are filtered before anything else looks at them:
    events of unlisted keys and of steps outside [1, through] are dropped without a trace (the
    operator counts ``dropped_unknown``). The events of one step are admitted (user bounds) in the
    order (key, value): what "a user's first K keys and C steps" means does not depend on the
    order of lines within a step, so every engine that sees the same events makes the same
    decisions. Invalid events of listed keys in the schedule are the caller's to refuse or repair
    before this runs (``keyed_io``); here a value outside [0, m] or a step going backwards is an
    ``InvalidInputError``."""
    through = public_schedule(counters.horizon, through)
    pending = np.zeros(len(counters.keys), dtype=np.int64)
    step_events: list[KeyedEvent] = []

    def admit_step() -> None:
        for event in sorted(step_events, key=lambda e: (e.key, e.value)):
            index, kept = counters.admit(key=event.key, step=event.step, value=event.value, user=event.user)
            if index >= 0:
                pending[index] += kept
        step_events.clear()

    def flush(last: int):
        nonlocal pending
        admit_step()
        while counters.released < last:
            t = counters.released
            counts = counters.release(pending)
            pending = np.zeros_like(pending)
            std, lower, upper = counters.intervals(counts, start=t, beta=beta)
            yield t + 1, counts, float(std[0]), lower, upper

    current = None
    for number, event in enumerate(events, start=1):
        if event.key not in counters.index and normalise_key(event.key) in counters.index:
            event = replace(event, key=normalise_key(event.key))  # one spelling: the order of admission too
        if event.key not in counters.index or not 1 <= event.step <= through:
            counters.dropped_unknown += 1
            continue  # unseen: neither validated nor released
        if current is not None and event.step < current:
            raise InvalidInputError(f"event {number}: step {event.step} goes backwards (after step {current})")
        if current is None and event.step <= counters.released:
            continue  # a resumed run reads its input again from the beginning: these steps are released
        if event.step > counters.released + 1:  # every earlier step, with or without events, is complete
            yield from flush(event.step - 1)
        current = event.step
        step_events.append(event)
    yield from flush(through)
