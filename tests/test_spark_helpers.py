"""The Spark engine's helpers that need no Spark: the default batch shard size, and the shards'
counters a Python worker keeps between micro-batches (bounded by a number of keys, the same
values kept or rebuilt)."""

from __future__ import annotations

import numpy as np
import pytest

from pure_dp_mf.engines import spark as spark_engine
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.generator import NoiseGenerator


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
