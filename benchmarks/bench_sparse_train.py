"""The sparse trainer (``train --sparse``) against dense training, side by side in one process.

``--step-time``: seconds per Adam step at each k of ``--sizes`` (objective, backward, update and
the scale fixed), dense (one inversion, L = cumsum(R⁻¹)) and sparse (sparse LU of R, adjoint
solves), both from the same warm start R = diag(B, B), B the shipped base of size k/2, the sparse
one on its initial support; the two are timed alternately, step by step, and the medians of
``--repeats`` steps (after 1 warm-up step each) are printed with their ratio, plus the time of
one prune-and-grow (every 50 steps by default). Torch and BLAS at one thread.

``--final``: the final true constant of a run of ``--steps`` Adam steps (default 300) at each k
of ``--sizes``, dense and sparse, from the same warm start, for both metrics, with the relative
difference (sparse/dense − 1) and the wall time of each.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sparse_train.py --step-time --sizes 256 512 1024 2048
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sparse_train.py --final --sizes 256 --steps 300
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from pure_dp_mf.factorizations.sparse_train import SparseOptions, train_sparse_factorization
from pure_dp_mf.factorizations.train import TrainSettings, check_settings, train_base_factorization
from pure_dp_mf.resources import BASE_FOLDER

KEY = {"maxse": "max_se_constant", "meanse": "mean_se_constant"}


def warm_settings(k: int, metric: str, steps: int) -> TrainSettings:
    return TrainSettings(
        base_size=k,
        metric=metric,
        adam_steps=steps,
        lbfgs_steps=0,
        init="file",
        init_file=str(BASE_FOLDER / f"k{k // 2:03d}_{metric}.npz"),
        init_noise=0.0,
    )


def step_times(k: int, repeats: int) -> tuple[float, float, float, int]:
    """(dense s/step, sparse s/step, prune-and-grow seconds, nnz of the sparse LU factors): medians."""
    import torch

    from pure_dp_mf.factorizations import sparse_train
    from pure_dp_mf.factorizations.train import _Objective, initial_encoder

    settings = check_settings(warm_settings(k, "maxse", 1000))
    options = SparseOptions()
    objective = _Objective(settings, torch, torch.device("cpu"))
    parameter = torch.tensor(initial_encoder(settings, np.random.default_rng(0)), requires_grad=True)
    adam = torch.optim.Adam([parameter], lr=1e-6)
    run = sparse_train._fresh_run(settings, options)
    lu = sparse_train.sparse_lu(run.values, run.rows, run.columns, k)
    dense, sparse = [], []
    for step in range(repeats + 1):
        began = time.perf_counter()
        adam.zero_grad(set_to_none=True)
        loss, _ = objective(parameter, 64.0)
        loss.backward()
        adam.step()
        with torch.no_grad():
            parameter.div_(parameter.abs().sum(dim=0).max())
        middle = time.perf_counter()
        sparse_train._adam_step(run, settings, options)
        run.step += 1
        ended = time.perf_counter()
        if step >= 1:
            dense.append(middle - began)
            sparse.append(ended - middle)
    swaps = []
    for _ in range(3):
        began = time.perf_counter()
        sparse_train._swap_support(run, settings, options)
        swaps.append(time.perf_counter() - began)
    return statistics.median(dense), statistics.median(sparse), statistics.median(swaps), lu.L.nnz + lu.U.nnz - k


def final_costs(k: int, metric: str, steps: int) -> dict:
    settings = warm_settings(k, metric, steps)
    row = {}
    for name, trainer in (("dense", train_base_factorization), ("sparse", train_sparse_factorization)):
        began = time.perf_counter()
        result = trainer(settings=settings, threads=1)
        row[name] = (result.factorization.metadata["costs"][KEY[metric]], time.perf_counter() - began)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--step-time", action="store_true", help="time one Adam step, dense against sparse")
    parser.add_argument("--final", action="store_true", help="final constants of a short run, dense against sparse")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per k (--step-time)")
    parser.add_argument("--steps", type=int, default=300, help="Adam steps per run (--final)")
    arguments = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    if arguments.step_time:
        print(f"seconds per Adam step, median of {arguments.repeats}, one thread, warm start diag(B, B)")
        print(f"{'k':>6} | {'dense':>8} | {'sparse':>8} | {'dense/sparse':>12} | {'prune+grow':>10} | {'nnz(LU)/k':>9}")
        for k in arguments.sizes:
            dense, sparse, swap, fill = step_times(k, arguments.repeats)
            print(f"{k:>6} | {dense:8.4f} | {sparse:8.4f} | {dense / sparse:12.2f} | {swap:10.4f} | {fill / k:9.1f}", flush=True)
    if arguments.final:
        print(f"final true constant 2C² after {arguments.steps} Adam steps from the k/2 base's blocks, one thread")
        print(
            f"{'k':>6} | {'metric':>6} | {'dense':>9} | {'sparse':>9} | {'sparse/dense-1':>14} | {'dense s':>8} | {'sparse s':>8}"
        )
        for k in arguments.sizes:
            for metric in ("maxse", "meanse"):
                row = final_costs(k, metric, arguments.steps)
                (d, dt), (s, st) = row["dense"], row["sparse"]
                print(f"{k:>6} | {metric:>6} | {d:9.6f} | {s:9.6f} | {s / d - 1:+14.4%} | {dt:8.1f} | {st:8.1f}", flush=True)


if __name__ == "__main__":
    main()
