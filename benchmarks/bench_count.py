"""Benchmark: the exact lattice release against the float-Laplace release, side by side, in one run.

Three paths at n = 10^6 (``--n``), each for the exact path of this version and the float path of
the last version that had one (float Laplace noise, not pure DP: kept here only as the yardstick):

* **library batch**: ``ContinualCounter.counts`` on chunks of 2^16 steps. The float path is
  rebuilt from this version's parts (``LiftedNoise`` with real α's over ``GeneratorSource``, the
  noise rounded as the float counter did), so both use the same engine;
* **count, stdin → stdout, no state**: the real command on a file of n lines of 0/1;
* **count with --state and --output**: group commits (``--commit-every``, default 4096). The float
  path wrote its state before every single step (two fsyncs a step), so its rate is measured at
  ``--float-state-n`` steps (default 2·10⁴; the rate is fsync-bound and does not depend on n).

For the command the float path is the ``pure-dp-mf count`` of git revision ``--float-revision``
(default 1f18a8c, the last release with float noise), checked out into a temporary worktree and
run with the same interpreter. Each command figure is given end to end (n / wall time, start-up
included) and in steady state (n / (T(n) − T(1 line)), start-up excluded). Medians of
``--repeats`` runs. Usage:

    .venv/bin/python benchmarks/bench_count.py [--n 1000000] [--repeats 3] [--base FILE]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 1 << 16


def library_rates(base: Path, n: int, repeats: int) -> tuple[float, float]:
    """(exact counts/s, float counts/s), medians, same base, same n, same chunking."""
    from pure_dp_mf.engines.continual import ContinualCounter, GeneratorSource, LiftedNoise
    from pure_dp_mf.factorizations.factorization import Factorization
    from pure_dp_mf.release.generator import NoiseGenerator, round_to_integers

    x = (np.random.default_rng(0).random(n) < 0.3).astype(np.int64)
    exact, floating = [], []
    factorization = Factorization.load(base)
    for repeat in range(repeats):
        counter = ContinualCounter(base=factorization, epsilon=1.0, horizon=n, rng=NoiseGenerator.secure())
        started = time.perf_counter()
        for start in range(0, n, CHUNK):
            counter.counts(x[start : start + CHUNK])
        exact.append(n / (time.perf_counter() - started))

        scale = counter.scale  # b = Δ/ε, as the float counter computed it
        engine = LiftedNoise(
            decoder=factorization.dense()[0], alphas=counter.alphas, source=GeneratorSource(NoiseGenerator.secure())
        )
        sums = 0
        started = time.perf_counter()
        for start in range(0, n, CHUNK):
            stop = min(n, start + CHUNK)
            prefix = sums + np.cumsum(x[start:stop])
            released = prefix + round_to_integers(scale * engine.values(start, stop))
            sums = int(prefix[-1])
        floating.append(n / (time.perf_counter() - started))
        assert released.dtype == np.int64
    return statistics.median(exact), statistics.median(floating)


def command_seconds(command: list[str], *, stdin: Path | None, cwd: Path, env: dict) -> float:
    started = time.perf_counter()
    with open(stdin, "rb") if stdin is not None else open(os.devnull, "rb") as source:
        result = subprocess.run(command, stdin=source, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, env=env)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {result.stderr.decode()[-400:]}")
    return elapsed


def command_rates(*, root: Path, base: Path, n: int, repeats: int, state: bool, folder: Path) -> tuple[float, float]:
    """(end-to-end counts/s, steady-state counts/s) of ``pure-dp-mf count`` from source tree ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    program = [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", "count"]
    data, one = folder / f"bits{n}.txt", folder / "one.txt"
    if not data.exists():
        rng = np.random.default_rng(1)
        data.write_text("".join("1\n" if v else "0\n" for v in (rng.random(n) < 0.3)))
        one.write_text("1\n")
    totals, starts = [], []
    for repeat in range(repeats):
        for path, sink in ((data, totals), (one, starts)):
            arguments = ["--epsilon", "1", "--horizon", str(n), "--base", str(base)]
            if state:
                run = folder / f"run{repeat}{path.stem}"
                for leftover in folder.glob(f"run{repeat}{path.stem}*"):
                    leftover.unlink()
                arguments += ["--state", f"{run}.state", "--output", f"{run}.out"]
            sink.append(command_seconds([*program, *arguments], stdin=path, cwd=folder, env=env))
    total, start = statistics.median(totals), statistics.median(starts)
    return n / total, n / max(total - start, 1e-9)


def float_tree(revision: str, folder: Path) -> Path:
    """A worktree of ``revision`` (the float path), created under ``folder``."""
    target = folder / "float_path"
    subprocess.run(["git", "worktree", "add", "--detach", str(target), revision], cwd=ROOT, check=True, capture_output=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base", default=None, help="base factorization (default: the shipped k = 1024 MaxSE base)")
    parser.add_argument("--float-revision", default="1f18a8c")
    parser.add_argument("--float-state-n", type=int, default=20_000)
    args = parser.parse_args()
    from pure_dp_mf.resources import largest_base_file

    base = Path(args.base).resolve() if args.base else largest_base_file()
    print(
        f"base {base.name}, n = {args.n:,}, medians of {args.repeats} runs, python {sys.version.split()[0]}, {os.cpu_count()} cores"
    )
    exact_batch, float_batch = library_rates(base, args.n, args.repeats)
    rows = [("library batch", exact_batch, None, float_batch, None)]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        old = float_tree(args.float_revision, folder)
        try:
            for label, state in (("count, stdin → stdout", False), ("count --state --output", True)):
                exact = command_rates(root=ROOT, base=base, n=args.n, repeats=args.repeats, state=state, folder=folder)
                float_n = args.float_state_n if state else args.n
                floating = command_rates(root=old, base=base, n=float_n, repeats=args.repeats, state=state, folder=folder)
                rows.append((label, exact[0], exact[1], floating[0], floating[1]))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)

    def rate(value: float | None) -> str:
        return "—" if value is None else f"{value / 10 ** math.floor(math.log10(value)):.2f}·10^{math.floor(math.log10(value))}"

    print(f"(the float path's --state row at n = {args.float_state_n:,})")
    print("| path | exact (end to end) | exact (steady) | float (end to end) | float (steady) | exact/float (steady) |")
    print("|---|---|---|---|---|---|")
    for label, exact_total, exact_steady, float_total, float_steady in rows:
        ratio = (exact_steady or exact_total) / (float_steady or float_total)
        print(
            f"| {label} | {rate(exact_total)}/s | {rate(exact_steady)}/s | {rate(float_total)}/s | {rate(float_steady)}/s | {ratio:.2f}× |"
        )


if __name__ == "__main__":
    main()
