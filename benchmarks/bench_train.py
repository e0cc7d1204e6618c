"""Trainer speed and time-to-target against a plain Adam-only baseline, side by side.

For each k, both runs start from the same identity-like R (same seed) and are timed in the
same process, one after the other:

* ours: the p-norm surrogate annealed toward the true cost, geometric learning-rate decay,
  then L-BFGS (``pure_dp_mf.factorizations.train`` defaults, with the given step budget);
* baseline: the paper's plain schedule (section 2.1) without the L-BFGS polish: Adam at a
  constant learning rate directly on the true, non-smooth cost (``surrogate="exact"``).

Printed per k and metric: steps per second, and steps and seconds until the best true
constant 2C² first reaches Arkhipov & Kalinin's Table 2 value ("-" if never within the budget), the
final constant, and the ratio baseline/ours. With --repeats r > 1 every figure is a median.

    .venv/bin/python benchmarks/bench_train.py --sizes 64 128 256 --steps 50000    # full
    .venv/bin/python benchmarks/bench_train.py --sizes 64 --steps 3000             # reduced

``--step-time K``: instead, time one Adam step (objective, backward, update) at k = K, side by
side in one process: the previous decoder (a solve against T_kᵀ, float64), the current one (one
inversion, L = cumsum(R⁻¹), float64) and the current one in float32, each with 1 and 2 torch
threads, from the same warm start; medians of ``--repeats`` (default 9) steps after 2 warm-up steps.

    .venv/bin/python benchmarks/bench_train.py --step-time 1024
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from pure_dp_mf.factorizations.train import TrainSettings, paper_target, train_base_factorization


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


def step_times(k: int, repeats: int) -> None:
    """Median seconds per Adam step for each decoder, precision and thread count (see above)."""
    import torch

    from pure_dp_mf.factorizations.train import _Objective

    settings = TrainSettings(base_size=k, metric="maxse", inner_size=k)
    generator = np.random.default_rng(0)
    start = np.eye(k) + 1e-2 * generator.standard_normal((k, k)) / k
    T = torch.tril(torch.ones(k, k, dtype=torch.float64))

    def solve_decoder(R):  # the previous implementation: one LU solve of Rᵀ·Lᵀ = T_kᵀ
        return torch.linalg.solve(R.T, T.to(R.dtype).T).T

    rows = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name, dtype, decoder in (
            ("solve, float64 (before)", torch.float64, solve_decoder),
            ("inverse, float64", torch.float64, None),
            ("inverse, float32", torch.float32, None),
        ):
            objective = _Objective(settings, torch, torch.device("cpu"))
            if decoder is not None:
                objective.decoder = decoder
            parameter = torch.tensor(start, dtype=torch.float64, requires_grad=True)
            adam = torch.optim.Adam([parameter], lr=1e-4)
            times = []
            for step in range(repeats + 2):
                began = time.perf_counter()
                adam.zero_grad(set_to_none=True)
                loss, _ = objective(parameter.to(dtype), 64.0)
                loss.backward()
                adam.step()
                with torch.no_grad():
                    parameter.div_(parameter.abs().sum(dim=0).max())
                if step >= 2:
                    times.append(time.perf_counter() - began)
            rows.append((threads, name, statistics.median(times)))
    before = {threads: seconds for threads, name, seconds in rows if name.startswith("solve")}
    print(f"k = {k}: seconds per Adam step (median of {repeats}), ratio to the solve path at the same threads")
    print(f"{'threads':>7} | {'decoder':<24} | {'s/step':>7} | {'ratio':>6}")
    for threads, name, seconds in rows:
        print(f"{threads:>7} | {name:<24} | {seconds:7.3f} | {seconds / before[threads]:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--metrics", nargs="+", default=["maxse"], choices=["maxse", "meanse"])
    parser.add_argument("--steps", type=int, default=50_000, help="Adam steps of both runs (paper: 50 000)")
    parser.add_argument("--lbfgs-steps", type=int, default=300, help="L-BFGS steps of our trainer")
    parser.add_argument("--baseline-learning-rate", type=float, default=1e-3)
    parser.add_argument("--repeats", type=int, default=None, help="repeats (default 1; 9 with --step-time)")
    parser.add_argument("--step-time", type=int, default=None, metavar="K", help="time one Adam step at k = K instead")
    arguments = parser.parse_args()
    if arguments.step_time is not None:
        step_times(arguments.step_time, arguments.repeats or 9)
        return
    arguments.repeats = arguments.repeats or 1

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
