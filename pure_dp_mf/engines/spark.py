"""Keyed private running counts on Apache Spark (the optional extra ``pure-dp-mf[spark]``):
batch (``private_running_counts``) and Structured Streaming (``private_running_counts_stream``).

``private_running_counts(events, keys=…, epsilon=…, horizon=…)`` takes a DataFrame of events and
returns a DataFrame with one row (key, step, count, std, lower, upper) per public key and step,
the same values as the local engine (``keyed.run_keyed``) for the same generator: every key's
noise is keyed by the run's generator and the key alone (``keyed.py``), and the user bounds
admit a user's events in the same order (step, then key, then value). The privacy model and its
proof are those of ``keyed.py`` (docs/privacy.md, "Keyed streams").

Plan: unknown keys dropped (a join with the public key list); with user-level privacy,
``groupBy(user).applyInPandas`` applies each user's contribution bounds; the kept values are
summed per (key, step); the keys are cut into shards of ``keys_per_shard`` consecutive keys of
the list (default 1 024), every shard is unioned in so that it has a group with or without events,
and ``groupBy(shard).applyInPandas`` releases each shard's keys at steps 1 … ``through`` in one
vectorised pass (``KeyedCounters`` over the shard's keys: the noise of all of them drawn in
lockstep, one matrix product per base block). A key's noise depends on the run's generator and
the key only, so the shards change no value. The generator key travels to the executors in the
task closure: run on a cluster you trust with it.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from pure_dp_mf.engines.keyed import ContributionBounder, KeyedCounters, check_keys
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.generator import NoiseGenerator
from pure_dp_mf.validation import check_size

RELEASE_SCHEMA = "key string, step long, count long, std double, lower long, upper long"
KEYS_PER_SHARD = 1 << 10  # keys released together by one Python call on an executor


def private_running_counts(
    events: Any,
    *,
    keys: Sequence[str],
    epsilon: float,
    horizon: int,
    key_column: str = "key",
    step_column: str = "step",
    value_column: str | None = None,
    user_column: str | None = None,
    privacy_unit: str = "event",
    max_keys: int | None = None,
    max_per_key: int | None = None,
    max_value: int = 1,
    through: int | None = None,
    base: str | None = None,
    metric: str = "maxse",
    generator: NoiseGenerator | None = None,
    beta: float = 0.05,
    lineage: str | None = None,
    keys_per_shard: int = KEYS_PER_SHARD,
) -> Any:
    """The releases of every key at steps 1 … ``through`` (default: the last step of the events)
    as a Spark DataFrame (see the module docstring). Raises ``InvalidInputError`` for a missing
    column, a bad key list, a step outside [1, horizon] or a value outside [0, m]."""
    from pyspark.sql import functions as F

    keys = check_keys(keys)
    shards = _shards(keys, keys_per_shard)
    generator = generator if generator is not None else NoiseGenerator.secure()
    for flag, name in (
        ("key_column", key_column),
        ("step_column", step_column),
        ("value_column", value_column),
        ("user_column", user_column),
    ):
        if name is not None and name not in events.columns:
            raise InvalidInputError(f"{flag} {name!r}: no such column ({', '.join(events.columns)})")
    if privacy_unit == "user" and user_column is None:
        raise InvalidInputError("user-level privacy needs user_column")
    if user_column is not None and privacy_unit != "user":
        raise InvalidInputError("user_column is for privacy_unit='user'")
    settings = _run_settings(
        generator=generator,
        lineage=lineage,
        beta=beta,
        epsilon=epsilon,
        horizon=horizon,
        base=base,
        metric=metric,
        max_value=max_value,
        privacy_unit=privacy_unit,
        max_keys=max_keys,
        max_per_key=max_per_key,
    )
    value = F.col(value_column).cast("long") if value_column is not None else F.lit(1).cast("long")
    columns = [F.col(key_column).cast("string").alias("key"), F.col(step_column).cast("long").alias("step"), value.alias("value")]
    if user_column is not None:
        columns.append(F.col(user_column).cast("string").alias("user"))
    table = events.select(*columns)
    low_step, high_step, low_value, high_value, missing = table.agg(
        F.min("step"),
        F.max("step"),
        F.min("value"),
        F.max("value"),
        F.sum((F.col("step").isNull() | F.col("value").isNull()).cast("long")),
    ).first()
    if missing:
        raise InvalidInputError(f"{missing} event(s) have a step or value that is not an integer")
    if low_step is not None and (low_step < 1 or high_step > horizon):
        raise InvalidInputError(f"a step is outside [1, {horizon}] (the steps run from {low_step} to {high_step})")
    if low_value is not None and (low_value < 0 or high_value > max_value):
        raise InvalidInputError(f"a value is outside [0, {max_value}] (the values run from {low_value} to {high_value})")
    if through is None:
        through = int(high_step) if high_step is not None else 0
    spark = events.sparkSession
    key_table = _key_table(spark, shards)
    known = table.join(F.broadcast(key_table.select("key")), on="key", how="inner")
    if privacy_unit == "user":
        known = known.groupBy("user").applyInPandas(
            lambda frame: _bound_user(frame, max_keys=max_keys, max_per_key=max_per_key, max_value=max_value, keys=keys),
            "key string, step long, value long",
        )
    totals = known.groupBy("key", "step").agg(F.sum("value").alias("value"))
    totals = totals.join(F.broadcast(key_table), on="key", how="inner")
    every_shard = spark.createDataFrame(
        [(None, 0, 0, shard) for shard in range(len(shards))], "key string, step long, value long, shard long"
    )
    grouped = totals.unionByName(every_shard).groupBy("shard")
    return grouped.applyInPandas(
        lambda frame: _release_shard(frame, shards=shards, through=through, settings=settings), RELEASE_SCHEMA
    )


def _shards(keys: Sequence[str], keys_per_shard: int) -> list[list[str]]:
    """The key list cut into shards of ``keys_per_shard`` consecutive keys (the last one shorter)."""
    keys_per_shard = check_size(keys_per_shard, name="keys_per_shard")
    return [list(keys[start : start + keys_per_shard]) for start in range(0, len(keys), keys_per_shard)]


def _key_table(spark, shards: Sequence[Sequence[str]]):
    """The public keys with their shard: a DataFrame (key, shard)."""
    return spark.createDataFrame(
        [(key, shard) for shard, shard_keys in enumerate(shards) for key in shard_keys], "key string, shard long"
    )


def _bound_user(frame, *, max_keys: int | None, max_per_key: int | None, max_value: int, keys: Sequence[str]):
    """One user's kept events: admitted in the order (step, key, value), as the local engine does."""
    import pandas as pd

    index = {key: i for i, key in enumerate(keys)}
    bounder = ContributionBounder(int(max_keys or 0), int(max_per_key or 0), max_value)
    rows = []
    ordered = frame.sort_values(["step", "key", "value"], kind="stable")
    for user, key, step, value in zip(ordered["user"], ordered["key"], ordered["step"], ordered["value"], strict=True):
        kept = bounder.admit(str(user), index[key], int(step), int(value))
        if kept:
            rows.append((key, int(step), kept))
    return pd.DataFrame(rows, columns=["key", "step", "value"]).astype({"step": "int64", "value": "int64"})


def _release_shard(frame, *, shards: Sequence[Sequence[str]], through: int, settings: dict):
    """One shard's releases at steps 1 … through: every key of the shard in one vectorised pass
    (rows with step 0 only give the shard its group)."""
    shard_keys = shards[int(frame["shard"].iloc[0])]
    counters = _shard_counters(shard_keys, settings)
    events = frame[frame["step"] >= 1]
    increments = np.zeros((len(shard_keys), through), dtype=np.int64)
    rows = events["key"].map(counters.index).to_numpy(dtype=np.int64)
    np.add.at(increments, (rows, events["step"].to_numpy(dtype=np.int64) - 1), events["value"].to_numpy(dtype=np.int64))
    return _shard_frame(counters, increments, totals=np.zeros(len(shard_keys), dtype=np.int64), start=0, settings=settings)


def _shard_frame(counters: KeyedCounters, increments: np.ndarray, *, totals: np.ndarray, start: int, settings: dict):
    """The rows (key, step, count, std, lower, upper) of ``KeyedCounters.release_steps``: the
    steps start + 1 … start + s of every key of ``counters``."""
    import pandas as pd

    keys, steps = increments.shape
    counts, std, lower, upper = counters.release_steps(increments, start=start, totals=totals, beta=settings["beta"])
    return pd.DataFrame(
        {
            "key": np.repeat(np.asarray(counters.keys, dtype=object), steps),
            "step": np.tile(np.arange(start + 1, start + steps + 1, dtype=np.int64), keys),
            "count": counts.ravel(),
            "std": np.tile(std, keys),
            "lower": lower.ravel(),
            "upper": upper.ravel(),
        }
    )


STATE_SCHEMA = "keys_sha256 string, released long, totals string, pending string"  # per-key lists as JSON


def private_running_counts_stream(
    events: Any,
    *,
    keys: Sequence[str],
    epsilon: float,
    horizon: int,
    key_column: str = "key",
    step_column: str = "step",
    value_column: str | None = None,
    user_column: str | None = None,
    privacy_unit: str = "event",
    max_keys: int | None = None,
    max_per_key: int | None = None,
    max_value: int = 1,
    base: str | None = None,
    metric: str = "maxse",
    generator: NoiseGenerator | None = None,
    beta: float = 0.05,
    lineage: str | None = None,
    keys_per_shard: int = KEYS_PER_SHARD,
) -> Any:
    """Keyed releases from a streaming DataFrame (Spark Structured Streaming), per event or per
    user, to be written with a checkpoint location (``writeStream…option("checkpointLocation", …)``).

    Each micro-batch releases, for every public key, every new step up to the largest step of the
    batch. The keys are cut into shards of ``keys_per_shard`` consecutive keys of the list; the
    batch's new steps (``dropDuplicates`` on the step: a small state of at most n steps) are
    cross-joined with the shards so that keys without events are invoked too, and
    ``groupBy(shard).applyInPandasWithState`` releases a shard's keys in one vectorised pass and
    keeps their counter state in Spark's state store: the steps released, and per key the running
    total and the pending late input (the state also holds a digest of the shard's keys: a query
    restarted with another key list or shard size is refused). An executor keeps the counters of
    the shards it released last (``_shard_counters``), so a step's noise comes from pages drawn
    before, not drawn again per micro-batch; the values are the same either way. ``generator`` is required
    and must be the same at every restart of the query (``NoiseGenerator.from_key_file``): a fresh
    key after a restart would release the later steps under new noise, a second release of the
    same data. The noise of (key, step) is
    a pure function of the generator and the key, so a micro-batch replayed after a crash
    releases exactly what it released before; with a replayable source and an idempotent sink
    (Spark's file sink) no step is released twice or missed. A step is complete when its first
    micro-batch arrives: events of an already released step, arriving later, are counted at the
    next step released (they still change one key's input at one step, so the privacy argument is
    unchanged). Values outside [0, m] stop the query with an ``InvalidInputError``.

    User level (``privacy_unit="user"``, ``user_column``, ``max_keys`` K, ``max_per_key`` C):
    a first stateful stage, ``groupBy(user).transformWithStateInPandas`` (Spark allows one
    ``applyInPandasWithState`` per query; this one needs the RocksDB state store, and the call
    stops with an ``InvalidInputError`` naming the setting without it), bounds each user's
    contributions with the user's bounds state (``ContributionBounder.user_record``: at most K
    entries) in the state store, admitting the micro-batch's events of the user in the order
    (step, key, value), the local engine's order; a user's event at a step before its last kept
    step for that key is dropped. At this level an event of a step already released is dropped
    too, not moved to the next step, so every kept event lands on its own step and the
    sensitivity K·m·(sum of the C largest column norms) holds as proven (docs/privacy.md)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    keys = check_keys(keys)
    if generator is None:
        raise InvalidInputError(
            "a streaming query needs a generator that survives restarts: "
            "generator=NoiseGenerator.from_key_file(path), one key file per query, kept beside its checkpoint"
        )
    for flag, name in (
        ("key_column", key_column),
        ("step_column", step_column),
        ("value_column", value_column),
        ("user_column", user_column),
    ):
        if name is not None and name not in events.columns:
            raise InvalidInputError(f"{flag} {name!r}: no such column ({', '.join(events.columns)})")
    if privacy_unit == "user" and user_column is None:
        raise InvalidInputError("user-level privacy needs user_column")
    if user_column is not None and privacy_unit != "user":
        raise InvalidInputError("user_column is for privacy_unit='user'")
    settings = _run_settings(
        generator=generator,
        lineage=lineage,
        beta=beta,
        epsilon=epsilon,
        horizon=horizon,
        base=base,
        metric=metric,
        max_value=max_value,
        privacy_unit=privacy_unit,
        max_keys=max_keys,
        max_per_key=max_per_key,
    )
    spark = events.sparkSession
    shards = _shards(keys, keys_per_shard)
    value = F.col(value_column).cast("long") if value_column is not None else F.lit(1).cast("long")
    columns = [F.col(key_column).cast("string").alias("key"), F.col(step_column).cast("long").alias("step"), value.alias("value")]
    if user_column is not None:
        columns.append(F.col(user_column).cast("string").alias("user"))
    table = events.select(*columns)
    key_table = _key_table(spark, shards)
    shard_table = spark.createDataFrame([(shard,) for shard in range(len(shards))], "shard long")
    ticks = table.select("step").dropDuplicates(["step"]).crossJoin(F.broadcast(shard_table))
    known = table.join(F.broadcast(key_table.select("key")), on="key", how="inner")
    if privacy_unit == "user":
        provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass", "")
        if "RocksDB" not in provider:
            raise InvalidInputError(
                "user-level streaming keeps each user's bounds with transformWithStateInPandas, which needs the RocksDB "
                "state store: set spark.sql.streaming.stateStore.providerClass to "
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
            )
        known = known.groupBy("user").transformWithStateInPandas(
            statefulProcessor=_user_bounds(settings=settings, keys=keys),
            outputStructType="key string, step long, value long",
            outputMode="Append",
            timeMode="None",
        )
    rows = known.select("key", "step", "value").join(F.broadcast(key_table), on="key", how="inner")
    ticks = ticks.select(F.lit(None).cast("string").alias("key"), "step", F.lit(0).cast("long").alias("value"), "shard")
    return (
        rows.unionByName(ticks)
        .groupBy("shard")
        .applyInPandasWithState(
            lambda shard, frames, state: _release_stream(shard, frames, state, shards=shards, settings=settings),
            RELEASE_SCHEMA,
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.NoTimeout,
        )
    )


def _user_bounds_processor():
    """The ``StatefulProcessor`` class of the user stage, defined when called, as PySpark is an
    optional extra."""
    from pyspark.sql.streaming import StatefulProcessor

    class UserBounds(StatefulProcessor):
        """One user's contribution bounds across micro-batches: the user's ``ContributionBounder``
        record (at most K entries) in the state store; each micro-batch's events of the user
        admitted in the order (step, key, value), the local engine's order; the kept events out."""

        def __init__(self, *, settings: dict, keys: Sequence[str]) -> None:
            self.settings = settings
            self.index = {key: i for i, key in enumerate(keys)}

        def init(self, handle) -> None:
            from pyspark.sql.types import StringType, StructField, StructType

            self.admitted = handle.getValueState("admitted", StructType([StructField("admitted", StringType())]))

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd

            max_value = self.settings["max_value"]
            bounder = ContributionBounder(int(self.settings["max_keys"]), int(self.settings["max_per_key"]), max_value)
            user = str(key[0])
            if self.admitted.exists():
                bounder.restore_user(user, json.loads(self.admitted.get()[0]))
            data = pd.concat(list(rows)).sort_values(["step", "key", "value"], kind="stable")
            values = data["value"].to_numpy(dtype=np.int64)
            if len(values) and (values.min() < 0 or values.max() > max_value):
                raise InvalidInputError(f"a value is outside [0, {max_value}]")
            kept_rows = []
            for event_key, step, value in zip(data["key"], data["step"], values.tolist(), strict=True):
                kept = bounder.admit(user, self.index[event_key], int(step), int(value))
                if kept:
                    kept_rows.append((event_key, int(step), kept))
            self.admitted.update((json.dumps(bounder.user_record(user)),))
            yield pd.DataFrame(kept_rows, columns=["key", "step", "value"]).astype({"step": "int64", "value": "int64"})

        def close(self) -> None:
            pass

    return UserBounds


def _user_bounds(*, settings: dict, keys: Sequence[str]):
    """A ``StatefulProcessor`` bounding each user's contributions (``_user_bounds_processor``)."""
    return _user_bounds_processor()(settings=settings, keys=keys)


def _release_stream(shard: tuple, frames, state, *, shards: Sequence[Sequence[str]], settings: dict):
    """One shard in one micro-batch: release its keys' new steps (rows without a key only give
    the shard its group). The state is (digest of the shard's keys, steps released, running
    totals, pending late inputs)."""
    import pandas as pd

    shard_keys = shards[int(shard[0])]
    counters = _shard_counters(shard_keys, settings)
    digest = counters._keys_sha256
    if state.exists:
        keys_sha256, released, totals, pending = state.get
        if keys_sha256 != digest:
            raise InvalidInputError("the key list or keys_per_shard differs from the one this checkpoint was started with")
        totals, pending = np.asarray(json.loads(totals), dtype=np.int64), np.asarray(json.loads(pending), dtype=np.int64)
    else:
        released, totals, pending = 0, np.zeros(len(shard_keys), dtype=np.int64), np.zeros(len(shard_keys), dtype=np.int64)
    data = pd.concat(list(frames), ignore_index=True)
    steps, values = data["step"].to_numpy(dtype=np.int64), data["value"].to_numpy(dtype=np.int64)
    horizon, max_value = settings["horizon"], settings["max_value"]
    if len(values) and (values.min() < 0 or values.max() > max_value):
        raise InvalidInputError(f"a value is outside [0, {max_value}]")
    if len(steps) and (steps.min() < 1 or steps.max() > horizon):
        raise InvalidInputError(f"a step is outside [1, {horizon}]")
    events = data["key"].notna().to_numpy()
    rows = data["key"][events].map(counters.index).to_numpy(dtype=np.int64)
    steps, values = steps[events], values[events]
    top = max(int(data["step"].max()) if len(data) else 0, released)
    late = steps <= released
    if settings["privacy_unit"] == "event":  # a late event moves to the next step released
        np.add.at(pending, rows[late], values[late])
    if top <= released:
        state.update((digest, int(released), json.dumps(totals.tolist()), json.dumps(pending.tolist())))
        return
    increments = np.zeros((len(shard_keys), top - released), dtype=np.int64)
    np.add.at(increments, (rows[~late], steps[~late] - released - 1), values[~late])
    increments[:, 0] += pending
    frame = _shard_frame(counters, increments, totals=totals, start=released, settings=settings)
    state.update((digest, top, json.dumps((totals + increments.sum(axis=1)).tolist()), json.dumps([0] * len(shard_keys))))
    yield frame


def _run_settings(*, generator: NoiseGenerator, lineage: str | None, beta: float, **mechanism) -> dict:
    """The picklable settings every executor rebuilds a key's counter from: the driver's
    ``KeyedCounters`` checks them once and fixes the base file and the run's lineage (every
    key's counter shares the run's generator and lineage)."""
    template = KeyedCounters(keys=["template"], rng=generator, lineage=lineage, **mechanism)
    return {
        **mechanism,
        "base": template.base_file,
        "generator": generator.to_record(),
        "beta": beta,
        "lineage": template.lineage,
    }


_SHARD_COUNTERS: OrderedDict[tuple[str, tuple[str, ...]], KeyedCounters] = OrderedDict()
_SHARD_CACHE_SIZE = 8


def _shard_counters(shard_keys: Sequence[str], settings: dict) -> KeyedCounters:
    """The counters of one shard's keys on an executor, from the run's settings; the last
    ``_SHARD_CACHE_SIZE`` shards are kept in the Python worker, with their drawn noise pages, so
    the next micro-batch of a shard reuses them. Kept or rebuilt, a key's noise at a step is the
    same pure function of (generator, key, step): caching changes no value and draws no noise
    twice for different data."""
    run = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    tag = (run, tuple(shard_keys))
    counters = _SHARD_COUNTERS.get(tag)
    if counters is None:
        mechanism = {name: value for name, value in settings.items() if name not in ("generator", "beta", "lineage")}
        counters = KeyedCounters(
            keys=shard_keys, rng=NoiseGenerator.from_record(settings["generator"]), lineage=settings["lineage"], **mechanism
        )
        _SHARD_COUNTERS[tag] = counters
        while len(_SHARD_COUNTERS) > _SHARD_CACHE_SIZE:
            _SHARD_COUNTERS.popitem(last=False)
    _SHARD_COUNTERS.move_to_end(tag)
    return counters
