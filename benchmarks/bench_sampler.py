"""Benchmark: the exact discrete-Laplace sampler and the exact release of one counter, this tree
against a baseline revision, interleaved in one run.

Two rows, each timed in fresh processes that alternate baseline / this tree (``--repeats``
pairs; medians and their ratio), one BLAS thread, CPU time of the timed section (the machine is
shared: wall time would count other jobs):

* **sampler**: ``discrete_laplace_block`` pages of 2^14 draws at the level-1 rate of the k = 1024
  MaxSE base at horizon ``--n`` (ε = 1), ``--pages`` pages a process (draws/s);
* **library**: ``ContinualCounter.counts`` on chunks of 2^16 steps at n = ``--n`` (counts/s), the
  mechanism built before the clock starts, as in ``bench_count.py``;
* **keys** (with ``--keys K``, or named in ``--rows``): ``discrete_laplace_blocks``, one page of
  ``--count`` draws for each of K keys in one call (the keyed counters' sampler), ``--pages``
  calls a process, at the same rate as the sampler row (draws/s).

Both trees run with the same seeded generator, and the script checks that they draw the same pages
and release the same values (a SHA-256 of each output; any difference stops the run). The
baseline is the package of git revision ``--baseline`` (default a3c4175, the last revision before
the faster sampler), exported with ``git archive`` into a temporary folder. Usage:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sampler.py [--n 1000000] [--repeats 5] [--pages 16]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sampler.py --keys 1000 [--count 1024] --baseline HEAD
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, sys, time, warnings
warnings.simplefilter("ignore")
from threadpoolctl import threadpool_limits
threadpool_limits(limits=1)
import numpy as np
from pure_dp_mf.mechanisms.mechanism import lifted
from pure_dp_mf.resources import base_file
row, n, pages, keys, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
mechanism = lifted(base=base_file(base_size=1024, metric="maxse"), horizon=n)
digest = hashlib.sha256()
if row == "sampler":
    from pure_dp_mf.release.discrete_laplace import discrete_laplace_block
    rate = mechanism.rates(epsilon=1, sensitivity=mechanism.sensitivity)(1)
    started = time.process_time()
    drawn = [discrete_laplace_block(s=rate.numerator, t=rate.denominator, count=1 << 14, key=bytes(32), index=i) for i in range(pages)]
    elapsed = time.process_time() - started
    for page in drawn:
        digest.update(np.ascontiguousarray(page, dtype="<i8").tobytes())
    print(json.dumps({"rate": pages * (1 << 14) / elapsed, "digest": digest.hexdigest()}))
elif row == "keys":
    from pure_dp_mf.release.discrete_laplace import discrete_laplace_blocks
    rate = mechanism.rates(epsilon=1, sensitivity=mechanism.sensitivity)(1)
    names = [i.to_bytes(32, "little") for i in range(keys)]
    started = time.process_time()
    drawn = [discrete_laplace_blocks(s=rate.numerator, t=rate.denominator, count=count, keys=names, index=i) for i in range(pages)]
    elapsed = time.process_time() - started
    for blocks in drawn:
        for page in blocks:
            digest.update(np.ascontiguousarray(page, dtype="<i8").tobytes())
    print(json.dumps({"rate": pages * keys * count / elapsed, "digest": digest.hexdigest()}))
else:
    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.engines.generator import NoiseGenerator
    x = (np.random.default_rng(0).random(n) < 0.3).astype(np.int64)
    counter = ContinualCounter(epsilon=1.0, mechanism=mechanism, generator=NoiseGenerator.from_seed(7))
    released = []
    started = time.process_time()
    for start in range(0, n, 1 << 16):
        released.append(counter.counts(x[start : start + (1 << 16)]))
    elapsed = time.process_time() - started
    for part in released:
        digest.update(np.ascontiguousarray(np.asarray(part, dtype=np.int64), dtype="<i8").tobytes())
    print(json.dumps({"rate": n / elapsed, "digest": digest.hexdigest()}))
"""


def export(revision: str, folder: Path) -> Path:
    """The package of ``revision`` (with the shipped bases it reads), exported under ``folder``."""
    archive = folder / "baseline.tar"
    with open(archive, "wb") as stream:
        subprocess.run(["git", "archive", "--format=tar", revision], cwd=ROOT, check=True, stdout=stream)
    target = folder / "baseline"
    target.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    return target


def measure(root: Path, row: str, n: int, pages: int, env: dict, keys: int = 0, count: int = 1024) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, row, str(n), str(pages), str(keys), str(count)],
        cwd=root,
        env={**env, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{row} in {root} failed: {done.stderr[-600:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rate(value: float) -> str:
    exponent = len(str(int(value))) - 1
    return f"{value / 10**exponent:.2f}·10^{exponent}/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pages", type=int, default=16)
    parser.add_argument("--baseline", default="a3c4175")
    parser.add_argument("--rows", default=None, help="default: sampler,library, or keys with --keys")
    parser.add_argument("--keys", type=int, default=0, help="keys of the keys row (one call draws a page for each)")
    parser.add_argument("--count", type=int, default=1024, help="draws per key and call in the keys row")
    args = parser.parse_args()
    if args.rows is None:
        args.rows = "keys" if args.keys else "sampler,library"
    if "keys" in args.rows.split(",") and args.keys < 1:
        parser.error("the keys row needs --keys K (K >= 1)")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="bench_sampler_") as scratch:
        env["PURE_DP_MF_REGISTRY"] = str(Path(scratch) / "registry.sqlite3")  # never the user's registry
        baseline = export(args.baseline, Path(scratch))
        shape = f", {args.keys} keys × {args.count} draws" if "keys" in args.rows.split(",") else ""
        print(f"n = {args.n:,}{shape}, {args.repeats} interleaved pairs, {os.cpu_count()} cores, 1 BLAS thread, CPU seconds")
        print(f"| row | baseline {args.baseline} | this tree | ratio |")
        print("|---|---|---|---|")
        for row in args.rows.split(","):
            rates: dict[str, list[float]] = {"old": [], "new": []}
            digests = set()
            for _ in range(args.repeats):
                for label, root in (("old", baseline), ("new", ROOT)):
                    result = measure(root, row, args.n, args.pages, env, args.keys, args.count)
                    rates[label].append(result["rate"])
                    digests.add(result["digest"])
            if len(digests) != 1:
                raise SystemExit(f"{row}: the two trees' outputs differ")
            old, new = statistics.median(rates["old"]), statistics.median(rates["new"])
            print(f"| {row} | {rate(old)} | {rate(new)} | {new / old:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
