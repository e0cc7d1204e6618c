"""Benchmark: the streaming ε-DP counter (stream.py) against a binary-tree streaming counter and
dense L·z, side by side, in one run.

For every n = 10^4 … 10^max (a fresh worker process per n, so that peak memory is per n):

* ours, batch: ``ContinualCounter.counts`` on chunks of 2^16 random bits, n steps in all;
* ours, update: ``ContinualCounter.update`` one step at a time, min(n, 2·10^5) steps;
* tree, batch / update: the binary-tree mechanism (Dwork et al. 2010, Chan et al. 2011) streamed
  with O(log n) memory, the same secure generator and the same integer releases (its batch run is
  skipped above 10^``--tree-batch-max-exponent``, default 7, for time);
* dense (n ≤ 10^4 only): L = L_p[:n] materialised (used columns only) and L·z by one product.

Counts per second are medians over ``--repeats`` runs, per wall-clock second and per CPU second
of the worker (the ratios use CPU seconds, robust to other jobs on a shared machine); "peak MiB" is the worker's peak resident
memory minus its resident memory after set-up (imports, base, counter): flat in n means the
streamer's memory does not grow with n. Usage:

    .venv/bin/python benchmarks/bench_stream.py [--base FILE] [--max-exponent 8] [--repeats 3]

Without ``--base``: the shipped base_factorizations/k256_maxse.npz, else a random k = 256 base on
the 2⁻³² grid (same sizes, so the same speed; the output says which).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pure_dp_mf.resources import BASE_FOLDER as BASES

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 1 << 16
UPDATE_STEPS = 200_000


def load_base(path: str | None):
    from pure_dp_mf.factorizations.factorization import Factorization

    shipped = BASES / "k256_maxse.npz"
    if path is None and shipped.exists():
        path = str(shipped)
    if path is not None:
        return Factorization.load(path), path
    rng = np.random.default_rng(0)
    encoder = np.round((np.eye(256) + 0.05 * np.triu(rng.normal(size=(256, 256)), 1)) * 2**32) / 2**32
    return Factorization.from_encoder(encoder, metadata={"metric": "maxse"}), "random k=256 grid base (no shipped k256_maxse.npz)"


class BinaryTreeCounter:
    """The binary-tree counter, streamed: node (level ℓ, index i) covers steps [i·2^ℓ, (i+1)·2^ℓ)
    (1-based t: the node of level ℓ containing t is t >> ℓ); the release at t sums the noisy nodes
    of the set bits of t. Sensitivity = number of levels h, noise Laplace(h/ε) per node, from a
    keyed generator in aligned blocks of 4096 nodes per level; releases S_t + round(noise)."""

    BLOCK = 4096

    def __init__(self, *, epsilon: float, horizon: int, generator) -> None:
        self.levels = horizon.bit_length()
        self.scale = self.levels / epsilon
        self.generator = generator
        self.t, self.total = 0, 0
        self.cache: dict[int, tuple[int, np.ndarray]] = {}

    def _node_noise(self, level: int, first: int, last: int) -> np.ndarray:
        """η_ℓ[first … last] (inclusive) from aligned blocks."""
        block = self.BLOCK
        pieces = [
            self.generator.laplace(index=(level << 48) + b * block, size=block) for b in range(first // block, last // block + 1)
        ]
        values = np.concatenate(pieces)
        return values[first - (first // block) * block : last - (first // block) * block + 1]

    def counts(self, x: np.ndarray) -> np.ndarray:
        t = np.arange(self.t + 1, self.t + len(x) + 1, dtype=np.int64)
        noise = np.zeros(len(x))
        for level in range(self.levels):
            index = t >> level
            eta = self._node_noise(level, int(index[0]), int(index[-1]))
            noise += np.where(index & 1, eta[index - index[0]], 0.0)
        sums = self.total + np.cumsum(x)
        self.t += len(x)
        self.total = int(sums[-1])
        return sums + np.rint(self.scale * noise).astype(np.int64)

    def update(self, x: int) -> int:
        self.t += 1
        self.total += x
        noise, t = 0.0, self.t
        for level in range(self.levels):
            if (t >> level) & 1:
                index = t >> level
                start, values = self.cache.get(level, (-1, None))
                if values is None or not start <= index < start + self.BLOCK:
                    start = index // self.BLOCK * self.BLOCK
                    values = self.generator.laplace(index=(level << 48) + start, size=self.BLOCK)
                    self.cache[level] = (start, values)
                noise += values[index - start]
        return self.total + int(round(self.scale * noise))


def dense_decoder(base, alphas: list[float], n: int) -> np.ndarray:
    """L_2[:n] on its used columns (head, the a/b blocks of the groups reached, coarse), p = 2."""
    A = base.dense()[0]
    k, r = A.shape
    groups = -(-(n - k) // (2 * k + 1))
    L = np.zeros((n, (2 * groups + 2) * r))
    L[:k, :r] = A
    for g in range(groups):
        o = k + g * (2 * k + 1)
        rows = slice(o, min(n, o + 2 * k + 1))
        block = np.zeros((2 * k + 1, 2 * r))
        block[:k, :r], block[k + 1 :, r:] = -A[::-1], A
        L[rows, (2 * g + 1) * r : (2 * g + 3) * r] = block[: rows.stop - o]
        L[rows, -r:] = alphas[0] * A[g]
    return L


def rss_mib() -> float:
    with open("/proc/self/statm") as stream:
        return int(stream.read().split()[1]) * resource.getpagesize() / 2**20


def timed(make, run, steps: int) -> tuple[float, float]:
    """(steps per wall-clock second, steps per CPU second of this process) of ``run(make())``;
    set-up (``make``) not timed. The CPU rate is what a machine not shared with other jobs gives."""
    item = make()
    wall, cpu = time.perf_counter(), time.process_time()
    run(item)
    return steps / (time.perf_counter() - wall), steps / (time.process_time() - cpu)


def median_rates(make, run, steps: int, repeats: int) -> tuple[float, float]:
    rates = [timed(make, run, steps) for _ in range(repeats)]
    return statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates)


def worker(n: int, base_path: str | None, repeats: int, tree: bool) -> dict:
    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.release.generator import NoiseGenerator

    base, _ = load_base(base_path)
    bits = np.random.default_rng(1).random(CHUNK) < 0.5
    record: dict = {"n": n}
    counter = ContinualCounter(base=base, epsilon=1.0, horizon=n, rng=NoiseGenerator.secure())
    baseline = rss_mib()

    def batch(item) -> None:
        for start in range(0, n, CHUNK):
            item.counts(bits[: min(CHUNK, n - start)].astype(np.int64))

    steps = min(n, UPDATE_STEPS)
    values = bits[:steps].astype(int).tolist()

    def one_by_one(item) -> None:
        for value in values:
            item.update(value)

    make_ours = lambda: ContinualCounter(base=base, epsilon=1.0, horizon=n, rng=NoiseGenerator.secure(), alphas=counter.alphas)  # noqa: E731
    make_tree = lambda: BinaryTreeCounter(epsilon=1.0, horizon=n, generator=NoiseGenerator.secure())  # noqa: E731
    runs = 1 if n >= 10**7 else repeats
    record["ours_batch"], record["ours_batch_cpu"] = median_rates(make_ours, batch, n, runs)
    record["ours_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - baseline
    record["ours_update"], record["ours_update_cpu"] = median_rates(make_ours, one_by_one, steps, repeats)
    record["tree_batch"], record["tree_batch_cpu"] = median_rates(make_tree, batch, n, runs) if tree else (math.nan, math.nan)
    record["tree_update"], record["tree_update_cpu"] = median_rates(make_tree, one_by_one, steps, repeats)
    record["levels"] = len(counter.alphas) + 1
    if n <= 10**4 and n > base.n:
        start = time.perf_counter()
        L = dense_decoder(base, counter.alphas, n)
        record["dense_build_s"] = time.perf_counter() - start
        z = np.random.default_rng(2).laplace(size=L.shape[1])
        record["dense_lz"], record["dense_lz_cpu"] = median_rates(lambda: L, lambda matrix: matrix @ z, n, repeats)
        record["dense_mib"] = L.nbytes / 2**20
        del L
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=None)
    parser.add_argument("--max-exponent", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tree-batch-max-exponent", type=int, default=7, help="skip the tree's batch run above 10^this (time)")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the records to this file")
    arguments = parser.parse_args()
    if arguments.worker is not None:
        tree = arguments.worker <= 10**arguments.tree_batch_max_exponent
        print(json.dumps(worker(arguments.worker, arguments.base, arguments.repeats, tree)))
        return
    _, description = load_base(arguments.base)
    print(f"base: {description}")
    records = []
    header = (
        f"{'n':>11} {'p':>2} {'ours batch/s':>13} {'(cpu)':>9} {'tree batch/s':>13} {'(cpu)':>9} {'ratio':>6} "
        f"{'ours upd/s':>11} {'(cpu)':>9} {'tree upd/s':>11} {'(cpu)':>9} {'ratio':>6} {'peak MiB':>9} {'dense L·z/s':>12} {'dense MiB':>10}"
    )
    print(header)
    for exponent in range(4, arguments.max_exponent + 1):
        n = 10**exponent
        command = [
            sys.executable,
            __file__,
            "--worker",
            str(n),
            "--repeats",
            str(arguments.repeats),
            "--tree-batch-max-exponent",
            str(arguments.tree_batch_max_exponent),
        ]
        if arguments.base:
            command += ["--base", arguments.base]
        completed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if completed.returncode != 0:
            print(f"n = {n}: worker failed\n{completed.stderr[-2000:]}")
            break
        r = json.loads(completed.stdout.strip().splitlines()[-1])
        records.append(r)
        dense = f"{r['dense_lz']:12.3g} {r['dense_mib']:10.0f}" if "dense_lz" in r else f"{'-':>12} {'-':>10}"
        print(
            f"{n:>11} {r['levels']:>2} {r['ours_batch']:13.3g} {r['ours_batch_cpu']:9.3g} {r['tree_batch']:13.3g} "
            f"{r['tree_batch_cpu']:9.3g} {r['ours_batch_cpu'] / r['tree_batch_cpu']:6.2f} {r['ours_update']:11.3g} "
            f"{r['ours_update_cpu']:9.3g} {r['tree_update']:11.3g} {r['tree_update_cpu']:9.3g} "
            f"{r['ours_update_cpu'] / r['tree_update_cpu']:6.2f} {r['ours_peak_mib']:9.1f} {dense}",
            flush=True,
        )
    if arguments.json:
        Path(arguments.json).write_text(json.dumps({"base": description, "records": records}, indent=2))


if __name__ == "__main__":
    main()
