"""Benchmark: the exact streaming counter on a lifted base against the exact binary-tree counter
(the same ``ContinualCounter``, the same exact lattice release) and dense L·z, side by side, in one run.

For every n = 10^min … 10^max (``--min-exponent`` 4, ``--max-exponent`` 8; a fresh worker
process per n, so that peak memory is per n), two mechanisms for horizon n run through the same
engine, ``ContinualCounter(epsilon=1, mechanism=…, generator=NoiseGenerator.secure())``:

* ours: ``mechanisms.mechanism.lifted(base=…, horizon=n)``, the lifted base (p levels);
* tree: ``mechanisms.mechanism.tree(mechanism="binary", horizon=n)`` (``--tree``, ``--arity``:
  any tree of ``trees.MECHANISMS``), streamed by its ``TreeDecoder`` in O(log n) memory with
  exact discrete Laplace noise per node (Δ = its exact number of levels);

each timed as

* batch: ``counts`` on chunks of 2^16 random bits, n steps in all (the tree's batch run is
  skipped above 10^``--tree-batch-max-exponent``, default 7, for time);
* update: ``update`` one step at a time, min(n, ``--update-steps``) steps (default 2·10^5);

and, for n ≤ 10^``--dense-max-exponent`` (default 4), dense: L = L_p[:n] of ours materialised
(used columns only, p ≤ 2), checked against the streamed ``LiftedDecoder.values`` on the same z,
and L·z by one product.

Counts per second are medians over ``--repeats`` runs, per wall-clock second and per CPU second
of the worker (the ratios ours/tree use CPU seconds, robust to other jobs on a shared machine);
set-up (the mechanism, the counter) is not timed. "peak MiB" is the worker's peak resident
memory minus its resident memory after set-up (imports, base, both mechanisms, one counter):
flat in n means the streamer's memory does not grow with n. One BLAS thread (``threadpoolctl``
and the ``*_NUM_THREADS`` variables of the workers). Usage:

    .venv/bin/python benchmarks/bench_stream.py [--base FILE] [--max-exponent 8] [--repeats 3]
    .venv/bin/python benchmarks/bench_stream.py --quick    # n = 10^3 … 10^5, 2·10^4 updates: under a minute

Without ``--base``: the shipped base_factorizations/k256_maxse.npz, else a random k = 256 base on
the 2⁻³² grid (same sizes, so the same speed; the output says which).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 1 << 16
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
QUICK = {"min_exponent": 3, "max_exponent": 5, "update_steps": 20_000, "dense_max_exponent": 3}


def one_thread() -> None:
    """One BLAS thread here (threadpoolctl) and in every worker (environment)."""
    for variable in THREAD_VARIABLES:
        os.environ[variable] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)


def load_base(path: str | None):
    import numpy as np

    from pure_dp_mf.factorizations.factorization import Factorization
    from pure_dp_mf.resources import BASE_FOLDER

    shipped = BASE_FOLDER / "k256_maxse.npz"
    if path is None and shipped.exists():
        path = str(shipped)
    if path is not None:
        return str(Path(path).resolve()), path
    rng = np.random.default_rng(0)
    encoder = np.round((np.eye(256) + 0.05 * np.triu(rng.normal(size=(256, 256)), 1)) * 2**32) / 2**32
    factorization = Factorization.from_encoder(encoder, metadata={"metric": "maxse"})
    return factorization, "random k=256 grid base (no shipped k256_maxse.npz)"


def dense_decoder(decoder, n: int):
    """L_p[:n] of a ``LiftedDecoder`` with p ≤ 2 on its used columns [z₀ | z_{1,a} z_{1,b} | … |
    z_{G,a} z_{G,b} | w] (the head, the a/b blocks of the G groups reached, the coarse block)."""
    import numpy as np

    A = decoder.atoms
    k, r = A.shape
    if n <= k:
        return A[:n].copy()
    if decoder.level_of(n) != 2:
        raise ValueError(f"dense_decoder builds two-level lifts only, not n = {n} for k = {k}")
    groups = -(-(n - k) // (2 * k + 1))
    L = np.zeros((n, (2 * groups + 2) * r))
    L[:k, :r] = A
    for g in range(groups):
        o = k + g * (2 * k + 1)
        rows = slice(o, min(n, o + 2 * k + 1))
        block = np.zeros((2 * k + 1, 2 * r))
        block[:k, :r], block[k + 1 :, r:] = -A[::-1], A
        L[rows, (2 * g + 1) * r : (2 * g + 3) * r] = block[: rows.stop - o]
        L[rows, -r:] = decoder.alphas[0] * A[g]
    return L


def dense_matches_stream(decoder, L, n: int) -> bool:
    """L·z equals the streamed (L_p·z)[:n] for z on L's columns (level 1: the base blocks, level 2:
    the coarse block at its address (2k+1)·r)."""
    import numpy as np

    from pure_dp_mf.mechanisms.streaming import ArraySource

    k, r = decoder.atoms.shape
    z = np.random.default_rng(3).laplace(size=L.shape[1])
    if n <= k:
        source = ArraySource(z)
    else:
        coarse = np.zeros((2 * k + 2) * r)
        coarse[(2 * k + 1) * r :] = z[-r:]
        source = ArraySource({1: z[:-r], 2: coarse})
    return bool(np.allclose(L @ z, decoder.values(source, 0, n), rtol=1e-12, atol=1e-9))


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


def worker(arguments: argparse.Namespace) -> dict:
    import numpy as np

    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.engines.generator import NoiseGenerator
    from pure_dp_mf.mechanisms import mechanism as mechanisms

    n = arguments.worker
    base, _ = load_base(arguments.base)
    ours = mechanisms.lifted(base=base, horizon=n)
    tree = mechanisms.tree(mechanism=arguments.tree, horizon=n, arity=arguments.arity)
    bits = np.random.default_rng(1).random(CHUNK) < 0.5
    record: dict = {"n": n, "levels": ours.decoder.levels, "tree": tree.name, "tree_sensitivity": float(tree.sensitivity)}
    ContinualCounter(epsilon=1.0, mechanism=ours, generator=NoiseGenerator.secure())
    baseline = rss_mib()

    def batch(item) -> None:
        for start in range(0, n, CHUNK):
            item.counts(bits[: min(CHUNK, n - start)].astype(np.int64))
        assert item.released == n

    steps = min(n, arguments.update_steps)
    values = bits[:steps].astype(int).tolist()

    def one_by_one(item) -> None:
        for value in values:
            item.update(value)

    make_ours = lambda: ContinualCounter(epsilon=1.0, mechanism=ours, generator=NoiseGenerator.secure())  # noqa: E731
    make_tree = lambda: ContinualCounter(epsilon=1.0, mechanism=tree, generator=NoiseGenerator.secure())  # noqa: E731
    runs = 1 if n >= 10**7 else arguments.repeats
    record["ours_batch"], record["ours_batch_cpu"] = median_rates(make_ours, batch, n, runs)
    record["ours_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - baseline
    record["ours_update"], record["ours_update_cpu"] = median_rates(make_ours, one_by_one, steps, arguments.repeats)
    if n <= 10**arguments.tree_batch_max_exponent:
        record["tree_batch"], record["tree_batch_cpu"] = median_rates(make_tree, batch, n, runs)
    else:
        record["tree_batch"], record["tree_batch_cpu"] = math.nan, math.nan
    record["tree_update"], record["tree_update_cpu"] = median_rates(make_tree, one_by_one, steps, arguments.repeats)
    if n <= 10**arguments.dense_max_exponent:
        start = time.perf_counter()
        L = dense_decoder(ours.decoder, n)
        record["dense_build_s"] = time.perf_counter() - start
        if not dense_matches_stream(ours.decoder, L, n):
            raise SystemExit(f"n = {n}: the dense L_p[:n]·z differs from the streamed values")
        z = np.random.default_rng(2).laplace(size=L.shape[1])
        record["dense_lz"], record["dense_lz_cpu"] = median_rates(lambda: L, lambda matrix: matrix @ z, n, arguments.repeats)
        record["dense_mib"] = L.nbytes / 2**20
        del L
    return record


def main() -> None:
    from pure_dp_mf.mechanisms.trees import MECHANISMS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"small sizes, under a minute: {QUICK}")
    parser.add_argument("--base", default=None)
    parser.add_argument("--min-exponent", type=int, default=4)
    parser.add_argument("--max-exponent", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tree", default="binary", choices=MECHANISMS, help="the tree mechanism beside ours (default binary)")
    parser.add_argument("--arity", type=int, default=None, help="the tree's arity (kary trees)")
    parser.add_argument("--update-steps", type=int, default=200_000, help="steps of the update() runs (at most n)")
    parser.add_argument("--tree-batch-max-exponent", type=int, default=7, help="skip the tree's batch run above 10^this (time)")
    parser.add_argument("--dense-max-exponent", type=int, default=4, help="dense L·z up to 10^this (781 MiB at 10^4, k = 256)")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the records to this file")
    if parser.parse_known_args()[0].quick:
        parser.set_defaults(**QUICK)
    arguments = parser.parse_args()
    one_thread()
    if arguments.worker is not None:
        print(json.dumps(worker(arguments)))
        return
    _, description = load_base(arguments.base)
    print(
        f"base: {description}; tree: {arguments.tree}; medians of {arguments.repeats}; 1 BLAS thread; ratios ours/tree in CPU s"
    )
    records = []
    header = (
        f"{'n':>11} {'p':>2} {'tree Δ':>6} {'ours batch/s':>13} {'(cpu)':>9} {'tree batch/s':>13} {'(cpu)':>9} {'ratio':>6} "
        f"{'ours upd/s':>11} {'(cpu)':>9} {'tree upd/s':>11} {'(cpu)':>9} {'ratio':>6} {'peak MiB':>9} {'dense L·z/s':>12} {'dense MiB':>10}"
    )
    print(header)
    for exponent in range(arguments.min_exponent, arguments.max_exponent + 1):
        n = 10**exponent
        command = [sys.executable, __file__, "--worker", str(n), "--repeats", str(arguments.repeats), "--tree", arguments.tree]
        command += ["--update-steps", str(arguments.update_steps), "--dense-max-exponent", str(arguments.dense_max_exponent)]
        command += ["--tree-batch-max-exponent", str(arguments.tree_batch_max_exponent)]
        if arguments.arity is not None:
            command += ["--arity", str(arguments.arity)]
        if arguments.base:
            command += ["--base", arguments.base]
        completed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if completed.returncode != 0:
            print(f"n = {n}: worker failed\n{completed.stderr[-2000:]}")
            raise SystemExit(1)
        r = json.loads(completed.stdout.strip().splitlines()[-1])
        records.append(r)
        dense = f"{r['dense_lz']:12.3g} {r['dense_mib']:10.0f}" if "dense_lz" in r else f"{'-':>12} {'-':>10}"
        print(
            f"{n:>11} {r['levels']:>2} {r['tree_sensitivity']:>6.4g} {r['ours_batch']:13.3g} {r['ours_batch_cpu']:9.3g} "
            f"{r['tree_batch']:13.3g} {r['tree_batch_cpu']:9.3g} {r['ours_batch_cpu'] / r['tree_batch_cpu']:6.2f} "
            f"{r['ours_update']:11.3g} {r['ours_update_cpu']:9.3g} {r['tree_update']:11.3g} {r['tree_update_cpu']:9.3g} "
            f"{r['ours_update_cpu'] / r['tree_update_cpu']:6.2f} {r['ours_peak_mib']:9.1f} {dense}",
            flush=True,
        )
    if arguments.json:
        Path(arguments.json).write_text(json.dumps({"base": description, "records": records}, indent=2))


if __name__ == "__main__":
    main()
