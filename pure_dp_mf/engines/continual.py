"""The continual counter: one stream, any mechanism, exact pure ε-DP releases, a crash-safe journal.

Arkhipov & Kalinin, Algorithm 3, made exactly ε-DP. For a stream of steps x_t ∈ {0, …, m} (or
vectors of ℓ1 norm ≤ m) the counter releases S_t + ⌊2^-g·(L̄·Y)_t + ½⌋, S_t the exact prefix
sum, L̄ the mechanism's decoder (``mechanisms.mechanism``: a lifted base or a tree), Y integer
discrete Laplace noise on the encoder's lattice with the rates of ``Mechanism.rates`` for the
total sensitivity Δ_step·Δ, every rounding decided exactly (``release.lattice.ExactRelease``;
the theorem and its proof are in docs/privacy.md). Each of the d coordinates of a vector stream
has its own noise (``NoiseGenerator.coordinate``).

State: ``save_state(path)`` (or ``resume(path)``) binds the counter to a journal
(``journal.py``): every ``counts`` call commits the new released count, the prefix sums and the
released rows in one durable transaction before returning them (a group commit of all the
steps of the call), with the lineage's record in the registry; the journal is locked for the
counter's life, refuses copies and stale versions, and keeps every released row, so that an
output can be completed after a crash (``complete_output``) and a released step read back
(``releases``). A closed or moved-away counter refuses to release.
"""

from __future__ import annotations

import codecs
import json
import os
import uuid
import warnings
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import IO, Any

import numpy as np

import pure_dp_mf
from pure_dp_mf.engines import ledger
from pure_dp_mf.engines.budget import charge_with_release
from pure_dp_mf.engines.generator import NoiseGenerator, claim_in_process, mark_exported
from pure_dp_mf.engines.journal import Journal, StateFileError, storage_error
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms.anytime import AnytimeMechanism
from pure_dp_mf.mechanisms.mechanism import Mechanism
from pure_dp_mf.mechanisms.resolve import from_record, resolve_mechanism
from pure_dp_mf.release.error_bars import ErrorBars
from pure_dp_mf.release.lattice import float_upper
from pure_dp_mf.release.postprocess import MonotoneFit
from pure_dp_mf.validation import check_epsilon, check_size, check_steps

CHUNK = 1 << 15  # steps of noise computed ahead by the counter
SAFE = 2**62  # sums and noise below this stay exact in int64


class _CounterState:
    """The state side of ``ContinualCounter``: binding to a journal (``save_state``), restoring
    from one (``_restore``), reading the kept releases back, closing."""

    journal: Journal | None
    closed: bool
    released: int
    _sums: list[int]
    _fit: MonotoneFit | None
    last_release: list[int] | None
    mechanism_metric: str | None
    choice: Any

    def _restore(self, journal: Journal) -> None:
        progress = journal.progress
        self.released, self._sums = journal.released, [int(v) for v in progress["sums"]]
        self.last_release = progress.get("last_release")
        self.mechanism_metric = journal.header.get("planned_for")
        if progress.get("fit") is not None:
            self._fit = MonotoneFit.from_record(progress["fit"])
        self.choice = None
        self.journal = journal

    def releases(self, start: int = 0, stop: int | None = None) -> list[list[int]]:
        """The kept rows of the released steps [start, stop) (0-based; a state keeps every one):
        [input values (d), released values (d) (with monotone: the processed, then the raw)]."""
        if self.journal is None:
            raise StateFileError("releases are kept in the state: give the counter a state (save_state)")
        stop = self.released if stop is None else stop
        return [[int(v) for v in row] for row in self.journal.rows(start, stop)]

    def save_state(self, path: str | os.PathLike, *, registry_path: str | os.PathLike | None = None) -> Path:
        """Bind the counter to a new state at ``path`` (mode 0600: it holds the generator key) and
        commit every later release there first; a counter that has a state moves it to ``path``
        (the old file is marked moved and refused thereafter)."""
        if self.closed:
            raise StateFileError("the counter was closed; it cannot save a state")
        if self.journal is not None:
            self.journal.move(path)
            return self.journal.path
        journal = Journal.create(
            path,
            header=_header(self),  # type: ignore[arg-type]  # a ContinualCounter
            progress=_progress(self._sums, None, self._fit),
            history=True,
            registry=registry_path,
        )
        if self.released:
            journal.commit(released=self.released, progress=_progress(self._sums, self.last_release, self._fit))
        self.journal = journal
        ledger.claim_home(self.lineage)  # type: ignore[attr-defined]  # a ContinualCounter
        return journal.path

    @property
    def state_path(self) -> Path | None:
        return None if self.journal is None else self.journal.path

    def close(self) -> None:
        """Release the state (also released when the process ends); the counter releases nothing more."""
        if self.journal is not None:
            self.journal.close()
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ContinualCounter(_CounterState):
    """ε-DP continual counting of one stream with a ``Mechanism`` (module docstring): ``counts(xs)``
    releases the next steps (int64, (m,) or (m, d); exact Python ints beyond int64), ``update(x)`` one.

    Privacy guarantee: the released sequence is exactly ε-DP with respect to changing the value
    of any one step (d = 1: by at most Δ_step = m; d > 1: replacing a step's vector by another of
    ℓ1 norm ≤ m, Δ_step = 2m), for the code as it runs, floats included (docs/privacy.md,
    "Theorem"); computational with a secure generator (keyed SHAKE-256), none with a
    seeded one. Args: ``mechanism`` (or a ``base`` with ``horizon`` and ``metric``), ε, d and m,
    ``monotone`` post-processing (no privacy cost), ``generator`` (default secure)."""

    def __init__(
        self,
        *,
        epsilon: float,
        mechanism: Mechanism | AnytimeMechanism | None = None,
        base: Factorization | str | os.PathLike | None = None,
        horizon: int | None = None,
        metric: str | None = None,
        dimension: int = 1,
        max_value: int = 1,
        monotone: bool = False,
        generator: NoiseGenerator | None = None,
        _lineage: str | None = None,
    ) -> None:
        if mechanism is not None and base is not None:
            raise InvalidInputError("give a mechanism or a base (with its horizon), not both")
        if mechanism is None and base is None:
            raise InvalidInputError(
                "give a mechanism (mechanism=…) or a base with its horizon (base=…, horizon=…); "
                "Counter plans one from epsilon and horizon alone"
            )
        if mechanism is None:
            mechanism = resolve_mechanism(horizon=check_size(horizon, name="horizon"), base=base, metric=metric).mechanism  # type: ignore[arg-type]
        elif horizon is not None and horizon != mechanism.horizon:
            raise InvalidInputError(f"the mechanism is for horizon {mechanism.horizon}, not {horizon}")
        self.mechanism: Any = mechanism  # a Mechanism, or an AnytimeMechanism (no horizon)
        self.epsilon = check_epsilon(epsilon)
        self.horizon = mechanism.horizon
        self.dimension = check_size(dimension, name="dimension")
        self.max_value = check_size(max_value, name="max_value", minimum=1)
        if monotone and self.dimension != 1:
            raise InvalidInputError("monotone post-processing is for dimension 1 (one running count)")
        self.monotone = bool(monotone)
        self.generator = generator if generator is not None else NoiseGenerator.secure()
        if not isinstance(self.generator, NoiseGenerator):
            raise InvalidInputError(f"generator must be a NoiseGenerator, got {type(self.generator).__name__}")
        self.step_sensitivity = self.max_value if self.dimension == 1 else 2 * self.max_value
        self.sensitivity = mechanism.sensitivity  # None for an anytime mechanism (one per segment)
        self._release: Any = mechanism.release(
            generators=self._generators(), epsilon=self.epsilon, step_sensitivity=self.step_sensitivity
        )
        self.lineage = _lineage or uuid.uuid4().hex
        claim_in_process(self.generator, lineage=self.lineage)
        if _lineage is not None:  # a lineage from outside (a state): its key may serve other runs (``ledger``)
            mark_exported(self.generator)
        if self.generator.seeded:
            warnings.warn("seeded noise (NoiseGenerator.from_seed): not private, for tests and research only", stacklevel=2)
        self.released = 0
        self._sums: list[int] = [0] * self.dimension
        self._fit: MonotoneFit | None = MonotoneFit() if monotone else None
        self.last_raw: np.ndarray = np.zeros(0, dtype=np.int64)  # with monotone: the last call's unprocessed releases
        self.last_release: list[int] | None = None
        self.choice: Any = None  # the planner row this counter was chosen by, if any
        self.mechanism_metric: str | None = None  # the metric the planner chose it for
        self.journal: Journal | None = None
        self.closed = False
        self._ahead = _Ahead(self._release, horizon=self.horizon, dimension=self.dimension)
        self._guard: Any = None  # the ledger's claim on this counter's publication (``ledger.guard_for``)
        self.corrects: str | None = None  # the publication this counter corrects, if any
        self.pending_charge: Any = None  # a ``budget.PendingCharge``, made with the first released step

    # ------------------------------------------------------------------ constructors

    @classmethod
    def for_horizon(
        cls, *, epsilon: float, horizon: int, metric: str = "maxse", mechanism: str = "auto", **options
    ) -> ContinualCounter:
        """The counter of the mechanism the planner ranks best for (horizon, ε, metric)
        (``planner.choose``: every shipped lifted base and the five trees; "lifted" or a tree
        name restricts the choice); the row is kept in ``choice``."""
        resolved = resolve_mechanism(horizon=horizon, metric=metric, mechanism=mechanism, epsilon=check_epsilon(epsilon))
        counter = cls(epsilon=epsilon, mechanism=resolved.mechanism, **options)
        counter.choice, counter.mechanism_metric = resolved.row, metric
        return counter

    @classmethod
    def anytime(cls, *, epsilon: float, metric: str = "maxse", **options) -> ContinualCounter:
        """A counter without a horizon: the shipped anytime schedule for ``metric``
        (``mechanisms.anytime``: segments of lifted counters, each at the full ε on its own steps)."""
        counter = cls(epsilon=epsilon, mechanism=resolve_mechanism(horizon=None, metric=metric).mechanism, **options)
        counter.mechanism_metric = metric
        return counter

    def extend_horizon(self, *, metric: str | None = None) -> None:
        """Go on past the horizon as an anytime counter (``anytime.extended_schedule``): the
        mechanism so far becomes segment 0 with its own noise (nothing is released again or
        redrawn), later steps run the anytime segments, each ε-DP on its own steps (parallel
        composition: docs/privacy.md, "The anytime counter"). Public: it depends on the horizon
        and ``metric`` only; a state records the new schedule before any later step."""
        from pure_dp_mf.mechanisms.anytime import AnytimeMechanism, extended_schedule

        if self.closed:
            raise StateFileError("the counter was closed or its state moved away; it cannot be extended")
        if self.horizon is None:
            raise InvalidInputError("the counter has no horizon: it already goes on without one")
        metric = metric or self.mechanism_metric or self.mechanism.record.get("metric") or "maxse"
        guard = ledger.guard_for(self, self.publication_spec)  # the publication as it was, claimed before it changes
        schedule = extended_schedule(prefix=self.mechanism.record, horizon=self.horizon, metric=metric)
        mechanism = AnytimeMechanism(schedule=schedule, name=f"{self.mechanism.name} to step {self.horizon}, then anytime")
        release = mechanism.release(generators=self._generators(), epsilon=self.epsilon, step_sensitivity=self.step_sensitivity)
        self.mechanism, self.horizon, self._release, self.mechanism_metric = mechanism, None, release, metric
        self.sensitivity = mechanism.sensitivity  # None: one per segment, as for a counter resumed from this state
        self._ahead = _Ahead(release, horizon=None, dimension=self.dimension)
        if guard is not None:
            guard.extend(_publication_spec(self))
        if self.journal is not None:
            changed = ("what", "mechanism", "horizon", "sensitivity", "planned_for", "summary")
            self.journal.update_header({name: value for name, value in _header(self).items() if name in changed})

    def _generators(self) -> list[NoiseGenerator]:
        """One generator per coordinate of the stream (the counter's own for d = 1)."""
        return [self.generator] if self.dimension == 1 else [self.generator.coordinate(i) for i in range(self.dimension)]

    @classmethod
    def from_certificate(cls, certificate: str | os.PathLike, *, epsilon: float, horizon: int, **options) -> ContinualCounter:
        """A counter on the base that ``certificate`` certifies (its sha256 and sensitivity claim
        re-checked exactly: ``mechanism.lifted``), lifted to ``horizon``."""
        mechanism = resolve_mechanism(horizon=horizon, certificate=certificate).mechanism
        return cls(epsilon=epsilon, mechanism=mechanism, **options)

    @classmethod
    def resume(
        cls, path: str | os.PathLike, *, registry_path: str | os.PathLike | None = None, read_only: bool = False, **expected
    ) -> ContinualCounter:
        """The counter saved in ``path``, bound to it again (locked, checked against the registry).
        Options given in ``expected`` (epsilon, horizon, max_value, monotone, dimension, generator)
        must match the state's. ``read_only``: to read its releases back only (``Journal.open``)."""
        journal = Journal.open(path, registry=registry_path, read_only=read_only)
        try:
            header = journal.header
            if header.get("engine") != "continual":
                hint = "; open it with KeyedCounters.open" if header.get("engine") == "keyed" else ""
                raise StateFileError(f"{path}: the state is not a single counter's (it is {header.get('engine')!r}){hint}")
            _check_expected(path, header, expected)
            counter = cls(
                epsilon=float.fromhex(header["epsilon"]),
                mechanism=from_record(header["mechanism"], horizon=header["horizon"]),
                dimension=header["dimension"],
                max_value=header["max_value"],
                monotone=header["monotone"],
                generator=NoiseGenerator.from_record(header["generator"]),
                _lineage=header["lineage"],
            )
            counter._restore(journal)
            if not read_only:
                ledger.claim_home(counter.lineage)
            return counter
        except BaseException:
            journal.close()
            raise

    # ------------------------------------------------------------------ releasing

    @property
    def seeded(self) -> bool:
        """True when the noise comes from a seeded (public, non-private) generator."""
        return self.generator.seeded

    @property
    def rates(self):
        """The noise rates of every level (a known-horizon mechanism)."""
        return self._release.rates

    @property
    def lattice_sources(self) -> list:
        """The integer noise sources, one per coordinate (a known-horizon mechanism)."""
        return self._release.sources

    @property
    def scale(self) -> float:
        """b = Δ_step·Δ/ε rounded up: the Laplace scale of the noise (a known-horizon mechanism)."""
        if self.sensitivity is None:
            raise InvalidInputError("an anytime counter has one noise scale per segment")
        return float_upper(self.step_sensitivity * self.sensitivity / Fraction(self.epsilon))

    @property
    def fallbacks(self) -> int:
        """Values whose rounding was decided in rational arithmetic (``ExactRelease``)."""
        return self._release.fallbacks

    @property
    def prefix_sums(self) -> np.ndarray:
        """The exact running counts S_t (not private: never release them)."""
        return np.array(self._sums, dtype=object if max(map(abs, self._sums)) >= SAFE else np.int64)

    def counts(self, values) -> np.ndarray:
        """Release the next steps: int64 array of shape (m,) (d = 1) or (m, d)."""
        if self.closed or (self.journal is not None and self.journal.read_only):
            raise StateFileError("the counter was closed, its state moved away or opened to read only; it releases nothing more")
        steps = check_steps(values, dimension=self.dimension, max_value=self.max_value)
        m = steps.shape[0]
        if self.horizon is not None and self.released + m > self.horizon:
            raise InvalidInputError(f"{m} more steps would exceed the horizon {self.horizon} ({self.released} already released)")
        if m == 0:
            return np.zeros((0,) if self.dimension == 1 else (0, self.dimension), dtype=np.int64)
        also = self._claim_steps(self.released, lambda: [_step_bytes(row) for row in steps])
        noise = self._ahead.noise(self.released, self.released + m)
        released = _exact_sum(np.array(self._sums, dtype=object), steps, noise, bound=self.max_value * (self.released + m))
        rows, fit = released, self._fit
        if self._fit is not None:  # post-processing (postprocess.py); rows hold (processed, unprocessed)
            fit, shown = self._fit.extended(released[:, 0].tolist(), first_step=self.released, max_value=self.max_value)
            rows = np.column_stack([shown, released[:, 0]])
        sums = [int(v) for v in (np.array(self._sums, dtype=object) + steps.astype(object).sum(axis=0))]
        if self.journal is not None:  # one durable commit for the whole call, before any release
            self.journal.commit(
                released=self.released + m,
                progress=_progress(sums, rows[-1], fit),
                first=self.released,
                rows=np.column_stack([steps, rows]),
                also=also,
            )
        self.pending_charge = None
        self.released += m
        self._sums, self._fit = sums, fit
        self.last_release = [int(v) for v in rows[-1]]
        if self.monotone:
            self.last_raw = released[:, 0]
            return rows[:, 0]
        return released[:, 0] if self.dimension == 1 else released

    def publication_spec(self) -> dict:
        """What this counter's publication releases (``_publication_spec``; ``ledger.Publication``)."""
        return _publication_spec(self)

    def _claim_steps(self, first: int, inputs: Callable[[], list[bytes]]):
        """Before steps ``first`` … are drawn: the publication's ledger check of their inputs (for a
        key that left the process, ``ledger.guard_for``) and the pending budget charge, charged now
        without a state, or returned as the journal commit's ``also`` (one transaction)."""
        guard = ledger.guard_for(self, self.publication_spec)
        if guard is not None:
            guard.check(first=first, inputs=inputs())
        return charge_with_release(self)

    def update(self, value) -> int | np.ndarray:
        """Release the next step; returns an int (d = 1) or an int64 vector (d > 1)."""
        if self.dimension > 1:
            return self.counts(np.asarray(value, dtype=object).reshape(1, -1) if np.ndim(value) == 1 else value)[0]
        quick = _quick_update(self, value)
        return int(self.counts([value])[0]) if quick is None else quick

    def bars(self, start: int, stop: int, *, beta: float) -> ErrorBars:
        """The error bars of steps start … stop − 1 (0-based): each release's noise std and its
        guaranteed (1 − β) half-width (``release.error_bars``)."""
        return self._release.bars(start, stop, beta=beta)

    def summary(self) -> dict:
        """What runs, for headers and logs (``counter_summary``)."""
        return counter_summary(self)

    def __repr__(self) -> str:
        return (
            f"ContinualCounter({self.mechanism.name}, epsilon={self.epsilon}, horizon={self.horizon}, "
            f"dimension={self.dimension}, released={self.released}, seeded={self.seeded})"
        )


def _quick_update(counter: ContinualCounter, value) -> int | None:
    """``counts([value])[0]`` without the batch machinery, for the common case (one count,
    no monotone fit, an int in [0, m], every number far inside int64): the same noise, the
    same journal commit (rows and progress as ``counts`` writes them), the same result; None
    where ``counts`` must decide (errors included)."""
    if (
        counter._fit is not None
        or counter.closed
        or counter.journal is not None
        and counter.journal.read_only
        or type(value) not in (int, np.int64)
        or not 0 <= value <= counter.max_value
    ):
        return None
    t = counter.released
    if (counter.horizon is not None and t >= counter.horizon) or counter.max_value * (t + 1) >= SAFE:
        return None
    noise = counter._ahead.noise(t, t + 1)
    if noise.dtype == object or not -SAFE < int(noise[0, 0]) < SAFE or abs(counter._sums[0]) >= SAFE:
        return None
    also = counter._claim_steps(t, lambda: [b"[%d]" % int(value)])
    total = counter._sums[0] + int(value)
    count = total + int(noise[0, 0])
    if counter.journal is not None:
        rows = np.array([[int(value), count]], dtype=np.int64)
        counter.journal.commit(released=t + 1, progress=_progress([total], [count], None), first=t, rows=rows, also=also)
    counter.pending_charge = None
    counter.released, counter._sums, counter.last_release = t + 1, [total], [count]
    return count


class _Ahead:
    """The rounded noise ⌊2^-g·(L̄·Y)_t + ½⌋ of a counter, computed ahead in chunks of ``CHUNK``
    steps (the noise does not depend on the data), shape (steps, d)."""

    def __init__(self, release, *, horizon: int | None, dimension: int) -> None:
        self.release, self.horizon, self.dimension = release, horizon, dimension
        self.start, self.buffer = 0, np.zeros((0, dimension), dtype=np.int64)

    def noise(self, start: int, stop: int) -> np.ndarray:
        if not (self.start <= start and stop <= self.start + len(self.buffer)):
            chunk_stop = max(stop, start + CHUNK)
            if self.horizon is not None:
                chunk_stop = min(self.horizon, chunk_stop)
            self.start, self.buffer = start, self.release.noise(start, chunk_stop).reshape(chunk_stop - start, self.dimension)
        return self.buffer[start - self.start : stop - self.start]


def _progress(sums: Sequence[int], last, fit: MonotoneFit | None) -> dict:
    """A single counter's progress record in its journal."""
    return {
        "sums": [int(v) for v in sums],
        "last_release": None if last is None else [int(v) for v in last],
        "fit": None if fit is None else fit.to_record(),
    }


def _step_bytes(row) -> bytes:
    """One step's input as the ledger digests it: its integers as JSON ("[1]", "[0, 2]")."""
    return json.dumps([int(v) for v in np.atleast_1d(row)]).encode()


def _publication_spec(counter: ContinualCounter) -> dict:
    """What a single counter's publication releases (public options only): the ledger refuses
    the same key under other options."""
    return {
        "engine": "continual",
        "mechanism": counter.mechanism.name,
        "horizon": counter.horizon,
        "sensitivity": None if counter.sensitivity is None else str(counter.sensitivity),
        "epsilon": counter.epsilon.hex(),
        "dimension": counter.dimension,
        "max_value": counter.max_value,
        "monotone": counter.monotone,
        "privacy_unit": "step",
    }


def _header(counter: ContinualCounter) -> dict:
    """A single counter's state header: what it runs and its generator (the state is secret)."""
    return {
        "engine": "continual",
        "library_version": pure_dp_mf.__version__,
        "lineage": counter.lineage,
        "what": counter.mechanism.name,
        "mechanism": counter.mechanism.record,
        "epsilon": counter.epsilon.hex(),
        "horizon": counter.horizon,
        "dimension": counter.dimension,
        "max_value": counter.max_value,
        "monotone": counter.monotone,
        "sensitivity": None
        if counter.sensitivity is None
        else [str(counter.sensitivity.numerator), str(counter.sensitivity.denominator)],
        "generator": counter.generator.to_record(),
        "planned_for": counter.mechanism_metric,
        "summary": counter_summary(counter),
    }


def counter_summary(counter: ContinualCounter) -> dict:
    """What runs, for headers and logs: the mechanism, ε, horizon, m, the exact sensitivity
    Δ_step·Δ of the noise, and the mechanism's expected MaxSE and MeanSE at this ε and m."""
    record: dict[str, Any] = {
        "mechanism": counter.mechanism.name,
        "certificate": Path(counter.mechanism.record["certificate"]).name
        if counter.mechanism.record.get("certificate")
        else None,
        "epsilon": counter.epsilon,
        "horizon": counter.horizon,
        "max_value": counter.max_value,
        "dimension": counter.dimension,
        "sensitivity": None if counter.sensitivity is None else float(counter.step_sensitivity * counter.sensitivity),
        "monotone": counter.monotone,
        "seeded": counter.seeded,
    }
    if counter.mechanism.expected:
        factor = counter.step_sensitivity**2 / counter.epsilon**2
        record["expected"] = {
            "mechanism": counter.mechanism.name,
            "max_se": factor * counter.mechanism.expected["max_se"],
            "mean_se": factor * counter.mechanism.expected["mean_se"],
        }
    return record


def _exact_sum(sums: np.ndarray, steps: np.ndarray, noise: np.ndarray, *, bound: int) -> np.ndarray:
    """sums + cumsum(steps) + noise, exactly: in int64 when every value provably fits (the
    running counts are at most ``bound`` and the noise below 2^62 in magnitude), else in Python ints."""
    small = noise.dtype != object and bound < SAFE and int(np.abs(noise).max(initial=0)) < SAFE and max(map(abs, sums)) < SAFE
    if small:
        return sums.astype(np.int64) + np.cumsum(steps.astype(np.int64), axis=0) + noise
    total = np.cumsum(steps.astype(object), axis=0) + sums[None, :]
    return total + noise.astype(object)


def _check_expected(path, header: dict, expected: dict) -> None:
    """Refuse options that differ from the state's (a resumed counter runs what it started with)."""
    state = {
        "epsilon": float.fromhex(header["epsilon"]),
        "horizon": header["horizon"],
        "max_value": header["max_value"],
        "monotone": header["monotone"],
        "dimension": header["dimension"],
    }
    for name, value in expected.items():
        if value is None:
            continue
        if name == "generator":
            given = NoiseGenerator.from_record(header["generator"])
            if value.key != given.key or value.seeded != given.seeded:
                raise StateFileError(f"{path}: the state was made with another generator (seed)")
        elif name == "monotone" and bool(value) != state["monotone"]:
            made = "with" if state["monotone"] else "without"
            raise StateFileError(f"{path}: the state was made {made} monotone post-processing")
        elif name == "epsilon" and check_epsilon(value) != state["epsilon"]:
            raise StateFileError(f"{path}: the state is for epsilon {state['epsilon']}, not {value}")
        elif name in state and name != "epsilon" and state[name] != value:
            raise StateFileError(f"{path}: the state is for {name.replace('_', ' ')} {state[name]}, not {value}")


def complete_output(path: Path, *, journal: Journal, render, header: str | None, rows_of=None) -> IO[str]:
    """Open the output ``path`` of a resumed run for appending so that it holds exactly the released
    steps, one record each (after a kill the state may be ahead of the file: the missing steps'
    rows, kept in the state, are written again: the same values, no new noise). A partial last
    line is cut. ``render(first_step, rows)`` formats kept rows; ``header``, if given, is the
    file's first line(s). Only a regular file is completed, and it is read only up to one line
    past what the state released (a device such as /dev/full or /dev/zero reads forever)."""
    header_lines = 0 if header is None else header.count("\n") + 1
    if path.exists() and not path.is_file():
        raise InvalidInputError(f"--output {path} is not a regular file: a resumed run completes its output file in place")
    count, complete, total = _complete_lines(path, limit=header_lines + journal.released) if path.exists() else (0, 0, 0)
    lines = max(count - header_lines, 0)
    if count > header_lines + journal.released:
        raise InvalidInputError(f"{path} has more lines than the {journal.released} steps the state has released")
    try:
        stream = open(path, "a", encoding="utf-8")
        if complete != total:  # a partial last line
            stream.truncate(complete)
        if header is not None and not complete:
            stream.write(header + "\n")
        if lines < journal.released:
            kept = journal.rows(lines, journal.released)
            stream.write(render(lines, kept if rows_of is None else rows_of(kept)))
            stream.flush()
    except OSError as error:
        raise storage_error(path, error) from None
    return stream


def _complete_lines(path: Path, *, limit: int) -> tuple[int, int, int]:
    """(complete lines, bytes up to the last newline, bytes read) of the output ``path``, read in
    chunks and stopped once it holds more than ``limit`` lines; refuses text that is not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    count = complete = total = 0
    try:
        with open(path, "rb") as handle:
            while count <= limit and (chunk := handle.read(1 << 20)):
                decoder.decode(chunk)
                newlines = chunk.count(b"\n")
                if newlines:
                    complete = total + chunk.rfind(b"\n") + 1
                count, total = count + newlines, total + len(chunk)
            if count <= limit:
                decoder.decode(b"", final=True)  # the whole file read: no character cut at its end
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"cannot read the output {path} to complete it: {error}") from None
    return count, complete, total
