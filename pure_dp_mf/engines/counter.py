"""``pure_dp_mf.Counter``: private running counts with error bars, the one entry point for one stream.

    >>> from pure_dp_mf import Counter
    >>> counter = Counter(epsilon=1.0, horizon=365)            # the best mechanism for 365 steps
    >>> release = counter.update(3)                             # doctest: +SKIP
    >>> release.count, release.std, release.lower, release.upper  # doctest: +SKIP

It runs a ``ContinualCounter`` (``continual.py``) on the mechanism the planner ranks best for
the horizon, ε and metric (or a base, a certificate, or a tree that the caller names), exactly
ε-DP (docs/privacy.md), and attaches to every release its noise standard deviation and a
guaranteed (1 − β) interval for the true count (``release.error_bars``). With ``state=PATH``
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
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.generator import NoiseGenerator
from pure_dp_mf.validation import check_epsilon, check_size

LOG = logging.getLogger("pure_dp_mf")


@dataclass(frozen=True)
class Release:
    """One released step: the private running count, the standard deviation of its noise, and
    an interval [lower, upper] holding the true count with probability ≥ 1 − β (per step)."""

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
        beta: each interval misses the true count with probability ≤ β.
        monotone: post-process the counts to be non-negative and non-decreasing (an isotonic fit
            of what was released, never changing a past output; no privacy cost:
            ``postprocess.py``). The interval stays that of the unprocessed release.
        state: a state file: created, or resumed when it exists (crash-safe, never re-releases).
        rng: a noise generator; default a cryptographically secure one. A seeded generator
            (``NoiseGenerator.from_seed``) is for tests and research only: it is not private.

    Attributes:
        resumed: True when ``state`` existed and the counter continues it (also logged on the
            "pure_dp_mf" logger).

    Raises:
        InvalidInputError: a bad argument, or a state that does not match them.
        StateFileError: a state in use, moved away, closed or damaged.
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
        rng: NoiseGenerator | None = None,
    ) -> None:
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < 1:
            raise InvalidInputError(f"beta must be a number in (0, 1), got {beta!r}")
        if state is not None and not isinstance(state, (str, os.PathLike)):
            raise InvalidInputError(f"state must be a path, got {type(state).__name__}")
        if rng is not None and not isinstance(rng, NoiseGenerator):
            raise InvalidInputError(f"rng must be a NoiseGenerator, got {type(rng).__name__}")
        if base is not None and certificate is not None:
            raise InvalidInputError("give a base or a certificate, not both (a certificate names its base)")
        if (base is not None or certificate is not None) and mechanism not in ("auto", "lifted"):
            raise InvalidInputError(f"mechanism {mechanism!r} is a tree; a base or a certificate chooses a lifted base")
        self.beta = float(beta)
        epsilon = check_epsilon(epsilon)
        horizon = None if horizon is None else check_size(horizon, name="horizon")
        options: dict[str, Any] = {"max_value": max_value, "dimension": dimension, "monotone": monotone, "rng": rng}
        self.resumed = state is not None and Path(state).exists()
        if self.resumed:
            assert state is not None
            self._counter = ContinualCounter.resume(state, epsilon=epsilon, horizon=horizon, **options)
            self._check_choice(mechanism=mechanism, metric=metric, base=base, certificate=certificate)
            LOG.info("resuming %s after step %d of %s", state, self._counter.released, self._counter.horizon or "∞")
        else:
            if horizon is None:
                if base is not None or certificate is not None or mechanism not in ("auto", "anytime"):
                    raise InvalidInputError(
                        "without a horizon the counter runs the anytime schedule: give --horizon to run a base, a certificate or a tree"
                    )
                self._counter = ContinualCounter.anytime(epsilon=epsilon, metric=metric, **options)
            elif certificate is not None:
                self._counter = ContinualCounter.from_certificate(certificate, epsilon=epsilon, horizon=horizon, **options)
            elif base is not None:
                self._counter = ContinualCounter(epsilon=epsilon, base=base, horizon=horizon, metric=metric, **options)
            else:
                self._counter = ContinualCounter.for_horizon(
                    epsilon=epsilon, horizon=horizon, metric=metric, mechanism=mechanism, **options
                )
            if state is not None:
                self._counter.save_state(state)

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

    def release(self, values) -> Releases:
        """Release the next steps (one durable commit with a state): their counts and, for one
        count per step, each step's std and guaranteed interval."""
        first = self._counter.released
        counts = self._counter.counts(values)
        steps = np.arange(first + 1, first + 1 + len(counts), dtype=np.int64)
        if self._counter.dimension != 1:
            return Releases(steps=steps, counts=counts, std=None, lower=None, upper=None)
        centres = self._counter.last_raw if self._counter.monotone else counts
        bars = self._counter.bars(first, first + len(counts), beta=self.beta)
        lower, upper = bars.bounds(centres, first_step=first, max_value=self._counter.max_value)
        return Releases(steps=steps, counts=counts, std=bars.std, lower=lower, upper=upper)

    def extend(self, values: Iterable[int]) -> list[Release]:
        """Release the next steps (one durable commit with a state file); one ``Release`` each."""
        values = list(values)
        if not values:
            return []
        released = self.release(values)
        if released.std is None or released.lower is None or released.upper is None:
            raise InvalidInputError("Release objects are for one count per step; use release() for d > 1")
        return [
            Release(step=int(t), count=int(c), std=float(s), lower=int(lo), upper=int(hi))
            for t, c, s, lo, hi in zip(released.steps, released.counts, released.std, released.lower, released.upper, strict=True)
        ]

    def update(self, value: int) -> Release:
        """Release the next step."""
        return self.extend([value])[0]

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
