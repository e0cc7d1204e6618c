"""The Spark engine's helpers that need no Spark: the default batch shard size, and the shards'
counters a Python worker keeps between micro-batches (bounded by a number of keys, the same
values kept or rebuilt)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pure_dp_mf.engines import spark as spark_engine
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.errors import InvalidInputError


def test_batch_shards_spread_the_keys_over_the_cores_within_bounds():
    size = spark_engine.batch_shard_size
    assert size(keys=1000, cores=2) == 250  # four shards: two per core
    assert size(keys=10_000, cores=2) == 1024  # at most KEYS_PER_SHARD
    assert size(keys=100, cores=2) == 64 and size(keys=4, cores=8) == 64  # at least _MIN_SHARD
    assert size(keys=1000, cores=0) == 500  # no core reported: one
    for keys in (1, 63, 64, 65, 129, 1000, 5000):
        for cores in (1, 2, 3, 16):
            shard = size(keys=keys, cores=cores)
            assert 64 <= shard <= 1024
            assert shard == 1024 or shard == 64 or -(-keys // shard) == 2 * cores  # two shards a core exactly


def _settings():
    generator = NoiseGenerator.from_seed(3)
    with pytest.warns(UserWarning, match="seeded"):
        return spark_engine._run_settings(
            generator=generator,
            beta=0.05,
            epsilon=1.0,
            horizon=20,
            base=None,
            metric="maxse",
            max_value=1,
            privacy_unit="event",
            max_keys=None,
            max_per_key=None,
        )


def test_the_shard_cache_keeps_keys_up_to_its_budget_and_changes_no_value(monkeypatch):
    settings = _settings()
    spark_engine._SHARD_COUNTERS.clear()
    monkeypatch.setenv("PURE_DP_MF_SPARK_CACHED_KEYS", "5")
    first = spark_engine._shard_counters(["a", "b", "c"], settings)
    assert spark_engine._shard_counters(["a", "b", "c"], settings) is first  # kept
    increments = np.ones((3, 4), dtype=np.int64)
    released = first.release_steps(increments, start=0, totals=np.zeros(3, dtype=np.int64), beta=0.05)[0]
    second = spark_engine._shard_counters(["d", "e", "f"], settings)  # 6 keys > 5: the older shard goes
    assert list(spark_engine._SHARD_COUNTERS.values()) == [second]
    again = spark_engine._shard_counters(["a", "b", "c"], settings)  # rebuilt: the same noise
    assert again is not first
    np.testing.assert_array_equal(
        again.release_steps(increments, start=0, totals=np.zeros(3, dtype=np.int64), beta=0.05)[0], released
    )
    monkeypatch.setenv("PURE_DP_MF_SPARK_CACHED_KEYS", "0")  # nothing kept beyond the shard in use
    spark_engine._shard_counters(["g"], settings)
    assert len(spark_engine._SHARD_COUNTERS) == 1
    monkeypatch.delenv("PURE_DP_MF_SPARK_CACHED_KEYS")
    for shard in (["h"], ["i"], ["j"]):
        spark_engine._shard_counters(shard, settings)
    assert len(spark_engine._SHARD_COUNTERS) == 4  # the default keeps 2^17 keys
    monkeypatch.setenv("PURE_DP_MF_SPARK_CACHED_KEYS", "many")
    with pytest.raises(InvalidInputError, match="PURE_DP_MF_SPARK_CACHED_KEYS='many' is not a whole number"):
        spark_engine._shard_counters(["k"], settings)
    spark_engine._SHARD_COUNTERS.clear()


def _shard_group(keys: list[str], shard: int, first: int, events: list[tuple[str, int, int]]):
    """A shard's group as the batch plan hands it to a Python worker: its keys (step 0, their
    positions in the list) and its events (position, step, value), in no particular order."""
    pd = pytest.importorskip("pandas")
    index = {key: first + i for i, key in enumerate(keys)}
    rows = [(key, index[key], shard, 0, 0) for key in reversed(keys)]
    rows += [(None, index[key], shard, step, value) for key, step, value in events if key in index]
    return pd.DataFrame(rows, columns=["key", "position", "shard", "step", "value"])


@pytest.mark.parametrize("output_format", ["csv", "jsonl"])
def test_shards_written_by_workers_and_merged_are_the_local_engines_text(tmp_path, output_format):
    """1 000 keys in 7 shards of 150, written as the executors write them and streamed together:
    byte for byte what the local engine writes for the same generator."""
    pytest.importorskip("pandas")
    from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, run_keyed
    from pure_dp_mf.engines.keyed_io import KeyedSink

    keys, steps = [f"k{i}" if i % 97 else f'k,"{i}"' for i in range(1000)], 12  # some keys need quoting
    rng = np.random.default_rng(4)
    drawn = zip(rng.integers(0, 1000, 3000), rng.integers(1, steps + 1, 3000), rng.integers(0, 3, 3000), strict=True)
    events = sorted(((keys[int(k)], int(s), int(v)) for k, s, v in drawn), key=lambda event: event[1])
    with pytest.warns(UserWarning, match="seeded"):
        settings = spark_engine._run_settings(
            generator=NoiseGenerator.from_seed(6),
            beta=0.05,
            epsilon=1.0,
            horizon=steps,
            base=None,
            metric="maxse",
            max_value=2,
            privacy_unit="event",
            max_keys=None,
            max_per_key=None,
        )
    summary = {"engine": "spark", "keys": len(keys)}
    folder = tmp_path / "parts"
    folder.mkdir()
    size = 150
    for shard, first in enumerate(range(0, len(keys), size)):
        group = _shard_group(keys[first : first + size], shard, first, events)
        written = spark_engine._write_shard(
            group, through=steps, settings=settings, folder=str(folder), output_format=output_format, summary=summary
        )
        assert written["rows"].tolist() == [len(keys[first : first + size]) * steps]
    output = tmp_path / f"out.{output_format}"
    spark_engine._merge_shards(folder, shards=7, steps=steps, output=output, output_format=output_format, summary=summary)
    local = KeyedCounters(keys=keys, epsilon=1.0, horizon=steps, max_value=2, generator=NoiseGenerator.from_seed(6))
    expected = tmp_path / f"local.{output_format}"
    sink = KeyedSink(counters=local, output=expected, output_format=output_format, summary=summary, beta=0.05, resumed=False)
    for step, counts, std, lower, upper in run_keyed(local, (KeyedEvent(k, s, v) for k, s, v in events)):
        sink.write(step, counts, std, lower, upper)
    sink.close()
    assert output.read_bytes() == expected.read_bytes()
    assert output.read_bytes().count(b"\n") == 1 + len(keys) * steps


def test_a_shard_written_as_parquet_holds_the_local_rows_in_step_order(tmp_path):
    pyarrow_parquet = pytest.importorskip("pyarrow.parquet")
    pytest.importorskip("pandas")
    from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, run_keyed

    keys, steps = ["de", "fr", "it"], 5
    events = [("de", 1, 1), ("fr", 2, 1), ("de", 4, 1)]
    with pytest.warns(UserWarning, match="seeded"):
        settings = spark_engine._run_settings(
            generator=NoiseGenerator.from_seed(2),
            beta=0.05,
            epsilon=1.0,
            horizon=steps,
            base=None,
            metric="maxse",
            max_value=1,
            privacy_unit="event",
            max_keys=None,
            max_per_key=None,
        )
    spark_engine._write_shard(
        _shard_group(keys, 3, 0, events),
        through=steps,
        settings=settings,
        folder=str(tmp_path),
        output_format="parquet",
        summary={"engine": "spark"},
    )
    table = pyarrow_parquet.read_table(tmp_path / "part-000003.parquet")
    assert b"pure_dp_mf" in table.schema.metadata
    local = KeyedCounters(keys=keys, epsilon=1.0, horizon=steps, generator=NoiseGenerator.from_seed(2))
    expected = [
        (key, step, int(c), lo, hi)
        for step, counts, std, lower, upper in run_keyed(local, (KeyedEvent(k, s, v) for k, s, v in events))
        for key, c, lo, hi in zip(keys, counts.tolist(), lower.tolist(), upper.tolist(), strict=True)
    ]
    got = list(zip(*(table.column(name).to_pylist() for name in ("key", "step", "count", "lower", "upper")), strict=True))
    assert got == expected


def test_spark_failures_are_one_line_naming_the_setting_and_no_data(monkeypatch):
    monkeypatch.setenv("PURE_DP_MF_SPARK_MEMORY", "3g")
    heap = spark_engine.spark_error(
        RuntimeError("An error occurred while calling o52.count.\n: java.lang.OutOfMemoryError: Java heap space\n\tat x.y"),
        keys_per_shard=512,
    )
    assert isinstance(heap, spark_engine.SparkJobError) and heap.exit_code == 1
    assert "PURE_DP_MF_SPARK_MEMORY" in str(heap) and "now 3g" in str(heap) and "(now 512)" in str(heap)
    worker = spark_engine.spark_error(RuntimeError("PythonException: Traceback …\nMemoryError\n"), keys_per_shard=1024)
    assert "PURE_DP_MF_SPARK_KEYS_PER_SHARD (now 1024)" in str(worker)
    refused = spark_engine.spark_error(RuntimeError("… pure_dp_mf.errors.InvalidInputError: an event is bad\n  at …"))
    assert isinstance(refused, InvalidInputError) and str(refused) == "an event is bad"
    cast = spark_engine.spark_error(
        RuntimeError("[CAST_OVERFLOW] The value 98765432109876543210BD cannot be cast\norg.apache.spark.SparkArithmeticException")
    )
    assert "98765432109876543210" not in str(cast) and "org.apache.spark.SparkArithmeticException" in str(cast)
    monkeypatch.setenv("PURE_DP_MF_SPARK_MEMORY", "64m")
    start = spark_engine.spark_error(
        RuntimeError(
            "[INVALID_DRIVER_MEMORY.SYSTEM_MEMORY] Insufficient driver memory: System memory 67108864 must be at least "
            "471859200.\nPlease increase heap size"
        )
    )
    assert isinstance(start, InvalidInputError) and str(start).startswith("PURE_DP_MF_SPARK_MEMORY=64m is below")
    for error in (heap, worker, refused, cast, start):
        assert "\n" not in str(error)


def test_session_memory_and_shard_settings(monkeypatch):
    monkeypatch.delenv("PURE_DP_MF_SPARK_MEMORY", raising=False)
    default = spark_engine.session_memory()
    assert default.endswith("m") and 1024 <= int(default[:-1]) <= 4096
    monkeypatch.setenv("PURE_DP_MF_SPARK_MEMORY", "6G")
    assert spark_engine.session_memory() == "6g"
    for bad in ("lots", "0g", "6 gb", "-1g"):
        monkeypatch.setenv("PURE_DP_MF_SPARK_MEMORY", bad)
        with pytest.raises(InvalidInputError, match="PURE_DP_MF_SPARK_MEMORY"):
            spark_engine.session_memory()
    monkeypatch.delenv("PURE_DP_MF_SPARK_KEYS_PER_SHARD", raising=False)
    assert spark_engine.cli_shard_size(keys=1000, cores=2) == 250
    monkeypatch.setenv("PURE_DP_MF_SPARK_KEYS_PER_SHARD", "4096")
    assert spark_engine.cli_shard_size(keys=1000, cores=2) == 4096
    for bad in ("0", "x", "١٢"):
        monkeypatch.setenv("PURE_DP_MF_SPARK_KEYS_PER_SHARD", bad)
        with pytest.raises(InvalidInputError, match="PURE_DP_MF_SPARK_KEYS_PER_SHARD"):
            spark_engine.cli_shard_size(keys=1000, cores=2)


def test_an_existing_output_is_refused_before_spark_starts(tmp_path):
    check = spark_engine._check_output
    (tmp_path / "old.csv").write_text("key,step\n")
    with pytest.raises(InvalidInputError, match="already exists and is not empty"):
        check(tmp_path / "old.csv", "csv")
    (tmp_path / "empty.csv").write_text("")
    check(tmp_path / "empty.csv", "csv")  # an empty file is written over, as the local engine does
    check(tmp_path / "new.csv", "jsonl")
    with pytest.raises(InvalidInputError, match="is a folder, not a file"):
        check(tmp_path, "csv")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "part-000000.parquet").write_bytes(b"x")
    with pytest.raises(InvalidInputError, match="already exists and is not empty"):
        check(tmp_path / "full", "parquet")
    with pytest.raises(InvalidInputError, match="needs --output"):
        check(None, "parquet")
    with pytest.raises(InvalidInputError, match="does not exist"):
        check(tmp_path / "missing" / "out.csv", "csv")


def test_count_on_spark_refuses_what_it_would_ignore_before_spark_starts(tmp_path):
    """--state, --operator-log, --invalid stop and an existing --output: one error line each, no
    Spark session (each answer comes back without a JVM)."""
    from conftest import run_cli

    (tmp_path / "keys.txt").write_text("de\nfr\n")
    (tmp_path / "events.csv").write_text("country,day\nde,1\n")
    (tmp_path / "old.csv").write_text("key,step,count,std,lower,upper\n")
    command = ["count", str(tmp_path / "events.csv"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    command += ["--step-column", "day", "--epsilon", "1", "--horizon", "4", "--engine", "spark"]
    cases = {
        "--state is for the local engine": ["--state", str(tmp_path / "s")],
        "--operator-log is for the local engine": ["--operator-log", str(tmp_path / "log")],
        "--invalid stop is for the local engine": ["--invalid", "stop"],
        "already exists and is not empty": ["--output", str(tmp_path / "old.csv")],
    }
    for message, more in cases.items():
        finished = run_cli(*command, *more)
        errors = [line for line in finished.stderr.splitlines() if line.startswith("error:")]
        assert finished.returncode == 2 and len(errors) == 1 and message in errors[0], finished.stderr
        assert "Traceback" not in finished.stderr
    assert not (tmp_path / "s").exists() and not (tmp_path / "log").exists()
    assert (tmp_path / "old.csv").read_text() == "key,step,count,std,lower,upper\n"


def test_a_spark_users_group_without_a_user_id_is_refused():
    """Spark's user stage bounds each user with ``ContributionBounder`` (``_bound_user``): an
    empty user id is refused there, as on every route (``keyed.check_user``)."""
    import pandas as pd

    frame = pd.DataFrame(
        {"user": ["  ", "  "], "key": ["a", "a"], "step": [1, 2], "value": [1, 1], "position": [0, 0], "shard": [0, 0]}
    )
    with pytest.raises(InvalidInputError, match="the user id is empty"):
        spark_engine._bound_user(frame, max_keys=1, max_per_key=1, max_value=1)
    kept = spark_engine._bound_user(frame.assign(user="u1"), max_keys=1, max_per_key=1, max_value=1)
    assert kept["step"].tolist() == [1]  # a named user is bounded as before: C = 1 keeps the first step


def test_a_stream_with_more_state_partitions_than_shards_warns():
    class Settings:
        def __init__(self, partitions: str) -> None:
            self.partitions = partitions

        def get(self, name: str, default: str) -> str:
            assert name == "spark.sql.shuffle.partitions"
            return self.partitions

    class Session:
        def __init__(self, partitions: str) -> None:
            self.conf = Settings(partitions)

    with pytest.warns(UserWarning, match="spark.sql.shuffle.partitions is 200, more than this query's 10 shard"):
        spark_engine._check_state_partitions(Session("200"), 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spark_engine._check_state_partitions(Session("2"), 10)
        spark_engine._check_state_partitions(Session("10"), 10)
