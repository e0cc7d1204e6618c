"""Benchmark: optimal prefix-sum factorization for (k,b) = (20,100), n = 2000 (paper 000, CIFAR setting).

Side by side, on the same machine, in one run:

* ours: ``pure_dp_mf.gaussian.optimize`` until its own certified relative duality gap is ≤ 1e-3;
* jax_privacy: ``jax_privacy.matrix_factorization.dense.optimize(2000, epochs=20)`` (L-BFGS on
  X with the "orthogonal" mask), run in a separate virtual environment that has jax and
  jax-privacy (default /tmp/jaxvenv; never the project's .venv). Its strategy C is scored by
  our loss ‖A·C⁻¹‖_F²·sens(C)² and lower-bounded by our dual bound.

Prints times, losses and the time ratio. Usage:
    .venv/bin/python benchmarks/bench_multi_epoch.py [--n 2000 --k 20] [--jax-python /tmp/jaxvenv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

JAX_WORKER = r"""
import json, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from jax_privacy.matrix_factorization import dense
n, k, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
start, cpu = time.perf_counter(), time.process_time()
C = np.asarray(dense.optimize(n, epochs=k))
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
np.save(out, C)
print(json.dumps({"seconds": seconds, "cpu": cpu, "jax": jax.__version__}))
"""


def run_jax(python: str, n: int, k: int) -> dict | None:
    if not Path(python).exists():
        print(f"jax_privacy baseline skipped: {python} does not exist (install jax and jax-privacy there)")
        return None
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "C.npy")
        completed = subprocess.run([python, "-c", JAX_WORKER, str(n), str(k), out], capture_output=True, text=True)
        if completed.returncode != 0:
            print("jax_privacy baseline failed:\n" + completed.stderr[-2000:])
            return None
        record = json.loads(completed.stdout.strip().splitlines()[-1])
        record["encoder"] = np.load(out)
        return record


def main() -> None:
    from pure_dp_mf.gaussian.optimize import optimize
    from pure_dp_mf.gaussian.sensitivity import sensitivity_squared
    from pure_dp_mf.workloads import prefix_sum

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--gap", type=float, default=1e-3)
    parser.add_argument("--jax-python", default="/tmp/jaxvenv/bin/python")
    parser.add_argument("--skip-jax", action="store_true")
    args = parser.parse_args()
    n, k = args.n, args.k
    A = prefix_sum(n)

    jax = None if args.skip_jax else run_jax(args.jax_python, n, k)

    start, cpu = time.perf_counter(), time.process_time()
    ours = optimize(workload=A, max_participations=k, gap=args.gap, progress=True)
    our_seconds, our_cpu = time.perf_counter() - start, time.process_time() - cpu

    rows = [("ours (dual-certified)", our_seconds, our_cpu, ours.loss, ours.relative_gap)]
    if jax is not None:
        C = jax["encoder"]
        sens2 = sensitivity_squared(encoder=C, max_participations=k, min_sep=n // k)
        B = np.linalg.solve(C.T, A.T).T
        loss = float(np.sum(B * B)) * sens2
        rows.append((f"jax_privacy dense.optimize (jax {jax['jax']})", jax["seconds"], jax["cpu"], loss,
                     (loss - ours.dual_bound) / ours.dual_bound))
    print(f"\n(k,b) = ({k},{n // k}), n = {n}, prefix sum; dual lower bound {ours.dual_bound:.6f}")
    print(f"{'method':45s} {'wall s':>9s} {'CPU s':>9s} {'loss':>14s} {'gap vs our bound':>17s}")
    for name, seconds, cpu_seconds, loss, gap in rows:
        print(f"{name:45s} {seconds:9.1f} {cpu_seconds:9.1f} {loss:14.6f} {gap:17.2e}")
    if jax is not None:
        print(f"wall-time ratio ours/jax = {our_seconds / jax['seconds']:.3f}; CPU-time ratio = {our_cpu / jax['cpu']:.3f}; "
              f"loss ratio ours/jax = {ours.loss / rows[1][3]:.6f}")


if __name__ == "__main__":
    main()
