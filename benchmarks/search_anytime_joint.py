"""Search: anytime schedules with own and joint segment totals, exact at every integer t.

    .venv/bin/python benchmarks/search_anytime_joint.py maxse                  # the shipped schedule, shares re-optimised
    .venv/bin/python benchmarks/search_anytime_joint.py maxse --totals 0-3     # a joint total over segments 0 … 3 too
    .venv/bin/python benchmarks/search_anytime_joint.py meanse --lengths --budget 1800   # local search
    .venv/bin/python benchmarks/search_anytime_joint.py meanse --lengths --wide --start S.json --shares …
        # the wider moves: joint boundary + α moves, every shipped base, segments split or merged
    (--comparator-cache FILE.npz keeps the comparator, about 40 s at 2²⁴, for the next run)
    .venv/bin/python benchmarks/search_anytime_joint.py meanse --swaps      # every base swap, shares optimised, best kept
    .venv/bin/python benchmarks/search_anytime_joint.py meanse --prefixes   # each counter over its own prefixes
    .venv/bin/python benchmarks/search_anytime_joint.py meanse --what-if 0.9 [--what-if-segments 1,2]
        # a hypothetical: counters 10 % better over their prefixes (never below the comparator)

The construction (a generalisation of the two-release segments, docs/anytime.md): a schedule's
segments (``--start``: scheme entries in ``anytime.json``'s form; the shipped scheme by default),
each running its counter at a_s·ε, and a list of **total releases**, each one discrete-Laplace
estimate J_r = Σ_{steps in segments i_r … j_r} x + Z_r at φ_r·ε released at the last step of
segment j_r (a two-release segment's own total is the range s … s; ``--own``, and ``--totals``
for ranges over several segments). Privacy: a step of segment s enters its counter and the
totals whose range holds s, so with a_s + Σ_{r ∋ s} φ_r = 1 its privacy loss is ≤ ε by
sequential composition (no other release depends on it); the carried estimate is
post-processing.

The carried total at the start of segment s is the generalised least-squares (inverse-variance)
estimate of Σ_{s' < s} S_{s'} from every estimate released before: each earlier counter's final
row (variance 2Δ_{s'}²ρ_{s'}(ℓ − 1)/a_{s'}²) and each earlier total (2/φ_r², as
``anytime.carried_variance``); its variance C_s = 1ᵀ(AᵀWA)⁻¹1 (A the 0/1 design, W the inverse
variances). A step u of segment s then has variance C_s + 2Δ_s²ρ_s(u)/a_s² (ε = 1), as
``anytime.variances`` for the shipped kinds (own totals only: then the two agree).

The shares φ are optimised (Nelder–Mead with restarts on the largest ratio over an active set
of t, the set grown by the exact maximisers until its maximum is the maximum over every integer
t); ``--lengths`` then runs a first-improvement local search (one boundary moved by 2 %, 6 % or
15 % of its segment, one top α tilted by as much, one base replaced by k/2, 2k or the other
metric's), the shares re-optimised for each move; ``--wide`` moves more (``wide_neighbours``:
boundaries by 0.5 % … 25 %, a boundary with its neighbour's top α, every shipped base, a segment
split in two or two merged, own totals then on every listed segment but the last). ``--swaps``
first scans every base swap with the shares optimised for each and keeps the best while one gains
(the first-improvement search rarely reaches the swaps: small boundary moves keep gaining
10⁻⁴ first). With own totals only, the result is printed
as scheme entries (θ in 1/1024, the best of rounding each share down or up; the inverse-variance
weights in 2⁻¹⁶) with its largest MaxSE and MeanSE ratios over every integer t in
[10³, ``--maximum``] from ``anytime.variances`` against ``bench_anytime.comparator``: the
benchmark's own figures (floats: it searches; the benchmark measures).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

sys.path.insert(0, str(Path(__file__).parent))
from bench_anytime import LOW, comparator, ratios  # noqa: E402
from scipy.optimize import minimize  # noqa: E402

from pure_dp_mf.mechanisms import anytime  # noqa: E402


def shipped_bases() -> list[str]:
    """The file names of the shipped bases (the candidates of every base move)."""
    return sorted(path.name for path in anytime.resources.BASE_FOLDER.glob("k*.npz"))


def layout_of(entries: list[dict]) -> list[tuple]:
    """(base, length, top α or None) of scheme entries in ``anytime.json``'s form."""
    return [(e["base"], int(e["length"]), None if e.get("top_alpha") is None else Fraction(e["top_alpha"])) for e in entries]


@functools.lru_cache(maxsize=48)
def _segment(base: str, length: int, top, count: int) -> tuple[np.ndarray, float, float]:
    """(ρ of the first ``count`` rows, ρ of the last row or NaN, 2Δ²) of one segment's lift."""
    family, level, delta, scale = anytime._segment_profile(base, length, top)
    rows = family.rows.sequence(level, length if count == length else count, scale=scale)
    return rows[:count], float(rows[-1]) if count == length else np.nan, 2 * delta * delta


def what_if_rows(rho: np.ndarray, delta2: float, *, factor: float, best_mean: np.ndarray) -> np.ndarray:
    """A hypothetical counter's ρ (``--what-if``): the shipped counter's summed variance over its
    first u steps times ``factor``, but never below u·(the best MeanSE of a counter that knew
    n = u), the comparator ``best_mean`` from n = LOW on (a counter cannot beat that over its
    prefix of u steps; below LOW the factor alone). The final row, what it carries, is kept."""
    cumulative = np.cumsum(rho) * delta2 * factor
    u = np.arange(1, len(rho) + 1, dtype=np.float64)
    known = min(len(rho), LOW - 1 + len(best_mean))
    floor = np.zeros(len(rho))
    floor[LOW - 1 : known] = u[LOW - 1 : known] * best_mean[: known - LOW + 1]
    return np.diff(np.maximum(cumulative, floor), prepend=0.0) / delta2


class Segments:
    """The per-segment row sequences (independent of the shares) of a list of (base, length, top α).

    ``what_if`` (a hypothetical, ``--what-if``): (factor, the comparator's best MeanSE, the
    segments it applies to or None for all); those counters' rows are ``what_if_rows``."""

    def __init__(self, layout: list[tuple], maximum: int, *, what_if: tuple | None = None):
        self.layout, self.maximum = layout, maximum
        self.first, self.rho, self.end, self.delta2 = [], [], [], []
        b = 0
        for index, (base, length, top) in enumerate(layout):
            if b >= maximum:
                break
            rho, end, delta2 = _segment(base, length, top, min(length, maximum - b))
            if what_if is not None and (what_if[2] is None or index in what_if[2]):
                rho = what_if_rows(rho, delta2, factor=what_if[0], best_mean=what_if[1])
            self.first.append(b)
            self.rho.append(rho)
            self.end.append(end)
            self.delta2.append(delta2)
            b += length
        self.count = len(self.first)


class Evaluator:
    """Exact largest ratios of a joint-total construction (module docstring)."""

    def __init__(self, metric: str, best_max: np.ndarray, best_mean: np.ndarray):
        self.metric, self.best_max, self.best_mean = metric, best_max, best_mean
        self.maximum = LOW + len(best_max) - 1

    def shares(self, segments: Segments, totals: list[tuple[int, int]], phi: np.ndarray) -> np.ndarray:
        a = np.ones(segments.count)
        for (i, j), value in zip(totals, phi, strict=True):
            a[i : j + 1] -= value
        return a

    def carried(self, segments: Segments, totals: list[tuple[int, int]], phi: np.ndarray, a: np.ndarray) -> np.ndarray:
        """C_s for every segment s (GLS over the estimates released before it)."""
        S = segments.count
        out = np.zeros(S)
        info = np.zeros((S, S))
        for s in range(1, S):
            previous = s - 1
            info[previous, previous] += a[previous] ** 2 / (segments.delta2[previous] * segments.end[previous])
            for (i, j), value in zip(totals, phi, strict=True):
                if j == previous and value > 0:
                    row = np.zeros(S)
                    row[i : j + 1] = 1
                    info += np.outer(row, row) * value * value / 2
            block = info[:s, :s]
            ones = np.ones(s)
            out[s] = float(ones @ np.linalg.solve(block, ones))
        return out

    def variances(self, segments: Segments, totals, phi) -> np.ndarray:
        a = self.shares(segments, totals, phi)
        C = self.carried(segments, totals, phi, a)
        return np.concatenate([C[s] + segments.delta2[s] / a[s] ** 2 * segments.rho[s] for s in range(segments.count)])

    def ratios(self, segments: Segments, totals, phi) -> np.ndarray:
        """The ratio of the metric at every t in [LOW, maximum] (exact)."""
        v = self.variances(segments, totals, phi)[: self.maximum]
        t = np.arange(LOW, self.maximum + 1, dtype=np.float64)
        if self.metric == "maxse":
            return np.maximum.accumulate(v)[LOW - 1 :] / self.best_max
        return np.cumsum(v)[LOW - 1 :] / t / self.best_mean

    # The active-set version: the same ratios at a few t only (cheap, for the optimiser).
    def windows(self, segments: Segments):
        """(s, lo, hi) for every segment with steps in [LOW, maximum]: its t are LOW + lo … LOW + hi − 1."""
        for s in range(segments.count):
            b = segments.first[s]
            lo, hi = max(b + 1, LOW) - LOW, min(b + len(segments.rho[s]), self.maximum) - LOW + 1
            if hi > lo:
                yield s, lo, hi

    def prepare(self, segments: Segments, points: np.ndarray) -> list:
        parts = []
        for s in range(segments.count):
            b, rho = segments.first[s], segments.rho[s]
            inside = points[(points - 1 >= b) & (points - 1 < b + len(rho))]
            u = inside - 1 - b
            parts.append(
                (
                    inside,
                    np.maximum.accumulate(rho)[u],
                    np.cumsum(rho)[u],
                    (u + 1).astype(np.float64),
                    float(rho.max()),
                    float(rho.sum()),
                    len(rho),
                )
            )
        return parts

    def largest(self, segments: Segments, totals, phi, parts) -> float:
        a = self.shares(segments, totals, phi)
        if np.any(a <= 0.02) or np.any(np.asarray(phi) < 0):
            return np.inf
        C = self.carried(segments, totals, phi, a)
        worst, running, total = 0.0, 0.0, 0.0
        for s, (t, top, cumulative, count, whole_max, whole_sum, length) in enumerate(parts):
            own = segments.delta2[s] / a[s] ** 2
            if len(t):
                index = t - LOW
                if self.metric == "maxse":
                    value = np.maximum(running, C[s] + own * top) / self.best_max[index]
                else:
                    value = (total + C[s] * count + own * cumulative) / t / self.best_mean[index]
                worst = max(worst, float(value.max()))
            running = max(running, C[s] + own * whole_max)
            total += C[s] * length + own * whole_sum
        return worst

    def optimise(self, segments: Segments, totals, phi0, rounds: int = 6) -> tuple[np.ndarray, float, int]:
        """Shares minimising the largest ratio over every t: Nelder–Mead on an active set of t,
        grown by the exact maximisers until the active maximum is the exact one."""
        t_all = np.arange(LOW, self.maximum + 1)
        points = np.unique(np.geomspace(LOW, self.maximum, 3000).astype(np.int64))
        phi = np.array(phi0, dtype=float)
        for _ in range(rounds):
            full = self.ratios(segments, totals, phi)
            # the t of the largest ratio in each segment and the top local maxima
            extra = [int(t_all[np.argmax(full)])]
            for _, lo, hi in self.windows(segments):
                extra.append(int(lo + np.argmax(full[lo:hi]) + LOW))
            order = np.argsort(full)[-400:]
            points = np.unique(np.concatenate([points, extra, t_all[order]]))
            parts = self.prepare(segments, points)
            if len(phi) == 0:
                break
            for step in (0.03, 0.01, 0.003):  # restarts: Nelder–Mead stalls on a min-max
                result = minimize(
                    lambda x: self.largest(segments, totals, x, parts),
                    phi,
                    method="Nelder-Mead",
                    options={"xatol": 1e-6, "fatol": 1e-8, "maxfev": 3000, "initial_simplex": _simplex(phi, step)},
                )
                phi = np.maximum(result.x, 0)
            if abs(self.ratios(segments, totals, phi).max() - self.largest(segments, totals, phi, parts)) < 1e-12:
                break
        full = self.ratios(segments, totals, phi)
        return phi, float(full.max()), int(np.argmax(full)) + LOW


def _simplex(x: np.ndarray, step: float) -> np.ndarray:
    out = [x]
    for i in range(len(x)):
        y = x.copy()
        y[i] = y[i] + step if y[i] < step else y[i] - step
        out.append(y)
    return np.array(out)


def describe(layout: list[tuple]) -> str:
    return "; ".join(f"{base[:-4]} {length}" + ("" if top is None else f" α {float(top):.4f}") for base, length, top in layout)


def neighbours(layout: list[tuple]):
    """Local moves: one boundary moved (the segments after it unchanged), one top α tilted, one
    base replaced by a neighbour (k/2, 2k, the other metric), in an order that tries small moves first."""
    from pure_dp_mf.mechanisms.lift import dyadic

    for fraction in (0.02, -0.02, 0.06, -0.06, 0.15, -0.15):
        for s in range(len(layout) - 1):
            d = int(layout[s][1] * fraction)
            if d and layout[s][1] + d > 0 and layout[s + 1][1] - d > 0:
                trial = list(layout)
                trial[s] = (layout[s][0], layout[s][1] + d, layout[s][2])
                trial[s + 1] = (layout[s + 1][0], layout[s + 1][1] - d, layout[s + 1][2])
                yield trial
        for s, (base, length, top) in enumerate(layout):
            family = anytime._profile_family(base)
            plan = family.plan(n=length, exact_sensitivity=False, top_alpha=top)
            if plan.levels < 2:
                continue
            trial = list(layout)
            trial[s] = (base, length, dyadic(float(plan.alphas_exact[-1]) * (1 + fraction)))
            yield trial
    names = shipped_bases()
    for s, (base, length, _) in enumerate(layout):
        k, metric = int(base[1:].split("_")[0]), base.split("_")[1][:-4]
        flipped = "meanse" if metric == "maxse" else "maxse"
        for other in (f"k{k // 2:03d}_{metric}.npz", f"k{2 * k:03d}_{metric}.npz", f"k{k:03d}_{flipped}.npz"):
            if other in names and other != base:
                trial = list(layout)
                trial[s] = (other, length, None)
                yield trial


def wide_neighbours(layout: list[tuple], seed: int):
    """``--wide`` local moves, each class shuffled (``seed``), small moves first: one boundary moved
    by 0.5 % … 25 % of its segment; a boundary moved together with the top α of the segment before
    or after it (±2 %, ±5 %); one top α tilted by 1 % … 15 %; one base replaced by every shipped
    base (its α's planned, or the same top α kept); one segment split in two (same base) or two
    neighbours merged (the first one's base): other segment counts in the middle of the range."""
    from pure_dp_mf.mechanisms.lift import dyadic

    rng = np.random.default_rng(seed)
    names = shipped_bases()

    def top_of(base: str, length: int, top) -> float | None:
        plan = anytime._profile_family(base).plan(n=length, exact_sensitivity=False, top_alpha=top)
        return None if plan.levels < 2 else float(plan.alphas_exact[-1])

    def moved(trial: list[tuple], s: int, fraction: float) -> list[tuple] | None:
        d = int(trial[s][1] * fraction)
        if not d or trial[s][1] + d <= 0 or trial[s + 1][1] - d <= 0:
            return None
        trial = list(trial)
        trial[s] = (trial[s][0], trial[s][1] + d, trial[s][2])
        trial[s + 1] = (trial[s + 1][0], trial[s + 1][1] - d, trial[s + 1][2])
        return trial

    def tilted(trial: list[tuple], s: int, fraction: float) -> list[tuple] | None:
        base, length, top = trial[s]
        alpha = top_of(base, length, top)
        if alpha is None:
            return None
        trial = list(trial)
        trial[s] = (base, length, dyadic(alpha * (1 + fraction)))
        return trial

    def shuffled(items: list) -> list:
        return [items[i] for i in rng.permutation(len(items))]

    last = len(layout) - 1
    for fractions in ((0.005, -0.005, 0.01, -0.01), (0.03, -0.03), (0.08, -0.08), (0.15, -0.15, 0.25, -0.25)):
        moves = [("b", s, f) for s in range(last) for f in fractions]
        moves += [("a", s, f / 2) for s in range(len(layout)) for f in fractions if abs(f) <= 0.3]
        for kind, s, f in shuffled(moves):
            trial = moved(layout, s, f) if kind == "b" else tilted(layout, s, f)
            if trial is not None:
                yield trial
    joint = [
        (s, side, f, g)
        for s in range(last)
        for side in (0, 1)
        for f in (0.02, -0.02, 0.05, -0.05)
        for g in (0.02, -0.02, 0.05, -0.05)
    ]
    for s, side, f, g in shuffled(joint):
        trial = moved(layout, s, f)
        if trial is not None:
            trial = tilted(trial, s + side, g)
            if trial is not None:
                yield trial
    swaps = [(s, other, keep) for s in range(len(layout)) for other in names for keep in (False, True)]
    for s, other, keep in shuffled(swaps):
        base, length, top = layout[s]
        if other == base:
            continue
        trial = list(layout)
        alpha = top_of(base, length, top) if keep else None
        trial[s] = (other, length, None if alpha is None else dyadic(alpha))
        yield trial
    for s in shuffled(list(range(last))):
        for f in (0.3, 0.5, 0.7):
            base, length, _ = layout[s]
            head = int(length * f)
            yield [*layout[:s], (base, head, None), (base, length - head, None), *layout[s + 1 :]]
        if s + 1 < last:
            yield [*layout[:s], (layout[s][0], layout[s][1] + layout[s + 1][1], None), *layout[s + 2 :]]


def print_prefixes(layout: list[tuple], best_mean: np.ndarray) -> None:
    """For each listed segment: its counter's MeanSE over its first u steps (ε = 1, the full ε)
    over the best MeanSE of a counter that knew n = u, at u = 10³, 2·10³, 4·10³, … and its length."""
    for base, length, top in layout:
        rho, _, delta2 = _segment(base, length, top, length)
        mean = np.cumsum(rho) * delta2 / np.arange(1, length + 1)
        points = [u for u in (1000 * 2**e for e in range(40)) if u < length] + [length]
        points = [u for u in points if LOW <= u < LOW + len(best_mean)]
        cells = " ".join(f"{u}: {mean[u - 1] / best_mean[u - LOW]:.3f}" for u in points)
        print(f"{base} × {length}: {cells}")


def parse_totals(text: str) -> list[tuple[int, int]]:
    out = []
    for item in filter(None, text.split(",")):
        i, _, j = item.partition("-")
        out.append((int(i), int(j or i)))
    return out


def scheme_entries(layout: list[tuple], thetas: dict[int, Fraction]) -> list[dict]:
    """``anytime.json`` entries of a layout with its own totals at θ_s (dyadic) and the
    inverse-variance weight rounded to 2⁻¹⁶ (``search_anytime.weight``), as the shipped scheme pins them."""
    from search_anytime import weight

    out = []
    for s, (base, length, top) in enumerate(layout):
        entry = {"length": length, "base": base, "top_alpha": None if top is None else str(Fraction(top))}
        theta = thetas.get(s, Fraction(0))
        if theta > 0:
            rho, end, delta2 = _segment(base, length, top, length)
            entry["theta"] = str(theta)
            entry["weight"] = str(Fraction(weight(delta2 * end / float(1 - theta) ** 2, float(theta))))
        out.append(entry)
    return out


def schedule_of(metric: str, entries: list[dict], growth: int = 16) -> anytime.Schedule:
    """The ``anytime.Schedule`` of scheme entries (each base's sha256 pinned from the profiles)."""
    shas = anytime._file_shas(str(anytime.resources.BASE_FOLDER))
    segments = tuple(
        anytime.Segment(
            length=int(entry["length"]),
            base=entry["base"],
            base_sha256=shas[entry["base"]],
            top_alpha=None if entry.get("top_alpha") is None else Fraction(entry["top_alpha"]),
            theta=None if entry.get("theta") is None else Fraction(entry["theta"]),
            weight=None if entry.get("weight") is None else Fraction(entry["weight"]),
        )
        for entry in entries
    )
    return anytime.Schedule(metric=metric, segments=segments, growth=growth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metric", choices=("maxse", "meanse"))
    parser.add_argument("--totals", default="", help="joint totals over segments i-j (0-based, inclusive), comma separated")
    parser.add_argument("--own", default="all", help="segments with their own total: all (every listed segment) or a list 0,1,2")
    parser.add_argument("--lengths", action="store_true", help="also move boundaries, top α's and bases (local search)")
    parser.add_argument("--maximum", type=int, default=1 << 24)
    parser.add_argument("--start", default=None, help="a JSON file: a list of scheme entries (anytime.json's form) to start from")
    parser.add_argument("--shares", default=None, help="starting shares, one per total (own first), comma separated")
    parser.add_argument("--budget", type=float, default=1200, help="seconds for the local search")
    parser.add_argument("--wide", action="store_true", help="with --lengths: the wider move set (wide_neighbours)")
    parser.add_argument("--seed", type=int, default=0, help="the order of the --wide moves within each class")
    parser.add_argument(
        "--swaps",
        action="store_true",
        help="before the local search: every listed segment's base replaced by every shipped base (its α's "
        "planned), the shares optimised for each; the best swap kept, repeated while one gains",
    )
    parser.add_argument("--comparator-cache", default=None, help="a .npz of (best_max, best_mean) to reuse")
    parser.add_argument(
        "--what-if",
        type=float,
        default=None,
        help="MeanSE, a hypothetical: each counter's summed variance over its first u steps times this factor, "
        "never below the best counter that knew n = u, final rows kept; the shares optimised, nothing shipped",
    )
    parser.add_argument("--what-if-segments", default=None, help="with --what-if: only these listed segments (0,1,…)")
    parser.add_argument(
        "--prefixes",
        action="store_true",
        help="print each listed segment's counter's MeanSE over its first u steps over the best MeanSE at n = u, and stop",
    )
    arguments = parser.parse_args()
    if arguments.what_if is not None and (arguments.metric != "meanse" or not 0 <= arguments.what_if <= 1):
        parser.error("--what-if takes a factor in [0, 1] and the metric meanse")
    started = time.perf_counter()
    if arguments.comparator_cache and Path(arguments.comparator_cache).is_file():
        cached = np.load(arguments.comparator_cache)
        best_max, best_mean = cached["best_max"], cached["best_mean"]
    else:
        best_max, best_mean, _ = comparator(LOW, arguments.maximum, 0.02)
        if arguments.comparator_cache:
            np.savez(arguments.comparator_cache, best_max=best_max, best_mean=best_mean)
    evaluator = Evaluator(arguments.metric, best_max, best_mean)
    index = 0 if arguments.metric == "maxse" else 1
    entries = (
        json.loads(Path(arguments.start).read_text())
        if arguments.start
        else anytime.shipped_schedule(arguments.metric).to_record()["segments"]
    )
    if arguments.prefixes:
        print_prefixes(layout_of(entries), best_mean)
        return
    start = ratios(schedule_of(arguments.metric, entries), best_max, best_mean)[index]
    print(f"start: largest {start.max():.4f} at t = {int(np.argmax(start)) + LOW}  ({time.perf_counter() - started:.0f} s)")
    layout = layout_of(entries)
    while sum(length for _, length, _ in layout) < arguments.maximum:  # the geometric continuation
        layout.append((layout[-1][0], layout[-1][1] * 16, None))
    what_if = None
    if arguments.what_if is not None:
        chosen = None if arguments.what_if_segments is None else {int(s) for s in arguments.what_if_segments.split(",")}
        what_if = (arguments.what_if, best_mean, chosen)
    segments = Segments(layout, arguments.maximum, what_if=what_if)
    own = list(range(segments.count - 1)) if arguments.own == "all" else [int(s) for s in arguments.own.split(",") if s]
    totals = [(s, s) for s in own] + parse_totals(arguments.totals)
    given = {i: float(Fraction(e["theta"])) for i, e in enumerate(entries) if e.get("theta")}
    phi0 = (
        [float(x) for x in arguments.shares.split(",")]
        if arguments.shares
        else [given.get(i, 0.05) if i == j else 0.05 for i, j in totals]
    )
    phi, value, where = evaluator.optimise(segments, totals, phi0)
    print(f"totals {totals}: shares {np.round(phi, 4).tolist()}: largest {value:.4f} at t = {where}", flush=True)
    if what_if is not None:
        full = evaluator.ratios(segments, totals, phi)
        for s, lo, hi in evaluator.windows(segments):
            print(f"  segment {s}: largest {full[lo:hi].max():.4f} at t = {lo + int(np.argmax(full[lo:hi])) + LOW}")
        print("(a hypothetical: nothing to ship)")
        return
    if arguments.swaps:
        names = shipped_bases()
        while True:
            best_swap = None
            for s, other in itertools.product(range(segments.count), names):
                if other == layout[s][0]:
                    continue
                trial = [*layout[:s], (other, layout[s][1], None), *layout[s + 1 :]]
                candidate = Segments(trial, arguments.maximum)
                p, v, w = evaluator.optimise(candidate, totals, phi, rounds=3)
                print(f"  swap segment {s} → {other}: {v:.4f} at t = {w}", flush=True)
                if v < value - 1e-5 and (best_swap is None or v < best_swap[0]):
                    best_swap = (v, trial, p, candidate, w)
            if best_swap is None:
                break
            value, layout, phi, segments, where = best_swap
            print(f"  {value:.4f} at t = {where}: {describe(layout)} shares {np.round(phi, 4).tolist()}", flush=True)
    if arguments.lengths:
        deadline = started + arguments.budget
        improved = True
        while improved and time.perf_counter() < deadline:
            improved = False
            moves = wide_neighbours(layout, arguments.seed) if arguments.wide else neighbours(layout)
            for trial in moves:
                if time.perf_counter() > deadline:
                    break
                candidate = Segments(trial, arguments.maximum)
                trial_totals, trial_phi = totals, phi
                if candidate.count != segments.count:
                    if not arguments.wide or arguments.totals:
                        continue
                    # another segment count (--wide): own totals on every listed segment but the last
                    trial_totals = [(s, s) for s in range(candidate.count - 1)]
                    trial_phi = np.resize(np.append(phi, 0.0), len(trial_totals))
                p, v, w = evaluator.optimise(candidate, trial_totals, trial_phi, rounds=2)
                if v < value - 1e-5:
                    value, layout, phi, segments, where = v, trial, p, candidate, w
                    totals = trial_totals
                    own = [i for i, j in totals if i == j]
                    improved = True
                    print(f"  {value:.4f} at t = {where}: {describe(layout)} shares {np.round(phi, 4).tolist()}", flush=True)
                    break
    print(
        f"best: {describe(layout[: segments.count])}; totals {totals}, shares {np.round(phi, 5).tolist()}: {value:.4f} at t = {where}"
    )
    joint = [(r, float(x)) for r, x in zip(totals, phi, strict=True) if r[0] != r[1] and x > 1e-4]
    if joint:
        print(f"joint totals with a share (not a shipped release kind): {joint}")
        return
    # θ_s in 1/1024: every rounding down or up of the optimised shares, the best by the exact ratio
    best_exact = None
    for choice in itertools.product((math.floor, math.ceil), repeat=len(own)):
        thetas = {s: Fraction(rounding(x * 1024), 1024) for s, x, rounding in zip(own, phi, choice, strict=False)}
        candidate = scheme_entries(layout, thetas)
        exact = ratios(schedule_of(arguments.metric, candidate), best_max, best_mean)
        if best_exact is None or exact[index].max() < best_exact[1][index].max():
            best_exact = (candidate, exact)
    result, exact = best_exact
    print("scheme entries (θ in 1/1024, dyadic weights):", json.dumps(result))
    for name, values in (("MaxSE", exact[0]), ("MeanSE", exact[1])):
        print(
            f"{name}: largest over every integer t in [10^3, {arguments.maximum}] {values.max():.4f} at t = {int(np.argmax(values)) + LOW}"
        )
    print(f"# {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
