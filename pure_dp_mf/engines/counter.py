"""``pure_dp_mf.Counter``: private running counts with error bars, the one entry point.

    >>> from pure_dp_mf import Counter
    >>> counter = Counter(epsilon=1.0, horizon=365)            # the best mechanism for 365 steps
    >>> release = counter.update(3)                             # doctest: +SKIP
    >>> release.count, release.std, release.lower, release.upper  # doctest: +SKIP

It runs ``stream.ContinualCounter.for_horizon`` (the mechanism ``compare`` ranks best for the
horizon, ε and metric, exactly ε-DP: docs/privacy.md) and attaches to every release its noise
standard deviation and a guaranteed (1 − β) interval for the true count (``error_bars.py``).
With ``state=PATH`` the counter is crash-safe: a new state is created, an existing one resumed
(with its lock and ledger, docs/streaming.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.error_bars import ErrorBarModel
from pure_dp_mf.release.generator import NoiseGenerator


@dataclass(frozen=True)
class Release:
    """One released step: the private running count, the standard deviation of its noise, and
    an interval [lower, upper] holding the true count with probability ≥ 1 − β (per step)."""

    step: int
    count: int
    std: float
    lower: int
    upper: int


class Counter:
    """Private running counts of a stream of integers in [0, ``max_value``], with error bars.

    Args:
        epsilon: the pure-DP budget ε of the whole stream (event level: one step changed).
        horizon: the number of steps n that may be released.
        mechanism: "auto" (the best that ``compare`` ranks), "lifted", or a tree name.
        metric: what "auto" minimises: "maxse" (the worst step) or "meanse" (the average).
        max_value: m; each step's value is an integer in [0, m] (the noise is scaled to m).
        beta: each interval misses the true count with probability ≤ β.
        monotone: post-process the counts to be non-negative and non-decreasing (an isotonic fit
            of what was released, never changing a past output; no privacy cost:
            ``postprocess.py``). The interval stays that of the unprocessed release.
        state: a state file: created, or resumed when it exists (crash-safe, never re-releases).
        rng: a noise generator; default a cryptographically secure one. A seeded generator
            (``NoiseGenerator.from_seed``) is for tests and research only: it is not private.

    Raises:
        InvalidInputError: a bad argument, or a state that does not match them.
    """

    def __init__(
        self,
        *,
        epsilon: float,
        horizon: int,
        mechanism: str = "auto",
        metric: str = "maxse",
        max_value: int = 1,
        beta: float = 0.05,
        monotone: bool = False,
        state: str | os.PathLike | None = None,
        rng: NoiseGenerator | None = None,
    ) -> None:
        if not 0 < beta < 1:
            raise InvalidInputError(f"beta must be in (0, 1), got {beta!r}")
        self.beta = beta
        if state is not None and Path(state).exists():
            self._counter = ContinualCounter.resume(
                state, epsilon=epsilon, horizon=horizon, rng=rng, max_value=max_value, monotone=monotone
            )
        else:
            self._counter = ContinualCounter.for_horizon(
                epsilon=epsilon,
                horizon=horizon,
                metric=metric,
                mechanism=mechanism,
                rng=rng,
                max_value=max_value,
                monotone=monotone,
            )
            if state is not None:
                self._counter.save_state(state)
        self._bars = ErrorBarModel(self._counter)

    @property
    def mechanism(self) -> str:
        """What runs: "lifted base kKKK_metric.npz" or "TREE tree, arity a"."""
        return str(self._counter.summary()["mechanism"])

    @property
    def summary(self) -> dict:
        """What runs, with ε, horizon, m, the noise's sensitivity and the expected MaxSE/MeanSE."""
        return self._counter.summary()

    @property
    def released(self) -> int:
        """How many steps have been released."""
        return self._counter.released

    def extend(self, values: Iterable[int]) -> list[Release]:
        """Release the next steps (one durable commit with a state file); one ``Release`` each."""
        values = list(values)
        first = self._counter.released
        counts = self._counter.counts(values) if values else np.zeros(0, dtype=np.int64)
        centres = self._counter.last_raw if self._counter.monotone and values else counts
        bars = self._bars.bars(first, first + len(counts), beta=self.beta)
        lower, upper = bars.bounds(centres, first_step=first, max_value=self._counter.max_value)
        steps = np.arange(first + 1, first + 1 + len(counts))
        return [
            Release(step=int(t), count=int(c), std=float(s), lower=int(lo), upper=int(hi))
            for t, c, s, lo, hi in zip(steps, counts, bars.std, lower, upper, strict=True)
        ]

    def update(self, value: int) -> Release:
        """Release the next step."""
        return self.extend([value])[0]

    def close(self) -> None:
        """Release the state file's lock (also released when the process ends)."""
        self._counter.close()

    def __enter__(self) -> Counter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
