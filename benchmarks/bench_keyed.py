"""Keyed streams on the local engine and on Spark: throughput, memory and per-key accuracy.

    .venv/bin/python benchmarks/bench_keyed.py --keys 10000 --steps 1000 --plot docs/keyed_accuracy.png
    .venv/bin/python benchmarks/bench_keyed.py --quick [--spark] [--spark-stream]   # small sizes, every part

``--quick`` runs every part at small sizes (500 keys × 50 steps, per-key side by side, 200 sampler
keys, horizons 30 and 365: about 15 s; the Spark parts add the JVM's start-up and warm-up, about a
minute each on a 2-core machine).

* Sampler: one page of exact discrete Laplace noise per key, every key in lockstep
  (``discrete_laplace_blocks``) against one key at a time (``discrete_laplace_block``), the same
  values (checked), side by side, median of 3.
* Throughput: ``KeyedCounters`` (default mechanism: the lifted base ``resolve.mechanism_for``
  ranks best for the horizon, or ``--base``) releasing every key at every step (exact lattice
  path, seeded generator), key-steps per second of the release loop (median of ``--repeats``),
  and the process's peak memory. With ``--per-key`` the same run with every key's noise pages
  drawn one key at a time (``release.lattice.fill_pages`` switched off, so that each
  ``LatticeSource.page`` draws its own: the same values), side by side, with the ratio.
* Accuracy (ε = 1, event level, m = 1): each key's MaxSE with the lifted base the planner picks
  for the horizon, against a fresh Laplace count of every prefix with ε split over the n releases
  (variance 2·(n/ε)²) and against the binary tree (``planner.comparison_rows``: exact finite-n
  errors).
* ``--spark``: the scaling of Spark batch, each run a fresh process (start-up included) whose
  process tree's peak resident memory and CPU time are sampled from outside (the Python driver,
  the JVM, one Python worker and all of them), with the machine's load (runnable processes, 1-minute mean) before and after: for each
  of ``--spark-keys`` (default 10⁴ and 10⁵ keys; 10⁶ by naming it) × ``--spark-steps`` (365),
  ``--spark-events-per-key`` events a key (10: sparse), the runs of ``--spark-runs``: ``pure-dp-mf
  count`` with the local engine (up to ``--local-max-keys``), with ``--engine spark`` on each of
  ``--spark-masters`` (local[1] and local[2], ``PURE_DP_MF_SPARK_MASTER``), both writing
  ``--spark-sink`` (csv: the files checked byte-identical; parquet), and the DataFrame API on each
  of ``--api-masters`` (``private_running_counts(…).write.parquet``: Spark's writer); every Parquet
  output is checked for its rows and the total of its counts. Time, rows per second, CPU time,
  memory, the ratios local[1]/local[2] and Spark/local, the former beside the machine's two-core
  ceiling (``parallel_ceiling.py``: two CPU-bound processes side by side against one, measured
  first). A run past ``--spark-timeout`` seconds is
  stopped. E.g. 10⁶ keys through the DataFrame API only: ``--spark --spark-keys 1000000
  --spark-runs api``.
* ``--spark-stream``: Spark Structured Streaming (``private_running_counts_stream``) on
  local[2], one file of events and one tick of the public clock (``file_clock``) per step, one
  micro-batch per step; per-micro-batch wall times for each of ``--stream-keys`` (default 10⁴
  and 10⁵), ``--stream-shards`` (keys released per Python call) and ``--stream-partitions`` (the
  state store's partitions, ``spark.sql.shuffle.partitions``: default 2, Spark's own default is
  200), and the state store's size after the last batch. The generator is a key file (``NoiseGenerator.from_key_file``) bound to
  the query's checkpoint.
* Memory: the peak resident memory of a fresh process releasing K keys × n steps on the local
  engine, for each of ``--memory-shapes`` (default 10³ × 10³, 10³ × 10⁴, 10⁴ × 10³).

The run ends with the speed goals' table (Markdown): each goal beside what this run measured.

The streaming part runs in this process's session; the Spark parts need PySpark (``pip install '.[spark]'``) and Java 17;
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

from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import KeyedCounters
from pure_dp_mf.mechanisms import planner
from pure_dp_mf.release import lattice

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_ceiling import describe as describe_ceiling  # noqa: E402
from parallel_ceiling import parallel_ceiling  # noqa: E402

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
QUICK = {
    "keys": 500,
    "steps": 50,
    "repeats": 3,
    "horizons": [30, 365],
    "sampler_keys": 200,
    "per_key": True,
    "spark_keys": [500],
    "spark_steps": 30,
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
            counters = KeyedCounters(keys=names, epsilon=1.0, horizon=steps, base=base, generator=NoiseGenerator.from_seed(0))
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


SPARK_API_CHILD = r"""
import os, sys, time, warnings
warnings.simplefilter("ignore")
from pure_dp_mf.engines.spark import local_session, private_running_counts
from pure_dp_mf.engines.generator import NoiseGenerator
events, keys_file, steps, output = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
keys = open(keys_file, encoding="utf-8").read().split()
spark = local_session("bench_keyed")
start = time.perf_counter()
frame = spark.read.csv(events, header=True)
released = private_running_counts(frame, keys=keys, epsilon=1.0, horizon=steps, key_column="key", step_column="step",
                                  generator=NoiseGenerator.from_seed(1))
released.write.parquet(output)
print(f"job {time.perf_counter() - start:.2f}")
spark.stop()
"""


def write_events(folder: str, keys: int, steps: int, per_key: int) -> tuple[str, str]:
    """keys.txt (key0 … key{K−1}) and events.csv: ``per_key`` events a key on average, at uniform
    random steps, in step order (the local engine reads a file in step order)."""
    rng = np.random.default_rng(0)
    events = keys * per_key
    key_index = rng.integers(0, keys, events)
    step = np.sort(rng.integers(1, steps + 1, events))
    keys_file, events_file = os.path.join(folder, "keys.txt"), os.path.join(folder, "events.csv")
    with open(keys_file, "w", encoding="utf-8") as handle:
        handle.write("".join(f"key{i}\n" for i in range(keys)))
    with open(events_file, "w", encoding="utf-8") as handle:
        handle.write("key,step\n")
        for first in range(0, events, 1 << 20):
            rows = zip(key_index[first : first + (1 << 20)].tolist(), step[first : first + (1 << 20)].tolist(), strict=True)
            handle.write("".join(f"key{k},{s}\n" for k, s in rows))
    return keys_file, events_file


def watched(command: list[str], environment: dict, *, timeout: float) -> dict:
    """Run ``command`` and sample its process tree's resident memory every 0.2 s (psutil): the
    peak of the Python driver (the command), of the JVM, of one Python worker and of all Python
    workers together; the wall time, and the CPU time of the whole tree and of each part (user +
    system, as last sampled: on a shared machine the wall time depends on the load, the CPU time
    much less); the machine's load (runnable processes) before and after. A run past ``timeout`` seconds is killed."""
    import subprocess

    import psutil

    load_before = load_average()

    peaks = {"driver": 0, "jvm": 0, "worker": 0, "workers": 0}
    cpu: dict[int, float] = {}  # the last user + system seconds seen of each process of the tree
    role: dict[int, str] = {}  # each process's part: driver, jvm, workers or other (``part``)
    start = time.perf_counter()
    child = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = psutil.Process(child.pid)
    while child.poll() is None:
        if time.perf_counter() - start > timeout:
            for process in [*root.children(recursive=True), root]:
                try:
                    process.kill()
                except psutil.Error:
                    pass
            child.wait()
            raise RuntimeError(f"{' '.join(command[:4])} … ran past {timeout:.0f} s and was stopped")
        try:
            tree = [root, *root.children(recursive=True)]
            workers = 0
            for process in tree:
                try:
                    rss = process.memory_info().rss
                    times = process.cpu_times()
                    if role.get(process.pid, "other") == "other":  # a launcher script may exec the JVM
                        role[process.pid] = part(process, root)
                except psutil.Error:
                    continue
                cpu[process.pid] = times.user + times.system
                kind = role[process.pid]
                if kind == "workers":
                    peaks["worker"] = max(peaks["worker"], rss)
                    workers += rss
                elif kind in ("driver", "jvm"):
                    peaks[kind] = max(peaks[kind], rss)
            peaks["workers"] = max(peaks["workers"], workers)
        except psutil.Error:
            pass
        time.sleep(0.2)
    out, err = child.communicate()
    seconds = time.perf_counter() - start
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} … failed ({child.returncode}): {err.strip().splitlines()[-1:] or ''}")
    memory = {name: value / 2**20 for name, value in peaks.items()}
    parts = {f"cpu_{name}": sum(seconds for pid, seconds in cpu.items() if role.get(pid) == name) for name in ROLES}
    loads = {"load_before": load_before, "load_after": load_average()}
    return {"seconds": seconds, "cpu_seconds": sum(cpu.values()), **parts, **memory, **loads, "stdout": out}


def part(process, root) -> str:
    """Which part of a Spark run a process is: the driver (the command), the JVM (a java
    executable: its class path names pyspark too), a Python worker (``pyspark.daemon`` and the
    workers it forks), or other (the launcher scripts, one of which becomes the JVM). Read once
    per process and kept (an exiting JVM's arguments read empty: it stays the JVM); a process
    whose arguments cannot be read raises ``psutil.Error`` and is classified at the next sample."""
    if process.pid == root.pid:
        return "driver"
    arguments = process.cmdline()
    if not arguments:
        raise psutil_error()
    if "java" in os.path.basename(arguments[0]):
        return "jvm"
    return "workers" if any(name.startswith("pyspark.") for name in arguments) else "other"


def psutil_error() -> Exception:
    import psutil

    return psutil.Error("no arguments")


def load_average() -> str:
    """The machine's load: runnable processes, 1-minute mean (2 cores here), as text."""
    return f"{os.getloadavg()[0]:.1f}"


ROLES = ("driver", "jvm", "workers")


def spark_scaling(
    keys: int,
    steps: int,
    per_key: int,
    folder: str,
    *,
    runs: list[str],
    masters: list[str],
    api_masters: list[str],
    sink: str,
    local: bool,
    timeout: float,
) -> list[dict]:
    """One shape (keys × steps, ``per_key`` events a key), each run a fresh process, start-up
    included, its peak memory and CPU time sampled from outside (``watched``):

    * ``local`` in ``runs`` (and ``local`` true): ``pure-dp-mf count`` on the local engine;
    * ``cli``: ``pure-dp-mf count --engine spark`` on each of ``masters``
      (``PURE_DP_MF_SPARK_MASTER``);
    * ``api``: ``private_running_counts(…).write.parquet(…)`` (the DataFrame API, Spark's own
      Parquet writer) on each of ``api_masters``.

    The command runs write ``sink``: csv (one file, the local engine's and Spark's byte-identical:
    checked) or parquet (the local engine one file, Spark a folder of one file a shard). Every
    Parquet output is checked to hold keys × steps rows with the same total of the released counts
    (the same releases, read back one column of one file at a time)."""
    import filecmp

    os.makedirs(folder, exist_ok=True)
    keys_file, events_file = write_events(folder, keys, steps, per_key)
    base = [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", "count", events_file, "--key-column", "key"]
    base += ["--keys", keys_file, "--step-column", "step", "--horizon", str(steps), "--epsilon", "1", "--seed", "1"]
    base += ["--format", sink]
    environment = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    plan = [("local engine", "local", None)] if "local" in runs and local else []
    plan += [(f"CLI {master}", "spark", master) for master in masters] if "cli" in runs else []
    plan += [(f"DataFrame API {master}", "api", master) for master in api_masters] if "api" in runs else []
    rows, outputs = [], []
    for label, engine, master in plan:
        name = re.sub(r"[^0-9a-z]+", "", (master or "x").lower())
        output = os.path.join(folder, f"out-{engine}-{name}.{'parquet' if engine == 'api' else sink}")
        remove(output)
        run_environment = environment if master is None else {**environment, "PURE_DP_MF_SPARK_MASTER": master}
        if engine == "api":
            command = [sys.executable, "-c", SPARK_API_CHILD, events_file, keys_file, str(steps), output]
        else:
            command = [*base, "--engine", engine, "--output", output]
        result = watched(command, run_environment, timeout=timeout)
        result["check"] = released_digest(output) if output.endswith(".parquet") else None
        outputs.append(output)
        sink_name = "parquet (Spark's writer)" if engine == "api" else sink
        rows.append({"keys": keys, "steps": steps, "events": keys * per_key, "run": label, "sink": sink_name, **result})
        print_scaling(rows[-1])
        if result["check"] is not None and result["check"][0] != keys * steps:
            raise SystemExit(f"{label} wrote {result['check'][0]} rows, not {keys} keys × {steps} steps")
    digests = {row["check"] for row in rows if row["check"] is not None}
    texts = [output for output in outputs if not output.endswith(".parquet")]
    same = len(digests) <= 1 and all(filecmp.cmp(texts[0], other, shallow=False) for other in texts[1:])
    for output in outputs:
        remove(output)
    if not same:
        raise SystemExit("the local engine and Spark wrote different releases for the same seed")
    return rows


def remove(path: str) -> None:
    """An output of an earlier run (a file, a folder, and a CSV file's metadata sidecar) removed."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    for name in (path, path + ".meta.json"):
        if os.path.isfile(name):
            os.unlink(name)


def released_digest(path: str) -> tuple[int, int]:
    """(rows, total of the released counts) of a Parquet output, a file or a folder of files,
    read one column of one file at a time (a 10⁶-key output does not fit in memory at once)."""
    import pyarrow.compute
    import pyarrow.parquet

    files = (
        [os.path.join(path, name) for name in sorted(os.listdir(path)) if name.endswith(".parquet")]
        if os.path.isdir(path)
        else []
    )
    rows = total = 0
    for name in files if os.path.isdir(path) else [path]:
        handle = pyarrow.parquet.ParquetFile(name)
        rows += handle.metadata.num_rows
        for group in range(handle.metadata.num_row_groups):
            column = handle.read_row_group(group, columns=["count"]).column("count")
            total += int(pyarrow.compute.sum(column).as_py() or 0)
    return rows, total


def print_scaling(row: dict) -> None:
    rate = row["keys"] * row["steps"] / row["seconds"]
    print(
        f"{row['keys']:,} keys × {row['steps']} steps ({row['events']:,} events), {row['run']} → {row['sink']}: "
        f"{row['seconds']:.1f} s, {rate:.3g} rows/s; CPU {row['cpu_seconds']:.0f} s (driver {row['cpu_driver']:.0f}, "
        f"JVM {row['cpu_jvm']:.0f}, Python workers {row['cpu_workers']:.0f}); peak RSS driver {row['driver']:.0f} MiB, "
        f"JVM {row['jvm']:.0f} MiB, Python worker {row['worker']:.0f} MiB (all workers {row['workers']:.0f} MiB); "
        f"load {row['load_before']} → {row['load_after']}",
        flush=True,
    )


def scaling_table(rows: list[dict]) -> None:
    """The Spark scaling runs as a Markdown table, with the ratios the goals name (wall time and
    CPU time: on a shared machine the wall time depends on the other load)."""
    print("| keys × steps | run | sink | time | CPU time (JVM, workers) | rows/s | driver | JVM | worker (all) | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['keys']:,} × {row['steps']} | {row['run']} | {row['sink']} | {row['seconds']:.1f} s | "
            f"{row['cpu_seconds']:.0f} s ({row['cpu_jvm']:.0f}, {row['cpu_workers']:.0f}) | "
            f"{row['keys'] * row['steps'] / row['seconds']:.3g} | {row['driver']:.0f} MiB | {row['jvm']:.0f} MiB | "
            f"{row['worker']:.0f} ({row['workers']:.0f}) MiB | {row['load_before']} → {row['load_after']} |"
        )
    for keys in sorted({row["keys"] for row in rows}):
        times = {row["run"]: row["seconds"] for row in rows if row["keys"] == keys}
        for kind in ("CLI", "DataFrame API"):
            one, two = times.get(f"{kind} local[1]"), times.get(f"{kind} local[2]")
            if one and two:
                print(f"{keys:,} keys, {kind}: local[1] / local[2] = {one / two:.2f}× (wall time)")
        if "local engine" in times and "CLI local[2]" in times:
            print(f"{keys:,} keys: Spark local[2] / local engine = {times['CLI local[2]'] / times['local engine']:.2f}×")


def spark_stream_latency(
    session,
    keys: int,
    steps: int,
    events_per_step: int,
    folder: str,
    *,
    keys_per_shard: int,
    base: str | None,
    partitions: int = 2,
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
    session.conf.set("spark.sql.shuffle.partitions", str(partitions))  # the state store's partitions, fixed at the start
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
        "partitions": partitions,
        "batches": len(durations),
        "first_seconds": durations[0],
        "median_seconds": statistics.median(durations),
        "max_seconds": max(durations),
        "state_rows": state_rows,
        "state_bytes": state_bytes,
    }


def stream_part(session, arguments: argparse.Namespace, scratch: str) -> list[dict]:
    """The streaming latencies of every ``--stream-keys``, ``--stream-shards`` and
    ``--stream-partitions`` (the state store's partitions, ``spark.sql.shuffle.partitions``), side
    by side, with the machine's load (runnable processes) before and after each query."""
    results = []
    for keys in arguments.stream_keys:
        medians = {}
        for keys_per_shard in arguments.stream_shards:
            for partitions in arguments.stream_partitions:
                before = load_average()
                latency = spark_stream_latency(
                    session,
                    keys,
                    arguments.stream_steps,
                    arguments.stream_events or 10 * keys,
                    os.path.join(arguments.stream_folder or scratch, f"stream_{keys}_shards{keys_per_shard}_p{partitions}"),
                    keys_per_shard=keys_per_shard,
                    base=arguments.base,
                    partitions=partitions,
                )
                results.append(latency)
                medians[(keys_per_shard, partitions)] = latency["median_seconds"]
                print(
                    f"Spark streaming local[2]: {latency['keys']} keys, {keys_per_shard} keys per shard, {partitions} "
                    f"state partitions, {latency['batches']} micro-batches of one step: first {latency['first_seconds']:.2f} s, "
                    f"median {latency['median_seconds']:.2f} s, max {latency['max_seconds']:.2f} s; state store "
                    f"{latency['state_rows']} rows, {latency['state_bytes'] / 2**20:.2f} MiB; load {before} → {load_average()}",
                    flush=True,
                )
        if len(medians) > 1:
            slowest = max(medians, key=medians.get)
            for setting, median in medians.items():
                if setting != slowest:
                    print(
                        f"  median ratio {slowest} / {setting} (keys per shard, state partitions): {medians[slowest] / median:.1f}x"
                    )
    return results


MEMORY_CHILD = r"""
import sys, time, warnings
warnings.simplefilter("ignore")
from threadpoolctl import threadpool_limits
threadpool_limits(limits=1)
import numpy as np
from pure_dp_mf.engines.keyed import KeyedCounters
from pure_dp_mf.engines.generator import NoiseGenerator
keys, steps = int(sys.argv[1]), int(sys.argv[2])
counters = KeyedCounters(keys=[f"key{i}" for i in range(keys)], epsilon=1.0, horizon=steps, generator=NoiseGenerator.from_seed(0))
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


def goals_table(
    *, local: dict | None, streams: list[dict], batches: list[dict], memory: list[dict], ceilings: list[dict] | None = None
) -> None:
    """The speed goals with what this run measured (Markdown); ``ceilings``: the machine's
    two-core ceilings (``parallel_ceiling``), set beside the local[1] → local[2] speed-up."""
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
            f"| Spark streaming, {stream['keys']:,} keys ({stream['keys_per_shard']} a shard, {stream['partitions']} state "
            f"partitions), one step per micro-batch | {goal} | "
            f"first {stream['first_seconds']:.1f} s, median {stream['median_seconds']:.2f} s; state store "
            f"{stream['state_rows']} rows, {stream['state_bytes'] / 2**20:.2f} MiB |"
        )
    for keys in sorted({batch["keys"] for batch in batches}):
        times = {batch["run"]: batch for batch in batches if batch["keys"] == keys}
        spark, local = times.get("CLI local[2]"), times.get("local engine")
        if spark is not None:
            versus = f", {spark['seconds'] / local['seconds']:.2f}× the local engine ({local['seconds']:.1f} s)" if local else ""
            print(
                f"| Spark batch CLI, {keys:,} keys × {spark['steps']} steps, local[2] | ≤ 2× local, driver ≤ 2 GB | "
                f"{spark['seconds']:.1f} s{versus}; driver {spark['driver']:.0f} MiB, JVM {spark['jvm']:.0f} MiB |"
            )
        if spark is not None and "CLI local[1]" in times:
            speedup = times["CLI local[1]"]["seconds"] / spark["seconds"]
            limits = "; ".join(f"{row['workload']} {row['ceiling']:.2f}×" for row in ceilings or [])
            limits = f" (this machine's two-core ceiling, two processes against one: {limits})" if limits else ""
            print(f"| Spark batch, {keys:,} keys, local[1] → local[2] | ≥ 1.6× | {speedup:.2f}×{limits} |")
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
    parser.add_argument("--spark", action="store_true", help="also time Spark batch (the spark extra)")
    parser.add_argument(
        "--spark-keys", type=int, nargs="+", default=[10_000, 100_000], help="key counts of the batch runs (e.g. 1000000)"
    )
    parser.add_argument("--spark-steps", type=int, default=365)
    parser.add_argument("--spark-events-per-key", type=int, default=10, help="events a key in the batch runs (sparse)")
    parser.add_argument(
        "--spark-runs",
        nargs="+",
        choices=("local", "cli", "api"),
        default=["local", "cli", "api"],
        help="the batch runs: the local engine, the command on Spark, the DataFrame API",
    )
    parser.add_argument("--spark-masters", nargs="+", default=["local[1]", "local[2]"], help="Spark masters of the CLI runs")
    parser.add_argument("--api-masters", nargs="+", default=["local[2]"], help="Spark masters of the DataFrame API runs")
    parser.add_argument("--spark-sink", choices=("csv", "parquet"), default="csv", help="--format of the command runs")
    parser.add_argument("--spark-timeout", type=float, default=3000, help="seconds a batch run may take before it is stopped")
    parser.add_argument(
        "--local-max-keys", type=int, default=200_000, help="run the local engine beside Spark up to this many keys"
    )
    parser.add_argument("--no-api", action="store_true", help="skip the DataFrame API runs (the same as no api in --spark-runs)")
    parser.add_argument("--spark-folder", default=None, help="work folder of the batch runs (default: a temporary one)")
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
        "--stream-partitions",
        type=int,
        nargs="+",
        default=[2],
        help="state store partitions (spark.sql.shuffle.partitions) to time side by side (Spark's default: 200)",
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
    ceilings: list[dict] = []
    if arguments.spark and len(arguments.spark_masters) > 1:  # what two cores can give at most, measured first
        ceilings = [parallel_ceiling(workload=workload, repeats=3) for workload in ("python", "numpy")]
        for row in ceilings:
            print(f"parallel ceiling, {describe_ceiling(row)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_keyed_") as scratch:
        os.environ["PURE_DP_MF_REGISTRY"] = os.path.join(scratch, "registry.sqlite3")  # never the user's registry
        missing = spark_missing() if arguments.spark or arguments.spark_stream else None
        if missing:
            skipped = [flag for flag in ("--spark", "--spark-stream") if getattr(arguments, flag[2:].replace("-", "_"))]
            print(f"skipping {' and '.join(skipped)}: {missing}", file=sys.stderr)
        session = spark_session() if arguments.spark_stream and not missing else None
        try:
            for spark_keys in arguments.spark_keys if arguments.spark and not missing else []:
                try:
                    batches += spark_scaling(
                        spark_keys,
                        arguments.spark_steps,
                        arguments.spark_events_per_key,
                        os.path.join(arguments.spark_folder or scratch, f"batch_{spark_keys}"),
                        runs=[run for run in arguments.spark_runs if not (run == "api" and arguments.no_api)],
                        masters=arguments.spark_masters,
                        api_masters=arguments.api_masters,
                        sink=arguments.spark_sink,
                        local=spark_keys <= arguments.local_max_keys,
                        timeout=arguments.spark_timeout,
                    )
                except Exception as error:  # say so, run the other parts, exit 1 at the end
                    failed.append(f"--spark: {one_line(error)}")
                    print(f"Spark batch failed: {one_line(error)}", file=sys.stderr, flush=True)
                    break
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
    if batches:
        scaling_table(batches)
    goals_table(local=measured.get(True), streams=streams, batches=batches, memory=memory, ceilings=ceilings)
    if skipped or failed:
        reasons = [f"not run: {' and '.join(skipped)} ({missing})"] if skipped else []
        raise SystemExit("; ".join(reasons + [f"failed: {reason}" for reason in failed]))


if __name__ == "__main__":
    main()
