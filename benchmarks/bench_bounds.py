"""Contribution bounds of keyed counts: what C (steps per user and key) costs in noise and in bias.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_bounds.py            # 2 000 users, 20 runs: about a minute
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_bounds.py --quick    # 500 users, 3 runs

A synthetic stream (seeded numpy): ``--users`` users over ``--days`` days, one key; user u is
active on a day with probability λ_u, the rates heterogeneous (Gamma with shape 0.5 and mean
0.06, capped at 0.95: most users are active a few days a year, a few almost every day); an
active user-day is one event of value 1 (m = 1). The true count at step t is the number of
user-days up to t, nothing clipped.

* **user**, C in ``--bounds``: ``KeyedCounters(privacy_unit="user", max_keys=1, max_per_key=C,
  max_value=1)``, fed by ``run_keyed``: each user's first C active days are kept
  (``ContributionBounder``), later ones dropped. The std at steps 91, 182, 273 and 365 is the
  engine's own (``KeyedCounters.bars``); the share of events kept per quarter comes from the
  engine's bounder (checked against the run's count of dropped events).
* **user-step**, m = 1: the unit is one user within one step, i.e. the event-level counter of
  the per-user, per-step sums clipped to m (``KeyedCounters(privacy_unit="event",
  max_value=m)``): every user-day is kept (a user-day is 0 or 1 here), sensitivity m at one
  step. This protects each person's contribution in one period, not the person's whole history.
* RMS: the released count against the true (unclipped) count at those steps over ``--runs``
  seeded runs (bias from the bounds and noise together); "bias" is the kept count minus the
  true count (no noise).

ε = ``--epsilon`` (default 1), horizon ``--days``, the mechanism the planner picks for it. The
lineage registry is a temporary file (``PURE_DP_MF_REGISTRY``), never the user's.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from typing import Any

import numpy as np

STEPS = (91, 182, 273, 365)
BOUNDS = (1, 2, 5, 10, 20, 50, 100, 365)


def synthetic_days(users: int, days: int, seed: int) -> np.ndarray:
    """active[u, t]: whether user u has an event on day t + 1 (bool, users × days)."""
    rng = np.random.default_rng(seed)
    rates = np.minimum(rng.gamma(shape=0.5, scale=0.12, size=users), 0.95)
    return rng.random((users, days)) < rates[:, None]


def events_of(active: np.ndarray):
    """The events as ``KeyedEvent``s of the one key "k", in step order (users in order within a step)."""
    from pure_dp_mf.engines.keyed import KeyedEvent

    days, users = np.nonzero(active.T)
    return [KeyedEvent(key="k", step=int(day) + 1, value=1, user=f"u{user}") for day, user in zip(days, users, strict=True)]


def kept_per_step(active: np.ndarray, bound: int) -> np.ndarray:
    """The events ``ContributionBounder`` keeps per step with C = ``bound`` (the engine's class, in its order)."""
    from pure_dp_mf.engines.keyed import ContributionBounder

    bounder = ContributionBounder(1, bound, 1)
    kept = np.zeros(active.shape[1], dtype=np.int64)
    for event in events_of(active):
        kept[event.step - 1] += bounder.admit(event.user, 0, event.step, event.value)
    return kept


def measure(active: np.ndarray, *, unit: str, bound: int, runs: int, epsilon: float, seed: int) -> dict:
    """std (engine), kept share per quarter, bias and RMS of the releases at ``STEPS`` for one unit and bound."""
    from pure_dp_mf.engines.generator import NoiseGenerator
    from pure_dp_mf.engines.keyed import KeyedCounters, run_keyed

    days = active.shape[1]
    steps = np.array([step for step in STEPS if step <= days]) - 1
    true_per_step = active.sum(axis=0).astype(np.int64)
    kept = kept_per_step(active, bound) if unit == "user" else true_per_step
    options: dict[str, Any] = {"privacy_unit": "user", "max_keys": 1, "max_per_key": bound} if unit == "user" else {}
    events = events_of(active)
    errors = []
    for run in range(runs):
        counters = KeyedCounters(
            keys=["k"], epsilon=epsilon, horizon=days, max_value=1, generator=NoiseGenerator.from_seed(seed + run), **options
        )
        released = np.array([int(counts[0]) for _, counts, *_ in run_keyed(counters, iter(events), through=days)])
        assert len(events) - counters.dropped["over_bounds"] == kept.sum(), "the bounder's count differs from the run's"
        errors.append(released[steps] - np.cumsum(true_per_step)[steps])
    quarters = np.array_split(np.arange(days), 4)
    return {
        "unit": unit,
        "bound": bound,
        "sensitivity": float(counters.sensitivity),
        "mechanism": counters.mechanism.name,
        "std": counters.bars(0, days, beta=0.05).std[steps],
        "kept": [kept[q].sum() / max(true_per_step[q].sum(), 1) for q in quarters],
        "bias": (np.cumsum(kept) - np.cumsum(true_per_step))[steps],
        "rms": np.sqrt(np.mean(np.square(np.array(errors, dtype=float)), axis=0)),
        "true": np.cumsum(true_per_step)[steps],
    }


def _number(value: float) -> str:
    """Three significant digits, thousands separated by a space (no exponent)."""
    if abs(value) < 100:
        return f"{value:.3g}"
    return f"{float(f'{value:.3g}'):,.0f}".replace(",", " ")


def print_tables(rows: list[dict], *, steps: list[int]) -> None:
    at = " | ".join(f"t={step}" for step in steps)
    print(f"| unit | C or m | Δ | std {at} | kept Q1 | Q2 | Q3 | Q4 |")
    print("|---" * (7 + len(steps)) + "|")
    for row in rows:
        label = "user" if row["unit"] == "user" else "user-step"
        std = " | ".join(_number(value) for value in row["std"])
        kept = " | ".join(f"{100 * share:.0f} %" for share in row["kept"])
        print(f"| {label} | {row['bound']} | {row['sensitivity']:.4g} | {std} | {kept} |")
    print()
    print(f"| unit | C or m | bias {at} | RMS {at} |")
    print("|---" * (2 + 2 * len(steps)) + "|")
    for row in rows:
        label = "user" if row["unit"] == "user" else "user-step"
        bias = " | ".join(_number(value) for value in row["bias"])
        rms = " | ".join(_number(value) for value in row["rms"])
        print(f"| {label} | {row['bound']} | {bias} | {rms} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--runs", type=int, default=20, help="seeded runs per row for the RMS")
    parser.add_argument("--bounds", type=int, nargs="+", default=list(BOUNDS), help="the C of the user rows")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="500 users, 3 runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.users, args.runs = 500, 3
    os.environ.setdefault("PURE_DP_MF_REGISTRY", os.path.join(tempfile.mkdtemp(prefix="bench_bounds_"), "registry.sqlite3"))
    started = time.perf_counter()
    active = synthetic_days(args.users, args.days, args.seed)
    rows = [
        measure(active, unit="user", bound=bound, runs=args.runs, epsilon=args.epsilon, seed=args.seed)
        for bound in args.bounds
        if bound <= args.days
    ]
    rows.append(measure(active, unit="user-step", bound=1, runs=args.runs, epsilon=args.epsilon, seed=args.seed))
    steps = [step for step in STEPS if step <= args.days]
    true = ", ".join(f"{step}: {int(value)}" for step, value in zip(steps, rows[0]["true"], strict=True))
    print(
        f"{args.users} users, {args.days} days, one key, m = 1, ε = {args.epsilon}, {rows[0]['mechanism']}, "
        f"{args.runs} seeded runs per row; {int(active.sum())} events; true counts {true}"
    )
    per_user = active.sum(axis=1)
    quantiles = ", ".join(f"{q}%: {int(np.percentile(per_user, q))}" for q in (50, 75, 90, 95, 99))
    print(f"active days per user: mean {per_user.mean():.1f}, quantiles {quantiles}, max {per_user.max()}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print()
    print_tables(rows, steps=steps)
    print(f"\n{time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
