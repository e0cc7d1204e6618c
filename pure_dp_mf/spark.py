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
summed per (key, step); the key list is unioned in so that every key has a group, with or
without events; ``groupBy(key).applyInPandas`` releases each key's steps 1 … ``through`` in one
vectorised pass (``KeyedCounters.release_all``). The generator key travels to the executors in
the task closure: run on a cluster you trust with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.keyed import ContributionBounder, KeyedCounters, check_keys
from pure_dp_mf.noise import NoiseGenerator

RELEASE_SCHEMA = "key string, step long, count long, std double, lower long, upper long"


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
) -> Any:
    """The releases of every key at steps 1 … ``through`` (default: the last step of the events)
    as a Spark DataFrame (see the module docstring). Raises ``InvalidInputError`` for a missing
    column, a bad key list, a step outside [1, horizon] or a value outside [0, m]."""
    from pyspark.sql import functions as F

    keys = check_keys(keys)
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
    key_table = spark.createDataFrame([(key,) for key in keys], "key string")
    known = table.join(F.broadcast(key_table), on="key", how="inner")
    if privacy_unit == "user":
        known = known.groupBy("user").applyInPandas(
            lambda frame: _bound_user(frame, max_keys=max_keys, max_per_key=max_per_key, max_value=max_value, keys=keys),
            "key string, step long, value long",
        )
    totals = known.groupBy("key", "step").agg(F.sum("value").alias("value"))
    every_key = key_table.select("key", F.lit(0).cast("long").alias("step"), F.lit(0).cast("long").alias("value"))
    grouped = totals.unionByName(every_key).groupBy("key")
    return grouped.applyInPandas(lambda frame: _release_key(frame, through=through, settings=settings), RELEASE_SCHEMA)


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


def _release_key(frame, *, through: int, settings: dict):
    """One key's releases at steps 1 … through (``KeyedCounters.release_all`` for that key alone)."""
    import pandas as pd

    key = str(frame["key"].iloc[0])
    counters = _key_counters(key, settings)
    increments = np.zeros((1, through), dtype=np.int64)
    for step, value in zip(frame["step"], frame["value"], strict=True):
        if step >= 1:
            increments[0, int(step) - 1] += int(value)
    counts, std, lower, upper = counters.release_all(increments, beta=settings["beta"])
    return pd.DataFrame(
        {
            "key": key,
            "step": np.arange(1, through + 1, dtype=np.int64),
            "count": counts[0],
            "std": std,
            "lower": lower[0],
            "upper": upper[0],
        }
    )


STATE_SCHEMA = "total long, released long, pending long"


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
) -> Any:
    """Keyed releases from a streaming DataFrame (Spark Structured Streaming), per event or per
    user, to be written with a checkpoint location (``writeStream…option("checkpointLocation", …)``).

    Each micro-batch releases, for every public key, every new step up to the largest step of the
    batch: the batch's new steps (``dropDuplicates`` on the step: a small state of at most n
    steps) are cross-joined with the key list so that keys without events are invoked too, and
    ``groupBy(key).applyInPandasWithState`` keeps each key's counter state in Spark's state
    store: (running total, steps released, pending), three numbers. ``generator`` is required
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
    value = F.col(value_column).cast("long") if value_column is not None else F.lit(1).cast("long")
    columns = [F.col(key_column).cast("string").alias("key"), F.col(step_column).cast("long").alias("step"), value.alias("value")]
    if user_column is not None:
        columns.append(F.col(user_column).cast("string").alias("user"))
    table = events.select(*columns)
    key_table = spark.createDataFrame([(key,) for key in keys], "key string")
    ticks = table.select("step").dropDuplicates(["step"]).crossJoin(F.broadcast(key_table))
    known = table.join(F.broadcast(key_table), on="key", how="inner")
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
    rows = known.select("key", "step", "value").unionByName(ticks.select("key", "step", F.lit(0).cast("long").alias("value")))
    return rows.groupBy("key").applyInPandasWithState(
        lambda key, frames, state: _release_stream(key, frames, state, settings=settings),
        RELEASE_SCHEMA,
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.NoTimeout,
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


def _release_stream(key: tuple, frames, state, *, settings: dict):
    """One key in one micro-batch: release its new steps; the state is (total, released, pending)."""
    import pandas as pd

    total, released, pending = state.get if state.exists else (0, 0, 0)
    data = pd.concat(list(frames))
    steps, values = data["step"].to_numpy(dtype=np.int64), data["value"].to_numpy(dtype=np.int64)
    horizon, max_value = settings["horizon"], settings["max_value"]
    if len(values) and (values.min() < 0 or values.max() > max_value):
        raise InvalidInputError(f"a value is outside [0, {max_value}]")
    if len(steps) and (steps.min() < 1 or steps.max() > horizon):
        raise InvalidInputError(f"a step is outside [1, {horizon}]")
    top = int(steps.max()) if len(steps) else released
    if settings["privacy_unit"] == "event":  # a late event moves to the next step released
        pending = int(pending + values[steps <= released].sum())
    if top <= released:
        state.update((int(total), int(released), pending))
        return
    increments = np.zeros(top - released, dtype=np.int64)
    np.add.at(increments, steps[steps > released] - released - 1, values[steps > released])
    increments[0] += pending
    counters = _key_counters(str(key[0]), settings)
    counts = total + np.cumsum(increments) + counters._batch.noise(released, top)[0]
    std, lower, upper = counters.intervals(counts[None, :], start=released, beta=settings["beta"])
    state.update((int(total + increments.sum()), top, 0))
    yield pd.DataFrame(
        {
            "key": str(key[0]),
            "step": np.arange(released + 1, top + 1, dtype=np.int64),
            "count": counts,
            "std": std,
            "lower": lower[0],
            "upper": upper[0],
        }
    )


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


def _key_counters(key: str, settings: dict) -> KeyedCounters:
    """One key's counter on an executor, from the run's settings."""
    mechanism = {name: value for name, value in settings.items() if name not in ("generator", "beta", "lineage")}
    return KeyedCounters(
        keys=[key], rng=NoiseGenerator.from_record(settings["generator"]), lineage=settings["lineage"], **mechanism
    )
