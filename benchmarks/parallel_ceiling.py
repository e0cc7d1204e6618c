"""The machine's ceiling for a two-core speed-up: two CPU-bound processes side by side against one.

    .venv/bin/python benchmarks/parallel_ceiling.py [--repeats 5]

A job split perfectly over two cores finishes 2× faster only if two processes run side by side as
fast as one alone. On a virtual machine whose two vCPUs share a physical core, its caches or its
memory bandwidth, or whose host is busy, they do not: if one unit of work takes t₁ alone and the
pair finishes two units in t₂, no program can go faster than 2·t₁/t₂ from one core to two. Each
workload is timed inside its own process (start-up not counted):

* ``python``: an interpreted integer loop (the Python workers' bookkeeping);
* ``numpy``: 600×600 matrix products on one BLAS thread (noise pages, the release's arithmetic).

Each row: the median over ``--repeats`` of t₁ (one process alone) and of t₂ (two started
together, the later of the two to finish), and the ceiling 2·t₁/t₂. ``bench_keyed.py --spark``
prints it beside the local[1] → local[2] ratio of Spark batch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

WORKLOADS = {  # (set-up, not timed; the timed body)
    "python": ("", "x = 0\nfor i in range(12_000_000):\n    x += i\n"),
    "numpy": (
        "import numpy as np\na = np.random.default_rng(0).standard_normal((600, 600))\n",
        "for _ in range(40):\n    a = a @ a\n    a /= np.abs(a).max()\n",
    ),
}
_TIMED = "import time\n{setup}t = time.perf_counter()\n{body}print(time.perf_counter() - t)\n"


def _command(workload: str) -> list[str]:
    setup, body = WORKLOADS[workload]
    return [sys.executable, "-c", _TIMED.format(setup=setup, body=body)]


def _run_together(workload: str, copies: int) -> float:
    """The seconds the slowest of ``copies`` processes, started together, spent on the workload."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    processes = [subprocess.Popen(_command(workload), stdout=subprocess.PIPE, text=True, env=environment) for _ in range(copies)]
    times = []
    for process in processes:
        output, _ = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"the {workload} workload failed with status {process.returncode}")
        times.append(float(output.strip()))
    return max(times)


def parallel_ceiling(*, workload: str = "python", repeats: int = 3) -> dict:
    """t₁ (one process alone), t₂ (two side by side, the later to finish), medians over
    ``repeats`` alternating runs, and the ceiling 2·t₁/t₂ of a one-core → two-core speed-up."""
    alone, pair = [], []
    for _ in range(repeats):
        alone.append(_run_together(workload, 1))
        pair.append(_run_together(workload, 2))
    one, two = statistics.median(alone), statistics.median(pair)
    return {"workload": workload, "alone_seconds": one, "pair_seconds": two, "ceiling": 2 * one / two, "repeats": repeats}


def describe(row: dict) -> str:
    return (
        f"{row['workload']}: one process {row['alone_seconds']:.2f} s, two side by side {row['pair_seconds']:.2f} s "
        f"(median of {row['repeats']}): a two-core speed-up of at most {row['ceiling']:.2f}×"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=["python", "numpy"])
    arguments = parser.parse_args()
    print(f"{os.cpu_count()} CPUs")
    for workload in arguments.workloads:
        print(describe(parallel_ceiling(workload=workload, repeats=arguments.repeats)), flush=True)


if __name__ == "__main__":
    main()
