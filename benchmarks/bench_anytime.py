"""Benchmark: the anytime counter (no horizon) against the best known-horizon counter at every t.

    .venv/bin/python benchmarks/bench_anytime.py [--maximum 16777216] [--plot FILE]
    .venv/bin/python benchmarks/bench_anytime.py --quick     # up to 10^5: seconds

**The measure** (ε = 1). For every integer t in [10³, ``--maximum``] (default 2²⁴): the anytime
counter's MaxSE over steps 1 … t (the largest per-step noise variance so far) divided by the best
MaxSE of a counter that knew the horizon n = t, among everything ``compare`` ranks (the shipped
lifted bases, k = 2048 included, planned per n, and the five trees at their best arity); the
same for MeanSE over steps 1 … t. Per-step variances of the anytime counter come from the bases'
profiles (``anytime.variances``: exact row norms, float64 sums), every step up to the maximum.

**The comparator at every t, exactly** (``lifted_envelope``). A lifted row at n is the plan of
the least lift with N_p ≥ n: on each level range N_{p−1} < n ≤ N_p its MaxSE is
2·max_{u<n}‖(L_p)_u‖²·(max_{j<n}‖(R_p)_{:,j}‖₁)² and its MeanSE 2·Σ_{u<n}‖(L_p)_u‖²/n·(…)², so a
running maximum and a cumulative sum over the level's row and column sequences (``_Profile
.sequence``) give every n of the range at once. The planner's choice is replayed as it is made:
per metric the base with the least error of that metric (the first on ties), then the least
MaxSE (MeanSE) over the rows. Checked against ``planner.comparison_rows`` at sample points
(relative difference printed: float sums in another order). **The trees** are evaluated on a
geometric grid (``--tree-grid``) and enter as a floor for a ≤ t < b: MaxSE(a), and
a·MeanSE(a)/b (the trees' MaxSE and n·MeanSE do not decrease in n), and exactly (``planner.tree_rows``) at every t where that floor comes below the
lifted envelope; so the comparator is exact at every t, the trees' monotonicity in n being the
one assumption (checked on the grid). The benchmark prints how many t that took and at how many
a tree wins.

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
import time

import numpy as np

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

from pure_dp_mf.engines.continual import ContinualCounter  # noqa: E402
from pure_dp_mf.engines.generator import NoiseGenerator  # noqa: E402
from pure_dp_mf.mechanisms import anytime, planner  # noqa: E402
from pure_dp_mf.mechanisms.lift import levels_for  # noqa: E402

LOW = 1000
FITTED = 1 << 24
"""The end of the range the shipped schedules were fitted to: [10³, 2²⁴]."""


def lifted_envelope(low: int, maximum: int) -> tuple[np.ndarray, np.ndarray]:
    """The best lifted (MaxSE, MeanSE) of ``compare`` at every n in [low, maximum] (ε = 1), the
    planner's choice replayed (module docstring)."""
    size = maximum - low + 1
    n = np.arange(low, maximum + 1, dtype=np.float64)
    chosen: dict[str, list[np.ndarray]] = {}
    for family, _ in planner.shipped_families():
        top = levels_for(n=maximum, base_size=family.k)
        family._extend(top)
        errors = {"maxse": np.empty(size), "meanse": np.empty(size)}
        for p in range(1, top + 1):
            first = 1 if p == 1 else family.rows.sizes[p - 2] + 1
            last = min(family.rows.sizes[p - 1], maximum)
            if last < low:
                continue
            rows = family.rows.sequence(p, last)
            columns = np.maximum.accumulate(family.columns.sequence(p, last))
            a = max(first, low)
            pick, into = slice(a - 1, last), slice(a - low, last - low + 1)
            squared = columns[pick] ** 2
            errors["maxse"][into] = 2 * np.maximum.accumulate(rows)[pick] * squared
            errors["meanse"][into] = 2 * np.cumsum(rows)[pick] / n[into] * squared
        other = "meanse" if family.metric == "maxse" else "maxse"
        if family.metric not in chosen:
            chosen[family.metric] = [errors[family.metric], errors[other]]
        else:
            best = chosen[family.metric]
            better = errors[family.metric] < best[0]  # the first family wins ties, as min() does
            best[0], best[1] = np.where(better, errors[family.metric], best[0]), np.where(better, errors[other], best[1])
    return np.minimum(chosen["maxse"][0], chosen["meanse"][1]), np.minimum(chosen["maxse"][1], chosen["meanse"][0])


def tree_floor(low: int, maximum: int, step: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(grid a, best tree MaxSE at a, best tree MeanSE at a) on a geometric grid from ``low``."""
    points, value = [low], float(low)
    while value < maximum:
        value *= 1 + step
        points.append(min(int(value), maximum))
    grid = np.array(sorted(set(points)), dtype=np.int64)
    best_max, best_mean = np.empty(len(grid)), np.empty(len(grid))
    for i, a in enumerate(grid):
        rows = planner.tree_rows(n=int(a))
        best_max[i], best_mean[i] = min(r.max_se for r in rows), min(r.mean_se for r in rows)
    return grid, best_max, best_mean


def comparator(low: int, maximum: int, tree_step: float) -> tuple[np.ndarray, np.ndarray, dict]:
    """The best known-horizon (MaxSE, MeanSE) at every n in [low, maximum] and the checks."""
    lifted_max, lifted_mean = lifted_envelope(low, maximum)
    grid, tree_max, tree_mean = tree_floor(low, maximum, tree_step)
    span = np.searchsorted(grid, np.arange(low, maximum + 1), side="right") - 1
    following = np.append(grid[1:], maximum + 1)[span]  # b: the grid point after a (t < b)
    floor_max = tree_max[span]  # MaxSE(t) ≥ MaxSE(a)
    floor_mean = tree_mean[span] * grid[span] / following  # t·MeanSE(t) ≥ a·MeanSE(a), t < b
    checks = {
        "tree_margin": (float(np.min(floor_max / lifted_max)), float(np.min(floor_mean / lifted_mean))),
        "tree_monotone": bool(np.all(np.diff(tree_max) >= 0) and np.all(np.diff(grid * tree_mean) >= 0)),
    }
    # where the floor comes below the lifted envelope a tree may win: evaluate the trees exactly there
    near = np.nonzero((floor_max < lifted_max) | (floor_mean < lifted_mean))[0]
    for i in near.tolist():
        rows = planner.tree_rows(n=low + i)
        floor_max[i], floor_mean[i] = min(r.max_se for r in rows), min(r.mean_se for r in rows)
    checks["trees_exact"] = len(near)
    checks["trees_win"] = int(np.sum((floor_max < lifted_max) | (floor_mean < lifted_mean)))
    rng = np.random.default_rng(0)
    samples = sorted({low, maximum, *rng.integers(low, maximum, 12).tolist()})
    worst = 0.0
    for t in samples:
        rows = [row for row in planner.comparison_rows(n=int(t)) if row.mechanism == "lifted"]
        worst = max(
            worst,
            abs(lifted_max[t - low] / min(r.max_se for r in rows) - 1),
            abs(lifted_mean[t - low] / min(r.mean_se for r in rows) - 1),
        )
    checks["planner_difference"] = worst
    return np.minimum(lifted_max, floor_max), np.minimum(lifted_mean, floor_mean), checks


def ratios(schedule: anytime.Schedule, best_max: np.ndarray, best_mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MaxSE and MeanSE ratios at every t in [LOW, LOW + len − 1] of one schedule."""
    maximum = LOW + len(best_max) - 1
    variances = anytime.variances(schedule=schedule, n=maximum)
    t = np.arange(LOW, maximum + 1, dtype=np.float64)
    ratio_max = np.maximum.accumulate(variances)[LOW - 1 :] / best_max
    ratio_mean = np.cumsum(variances)[LOW - 1 :] / t / best_mean
    return ratio_max, ratio_mean


def throughput(n: int, repeats: int) -> tuple[float, float]:
    """Median steps/s of the anytime and the known-horizon counter on the same n random bits."""
    bits = np.random.default_rng(0).integers(0, 2, size=n)
    times: dict[str, list[float]] = {"anytime": [], "known": []}
    for _ in range(repeats):
        for name in ("anytime", "known"):
            rng = NoiseGenerator.secure()
            if name == "anytime":
                counter = ContinualCounter.anytime(epsilon=1.0, generator=rng)
                schedule, index = counter.mechanism.schedule, 0
                while schedule.first(index) < n:  # set-up, not timed: the segments' mechanisms (public)
                    counter.mechanism.segment_mechanism(index)
                    index += 1
            else:
                counter = ContinualCounter.for_horizon(epsilon=1.0, horizon=n, generator=rng)
            start = time.perf_counter()
            for first in range(0, n, 1 << 16):
                counter.counts(bits[first : first + (1 << 16)])
            times[name].append(time.perf_counter() - start)
    return n / statistics.median(times["anytime"]), n / statistics.median(times["known"])


def plot(path: str, results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.2))
    for metric, label, style, index in (("maxse", "MaxSE", "-", 0), ("meanse", "MeanSE", "--", 1)):
        values = results[metric][index]
        t = np.arange(LOW, LOW + len(values))
        keep = np.unique(np.geomspace(1, len(values), 4000).astype(np.int64) - 1)
        # the plot keeps each bin's largest value, so no peak is lost in thinning
        tops = np.maximum.reduceat(values, keep)
        axis.plot(t[keep], tops, style, label=f"{label} (anytime {metric} schedule)")
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
    parser.add_argument("--tree-grid", type=float, default=0.02, help="geometric grid step of the trees (0.02 = 2 %%)")
    parser.add_argument("--throughput-steps", type=int, default=10**6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plot", default=None, help="write the ratio plot (PNG) here")
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument("--quick", action="store_true", help="up to 10^5, 10^5 throughput steps")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.maximum, arguments.throughput_steps, arguments.repeats = 10**5, 10**5, 3
    started = time.perf_counter()
    best_max, best_mean, checks = comparator(LOW, arguments.maximum, arguments.tree_grid)
    print(f"# anytime / best known-horizon error, ε = 1, every integer t in [10^3, {arguments.maximum}]")
    print(
        f"# comparator: lifted envelope vs planner.comparison_rows, largest relative difference {checks['planner_difference']:.1e}; "
        f"trees / lifted ≥ {checks['tree_margin'][0]:.3f} (MaxSE), {checks['tree_margin'][1]:.3f} (MeanSE); "
        f"trees evaluated exactly at the {checks['trees_exact']} t where their floor is below it, "
        f"a tree wins at {checks['trees_win']}; tree MaxSE and n·MeanSE nondecreasing on the grid: {checks['tree_monotone']}  "
        f"({time.perf_counter() - started:.0f} s)"
    )
    results = {metric: ratios(anytime.shipped_schedule(metric), best_max, best_mean) for metric in ("maxse", "meanse")}
    print(f"{'t':>10} {'MaxSE ratio':>12} {'MeanSE ratio':>13}   (MaxSE ratio of the maxse schedule; MeanSE of the meanse one)")
    for t in anytime.ratio_points(arguments.maximum):
        print(f"{t:>10} {results['maxse'][0][t - LOW]:>12.3f} {results['meanse'][1][t - LOW]:>13.3f}")
    for label, metric, index in (("MaxSE", "maxse", 0), ("MeanSE", "meanse", 1)):
        values = results[metric][index]
        worst = int(np.argmax(values))
        print(f"{label}: largest over every t in [10^3, {arguments.maximum}]: {values[worst]:.4f} at t = {worst + LOW}; goal 1.5")
        if arguments.maximum > FITTED:  # the range the schedules were fitted to, and beyond it
            inside, beyond = values[: FITTED - LOW + 1], values[FITTED - LOW + 1 :]
            print(
                f"  on [10^3, 2^24]: {inside.max():.4f} at t = {int(np.argmax(inside)) + LOW}; "
                f"on (2^24, {arguments.maximum}]: {beyond.max():.4f} at t = {int(np.argmax(beyond)) + FITTED + 1}"
            )
    for label, metric, index in (("MaxSE", "meanse", 0), ("MeanSE", "maxse", 1)):
        print(f"  ({label} of the {metric} schedule: largest {results[metric][index].max():.4f})")
    if arguments.plot:
        plot(arguments.plot, results)
    print(f"# {time.perf_counter() - started:.0f} s")
    if arguments.no_throughput:
        return
    anytime_rate, known_rate = throughput(arguments.throughput_steps, arguments.repeats)
    print(
        f"throughput, {arguments.throughput_steps} steps, median of {arguments.repeats}: anytime {anytime_rate:.3g}/s, "
        f"known horizon {known_rate:.3g}/s, ratio known/anytime {known_rate / anytime_rate:.2f} (goal ≤ 1.2)"
    )


if __name__ == "__main__":
    main()
