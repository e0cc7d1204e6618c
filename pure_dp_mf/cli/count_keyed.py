"""``pure-dp-mf count --key-column …``: private running counts of many public keys.

Thin: parses, builds the keyed counters and the sink from the library (``engines.keyed``,
``engines.keyed_io``; ``engines.spark`` for ``--engine spark``), runs them, prints what runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pure_dp_mf.cli.app import error_console
from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import KeyedCounters, public_schedule
from pure_dp_mf.engines.keyed_io import EventReader, KeyedSink, Layout, check_events, operator_log, read_keys, run_keyed_file
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.error_bars import simultaneous_beta

SINGLE_KEY = "count"  # the one key of a single stream given as event rows (not shown in its output)


def count_keyed(
    *,
    input_file: Path | None,
    keys_file: Path | None,
    key_column: str | None,
    step_column: str | None,
    column: str | None,
    user_column: str | None,
    privacy_unit: str | None,
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
    through: str | None = None,
    start: str | None = None,
    step_size: str | None = None,
    invalid: str = "refuse",
    budget: str | None = None,
    operator_log_file: Path | None = None,
    simultaneous: bool = False,
    key_file: Path | None = None,
) -> None:
    """The event-row run of ``count`` (see the module docstring); every option is checked first.
    Without --key-column the rows are one stream (one key, not shown); the unit defaults to event."""
    single = key_column is None
    privacy_unit = privacy_unit or "event"  # event rows: one row is one event unless told otherwise
    _check_unit_flags(step_column=step_column, user_column=user_column, privacy_unit=privacy_unit)
    keys = [SINGLE_KEY] if single else _read_public_keys(keys_file)
    calendar = Calendar.of(start=start, step_size=step_size)
    output_format = "csv" if output_format == "plain" else output_format
    through_step = public_schedule(horizon, through, calendar=calendar)
    mechanism: dict[str, Any] = {"epsilon": epsilon, "horizon": horizon, "base": base, "metric": metric, "max_value": max_value}
    bounds: dict[str, Any] = {"privacy_unit": privacy_unit, "max_keys": max_keys, "max_per_key": max_per_key}
    if seed is not None and key_file is not None:
        raise InvalidInputError("--key-file and --seed: a key file holds a secure key, a seed a public one; give one of them")
    rng = NoiseGenerator.from_seed(seed) if seed is not None else _key_file_generator(key_file, state=state)
    columns: dict[str, Any] = {
        "key_column": key_column,
        "step_column": step_column,
        "value_column": column,
        "user_column": user_column,
    }
    band_beta, band = beta, {"band": "simultaneous" if simultaneous else "step", "beta_per_step": beta}
    if simultaneous:  # every key at every step of the schedule, together: the union bound over keys × steps
        band["beta_per_step"] = beta = simultaneous_beta(beta, steps=len(keys) * through_step)
    release: dict[str, Any] = {"output": output, "output_format": output_format, "beta": beta, "through": through_step}
    if engine == "spark":
        if budget is not None:
            raise InvalidInputError("--budget is for the local engine")
        if operator_log_file is not None:
            raise InvalidInputError("--operator-log is for the local engine")
        if invalid not in ("refuse", "zero", "clamp"):
            raise InvalidInputError(f"--invalid {invalid} is for the local engine; --engine spark takes refuse, zero or clamp")
        _count_on_spark(
            input_file=input_file,
            keys=keys,
            columns=columns,
            options={**mechanism, **bounds},
            rng=rng,
            state=state,
            invalid=invalid,
            calendar=calendar,
            **release,
        )
        return
    if engine != "local":
        raise InvalidInputError(f"--engine must be local or spark, got {engine!r}")
    policy = invalid if invalid != "refuse" or input_file is not None else "zero"
    reader = EventReader(keys=keys, **columns, through=through_step, max_value=max_value, policy=policy, calendar=calendar)
    check_events(input_file, reader)  # a file is checked whole: nothing is created or released before this
    counters, resumed = _open_counters(state=state, keys=keys, rng=rng, mechanism=mechanism, bounds=bounds, budget=budget)
    summary = {**counters.summary(), "beta": band_beta, "through": through_step, "invalid": policy, **band}
    if calendar is not None:
        summary["calendar"] = calendar.record()
    if single:
        summary.pop("keys")
    title = "counts of event rows" if single else "keyed counts"
    error_console.print(f"{title}: {json.dumps(summary, ensure_ascii=False)}", markup=False, highlight=False, soft_wrap=True)
    if counters.rng.seeded:
        error_console.print("warning: seeded noise (--seed): not for production, not private", markup=False)
    layout = Layout(keys=keys, show_keys=not single, calendar=calendar)
    sink = KeyedSink(
        counters=counters, output=output, output_format=output_format, summary=summary, beta=beta, resumed=resumed, layout=layout
    )
    run_keyed_file(counters, source=input_file, reader=reader, sink=sink, through=through_step, beta=beta)
    operator_log(operator_log_file, counters=counters, reader=reader)


def _key_file_generator(key_file: Path | None, *, state: Path | None) -> NoiseGenerator | None:
    """--key-file: the run's secure key from the file (``NoiseGenerator.from_key_file``, created
    when missing), serving one publication in the ledger, named after the file's absolute path."""
    if key_file is None:
        return None
    if state is not None:
        raise InvalidInputError("--key-file and --state: a state holds its own key; give one of them")
    if key_file.is_dir():
        raise InvalidInputError(f"--key-file {key_file} is a folder, not a file")
    return NoiseGenerator.from_key_file(key_file, query=str(key_file.resolve()))


def _check_unit_flags(*, step_column: str | None, user_column: str | None, privacy_unit: str) -> None:
    """The flags that name the columns, checked against the privacy unit."""
    if step_column is None:
        raise InvalidInputError("--key-column needs --step-column NAME: the step (1 … horizon) or date of each event")
    users = privacy_unit in ("user", "user-step")
    if user_column is not None and not users:
        raise InvalidInputError("--user-column is for --privacy-unit user or user-step")
    if users and user_column is None:
        raise InvalidInputError(f"--privacy-unit {privacy_unit} needs --user-column NAME")


def _read_public_keys(keys_file: Path | None) -> list[str]:
    """The public keys of --keys."""
    if keys_file is None:
        raise InvalidInputError("--key-column needs --keys FILE: the public list of keys, one per line")
    return read_keys(keys_file)


def _count_on_spark(
    *,
    input_file: Path | None,
    keys: list[str],
    columns: dict[str, Any],
    options: dict[str, Any],
    rng: NoiseGenerator | None,
    state: Path | None,
    invalid: str,
    calendar: Calendar | None,
    output: Path | None,
    output_format: str,
    beta: float,
    through: int,
) -> None:
    """``--engine spark``: refuse what only the local engine does, then ``engines.spark.count_file_on_spark``
    (which refuses an existing non-empty ``--output`` before Spark starts, as the local engine does)."""
    if state is not None:
        raise InvalidInputError(
            "--state is for the local engine: a Spark batch run releases every step in one job and keeps no state "
            "(rerun it with a new --output; Spark streaming keeps its state in its checkpoint)"
        )
    from pure_dp_mf.engines.spark import count_file_on_spark

    if rng is not None and rng.seeded:  # as the local engine says it (the output's metadata says it too)
        error_console.print("warning: seeded noise (--seed): not for production, not private", markup=False)
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
        invalid=invalid,
        calendar=calendar,
    )


def _open_counters(
    *,
    state: Path | None,
    keys: list[str],
    rng: NoiseGenerator | None,
    mechanism: dict[str, Any],
    bounds: dict[str, Any],
    budget: str | None,
) -> tuple[KeyedCounters, bool]:
    """The keyed counters resumed from ``state`` when it exists, else new (saved to ``state`` when given); and whether resumed."""
    resumed = state is not None and state.exists()
    if state is not None and resumed:
        counters = KeyedCounters.resume(state, keys=keys, rng=rng, budget=budget, **mechanism, **bounds)
        error_console.print(f"resuming after step {counters.released} ({state})", markup=False)
    else:
        counters = KeyedCounters(keys=keys, rng=rng, budget=budget, **mechanism, **bounds)
        if state is not None:
            counters.save_state(state)
    return counters, resumed
