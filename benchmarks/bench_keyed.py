"""Keyed streams on the local engine: throughput, memory and per-key accuracy.

    .venv/bin/python benchmarks/bench_keyed.py --keys 10000 --steps 1000 --plot docs/keyed_accuracy.png

* Sampler: one page of exact discrete Laplace noise per key, every key in lockstep against one
  key at a time (the same values), side by side.
* Throughput: ``KeyedCounters`` releasing every key at every step (exact lattice path, seeded
  generator), key-steps per second of the release loop, and the process's peak memory.
* Accuracy (ε = 1, event level, m = 1): each key's MaxSE with the mechanism ``count`` picks for
  the horizon, against a fresh Laplace count of every prefix with ε split over the n releases
  (variance 2·(n/ε)²) and against the binary tree (``compare``'s exact finite-n errors).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from pure_dp_mf.engines import keyed
from pure_dp_mf.engines.keyed import KeyedCounters
from pure_dp_mf.mechanisms import planner as compare
from pure_dp_mf.release import lattice
from pure_dp_mf.release.generator import NoiseGenerator


def throughput(keys: int, steps: int, *, lockstep: bool = True) -> dict:
    """``lockstep=False`` times the same run with every key's noise pages drawn one key at a time
    (each counter's own ``LatticeSource.page``, the same values), for a side-by-side ratio."""
    keyed.fill_pages = lattice.fill_pages if lockstep else (lambda sources, **where: None)
    start = time.perf_counter()
    counters = KeyedCounters(keys=[f"key{i}" for i in range(keys)], epsilon=1.0, horizon=steps, rng=NoiseGenerator.from_seed(0))
    setup = time.perf_counter() - start
    zeros = np.zeros(keys, dtype=np.int64)
    start = time.perf_counter()
    for _ in range(steps):
        counters.release(zeros)
    seconds = time.perf_counter() - start
    return {
        "keys": keys,
        "steps": steps,
        "setup_seconds": setup,
        "release_seconds": seconds,
        "key_steps_per_second": keys * steps / seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "base": counters.base_file.rsplit("/", 1)[-1],
        "fallbacks": counters._batch.fallbacks,
    }


def sampler_ratio(keys: int, count: int, repeats: int) -> dict:
    """One page of discrete Laplace noise for each of ``keys`` keys: drawn for all keys in
    lockstep (``discrete_laplace_blocks``) against one key after another
    (``discrete_laplace_block``), side by side, median of ``repeats``; the values are compared."""
    from pure_dp_mf.release.discrete_laplace import discrete_laplace_block, discrete_laplace_blocks

    noise_keys = [i.to_bytes(32, "little") for i in range(keys)]
    s, t = 1, 2**40 + 15  # a lattice rate like the counters' (ε·2^-32/Δ)
    together, alone = [], []
    for repeat in range(repeats):
        start = time.perf_counter()
        lockstep = discrete_laplace_blocks(s=s, t=t, count=count, keys=noise_keys, index=repeat)
        together.append(time.perf_counter() - start)
        start = time.perf_counter()
        single = [discrete_laplace_block(s=s, t=t, count=count, key=key, index=repeat) for key in noise_keys]
        alone.append(time.perf_counter() - start)
        assert all(np.array_equal(a, b) for a, b in zip(lockstep, single, strict=True))
    draws = keys * count
    return {
        "keys": keys,
        "count": count,
        "lockstep_us_per_draw": float(np.median(together)) / draws * 1e6,
        "per_key_us_per_draw": float(np.median(alone)) / draws * 1e6,
    }


def spark_ratio(keys: int, steps: int, events: int) -> dict:
    """The same events through the local engine and through Spark batch on local[2]: wall times."""
    import os
    import sys

    import pandas as pd
    from pyspark.sql import SparkSession

    from pure_dp_mf.engines.keyed import KeyedEvent, run_keyed
    from pure_dp_mf.engines.spark import private_running_counts

    rng = np.random.default_rng(0)
    names = [f"key{i}" for i in range(keys)]
    table = pd.DataFrame(
        {
            "key": [names[i] for i in rng.integers(0, keys, events)],
            "step": np.sort(rng.integers(1, steps + 1, events)),
            "value": 1,
        }
    )
    start = time.perf_counter()
    counters = KeyedCounters(keys=names, epsilon=1.0, horizon=steps, rng=NoiseGenerator.from_seed(1))
    released = sum(
        1 for _ in run_keyed(counters, (KeyedEvent(k, int(s), 1) for k, s in zip(table["key"], table["step"], strict=True)))
    )
    local = time.perf_counter() - start
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    frame = session.createDataFrame(table).cache()
    frame.count()
    start = time.perf_counter()
    rows = private_running_counts(frame, keys=names, epsilon=1.0, horizon=steps, generator=NoiseGenerator.from_seed(1)).count()
    on_spark = time.perf_counter() - start
    session.stop()
    return {"keys": keys, "steps": released, "events": events, "local_seconds": local, "spark_seconds": on_spark, "rows": rows}


def spark_stream_latency(keys: int, steps: int, events_per_step: int, folder: str, *, keys_per_shard: int) -> dict:
    """Spark Structured Streaming on local[2]: one file per step, one micro-batch per file; the
    per-micro-batch wall time (``triggerExecution``) of the query's progress reports, with the
    keys released ``keys_per_shard`` at a time by one Python call."""
    import os
    import shutil
    import sys

    from pyspark.sql import SparkSession

    from pure_dp_mf.engines.spark import private_running_counts_stream

    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(f"{folder}/in")
    rng = np.random.default_rng(0)
    for step in range(1, steps + 1):
        chosen = rng.integers(0, keys, events_per_step)
        path = f"{folder}/in/step{step:05d}.csv"
        with open(path, "w") as handle:
            handle.write("key,step\n" + "".join(f"key{k},{step}\n" for k in chosen))
        os.utime(path, (1_000_000 + step, 1_000_000 + step))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    stream = session.readStream.schema("key string, step long").option("header", True).option("maxFilesPerTrigger", 1)
    released = private_running_counts_stream(
        stream.csv(f"{folder}/in"),
        keys=[f"key{i}" for i in range(keys)],
        epsilon=1.0,
        horizon=max(steps, 2),
        generator=NoiseGenerator.from_seed(2),
        keys_per_shard=keys_per_shard,
    )
    query = (
        released.writeStream.format("parquet")
        .option("path", f"{folder}/out")
        .option("checkpointLocation", f"{folder}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in query.recentProgress if p["numInputRows"] > 0]
    session.stop()
    return {
        "keys": keys,
        "keys_per_shard": keys_per_shard,
        "batches": len(durations),
        "first_seconds": durations[0],
        "median_seconds": float(np.median(durations)),
        "max_seconds": max(durations),
    }


def accuracy(horizons: list[int]) -> list[dict]:
    rows = []
    for n in horizons:
        ranked = compare.comparison_rows(n=n, epsilon=1.0, sort_by="maxse")
        lifted = next(row for row in ranked if row.mechanism == "lifted")
        binary = next(row for row in ranked if row.mechanism == "binary")
        laplace = 2.0 * n**2  # Laplace(n/ε) on each prefix: variance 2·(n/ε)²
        rows.append({"n": n, "ours": lifted.max_se, "binary_tree": binary.max_se, "laplace_per_prefix": laplace})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=1_000)
    parser.add_argument("--horizons", type=int, nargs="+", default=[30, 365, 10_000])
    parser.add_argument("--plot", help="write the accuracy figure here (PNG)")
    parser.add_argument("--sampler-keys", type=int, default=2000, help="keys of the sampler comparison (0: skip)")
    parser.add_argument("--per-key", action="store_true", help="also time the release with pages drawn one key at a time")
    parser.add_argument("--spark", action="store_true", help="also time Spark batch on local[2] (the spark extra)")
    parser.add_argument("--spark-keys", type=int, default=1000)
    parser.add_argument("--spark-steps", type=int, default=365)
    parser.add_argument("--spark-events", type=int, default=100_000)
    parser.add_argument("--spark-stream", action="store_true", help="time Spark Structured Streaming micro-batches")
    parser.add_argument("--stream-keys", type=int, default=10_000)
    parser.add_argument("--stream-steps", type=int, default=12)
    parser.add_argument("--stream-folder", default="/tmp/pure_dp_mf_bench_stream")
    parser.add_argument(
        "--stream-shards",
        type=int,
        nargs="+",
        default=[1024, 1],
        help="keys per shard to time side by side (1: one Python call per key)",
    )
    arguments = parser.parse_args()
    if arguments.spark_stream:
        medians = {}
        for keys_per_shard in arguments.stream_shards:
            latency = spark_stream_latency(
                arguments.stream_keys,
                arguments.stream_steps,
                10 * arguments.stream_keys,
                arguments.stream_folder,
                keys_per_shard=keys_per_shard,
            )
            medians[keys_per_shard] = latency["median_seconds"]
            print(
                f"Spark streaming local[2]: {latency['keys']} keys, {keys_per_shard} keys per shard, "
                f"{latency['batches']} micro-batches of one step: first {latency['first_seconds']:.2f} s, "
                f"median {latency['median_seconds']:.2f} s, max {latency['max_seconds']:.2f} s"
            )
        if len(medians) > 1:
            slowest = max(medians, key=medians.get)
            for keys_per_shard, median in medians.items():
                print(f"  median ratio {slowest} / {keys_per_shard} keys per shard: {medians[slowest] / median:.1f}x")
    if arguments.spark:
        timing = spark_ratio(arguments.spark_keys, arguments.spark_steps, arguments.spark_events)
        print(
            f"Spark batch local[2] vs local: {timing['keys']} keys × {timing['steps']} steps, {timing['events']} events: "
            f"local {timing['local_seconds']:.1f} s, Spark {timing['spark_seconds']:.1f} s, "
            f"ratio Spark/local {timing['spark_seconds'] / timing['local_seconds']:.2f}"
        )
    if arguments.sampler_keys:
        sampler = sampler_ratio(arguments.sampler_keys, 1024, 3)
        print(
            f"discrete Laplace pages, {sampler['keys']} keys × {sampler['count']} draws (median of 3, same values): "
            f"lockstep {sampler['lockstep_us_per_draw']:.3f} µs/draw, one key at a time {sampler['per_key_us_per_draw']:.3f} µs/draw, "
            f"ratio {sampler['per_key_us_per_draw'] / sampler['lockstep_us_per_draw']:.2f}"
        )
    for lockstep in (False, True) if arguments.per_key else (True,):
        result = throughput(arguments.keys, arguments.steps, lockstep=lockstep)
        print(
            f"local engine, noise pages {'in lockstep' if lockstep else 'one key at a time'}: "
            f"{result['keys']} keys × {result['steps']} steps = {result['keys'] * result['steps']:.3g} key-steps, "
            f"base {result['base']}: setup {result['setup_seconds']:.1f} s, release {result['release_seconds']:.1f} s, "
            f"{result['key_steps_per_second']:.3g} key-steps/s, peak RSS {result['peak_rss_mib']:.0f} MiB, "
            f"{result['fallbacks']} roundings decided in rationals"
        )
    print(f"{'n':>7} {'ours MaxSE':>12} {'binary tree':>12} {'Laplace/prefix':>15} {'tree/ours':>10} {'Laplace/ours':>13}")
    rows = accuracy(arguments.horizons)
    for row in rows:
        print(
            f"{row['n']:>7} {row['ours']:>12.5g} {row['binary_tree']:>12.5g} {row['laplace_per_prefix']:>15.5g} "
            f"{row['binary_tree'] / row['ours']:>10.3f} {row['laplace_per_prefix'] / row['ours']:>13.1f}"
        )
    if arguments.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots(figsize=(6, 4))
        n = [row["n"] for row in rows]
        for name, label in (
            ("ours", "lifted base (count's choice)"),
            ("binary_tree", "binary tree"),
            ("laplace_per_prefix", "Laplace per prefix"),
        ):
            axis.plot(n, [row[name] for row in rows], marker="o", label=label)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("horizon n")
        axis.set_ylabel("per-key MaxSE at ε = 1")
        axis.legend()
        figure.tight_layout()
        figure.savefig(arguments.plot)


if __name__ == "__main__":
    main()
