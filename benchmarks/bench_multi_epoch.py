"""Benchmark: optimal prefix-sum factorization for (k,b) = (20,100), n = 2000 (Choquette-Choo et al., CIFAR setting).

Side by side, on the same machine, in one run (one after the other, never concurrently):

* ours: ``pure_dp_mf.gaussian.optimize`` (masked primal, constraint "pairs": the same family as
  jax_privacy's, whose optimum it certifies) run to a tight gap, with its history of certified
  (time, loss, bound) points;
* jax_privacy: ``jax_privacy.matrix_factorization.dense.optimize(n, epochs=k)`` (L-BFGS on X with
  the "orthogonal" mask, stopping at a projected gradient ≤ 1e-3 or after its 10 000 steps), run
  in a separate virtual environment that has jax and jax-privacy (default /tmp/jaxvenv; never the
  project's .venv), with a callback recording its loss after every step. Its iterates keep each
  pattern's diagonal sum at 1, so n·(its mean loss) is the total loss at sensitivity 1; its final
  strategy C is re-scored by our loss ‖A·C⁻¹‖_F²·sens(C)².

Reported for both: the wall time to get within 0.1 % of the optimum, as certified by our dual
bound (ours: the first certified gap ≤ 1e-3; jax: the first step whose loss is ≤ 1.001 × our
best bound), and the time to reach jax's final loss. jax's times include its JIT compilation
(a few seconds). Usage:
    .venv/bin/python benchmarks/bench_multi_epoch.py [--n 2000 --k 20] [--gap 1e-7] [--jax-python /tmp/jaxvenv/bin/python]
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
n, k, max_steps, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
trajectory = []
start = time.perf_counter()

def callback(info):
    trajectory.append((info.step, time.perf_counter() - start, float(info.loss) * n))
    if info.step % 100 == 0:
        print(f"jax step {info.step} {trajectory[-1][1]:.1f} s loss {trajectory[-1][2]:.6f}", file=sys.stderr, flush=True)
    return dense.pg_tol_termination_fn(info)

C = np.asarray(dense.optimize(n, epochs=k, max_optimizer_steps=max_steps, callback=callback))
seconds = time.perf_counter() - start
np.save(out, C)
print(json.dumps({"seconds": seconds, "jax": jax.__version__, "trajectory": trajectory}))
"""


def run_jax(python: str, n: int, k: int, max_steps: int) -> dict | None:
    if not Path(python).exists():
        print(f"jax_privacy baseline skipped: {python} does not exist (install jax and jax-privacy there)")
        return None
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "C.npy")
        completed = subprocess.run(
            [python, "-c", JAX_WORKER, str(n), str(k), str(max_steps), out], stdout=subprocess.PIPE, text=True
        )
        if completed.returncode != 0:
            print("jax_privacy baseline failed")
            return None
        record = json.loads(completed.stdout.strip().splitlines()[-1])
        record["encoder"] = np.load(out)
        return record


def first_time(points, condition) -> float | None:
    """The first time (seconds) of a (seconds, value...) point satisfying ``condition``, or None."""
    return next((point[0] for point in points if condition(point)), None)


def show(seconds: float | None) -> str:
    return "not reached" if seconds is None else f"{seconds:.1f} s"


def main() -> None:
    from pure_dp_mf.factorizations.workloads import prefix_sum
    from pure_dp_mf.gaussian.optimize import optimize
    from pure_dp_mf.gaussian.sensitivity import sensitivity_squared

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--gap", type=float, default=1e-7, help="our stopping gap (tight, to compare final losses)")
    parser.add_argument("--jax-python", default="/tmp/jaxvenv/bin/python")
    parser.add_argument("--jax-max-steps", type=int, default=10_000)
    parser.add_argument("--skip-jax", action="store_true")
    args = parser.parse_args()
    n, k = args.n, args.k
    A = prefix_sum(n)

    print(f"ours: masked primal, constraint 'pairs', to a certified gap of {args.gap:g} ...", flush=True)
    started = time.perf_counter()
    ours = optimize(
        workload=A, max_participations=k, gap=args.gap, constraint="pairs", method="masked-primal", max_iterations=100_000
    )
    our_seconds = time.perf_counter() - started
    bound = ours.dual_bound
    ours_points = [(check.seconds, check.loss, check.relative_gap) for check in ours.history]
    ours_to_target = first_time(ours_points, lambda point: point[2] <= 1e-3)

    print(f"\n(k,b) = ({k},{n // k}), n = {n}, prefix sum; our best dual lower bound on the optimum: {bound:.6f}")
    rows = [("ours (masked primal, certified)", ours_to_target, our_seconds, ours.loss, ours.iterations)]
    jax = None if args.skip_jax else run_jax(args.jax_python, n, k, args.jax_max_steps)
    if jax is not None:
        C = jax["encoder"]
        sens2 = sensitivity_squared(encoder=C, max_participations=k, min_sep=n // k)
        B = np.linalg.solve(C.T, A.T).T
        jax_loss = float(np.sum(B * B)) * sens2
        jax_points = [(seconds, loss) for _, seconds, loss in jax["trajectory"]]
        jax_to_target = first_time(jax_points, lambda point: point[1] <= (1 + 1e-3) * bound)
        rows.append((f"jax_privacy dense.optimize (jax {jax['jax']})", jax_to_target, jax["seconds"], jax_loss, len(jax_points)))
    print(f"{'method':45s} {'to 0.1 %':>12s} {'total':>10s} {'final loss':>16s} {'above bound':>12s} {'iterations':>11s}")
    for name, to_target, total, loss, iterations in rows:
        print(f"{name:45s} {show(to_target):>12s} {total:9.1f}s {loss:16.6f} {(loss - bound) / bound:12.2e} {iterations:11d}")
    if jax is not None:
        ours_to_jax_loss = first_time(ours_points, lambda point: point[1] <= jax_loss)
        print(
            f"\nours reached jax's final loss {jax_loss:.6f} after {show(ours_to_jax_loss)} "
            f"(jax: {jax['seconds']:.1f} s); final loss ours/jax = {ours.loss / jax_loss:.9f}"
        )
        if ours_to_target is not None and jax_to_target is not None:
            print(f"time to 0.1 % of the optimum, ours/jax = {ours_to_target / jax_to_target:.3f}")
        if ours_to_jax_loss is not None:
            print(f"time to jax's final loss, ours/jax = {ours_to_jax_loss / jax['seconds']:.3f}")


if __name__ == "__main__":
    main()
