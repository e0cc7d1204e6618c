"""Spark runs what the local engine runs: dates on a public calendar, one stream given as event
rows, and the privacy units step and user-step; a seeded run on Spark releases the local
engine's values (the DataFrame API: equal frames; the command: equal bytes), and refuses what
the local engine refuses."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from datetime import date, datetime, timedelta

import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")
pd = pytest.importorskip("pandas")

from conftest import spark_environment  # noqa: E402

from pure_dp_mf.engines import dataframe as local_engine  # noqa: E402
from pure_dp_mf.engines import spark as spark_engine  # noqa: E402
from pure_dp_mf.engines.generator import NoiseGenerator  # noqa: E402
from pure_dp_mf.errors import InvalidInputError  # noqa: E402
from pure_dp_mf.resources import BASE_FOLDER  # noqa: E402

BASE = str(BASE_FOLDER / "k004_maxse.npz")
KEYS = [f"k{i:02d}" for i in range(20)]
START = date(2025, 1, 1)
DAYS = 7  # the streams: one day a micro-batch


def _events(seed: int, *, keys: list[str] | None, steps: int = 30, rows: int = 400) -> pd.DataFrame:
    """Random events sorted by day: user, key (one in 10 unlisted), day (an integer 0 … steps + 2:
    some before step 1 and after the schedule) and a value in 0 … 3 (m = 2: some outside)."""
    rng = np.random.default_rng(seed)
    days = np.sort(rng.integers(0, steps + 3, rows))
    frame = pd.DataFrame(
        {
            "uid": [f"u{int(u)}" for u in rng.integers(0, 12, rows)],
            "day": days,
            "value": rng.integers(0, 4, rows).astype(np.int64),
        }
    )
    if keys is not None:
        pool = keys + ["zz-unlisted"] * (len(keys) // 9 + 1)
        frame.insert(1, "country", [pool[int(i)] for i in rng.integers(0, len(pool), rows)])
    return frame


def _dated(frame: pd.DataFrame, *, how: str) -> pd.DataFrame:
    """The day column as dates of the calendar starting on 2025-01-01: ISO text, a few cells that
    do not parse ("bad"), or naive timestamps within the day ("timestamps")."""
    frame = frame.copy()
    moments = [datetime(2025, 1, 1) + timedelta(days=int(day) - 1) for day in frame["day"]]
    if how == "text":
        frame["day"] = [moment.date().isoformat() for moment in moments]
    elif how == "bad":
        frame["day"] = [moment.date().isoformat() if i % 37 else "31.12.2025" for i, moment in enumerate(moments)]
    else:  # a Spark timestamp column (an instant): its wall-clock time in the session's time zone
        frame["day"] = pd.to_datetime([moment + timedelta(hours=(7 * i) % 24) for i, moment in enumerate(moments)])
    return frame


def _both(spark, frame: pd.DataFrame, **options):
    """The local engine's frame and Spark's, Spark's in the local order (step, then key list)."""
    local = local_engine.private_running_counts(frame, generator=NoiseGenerator.from_seed(11), **options)
    released = spark_engine.private_running_counts(
        spark.createDataFrame(frame), generator=NoiseGenerator.from_seed(11), keys_per_shard=7, **options
    ).toPandas()
    order = {key: i for i, key in enumerate(options["keys"])}
    released = released.assign(position=released["key"].map(order))
    released = released.sort_values(["step", "position"]).drop(columns="position").reset_index(drop=True)
    return local, released


CASES = {
    "dates as text, through a date": (
        "text",
        {"keys": KEYS, "key_column": "country", "start": "2025-01-01", "through": "2025-01-30T12:00"},
    ),
    "timestamps, six-hour steps": (
        "timestamps",
        {"keys": KEYS, "key_column": "country", "start": "2025-01-01T00:00", "step_size": "6h", "through": 100},
    ),
    "dates that do not parse, dropped": (
        "bad",
        {"keys": KEYS, "key_column": "country", "start": "2025-01-01", "through": 30, "invalid": "zero"},
    ),
    "one stream": (None, {"keys": ["count"], "key_column": None, "through": 30, "invalid": "clamp"}),
    "one stream at the unit step, dates": (
        "text",
        {"keys": ["count"], "key_column": None, "privacy_unit": "step", "start": "2025-01-01", "through": 30, "invalid": "clamp"},
    ),
    "user-step": (
        None,
        {"keys": KEYS, "key_column": "country", "privacy_unit": "user-step", "max_keys": 2, "user_column": "uid", "through": 30},
    ),
    "user-step on one stream, dates": (
        "text",
        {
            "keys": ["count"],
            "key_column": None,
            "privacy_unit": "user-step",
            "user_column": "uid",
            "start": "2025-01-01",
            "through": 30,
        },
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_spark_batch_releases_the_local_engines_frame(spark, case):
    how, options = CASES[case]
    frame = _events(len(case), keys=None if options["key_column"] is None else KEYS)
    if options.get("invalid") != "clamp":
        frame["value"] = frame["value"].clip(upper=2)
    if how is not None:
        frame = _dated(frame, how=how)
    options = {
        "epsilon": 1.0,
        "horizon": 120,
        "base": BASE,
        "step_column": "day",
        "value_column": "value",
        "max_value": 2,
    } | options
    with pytest.warns(UserWarning, match="seeded"):
        local, released = _both(spark, frame, **options)
    steps = 100 if options.get("step_size") == "6h" else 30
    assert len(local) == steps * len(options["keys"])  # every key at every step of the public schedule
    assert list(released.columns) == list(local.columns)
    assert ("date" in local.columns) == ("start" in options)
    pd.testing.assert_frame_equal(released, local, check_dtype=False)
    assert local["count"].iloc[-len(options["keys"]) :].abs().sum() > 0


def test_spark_batch_refuses_dates_and_units_as_the_local_engine_does(spark):
    frame = _dated(_events(3, keys=KEYS), how="bad")
    frame["value"] = frame["value"].clip(upper=2)
    options = {"keys": KEYS, "epsilon": 1.0, "horizon": 40, "base": BASE, "key_column": "country", "step_column": "day"}
    events = spark.createDataFrame(frame)
    with pytest.raises(InvalidInputError) as refused:  # a date that does not parse: the column named, never the value
        spark_engine.private_running_counts(events, start="2025-01-01", **options)
    message = str(refused.value)
    assert message.startswith("step_column 'day': ") and "are not ISO dates or timestamps" in message
    assert "nothing was released" in message and "31.12" not in message
    clean_frame = _dated(_events(3, keys=KEYS), how="text")
    clean = spark.createDataFrame(clean_frame)
    with pytest.raises(InvalidInputError, match="step_column 'day': .* are not ISO dates"):  # a zone on one side only
        spark_engine.private_running_counts(clean, start="2025-01-01T00:00+01:00", **options)
    with pytest.raises(InvalidInputError, match="step_column 'day': .* are not integers"):  # dates need start
        spark_engine.private_running_counts(clean, **options)
    refusals = {  # on both engines, with their words
        "step_size needs start": {"start": None, "step_size": "1d"},
        "--through 2024-12-01 is before --start": {"start": "2025-01-01", "through": "2024-12-01"},
        "key_column=None is for one key": {"key_column": None},
        "it is for one stream": {"privacy_unit": "step"},
        "user-step with several keys needs --max-keys": {"privacy_unit": "user-step", "user_column": "uid"},
        "privacy_unit='user-step' needs user_column": {"privacy_unit": "user-step", "max_keys": 2},
        "user_column is for privacy_unit 'user' or 'user-step', not 'event'": {"privacy_unit": "event", "user_column": "uid"},
    }
    for message, more in refusals.items():
        for engine, data in ((spark_engine, clean), (local_engine, clean_frame)):
            with pytest.raises(InvalidInputError, match=message):
                engine.private_running_counts(data, **{**options, "start": "2025-01-01", **more})


def test_spark_streaming_refuses_on_the_driver_what_the_local_engine_refuses(spark, tmp_path):
    """A stream's options are checked when the query is built, before it starts: the unit step and
    key_column=None with several keys, user-step with several keys and no K, a step size without
    a start, and the batch-only policy "refuse" (a stream cannot be checked ahead)."""
    from pure_dp_mf.engines.spark import file_clock, private_running_counts_stream

    (tmp_path / "in").mkdir()
    (tmp_path / "clock").mkdir()
    events = spark.readStream.schema("uid string, country string, day string").csv(str(tmp_path / "in"))
    clock = file_clock(spark, str(tmp_path / "clock"))
    options = {"clock": clock, "keys": KEYS, "epsilon": 1.0, "horizon": 40, "base": BASE, "key_column": "country"}
    options |= {"step_column": "day", "generator": NoiseGenerator.from_seed(2), "start": "2025-01-01"}
    refusals = {
        "it is for one stream": {"privacy_unit": "step"},
        "key_column=None is for one key": {"key_column": None},
        "user-step with several keys needs --max-keys": {"privacy_unit": "user-step", "user_column": "uid"},
        "step_size needs start": {"start": None, "step_size": "1h"},
        "invalid must be zero, clamp or stop on a stream": {"invalid": "refuse"},
    }
    for message, more in refusals.items():
        with pytest.raises(InvalidInputError, match=message), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the seeded generator's warning
            private_running_counts_stream(events, **{**options, **more})


def _run(arguments: list[str], *, engine: str, **settings: str) -> subprocess.CompletedProcess:
    environment = spark_environment(**settings)
    command = [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", *arguments, "--engine", engine]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_count_engine_spark_writes_the_local_bytes_with_dates_one_stream_and_the_new_units(tmp_path):
    """The command, keyed with dates, --through DATE and --privacy-unit user-step (csv), and one
    stream with dates at --privacy-unit step (parquet: the same columns and values): Spark's
    output is the local engine's."""
    import pyarrow.parquet as pq

    keyed = _dated(_events(5, keys=KEYS), how="text")
    keyed["value"] = keyed["value"].clip(upper=2)
    keyed.to_csv(tmp_path / "keyed.csv", index=False)
    (tmp_path / "keys.txt").write_text("\n".join(KEYS) + "\n")
    single = _dated(_events(6, keys=None), how="text")
    single.to_csv(tmp_path / "single.csv", index=False)
    common = ["--step-column", "day", "--column", "value", "--max-value", "2", "--epsilon", "1", "--horizon", "40"]
    common += ["--seed", "5", "--base", BASE, "--start", "2025-01-01"]
    runs = {
        "csv": [str(tmp_path / "keyed.csv"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
        + ["--privacy-unit", "user-step", "--max-keys", "2", "--user-column", "uid", "--through", "2025-01-30"],
        "parquet": [str(tmp_path / "single.csv"), "--privacy-unit", "step", "--invalid", "clamp", "--through", "30"],
    }
    for output_format, arguments in runs.items():
        outputs = {}
        for engine in ("local", "spark"):
            output = tmp_path / f"{engine}.{output_format}"
            finished = _run(["count", *arguments, *common, "--format", output_format, "--output", str(output)], engine=engine)
            assert finished.returncode == 0, finished.stderr[-3000:]
            outputs[engine] = output
        if output_format == "csv":
            text = outputs["local"].read_text()
            assert text.splitlines()[0] == "key,step,date,count,std,lower,upper" and len(text.splitlines()) == 1 + 30 * 20
            assert outputs["spark"].read_bytes() == outputs["local"].read_bytes()
        else:
            local = pq.read_table(outputs["local"])
            on_spark = pq.read_table(outputs["spark"])  # a folder of one file per shard: here one
            assert local.column_names == on_spark.column_names == ["step", "date", "count", "std", "lower", "upper"]
            assert on_spark.to_pylist() == local.to_pylist() and local.num_rows == 30


def test_count_engine_spark_refuses_the_units_options_before_spark_starts(tmp_path):
    """--privacy-unit step with --key-column, user-step with several keys and no --max-keys: the
    local engine's error line, before a JVM starts (a master that cannot start would say so)."""
    (tmp_path / "keys.txt").write_text("de\nfr\n")
    (tmp_path / "events.csv").write_text("uid,country,day\nu1,de,2025-01-01\n")
    arguments = ["count", str(tmp_path / "events.csv"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    arguments += ["--step-column", "day", "--start", "2025-01-01", "--epsilon", "1", "--horizon", "4"]
    cases = {
        "it is for one stream": ["--privacy-unit", "step"],
        "user-step with several keys needs --max-keys": ["--privacy-unit", "user-step", "--user-column", "uid"],
    }
    for message, more in cases.items():
        for engine in ("local", "spark"):
            output = ["--output", str(tmp_path / f"{engine}.csv")]
            finished = _run([*arguments, *more, *output], engine=engine, PURE_DP_MF_SPARK_MASTER="no-such-master")
            errors = [line for line in finished.stderr.splitlines() if line.startswith("error:")]
            assert finished.returncode == 2 and len(errors) == 1 and message in errors[0], finished.stderr[-3000:]
            assert "Traceback" not in finished.stderr and not (tmp_path / f"{engine}.csv").exists()


@pytest.mark.slow
def test_count_engine_spark_refuses_a_date_that_does_not_parse_naming_the_flag(tmp_path):
    frame = _dated(_events(7, keys=None), how="bad")
    frame.to_csv(tmp_path / "events.csv", index=False)
    arguments = ["count", str(tmp_path / "events.csv"), "--step-column", "day", "--epsilon", "1", "--horizon", "40"]
    arguments += ["--seed", "1", "--start", "2025-01-01", "--output", str(tmp_path / "out.csv")]
    finished = _run(arguments, engine="spark")
    errors = [line for line in finished.stderr.splitlines() if line.startswith("error:")]
    assert finished.returncode == 2 and len(errors) == 1, finished.stderr[-3000:]
    assert errors[0].startswith("error: --step-column 'day': ") and "--invalid refuse" in errors[0]
    assert "31.12" not in finished.stderr and "Traceback" not in finished.stderr
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["one stream at the unit step, dates", "user-step, dates"])
def test_spark_streaming_releases_the_local_engines_values(spark, tmp_path, case):
    """A stream of one day a micro-batch, on a file clock: dates converted on the calendar, one
    stream at the unit step (each step's total clipped when the clock closes it) or keyed at
    user-step (each user's bounds within a step held in the state store across micro-batches)."""
    from pure_dp_mf.engines.spark import file_clock, private_running_counts_stream

    single = case.startswith("one stream")
    keys = ["count"] if single else KEYS[:6]
    frame = _dated(_events(8, keys=None if single else keys, steps=DAYS, rows=120), how="text")
    (tmp_path / "in").mkdir()
    (tmp_path / "clock").mkdir()
    for day in range(1, DAYS + 1):  # a day's events in one file, and a tick saying that the day is over
        mine = frame[frame["day"] == (START + timedelta(days=day - 1)).isoformat()]
        path = tmp_path / "in" / f"day{day:03d}.csv"
        mine.to_csv(path, index=False)
        os.utime(path, (1_000_000 + day, 1_000_000 + day))
        tick = tmp_path / "clock" / f"tick{day:03d}.csv"
        tick.write_text(f"step\n{day}\n")
        os.utime(tick, (1_000_000 + day, 1_000_000 + day))
    schema = "uid string, day string, value long" if single else "uid string, country string, day string, value long"
    events = spark.readStream.schema(schema).option("header", True).option("maxFilesPerTrigger", 1).csv(str(tmp_path / "in"))
    clock = file_clock(spark, str(tmp_path / "clock"), max_files_per_trigger=1)
    options = {"keys": keys, "epsilon": 1.0, "horizon": 40, "base": BASE, "step_column": "day", "value_column": "value"}
    options |= {"max_value": 2, "start": "2025-01-01"}
    if single:
        options |= {"key_column": None, "privacy_unit": "step", "invalid": "clamp"}
    else:
        options |= {"key_column": "country", "privacy_unit": "user-step", "max_keys": 2, "user_column": "uid"}
        options["invalid"] = "clamp"
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")  # one state partition for the query's one shard
    try:
        with pytest.warns(UserWarning, match="seeded"):
            released = private_running_counts_stream(events, clock=clock, generator=NoiseGenerator.from_seed(4), **options)
        query = (
            released.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    got = spark.read.parquet(str(tmp_path / "out")).toPandas()
    order = {key: i for i, key in enumerate(keys)}
    got = got.assign(position=got["key"].map(order)).sort_values(["step", "position"]).drop(columns="position")
    with pytest.warns(UserWarning, match="seeded"):
        local = local_engine.private_running_counts(frame, generator=NoiseGenerator.from_seed(4), through=DAYS, **options)
    assert list(got.columns) == list(local.columns) and len(local) == DAYS * len(keys)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), local, check_dtype=False)
