"""Keyed private running counts on Apache Spark (the optional extra ``spark``: ``pip install -e '.[spark]'``
in a checkout, and Java 17):
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
import logging
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from pure_dp_mf.engines.keyed import ContributionBounder, KeyedCounters, check_keys, public_schedule
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.generator import NoiseGenerator
from pure_dp_mf.validation import check_size

LOG = logging.getLogger("pure_dp_mf.spark")

RELEASE_SCHEMA = "key string, step long, count long, std double, lower long, upper long"
KEYS_PER_SHARD = 1 << 10  # keys released together by one Python call on an executor
_MIN_SHARD = 64  # batch shards are spread over the cores, but not below this many keys (lockstep pays)


def private_running_counts(
    events: Any,
    *,
    keys: Sequence[str],
    epsilon: float,
    horizon: int | None = None,
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
    invalid: str = "refuse",
    keys_per_shard: int | None = None,
) -> Any:
    """The releases of every key at every step of the public schedule 1 … ``through`` (default
    the horizon; without a horizon ``through`` is required and the counters are anytime,
    ``mechanisms.anytime``) as a Spark DataFrame (see the module docstring).

    Events of unlisted keys and of steps outside the schedule are dropped first, unseen. The
    other events must have integer steps and values (ASCII digits) in [0, m]: with ``invalid``
    "refuse" an ``InvalidInputError`` is raised here, before anything is released (the checks
    run as one Spark job); "zero" drops an invalid event, "clamp" clamps its value to [0, m] (an
    unparsable one is dropped). A missing column or a bad key list is an ``InvalidInputError``.

    ``keys_per_shard`` (default: the keys spread over two shards per core of the session, at most
    1 024 and at least 64 a shard) sets how many keys one Python call releases; it changes no value."""
    from pyspark.sql import functions as F

    keys = check_keys(keys)
    if keys_per_shard is None:
        keys_per_shard = batch_shard_size(keys=len(keys), cores=int(events.sparkSession.sparkContext.defaultParallelism))
    shards = _shards(keys, keys_per_shard)
    generator = generator if generator is not None else NoiseGenerator.secure()
    _check_columns(events, key_column=key_column, step_column=step_column, value_column=value_column, user_column=user_column)
    _check_unit(privacy_unit, user_column)
    if invalid not in ("refuse", "zero", "clamp"):
        raise InvalidInputError(f"invalid must be refuse, zero or clamp on Spark batch, got {invalid!r}")
    through = public_schedule(None if horizon is None else check_size(horizon, name="horizon"), through)
    settings = _run_settings(
        generator=generator,
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
    key_table = _key_table(spark, shards)
    table = _scheduled(
        events,
        key_table,
        key_column=key_column,
        step_column=step_column,
        value_column=value_column,
        user_column=user_column,
        through=through,
    )
    table = _apply_policy(table, invalid=invalid, max_value=max_value)
    if privacy_unit == "user":
        table = table.groupBy("user").applyInPandas(
            lambda frame: _bound_user(frame, max_keys=max_keys, max_per_key=max_per_key, max_value=max_value, keys=keys),
            "key string, step long, value long",
        )
    totals = table.groupBy("key", "step").agg(F.sum("value").alias("value"))
    totals = totals.join(F.broadcast(key_table), on="key", how="inner")
    every_shard = spark.createDataFrame(
        [(None, 0, 0, shard) for shard in range(len(shards))], "key string, step long, value long, shard long"
    )
    grouped = totals.unionByName(every_shard).groupBy("shard")
    return grouped.applyInPandas(
        lambda frame: _release_shard(frame, shards=shards, through=through, settings=settings), RELEASE_SCHEMA
    )


_INTEGER = "^-?[0-9]+(\\.0*)?$"


def _check_columns(events, **columns) -> None:
    for flag, name in columns.items():
        if name is not None and name not in events.columns:
            raise InvalidInputError(f"{flag} {name!r}: no such column ({', '.join(events.columns)})")


def _check_unit(privacy_unit: str, user_column: str | None) -> None:
    """Spark bounds contributions for the units event and user; the others run locally."""
    if privacy_unit not in ("event", "user"):
        raise InvalidInputError(
            f"privacy_unit {privacy_unit!r} runs on the local engine (pure_dp_mf.private_running_counts); Spark counts "
            "privacy_unit 'event' or 'user'"
        )
    if privacy_unit == "user" and user_column is None:
        raise InvalidInputError("user-level privacy needs user_column")
    if user_column is not None and privacy_unit != "user":
        raise InvalidInputError("user_column is for privacy_unit='user'")


def _strict_long(column):
    """A column as long when its text is an integer in ASCII digits (else null): no "1_0", no
    exponent, no other script, no fraction (Spark's own cast would truncate "12.5" to 12)."""
    from pyspark.sql import functions as F

    text = F.trim(column.cast("string"))
    return F.when(text.rlike(_INTEGER), F.regexp_replace(text, "\\.0*$", "").cast("decimal(38,0)").cast("long"))


def _scheduled(events, key_table, *, key_column, step_column, value_column, user_column, through: int | None):
    """(key, step, value[, user]) of the events of listed keys whose step is in [1, through] (≥ 1
    when ``through`` is None: a stream without a horizon); the
    others are dropped before their values are looked at. ``valid`` marks parsable values."""
    from pyspark.sql import functions as F

    value = _strict_long(F.col(value_column)) if value_column is not None else F.lit(1).cast("long")
    columns = [
        F.col(key_column).cast("string").alias("key"),
        _strict_long(F.col(step_column)).alias("step"),
        value.alias("value"),
    ]
    if user_column is not None:
        columns.append(F.col(user_column).cast("string").alias("user"))
    table = events.select(*columns).join(F.broadcast(key_table.select("key")), on="key", how="inner")
    in_schedule = F.col("step") >= 1 if through is None else F.col("step").between(1, through)
    return table.where(F.col("step").isNull() | in_schedule)


def _apply_policy(table, *, invalid: str, max_value: int):
    """The invalid events of the schedule: refused (one Spark job, before any release), dropped or clamped."""
    from pyspark.sql import functions as F

    bad = F.col("step").isNull() | F.col("value").isNull() | (F.col("value") < 0) | (F.col("value") > max_value)
    if invalid == "refuse":
        count = table.where(bad).count()
        if count:
            raise InvalidInputError(
                f"{count} event(s) of listed keys in the schedule have a step or value that is not an integer in range "
                f"(value in [0, {max_value}]); nothing was released"
            )
        return table
    parsed = table.where(F.col("step").isNotNull() & F.col("value").isNotNull())
    if invalid == "clamp":
        return parsed.withColumn("value", F.least(F.greatest(F.col("value"), F.lit(0)), F.lit(max_value)).cast("long"))
    return parsed.where(~bad)


def batch_shard_size(*, keys: int, cores: int) -> int:
    """Keys a batch shard holds by default: the keys spread over two shards per core (so that every
    core has work), at most ``KEYS_PER_SHARD`` and at least ``_MIN_SHARD`` (below that, drawing
    the noise of a shard's keys in lockstep pays less than the Python call costs)."""
    return min(KEYS_PER_SHARD, max(_MIN_SHARD, -(-keys // (2 * max(1, cores)))))


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


STATE_SCHEMA = "keys_sha256 string, released long, totals string, pending string, ahead string"  # per-key lists as JSON


def file_clock(spark: Any, folder: str, *, max_files_per_trigger: int | None = None) -> Any:
    """A public clock as a streaming DataFrame (``step`` long) read from CSV files with a header
    line ``step`` in ``folder``: a file holding step s says that steps 1 … s are complete. Write
    these from the job's scheduler, never from the data (for replays and tests; ``rate_clock``
    for wall-clock time)."""
    reader = spark.readStream.schema("step long").option("header", True)
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return reader.csv(str(folder))


def rate_clock(spark: Any, *, start: str, step_seconds: float, rows_per_second: int = 1) -> Any:
    """A public clock from Spark's rate source: at time τ the steps 1 … ⌊(τ − start)/step_seconds⌋
    are complete (``start`` an ISO timestamp)."""
    from pyspark.sql import functions as F

    if not step_seconds > 0:
        raise InvalidInputError(f"step_seconds must be positive, got {step_seconds!r}")
    ticks = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
    elapsed = F.col("timestamp").cast("double") - F.lit(start).cast("timestamp").cast("double")
    return ticks.select(F.floor(elapsed / F.lit(float(step_seconds))).cast("long").alias("step"))


def private_running_counts_stream(
    events: Any,
    *,
    clock: Any,
    keys: Sequence[str],
    epsilon: float,
    horizon: int | None = None,
    generator: NoiseGenerator,
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
    beta: float = 0.05,
    invalid: str = "zero",
    query: str | None = None,
    keys_per_shard: int = KEYS_PER_SHARD,
) -> Any:
    """Keyed releases from a streaming DataFrame (Spark Structured Streaming), per event or per
    user, to be written with a checkpoint location (``writeStream…option("checkpointLocation", …)``).

    **A public schedule.** Which steps a micro-batch releases is decided by ``clock``, a streaming
    DataFrame of steps (``file_clock``, ``rate_clock``) that must not depend on the data: each
    micro-batch releases, for every public key, every step up to the largest clock step it reads
    (capped at the horizon; without one, ``horizon=None``, the counters are anytime:
    ``mechanisms.anytime``). Events never decide it: an event of a step the clock has not closed
    waits in the state until it does; events of unlisted keys or beyond the horizon are dropped
    unseen. An event of a step already released is counted at the next step released (event
    level) or dropped (user level), so every kept event changes one key's input at one step.
    Invalid events of listed keys follow ``invalid`` ("zero": dropped, "clamp": value clamped to
    [0, m], "stop": the query stops, which is not private).

    The keys are released by shards of ``keys_per_shard`` (``_release_stream``); the noise of
    (key, step) is a pure function of the generator and the key, so a micro-batch replayed after
    a crash releases exactly what it released before; with a replayable source and an idempotent
    sink (Spark's file sink) no step is released twice or missed.

    ``generator`` must be the same at every restart of the query: a key file
    (``NoiseGenerator.from_key_file``), bound in the lineage registry to this query (``query``,
    default the stream's name; give the checkpoint location) so that no other query can use it.

    User level (``privacy_unit="user"``, ``user_column``, ``max_keys`` K, ``max_per_key`` C):
    each user's contributions are bounded first, in the state store (``_bounded_users``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    keys = check_keys(keys)
    if not isinstance(generator, NoiseGenerator):
        raise InvalidInputError(
            "a streaming query needs a generator that survives restarts: "
            "generator=NoiseGenerator.from_key_file(path), one key file per query, kept beside its checkpoint"
        )
    columns = {"key_column": key_column, "step_column": step_column, "value_column": value_column, "user_column": user_column}
    _check_columns(events, **columns)
    _check_stream(clock, privacy_unit=privacy_unit, user_column=user_column, invalid=invalid)
    settings = _run_settings(
        generator=generator,
        lineage=_query_lineage(generator, query),
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
    settings["invalid"] = invalid
    spark = events.sparkSession
    shards = _shards(keys, keys_per_shard)
    key_table = _key_table(spark, shards)
    table = _scheduled(events, key_table, **columns, through=horizon)
    table = _stream_policy(table, invalid=invalid, max_value=max_value)
    shard_table = spark.createDataFrame([(shard,) for shard in range(len(shards))], "shard long")
    ticks = clock.select(F.col("step").cast("long").alias("step")).crossJoin(F.broadcast(shard_table))
    if privacy_unit == "user":
        table = _bounded_users(table, settings=settings, keys=keys)
    rows = table.select("key", "step", "value", F.lit(False).alias("tick")).join(F.broadcast(key_table), on="key", how="inner")
    ticks = ticks.select(
        F.lit(None).cast("string").alias("key"), "step", F.lit(0).cast("long").alias("value"), F.lit(True).alias("tick"), "shard"
    )
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


def _check_stream(clock, *, privacy_unit: str, user_column: str | None, invalid: str) -> None:
    """A stream's options: the unit and its user column, a clock with a step column, a stream policy."""
    _check_unit(privacy_unit, user_column)
    if "step" not in clock.columns:
        raise InvalidInputError(f"the clock needs a column 'step' ({', '.join(clock.columns)})")
    if invalid not in ("zero", "clamp", "stop"):
        raise InvalidInputError(f"invalid must be zero, clamp or stop on a stream, got {invalid!r}")


def _bounded_users(table, *, settings: dict, keys: Sequence[str]):
    """The user-level stage of a stream: a first stateful stage,
    ``groupBy(user).transformWithStateInPandas`` (this needs the RocksDB state store, and the call
    stops with an ``InvalidInputError`` naming the setting without it), bounds each user's
    contributions with the user's bounds state in the state store, admitting the micro-batch's
    events of the user in the order (step, key, value), the local engine's order; a user's event
    at a step before its last kept step for that key is dropped."""
    provider = table.sparkSession.conf.get("spark.sql.streaming.stateStore.providerClass", "")
    if "RocksDB" not in provider:
        raise InvalidInputError(
            "user-level streaming keeps each user's bounds with transformWithStateInPandas, which needs the RocksDB "
            "state store: set spark.sql.streaming.stateStore.providerClass to "
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        )
    return table.groupBy("user").transformWithStateInPandas(
        statefulProcessor=_user_bounds(settings=settings, keys=keys),
        outputStructType="key string, step long, value long",
        outputMode="Append",
        timeMode="None",
    )


def _stream_policy(table, *, invalid: str, max_value: int):
    """A stream's invalid events of the schedule: dropped ("zero"), clamped, or passed on to stop
    the query on the executor ("stop")."""

    if invalid == "stop":
        return table
    return _apply_policy(table, invalid=invalid if invalid == "clamp" else "zero", max_value=max_value)


def _query_lineage(generator: NoiseGenerator, query: str | None) -> str | None:
    """The lineage of a streaming query: bound in the registry to its key and ``query`` (a second
    query on the same key file is refused), the same at every restart of the query."""
    if generator.seeded:
        return None
    from pure_dp_mf.engines import registry

    name = query or "spark-stream"
    lineage = hashlib.sha256(registry.generator_tag(generator.key).encode() + b"\x00" + name.encode()).hexdigest()[:32]
    connection = registry.connect()
    try:
        with connection:
            connection.execute("BEGIN IMMEDIATE")
            registry.claim_generator(connection, key=generator.key, lineage=lineage, what=f"Spark streaming query {name}")
    finally:
        connection.close()
    return lineage


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
    """One shard in one micro-batch: release its keys' steps up to the clock (the largest tick of
    the batch, capped at the horizon). The keys are cut into shards of ``keys_per_shard``
    consecutive keys of the list; the clock's rows are cross-joined with the shards so that every
    shard is invoked at every tick, and ``groupBy(shard).applyInPandasWithState`` releases a
    shard's keys here in one vectorised pass. The state is (digest of the shard's keys: a query
    restarted with another key list or shard size is refused; steps released; running totals;
    late inputs; inputs of steps ahead of the clock as {step: per-key list})."""
    import pandas as pd

    shard_keys = shards[int(shard[0])]
    counters = _shard_counters(shard_keys, settings)
    digest = counters._keys_sha256
    if state.exists:
        keys_sha256, released, totals, pending, ahead = state.get
        if keys_sha256 != digest:
            raise InvalidInputError("the key list or keys_per_shard differs from the one this checkpoint was started with")
        totals, pending = np.asarray(json.loads(totals), dtype=np.int64), np.asarray(json.loads(pending), dtype=np.int64)
        ahead = {int(step): np.asarray(values, dtype=np.int64) for step, values in json.loads(ahead).items()}
    else:
        released, totals, pending = 0, np.zeros(len(shard_keys), dtype=np.int64), np.zeros(len(shard_keys), dtype=np.int64)
        ahead = {}
    frames = list(frames)
    filled = [frame for frame in frames if len(frame)]  # pandas warns about concatenating empty frames
    data = pd.concat(filled or frames[:1], ignore_index=True)
    horizon, max_value = settings["horizon"], settings["max_value"]
    ticks = data["tick"].to_numpy(dtype=bool)
    clock = int(data["step"][ticks].max()) if ticks.any() else 0
    clock = clock if horizon is None else min(clock, horizon)
    events = data[~ticks]
    values = events["value"].to_numpy(dtype=np.int64)
    if len(values) and (values.min() < 0 or values.max() > max_value or events["step"].isna().any()):
        raise InvalidInputError(
            f"an event has a step that is not an integer or a value outside [0, {max_value}] (invalid='stop')"
        )
    rows = events["key"].map(counters.index).to_numpy(dtype=np.int64)
    steps = events["step"].to_numpy(dtype=np.int64)
    late = steps <= released
    if settings["privacy_unit"] == "event":  # a late event moves to the next step released
        np.add.at(pending, rows[late], values[late])
    for step in np.unique(steps[~late]).tolist():
        mine = (steps == step) & ~late
        entry = ahead.setdefault(int(step), np.zeros(len(shard_keys), dtype=np.int64))
        np.add.at(entry, rows[mine], values[mine])
    if clock <= released:
        state.update(_stream_state(digest, released, totals, pending, ahead))
        return
    increments = np.zeros((len(shard_keys), clock - released), dtype=np.int64)
    for step in [step for step in ahead if step <= clock]:
        increments[:, step - released - 1] += ahead.pop(step)
    increments[:, 0] += pending
    frame = _shard_frame(counters, increments, totals=totals, start=released, settings=settings)
    state.update(_stream_state(digest, clock, totals + increments.sum(axis=1), np.zeros(len(shard_keys), dtype=np.int64), ahead))
    yield frame


def _stream_state(digest: str, released: int, totals: np.ndarray, pending: np.ndarray, ahead: dict) -> tuple:
    return (
        digest,
        int(released),
        json.dumps(totals.tolist()),
        json.dumps(pending.tolist()),
        json.dumps({str(step): values.tolist() for step, values in sorted(ahead.items())}),
    )


def _run_settings(*, generator: NoiseGenerator, beta: float, lineage: str | None = None, **mechanism) -> dict:
    """The picklable settings every executor rebuilds a key's counter from: the driver's
    ``KeyedCounters`` checks them once and fixes the base file and the run's lineage (every
    key's counter shares the run's generator and lineage: a fresh one per run, or the lineage
    of the query's key file, ``_query_lineage``)."""
    if generator.seeded:
        _warn_seeded()
    template = KeyedCounters(keys=["template"], rng=generator, _lineage=lineage, **mechanism)
    return {
        **mechanism,
        "base": template.base_file,
        "generator": generator.to_record(),
        "beta": beta,
        "lineage": template.lineage,
    }


_SHARD_COUNTERS: OrderedDict[tuple[str, tuple[str, ...]], KeyedCounters] = OrderedDict()
CACHED_KEYS = 1 << 17
"""Keys whose counters (with their drawn noise pages) a Python worker keeps between micro-batches,
at most; ``PURE_DP_MF_SPARK_CACHED_KEYS`` on the executors sets another number. A key holds a
page of 2^10 int64 draws (8 KiB) for each level in use and one ahead, so a one-level mechanism
(horizons up to a few hundred) keeps at most about 1 GiB a worker by default."""


def _cached_keys() -> int:
    import os

    setting = os.environ.get("PURE_DP_MF_SPARK_CACHED_KEYS")
    try:
        return CACHED_KEYS if setting is None else max(0, int(setting))
    except ValueError:
        raise InvalidInputError(f"PURE_DP_MF_SPARK_CACHED_KEYS={setting!r} is not a whole number") from None


def _shard_counters(shard_keys: Sequence[str], settings: dict) -> KeyedCounters:
    """The counters of one shard's keys on an executor, from the run's settings. The Python worker
    keeps the most recently used shards, up to ``CACHED_KEYS`` keys in all (every shard of a
    query of up to 131 072 keys), with their drawn noise pages, so the next micro-batch of a
    shard reuses them instead of drawing its pages again. Kept or rebuilt, a key's noise at a step
    is the same pure function of (generator, key, step): caching changes no value and draws no
    noise twice for different data."""
    run = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    tag = (run, tuple(shard_keys))
    counters = _SHARD_COUNTERS.get(tag)
    if counters is None:
        mechanism = {name: value for name, value in settings.items() if name not in ("generator", "beta", "lineage", "invalid")}
        counters = KeyedCounters(
            keys=shard_keys, rng=NoiseGenerator.from_record(settings["generator"]), _lineage=settings["lineage"], **mechanism
        )
        _SHARD_COUNTERS[tag] = counters
        budget = _cached_keys()
        while len(_SHARD_COUNTERS) > 1 and sum(len(cached.keys) for cached in _SHARD_COUNTERS.values()) > budget:
            _SHARD_COUNTERS.popitem(last=False)
    _SHARD_COUNTERS.move_to_end(tag)
    return counters


def _warn_seeded() -> None:
    """A seeded generator warns through ``warnings`` and the Spark driver's log."""
    message = "seeded noise (NoiseGenerator.from_seed): not private, for tests and research only"
    warnings.warn(message, stacklevel=3)
    LOG.warning(message)


SPARK_INSTALL = "pip install -e '.[spark]' in a checkout of pure-dp-mf (the spark extra: PySpark 4.3, pandas, pyarrow)"
JAVA_INSTALL = "install a JDK 17 (e.g. apt-get install openjdk-17-jre-headless) and put its java on the PATH or set JAVA_HOME"


def _java_problem() -> str | None:
    """Why the JVM cannot start, checked before Spark tries (None when a java is found): JAVA_HOME
    without bin/java, or neither JAVA_HOME nor java on the PATH."""
    import os
    import shutil
    from pathlib import Path

    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not (java.is_file() and os.access(java, os.X_OK)):
            return f"JAVA_HOME={home} has no executable bin/java"
        return None
    if shutil.which("java") is None:
        return "java not found on PATH and JAVA_HOME unset"
    return None


def local_session(app_name: str = "pure-dp-mf"):
    """A SparkSession on ``PURE_DP_MF_SPARK_MASTER`` (default local[2]) whose Python workers run
    this interpreter: ``PYSPARK_PYTHON`` (and ``PYSPARK_DRIVER_PYTHON``) set to ``sys.executable``
    when unset, so that the workers import this package. A missing PySpark, a missing Java and a
    JVM that fails to start are each one ``InvalidInputError`` line."""
    import os
    import sys

    try:
        from pyspark.errors import PySparkRuntimeError
        from pyspark.sql import SparkSession
    except ImportError:
        raise InvalidInputError(f"--engine spark needs PySpark, not installed in {sys.executable}: {SPARK_INSTALL}") from None
    problem = _java_problem()
    if problem is not None:
        raise InvalidInputError(f"Spark needs Java 17 ({problem}): {JAVA_INSTALL}")
    if not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(os.environ.get("PURE_DP_MF_SPARK_MASTER", "local[2]")).appName(app_name)
    try:
        return builder.getOrCreate()
    except PySparkRuntimeError as error:  # JAVA_GATEWAY_EXITED: the JVM did not start
        if not str(error.getCondition() or "").startswith("JAVA_GATEWAY"):
            raise
        raise InvalidInputError(
            f"Spark needs Java 17: the JVM did not start ({_one_line(error)}); check that java -version says 17 or later, "
            f"or {JAVA_INSTALL}"
        ) from None


def _one_line(error: BaseException) -> str:
    """An exception's message on one line, at most 200 characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."


def count_file_on_spark(
    *,
    input_file,
    keys: list[str],
    columns: dict,
    options: dict,
    rng: NoiseGenerator | None,
    output,
    output_format: str,
    beta: float,
    through: int,
) -> None:
    """``count --engine spark``: the releases of ``private_running_counts`` for a CSV file,
    written in step order, keys in list order, as the local engine writes them (csv: the column
    names first, the metadata in ``OUT.meta.json``; jsonl: a header record first)."""
    import sys

    from pure_dp_mf.engines.io import write_sidecar
    from pure_dp_mf.engines.keyed_io import COLUMNS, csv_field

    if input_file is None:
        raise InvalidInputError("--engine spark reads the events from a file: give the input file")
    session = local_session("pure-dp-mf count")
    generator = rng if rng is not None else NoiseGenerator.secure()
    frame = session.read.csv(str(input_file), header=True)
    released = private_running_counts(
        frame, keys=keys, generator=generator, beta=beta, through=through, **columns, **options
    ).toPandas()
    order = {key: i for i, key in enumerate(keys)}
    released = released.assign(order=released["key"].map(order)).sort_values(["step", "order"])
    mechanism = {name: value for name, value in options.items()}
    template = KeyedCounters(
        keys=keys[:1], rng=NoiseGenerator.from_seed(0) if generator.seeded else NoiseGenerator.secure(), **mechanism
    )
    summary = {
        **template.summary(),
        "keys": len(keys),
        "beta": beta,
        "through": through,
        "engine": "spark",
        "seeded": generator.seeded,
    }
    sink = open(output, "w", encoding="utf-8") if output is not None else sys.stdout
    try:
        if output_format == "csv":
            if output is not None:
                write_sidecar(output, summary)
            sink.write(",".join(COLUMNS) + "\n")
            for row in released.itertuples(index=False):
                sink.write(f"{csv_field(row.key)},{row.step},{row.count},{row.std:.6g},{row.lower},{row.upper}\n")
        else:
            sink.write(json.dumps({"header": summary}, ensure_ascii=False, sort_keys=True) + "\n")
            for row in released.itertuples(index=False):
                record = {"key": row.key, "step": int(row.step), "count": int(row.count), "std": float(f"{row.std:.6g}")}
                sink.write(json.dumps({**record, "lower": int(row.lower), "upper": int(row.upper)}) + "\n")
    finally:
        if output is not None:
            sink.close()
