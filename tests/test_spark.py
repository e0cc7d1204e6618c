"""The Spark engine gives the local engine's releases (event and user level) on local[2]."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")
pd = pytest.importorskip("pandas")

from conftest import SAFETY_LIMIT, spark_environment  # noqa: E402

from pure_dp_mf.engines import ledger  # noqa: E402
from pure_dp_mf.engines.generator import NoiseGenerator  # noqa: E402
from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, run_keyed  # noqa: E402
from pure_dp_mf.engines.spark import private_running_counts  # noqa: E402
from pure_dp_mf.errors import InvalidInputError  # noqa: E402
from pure_dp_mf.resources import BASE_FOLDER  # noqa: E402

BASE = str(BASE_FOLDER / "k004_maxse.npz")


def _events(seed: int = 0) -> list[tuple[str, str, int, int]]:
    rng = np.random.default_rng(seed)
    keys = ["de", "fr", "it", "mars"]
    return sorted(
        (
            (f"u{rng.integers(5)}", keys[int(rng.integers(4))], int(step), int(rng.integers(0, 3)))
            for step in rng.integers(1, 25, 120)
        ),
        key=lambda row: row[2],
    )


@pytest.mark.parametrize(
    ("unit", "keys_per_shard", "horizon"), [("event", None, 40), ("user", 1024, 40), ("event", 3, None), ("user", 1, 40)]
)
def test_spark_batch_equals_local(spark, unit, keys_per_shard, horizon):
    keys = ["de", "fr", "it", "es"]  # "es" has no events, "mars" is not public
    rows = _events()
    options = {"privacy_unit": unit, "max_value": 2}
    if unit == "user":
        options.update(max_keys=2, max_per_key=3)
    base = BASE if horizon is not None else None  # without a horizon: anytime counters, the public schedule 1 … 40
    local = KeyedCounters(keys=keys, epsilon=1.0, horizon=horizon, base=base, generator=NoiseGenerator.from_seed(8), **options)
    events = (KeyedEvent(key, step, value, user if unit == "user" else None) for user, key, step, value in rows)
    expected = {
        (key, step): (int(c), lo, hi)
        for step, counts, std, lower, upper in run_keyed(local, events, through=40)
        for key, c, lo, hi in zip(keys, counts.tolist(), lower.tolist(), upper.tolist(), strict=True)
    }
    frame = spark.createDataFrame(pd.DataFrame(rows, columns=["uid", "country", "day", "value"]))
    released = private_running_counts(
        frame,
        keys=keys,
        epsilon=1.0,
        horizon=horizon,
        through=40,
        key_column="country",
        step_column="day",
        value_column="value",
        user_column="uid" if unit == "user" else None,
        base=base,
        generator=NoiseGenerator.from_seed(8),
        keys_per_shard=keys_per_shard,
        **options,
    ).toPandas()
    got = {(r.key, int(r.step)): (int(r["count"]), int(r.lower), int(r.upper)) for _, r in released.iterrows()}
    assert got == expected and len(got) == len(keys) * 40  # every key at every step of the schedule


def test_each_batch_shard_is_released_alone_in_its_own_partition(spark):
    """40 keys in shards of one key: 40 partitions, partition p holding shard p's rows and no
    other shard's (hash-partitioning the shard ids themselves would leave about a third of the
    partitions empty and put two or more shards in others)."""
    from pyspark.sql import functions as F

    from pure_dp_mf.engines.spark import _shard_groups
    from pure_dp_mf.engines.spec import CountSpec

    keys = [f"k{i}" for i in range(40)]
    frame = spark.createDataFrame(pd.DataFrame({"key": keys * 3, "step": [1, 2, 3] * 40}))
    spec = CountSpec(epsilon=1.0, horizon=5, keys=tuple(keys), base=Path(BASE))
    grouped, _, _ = _shard_groups(
        frame,
        spec=spec,
        key_column="key",
        step_column="step",
        value_column=None,
        user_column=None,
        through=5,
        generator=NoiseGenerator.from_seed(1),
        beta=0.05,
        keys_per_shard=1,
    )
    shape = "shard long, keys long, events long"
    found = grouped.applyInPandas(
        lambda group: pd.DataFrame(
            {"shard": [int(group["shard"].iloc[0])], "keys": [int((group["step"] == 0).sum())], "events": [len(group)]}
        ),
        shape,
    ).select("*", F.spark_partition_id().alias("partition"))
    rows = sorted((row.partition, row.shard, row.keys, row.events) for row in found.collect())
    assert rows == [(shard, shard, 1, 4) for shard in range(40)]


def test_spark_trims_a_key_exactly_as_python_strip_does(spark):
    """The characters Spark trims around a key are exactly those ``str.strip`` removes (every code
    point checked), and ``trim(key, _KEY_SPACE)`` equals ``normalise_key`` on keys with each of
    them around, inside and alone, and on keys of other scripts."""
    from pyspark.sql import functions as F

    from pure_dp_mf.engines.keys import normalise_key
    from pure_dp_mf.engines.spark import _KEY_SPACE

    assert sorted(_KEY_SPACE) == [chr(code) for code in range(0x110000) if chr(code).isspace()]
    texts = ["fr", "", "a b", "\u00e9t\u00e9", "\U0001f600x", "\u200bzw"]  # U+200B is not white space
    texts += [f"{space}fr{space}" for space in _KEY_SPACE] + [f"a{space}b{space}" for space in _KEY_SPACE]
    texts += [space * 2 for space in _KEY_SPACE] + ["\u2003\x1c key \u3000\t"]
    frame = spark.createDataFrame([(i, text) for i, text in enumerate(texts)], "i long, key string")
    trimmed = frame.select("i", F.trim(F.col("key"), F.lit(_KEY_SPACE)).alias("key")).collect()
    assert {row.i: row.key for row in trimmed} == {i: normalise_key(text) for i, text in enumerate(texts)}


def test_spark_reads_a_key_with_white_space_around_it_as_the_local_engine_does(spark):
    """One key normalisation (keyed.normalise_key) on every engine: " fr" and "fr\t" are "fr"."""
    keys = ["de", "fr", "it"]
    spaced = [
        (user, {"fr": " fr", "de": "de\t", "it": "\u2003it"}.get(key, key), step, value) for user, key, step, value in _events()
    ]
    local = KeyedCounters(keys=keys, epsilon=1.0, horizon=40, base=BASE, generator=NoiseGenerator.from_seed(3), max_value=2)
    events = (KeyedEvent(key, step, value, None) for _, key, step, value in spaced)
    expected = {
        (key, step): int(c)
        for step, counts, *_ in run_keyed(local, events, through=40)
        for key, c in zip(keys, counts.tolist(), strict=True)
    }
    frame = spark.createDataFrame(pd.DataFrame(spaced, columns=["uid", "country", "day", "value"]))
    released = private_running_counts(
        frame,
        keys=keys,
        epsilon=1.0,
        horizon=40,
        through=40,
        key_column="country",
        step_column="day",
        value_column="value",
        base=BASE,
        generator=NoiseGenerator.from_seed(3),
        max_value=2,
    ).toPandas()
    got = {(r.key, int(r.step)): int(r["count"]) for _, r in released.iterrows()}
    assert got == expected and len(got) == 3 * 40


def test_spark_refuses_bad_input_of_listed_keys_only(spark):
    options = {"keys": ["de"], "epsilon": 1.0, "horizon": 40, "key_column": "country", "step_column": "day", "base": BASE}
    bad = [("u", "de", "1", "5"), ("u", "de", "1_0", "1"), ("u", "de", "x", "1"), ("u", "de", "2", "9" * 40)]
    for row in bad:
        frame = spark.createDataFrame(pd.DataFrame([row], columns=["uid", "country", "day", "value"]))
        with pytest.raises(InvalidInputError, match="nothing was released"):
            private_running_counts(frame, value_column="value", **options)
    unseen = spark.createDataFrame(
        pd.DataFrame(
            [("u", "zz", "1", "5"), ("u", "de", "50", "9"), ("u", "de", "2", "1")], columns=["uid", "country", "day", "value"]
        )
    )
    released = private_running_counts(unseen, value_column="value", **options).toPandas()
    assert len(released) == 40  # unlisted keys and steps beyond the schedule are dropped unseen
    frame = spark.createDataFrame(pd.DataFrame([("u", "de", 1, 1)], columns=["uid", "country", "day", "value"]))
    with pytest.raises(InvalidInputError, match="no such column"):
        private_running_counts(frame, **{**options, "key_column": "land"})


@pytest.mark.parametrize("unit", ["event", "user"])
def test_one_more_event_never_changes_the_rows_spark_releases(spark, unit):
    """FR and DE with events on days 1–3, and one extra event of the unlisted key ZZ on day 9 (or of a
    listed key beyond the horizon): v0.1 on Spark turned 6 rows into 18; now 2 × horizon rows either way."""
    base = [("u1", "FR", 1, 1), ("u2", "DE", 2, 1), ("u1", "FR", 3, 1)]
    options = {"privacy_unit": "user", "max_keys": 1, "max_per_key": 2, "user_column": "uid"} if unit == "user" else {}
    rows = set()
    for extra in ([], [("u9", "ZZ", 9, 1)], [("u9", "DE", 9, 1)], [("u9", "FR", 99, 1)]):
        frame = spark.createDataFrame(pd.DataFrame(base + extra, columns=["uid", "country", "day", "value"]))
        released = private_running_counts(
            frame,
            keys=["FR", "DE"],
            epsilon=1.0,
            horizon=12,
            key_column="country",
            step_column="day",
            base=BASE,
            generator=NoiseGenerator.from_seed(1),
            **options,
        ).toPandas()
        rows.add(tuple(sorted(zip(released.key, released.step, strict=True))))
    assert len(rows) == 1 and len(next(iter(rows))) == 2 * 12


@pytest.mark.slow
def test_count_engine_spark_writes_what_local_writes(tmp_path):
    from conftest import run_cli

    (tmp_path / "keys.txt").write_text("de\nfr\nes\n")
    (tmp_path / "events.csv").write_text(
        "uid,country,day,value\n" + "".join(f"{user},{key},{step},{value}\n" for user, key, step, value in _events(3))
    )
    arguments = ["count", str(tmp_path / "events.csv"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    arguments += ["--step-column", "day", "--column", "value", "--max-value", "2", "--epsilon", "1", "--horizon", "40"]
    arguments += ["--seed", "5", "--base", BASE, "--format", "csv"]
    local = run_cli(*arguments, timeout=600)
    # No PYSPARK_PYTHON and no virtual environment on the PATH: the command sets the workers' Python itself.
    venv_bin = os.path.dirname(sys.executable)
    path = os.pathsep.join(part for part in os.environ.get("PATH", "").split(os.pathsep) if part and part != venv_bin)
    command = [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", *arguments, "--engine", "spark"]
    on_spark = subprocess.run(command, env=spark_environment(PATH=path), capture_output=True, text=True, timeout=600)
    assert local.returncode == 0 and on_spark.returncode == 0, on_spark.stderr[-3000:]
    assert local.stdout == on_spark.stdout


DRIVER = """
import os, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.spark import file_clock, private_running_counts_stream
folder, mode, base, unit = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
horizon = None if base == "anytime" else 40  # no horizon: every key's counter is anytime
base = None if base == "anytime" else base
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider").getOrCreate())
events = (spark.readStream.schema("uid string, country string, day long, value long").option("header", True)
          .option("maxFilesPerTrigger", 1).csv(folder + "/in"))
user = {"user_column": "uid", "privacy_unit": "user", "max_keys": 2, "max_per_key": 3} if unit == "user" else {}
clock = file_clock(spark, folder + "/clock", max_files_per_trigger=1)  # public: the scheduler writes one tick a day
released = private_running_counts_stream(events, clock=clock, keys=["de", "fr", "it", "es"], epsilon=1.0, horizon=horizon,
    key_column="country", step_column="day", value_column="value", max_value=2, base=base, query=folder + "/checkpoint",
    generator=NoiseGenerator.from_key_file(folder + "/noise.key", query=folder + "/checkpoint"), keys_per_shard=3, **user)
writer = (released.writeStream.format("parquet").option("path", folder + "/out")
          .option("checkpointLocation", folder + "/checkpoint"))
query = writer.trigger(availableNow=True).start() if mode == "once" else writer.trigger(processingTime="200 milliseconds").start()
query.awaitTermination()
"""


@pytest.mark.slow
@pytest.mark.parametrize(("unit", "horizon"), [("event", 40), ("user", None)])
def test_streaming_killed_and_restarted_releases_every_step_once(spark, tmp_path, monkeypatch, unit, horizon):
    """A streaming query killed mid-run and restarted releases every step once, the local
    engine's values; with a horizon (event level) and without one (user level, anytime)."""
    import signal
    import subprocess
    import time

    rows = [row for row in _events(5) if row[2] <= 12]
    (tmp_path / "in").mkdir()
    (tmp_path / "clock").mkdir()
    (tmp_path / "driver.py").write_text(DRIVER)
    base = BASE if horizon is not None else "anytime"

    def write_steps(first: int, last: int) -> None:
        for day in range(first, last + 1):
            lines = [f"{u},{k},{s},{v}\n" for u, k, s, v in rows if s == day]
            path = tmp_path / "in" / f"day{day:03d}.csv"
            path.write_text("uid,country,day,value\n" + "".join(lines))
            os.utime(path, (1_000_000 + day, 1_000_000 + day))  # the file source reads in modification-time order
            tick = tmp_path / "clock" / f"tick{day:03d}.csv"  # the day is over: a public fact, not the data's
            tick.write_text(f"step\n{day}\n")
            os.utime(tick, (1_000_000 + day, 1_000_000 + day))

    environment = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    write_steps(1, 8)
    running = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path), "forever", base, unit],
        env=environment,
        start_new_session=True,
    )
    commits = tmp_path / "checkpoint" / "commits"
    deadline = time.time() + 300
    while time.time() < deadline and len(list(commits.glob("[0-9]*")) if commits.exists() else []) < 3:
        time.sleep(0.2)
    os.killpg(running.pid, signal.SIGKILL)  # killed mid-run, between or inside micro-batches
    running.wait()
    assert len(list(commits.glob("[0-9]*"))) >= 3
    write_steps(9, 12)
    finished = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path), "once", base, unit],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    released = spark.read.parquet(str(tmp_path / "out")).toPandas()  # committed files only (the sink's log)
    got = [(r.key, int(r.step), int(r["count"]), int(r.lower), int(r.upper)) for _, r in released.iterrows()]
    assert len(got) == len({(key, step) for key, step, *_ in got})  # no step released twice
    keys = ["de", "fr", "it", "es"]
    # The local engine's values from the query's key, in a ledger of their own: in the query's
    # ledger the key serves the stream's publication, which no other route releases.
    monkeypatch.setenv(ledger.LEDGER_ENV, f"sqlite://{tmp_path / 'local-ledger.sqlite3'}")
    generator = NoiseGenerator.from_key_file(tmp_path / "noise.key", query=str(tmp_path) + "/checkpoint")
    assert not generator.seeded and (tmp_path / "noise.key").stat().st_mode & 0o777 == 0o600
    options = {"privacy_unit": "user", "max_keys": 2, "max_per_key": 3} if unit == "user" else {}
    local = KeyedCounters(
        keys=keys, epsilon=1.0, horizon=horizon, base=BASE if horizon else None, max_value=2, generator=generator, **options
    )
    events = (KeyedEvent(k, s, v, u if unit == "user" else None) for u, k, s, v in rows)
    expected = {
        (key, step, int(c), lo, hi)
        for step, counts, std, lower, upper in run_keyed(local, events, through=12)
        for key, c, lo, hi in zip(keys, counts.tolist(), lower.tolist(), upper.tolist(), strict=True)
    }
    assert set(got) == expected and len(got) == 4 * 12  # none missed, the same values as the local engine
    assert unit == "event" or local.dropped["over_bounds"] > 0  # at user level the bounds bite


@pytest.mark.slow
def test_streaming_user_level_bounds_carry_over_micro_batches(spark, tmp_path):
    from pure_dp_mf.engines.spark import file_clock, private_running_counts_stream

    rows = [row for row in _events(3) if row[2] <= 10]
    keys = ["de", "fr", "it", "es"]
    (tmp_path / "in").mkdir()
    (tmp_path / "clock").mkdir()
    for day in range(1, 11):  # one micro-batch per day: the bounds must span micro-batches
        path = tmp_path / "in" / f"day{day:03d}.csv"
        path.write_text("uid,country,day,value\n" + "".join(f"{u},{k},{s},{v}\n" for u, k, s, v in rows if s == day))
        os.utime(path, (1_000_000 + day, 1_000_000 + day))
        (tmp_path / "clock" / f"tick{day:03d}.csv").write_text(f"step\n{day}\n")
        os.utime(tmp_path / "clock" / f"tick{day:03d}.csv", (1_000_000 + day, 1_000_000 + day))
    clock = file_clock(spark, str(tmp_path / "clock"), max_files_per_trigger=1)
    options = {"privacy_unit": "user", "max_keys": 2, "max_per_key": 2, "max_value": 2}
    provider = "spark.sql.streaming.stateStore.providerClass"
    rocksdb = spark.conf.get(provider)
    spark.conf.set(provider, "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider")
    try:
        with pytest.raises(InvalidInputError, match="RocksDB state store"):
            private_running_counts_stream(
                spark.readStream.schema("uid string, country string, day long").csv(str(tmp_path / "in")),
                clock=clock,
                keys=keys,
                epsilon=1.0,
                horizon=40,
                key_column="country",
                step_column="day",
                user_column="uid",
                base=BASE,
                generator=NoiseGenerator.from_seed(9),
                **options,
            )
    finally:
        spark.conf.set(provider, rocksdb)
    events = (
        spark.readStream.schema("uid string, country string, day long, value long")
        .option("header", True)
        .option("maxFilesPerTrigger", 1)
        .csv(str(tmp_path / "in"))
    )
    with pytest.raises(InvalidInputError, match="survives restarts"):  # no default key: a restart would redraw
        private_running_counts_stream(
            events, clock=clock, keys=keys, epsilon=1.0, horizon=40, key_column="country", step_column="day", generator=None
        )
    released = private_running_counts_stream(
        events,
        clock=clock,
        keys=keys,
        epsilon=1.0,
        horizon=40,
        key_column="country",
        step_column="day",
        value_column="value",
        user_column="uid",
        base=BASE,
        generator=NoiseGenerator.from_seed(9),
        **options,
    )
    query = (
        released.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert len(list((tmp_path / "checkpoint" / "commits").glob("[0-9]*"))) == 10
    frame = spark.read.parquet(str(tmp_path / "out")).toPandas()
    got = {(r.key, int(r.step)): (int(r["count"]), int(r.lower), int(r.upper)) for _, r in frame.iterrows()}
    local = KeyedCounters(keys=keys, epsilon=1.0, horizon=40, base=BASE, generator=NoiseGenerator.from_seed(9), **options)
    expected = {
        (key, step): (int(c), lo, hi)
        for step, counts, std, lower, upper in run_keyed(local, (KeyedEvent(k, s, v, u) for u, k, s, v in rows), through=10)
        for key, c, lo, hi in zip(keys, counts.tolist(), lower.tolist(), upper.tolist(), strict=True)
    }
    assert local.dropped["over_bounds"] > 0  # the bounds bite
    assert len(frame) == len(got) == 4 * 10 and got == expected
    path = tmp_path / "in" / "day011.csv"  # one more day, but the query restarted with other shards
    path.write_text("uid,country,day,value\nu1,de,11,1\n")
    os.utime(path, (1_000_011, 1_000_011))
    (tmp_path / "clock" / "tick011.csv").write_text("step\n11\n")
    os.utime(tmp_path / "clock" / "tick011.csv", (1_000_011, 1_000_011))
    resharded = private_running_counts_stream(
        events,
        clock=clock,
        keys=keys,
        epsilon=1.0,
        horizon=40,
        key_column="country",
        step_column="day",
        value_column="value",
        user_column="uid",
        base=BASE,
        generator=NoiseGenerator.from_seed(9),
        keys_per_shard=2,
        **options,
    )
    query = (
        resharded.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="keys_per_shard differs"):
        query.awaitTermination()
    assert len(list((tmp_path / "checkpoint" / "commits").glob("[0-9]*"))) == 10  # nothing released


def _tiny_count(tmp_path) -> list[str]:
    """A tiny keyed count on Spark through the installed command (two keys, four steps)."""
    from pathlib import Path

    (tmp_path / "keys.txt").write_text("de\nfr\n")
    (tmp_path / "events.csv").write_text("country,day\nde,1\nfr,2\nde,2\n")
    command = str(Path(sys.executable).parent / "pure-dp-mf")
    arguments = ["count", str(tmp_path / "events.csv"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    return [command, *arguments, "--step-column", "day", "--epsilon", "1", "--horizon", "4", "--seed", "1", "--engine", "spark"]


def _error_lines(finished) -> list[str]:
    return [line for line in finished.stderr.splitlines() if line.startswith("error:")]


def test_count_on_spark_without_java_is_one_error_line(tmp_path):
    import subprocess

    environment = spark_environment(PATH=os.path.dirname(sys.executable), JAVA_HOME=None)
    finished = subprocess.run(_tiny_count(tmp_path), env=environment, capture_output=True, text=True, timeout=SAFETY_LIMIT)
    assert finished.returncode == 2 and finished.stdout == ""
    assert len(_error_lines(finished)) == 1 and "Java 17" in _error_lines(finished)[0], finished.stderr
    assert "java not found on PATH and JAVA_HOME unset" in finished.stderr
    fake = tmp_path / "fake-jdk" / "bin"  # a java that cannot start Spark's JVM (an old JDK, a broken install)
    fake.mkdir(parents=True)
    (fake / "java").write_text("#!/bin/sh\necho 'UnsupportedClassVersionError' >&2\nexit 1\n")
    (fake / "java").chmod(0o755)
    environment = spark_environment(PATH=os.pathsep.join([str(fake), "/usr/bin", "/bin"]), JAVA_HOME=None)
    finished = subprocess.run(_tiny_count(tmp_path), env=environment, capture_output=True, text=True, timeout=SAFETY_LIMIT)
    assert finished.returncode == 2 and len(_error_lines(finished)) == 1, finished.stderr
    assert "the JVM did not start" in _error_lines(finished)[0]


@pytest.mark.slow
def test_count_on_spark_out_of_heap_is_one_error_line_naming_the_memory_setting(tmp_path):
    """A heap below what Spark needs to start, and a heap that a job exhausts (a million keys,
    the most a run takes, broadcast in 480 MiB: the JVM stops at its first OutOfMemoryError
    instead of leaving the job waiting), each end in one ``error:`` line naming
    PURE_DP_MF_SPARK_MEMORY and its value: no Python traceback, no Java stack, nothing at
    --output and no shard files left behind (the JVM's own notice as it stops goes to its
    standard output, the command's)."""
    import subprocess

    arguments = _tiny_count(tmp_path)
    small = subprocess.run(
        [*arguments, "--output", str(tmp_path / "small.csv")],
        env=spark_environment(PURE_DP_MF_SPARK_MEMORY="64m"),
        capture_output=True,
        text=True,
        timeout=SAFETY_LIMIT,
    )
    assert small.returncode == 2 and _error_lines(small) == [
        "error: PURE_DP_MF_SPARK_MEMORY=64m is below the heap Spark needs to start (about 450 MiB): "
        "raise PURE_DP_MF_SPARK_MEMORY (e.g. 1g)"
    ], small.stderr[-3000:]
    (tmp_path / "million.txt").write_text("".join(f"k{i}\n" for i in range(1_000_000)))
    arguments[arguments.index("--keys") + 1] = str(tmp_path / "million.txt")
    heap = subprocess.run(
        [*arguments, "--output", str(tmp_path / "heap.csv")],
        env=spark_environment(PURE_DP_MF_SPARK_MEMORY="480m"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert heap.returncode == 1 and len(_error_lines(heap)) == 1, heap.stderr[-3000:]
    assert "PURE_DP_MF_SPARK_MEMORY (now 480m)" in _error_lines(heap)[0]
    for finished in (small, heap):
        assert "Traceback" not in finished.stderr and "\tat " not in finished.stderr
    assert small.stdout == "" and heap.stdout in ("", "Terminating due to java.lang.OutOfMemoryError: Java heap space\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["events.csv", "keys.txt", "million.txt"]


def test_count_on_spark_without_pyspark_names_the_install_line(tmp_path):
    import subprocess

    script = "import sys; sys.modules['pyspark'] = None; from pure_dp_mf.cli import main; main()"
    finished = subprocess.run(
        [sys.executable, "-c", script, *_tiny_count(tmp_path)[1:]], capture_output=True, text=True, timeout=SAFETY_LIMIT
    )
    assert finished.returncode == 2 and len(_error_lines(finished)) == 1, finished.stderr
    assert "pip install -e '.[spark]'" in _error_lines(finished)[0]


@pytest.mark.slow
def test_count_on_spark_at_a_thousand_keys_streams_the_local_bytes_and_never_overwrites(tmp_path):
    """10³ keys in 4 shards (local[2]): the CSV the executors write and the driver streams
    together is byte for byte the local engine's; a rerun onto the same --output is refused
    before Spark starts (the file unchanged); --format parquet writes a folder of one file per
    shard holding the same releases."""
    pyarrow_parquet = pytest.importorskip("pyarrow.parquet")
    keys = [f"k{i}" for i in range(1000)]
    (tmp_path / "keys.txt").write_text("".join(f"{key}\n" for key in keys))
    rng = np.random.default_rng(11)
    steps = np.sort(rng.integers(1, 11, 5000))
    chosen = rng.integers(0, 1000, 5000)
    (tmp_path / "events.csv").write_text("key,day\n" + "".join(f"k{k},{s}\n" for k, s in zip(chosen, steps, strict=True)))
    arguments = [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", "count", str(tmp_path / "events.csv")]
    arguments += ["--key-column", "key", "--keys", str(tmp_path / "keys.txt"), "--step-column", "day", "--epsilon", "1"]
    arguments += ["--horizon", "10", "--seed", "3", "--base", BASE]

    def run(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run([*arguments, *more], env=spark_environment(), capture_output=True, text=True, timeout=600)

    local = run("--output", str(tmp_path / "local.csv"))
    on_spark = run("--engine", "spark", "--output", str(tmp_path / "spark.csv"))
    assert local.returncode == 0 and on_spark.returncode == 0, on_spark.stderr[-3000:]
    written = (tmp_path / "spark.csv").read_bytes()
    assert written == (tmp_path / "local.csv").read_bytes() and written.count(b"\n") == 1 + 1000 * 10
    again = run("--engine", "spark", "--output", str(tmp_path / "spark.csv"))
    assert again.returncode == 2 and _error_lines(again) == [
        f"error: --output {tmp_path / 'spark.csv'} already exists and is not empty"
    ]
    assert "Traceback" not in again.stderr and (tmp_path / "spark.csv").read_bytes() == written
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".pure-dp-mf-spark-")]  # no parts left behind
    parquet = run("--engine", "spark", "--format", "parquet", "--output", str(tmp_path / "spark.parquet"))
    assert parquet.returncode == 0, parquet.stderr[-3000:]
    assert sorted(path.name for path in (tmp_path / "spark.parquet").iterdir()) == [f"part-{i:06d}.parquet" for i in range(4)]
    table = pyarrow_parquet.read_table(tmp_path / "spark.parquet").to_pandas()
    released = pd.read_csv(tmp_path / "local.csv")
    merged = released.merge(table, on=["key", "step"], suffixes=("", "_spark"))
    assert len(merged) == len(table) == 10_000 and (merged["count"] == merged["count_spark"]).all()
    assert (merged["lower"] == merged["lower_spark"]).all() and (merged["upper"] == merged["upper_spark"]).all()
