"""``pure-dp-mf count --key-column …``: private running counts of many public keys.

Thin: parses, builds the keyed counters and the sink from the library (``engines.keyed``,
``engines.keyed_io``; ``engines.spark`` for ``--engine spark``), runs them, prints what runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pure_dp_mf.cli.app import error_console
from pure_dp_mf.engines.keyed import KeyedCounters, public_schedule
from pure_dp_mf.engines.keyed_io import EventReader, KeyedSink, check_events, operator_log, read_keys, run_keyed_file
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.generator import NoiseGenerator


def count_keyed(
    *,
    input_file: Path | None,
    keys_file: Path | None,
    key_column: str,
    step_column: str | None,
    column: str | None,
    user_column: str | None,
    privacy_unit: str,
    max_keys: int | None,
    max_per_key: int | None,
    max_value: int,
    epsilon: float,
    horizon: int,
    base: Path | None,
    metric: str,
    seed: int | None,
    output: Path | None,
    output_format: str,
    beta: float,
    engine: str = "local",
    state: Path | None = None,
    through: int | None = None,
    invalid: str = "refuse",
    operator_log_file: Path | None = None,
) -> None:
    """The keyed run of ``count`` (see the module docstring); every option is checked first."""
    keys = _read_public_keys(keys_file=keys_file, step_column=step_column, user_column=user_column, privacy_unit=privacy_unit)
    output_format = "csv" if output_format == "plain" else output_format
    through = public_schedule(horizon, through)
    mechanism: dict[str, Any] = {"epsilon": epsilon, "horizon": horizon, "base": base, "metric": metric, "max_value": max_value}
    bounds: dict[str, Any] = {"privacy_unit": privacy_unit, "max_keys": max_keys, "max_per_key": max_per_key}
    rng = NoiseGenerator.from_seed(seed) if seed is not None else None
    columns: dict[str, Any] = {
        "key_column": key_column,
        "step_column": step_column,
        "value_column": column,
        "user_column": user_column,
    }
    release: dict[str, Any] = {"output": output, "output_format": output_format, "beta": beta, "through": through}
    if engine == "spark":
        _count_on_spark(
            input_file=input_file, keys=keys, columns=columns, options={**mechanism, **bounds}, rng=rng, state=state, **release
        )
        return
    if engine != "local":
        raise InvalidInputError(f"--engine must be local or spark, got {engine!r}")
    policy = invalid if invalid != "refuse" or input_file is not None else "zero"
    reader = EventReader(keys=keys, **columns, through=through, max_value=max_value, policy=policy)
    check_events(input_file, reader)  # a file is checked whole: nothing is created or released before this
    counters, resumed = _open_counters(state=state, keys=keys, rng=rng, mechanism=mechanism, bounds=bounds)
    summary = {**counters.summary(), "beta": beta, "through": through, "invalid": policy}
    error_console.print(f"keyed counts: {json.dumps(summary, ensure_ascii=False)}", markup=False, highlight=False, soft_wrap=True)
    if counters.rng.seeded:
        error_console.print("warning: seeded noise (--seed): not for production, not private", markup=False)
    sink = KeyedSink(counters=counters, output=output, output_format=output_format, summary=summary, beta=beta, resumed=resumed)
    run_keyed_file(counters, source=input_file, reader=reader, sink=sink, through=through, beta=beta)
    operator_log(operator_log_file, counters=counters, reader=reader)


def _read_public_keys(
    *, keys_file: Path | None, step_column: str | None, user_column: str | None, privacy_unit: str
) -> list[str]:
    """The public keys of --keys, once the flags that name the columns are checked."""
    if keys_file is None:
        raise InvalidInputError("--key-column needs --keys FILE: the public list of keys, one per line")
    if step_column is None:
        raise InvalidInputError("--key-column needs --step-column NAME: the integer step (1 … horizon) of each event")
    if user_column is not None and privacy_unit != "user":
        raise InvalidInputError("--user-column is for --privacy-unit user")
    if privacy_unit == "user" and user_column is None:
        raise InvalidInputError("--privacy-unit user needs --user-column NAME")
    return read_keys(keys_file)


def _count_on_spark(
    *,
    input_file: Path | None,
    keys: list[str],
    columns: dict[str, Any],
    options: dict[str, Any],
    rng: NoiseGenerator | None,
    state: Path | None,
    output: Path | None,
    output_format: str,
    beta: float,
    through: int,
) -> None:
    """``--engine spark``: refuse what only the local engine does, then ``engines.spark.count_file_on_spark``."""
    if state is not None or output_format == "parquet":
        raise InvalidInputError("--state and --format parquet are for the local engine (Spark keeps its state in its checkpoint)")
    from pure_dp_mf.engines.spark import count_file_on_spark

    count_file_on_spark(
        input_file=input_file,
        keys=keys,
        columns=columns,
        options=options,
        rng=rng,
        output=output,
        output_format=output_format,
        beta=beta,
        through=through,
    )


def _open_counters(
    *, state: Path | None, keys: list[str], rng: NoiseGenerator | None, mechanism: dict[str, Any], bounds: dict[str, Any]
) -> tuple[KeyedCounters, bool]:
    """The keyed counters resumed from ``state`` when it exists, else new (saved to ``state`` when given); and whether resumed."""
    resumed = state is not None and state.exists()
    if state is not None and resumed:
        counters = KeyedCounters.resume(state, keys=keys, rng=rng, **mechanism, **bounds)
        error_console.print(f"resuming after step {counters.released} ({state})", markup=False)
    else:
        counters = KeyedCounters(keys=keys, rng=rng, **mechanism, **bounds)
        if state is not None:
            counters.save_state(state)
    return counters, resumed
