"""``pure_dp_mf.Counter``: private running counts with error bars, the one entry point for one stream.

    >>> from pure_dp_mf import Counter
    >>> counter = Counter(epsilon=1.0, horizon=365)            # the best mechanism for 365 steps
    >>> release = counter.update(3)                             # doctest: +SKIP
    >>> release.count, release.std, release.lower, release.upper  # doctest: +SKIP

It runs a ``ContinualCounter`` (``continual.py``) on the mechanism the planner ranks best for
the horizon, ε and metric (or a base, a certificate, or a tree that the caller names), exactly
ε-DP (docs/privacy.md), and attaches to every release its noise standard deviation and a
guaranteed (1 − β) interval for the running count of the values given (the noise only:
``release.error_bars``; for data bounded before it reaches the counter, the bounded count). With ``state=PATH``
the counter is crash-safe: a new state is created, an existing one resumed (locked, checked
against the lineage registry; options that differ from the state's are refused). The command
``pure-dp-mf count`` runs the same class.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.spec import CountSpec, Publication, resolve
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_beta, check_size, check_steps, exact_integers

LOG = logging.getLogger("pure_dp_mf")


@dataclass(frozen=True)
class Release:
    """One released step: the private running count, the standard deviation of its noise, and
    an interval [lower, upper] holding the running count of the values given (the noise only,
    not what bounding or an invalid-input policy left out) with probability ≥ 1 − β (per step)."""

    step: int
    count: int
    std: float
    lower: int
    upper: int


@dataclass(frozen=True)
class Releases:
    """Released steps as columns: 1-based ``steps``, ``counts`` ((m,) or (m, d)), and for one
    count per step its ``std``, ``lower`` and ``upper`` (None for d > 1)."""

    steps: np.ndarray
    counts: np.ndarray
    std: np.ndarray | None
    lower: np.ndarray | None
    upper: np.ndarray | None

    def columns(self) -> dict:
        return {"counts": self.counts, "std": self.std, "lower": self.lower, "upper": self.upper}

    def last(self, rows: int) -> Releases:
        """The last ``rows`` steps."""
        cut = slice(len(self.steps) - rows, None)
        part = lambda column: None if column is None else column[cut]  # noqa: E731
        return Releases(
            steps=self.steps[cut], counts=self.counts[cut], std=part(self.std), lower=part(self.lower), upper=part(self.upper)
        )

    @staticmethod
    def join(first: Releases, second: Releases) -> Releases:
        """``first`` then ``second`` (consecutive steps)."""
        both = lambda a, b: None if a is None or b is None else np.concatenate([a, b])  # noqa: E731
        if first.counts.dtype == second.counts.dtype:
            counts = np.concatenate([first.counts, second.counts])
        else:
            counts = np.array([*first.counts.tolist(), *second.counts.tolist()], dtype=object)
        return Releases(
            steps=np.concatenate([first.steps, second.steps]),
            counts=counts,
            std=both(first.std, second.std),
            lower=both(first.lower, second.lower),
            upper=both(first.upper, second.upper),
        )


class Counter:
    """Private running counts of a stream of integers in [0, ``max_value``], with error bars.

    Args:
        epsilon: the pure-DP budget ε of the whole stream (one step's value changed).
        horizon: the number of steps n that may be released; None: no horizon, an anytime
            counter (``mechanisms.anytime``; a resumed state keeps its own).
        mechanism: "auto" (the best the planner ranks; without a horizon the anytime
            schedule), "lifted", or a tree name.
        metric: what "auto" minimises: "maxse" (the worst step) or "meanse" (the average).
        base, certificate: run this base factorization (lifted), or the base this certificate
            certifies (its claims re-checked), instead of the planner's choice.
        max_value: m; each step's value is an integer in [0, m] (the noise is scaled to m).
        dimension: d counts per step (a step is d integers with sum ≤ m).
        beta: each interval misses the running count of the values given with probability ≤ β.
        monotone: post-process the counts to be non-negative and non-decreasing (an isotonic fit
            of what was released, never changing a past output; no privacy cost:
            ``postprocess.py``). The interval is that of the unprocessed release, cut to [0, m·t]
            but widened where needed to hold the processed count.
        state: a state file: created, or resumed when it exists (crash-safe, never re-releases).
        generator: a noise generator; default a cryptographically secure one. A seeded generator
            (``NoiseGenerator.from_seed``) is for tests and research only: it is not private.
        budget: the name of a budget (``engines.budget``) to charge ε to before the first
            release; refused (``BudgetError``) when it would exceed the budget's total.

    Attributes:
        resumed: True when ``state`` existed and the counter continues it (also logged on the
            "pure_dp_mf" logger).

    Raises:
        InvalidInputError: a bad argument, a state that does not match them, or a released step
            given again with another input.
        BudgetError: ``budget`` unknown, or ε more than it has left.
        StateFileError: a state in use, moved away, closed or damaged, or made with another ε,
            horizon, m or d than given.
        RegistryError: a copy or a stale version of a state, or a generator that already feeds
            another counter (the lineage registry refuses them), or an unreadable registry.
    """

    def __init__(
        self,
        *,
        epsilon: float,
        horizon: int | None = None,
        mechanism: str = "auto",
        metric: str = "maxse",
        base: str | os.PathLike | None = None,
        certificate: str | os.PathLike | None = None,
        max_value: int = 1,
        dimension: int = 1,
        beta: float = 0.05,
        monotone: bool = False,
        state: str | os.PathLike | None = None,
        generator: NoiseGenerator | None = None,
        budget: str | None = None,
    ) -> None:
        spec = CountSpec(
            epsilon=epsilon,
            horizon=horizon,
            mechanism=mechanism,
            metric=metric,
            base=base,  # type: ignore[arg-type]
            certificate=certificate,  # type: ignore[arg-type]
            max_value=max_value,
            dimension=dimension,
            beta=beta,
            monotone=monotone,
            publication=Publication(generator=generator, state=None if state is None else Path(state), budget=budget),
        )
        self._start(spec, route="counter")

    @classmethod
    def from_spec(cls, spec: CountSpec, *, route: str = "counter") -> Counter:
        """The counter of a checked spec (``engines.spec``; the command ``count`` builds one):
        created, or resumed from the spec's state. Its band sets each interval's β (β/n for a
        simultaneous band over the horizon's n steps)."""
        counter = cls.__new__(cls)
        counter._start(spec, route=route)
        return counter

    def _start(self, spec: CountSpec, *, route: str) -> None:
        """Build or resume the counter of ``spec`` (``__init__``), refusing what ``route`` (the
        caller's: ``spec.ROUTES``) does not do."""
        spec.check_route(route)
        self.spec = spec
        self.beta = spec.step_beta(intervals=spec.horizon)
        state, budget = spec.publication.state, spec.publication.budget
        options: dict[str, Any] = {
            "max_value": spec.max_value,
            "dimension": spec.dimension,
            "monotone": spec.monotone,
            "generator": spec.publication.noise_generator(),
        }
        self.resumed = state is not None and Path(state).exists()
        if self.resumed:
            assert state is not None
            self._counter = ContinualCounter.resume(state, epsilon=spec.epsilon, horizon=spec.horizon, **options)
            try:
                self._check_choice(mechanism=spec.mechanism, metric=spec.metric, base=spec.base, certificate=spec.certificate)
            except BaseException:
                self._counter.close()  # a refused resume leaves the state free
                raise
            self._charge(budget, state=state)
            LOG.info("resuming %s after step %d of %s", state, self._counter.released, self._counter.horizon or "∞")
        else:
            resolved = resolve(spec)
            self._counter = ContinualCounter(epsilon=spec.epsilon, mechanism=resolved.mechanism, **options)
            if resolved.row is not None or spec.horizon is None:  # chosen for the metric: --extend keeps it
                self._counter.choice, self._counter.mechanism_metric = resolved.row, spec.metric
            self._charge(budget, state=state)
            if state is not None:
                self._counter.save_state(state)
        if spec.extend:
            if self._counter.horizon is None:
                self._counter.close()
                raise InvalidInputError("--extend: the counter has no horizon; it already goes on without one")
            self.extend_horizon()

    @classmethod
    def open(cls, state: str | os.PathLike, *, beta: float = 0.05, read_only: bool = False) -> Counter:
        """The counter saved in ``state``, as it was made (its ε, horizon, mechanism, m): to read
        its releases back (``releases``) or to go on. Locked and checked like any resumed state;
        with ``read_only`` it only reads (also a state this registry does not know) and releases
        nothing."""
        beta = check_beta(beta, name="beta")
        if not Path(state).exists():
            raise InvalidInputError(f"{state}: no such state")
        counter = cls.__new__(cls)
        counter.beta, counter.resumed = float(beta), True
        counter._counter = ContinualCounter.resume(state, read_only=read_only)
        return counter

    def _charge(self, budget: str | None, *, state) -> None:
        """Check ε against the named budget now (refused: nothing runs, no state is made) and
        charge it with the first released step (``budget.PendingCharge``: in the same transaction
        as that step with a state; once per lineage, so a resumed counter is not charged twice; a
        run that releases nothing is charged nothing)."""
        if budget is None:
            return
        from pure_dp_mf.engines.budget import PendingCharge

        journal = self._counter.journal
        what = f"single counter, {self._counter.mechanism.name}, unit: one step's value ≤ {self._counter.max_value}"
        pending = PendingCharge(
            budget=budget,
            epsilon=self._counter.epsilon,
            lineage=self._counter.lineage,
            what=what + (f", state {state}" if state is not None else ""),
            registry=None if journal is None else journal.registry,
        )
        try:
            if pending.check():
                self._counter.pending_charge = pending
        except BaseException:
            self._counter.close()
            raise

    def _check_choice(self, *, mechanism: str, metric: str, base, certificate) -> None:
        """A resumed counter runs what its state was made with: refuse a different request."""
        record = self._counter.mechanism.record
        if base is not None and record.get("base") != str(Path(base).resolve()):
            raise InvalidInputError(f"the state runs {self._counter.mechanism.name}, not the base {base}")
        if certificate is not None and record.get("certificate") != str(Path(certificate).resolve()):
            raise InvalidInputError(f"the state runs {self._counter.mechanism.name}, not the certificate {certificate}")
        if mechanism not in ("auto", "lifted", record["kind"]) or (
            mechanism == "lifted" and record["kind"] not in ("lifted", "anytime")
        ):
            raise InvalidInputError(f"the state runs {self._counter.mechanism.name}, not mechanism {mechanism!r}")
        recorded = self._counter.mechanism_metric
        if mechanism == "auto" and base is None and certificate is None and recorded is not None and metric != recorded:
            raise InvalidInputError(f"the state was chosen for metric {recorded!r}, not {metric!r}")

    # ------------------------------------------------------------------ what runs

    @property
    def counter(self) -> ContinualCounter:
        """The ``ContinualCounter`` that releases."""
        return self._counter

    @property
    def mechanism(self) -> str:
        """What runs: "lifted base kKKK_metric.npz" or "TREE tree, arity a"."""
        return self._counter.mechanism.name

    @property
    def summary(self) -> dict:
        """What runs, with ε, horizon, m, the noise's sensitivity and the expected MaxSE/MeanSE."""
        return self._counter.summary()

    @property
    def released(self) -> int:
        """How many steps have been released."""
        return self._counter.released

    @property
    def seeded(self) -> bool:
        return self._counter.seeded

    # ------------------------------------------------------------------ releasing

    def release(self, values, *, first_step: int | None = None, error_bars: bool = True) -> Releases:
        """Release the steps ``first_step``, ``first_step`` + 1, … (default the next) with inputs
        ``values`` (one durable commit with a state): their counts and, for one count per step
        with ``error_bars``, each step's std and guaranteed interval.

        Idempotent: a step already released is never drawn again. Given again with the input
        the state's release log holds, its stored release is returned; with another input it is
        refused (``InvalidInputError``) before anything is released. A ``first_step`` beyond the
        next step is refused: the schedule has no gaps (a step without events is a 0)."""
        released = self._counter.released
        if first_step is None or first_step == released + 1:
            return self._release_next(values, error_bars=error_bars)
        first_step = check_size(first_step, name="step")
        if first_step > released + 1:
            raise InvalidInputError(
                f"step {first_step} is ahead of the next step {released + 1}: give every step in between (0 when nothing happened)"
            )
        if self._counter.journal is None:
            raise InvalidInputError(
                f"step {first_step} was released; a counter without a state keeps no release log to return it"
            )
        inputs = check_steps(values, dimension=self._counter.dimension, max_value=self._counter.max_value)
        again = min(len(inputs), released - first_step + 1)
        last = first_step + again - 1
        kept = self._logged(first_step=first_step, last_step=last, inputs=inputs[:again], error_bars=error_bars)
        if again == len(inputs):
            return kept
        return Releases.join(kept, self._release_next(inputs[again:], error_bars=error_bars))

    def _release_next(self, values, *, error_bars: bool) -> Releases:
        first = self._counter.released
        counts = self._counter.counts(values)
        centres = self._counter.last_raw if self._counter.monotone else counts
        return self._releases_of(counts, centres, first=first, error_bars=error_bars)

    def _releases_of(self, counts: np.ndarray, centres: np.ndarray, *, first: int, error_bars: bool = True) -> Releases:
        """Released ``counts`` of the 0-based steps first, first + 1, … with their error bars
        (a function of the step: the same whenever they are computed; none without ``error_bars``)."""
        steps = np.arange(first + 1, first + 1 + len(counts), dtype=np.int64)
        if self._counter.dimension != 1 or not error_bars:
            return Releases(steps=steps, counts=counts, std=None, lower=None, upper=None)
        bars = self._counter.bars(first, first + len(counts), beta=self.beta)
        lower, upper = bars.bounds(centres, first_step=first, max_value=self._counter.max_value, shown=counts)
        return Releases(steps=steps, counts=counts, std=bars.std, lower=lower, upper=upper)

    def releases(self, *, first_step: int = 1, last_step: int | None = None) -> Releases:
        """The released steps ``first_step`` … ``last_step`` (default the last released) read back
        from the state's release log: the counts, std and intervals as they were released; nothing
        is drawn."""
        return self._logged(first_step=first_step, last_step=last_step)

    def _logged(self, *, first_step: int, last_step: int | None, inputs=None, error_bars: bool = True) -> Releases:
        """``releases``; with ``inputs``, refused unless these were the steps' inputs (``release``)."""
        last_step = self._counter.released if last_step is None else last_step
        if not 1 <= first_step <= last_step + 1 or last_step > self._counter.released:
            raise InvalidInputError(f"steps {first_step} … {last_step}: only steps 1 … {self._counter.released} were released")
        rows = self._counter.releases(first_step - 1, last_step)
        d = self._counter.dimension
        if not rows:
            empty = np.zeros((0,) if d == 1 else (0, d), dtype=np.int64)
            return self._releases_of(empty, empty, first=first_step - 1, error_bars=error_bars)
        array = np.array(rows, dtype=object).reshape(len(rows), -1)
        if inputs is not None:
            _check_inputs(np.asarray(inputs).reshape(len(rows), d), array[:, :d], first_step=first_step)
        counts = exact_integers(array[:, d] if d == 1 else array[:, d : 2 * d])
        centres = exact_integers(array[:, d + 1]) if d == 1 and self._counter.monotone else counts
        return self._releases_of(counts, centres, first=first_step - 1, error_bars=error_bars)

    def update_many(self, values: Iterable[int], *, first_step: int | None = None) -> list[Release]:
        """Release the steps from ``first_step`` (default the next; ``release``), one durable
        commit with a state file; one ``Release`` each."""
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise InvalidInputError(f"values must be a sequence of steps' inputs, got {type(values).__name__}")
        values = list(values)
        if not values:
            return []
        released = self.release(values, first_step=first_step)
        if released.std is None or released.lower is None or released.upper is None:
            raise InvalidInputError("Release objects are for one count per step; use release() for d > 1")
        return [
            Release(step=int(t), count=int(c), std=float(s), lower=int(lo), upper=int(hi))
            for t, c, s, lo, hi in zip(released.steps, released.counts, released.std, released.lower, released.upper, strict=True)
        ]

    def update(self, value: int, *, step: int | None = None) -> Release:
        """Release step ``step`` (default the next); a released step given again with the same
        input returns its stored release and draws nothing (``release``)."""
        return self.update_many([value], first_step=step)[0]

    def extend_horizon(self) -> None:
        """Go on past the horizon as an anytime counter (``ContinualCounter.extend_horizon``): the
        released steps and their noise stay; later steps need no horizon."""
        self._counter.extend_horizon()

    def close(self) -> None:
        """Release the state (also released when the process ends); the counter releases nothing more."""
        self._counter.close()

    def __enter__(self) -> Counter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_inputs(given: np.ndarray, kept: np.ndarray, *, first_step: int) -> None:
    """Refuse a released step given again with another input than its release log holds."""
    for offset, (now, before) in enumerate(zip(given.tolist(), kept.tolist(), strict=True)):
        if [int(v) for v in now] != [int(v) for v in before]:  # neither input is shown: they are data
            raise InvalidInputError(
                f"step {first_step + offset} was released from another input than the one given now: a released step is "
                "never drawn again; to publish corrected data, make a new publication (a new --state, a new key)"
            )
