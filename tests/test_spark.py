"""The Spark engine gives the local engine's releases (event and user level) on local[2]."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")
pd = pytest.importorskip("pandas")

from pure_dp_mf.errors import InvalidInputError  # noqa: E402
from pure_dp_mf.keyed import KeyedCounters, KeyedEvent, run_keyed  # noqa: E402
from pure_dp_mf.noise import NoiseGenerator  # noqa: E402
from pure_dp_mf.resources import BASE_FOLDER  # noqa: E402
from pure_dp_mf.spark import private_running_counts  # noqa: E402

BASE = str(BASE_FOLDER / "k004_maxse.npz")


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pure_dp_mf tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    yield session
    session.stop()


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


@pytest.mark.parametrize("unit", ["event", "user"])
def test_spark_batch_equals_local(spark, unit):
    keys = ["de", "fr", "it", "es"]  # "es" has no events, "mars" is not public
    rows = _events()
    options = {"privacy_unit": unit, "max_value": 2}
    if unit == "user":
        options.update(max_keys=2, max_per_key=3)
    local = KeyedCounters(keys=keys, epsilon=1.0, horizon=40, base=BASE, rng=NoiseGenerator.from_seed(8), **options)
    events = (KeyedEvent(key, step, value, user if unit == "user" else None) for user, key, step, value in rows)
    expected = {
        (key, step): (int(c), lo, hi)
        for step, counts, std, lower, upper in run_keyed(local, events)
        for key, c, lo, hi in zip(keys, counts.tolist(), lower.tolist(), upper.tolist(), strict=True)
    }
    frame = spark.createDataFrame(pd.DataFrame(rows, columns=["uid", "country", "day", "value"]))
    released = private_running_counts(
        frame,
        keys=keys,
        epsilon=1.0,
        horizon=40,
        key_column="country",
        step_column="day",
        value_column="value",
        user_column="uid" if unit == "user" else None,
        base=BASE,
        generator=NoiseGenerator.from_seed(8),
        **options,
    ).toPandas()
    got = {(r.key, int(r.step)): (int(r["count"]), int(r.lower), int(r.upper)) for _, r in released.iterrows()}
    assert got == expected and len(got) == len(keys) * rows[-1][2]


def test_spark_refuses_bad_input(spark):
    frame = spark.createDataFrame(pd.DataFrame([("u", "de", 50, 1)], columns=["uid", "country", "day", "value"]))
    with pytest.raises(InvalidInputError, match="outside"):
        private_running_counts(frame, keys=["de"], epsilon=1.0, horizon=40, key_column="country", step_column="day", base=BASE)
    with pytest.raises(InvalidInputError, match="no such column"):
        private_running_counts(frame, keys=["de"], epsilon=1.0, horizon=40, key_column="land", step_column="day", base=BASE)


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
    on_spark = run_cli(*arguments, "--engine", "spark", timeout=600)
    assert local.returncode == 0 and on_spark.returncode == 0, on_spark.stderr[-3000:]
    assert local.stdout.splitlines()[1:] == on_spark.stdout.splitlines()[1:]
    assert '"engine": "spark"' in on_spark.stdout.splitlines()[0]
