"""Keyed private running counts on Apache Spark (the optional extra ``spark``: ``pip install -e '.[spark]'``
in a checkout, and Java 17):
batch (``private_running_counts``) and Structured Streaming (``private_running_counts_stream``).

``private_running_counts(events, keys=…, epsilon=…, horizon=…)`` takes a DataFrame of events and
returns a DataFrame with one row (key, step, count, std, lower, upper) per public key and step,
the same values as the local engine (``keyed.run_keyed``) for the same generator: every key's
noise is keyed by the run's generator and the key alone (``keyed.py``), and the user bounds
admit a user's events in the same order (step, then key, then value). The privacy model and its
proof are those of ``keyed.py`` (docs/privacy.md, "Keyed streams", "On Spark"). Batch and
streaming take what the local engine takes: keyed events or one stream (no key column), integer
steps or dates on a public ``Calendar`` (converted by ``Calendar.step_of`` on the executors),
and the privacy units event, step, user-step and user.

Plan: unknown keys dropped (a broadcast join with the public key list, which gives each event
its key's position and shard); with user-level privacy, ``groupBy(user).applyInPandas`` applies
each user's contribution bounds; the keys are cut into shards of ``keys_per_shard`` consecutive
keys of the list (default 1 024 at most), every key travels as one row beside its shard's events
(so a shard's group holds its keys and events, with or without events, and no task carries the
whole key list), the rows are hash-partitioned into one partition per shard, and
``groupBy(shard).applyInPandas`` releases each shard's keys at steps 1 … ``through`` in one
vectorised pass on Arrow batches (``KeyedCounters`` over the shard's keys: the noise of all of
them drawn in lockstep, each key's pages once, one matrix product per base block). A Python
worker holds one shard at a time, so memory is bounded by the shard size, not by the keys. A
key's noise depends on the run's generator and the key only, so the shards change no value. The
generator key travels to the executors in the task closure: run on a cluster you trust with it.

``count --engine spark`` (``count_file_on_spark``): the executors write each shard's rows, and the
driver streams the shards' files into ``--output`` without holding the rows; the session's
memory comes from the machine (``session_memory``) and a failed job is one line naming the
setting to change (``spark_error``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import (
    ContributionBounder,
    KeyedCounters,
    PerStepBounder,
    keys_sha256,
)
from pure_dp_mf.engines.keyed_io import COLUMNS, Layout, release_columns
from pure_dp_mf.engines.spec import CountSpec, check_user_column, keyed_spec
from pure_dp_mf.errors import InvalidInputError, PureDPMFError
from pure_dp_mf.validation import check_size

LOG = logging.getLogger("pure_dp_mf.spark")

RELEASE_SCHEMA = "key string, step long, count long, std double, lower long, upper long"
KEYS_PER_SHARD = 1 << 10  # keys released together by one Python call on an executor
_MIN_SHARD = 64  # batch shards are spread over the cores, but not below this many keys (lockstep pays)
API_NAMES = {name: name for name in ("key_column", "step_column", "value_column", "user_column", "invalid", "max_value")}
"""How a refusal names the column arguments, the invalid policy and m: the library's keywords."""
CLI_FLAGS = {
    "key_column": "--key-column",
    "step_column": "--step-column",
    "value_column": "--column",
    "user_column": "--user-column",
    "invalid": "--invalid",
    "max_value": "--max-value",
}
"""The same, as ``count --engine spark`` names them: its flags."""


def release_schema(calendar: Calendar | None) -> str:
    """The released rows' columns: key, step, [date (with a calendar),] count, std, lower, upper,
    the local engine's (``engines.dataframe.private_running_counts``)."""
    return RELEASE_SCHEMA if calendar is None else RELEASE_SCHEMA.replace("step long, ", "step long, date string, ")


def private_running_counts(
    events: Any,
    *,
    spec: CountSpec | None = None,
    key_column: str | None = "key",
    step_column: str = "step",
    value_column: str | None = None,
    user_column: str | None = None,
    keys_per_shard: int | None = None,
    **options: Any,
) -> Any:
    """The releases of every key at every step of the public schedule 1 … ``through`` (default
    the horizon; without a horizon ``through`` is required and the counters are anytime,
    ``mechanisms.anytime``) as a Spark DataFrame (see the module docstring). Nothing is released
    here: write the DataFrame to a sink (``released.write.parquet(…)``) and the executors release
    and write every shard's rows, none of them passing through the driver.

    The ledger (``engines.ledger``, docs/privacy.md, "Spark batch"): with a secure generator
    the publication is claimed here, the scheduled events are read once into a local checkpoint
    (the check, the digests and the release read those rows, never the source again), and the
    digest of every step's input (``batch_digests``) is checked and recorded before this
    returns: a run again on the same input releases the same rows, on changed input it raises
    ``LedgerError`` and nothing is released. The result's ``count``, ``lower`` and ``upper``
    columns carry ``{"pure_dp_mf": {"seeded", "private", "publication"}}`` in their metadata.

    The arguments are those of the local engine's ``engines.dataframe.private_running_counts``
    (one ``CountSpec``: ``spec`` or its keyword ``options``, ``CountSpec.of``; what Spark batch
    does not run is refused from the parity table, ``spec.REFUSED``),
    with the same meaning: ``key_column=None`` counts one stream (one key; every event is
    its), ``privacy_unit`` is "event", "step" (one stream: a step's total clipped to m),
    "user-step" (a user's first K = ``max_keys`` keys within each step, each clipped to m) or
    "user" (K keys, C = ``max_per_key`` steps per key), and with ``start`` (and ``step_size``,
    default one day) the step column holds dates or timestamps, bucketed by the public
    ``Calendar`` (``engines/calendar.py``) with Python's own rules on the executors, and the
    rows get a ``date`` column (the start of each step's period); ``through`` may then be a date.
    A Spark ``timestamp`` column is read as its wall-clock time in the session's time zone
    (``spark.sql.session.timeZone``), with that zone's offset when ``start`` has a time zone.

    Events of unlisted keys and of steps outside the schedule are dropped first, unseen. The
    other events must have integer steps (or dates, with ``start``) and integer values (ASCII
    digits) in [0, m]: with ``invalid`` "refuse" an ``InvalidInputError`` naming the column
    (never a value) is raised here, before anything is released (the checks run as one Spark
    job); "zero" drops an invalid event, "clamp" clamps its value to [0, m] (an unparsable one
    is dropped). A missing column or a bad key list is an ``InvalidInputError``.

    ``keys_per_shard`` (default: the keys spread over two shards per core of the session, at most
    1 024 and at least 64 a shard) sets how many keys one Python call releases; it changes no value."""
    spec = keyed_spec(spec, options, route="spark-batch")
    assert spec.keys is not None and spec.privacy_unit is not None
    calendar = spec.calendar
    scheduled = spec.schedule()
    assert scheduled is not None
    grouped, settings, through = _shard_groups(
        events,
        spec=spec,
        key_column=key_column,
        step_column=step_column,
        value_column=value_column,
        user_column=user_column,
        through=scheduled,
        generator=spec.publication.noise_generator(),
        beta=spec.step_beta(intervals=len(spec.keys) * scheduled),
        keys_per_shard=keys_per_shard,
    )
    released = grouped.applyInPandas(
        lambda frame: _release_shard(frame, through=through, settings=settings, calendar=calendar), release_schema(calendar)
    )
    return _marked(released, settings)


def _marked(released: Any, settings: dict) -> Any:
    """The released DataFrame with what made it in the metadata of its released columns (count,
    lower, upper), as the pandas function's ``attrs``: ``seeded`` (True: not private), ``private``,
    and the ledger's ``publication`` (None when seeded). It travels with the schema, into
    Parquet files the DataFrame is written to."""
    mark = {"seeded": settings["seeded"], "private": not settings["seeded"], "publication": settings.get("publication")}
    for column in ("count", "lower", "upper"):
        released = released.withMetadata(column, {"pure_dp_mf": mark})
    return released


def _shard_groups(
    events: Any,
    *,
    spec: CountSpec,
    key_column: str | None,
    step_column: str,
    value_column: str | None,
    user_column: str | None,
    through: Any,
    generator: NoiseGenerator | None,
    beta: float,
    keys_per_shard: int | None,
    flags: dict[str, str] | None = None,
) -> tuple[Any, dict, int]:
    """The batch plan up to the release: (the rows grouped by shard, the run's settings, through).

    The keys are cut into shards of ``keys_per_shard`` consecutive keys of the list; every key
    travels as one row (key, position in the list, shard, step 0) beside its events (position,
    shard, step ≥ 1, value), so a shard's group holds its own keys and its events and nothing
    else: no task carries the whole key list, and a worker holds one shard at a time. The rows
    go to exactly one partition per shard: each row carries its shard's ``bucket``, a value that
    Spark's hash partitioning sends to partition ``shard`` (``_partition_buckets``), and the rows
    are hash-partitioned by it into as many partitions as shards (``repartition``: adaptive
    execution does not merge these), so every task releases one shard and the tasks are equal.

    ``spec``: the count (its keys, mechanism, unit and bounds, invalid policy and calendar: with a
    calendar the step column holds dates, ``_calendar_steps``); ``flags``: how the caller
    names the column arguments and the policy in a refusal (``API_NAMES``, or ``CLI_FLAGS`` for
    ``count --engine spark``)."""
    from pyspark.sql import functions as F

    assert spec.keys is not None and spec.privacy_unit is not None
    keys, calendar, invalid, privacy_unit = list(spec.keys), spec.calendar, spec.invalid, spec.privacy_unit
    spark = events.sparkSession
    if keys_per_shard is None:
        keys_per_shard = batch_shard_size(keys=len(keys), cores=int(spark.sparkContext.defaultParallelism))
    keys_per_shard = check_size(keys_per_shard, name="keys_per_shard")
    generator = generator if generator is not None else NoiseGenerator.secure()
    flags = flags if flags is not None else API_NAMES
    columns = {"key_column": key_column, "step_column": step_column, "value_column": value_column, "user_column": user_column}
    _check_columns(events, columns, flags=flags)
    _check_single(key_column, keys, flags=flags)
    check_user_column(privacy_unit, user_column)
    if invalid not in ("refuse", "zero", "clamp"):
        raise InvalidInputError(f"invalid must be refuse, zero or clamp on Spark batch, got {invalid!r}")
    settings = _run_settings(
        keys=keys, generator=generator, lineage=_publication_lineage(generator), beta=beta, **mechanism_options(spec)
    )
    guard = None if generator.seeded else _claim(generator, settings=settings, keys=keys)
    key_table = _key_table(spark, keys, keys_per_shard)
    table = _scheduled(events, key_table, **columns, through=through, calendar=calendar, only_key=keys[0])
    if guard is not None:
        table = _read_once(table)
    table = _apply_policy(
        table, invalid=invalid, max_value=spec.max_value, columns=columns, flags=flags, dates=calendar is not None
    )
    table = _bounded(
        table, privacy_unit=privacy_unit, max_keys=spec.max_keys, max_per_key=spec.max_per_key, max_value=spec.max_value
    )
    if guard is not None:
        guard.record(first=0, digests=batch_digests(table, key=generator.key, through=through))
    shards = -(-len(keys) // keys_per_shard)
    buckets = _partition_buckets(spark, shards)
    bucket = F.element_at(F.array(*[F.lit(value) for value in buckets]), F.col("shard").cast("int") + 1)
    bucket = bucket.cast("long").alias("bucket")  # a long, as the ids whose hash chose it
    kept = table.select(F.lit(None).cast("string").alias("key"), "position", "shard", "step", "value", bucket)
    key_rows = key_table.select(
        "key", "position", "shard", F.lit(0).cast("long").alias("step"), F.lit(0).cast("long").alias("value"), bucket
    )
    # hash-partitioned by bucket, the rows are already clustered by (bucket, shard): no second exchange
    return kept.unionByName(key_rows).repartition(shards, "bucket").groupBy("bucket", "shard"), settings, through


def _partition_buckets(spark, partitions: int) -> list[int]:
    """For each partition p in 0 … partitions − 1, a long whose hash partition among ``partitions``
    is p (the least such in 0, 1, 2, …), by Spark's own hash (``pmod(hash(x), partitions)``, the
    expression of its hash partitioning), evaluated by one small job. Partitioning by shard id
    directly would put several shards in one partition and none in others (about a third of the
    partitions empty at 100 shards), so that some tasks release two to four shards each while the
    other cores wait."""
    from pyspark.sql import functions as F

    found: dict[int, int] = {}
    start, stop = 0, 32 * partitions  # a value misses a given partition with odds e^-32 in the first span
    column = F.pmod(F.hash(F.col("id")), F.lit(partitions)).alias("partition")
    while len(found) < partitions:
        for row in spark.range(start, stop, numPartitions=1).select("id", column).collect():
            found.setdefault(int(row["partition"]), int(row["id"]))
        start, stop = stop, 2 * stop
    return [found[partition] for partition in range(partitions)]


def _publication_lineage(generator: NoiseGenerator) -> str | None:
    """The lineage of a batch run on a key file's publication: the same at every run of it (a
    re-run in one process is checked by the ledger, not refused as a second counter on the key);
    None (a fresh lineage) for any other generator."""
    if generator.seeded or generator.publication is None:
        return None
    from pure_dp_mf.engines.registry import generator_tag

    run = generator_tag(generator.key).encode() + b"\x00batch\x00" + generator.publication.encode()
    return hashlib.sha256(run).hexdigest()[:32]


def publication_spec(settings: dict, *, keys: Sequence[str], **route) -> dict:
    """The publication a Spark run releases: the local engine's (``KeyedCounters.publication_spec``
    for the same keys and options, so a publication run locally and on Spark batch is one
    publication), with ``route`` (a stream's shards) added when given."""
    template = KeyedCounters(
        keys=["template"], generator=NoiseGenerator.from_seed(0), _lineage="spec", **_mechanism_settings(settings)
    )
    return {**template.publication_spec(), "keys_sha256": keys_sha256(keys), **route}


def _claim(generator: NoiseGenerator, *, settings: dict, keys: Sequence[str], **route) -> Any:
    """The driver's claim on the run's publication (``ledger.Guard``), once, before any executor
    draws; the publication's name goes into ``settings`` (the result's mark)."""
    from pure_dp_mf.engines.ledger import Guard

    guard = Guard(generator=generator, spec=publication_spec(settings, keys=keys, **route))
    settings["publication"] = guard.name
    return guard


def _read_once(table: Any) -> Any:
    """The scheduled events, read from the source once: checkpointed in the executors' block
    stores (``localCheckpoint``, eager: one job reads the source now), so that the input check,
    the digests recorded in the ledger and the release all read these rows, never the source
    again. A local checkpoint is not recomputed: a lost block fails the job, it never re-reads a
    source that may have changed since."""
    from pyspark import StorageLevel

    return table.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)


_LIMBS = 8  # a 256-bit sum travels as eight 32-bit limbs in long columns (Spark has no 256-bit sum)


def batch_digests(table: Any, *, key: bytes, through: int) -> list[str]:
    """The keyed step digests (``ledger.keyed_step_digest``) of the 0-based steps 0 … through − 1
    of a batch's kept events ``table`` (key, step, value, …), computed by Spark: each key's input
    at each step summed (``groupBy``), the PRF value of every (key, step, input ≠ 0) summed per
    step on the executors, and per step eight 32-bit limbs of the sum mod 2²⁵⁶ summed by
    ``groupBy(step)``; only ``through`` rows of eight numbers reach the driver, no event. The
    same digests as ``KeyedCounters.claim_steps`` for the same inputs."""
    from pyspark.sql import functions as F

    from pure_dp_mf.engines.ledger import keyed_digest, keyed_mac_key

    mac_key = keyed_mac_key(key)
    limbs = [f"l{i}" for i in range(_LIMBS)]
    inputs = table.groupBy("key", "step").agg(F.sum("value").alias("value")).where(F.col("value") != 0)
    sums = inputs.mapInPandas(
        lambda frames: _digest_limbs(frames, mac_key=mac_key), "step long, " + ", ".join(f"{name} long" for name in limbs)
    )
    rows = sums.groupBy("step").agg(*(F.sum(name).alias(name) for name in limbs)).collect()
    totals = {int(row["step"]): sum(int(row[name]) << (32 * i) for i, name in enumerate(limbs)) for row in rows}
    return [keyed_digest(mac_key, step=step, total=totals.get(step + 1, 0)) for step in range(through)]


def _digest_limbs(frames, *, mac_key: bytes):
    """On an executor: the PRF sums (``ledger.keyed_pair_sum``) of a partition's (key, step, input)
    rows per 1-based step, mod 2²⁵⁶, as one row (step, eight 32-bit limbs) per step."""
    import pandas as pd

    from pure_dp_mf.engines.ledger import keyed_pair_sum

    totals: dict[int, int] = {}
    for frame in frames:
        for step, rows in frame.groupby("step", sort=False):
            total = keyed_pair_sum(
                mac_key, step=int(step) - 1, keys=rows["key"].tolist(), values=rows["value"].to_numpy(dtype=np.int64)
            )
            totals[int(step)] = (totals.get(int(step), 0) + total) % (1 << 256)
    steps = sorted(totals)
    columns = {"step": np.asarray(steps, dtype=np.int64)}
    for i in range(_LIMBS):
        columns[f"l{i}"] = np.asarray([(totals[step] >> (32 * i)) & 0xFFFFFFFF for step in steps], dtype=np.int64)
    yield pd.DataFrame(columns)


_INTEGER = "^-?[0-9]+(\\.0*)?$"


def _check_columns(events, columns: dict[str, str | None], *, flags: dict[str, str] = API_NAMES) -> None:
    """Every named column exists (the error names the argument, or the flag, and lists the columns)."""
    for argument, name in columns.items():
        if name is not None and name not in events.columns:
            raise InvalidInputError(f"{flags.get(argument, argument)} {name!r}: no such column ({', '.join(events.columns)})")


def _check_single(key_column: str | None, keys: Sequence[str], *, flags: dict[str, str]) -> None:
    """Without a key column the events are one stream: one key, every event its (the local engine's rule)."""
    if key_column is None and len(keys) != 1:
        raise InvalidInputError(f"{flags['key_column']}=None is for one key (a single stream), got {len(keys)} keys")


USER_UNITS = ("user-step", "user")  # the privacy units whose bounds need the user of every event


def _strict_long(column, data_type: Any = None):
    """A column as long when its text is an integer in ASCII digits (else null): no "1_0", no
    exponent, no other script, no fraction (Spark's own cast would truncate "12.5" to 12). A
    column whose ``data_type`` is already an integer type is taken as it is (widened to long),
    without the text round trip."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ByteType, IntegerType, LongType, ShortType

    if isinstance(data_type, (ByteType, ShortType, IntegerType, LongType)):
        return column.cast("long")
    text = F.trim(column.cast("string"))
    return F.when(text.rlike(_INTEGER), F.regexp_replace(text, "\\.0*$", "").try_cast("decimal(38,0)").try_cast("long"))


_KEY_SPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
"""The characters Python's ``str.strip`` removes around a key (``keyed.normalise_key``): the
Unicode white space and the four separators U+001C–U+001F, 29 in all; Spark's
``trim(key, _KEY_SPACE)`` removes the same, one character at a time (no regular expression)."""


def _scheduled(
    events,
    key_table,
    *,
    key_column,
    step_column,
    value_column,
    user_column,
    through: int | None,
    calendar: Calendar | None = None,
    only_key: str | None = None,
):
    """(key, step, value[, user], position, shard) of the events of listed keys whose step is in
    [1, through] (≥ 1 when ``through`` is None: a stream without a horizon); the others are
    dropped before their values are looked at. A null step or value marks one that does not parse.
    Without a key column every event is ``only_key``'s (one stream); with a ``calendar`` the
    step column holds dates (``_calendar_steps``)."""
    from pyspark.sql import functions as F

    types = {field.name: field.dataType for field in events.schema.fields}
    value = _strict_long(F.col(value_column), types.get(value_column)) if value_column is not None else F.lit(1).cast("long")
    if key_column is None:
        key = F.lit(only_key).cast("string")
    else:
        key = F.trim(F.col(key_column).cast("string"), F.lit(_KEY_SPACE))  # keyed.normalise_key
    if calendar is None:
        step = _strict_long(F.col(step_column), types.get(step_column))
    else:
        step = _calendar_steps(F.col(step_column), calendar, data_type=types[step_column])
    columns = [key.alias("key"), step.alias("step"), value.alias("value")]
    if user_column is not None:
        columns.append(F.col(user_column).cast("string").alias("user"))
    table = events.select(*columns).join(F.broadcast(key_table), on="key", how="inner")
    in_schedule = F.col("step") >= 1 if through is None else F.col("step").between(1, through)
    return table.where(F.col("step").isNull() | in_schedule)


def _calendar_steps(column, calendar: Calendar, *, data_type):
    """The 1-based steps of a column of dates or timestamps on the public calendar, null where a
    cell does not parse: ``Calendar.step_of`` itself, once per distinct cell of each Arrow batch
    on the executors (a pandas UDF), so that Spark takes exactly the dates the local engine takes
    (Python's ``datetime.fromisoformat``, the time-zone rule of ``start``), capped at ±2⁶² as
    there. Cells are read as text; a ``timestamp`` (an instant) as its wall-clock time in the
    session's time zone, with the zone's offset when ``start`` has a time zone."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    if isinstance(data_type, TimestampType):
        pattern = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS" + ("XXX" if calendar.start.tzinfo is not None else "")
        text = F.date_format(column, pattern)
    else:
        text = column.cast("string")

    def steps(cells):
        codes, uniques = pd.factorize(cells, use_na_sentinel=True)
        found = [_calendar_step(calendar, cell) for cell in uniques] + [None]
        return pd.Series(pd.array(found, dtype="Int64")[codes])  # code −1 (a null cell) reads the last entry

    steps.__annotations__ = {"cells": pd.Series, "return": pd.Series}  # the UDF's kind, without module-level pandas
    return F.pandas_udf(steps, "long")(text)  # type: ignore[call-overload]


def _calendar_step(calendar: Calendar, cell: Any) -> int | None:
    """One cell's step (``Calendar.step_of``) capped at ±2⁶², or None when it does not parse."""
    try:
        step = calendar.step_of(cell)
    except (InvalidInputError, TypeError, ValueError, OverflowError):
        return None
    return max(-(1 << 62), min(1 << 62, step))


def _apply_policy(table, *, invalid: str, max_value: int, columns: dict | None = None, flags=API_NAMES, dates: bool = False):
    """The invalid events of the schedule: refused (one Spark job, before any release), dropped or clamped."""
    from pyspark.sql import functions as F

    unparsed = F.col("step").isNull() | F.col("value").isNull()
    if "user" in table.columns:  # an event without its user (``keyed.check_user``): never pooled into one user
        unparsed = unparsed | F.col("user").isNull() | (F.trim(F.col("user")) == "")
    bad = unparsed | (F.col("value") < 0) | (F.col("value") > max_value)
    if invalid == "refuse":
        _refuse_invalid(table, max_value=max_value, columns=columns or {}, flags=flags, dates=dates)
        return table
    parsed = table.where(~unparsed)
    if invalid == "clamp":
        return parsed.withColumn("value", F.least(F.greatest(F.col("value"), F.lit(0)), F.lit(max_value)).cast("long"))
    return parsed.where(~bad)


def _refuse_invalid(table, *, max_value: int, columns: dict, flags: dict, dates: bool) -> None:
    """``invalid="refuse"``: one Spark job counts the invalid events of each kind (a step that is
    not an integer, or not a date with a calendar; a value that is not an integer, or outside
    [0, m]; no user), and any stops the run, before anything is released, with one error naming
    the column of the first kind found and how many events are invalid, never a value."""
    from pyspark.sql import functions as F

    step_bad = F.col("step").isNull()
    value_bad = ~step_bad & F.col("value").isNull()
    outside = ~step_bad & ~value_bad & ((F.col("value") < 0) | (F.col("value") > max_value))
    kinds = {"step": step_bad, "value": value_bad, "outside": outside}
    if "user" in table.columns:
        kinds["user"] = ~step_bad & ~value_bad & ~outside & (F.col("user").isNull() | (F.trim(F.col("user")) == ""))
    found = table.agg(*(F.sum(F.when(test, 1).otherwise(0)).alias(name) for name, test in kinds.items())).first()
    counts = {name: int(found[name] or 0) for name in kinds}
    total = sum(counts.values())
    if not total:
        return
    what = {
        "step": (
            "step_column",
            "are not ISO dates or timestamps (in the time zone of start, or none)" if dates else "are not integers",
        ),
        "value": ("value_column", "are not integers"),
        "outside": ("value_column", f"are outside [0, {max_value}] ({flags.get('max_value', 'max_value')})"),
        "user": ("user_column", "have an empty user id (every event needs its user for the contribution bounds)"),
    }
    kind = next(name for name in kinds if counts[name])
    argument, words = what[kind]
    column = f"{flags.get(argument, argument)} {columns[argument]!r}: " if columns.get(argument) is not None else ""
    raise InvalidInputError(
        f"{column}{counts[kind]} event(s) of listed keys in the schedule {words}; {total} event(s) in all are invalid "
        f"and nothing was released ({flags.get('invalid', 'invalid')} refuse; zero drops them, clamp clamps their values)"
    )


def _bounded(table, *, privacy_unit: str, max_keys: int | None, max_per_key: int | None, max_value: int):
    """The events kept by the privacy unit's contribution bounds, as the local engine keeps them
    (``KeyedCounters.admit``): "event" keeps every event; "step" (one stream) a step's total
    clipped to m (``PerStepBounder`` with every event one unit's: the kept values of a step sum to
    min(total, m) whatever their order, summed here by Spark in exact decimals); "user-step" and
    "user" bound each user's events in the user's group (``_bound_user``)."""
    from pyspark.sql import functions as F

    if privacy_unit == "step":
        total = F.least(F.sum(F.col("value").cast("decimal(38,0)")), F.lit(max_value).cast("decimal(38,0)"))
        return table.groupBy("key", "step", "position", "shard").agg(total.cast("long").alias("value"))
    if privacy_unit not in USER_UNITS:
        return table
    per_step = privacy_unit == "user-step"
    return table.groupBy("user").applyInPandas(
        lambda frame: _bound_user(frame, max_keys=max_keys, max_per_key=max_per_key, max_value=max_value, per_step=per_step),
        "key string, step long, value long, position long, shard long",
    )


def batch_shard_size(*, keys: int, cores: int) -> int:
    """Keys a batch shard holds by default: the keys spread over two shards per core (so that every
    core has work), at most ``KEYS_PER_SHARD`` and at least ``_MIN_SHARD`` (below that, drawing
    the noise of a shard's keys in lockstep pays less than the Python call costs)."""
    return min(KEYS_PER_SHARD, max(_MIN_SHARD, -(-keys // (2 * max(1, cores)))))


def _shards(keys: Sequence[str], keys_per_shard: int) -> list[list[str]]:
    """The key list cut into shards of ``keys_per_shard`` consecutive keys (the last one shorter)."""
    keys_per_shard = check_size(keys_per_shard, name="keys_per_shard")
    return [list(keys[start : start + keys_per_shard]) for start in range(0, len(keys), keys_per_shard)]


def _key_table(spark, keys: Sequence[str], keys_per_shard: int):
    """The public keys as a DataFrame (key, position in the list, shard = position // keys_per_shard),
    sent to the JVM as one Arrow table (no Python object per key on the way)."""
    import pandas as pd

    position = np.arange(len(keys), dtype=np.int64)
    frame = pd.DataFrame({"key": pd.Series(list(keys), dtype=object), "position": position, "shard": position // keys_per_shard})
    setting = "spark.sql.execution.arrow.pyspark.enabled"
    before = spark.conf.get(setting, "false")
    spark.conf.set(setting, "true")
    try:
        return spark.createDataFrame(frame, "key string, position long, shard long")
    finally:
        spark.conf.set(setting, before)


def _bound_user(frame, *, max_keys: int | None, max_per_key: int | None, max_value: int, per_step: bool = False):
    """One user's kept events: admitted in the order (step, key, value), as the local engine does
    (a key is known to the bounds by its position in the list). ``per_step`` (the unit
    "user-step"): ``PerStepBounder``, the user's first K keys within each step (K = 1 by default,
    for one key), each clipped to m; else ``ContributionBounder`` (the unit "user")."""
    import pandas as pd

    if per_step:
        bounder: ContributionBounder = PerStepBounder(int(max_keys or 1), 1, max_value)
    else:
        bounder = ContributionBounder(int(max_keys or 0), int(max_per_key or 0), max_value)
    rows = []
    ordered = frame.sort_values(["step", "key", "value"], kind="stable")
    columns = (ordered[name] for name in ("user", "key", "step", "value", "position", "shard"))
    for user, key, step, value, position, shard in zip(*columns, strict=True):
        kept = bounder.admit(None if user is None else str(user), int(position), int(step), int(value))
        if kept:
            rows.append((key, int(step), kept, int(position), int(shard)))
    names = ["key", "step", "value", "position", "shard"]
    return pd.DataFrame(rows, columns=names).astype({name: "int64" for name in names[1:]})


def _shard_release(frame, *, through: int, settings: dict):
    """One shard's group (its keys' rows, step 0, and its events) released at steps 1 … through:
    (the shard's keys in list order, counts, std, lower, upper), every key in one vectorised pass
    (``KeyedCounters.release_steps``: the noise of all of them drawn in lockstep, each key's noise
    page drawn once). A worker keeps nothing after the call: a batch shard is released once."""
    key_rows = frame[frame["step"] == 0].sort_values("position")
    shard_keys = key_rows["key"].tolist()
    counters = _shard_counters(shard_keys, settings, keep=False)
    events = frame[frame["step"] >= 1]
    increments = np.zeros((len(shard_keys), through), dtype=np.int64)
    rows = np.searchsorted(key_rows["position"].to_numpy(dtype=np.int64), events["position"].to_numpy(dtype=np.int64))
    np.add.at(increments, (rows, events["step"].to_numpy(dtype=np.int64) - 1), events["value"].to_numpy(dtype=np.int64))
    totals = np.zeros(len(shard_keys), dtype=np.int64)
    return (counters, *counters.release_steps(increments, start=0, totals=totals, beta=settings["beta"]))


def _release_shard(frame, *, through: int, settings: dict, calendar: Calendar | None = None):
    """One shard's rows (key, step, [date,] count, std, lower, upper) at steps 1 … through (``_shard_release``)."""
    counters, counts, std, lower, upper = _shard_release(frame, through=through, settings=settings)
    return _rows_frame(counters.keys, counts, std, lower, upper, start=0, calendar=calendar)


def _shard_frame(
    counters: KeyedCounters,
    increments: np.ndarray,
    *,
    totals: np.ndarray,
    start: int,
    settings: dict,
    calendar: Calendar | None = None,
):
    """The rows (key, step, [date,] count, std, lower, upper) of ``KeyedCounters.release_steps``:
    the steps start + 1 … start + s of every key of ``counters``."""
    counts, std, lower, upper = counters.release_steps(increments, start=start, totals=totals, beta=settings["beta"])
    return _rows_frame(counters.keys, counts, std, lower, upper, start=start, calendar=calendar)


def _rows_frame(
    keys: Sequence[str],
    counts: np.ndarray,
    std: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    start: int,
    calendar: Calendar | None = None,
):
    """Released arrays (keys, steps) as rows (key, step, [date,] count, std, lower, upper), key by
    key (``keyed_io.release_columns``)."""
    import pandas as pd

    columns = release_columns(
        keys=keys, counts=counts, std=std, lower=lower, upper=upper, first=start, calendar=calendar, by="key"
    )
    return pd.DataFrame(columns)


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
    spec: CountSpec | None = None,
    key_column: str | None = "key",
    step_column: str = "step",
    value_column: str | None = None,
    user_column: str | None = None,
    query: str | None = None,
    keys_per_shard: int = KEYS_PER_SHARD,
    **options: Any,
) -> Any:
    """Keyed releases from a streaming DataFrame (Spark Structured Streaming), per event, step,
    user-step or user, to be written with a checkpoint location
    (``writeStream…option("checkpointLocation", …)``).

    **A public schedule.** Which steps a micro-batch releases is decided by ``clock``, a streaming
    DataFrame of steps (``file_clock``, ``rate_clock``) that must not depend on the data: each
    micro-batch releases, for every public key, every step up to the largest clock step it reads
    (capped at the horizon; without one, ``horizon=None``, the counters are anytime:
    ``mechanisms.anytime``). Events never decide it: an event of a step the clock has not closed
    waits in the state until it does; events of unlisted keys or beyond the horizon are dropped
    unseen. An event of a step already released is counted at the next step released (event
    level) or dropped (the other units), so every kept event changes one key's input at one step.
    Invalid events of listed keys follow ``invalid`` ("zero": dropped, "clamp": value clamped to
    [0, m], "stop": the query stops, which is not private).

    The keys are released by shards of ``keys_per_shard`` (``_release_stream``); the noise of
    (key, step) is a pure function of the generator and the key, so a micro-batch replayed after
    a crash releases exactly what it released before; with a replayable source and an idempotent
    sink (Spark's file sink) no step is released twice or missed. The key list and the shard
    numbers are cached in the session (``DataFrame.cache``, a few MiB per 10⁵ keys), so that a
    micro-batch's broadcast of them reads memory instead of converting the list again.

    ``generator`` must be the same at every restart of the query: a key file
    (``NoiseGenerator.from_key_file``), bound in the lineage registry to this query (``query``,
    default the stream's name; give the checkpoint location) so that no other query can use it.
    The query's publication is claimed in the ledger here; each shard's released steps are
    checked against it on the executor before its rows are emitted, and the checkpoint's state
    holds the noise key's tag: a checkpoint deleted and run again on corrected data, or
    restarted with another key file, is refused (docs/privacy.md, "Spark streaming").

    As on Spark batch (``private_running_counts``): ``key_column=None`` counts one stream (one
    key); with ``start`` (and ``step_size``) the events' step column holds dates, bucketed by
    the public ``Calendar`` with the local engine's rules (``_calendar_steps``), and the rows
    get a ``date`` column. The clock still gives steps (``file_clock``; ``rate_clock`` with the
    calendar's start and step). The unit "step" (one stream) clips each step's total to m when
    the step is released; an event of a step already released is dropped, as at user level.
    User level (``privacy_unit="user"``, ``user_column``, ``max_keys`` K, ``max_per_key`` C) and
    "user-step" (K keys per user within a step): each user's contributions are bounded first, in
    the state store (``_bounded_users``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    if spec is None:
        options.setdefault("invalid", "zero")  # a stream cannot refuse a file before it starts
    spec = keyed_spec(spec, options, route="spark-stream")
    assert spec.keys is not None and spec.privacy_unit is not None
    keys, generator, privacy_unit, invalid = list(spec.keys), spec.publication.noise_generator(), spec.privacy_unit, spec.invalid
    horizon, max_value = spec.horizon, spec.max_value
    # a simultaneous band holds over the horizon's steps of every key (the clock decides when each is released)
    beta = spec.step_beta(intervals=None if horizon is None else len(keys) * horizon)
    if not isinstance(generator, NoiseGenerator):
        raise InvalidInputError(
            "a streaming query needs a generator that survives restarts: "
            "generator=NoiseGenerator.from_key_file(path), one key file per query, kept beside its checkpoint"
        )
    columns = {"key_column": key_column, "step_column": step_column, "value_column": value_column, "user_column": user_column}
    _check_columns(events, columns)
    _check_single(key_column, keys, flags=API_NAMES)
    _check_stream(clock, privacy_unit=privacy_unit, user_column=user_column, invalid=invalid)
    calendar = spec.calendar
    settings = _run_settings(
        keys=keys, generator=generator, lineage=_query_lineage(generator, query), beta=beta, **mechanism_options(spec)
    )
    settings["invalid"] = invalid
    if not generator.seeded:  # the publication, claimed once at query start; the executors record each shard's steps
        from pure_dp_mf.engines.ledger import ledger_url

        keys_per_shard = check_size(keys_per_shard, name="keys_per_shard")
        _claim(generator, settings=settings, keys=keys, route="spark stream", keys_per_shard=keys_per_shard)
        settings["ledger"] = ledger_url()
    spark = events.sparkSession
    shards = _shards(keys, keys_per_shard)
    _check_state_partitions(spark, len(shards))
    key_table = _key_table(spark, keys, keys_per_shard).cache()
    table = _scheduled(events, key_table, **columns, through=horizon, calendar=calendar, only_key=keys[0])
    table = _stream_policy(table, invalid=invalid, max_value=max_value)
    shard_table = spark.createDataFrame([(shard,) for shard in range(len(shards))], "shard long").cache()
    ticks = clock.select(F.col("step").cast("long").alias("step")).crossJoin(F.broadcast(shard_table))
    if privacy_unit in USER_UNITS:  # the bounded events (key, step, value) get their shard again
        table = _bounded_users(table, settings=settings, keys=keys).join(
            F.broadcast(key_table.select("key", "shard")), on="key", how="inner"
        )
    rows = table.select("key", "step", "value", F.lit(False).alias("tick"), "shard")
    ticks = ticks.select(
        F.lit(None).cast("string").alias("key"), "step", F.lit(0).cast("long").alias("value"), F.lit(True).alias("tick"), "shard"
    )
    released = (
        rows.unionByName(ticks)
        .groupBy("shard")
        .applyInPandasWithState(
            lambda shard, frames, state: _release_stream(
                shard, frames, state, shards=shards, settings=settings, calendar=calendar
            ),
            release_schema(calendar),
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.NoTimeout,
        )
    )
    return _marked(released, settings)


def _check_state_partitions(spark, shards: int) -> None:
    """A warning (``warnings`` and the driver's log) when the stream's state store would have more
    partitions than the query has shards: its number is ``spark.sql.shuffle.partitions`` when the
    query first starts (Spark's default 200; the checkpoint keeps it), and every micro-batch runs
    one stateful task per partition, shard or none. Measured at 10⁴ keys (10 shards) on 2 cores:
    a median micro-batch of 2.1 s with 10 partitions, 2.8 s with 2 and 33.5 s with 200
    (docs/streaming.md)."""
    try:
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
    except (TypeError, ValueError):
        return
    if partitions > shards:
        message = (
            f"spark.sql.shuffle.partitions is {partitions}, more than this query's {shards} shard(s): every micro-batch runs "
            f"{partitions} stateful tasks, at least {partitions - shards} of them with no shard; set it to {shards} (one "
            "partition a shard) or fewer before the query first starts"
        )
        warnings.warn(message, stacklevel=3)
        LOG.warning(message)


def _check_stream(clock, *, privacy_unit: str, user_column: str | None, invalid: str) -> None:
    """A stream's options: the unit and its user column, a clock with a step column, a stream policy."""
    check_user_column(privacy_unit, user_column)
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
    at a step before its last kept step for that key is dropped. For "user-step" the state is
    the user's bounds within the user's latest step (``PerStepBounder``), and an event of the
    user at an earlier step is dropped: those steps' bounds are no longer held."""
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
        admitted in the order (step, key, value), the local engine's order; the kept events out.
        "user-step": a ``PerStepBounder``, its record that of the user's latest step, kept with
        that step; an event before it is dropped (a bound once left is never opened again)."""

        def __init__(self, *, settings: dict, keys: Sequence[str]) -> None:
            self.settings = settings
            self.index = {key: i for i, key in enumerate(keys)}

        def init(self, handle) -> None:
            from pyspark.sql.types import StringType, StructField, StructType

            self.admitted = handle.getValueState("admitted", StructType([StructField("admitted", StringType())]))

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd

            max_value = self.settings["max_value"]
            per_step = self.settings["privacy_unit"] == "user-step"
            if per_step:
                bounder: ContributionBounder = PerStepBounder(int(self.settings["max_keys"] or 1), 1, max_value)
            else:
                bounder = ContributionBounder(int(self.settings["max_keys"]), int(self.settings["max_per_key"]), max_value)
            user = None if key[0] is None else str(key[0])
            if self.admitted.exists():
                record = json.loads(self.admitted.get()[0])
                if per_step:  # {"step": the user's latest step, "keys": its bounds}
                    bounder._step, record = record["step"], record["keys"]  # type: ignore[attr-defined]
                bounder.restore_user(user, record)
            data = pd.concat(list(rows)).sort_values(["step", "key", "value"], kind="stable")
            values = data["value"].to_numpy(dtype=np.int64)
            if len(values) and (values.min() < 0 or values.max() > max_value):
                raise InvalidInputError(f"a value is outside [0, {max_value}]")
            kept_rows = []
            for event_key, step, value in zip(data["key"], data["step"], values.tolist(), strict=True):
                if per_step and bounder._step is not None and int(step) < bounder._step:  # type: ignore[attr-defined]
                    continue  # a step whose bounds were left: dropped, never bounded afresh
                kept = bounder.admit(user, self.index[event_key], int(step), int(value))
                if kept:
                    kept_rows.append((event_key, int(step), kept))
            record = bounder.user_record(user)
            if per_step:
                record = {"step": bounder._step, "keys": record}  # type: ignore[attr-defined]
            self.admitted.update((json.dumps(record),))
            yield pd.DataFrame(kept_rows, columns=["key", "step", "value"]).astype({"step": "int64", "value": "int64"})

        def close(self) -> None:
            pass

    return UserBounds


def _user_bounds(*, settings: dict, keys: Sequence[str]):
    """A ``StatefulProcessor`` bounding each user's contributions (``_user_bounds_processor``)."""
    return _user_bounds_processor()(settings=settings, keys=keys)


@functools.cache
def _quiet_pyspark_concatenation() -> None:
    """Once per Python worker: PySpark's own serializer of ``_release_stream``'s output
    concatenates frames with empty ones (pyspark/worker.py), which pandas ≥ 2.1 warns about at
    every micro-batch; that warning (and only it) is silenced in the worker, never in the driver."""
    warnings.filterwarnings("ignore", message="The behavior of DataFrame concatenation with empty", category=FutureWarning)


def _release_stream(
    shard: tuple, frames, state, *, shards: Sequence[Sequence[str]], settings: dict, calendar: Calendar | None = None
):
    """One shard in one micro-batch: release its keys' steps up to the clock (the largest tick of
    the batch, capped at the horizon). The keys are cut into shards of ``keys_per_shard``
    consecutive keys of the list; the clock's rows are cross-joined with the shards so that every
    shard is invoked at every tick, and ``groupBy(shard).applyInPandasWithState`` releases a
    shard's keys here in one vectorised pass. The state is (digest of the shard's keys: a query
    restarted with another key list or shard size is refused; steps released; running totals;
    late inputs; inputs of steps ahead of the clock as {step: per-key list}). With the unit
    "step" each released step's input is clipped to m here, its whole input being known once
    the clock closes it; late events are dropped. ``calendar``: the rows get the date of their step."""
    import pandas as pd

    from pure_dp_mf.engines.registry import generator_tag

    _quiet_pyspark_concatenation()
    shard_keys = shards[int(shard[0])]
    counters = _shard_counters(shard_keys, settings)
    digest = f"{counters._keys_sha256}:{generator_tag(counters.generator.key)}"  # the shard's keys and the query's noise key
    if state.exists:
        keys_sha256, released, totals, pending, ahead = state.get
        if keys_sha256.split(":")[0] != counters._keys_sha256:
            raise InvalidInputError("the key list or keys_per_shard differs from the one this checkpoint was started with")
        if keys_sha256 != digest:
            raise InvalidInputError(
                "this checkpoint was started with another noise key (key file): its released steps would be released "
                "again under other noise; restart it with its own key file, or start a new query (a new checkpoint, "
                "a new key file) as a new publication"
            )
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
        if settings["privacy_unit"] == "step":  # min(min(a, m) + b, m) = min(a + b, m): the same clip, never overflowing
            np.minimum(entry, max_value, out=entry)
    if clock <= released:
        state.update(_stream_state(digest, released, totals, pending, ahead))
        return
    increments = np.zeros((len(shard_keys), clock - released), dtype=np.int64)
    for step in [step for step in ahead if step <= clock]:
        increments[:, step - released - 1] += ahead.pop(step)
    increments[:, 0] += pending
    if settings["privacy_unit"] == "step":  # a step's whole input, one unit: its total clipped to m (``PerStepBounder``)
        increments = np.minimum(increments, max_value)
    _check_stream_steps(counters, increments, shard=int(shard[0]), start=released, settings=settings)
    frame = _shard_frame(counters, increments, totals=totals, start=released, settings=settings, calendar=calendar)
    state.update(_stream_state(digest, clock, totals + increments.sum(axis=1), np.zeros(len(shard_keys), dtype=np.int64), ahead))
    yield frame


def _check_stream_steps(counters: KeyedCounters, increments: np.ndarray, *, shard: int, start: int, settings: dict) -> None:
    """On an executor, before a shard's steps start + 1, … are drawn and emitted: the digest of
    the shard's keys' inputs at each step (``ledger.keyed_step_digest`` with the shard as its
    part) checked against the ledger and inserted when new (``Ledger.record``). The same input
    (a micro-batch replayed after a crash, or a query run again from scratch on the same data,
    batched alike) passes; another input for a step this shard has released under the query's
    key (a checkpoint deleted and the query run again on corrected data) is refused, and the
    query stops before the shard's rows are emitted. Seeded queries are not recorded."""
    if settings.get("ledger") is None:
        return
    from pure_dp_mf.engines.ledger import keyed_step_digest, open_ledger

    key = counters.generator.key
    digests = [
        keyed_step_digest(key, step=start + i, keys=counters.keys, values=increments[:, i], part=shard)
        for i in range(increments.shape[1])
    ]
    open_ledger(settings["ledger"]).record(settings["publication"], first=start, digests=digests, part=shard)


def _stream_state(digest: str, released: int, totals: np.ndarray, pending: np.ndarray, ahead: dict) -> tuple:
    return (
        digest,
        int(released),
        json.dumps(totals.tolist()),
        json.dumps(pending.tolist()),
        json.dumps({str(step): values.tolist() for step, values in sorted(ahead.items())}),
    )


def mechanism_options(spec: CountSpec) -> dict[str, Any]:
    """The options of ``spec`` every executor builds a key's counter from (``_run_settings``)."""
    return {
        "epsilon": spec.epsilon,
        "horizon": spec.horizon,
        "base": None if spec.base is None else str(spec.base),
        "metric": spec.metric,
        "max_value": spec.max_value,
        "privacy_unit": spec.privacy_unit,
        "max_keys": spec.max_keys,
        "max_per_key": spec.max_per_key,
    }


def _run_settings(
    *, generator: NoiseGenerator, beta: float, lineage: str | None = None, keys: Sequence[str] = ("template",), **mechanism
) -> dict:
    """The picklable settings every executor rebuilds a key's counter from: the driver's
    ``KeyedCounters`` checks them once and fixes the base file and the run's lineage (every
    key's counter shares the run's generator and lineage: a fresh one per run, or the lineage
    of the query's key file, ``_query_lineage``). It is made with the first two keys, so that
    the checks that count keys (the unit "step" is for one stream, "user-step" with several keys
    needs K) refuse on the driver, with the local engine's words, before any executor runs."""
    if generator.seeded:
        _warn_seeded()
    template = KeyedCounters(keys=list(keys[:2]), generator=generator, _lineage=lineage, **mechanism)
    return {
        **mechanism,
        "base": template.base_file,
        "generator": generator.to_record(),
        "beta": beta,
        "lineage": template.lineage,
        "seeded": generator.seeded,
    }


_SHARD_COUNTERS: OrderedDict[tuple[str, tuple[str, ...]], KeyedCounters] = OrderedDict()
CACHED_KEYS = 1 << 17
"""Keys whose counters (with their drawn noise pages) a Python worker keeps between micro-batches,
at most; ``PURE_DP_MF_SPARK_CACHED_KEYS`` on the executors sets another number. A key holds a
page of 2^10 int64 draws (8 KiB) for each level in use and one ahead, so a one-level mechanism
(horizons up to a few hundred) keeps at most about 1 GiB a worker by default."""


def _cached_keys() -> int:
    setting = os.environ.get("PURE_DP_MF_SPARK_CACHED_KEYS")
    try:
        return CACHED_KEYS if setting is None else max(0, int(setting))
    except ValueError:
        raise InvalidInputError(f"PURE_DP_MF_SPARK_CACHED_KEYS={setting!r} is not a whole number") from None


def _shard_counters(shard_keys: Sequence[str], settings: dict, *, keep: bool = True) -> KeyedCounters:
    """The counters of one shard's keys on an executor, from the run's settings. The Python worker
    keeps the most recently used shards, up to ``CACHED_KEYS`` keys in all (every shard of a
    query of up to 131 072 keys), with their drawn noise pages, so the next micro-batch of a
    shard reuses them instead of drawing its pages again. Kept or rebuilt, a key's noise at a step
    is the same pure function of (generator, key, step): caching changes no value and draws no
    noise twice for different data. ``keep=False`` (batch: a shard is released once) builds the
    counters without keeping them."""
    if not keep:
        return KeyedCounters(
            keys=shard_keys,
            generator=NoiseGenerator.from_record(settings["generator"]),
            _lineage=settings["lineage"],
            **_mechanism_settings(settings),
        )
    run = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    tag = (run, tuple(shard_keys))
    counters = _SHARD_COUNTERS.get(tag)
    if counters is None:
        counters = KeyedCounters(
            keys=shard_keys,
            generator=NoiseGenerator.from_record(settings["generator"]),
            _lineage=settings["lineage"],
            **_mechanism_settings(settings),
        )
        _SHARD_COUNTERS[tag] = counters
        budget = _cached_keys()
        while len(_SHARD_COUNTERS) > 1 and sum(len(cached.keys) for cached in _SHARD_COUNTERS.values()) > budget:
            _SHARD_COUNTERS.popitem(last=False)
    _SHARD_COUNTERS.move_to_end(tag)
    return counters


def _mechanism_settings(settings: dict) -> dict:
    """The keyword arguments of ``KeyedCounters`` among the run's settings."""
    excluded = ("generator", "beta", "lineage", "invalid", "seeded", "publication", "ledger")
    return {name: value for name, value in settings.items() if name not in excluded}


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


MEMORY_SETTING = "PURE_DP_MF_SPARK_MEMORY"
SHARD_SETTING = "PURE_DP_MF_SPARK_KEYS_PER_SHARD"
LOG_SETTING = "PURE_DP_MF_SPARK_LOG_LEVEL"
_MEMORY = re.compile(r"^[1-9][0-9]*[kmgt]?$")


def session_memory() -> str:
    """The heap of the Spark driver's JVM (``spark.driver.memory``; in local mode the executors
    run inside it): ``PURE_DP_MF_SPARK_MEMORY`` (e.g. "6g"), by default an eighth of this
    machine's physical memory, at least 1 GiB and at most 4 GiB. The Python workers live outside
    that heap: what bounds them is the shard size (``PURE_DP_MF_SPARK_KEYS_PER_SHARD``)."""
    setting = os.environ.get(MEMORY_SETTING)
    if setting:
        if not _MEMORY.match(setting.strip().lower()):
            raise InvalidInputError(f"{MEMORY_SETTING}={setting!r} is not a JVM memory size such as 4g or 2048m")
        return setting.strip().lower()
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{min(4096, max(1024, physical // 8 // 2**20))}m"


def cli_shard_size(*, keys: int, cores: int) -> int:
    """Keys one Python call releases in ``count --engine spark``: ``PURE_DP_MF_SPARK_KEYS_PER_SHARD``,
    else ``batch_shard_size``. A worker holds one shard's counters and rows at a time, about
    (24 KiB + 50 bytes × steps) a key, so this bounds each Python worker's memory."""
    setting = os.environ.get(SHARD_SETTING)
    if setting is None:
        return batch_shard_size(keys=keys, cores=cores)
    if not setting.strip().isascii() or not setting.strip().isdigit() or int(setting) < 1:
        raise InvalidInputError(f"{SHARD_SETTING}={setting!r} is not a positive whole number")
    return int(setting)


def local_session(app_name: str = "pure-dp-mf"):
    """A SparkSession on ``PURE_DP_MF_SPARK_MASTER`` (default local[2]) whose Python workers run
    this interpreter: ``PYSPARK_PYTHON`` (and ``PYSPARK_DRIVER_PYTHON``) set to ``sys.executable``
    when unset, so that the workers import this package; the driver's heap from
    ``session_memory``; no web UI, no progress bars, and Spark's own log at
    ``PURE_DP_MF_SPARK_LOG_LEVEL`` (default OFF: a failure is one ``error:`` line, ``spark_error``).
    The JVM exits at its first ``OutOfMemoryError`` (``-XX:+ExitOnOutOfMemoryError``): a heap
    exhausted in one of Spark's own threads (the scheduler's event loop, a broadcast) would
    otherwise leave the job waiting forever; so ended, the job fails with one line naming
    ``PURE_DP_MF_SPARK_MEMORY`` (``spark_error``). A missing PySpark, a missing Java, a JVM that
    fails to start and a heap below Spark's minimum are each one ``InvalidInputError`` line."""
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
    level = os.environ.get(LOG_SETTING, "OFF").upper()
    if level not in ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN"):
        raise InvalidInputError(f"{LOG_SETTING}={level!r} is not a log level (OFF, ERROR, WARN, INFO, …)")
    builder = (
        SparkSession.builder.master(os.environ.get("PURE_DP_MF_SPARK_MASTER", "local[2]"))
        .appName(app_name)
        .config("spark.driver.memory", session_memory())
        .config("spark.driver.extraJavaOptions", "-XX:+ExitOnOutOfMemoryError")
        .config("spark.log.level", level)  # from the context's start (setLogLevel below: a session made before)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    try:
        session = builder.getOrCreate()
    except PySparkRuntimeError as error:  # JAVA_GATEWAY_EXITED: the JVM did not start
        if not str(error.getCondition() or "").startswith("JAVA_GATEWAY"):
            raise
        raise InvalidInputError(
            f"Spark needs Java 17: the JVM did not start ({_one_line(error)}); check that java -version says 17 or later, "
            f"or {JAVA_INSTALL}"
        ) from None
    except _spark_failures() as error:  # the JVM started, the SparkContext did not
        raise spark_error(error) from None
    session.sparkContext.setLogLevel(level)
    return session


def _one_line(error: BaseException) -> str:
    """An exception's message on one line, at most 200 characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."


class SparkJobError(PureDPMFError):
    """A Spark job that failed for want of resources or in Spark itself (not bad input): exit 1."""

    exit_code = 1


def spark_error(error: BaseException, *, keys_per_shard: int | None = None) -> PureDPMFError:
    """A failed Spark job as one line that names the setting to change. The message names the
    failure's kind only (a Java error class, Spark's error condition), never the text Spark
    attached to it, which can quote the data (a value that did not cast)."""
    text = str(error)
    shard = f" (now {keys_per_shard})" if keys_per_shard is not None else ""
    if "INVALID_DRIVER_MEMORY" in text or "Insufficient driver memory" in text:
        return InvalidInputError(
            f"{MEMORY_SETTING}={session_memory()} is below the heap Spark needs to start (about 450 MiB): "
            f"raise {MEMORY_SETTING} (e.g. 1g)"
        )
    if "OutOfMemoryError" in text or "GC overhead limit exceeded" in text:
        kind = "GC overhead limit exceeded" if "GC overhead" in text else "java.lang.OutOfMemoryError"
        return SparkJobError(
            f"Spark ran out of Java heap ({kind}): raise {MEMORY_SETTING} (the driver's heap, which holds the executors "
            f"in local mode; now {session_memory()}; on a cluster, spark.executor.memory) or lower {SHARD_SETTING}{shard}"
        )
    invalid = re.search(r"InvalidInputError: ([^\n]*)", text)
    if invalid:  # our own refusal, raised on an executor
        return InvalidInputError(invalid.group(1).strip())
    if re.search(r"\bMemoryError\b|Python worker exited unexpectedly|worker.*(crashed|killed)", text):
        return SparkJobError(
            f"a Spark Python worker ran out of memory or was killed: lower {SHARD_SETTING}{shard}, the keys one worker "
            "releases at once, or give the workers more memory"
        )
    if type(error).__name__ in ("Py4JNetworkError", "ConnectionRefusedError", "ConnectionResetError", "EOFError"):
        return SparkJobError(
            f"the Spark JVM stopped during the job (most often out of memory): raise {MEMORY_SETTING} (now {session_memory()})"
        )
    condition = getattr(error, "getCondition", lambda: None)() if hasattr(error, "getCondition") else None
    java = re.search(r"\b((?:java|org\.apache\.spark|scala)\.[\w.$]*(?:Exception|Error))\b", text)
    kind = condition or (java.group(1) if java else type(error).__name__)
    return SparkJobError(f"the Spark job failed ({kind}); {LOG_SETTING}=WARN shows Spark's own log")


def _spark_failures() -> tuple[type[BaseException], ...]:
    """The exception types a Spark job raises on the driver (the JVM's, the gateway's, PySpark's)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (Py4JError, PySparkException, ConnectionError, EOFError)


def count_file_on_spark(
    *,
    spec: CountSpec,
    input_file,
    columns: dict,
    output,
    output_format: str,
    beta: float,
    through: int,
) -> None:
    """``count --engine spark``: the releases of a CSV file's events, written by the executors
    and never held by the driver, in the local engine's layout (``keyed_io.Layout``): without
    ``--key-column`` (``columns["key_column"]`` None) one stream of the one key in ``keys``,
    its key not shown; with ``calendar`` (``--start``, ``--step-size``) dates in the step
    column and a ``date`` column in the output. Each executor's Python worker releases a shard
    of keys and writes the shard's rows itself (``_write_shard``) into a folder beside ``--output``; then

    * csv and jsonl: the driver streams the shards' files into ``--output`` (or standard
      output) step by step, in step order, keys in list order, as the local engine writes them
      (csv: the column names first, the metadata in ``OUT.meta.json``; jsonl: a header record
      first), reading one shard's block of one step at a time (``_merge_shards``);
    * parquet: ``--output`` is a folder of one Parquet file per shard (``part-SSSSSS.parquet``,
      rows in step order, then key order; the metadata in each file's schema), renamed into place
      once every shard is written.

    An existing non-empty ``--output`` is refused before Spark starts (as the local engine
    refuses it); nothing is created at ``--output`` unless the job succeeds. A Spark failure is
    one ``error:`` line naming the setting to change (``spark_error``). The run's publication is
    claimed and every step's input checked in the ledger before any shard is released, as in
    ``private_running_counts`` (``_shard_groups``): with ``--key-file`` a run again on the same
    input writes the same bytes, on changed input it is refused and nothing is written."""
    import shutil
    import tempfile
    from pathlib import Path

    if input_file is None:
        raise InvalidInputError("--engine spark reads the events from a file: give the input file")
    if output_format not in ("csv", "jsonl", "parquet"):
        raise InvalidInputError(f"--format for keyed counts must be csv, jsonl or parquet, got {output_format!r}")
    output = None if output is None else Path(output)
    _check_output(output, output_format)
    assert spec.keys is not None
    keys, calendar, invalid = list(spec.keys), spec.calendar, spec.invalid
    generator = spec.publication.noise_generator() or NoiseGenerator.secure()
    template = KeyedCounters(  # two keys: the unit's checks that count keys refuse here, before Spark starts
        keys=keys[:2],
        generator=NoiseGenerator.from_seed(0) if generator.seeded else NoiseGenerator.secure(),
        **mechanism_options(spec),
    )
    summary = {**template.summary(), "keys": len(keys), "beta": beta, "through": through, "engine": "spark", "invalid": invalid}
    summary["seeded"] = generator.seeded
    show_keys = columns.get("key_column") is not None
    if calendar is not None:
        summary["calendar"] = calendar.record()
    if not show_keys:  # one stream: no key in the output, nor a count of keys in its metadata (as the local engine)
        summary.pop("keys")
    session = local_session("pure-dp-mf count")
    keys_per_shard = cli_shard_size(keys=len(keys), cores=int(session.sparkContext.defaultParallelism))
    parts = Path(tempfile.mkdtemp(prefix=".pure-dp-mf-spark-", dir=None if output is None else output.parent))
    try:
        try:
            frame = session.read.csv(str(input_file), header=True)
            grouped, settings, through = _shard_groups(
                frame,
                spec=spec,
                generator=generator,
                beta=beta,
                through=through,
                keys_per_shard=keys_per_shard,
                flags=CLI_FLAGS,
                **columns,
            )
            folder = str(parts)
            written = grouped.applyInPandas(
                lambda group: _write_shard(
                    group,
                    through=through,
                    settings=settings,
                    folder=folder,
                    output_format=output_format,
                    summary=summary,
                    show_keys=show_keys,
                    calendar=calendar,
                ),
                "shard long, rows long",
            )
            shards = written.count()
        except _spark_failures() as error:
            raise spark_error(error, keys_per_shard=keys_per_shard) from None
        expected = -(-len(keys) // keys_per_shard)
        if shards != expected:
            raise SparkJobError(f"the Spark job wrote {shards} of {expected} shards")
        if output_format == "parquet":
            assert output is not None
            for leftover in parts.glob(".*.tmp"):
                leftover.unlink()
            if output.is_dir():
                output.rmdir()  # checked empty above
            os.replace(parts, output)
            return
        header = Layout(keys=[], show_keys=show_keys, calendar=calendar).columns
        _merge_shards(
            parts, shards=shards, steps=through, output=output, output_format=output_format, summary=summary, columns=header
        )
    finally:
        shutil.rmtree(parts, ignore_errors=True)


def _check_output(output, output_format: str) -> None:
    """``--output`` as the local engine checks it, before Spark starts: not an existing non-empty
    file or folder (a rerun never overwrites), in a folder that exists; parquet needs one."""
    if output is None:
        if output_format == "parquet":
            raise InvalidInputError("--format parquet needs --output (with --engine spark, a folder of one file per shard)")
        return
    if output.is_dir() and output_format != "parquet":
        raise InvalidInputError(f"--output {output} is a folder, not a file")
    if output.exists() and output_format == "parquet" and not output.is_dir():
        raise InvalidInputError(f"--output {output}: with --engine spark and --format parquet the output is a folder")
    if (output.is_dir() and any(output.iterdir())) or (output.is_file() and output.stat().st_size > 0):
        raise InvalidInputError(f"--output {output} already exists and is not empty")
    if not output.parent.is_dir():
        raise InvalidInputError(f"--output {output}: folder {output.parent} does not exist")


SHARD_FILE = "shard-{:06d}.{}"


def _write_shard(
    frame,
    *,
    through: int,
    settings: dict,
    folder: str,
    output_format: str,
    summary: dict,
    show_keys: bool = True,
    calendar: Calendar | None = None,
):
    """On an executor: release one shard (``_shard_release``) and write its rows into ``folder``,
    each file written under a temporary name and renamed. csv/jsonl: ``shard-SSSSSS.csv`` (or
    .jsonl) holds the shard's rows step after step, each step's keys in list order, in the local
    engine's text (``keyed_io.Layout.text``, with ``show_keys`` and ``calendar`` as there), and
    ``shard-SSSSSS.index.npy`` the byte offset of every step's block; parquet:
    ``part-SSSSSS.parquet``, the same rows with the local engine's schema and metadata. Returns
    one row (shard, rows)."""
    import pandas as pd

    counters, counts, std, lower, upper = _shard_release(frame, through=through, settings=settings)
    shard = int(frame["shard"].iloc[0])
    layout = Layout(keys=counters.keys, show_keys=show_keys, calendar=calendar)
    base = os.path.join(folder, SHARD_FILE.format(shard, output_format))
    if output_format == "parquet":
        import pyarrow
        import pyarrow.parquet

        columns = release_columns(
            keys=counters.keys, counts=counts, std=std, lower=lower, upper=upper, first=0, calendar=calendar
        )
        schema = layout.schema(summary)
        table = pyarrow.Table.from_arrays(
            [pyarrow.array(columns[name], type=schema.field(name).type) for name in schema.names], schema=schema
        )
        final = os.path.join(folder, f"part-{shard:06d}.parquet")
        pyarrow.parquet.write_table(table, final + ".tmp")
        os.replace(final + ".tmp", final)
    else:
        offsets = np.zeros(through + 1, dtype=np.int64)
        with open(base + ".tmp", "wb") as sink:
            for step in range(through):
                text = layout.text(output_format, step + 1, counts[:, step], float(std[step]), lower[:, step], upper[:, step])
                data = text.encode("utf-8")
                sink.write(data)
                offsets[step + 1] = offsets[step] + len(data)
        index = os.path.join(folder, SHARD_FILE.format(shard, "index.npy"))
        with open(index + ".tmp", "wb") as handle:
            np.save(handle, offsets)
        os.replace(index + ".tmp", index)
        os.replace(base + ".tmp", base)
    return pd.DataFrame({"shard": [shard], "rows": [counts.size]})


def _merge_shards(
    folder, *, shards: int, steps: int, output, output_format: str, summary: dict, columns: Sequence[str] = COLUMNS
) -> None:
    """The shards' files streamed into ``output`` (standard output when None): the header (csv:
    ``columns``, the layout's), then
    for each step every shard's block of that step in shard order (the keys' list order). One
    block (a shard's keys at one step) is in memory at a time; each shard's file is read front
    to back once."""
    import resource
    import sys

    from pure_dp_mf.engines.io import write_sidecar
    from pure_dp_mf.engines.journal import storage_error

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < shards + 64:  # every shard's file open at once
        wanted = shards + 64 if hard == resource.RLIM_INFINITY else min(hard, shards + 64)
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    lengths = np.stack([np.diff(np.load(folder / SHARD_FILE.format(shard, "index.npy"))) for shard in range(shards)])
    if lengths.shape != (shards, steps):
        raise SparkJobError(f"the shards' files do not hold {steps} steps each")
    header = (
        ",".join(columns) + "\n"
        if output_format == "csv"
        else json.dumps({"header": summary}, ensure_ascii=False, sort_keys=True) + "\n"
    )
    handles = [open(folder / SHARD_FILE.format(shard, output_format), "rb") for shard in range(shards)]
    try:
        if output is None:
            sys.stdout.flush()
            sink = sys.stdout.buffer
        else:
            if output_format == "csv":
                write_sidecar(output, summary)
            sink = open(output, "wb")
        try:
            sink.write(header.encode("utf-8"))
            for step in range(steps):
                for handle, length in zip(handles, lengths[:, step].tolist(), strict=True):
                    sink.write(handle.read(length))
            sink.flush()
        finally:
            if output is not None:
                sink.close()
    except OSError as error:
        raise storage_error(output or "standard output", error) from None
    finally:
        for handle in handles:
            handle.close()
