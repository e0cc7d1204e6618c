"""Keyed streams on the local engine and on Spark: throughput, memory and per-key accuracy.

    .venv/bin/python benchmarks/bench_keyed.py --keys 10000 --steps 1000 --plot docs/keyed_accuracy.png
    .venv/bin/python benchmarks/bench_keyed.py --quick [--spark] [--spark-stream]   # small sizes, every part

``--quick`` runs every part at small sizes (500 keys × 50 steps, per-key side by side, 200 sampler
keys, horizons 30 and 365: about 15 s; the Spark parts add the JVM's start-up and warm-up, about a
minute each on a 2-core machine).

* Sampler: one page of exact discrete Laplace noise per key, every key in lockstep
  (``discrete_laplace_blocks``) against one key at a time (``discrete_laplace_block``), the same
  values (checked), side by side, median of 3.
* Throughput: ``KeyedCounters`` (default mechanism: the lifted base ``planner.mechanism_for``
  ranks best for the horizon, or ``--base``) releasing every key at every step (exact lattice
  path, seeded generator), key-steps per second of the release loop (median of ``--repeats``),
  and the process's peak memory. With ``--per-key`` the same run with every key's noise pages
  drawn one key at a time (``release.lattice.fill_pages`` switched off, so that each
  ``LatticeSource.page`` draws its own: the same values), side by side, with the ratio.
* Accuracy (ε = 1, event level, m = 1): each key's MaxSE with the lifted base the planner picks
  for the horizon, against a fresh Laplace count of every prefix with ε split over the n releases
  (variance 2·(n/ε)²) and against the binary tree (``planner.comparison_rows``: exact finite-n
  errors).
* ``--spark``: the same events through the local engine (``run_keyed``) and through Spark batch
  (``engines.spark.private_running_counts``, its default shards) on local[2], wall times side
  by side (the releases are checked equal), for each of ``--spark-keys`` (default 10³ and 10⁴
  keys × 365 steps, 100 events a key): where Spark starts to win.
* ``--spark-stream``: Spark Structured Streaming (``private_running_counts_stream``) on
  local[2], one file of events and one tick of the public clock (``file_clock``) per step, one
  micro-batch per step; per-micro-batch wall times for each of ``--stream-keys`` (default 10⁴
  and 10⁵) and ``--stream-shards`` (keys released per Python call), and the state store's size
  after the last batch. The generator is a key file (``NoiseGenerator.from_key_file``) bound to
  the query's checkpoint.
* Memory: the peak resident memory of a fresh process releasing K keys × n steps on the local
  engine, for each of ``--memory-shapes`` (default 10³ × 10³, 10³ × 10⁴, 10⁴ × 10³).

The run ends with the speed goals' table (Markdown): each goal beside what this run measured.

The Spark parts share one session and need PySpark (``pip install '.[spark]'``) and Java 17;
without them they are skipped with a message, and a Spark part that fails prints its error
in one line; either way the other parts run and the script then exits with status 1. The lineage
registry is a temporary file (``PURE_DP_MF_REGISTRY``), never the user's; one BLAS thread
(``threadpoolctl``, and the ``*_NUM_THREADS`` variables for Spark's Python workers).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from pure_dp_mf.engines.keyed import KeyedCounters
from pure_dp_mf.mechanisms import planner
from pure_dp_mf.release import lattice
from pure_dp_mf.release.generator import NoiseGenerator

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
QUICK = {
    "keys": 500,
    "steps": 50,
    "repeats": 3,
    "horizons": [30, 365],
    "sampler_keys": 200,
    "per_key": True,
    "spark_keys": [50],
    "spark_steps": 30,
    "spark_events": 3_000,
    "stream_keys": [64],
    "stream_steps": 3,
    "stream_events": 640,
    "stream_shards": [64, 1],
    "memory_shapes": "100x50,100x500",
}


def one_thread() -> None:
    """One BLAS thread here (threadpoolctl) and in Spark's Python workers (environment)."""
    for variable in THREAD_VARIABLES:
        os.environ[variable] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)


def spark_missing() -> str | None:
    """Why the Spark parts cannot run here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return f"PySpark is not installed in {sys.executable} (pip install '.[spark]')"
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        return "Spark needs Java 17 (java on the PATH or JAVA_HOME set)"
    return None


def throughput(keys: int, steps: int, *, lockstep: bool = True, repeats: int = 1, base: str | None = None) -> dict:
    """``lockstep=False`` times the same run with every key's noise pages drawn one key at a time
    (``lattice.fill_pages`` off: each counter's own ``LatticeSource.page``, the same values), for
    a side-by-side ratio. Set-up and peak memory of the first run; release time the median."""
    names = [f"key{i}" for i in range(keys)]
    zeros = np.zeros(keys, dtype=np.int64)
    fill_pages = lattice.fill_pages
    setups, seconds = [], []
    try:
        if not lockstep:
            lattice.fill_pages = lambda sources, **where: None
        for _ in range(repeats):
            start = time.perf_counter()
            counters = KeyedCounters(keys=names, epsilon=1.0, horizon=steps, base=base, rng=NoiseGenerator.from_seed(0))
            setups.append(time.perf_counter() - start)
            start = time.perf_counter()
            for _ in range(steps):
                counts = counters.release(zeros)
            seconds.append(time.perf_counter() - start)
    finally:
        lattice.fill_pages = fill_pages
    release = statistics.median(seconds)
    return {
        "keys": keys,
        "steps": steps,
        "setup_seconds": setups[0],
        "release_seconds": release,
        "key_steps_per_second": keys * steps / release,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "mechanism": counters.mechanism.name,
        "fallbacks": counters._release.fallbacks,
        "last_counts": counts,
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
        "lockstep_us_per_draw": statistics.median(together) / draws * 1e6,
        "per_key_us_per_draw": statistics.median(alone) / draws * 1e6,
    }


def spark_session():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def spark_ratio(session, keys: int, steps: int, events: int, *, base: str | None) -> dict:
    """The same events through the local engine and through Spark batch on local[2]: wall times
    (the Spark job forced by ``count()``); then the releases compared (not timed)."""
    import pandas as pd

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
    counters = KeyedCounters(keys=names, epsilon=1.0, horizon=steps, base=base, rng=NoiseGenerator.from_seed(1))
    local = {
        step: counts
        for step, counts, *_ in run_keyed(
            counters, (KeyedEvent(k, int(s), 1) for k, s in zip(table["key"], table["step"], strict=True))
        )
    }
    local_seconds = time.perf_counter() - start
    frame = session.createDataFrame(table).cache()
    frame.count()
    released = private_running_counts(
        frame, keys=names, epsilon=1.0, horizon=steps, base=base, generator=NoiseGenerator.from_seed(1)
    )
    start = time.perf_counter()
    rows = released.count()
    spark_seconds = time.perf_counter() - start
    got = released.select("key", "step", "count").toPandas()
    frame.unpersist()
    index = {name: i for i, name in enumerate(names)}
    same = len(got) == keys * steps and all(
        int(local[int(step)][index[key]]) == int(count) for key, step, count in got.itertuples(index=False)
    )
    if not same:
        raise SystemExit("Spark batch and the local engine released different counts for the same generator")
    return {
        "keys": keys,
        "steps": len(local),
        "events": events,
        "local_seconds": local_seconds,
        "spark_seconds": spark_seconds,
        "rows": rows,
    }


def spark_stream_latency(
    session, keys: int, steps: int, events_per_step: int, folder: str, *, keys_per_shard: int, base: str | None
) -> dict:
    """Spark Structured Streaming on local[2]: one file of events and one clock tick per step, one
    micro-batch per step (``maxFilesPerTrigger`` 1 on both); the per-micro-batch wall time
    (``triggerExecution``) of the query's progress reports, with the keys released
    ``keys_per_shard`` at a time by one Python call."""
    from pure_dp_mf.engines.spark import file_clock, private_running_counts_stream

    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(f"{folder}/in")
    os.makedirs(f"{folder}/clock")
    rng = np.random.default_rng(0)
    for step in range(1, steps + 1):
        chosen = rng.integers(0, keys, events_per_step)
        path = f"{folder}/in/step{step:05d}.csv"
        with open(path, "w") as handle:
            handle.write("key,step\n" + "".join(f"key{k},{step}\n" for k in chosen))
        tick = f"{folder}/clock/tick{step:05d}.csv"  # the step is over: a public fact, not the data's
        with open(tick, "w") as handle:
            handle.write(f"step\n{step}\n")
        for written in (path, tick):  # the file sources read in modification-time order
            os.utime(written, (1_000_000 + step, 1_000_000 + step))
    checkpoint = f"{folder}/checkpoint"
    stream = session.readStream.schema("key string, step long").option("header", True).option("maxFilesPerTrigger", 1)
    released = private_running_counts_stream(
        stream.csv(f"{folder}/in"),
        clock=file_clock(session, f"{folder}/clock", max_files_per_trigger=1),
        keys=[f"key{i}" for i in range(keys)],
        epsilon=1.0,
        horizon=max(steps, 2),
        base=base,
        generator=NoiseGenerator.from_key_file(f"{folder}/noise.key", query=checkpoint),
        query=checkpoint,
        keys_per_shard=keys_per_shard,
    )
    query = (
        released.writeStream.format("parquet")
        .option("path", f"{folder}/out")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in query.recentProgress if p["numInputRows"] > 0]
    last = query.lastProgress or {}
    state_rows = sum(int(operator.get("numRowsTotal", 0)) for operator in last.get("stateOperators", []))
    state_bytes = sum(int(operator.get("memoryUsedBytes", 0)) for operator in last.get("stateOperators", []))
    rows = session.read.parquet(f"{folder}/out").count()
    if rows != keys * steps:
        raise SystemExit(f"Spark streaming released {rows} rows, not {keys} keys × {steps} steps")
    return {
        "keys": keys,
        "keys_per_shard": keys_per_shard,
        "batches": len(durations),
        "first_seconds": durations[0],
        "median_seconds": statistics.median(durations),
        "max_seconds": max(durations),
        "state_rows": state_rows,
        "state_bytes": state_bytes,
    }


def stream_part(session, arguments: argparse.Namespace, scratch: str) -> list[dict]:
    """The streaming latencies of every ``--stream-keys`` and ``--stream-shards``, side by side."""
    results = []
    for keys in arguments.stream_keys:
        medians = {}
        for keys_per_shard in arguments.stream_shards:
            latency = spark_stream_latency(
                session,
                keys,
                arguments.stream_steps,
                arguments.stream_events or 10 * keys,
                os.path.join(arguments.stream_folder or scratch, f"stream_{keys}_shards{keys_per_shard}"),
                keys_per_shard=keys_per_shard,
                base=arguments.base,
            )
            results.append(latency)
            medians[keys_per_shard] = latency["median_seconds"]
            print(
                f"Spark streaming local[2]: {latency['keys']} keys, {keys_per_shard} keys per shard, "
                f"{latency['batches']} micro-batches of one step: first {latency['first_seconds']:.2f} s, "
                f"median {latency['median_seconds']:.2f} s, max {latency['max_seconds']:.2f} s; state store "
                f"{latency['state_rows']} rows, {latency['state_bytes'] / 2**20:.2f} MiB",
                flush=True,
            )
        if len(medians) > 1:
            slowest = max(medians, key=medians.get)
            for keys_per_shard, median in medians.items():
                if keys_per_shard != slowest:
                    print(f"  median ratio {slowest} / {keys_per_shard} keys per shard: {medians[slowest] / median:.1f}x")
    return results


MEMORY_CHILD = r"""
import sys, time, warnings
warnings.simplefilter("ignore")
from threadpoolctl import threadpool_limits
threadpool_limits(limits=1)
import numpy as np
from pure_dp_mf.engines.keyed import KeyedCounters
from pure_dp_mf.release.generator import NoiseGenerator
keys, steps = int(sys.argv[1]), int(sys.argv[2])
counters = KeyedCounters(keys=[f"key{i}" for i in range(keys)], epsilon=1.0, horizon=steps, rng=NoiseGenerator.from_seed(0))
zeros = np.zeros(keys, dtype=np.int64)
for _ in range(steps):
    counters.release(zeros)
with open("/proc/self/status") as status:  # VmHWM: this process's own peak (ru_maxrss would count the parent's at fork)
    print(next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")))
"""


def keyed_memory(shapes: list[tuple[int, int]]) -> list[dict]:
    """Peak resident memory (Linux ``VmHWM``) of a process releasing K keys at n steps (the local
    engine), one fresh process per shape: O(keys·log n) means flat in n and linear in the keys."""
    import subprocess

    rows = []
    for keys, steps in shapes:
        done = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(keys), str(steps)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the memory run of {keys} keys × {steps} steps failed: {done.stderr[-400:]}")
        peak = int(done.stdout.split()[-1]) / 1024
        rows.append({"keys": keys, "steps": steps, "peak_rss_mib": peak})
        print(f"local engine memory: {keys} keys × {steps} steps: peak RSS {peak:.0f} MiB", flush=True)
    return rows


def goals_table(*, local: dict | None, streams: list[dict], batches: list[dict], memory: list[dict]) -> None:
    """The speed goals with what this run measured (Markdown)."""
    print("| what | goal | measured |")
    print("|---|---|---|")
    if local is not None:
        print(
            f"| keyed local, {local['keys']:,} keys × {local['steps']:,} steps | ≥ 2·10⁶ key-steps/s | "
            f"{local['key_steps_per_second']:.3g} key-steps/s ({local['key_steps_per_second'] / 2e6:.2f} of the goal) |"
        )
    for stream in streams:
        goal = "first ≤ 5 s, median ≤ 1 s" if stream["keys"] <= 10_000 else "median ≤ 5 s, state store size reported"
        print(
            f"| Spark streaming, {stream['keys']:,} keys ({stream['keys_per_shard']} a shard), one step per micro-batch | {goal} | "
            f"first {stream['first_seconds']:.1f} s, median {stream['median_seconds']:.2f} s; state store "
            f"{stream['state_rows']} rows, {stream['state_bytes'] / 2**20:.2f} MiB |"
        )
    if batches:
        cells = "; ".join(
            f"{batch['keys']:,} keys: local {batch['local_seconds']:.1f} s, Spark {batch['spark_seconds']:.1f} s "
            f"({batch['spark_seconds'] / batch['local_seconds']:.2f}×)"
            for batch in batches
        )
        faster = [batch["keys"] for batch in batches if batch["spark_seconds"] < batch["local_seconds"]]
        where = (
            f"Spark faster from {min(faster):,} keys"
            if faster
            else f"Spark slower up to {max(batch['keys'] for batch in batches):,} keys"
        )
        print(f"| Spark batch × {batches[0]['steps']} steps, local[2] | ≤ 2× local, and where Spark wins | {cells}; {where} |")
    if memory:
        cells = "; ".join(f"{row['keys']:,} × {row['steps']:,}: {row['peak_rss_mib']:.0f} MiB" for row in memory)
        print(f"| memory, keyed local (peak RSS, keys × steps) | O(keys · log n) | {cells} |")


def one_line(error: BaseException) -> str:
    """An exception as one line (Spark's carry a Python traceback): the last "…Error: …" line of
    its message, else its type and last line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    causes = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return (causes[-1] if causes else f"{type(error).__name__}: {lines[-1] if lines else ''}")[:400]


def accuracy(horizons: list[int]) -> list[dict]:
    rows = []
    for n in horizons:
        ranked = planner.comparison_rows(n=n, epsilon=1.0, sort_by="maxse")
        lifted = next(row for row in ranked if row.mechanism == "lifted")
        binary = next(row for row in ranked if row.mechanism == "binary")
        laplace = 2.0 * n**2  # Laplace(n/ε) on each prefix: variance 2·(n/ε)²
        rows.append({"n": n, "ours": lifted.max_se, "binary_tree": binary.max_se, "laplace_per_prefix": laplace})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for every part (with --spark/--spark-stream too)")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=1, help="release loops timed per throughput row (median)")
    parser.add_argument("--base", default=None, help="base factorization for every part (default: the planner's lifted base)")
    parser.add_argument("--horizons", type=int, nargs="+", default=[30, 365, 10_000])
    parser.add_argument("--plot", help="write the accuracy figure here (PNG)")
    parser.add_argument("--sampler-keys", type=int, default=2000, help="keys of the sampler comparison (0: skip)")
    parser.add_argument("--per-key", action="store_true", help="also time the release with pages drawn one key at a time")
    parser.add_argument("--spark", action="store_true", help="also time Spark batch on local[2] (the spark extra)")
    parser.add_argument("--spark-keys", type=int, nargs="+", default=[1000, 10_000], help="key counts of the batch comparison")
    parser.add_argument("--spark-steps", type=int, default=365)
    parser.add_argument("--spark-events", type=int, default=None, help="events of the batch comparison (default 100 per key)")
    parser.add_argument("--spark-stream", action="store_true", help="time Spark Structured Streaming micro-batches")
    parser.add_argument("--stream-keys", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--stream-steps", type=int, default=12)
    parser.add_argument("--stream-events", type=int, default=None, help="events per step (default 10 per key)")
    parser.add_argument("--stream-folder", default=None, help="work folder of the streaming run (default: a temporary one)")
    parser.add_argument(
        "--stream-shards",
        type=int,
        nargs="+",
        default=[1024],
        help="keys per shard to time side by side (1: one Python call per key)",
    )
    parser.add_argument(
        "--memory-shapes",
        default="1000x1000,1000x10000,10000x1000",
        help="keys×steps of the memory rows, comma-separated ('' to skip)",
    )
    if parser.parse_known_args()[0].quick:
        parser.set_defaults(**QUICK)
    arguments = parser.parse_args()
    one_thread()
    skipped: list[str] = []
    failed: list[str] = []
    batches: list[dict] = []
    streams: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_keyed_") as scratch:
        os.environ["PURE_DP_MF_REGISTRY"] = os.path.join(scratch, "registry.sqlite3")  # never the user's registry
        missing = spark_missing() if arguments.spark or arguments.spark_stream else None
        if missing:
            skipped = [flag for flag in ("--spark", "--spark-stream") if getattr(arguments, flag[2:].replace("-", "_"))]
            print(f"skipping {' and '.join(skipped)}: {missing}", file=sys.stderr)
        session = spark_session() if (arguments.spark or arguments.spark_stream) and not missing else None
        try:
            for spark_keys in arguments.spark_keys if arguments.spark and session is not None else []:
                events = arguments.spark_events or 100 * spark_keys
                try:
                    timing = spark_ratio(session, spark_keys, arguments.spark_steps, events, base=arguments.base)
                except Exception as error:  # say so, run the other parts, exit 1 at the end
                    failed.append(f"--spark: {one_line(error)}")
                    print(f"Spark batch failed: {one_line(error)}", file=sys.stderr, flush=True)
                    break
                batches.append(timing)
                print(
                    f"Spark batch local[2] vs local: {timing['keys']} keys × {timing['steps']} steps, "
                    f"{timing['events']} events (the same releases): local {timing['local_seconds']:.1f} s, "
                    f"Spark {timing['spark_seconds']:.1f} s, ratio Spark/local {timing['spark_seconds'] / timing['local_seconds']:.2f}",
                    flush=True,
                )
            if arguments.spark_stream and session is not None:
                try:
                    streams = stream_part(session, arguments, scratch)
                except Exception as error:  # a failed query: say so, run the other parts, exit 1 at the end
                    failed.append(f"--spark-stream: {one_line(error)}")
                    print(f"Spark streaming failed: {one_line(error)}", file=sys.stderr, flush=True)
        finally:
            if session is not None:
                session.stop()
    if arguments.sampler_keys:
        sampler = sampler_ratio(arguments.sampler_keys, 1024, 3)
        print(
            f"discrete Laplace pages, {sampler['keys']} keys × {sampler['count']} draws (median of 3, same values): "
            f"lockstep {sampler['lockstep_us_per_draw']:.3f} µs/draw, one key at a time {sampler['per_key_us_per_draw']:.3f} µs/draw, "
            f"ratio {sampler['per_key_us_per_draw'] / sampler['lockstep_us_per_draw']:.2f}",
            flush=True,
        )
    rates, last, measured = {}, {}, {}
    for lockstep in (False, True) if arguments.per_key else (True,):
        result = measured[lockstep] = throughput(
            arguments.keys, arguments.steps, lockstep=lockstep, repeats=arguments.repeats, base=arguments.base
        )
        rates[lockstep], last[lockstep] = result["key_steps_per_second"], result["last_counts"]
        print(
            f"local engine, noise pages {'in lockstep' if lockstep else 'one key at a time'}: "
            f"{result['keys']} keys × {result['steps']} steps = {result['keys'] * result['steps']:.3g} key-steps, "
            f"{result['mechanism']}: setup {result['setup_seconds']:.1f} s, release {result['release_seconds']:.2f} s "
            f"(median of {arguments.repeats}), {result['key_steps_per_second']:.3g} key-steps/s, "
            f"peak RSS {result['peak_rss_mib']:.0f} MiB, {result['fallbacks']} roundings decided in rationals",
            flush=True,
        )
    if len(rates) > 1:
        if not np.array_equal(last[True], last[False]):
            raise SystemExit("the lockstep and one-key-at-a-time runs released different counts")
        print(f"  ratio lockstep / one key at a time: {rates[True] / rates[False]:.2f} (the same releases)")
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
            ("ours", "lifted base (the planner's choice)"),
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
    shapes = [tuple(int(part) for part in shape.split("x")) for shape in arguments.memory_shapes.split(",") if shape]
    memory = keyed_memory(shapes) if shapes else []
    goals_table(local=measured.get(True), streams=streams, batches=batches, memory=memory)
    if skipped or failed:
        reasons = [f"not run: {' and '.join(skipped)} ({missing})"] if skipped else []
        raise SystemExit("; ".join(reasons + [f"failed: {reason}" for reason in failed]))


if __name__ == "__main__":
    main()
