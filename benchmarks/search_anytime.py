"""Search: anytime schedules with two-release segments whose every ratio stays ≤ r (docs/anytime.md).

    .venv/bin/python benchmarks/search_anytime.py maxse 2.06 [--keep 16] [--maximum 16777216]

A forward beam search over segments (ε = 1, floats: it searches, it proves nothing; the
benchmark then measures what it finds). From a kept state (next boundary b, carried variance C,
sum of the variances so far P) it tries every shipped base, every level p of its lift and every
θ ∈ {0, 1/64, …, 24/64}. With Δ(ℓ) the sensitivity and ρ_u the row norms² of the lift truncated
to ℓ, step b + u of the segment has variance C + 2Δ(ℓ)²ρ_u/(1 − θ)²; MaxSE asks this to be
≤ r·best_max(b + u + 1) at every u < ℓ (enough when best_max does not decrease), MeanSE asks
P + C·(u + 1) + 2Δ(ℓ)²Σ_{v≤u}ρ_v/(1 − θ)² ≤ r·t·best_mean(t), t = b + u + 1 ≥ 10³. Both are
2Δ(ℓ)²/(1 − θ)² ≤ min_{u<ℓ} h_u, the left side non-decreasing in ℓ and the right non-increasing,
so the feasible lengths are 1 … ℓ_max, found by one search per θ. The segment is tried at ℓ_max
and at 0.85, 0.7 and 0.5 of it; it then carries w²V_c + (1 − w)²·2/θ² (V_c its final row's
variance, w the inverse-variance weight rounded to 2⁻¹⁶), or V_c without θ. The Pareto front of
(b, C) (MeanSE: (b, C + P/b)) is kept, thinned to ``--keep`` states. Tilted α's are not searched.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

sys.path.insert(0, str(Path(__file__).parent))
from bench_anytime import LOW, lifted_envelope  # noqa: E402

from pure_dp_mf import resources  # noqa: E402
from pure_dp_mf.mechanisms import anytime  # noqa: E402

THETAS = [0.0] + [i / 64 for i in range(1, 25)]
FRACTIONS = (1.0, 0.85, 0.7, 0.5)


def weight(final: float, theta: float) -> float:
    """The inverse-variance weight of the counter's final row against the total, dyadic (2⁻¹⁶)."""
    total = 2 / theta**2
    return float(Fraction(round(total / (final + total) * 65536), 65536))


@functools.lru_cache(maxsize=64)
def level(base: str, p: int, cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ρ, running max of the column norms, cumulative ρ) of level p of a base's lift, ≤ cap entries."""
    family = anytime._profile_family(base)
    family._extend(p)
    n = min(family.rows.sizes[p - 1], cap)
    rows = family.rows.sequence(p, n)
    return rows, np.maximum.accumulate(family.columns.sequence(p, n)), np.cumsum(rows)


class Search:
    def __init__(self, metric: str, ratio: float, maximum: int):
        self.metric, self.ratio, self.maximum = metric, ratio, maximum
        self.best_max, self.best_mean = lifted_envelope(LOW, maximum)
        self.bases = sorted(path.name for path in resources.BASE_FOLDER.glob("k*.npz"))

    def limit(self, first: int, count: int) -> np.ndarray:
        t = np.arange(first + 1, first + count + 1)
        index = np.clip(t, LOW, self.maximum) - LOW
        if self.metric == "maxse":
            return self.ratio * self.best_max[index]
        out = self.ratio * t * self.best_mean[index]
        out[t < LOW] = np.inf
        return out

    def extend(self, state: tuple) -> list[tuple]:
        b, carried, total, segments = state
        cap = min(self.maximum - b, max(4000, 24 * b))
        out: list[tuple] = []
        for base in self.bases:
            family = anytime._profile_family(base)
            p = 1
            while True:
                family._extend(p)
                first = 1 if p == 1 else family.rows.sizes[p - 2] + 1
                if first > cap:
                    break
                rows, columns, cumulative = level(base, p, 1 << int(np.ceil(np.log2(cap + 1))))
                n = min(len(rows), cap)
                bound = self.limit(b, n)
                if self.metric == "maxse":
                    h = (bound - carried) / np.maximum(rows[:n], 1e-300)
                else:
                    h = (bound - total - carried * np.arange(1, n + 1)) / np.maximum(cumulative[:n], 1e-300)
                h = np.minimum.accumulate(h)
                q = np.where(h > 0, 2 * columns[:n] ** 2 / np.where(h > 0, h, 1.0), np.inf)
                q = np.maximum.accumulate(q)[first - 1 :]
                for theta in THETAS:
                    longest = first - 1 + int(np.searchsorted(q, (1 - theta) ** 2, side="right"))
                    if longest < first:
                        continue
                    for fraction in FRACTIONS:
                        length = max(first, int(longest * fraction))
                        if fraction < 1 and length == longest:
                            continue
                        scale = 2 * columns[length - 1] ** 2 / (1 - theta) ** 2
                        final = scale * rows[length - 1]
                        if theta > 0:
                            w = weight(final, theta)
                            added = w * w * final + (1 - w) ** 2 * 2 / theta**2
                        else:
                            added = final
                        out.append(
                            (
                                b + length,
                                carried + added,
                                total + carried * length + scale * cumulative[length - 1],
                                (*segments, (base, length, theta)),
                            )
                        )
                if family.rows.sizes[p - 1] >= cap:
                    break
                p += 1
        return out

    def prune(self, states: list[tuple], keep: int) -> list[tuple]:
        states.sort(key=lambda s: (-s[0], s[1]))
        front, lowest = [], np.inf
        for state in states:
            key = state[1] if self.metric == "maxse" else state[1] + state[2] / max(state[0], 1)
            if key < lowest:
                front.append(state)
                lowest = key
        if len(front) <= keep:
            return front
        return [front[i] for i in np.unique(np.linspace(0, len(front) - 1, keep).round().astype(int))]

    def run(self, keep: int, depth: int) -> tuple | None:
        states: list[tuple] = [(0, 0.0, 0.0, ())]
        started = time.perf_counter()
        for d in range(depth):
            candidates = [new for state in states for new in self.extend(state)]
            done = sorted((c for c in candidates if c[0] >= self.maximum), key=lambda c: c[1])
            print(f"depth {d}: {len(candidates)} candidates, {time.perf_counter() - started:.0f} s", flush=True)
            if done:
                return done[0]
            states = self.prune(candidates, keep)
            if not states:
                return None
            print(f"  furthest {states[0][0]}: {list(states[0][3])}", flush=True)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metric", choices=("maxse", "meanse"))
    parser.add_argument("ratio", type=float)
    parser.add_argument("--keep", type=int, default=16)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--maximum", type=int, default=1 << 24)
    arguments = parser.parse_args()
    found = Search(arguments.metric, arguments.ratio, arguments.maximum).run(arguments.keep, arguments.depth)
    print("found:", None if found is None else list(found[3]))


if __name__ == "__main__":
    main()
