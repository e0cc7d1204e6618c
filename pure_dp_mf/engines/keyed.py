"""Private running counts of many public keys, released together at every step (local engine).

The privacy model (proofs in docs/privacy.md, "Keyed streams"):

* **Keys are public**: a list fixed in advance. An event whose key is not in the list is dropped
  and nothing about it is released (a key set that depends on the data cannot be released under
  pure DP). Dropped events are counted for the operator (``KeyedCounters.dropped``), never released.
* **Every key releases at every step** of the global step grid, with a zero input when it had no
  events: a key that skipped a step would reveal that it had no data.
* Each key is one counter of the lifted mechanism (the one ``compare`` ranks best for the
  horizon, ``ContinualCounter``'s exact lattice release), with its **own noise**: key j's integer
  noise is keyed by ``rng.child(key)`` (SHA-256 of the run key and the length-prefixed UTF-8 key,
  an injective encoding), so two keys never share a noise stream, and the noise of (key, step) is
  a pure function of (run key, key, step): a replayed step regenerates the same noise.
* **Event level** (``privacy_unit="event"``): neighbours differ in one event, which changes one
  key's input at one step by at most m; each key's counter is ε-DP for that, and the keys' counters
  use independent noise on disjoint data, so the whole release is ε-DP (parallel composition).
* **User level** (``privacy_unit="user"``) with contribution bounds K keys and C steps per key:
  ``ContributionBounder`` keeps, online and per user, the user's first K keys and, per key, the
  first C distinct steps, and clips the user's sum at one (key, step) to m. A user then changes at
  most K keys' inputs, each at ≤ C steps by ≤ m, so the ℓ1 change of the stacked R·x is at most
  Δ = K·m·(sum of the C largest column ℓ1 norms of R_p[:, :n]) (computed exactly on the lattice,
  ``LiftedFamily.column_norms_exact``), and every key's noise is scaled to that Δ: the release is
  ε-DP for users.

Vectorised across keys: the noise of all keys is computed ahead for a chunk of steps, and each
step is one numpy pass over all keys.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from pure_dp_mf.atomic import atomic_write_text
from pure_dp_mf.engines.continual import (
    LEDGER_SUFFIX,
    StateFileError,
    _claim_generator,
    _StateLock,
    base_digest,
    exact_decoder,
    lattice_release,
)
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms.lift import LiftedFamily, lift_plan
from pure_dp_mf.release.error_bars import ErrorBarModel, ErrorBars
from pure_dp_mf.release.generator import NoiseGenerator
from pure_dp_mf.release.lattice import decide_roundings, fill_pages
from pure_dp_mf.validation import check_epsilon, check_size

KEYED_PAGE = 1 << 10  # integer noise drawn in pages of this many per (key, level): small, as keys are many
PRIVACY_UNITS = ("event", "user")


def check_keys(keys: Iterable[str]) -> list[str]:
    """The public key list: non-empty, no duplicates, no empty key."""
    keys = [str(key) for key in keys]
    if not keys:
        raise InvalidInputError("the key list is empty")
    seen: set[str] = set()
    for key in keys:
        if not key:
            raise InvalidInputError("the key list holds an empty key")
        if key in seen:
            raise InvalidInputError(f"the key list holds {key!r} twice")
        seen.add(key)
    return keys


def user_sensitivity(column_norms: Sequence[Fraction], *, max_keys: int, max_per_key: int, max_value: int) -> Fraction:
    """Δ = K·m·(sum of the C largest column ℓ1 norms), exactly (see the module docstring)."""
    largest = sorted(column_norms, reverse=True)[:max_per_key]
    return max_keys * max_value * sum(largest, Fraction(0))


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

    def admit(self, user: str, key: int, step: int, value: int) -> int:
        """The part of this event that is kept (0 when it is dropped)."""
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


class KeyedCounters:
    """Private running counts of ``keys``, every key released at every step (module docstring).

    Args:
        keys: the public keys (distinct strings).
        epsilon: ε of the whole release (per event, or per user with ``privacy_unit="user"``).
        horizon: n, the number of steps.
        base: a base factorization file; default the lifted base ``compare`` ranks best for n.
        metric: what the default choice minimises ("maxse" or "meanse").
        max_value: m, each event's value is an integer in [0, m].
        privacy_unit: "event" or "user" (then ``max_keys`` K and ``max_per_key`` C are required).
        rng: the run's generator (default secure; ``NoiseGenerator.from_seed`` is NOT private).
        chunk: steps of noise computed ahead per key.
    """

    def __init__(
        self,
        *,
        keys: Iterable[str],
        epsilon: float,
        horizon: int,
        base: str | Path | None = None,
        metric: str = "maxse",
        max_value: int = 1,
        privacy_unit: str = "event",
        max_keys: int | None = None,
        max_per_key: int | None = None,
        rng: NoiseGenerator | None = None,
        chunk: int = 256,
        lineage: str | None = None,
    ) -> None:
        self.keys = check_keys(keys)
        self.index = {key: i for i, key in enumerate(self.keys)}
        self.epsilon = check_epsilon(epsilon)
        self.horizon = check_size(horizon, name="horizon")
        self.max_value = check_size(max_value, name="max_value")
        if privacy_unit not in PRIVACY_UNITS:
            raise InvalidInputError(f"privacy unit must be event or user, got {privacy_unit!r}")
        self.privacy_unit = privacy_unit
        self.chunk = check_size(chunk, name="chunk")
        self.rng = rng if rng is not None else NoiseGenerator.secure()
        self.lineage = lineage or uuid.uuid4().hex
        _claim_generator(self.rng, lineage=self.lineage)  # one generator, one run: noise never reused on other data
        self.state_path: Path | None = None
        self._lock: _StateLock | None = None
        if base is None:
            base = _best_lifted_base(horizon=self.horizon, epsilon=self.epsilon, metric=metric)
        self.base_file = str(Path(base).resolve())
        factorization, self.plan, decoder = _mechanism(self.base_file, self.horizon, metric)
        self._keys_sha256 = hashlib.sha256(json.dumps(self.keys).encode()).hexdigest()
        self.metric = metric
        self.bounder: ContributionBounder | None = None
        if privacy_unit == "user":
            if max_keys is None or max_per_key is None:
                raise InvalidInputError("user-level privacy needs --max-keys and --max-per-key")
            self.max_keys = check_size(max_keys, name="max_keys")
            self.max_per_key = check_size(max_per_key, name="max_per_key")
            norms = _column_norms(self.base_file, self.horizon, metric)
            self.sensitivity = user_sensitivity(
                norms, max_keys=self.max_keys, max_per_key=self.max_per_key, max_value=self.max_value
            )
            self.bounder = ContributionBounder(self.max_keys, self.max_per_key, self.max_value)
        else:
            if max_keys is not None or max_per_key is not None:
                raise InvalidInputError("--max-keys and --max-per-key are for --privacy-unit user")
            self.sensitivity = self.max_value * self.plan.sensitivity_exact
        self._releases = [
            lattice_release(
                key=self.rng.child(key).key,
                decoder=decoder,
                alphas=self.plan.alphas,
                epsilon=Fraction(self.epsilon),
                sensitivity=self.sensitivity,
                page_size=KEYED_PAGE,
                cached_pages=len(self.plan.alphas) + 2,  # one page per level in use, and one ahead
            )
            for key in self.keys
        ]
        self._batch = _BatchRelease(self._releases)
        self._bars = ErrorBarModel(self)  # every key has the same mechanism and rates: one model
        self.sums = np.zeros(len(self.keys), dtype=np.int64)
        self.released = 0
        self.dropped_unknown = 0
        self._noise_start, self._noise = 0, np.zeros((len(self.keys), 0), dtype=np.int64)

    @property
    def dropped(self) -> dict:
        """Operator counts of dropped events (NOT private: never release them)."""
        return {"unknown_key": self.dropped_unknown, "over_bounds": self.bounder.dropped if self.bounder else 0}

    def summary(self) -> dict:
        """What runs: for the output header."""
        record = {
            "mechanism": f"lifted base {Path(self.base_file).name}",
            "keys": len(self.keys),
            "epsilon": self.epsilon,
            "horizon": self.horizon,
            "max_value": self.max_value,
            "privacy_unit": self.privacy_unit,
            "sensitivity": float(self.sensitivity),
            "seeded": self.rng.seeded,
        }
        if self.bounder is not None:
            record.update(max_keys=self.max_keys, max_per_key=self.max_per_key)
        return record

    def _step_noise(self, t: int) -> np.ndarray:
        """The rounded noise of every key at 0-based step t (computed ahead by chunks)."""
        offset = t - self._noise_start
        if not 0 <= offset < self._noise.shape[1]:
            stop = min(self.horizon, t + self.chunk)
            self._noise = self._batch.noise(t, stop)
            self._noise_start, offset = t, 0
        return self._noise[:, offset]

    def release(self, increments: np.ndarray) -> np.ndarray:
        """Release the next step: ``increments[j]`` is key j's (bounded) input; returns the int64
        private running counts of every key."""
        if self.released >= self.horizon:
            raise InvalidInputError(f"all {self.horizon} steps have been released")
        increments = np.asarray(increments, dtype=np.int64)
        if increments.shape != self.sums.shape:
            raise InvalidInputError(f"expected {len(self.keys)} increments, got shape {increments.shape}")
        sums = self.sums + increments
        counts = sums + self._step_noise(self.released)
        if self.state_path is not None:  # the state first: a crash after it loses no step (``resume``)
            self._persist(released=self.released + 1, sums=sums)
        self.sums = sums
        self.released += 1
        return counts

    # ------------------------------------------------------------------ state files

    def _record(self, *, released: int, sums: np.ndarray) -> dict:
        bounder = None
        if self.bounder is not None:
            bounder = {
                "dropped": self.bounder.dropped,
                "users": {user: self.bounder.user_record(user) for user in self.bounder._keys},
            }
        record = {
            "format": KEYED_STATE_FORMAT,
            "lineage": self.lineage,
            "keys_sha256": self._keys_sha256,
            "base_sha256": _base_sha256(self.base_file, self.horizon, self.metric),
            "epsilon": self.epsilon.hex(),
            "horizon": self.horizon,
            "max_value": self.max_value,
            "privacy_unit": self.privacy_unit,
            "sensitivity": [str(self.sensitivity.numerator), str(self.sensitivity.denominator)],
            "generator": self.rng.to_record(),
            "released": int(released),
            "sums": [int(v) for v in sums],
            "bounder": bounder,
            "dropped_unknown": self.dropped_unknown,
        }
        record["checksum"] = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
        return record

    def _persist(self, *, released: int, sums: np.ndarray) -> None:
        """State, then ledger, both atomic (ledger ≤ state on disk, as for one counter)."""
        assert self.state_path is not None
        atomic_write_text(self.state_path, json.dumps(self._record(released=released, sums=sums), sort_keys=True))
        atomic_write_text(
            self.state_path.with_name(self.state_path.name + LEDGER_SUFFIX),
            json.dumps({"lineage": self.lineage, "released": int(released)}),
        )

    def save_state(self, path: str | os.PathLike) -> Path:
        """Write the state to ``path`` (mode 0600: it holds the generator key), lock it, and keep
        it current before every later release: a resumed run regenerates any step whose rows were
        not written (the same values: the noise is a function of the key and the step)."""
        path = Path(path)
        if not path.parent.is_dir():
            raise StateFileError(f"cannot write {path}: folder {path.parent} does not exist")
        if self._lock is None:
            self._lock = _StateLock(path)
        self.state_path = path
        self._persist(released=self.released, sums=self.sums)
        return path

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self.state_path = None

    @classmethod
    def resume(cls, path: str | os.PathLike, *, keys: Iterable[str], **options) -> KeyedCounters:
        """The keyed run saved in ``path``, bound to it again; ``keys`` and the ``options`` of the
        constructor (ε, horizon, base, m, privacy unit, bounds) must be those it was made with."""
        path = Path(path)
        lock = _StateLock(path)
        try:
            record = _read_keyed_state(path)
            generator = NoiseGenerator.from_record(record["generator"])
            given = options.pop("rng", None)
            if given is not None and given.key != generator.key:
                raise StateFileError(f"{path}: the state was made with another generator (seed)")
            counters = cls(keys=keys, rng=generator, lineage=record["lineage"], **options)
            mine = counters._record(released=record["released"], sums=np.array(record["sums"], dtype=np.int64))
            for name in ("keys_sha256", "base_sha256", "epsilon", "horizon", "max_value", "privacy_unit", "sensitivity"):
                if mine[name] != record[name]:
                    raise StateFileError(f"{path}: the state was made with another {name.replace('_sha256', '')}")
            counters.sums = np.array(record["sums"], dtype=np.int64)
            counters.released = int(record["released"])
            counters.dropped_unknown = int(record["dropped_unknown"])
            if counters.bounder is not None and record["bounder"] is not None:
                counters.bounder.dropped = int(record["bounder"]["dropped"])
                for user, entries in record["bounder"]["users"].items():
                    counters.bounder.restore_user(user, entries)
            counters.state_path, counters._lock = path, lock
            return counters
        except BaseException:
            lock.release()
            raise

    def step_rows(self, step: int, *, beta: float):
        """(counts, std, lower, upper) of the 1-based step ``step`` = the last released one, from
        the state (to complete an output file after a crash: the same values, no new noise)."""
        if step != self.released or step < 1:
            raise InvalidInputError(f"only the last released step ({self.released}) can be regenerated")
        counts = self.sums + self._batch.noise(step - 1, step)[:, 0]
        std, lower, upper = self.intervals(counts, start=step - 1, beta=beta)
        return counts, float(std[0]), lower, upper

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
        if start < 0 or start + steps > self.horizon:
            raise InvalidInputError(f"steps {start + 1} … {start + steps} are outside [1, {self.horizon}]")
        counts = np.empty_like(increments)
        for first in range(0, steps, self.chunk):  # the noise of a chunk of steps at a time, as ``release``
            last = min(steps, first + self.chunk)
            counts[:, first:last] = self._batch.noise(start + first, start + last)
        counts += np.asarray(totals, dtype=np.int64)[:, None] + np.cumsum(increments, axis=1)
        return (counts, *self.intervals(counts, start=start, beta=beta))

    def bars(self, start: int, stop: int, *, beta: float) -> ErrorBars:
        """Error bars of steps start … stop − 1 (0-based), the same for every key."""
        return self._bars.bars(start, stop, beta=beta)

    def intervals(self, counts: np.ndarray, *, start: int, beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(std per step, lower, upper) of released ``counts``: shape (keys,) for the one 0-based
        step ``start``, or (keys, steps) for the steps start, start + 1, …. The interval is the
        guaranteed (1 − β) one cut below at 0 only, as a key's true count is ≥ 0 but has no upper
        bound per step (many events per step)."""
        counts = np.asarray(counts)
        bars = self.bars(start, start + (counts.shape[-1] if counts.ndim > 1 else 1), beta=beta)
        half = bars.half_width if counts.ndim > 1 else bars.half_width[0]
        lower = np.maximum(np.ceil(counts - half).astype(np.int64), 0)
        upper = np.floor(counts + half).astype(np.int64)
        return bars.std, lower, upper

    def admit(self, *, key: str, step: int, value: int, user: str | None = None) -> tuple[int, int]:
        """(key index or −1, kept value) of one event, after the key check and the user's bounds."""
        index = self.index.get(key, -1)
        if index < 0:
            self.dropped_unknown += 1
            return -1, 0
        if not 0 <= value <= self.max_value:
            raise InvalidInputError(f"value {value} is outside [0, {self.max_value}]")
        if self.bounder is not None:
            if user is None:
                raise InvalidInputError("user-level privacy needs the user of every event")
            value = self.bounder.admit(user, index, step, value)
        return index, value


KEYED_STATE_FORMAT = "pure_dp_mf.keyed_state/1"


def _read_keyed_state(path: Path) -> dict:
    """Read and check a keyed state file and its ledger; every problem is a ``StateFileError``."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise StateFileError(f"{path}: cannot read the keyed state ({type(error).__name__})") from None
    if not isinstance(record, dict) or record.get("format") != KEYED_STATE_FORMAT:
        raise StateFileError(f"{path}: not a keyed state file")
    body = {key: value for key, value in record.items() if key != "checksum"}
    if record.get("checksum") != hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest():
        raise StateFileError(f"{path}: corrupted state file (checksum mismatch)")
    ledger_path = path.with_name(path.name + LEDGER_SUFFIX)
    if ledger_path.exists():
        try:
            ledger = json.loads(ledger_path.read_text(encoding="utf-8"))
            if ledger["lineage"] != record["lineage"]:
                raise StateFileError(f"{ledger_path}: the release ledger belongs to another run")
            if int(ledger["released"]) > int(record["released"]):
                raise StateFileError(f"{path}: stale state: resuming would release steps again")
        except (OSError, ValueError, KeyError, TypeError):
            raise StateFileError(f"{ledger_path}: corrupted release ledger") from None
    elif int(record["released"]) > 0:
        raise StateFileError(f"{path}: the release ledger is missing; resuming could release steps again")
    return record


@functools.lru_cache(maxsize=4)
def _mechanism(base_file: str, horizon: int, metric: str):
    """(factorization, lift plan, exact decoder) of a base file for a horizon: computed once per
    process (a Spark executor builds many single-key counters on the same base)."""
    factorization = Factorization.load(base_file)
    return factorization, lift_plan(base=factorization, n=horizon, metric=metric), exact_decoder(factorization)


@functools.lru_cache(maxsize=4)
def _base_sha256(base_file: str, horizon: int, metric: str) -> str:
    """The state's identity of the base: hashed once per process, not per counter or per step."""
    return base_digest(_mechanism(base_file, horizon, metric)[0])


@functools.lru_cache(maxsize=4)
def _column_norms(base_file: str, horizon: int, metric: str) -> tuple[Fraction, ...]:
    factorization = _mechanism(base_file, horizon, metric)[0]
    return tuple(LiftedFamily(base=factorization, metric=metric).column_norms_exact(n=horizon))


def _best_lifted_base(*, horizon: int, epsilon: float, metric: str) -> Path:
    from pure_dp_mf.mechanisms import planner as compare

    rows = [row for row in compare.comparison_rows(n=horizon, epsilon=epsilon, sort_by=metric) if row.mechanism == "lifted"]
    if not rows:
        raise InvalidInputError(f"no lifted base is available for horizon {horizon}")
    return Path(str(rows[0].base_file))


@dataclass
class KeyedEvent:
    key: str
    step: int
    value: int = 1
    user: str | None = None


def run_keyed(counters: KeyedCounters, events: Iterable[KeyedEvent], *, beta: float = 0.05):
    """Release every key at every step through the last step of ``events`` (1-based steps,
    non-decreasing); yields (step, counts of every key, std, lower, upper) per step.

    The events of one step are admitted (key check, user bounds) in the order (key, value): what
    "a user's first K keys and C steps" means does not depend on the order of lines within a step,
    so every engine that sees the same events makes the same decisions."""
    pending = np.zeros(len(counters.keys), dtype=np.int64)
    step_events: list[KeyedEvent] = []

    def admit_step() -> None:
        for event in sorted(step_events, key=lambda e: (e.key, e.value)):
            index, kept = counters.admit(key=event.key, step=event.step, value=event.value, user=event.user)
            if index >= 0:
                pending[index] += kept
        step_events.clear()

    def flush(through: int):
        nonlocal pending
        admit_step()
        while counters.released < through:
            t = counters.released
            counts = counters.release(pending)
            pending = np.zeros_like(pending)
            std, lower, upper = counters.intervals(counts, start=t, beta=beta)
            yield t + 1, counts, float(std[0]), lower, upper

    current = None
    for number, event in enumerate(events, start=1):
        if not 1 <= event.step <= counters.horizon:
            raise InvalidInputError(f"event {number}: step {event.step} is outside [1, {counters.horizon}]")
        if current is not None and event.step < current:
            raise InvalidInputError(f"event {number}: step {event.step} goes backwards (after step {current})")
        if current is None and event.step <= counters.released:
            continue  # a resumed run reads its input again from the beginning: these steps are released
        if not 0 <= event.value <= counters.max_value:
            raise InvalidInputError(f"event {number}: value {event.value} is outside [0, {counters.max_value}]")
        if event.step > counters.released + 1:  # every earlier step, with or without events, is complete
            yield from flush(event.step - 1)
        current = event.step
        step_events.append(event)
    if current is not None:
        yield from flush(current)


class _BatchSource:
    """The integer noise of many keys side by side: ``block`` stacks each key's block as a column."""

    def __init__(self, sources: Sequence) -> None:
        self.sources = list(sources)
        self.columns = len(self.sources)

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray:
        fill_pages(self.sources, offset=offset, size=size, level=level)  # every key's pages in one pass
        return np.stack([source.block(offset, size, level) for source in self.sources], axis=1)

    def blocks(self, offsets: Sequence[int], size: int) -> np.ndarray:
        return np.stack([self.block(offset, size) for offset in offsets])

    @property
    def largest(self) -> float:
        return max(source.largest for source in self.sources)

    @property
    def largest_norm(self) -> float:
        return max(source.largest_norm for source in self.sources)

    @property
    def exact_in_float(self) -> bool:
        return all(source.exact_in_float for source in self.sources)


class _BatchRelease:
    """The rounded noise of every key at once: one matrix product per base block for all keys
    (``LiftedNoise`` on a ``_BatchSource``), each rounding decided as ``lattice.ExactRelease``
    decides it, with the error bound of the largest noise over all keys (the bound grows with it,
    so it holds for every key); undecided entries are computed exactly by that key's release."""

    def __init__(self, releases: Sequence) -> None:
        from pure_dp_mf.engines.continual import LiftedNoise

        self.releases = list(releases)
        first = self.releases[0]
        self.decoder = first.decoder
        self.source = _BatchSource([release.source for release in self.releases])
        self.engine = LiftedNoise(decoder=first.engine.A, alphas=first.engine.alphas, source=self.source)
        self.fallbacks = 0

    def noise(self, start: int, stop: int) -> np.ndarray:
        """Shape (keys, stop − start), int64."""
        out, decided = decide_roundings(
            self.engine.values(start, stop), engine=self.engine, decoder=self.decoder, source=self.source
        )
        for step, key in np.argwhere(~decided):
            out[step, key] = self.releases[key].exact_value(start + int(step))
            self.fallbacks += 1
        return out.T
