"""Trainer speed and time-to-target against a plain Adam-only baseline, side by side.

For each k, both runs start from the same identity-like R (same seed) and are timed in the
same process, one after the other:

* ours: the p-norm surrogate annealed toward the true cost, geometric learning-rate decay,
  then L-BFGS (``pure_dp_mf.train`` defaults, with the given step budget);
* baseline: the paper's plain schedule (section 2.1) without the L-BFGS polish: Adam at a
  constant learning rate directly on the true, non-smooth cost (``surrogate="exact"``).

Printed per k and metric: steps per second, and steps and seconds until the best true
constant 2C² first reaches Arkhipov & Kalinin's Table 2 value ("-" if never within the budget), the
final constant, and the ratio baseline/ours. With --repeats r > 1 every figure is a median.

    .venv/bin/python benchmarks/bench_train.py --sizes 64 128 256 --steps 50000    # full
    .venv/bin/python benchmarks/bench_train.py --sizes 64 --steps 3000             # reduced
"""

from __future__ import annotations

import argparse
import statistics
import time

from pure_dp_mf.train import TrainSettings, paper_target, train_base_factorization


def timed_run(settings: TrainSettings, target: float) -> dict:
    reached: dict = {}
    started = time.perf_counter()

    def watch(step: int, total: int, current: float, best: float) -> None:
        if "step" not in reached and best <= target:
            reached.update(step=step, seconds=time.perf_counter() - started)

    result = train_base_factorization(settings=settings, progress=watch, threads=1)
    seconds = time.perf_counter() - started
    key = "max_se_constant" if settings.metric == "maxse" else "mean_se_constant"
    return {
        "steps_per_second": result.steps_done / seconds,
        "target_step": reached.get("step"),
        "target_seconds": reached.get("seconds"),
        "final": result.factorization.metadata["costs"][key],
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def show(value, pattern):
    return "-" if value is None else pattern.format(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--metrics", nargs="+", default=["maxse"], choices=["maxse", "meanse"])
    parser.add_argument("--steps", type=int, default=50_000, help="Adam steps of both runs (paper: 50 000)")
    parser.add_argument("--lbfgs-steps", type=int, default=300, help="L-BFGS steps of our trainer")
    parser.add_argument("--baseline-learning-rate", type=float, default=1e-3)
    parser.add_argument("--repeats", type=int, default=1)
    arguments = parser.parse_args()

    header = f"{'k':>5} {'metric':>6} | {'run':>8} | {'steps/s':>8} | {'steps→target':>12} | {'s→target':>9} | {'final 2C²':>9} | {'Table 2':>7}"
    print(header)
    print("-" * len(header))
    for k in arguments.sizes:
        for metric in arguments.metrics:
            target = paper_target(base_size=k, metric=metric)
            runs = {
                "ours": TrainSettings(base_size=k, metric=metric, adam_steps=arguments.steps, lbfgs_steps=arguments.lbfgs_steps),
                "baseline": TrainSettings(
                    base_size=k,
                    metric=metric,
                    adam_steps=arguments.steps,
                    lbfgs_steps=0,
                    surrogate="exact",
                    learning_rate=arguments.baseline_learning_rate,
                    final_learning_rate=arguments.baseline_learning_rate,
                ),
            }
            figures = {}
            for name, settings in runs.items():
                samples = [timed_run(settings, target) for _ in range(arguments.repeats)]
                figures[name] = {key: median([s[key] for s in samples]) for key in samples[0]}
                f = figures[name]
                print(
                    f"{k:>5} {metric:>6} | {name:>8} | {f['steps_per_second']:8.1f} | {show(f['target_step'], '{:12d}'):>12} | "
                    f"{show(f['target_seconds'], '{:9.1f}'):>9} | {f['final']:9.4f} | {target:7.4f}",
                    flush=True,
                )
            ours, base = figures["ours"], figures["baseline"]
            speed = base["steps_per_second"] / ours["steps_per_second"]
            if ours["target_seconds"] is not None and base["target_seconds"] is not None:
                ratio = f"{base['target_seconds'] / ours['target_seconds']:.2f}×"
            else:
                ratio = "baseline never reached the target" if ours["target_seconds"] is not None else "n/a"
            print(f"{'':>5} {'':>6} | ratio baseline/ours: steps/s {speed:.2f}, time to target {ratio}")


if __name__ == "__main__":
    main()
