"""Benchmark: the anytime counter (no horizon) against the best known-horizon counter at every n.

    .venv/bin/python benchmarks/bench_anytime.py [--maximum 16777216] [--grid 0.01] [--plot FILE]
    .venv/bin/python benchmarks/bench_anytime.py --quick     # up to 10^5, 5 % grid: seconds

**The measure** (ε = 1). For t in [10³, ``--maximum``] (default 2²⁴): the anytime counter's
MaxSE over steps 1 … t (the largest per-step noise variance so far) divided by the best MaxSE of
a counter that knew the horizon n = t, among everything ``compare`` ranks (the shipped lifted
bases, planned per n, and the five trees at their best arity); the same for MeanSE over steps
1 … t. Per-step variances of the anytime counter come from the bases' profiles
(``anytime.variances``: exact row norms, float64 sums), every step up to the maximum; the
comparator from ``planner.comparison_rows(n=t)`` (closed forms, float64).

**Where the comparator is evaluated.** At every point of a geometric grid (ratio 1 + ``--grid``),
every level size N_p(k) − 1, N_p(k), N_p(k) + 1 of every shipped base and every segment boundary
of the schedules. The table's "max on grid" is the largest ratio at those points (exact there).
"bound, every t" bounds every integer t between grid points a < b from the comparator's
monotonicity (best MaxSE(n) and n·best MeanSE(n) non-decrease in n; checked on the grid and
printed): ratio_max(t) ≤ anytime_max(b − 1)/best_max(a) and ratio_mean(t) ≤ Σ_{u<b} v_u /
(a·best_mean(a)).

Then the throughput of ``ContinualCounter`` without a horizon against the known-horizon counter
(the planner's lift for the same n) on the same n steps of random bits, alternately,
``--repeats`` times: medians and their ratio (one BLAS thread). Set-up is not timed: the
known-horizon mechanism is built by the constructor, the anytime segments' mechanisms (a
function of the public schedule) before the clock starts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

from pure_dp_mf.engines.continual import ContinualCounter  # noqa: E402
from pure_dp_mf.mechanisms import anytime, planner  # noqa: E402
from pure_dp_mf.mechanisms.lift import lifted_size  # noqa: E402
from pure_dp_mf.release.generator import NoiseGenerator  # noqa: E402

LOW = 1000


def grid_points(maximum: int, step: float) -> np.ndarray:
    """The points where the comparator is evaluated (module docstring)."""
    points = {LOW, maximum}
    value = float(LOW)
    while value < maximum:
        points.add(int(value))
        value *= 1 + step
    for family, _ in planner.shipped_families():
        for level in range(1, 64):
            size = lifted_size(base_size=family.k, levels=level)
            if size > maximum + 1:
                break
            points.update((size - 1, size, size + 1))
    for metric in ("maxse", "meanse"):
        schedule = anytime.shipped_schedule(metric)
        index = 0
        while schedule.first(index) <= maximum:
            points.update((schedule.first(index), schedule.first(index) + 1))
            index += 1
    return np.array(sorted(p for p in points if LOW <= p <= maximum), dtype=np.int64)


def comparator(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Best known-horizon (MaxSE, MeanSE) at each point, over every row ``compare`` ranks."""
    best_max, best_mean = np.empty(len(points)), np.empty(len(points))
    started = time.perf_counter()
    for i, n in enumerate(points):
        rows = planner.comparison_rows(n=int(n))
        best_max[i] = min(row.max_se for row in rows)
        best_mean[i] = min(row.mean_se for row in rows)
        if time.perf_counter() - started > 10 and i % 200 == 0:
            print(f"  comparator: {i}/{len(points)} points", file=sys.stderr, flush=True)
    return best_max, best_mean


def ratios(metric: str, points: np.ndarray, best_max: np.ndarray, best_mean: np.ndarray) -> dict:
    """Exact ratios at the points and the bound over every t, for one shipped schedule."""
    variances = anytime.variances(schedule=anytime.shipped_schedule(metric), n=int(points[-1]))
    running_max = np.maximum.accumulate(variances)
    prefix = np.cumsum(variances)
    at = points - 1  # step t is index t − 1
    ratio_max = running_max[at] / best_max
    ratio_mean = prefix[at] / points / best_mean
    # between consecutive points a < b: every t in [a, b) is bounded by the value at b − 1 over the comparator at a
    upper = points[1:] - 2
    bound_max = np.maximum(running_max[upper] / best_max[:-1], ratio_max[1:])
    bound_mean = np.maximum(prefix[upper] / (points[:-1] * best_mean[:-1]), ratio_mean[1:])
    return {
        "ratio_max": ratio_max,
        "ratio_mean": ratio_mean,
        "bound_max": float(bound_max.max()),
        "bound_mean": float(bound_mean.max()),
    }


def throughput(n: int, repeats: int) -> tuple[float, float]:
    """Median steps/s of the anytime and the known-horizon counter on the same n random bits."""
    bits = np.random.default_rng(0).integers(0, 2, size=n)
    times: dict[str, list[float]] = {"anytime": [], "known": []}
    for _ in range(repeats):
        for name in ("anytime", "known"):
            rng = NoiseGenerator.secure()
            if name == "anytime":
                counter = ContinualCounter.anytime(epsilon=1.0, rng=rng)
                schedule, index = counter.mechanism.schedule, 0
                while schedule.first(index) < n:  # set-up, not timed: the segments' mechanisms (public)
                    counter.mechanism.segment_mechanism(index)
                    index += 1
            else:
                counter = ContinualCounter.for_horizon(epsilon=1.0, horizon=n, rng=rng)
            start = time.perf_counter()
            for first in range(0, n, 1 << 16):
                counter.counts(bits[first : first + (1 << 16)])
            times[name].append(time.perf_counter() - start)
    return n / statistics.median(times["anytime"]), n / statistics.median(times["known"])


def plot(path: str, points: np.ndarray, results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.2))
    for metric, label, style in (("maxse", "MaxSE", "-"), ("meanse", "MeanSE", "--")):
        key = "ratio_max" if metric == "maxse" else "ratio_mean"
        axis.plot(points, results[metric][key], style, label=f"{label} (anytime {metric} schedule)")
    axis.axhline(1.5, color="grey", linewidth=0.8, linestyle=":", label="1.5")
    axis.set_xscale("log", base=10)
    axis.set_xlabel("t (steps so far)")
    axis.set_ylabel("anytime error / best known-horizon error at n = t")
    axis.set_title("Pure ε-DP anytime counter vs the best counter that knew the horizon (ε = 1)")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--maximum", type=int, default=1 << 24)
    parser.add_argument("--grid", type=float, default=0.01, help="geometric grid step of the comparator (0.01 = 1 %%)")
    parser.add_argument("--throughput-steps", type=int, default=10**6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plot", default=None, help="write the ratio plot (PNG) here")
    parser.add_argument("--quick", action="store_true", help="up to 10^5 on a 5 %% grid, 10^5 throughput steps")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.maximum, arguments.grid, arguments.throughput_steps, arguments.repeats = 10**5, 0.05, 10**5, 3
    started = time.perf_counter()
    points = grid_points(arguments.maximum, arguments.grid)
    best_max, best_mean = comparator(points)
    monotone_max = bool(np.all(np.diff(best_max) >= -1e-9 * best_max[1:]))
    monotone_mean = bool(np.all(np.diff(points * best_mean) >= -1e-9 * (points * best_mean)[1:]))
    results = {metric: ratios(metric, points, best_max, best_mean) for metric in ("maxse", "meanse")}
    print(f"# anytime / best known-horizon error, ε = 1, {len(points)} comparator points in [10^3, {arguments.maximum}]")
    print(f"# comparator monotone on the grid: MaxSE {monotone_max}, n·MeanSE {monotone_mean}")
    print(f"{'t':>10} {'MaxSE ratio':>12} {'MeanSE ratio':>13}   (MaxSE ratio of the maxse schedule; MeanSE of the meanse one)")
    for t in anytime.ratio_points(arguments.maximum):
        i = int(np.searchsorted(points, t))
        print(f"{t:>10} {results['maxse']['ratio_max'][i]:>12.3f} {results['meanse']['ratio_mean'][i]:>13.3f}")
    for label, key, bound in (("MaxSE", "ratio_max", "bound_max"), ("MeanSE", "ratio_mean", "bound_mean")):
        metric = "maxse" if label == "MaxSE" else "meanse"
        values = results[metric][key]
        worst = int(np.argmax(values))
        print(
            f"{label}: max on grid {values[worst]:.4f} at t = {points[worst]}; "
            f"bound, every t in range: {results[metric][bound]:.4f}; goal 1.5"
        )
    if arguments.plot:
        plot(arguments.plot, points, results)
    anytime_rate, known_rate = throughput(arguments.throughput_steps, arguments.repeats)
    print(
        f"throughput, {arguments.throughput_steps} steps, median of {arguments.repeats}: anytime {anytime_rate:.3g}/s, "
        f"known horizon {known_rate:.3g}/s, ratio known/anytime {known_rate / anytime_rate:.2f} (goal ≤ 1.2)"
    )
    print(f"# {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
