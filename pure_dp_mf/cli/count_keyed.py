"""``pure-dp-mf count --key-column …``: private running counts of many public keys (keyed.py).

Thin: reads the events (CSV with a header line), calls ``keyed.run_keyed``, writes one row per
(key, step)."""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pure_dp_mf.cli.app import error_console
from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, check_keys, run_keyed
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.generator import NoiseGenerator

KEYED_FORMATS = ("csv", "jsonl", "parquet")


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise InvalidInputError("Parquet needs pyarrow: pip install 'pure-dp-mf[parquet]'") from None
    return pyarrow


def _parquet_rows(path: Path) -> Iterator[list[str]]:
    """The rows of a Parquet file as CSV-like string fields, the header first."""
    pyarrow = _pyarrow()
    try:
        table = pyarrow.parquet.ParquetFile(path)
    except (OSError, pyarrow.ArrowInvalid) as error:
        raise InvalidInputError(f"{path}: not a Parquet file ({error})") from None
    yield list(table.schema_arrow.names)
    for batch in table.iter_batches():
        columns = [column.to_pylist() for column in batch.columns]
        for row in zip(*columns, strict=True):
            yield ["" if value is None else str(value) for value in row]


def read_keys(path: Path) -> list[str]:
    """One key per line; a UTF-8 BOM dropped; blank lines are an error."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"--keys {path}: cannot read it ({error})") from None
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise InvalidInputError(f"--keys {path}: line {number} is blank")
    try:
        return check_keys(line.strip() for line in lines)
    except InvalidInputError as error:
        raise InvalidInputError(f"--keys {path}: {error}") from None


def _events(
    source: IO[str] | Iterator[list[str]],
    *,
    key_column: str,
    step_column: str,
    value_column: str | None,
    user_column: str | None,
) -> Iterator[KeyedEvent]:
    reader: Iterator[list[str]] = csv.reader(source) if hasattr(source, "read") else source  # type: ignore[arg-type,assignment]
    try:
        header = [name.strip().lstrip("\ufeff") for name in next(reader)]
    except StopIteration:
        raise InvalidInputError("the input is empty: a CSV header line is needed") from None
    positions = {}
    for flag, name in (
        ("--key-column", key_column),
        ("--step-column", step_column),
        ("--column", value_column),
        ("--user-column", user_column),
    ):
        if name is not None:
            if name not in header:
                raise InvalidInputError(f"{flag} {name!r}: no such column in the header ({', '.join(header)})")
            positions[flag] = header.index(name)
    for number, row in enumerate(reader, start=2):
        if not row:
            raise InvalidInputError(f"line {number}: blank")
        try:
            key = row[positions["--key-column"]].strip()
            step = int(row[positions["--step-column"]])
            value = int(row[positions["--column"]]) if "--column" in positions else 1
            user = row[positions["--user-column"]].strip() if "--user-column" in positions else None
        except IndexError:
            raise InvalidInputError(f"line {number}: {len(row)} field(s), fewer than the header's") from None
        except ValueError:
            raise InvalidInputError(f"line {number}: the step and the value must be integers") from None
        yield KeyedEvent(key=key, step=step, value=value, user=user)


def count_keyed(
    *,
    input_file: Path | None,
    keys_file: Path | None,
    key_column: str,
    step_column: str | None,
    value_column: str | None,
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
) -> None:
    if keys_file is None:
        raise InvalidInputError("--key-column needs --keys FILE: the public list of keys, one per line")
    if step_column is None:
        raise InvalidInputError("--key-column needs --step-column NAME: the integer step (1 … horizon) of each event")
    if user_column is not None and privacy_unit != "user":
        raise InvalidInputError("--user-column is for --privacy-unit user")
    if privacy_unit == "user" and user_column is None:
        raise InvalidInputError("--privacy-unit user needs --user-column NAME")
    if output_format not in KEYED_FORMATS:
        raise InvalidInputError(f"--format for keyed counts must be csv, jsonl or parquet, got {output_format!r}")
    resumed = state is not None and state.exists()
    steps_folder = output_format == "parquet" and state is not None  # one Parquet file per step
    if output is not None and not resumed:
        if output.is_dir() and not steps_folder:
            raise InvalidInputError(f"--output {output} is a folder, not a file")
        if output.is_dir() and any(output.iterdir()) or output.is_file() and output.stat().st_size > 0:
            raise InvalidInputError(f"--output {output} already exists and is not empty")
    if output_format == "parquet" and output is None:
        raise InvalidInputError("--format parquet needs --output (a file; with --state, a folder of one file per step)")
    if steps_folder and output is not None and output.exists() and not output.is_dir():
        raise InvalidInputError(
            f"--output {output}: with --format parquet and --state the output is a folder of one file per step"
        )
    if engine != "local" and (state is not None or output_format == "parquet"):
        raise InvalidInputError("--state and --format parquet are for the local engine (Spark keeps its state in its checkpoint)")
    keys = read_keys(keys_file)
    mechanism: dict[str, Any] = {
        "epsilon": epsilon,
        "horizon": horizon,
        "base": base,
        "metric": metric,
        "max_value": max_value,
        "privacy_unit": privacy_unit,
        "max_keys": max_keys,
        "max_per_key": max_per_key,
    }
    if engine == "spark":
        _count_on_spark(
            input_file=input_file,
            keys=keys,
            columns={
                "key_column": key_column,
                "step_column": step_column,
                "value_column": value_column,
                "user_column": user_column,
            },
            mechanism=mechanism,
            seed=seed,
            output=output,
            output_format=output_format,
            beta=beta,
        )
        return
    if engine != "local":
        raise InvalidInputError(f"--engine must be local or spark, got {engine!r}")
    options = {**mechanism, "rng": NoiseGenerator.from_seed(seed) if seed is not None else None}
    if resumed:
        assert state is not None
        counters = KeyedCounters.resume(state, keys=keys, **options)
        error_console.print(f"resuming after step {counters.released}", markup=False)
    else:
        counters = KeyedCounters(keys=keys, **options)
    summary = {**counters.summary(), "beta": beta}
    error_console.print(f"keyed counts: {json.dumps(summary, ensure_ascii=False)}", markup=False, highlight=False, soft_wrap=True)
    if counters.rng.seeded:
        error_console.print("warning: seeded noise (--seed): not for production, not private", markup=False)
    header = (
        "# " + json.dumps(summary, ensure_ascii=False) + "\nkey,step,count,std,lower,upper\n"
        if output_format == "csv"
        else json.dumps({"header": summary}, ensure_ascii=False) + "\n"
    )

    def rows(step: int, counts, std: float, lower, upper) -> str:
        records = zip(keys, counts.tolist(), lower.tolist(), upper.tolist(), strict=True)
        if output_format == "csv":
            return "".join(f"{_csv_field(key)},{step},{c},{std:.6g},{lo},{hi}\n" for key, c, lo, hi in records)
        return "".join(
            json.dumps({"key": key, "step": step, "count": c, "std": float(f"{std:.6g}"), "lower": lo, "upper": hi}) + "\n"
            for key, c, lo, hi in records
        )

    if steps_folder:
        assert output is not None
        if not output.parent.is_dir():
            raise InvalidInputError(f"--output {output}: cannot create the folder ({output.parent} does not exist)")
        output.mkdir(exist_ok=True)
        _check_step_files(output, counters=counters, summary=summary, beta=beta)
    if state is not None and not resumed:
        counters.save_state(state)
    if steps_folder:
        assert output is not None
        try:
            _write_parquet_steps(
                output,
                counters=counters,
                keys=keys,
                summary=summary,
                events=_open_events(input_file, key_column, step_column, value_column, user_column),
                beta=beta,
            )
        finally:
            counters.close()
        _report_dropped(counters)
        return
    if output_format == "parquet":
        assert output is not None
        _write_parquet(
            output,
            counters=counters,
            keys=keys,
            summary=summary,
            events=_open_events(input_file, key_column, step_column, value_column, user_column),
            beta=beta,
        )
        _report_dropped(counters)
        return
    source = open(input_file, encoding="utf-8", newline="") if input_file is not None else sys.stdin
    if output is not None and resumed:
        sink = _reopen_output(output, counters=counters, header=header, rows=rows, beta=beta)
    else:
        sink = open(output, "w", encoding="utf-8") if output is not None else sys.stdout
        if not resumed:
            sink.write(header)
    try:
        rows_in = _parquet_rows(input_file) if input_file is not None and input_file.suffix == ".parquet" else source
        events = _events(
            rows_in, key_column=key_column, step_column=step_column, value_column=value_column, user_column=user_column
        )
        for step, counts, std, lower, upper in run_keyed(counters, events, beta=beta):
            sink.write(rows(step, counts, std, lower, upper))
            sink.flush()
            if output is not None and state is not None:
                os.fsync(sink.fileno())
    finally:
        counters.close()
        if input_file is not None:
            source.close()
        if output is not None:
            sink.close()
    _report_dropped(counters)


def _csv_field(text: str) -> str:
    if any(character in text for character in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _count_on_spark(
    *,
    input_file: Path | None,
    keys: list[str],
    columns: dict,
    mechanism: dict,
    seed: int | None,
    output: Path | None,
    output_format: str,
    beta: float,
) -> None:
    """The same releases through ``pure_dp_mf.engines.spark`` on a SparkSession (master from
    ``PURE_DP_MF_SPARK_MASTER``, default local[2]); written in step order, keys in list order."""
    import os
    import uuid

    if input_file is None:
        raise InvalidInputError("--engine spark reads the events from a file: give the input file")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise InvalidInputError("--engine spark needs the spark extra: pip install 'pure-dp-mf[spark]'") from None
    from pure_dp_mf.engines.spark import private_running_counts

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(os.environ.get("PURE_DP_MF_SPARK_MASTER", "local[2]"))
        .appName("pure-dp-mf count")
        .getOrCreate()
    )
    generator = NoiseGenerator.from_seed(seed) if seed is not None else NoiseGenerator.secure()
    lineage = uuid.uuid4().hex
    frame = session.read.csv(str(input_file), header=True)
    released = private_running_counts(
        frame, keys=keys, generator=generator, lineage=lineage, beta=beta, **columns, **mechanism
    ).toPandas()
    order = {key: i for i, key in enumerate(keys)}
    released = released.assign(order=released["key"].map(order)).sort_values(["step", "order"])
    template = KeyedCounters(keys=keys[:1], rng=generator, lineage=lineage, **mechanism)
    summary = {**template.summary(), "keys": len(keys), "beta": beta, "engine": "spark"}
    sink = open(output, "w", encoding="utf-8") if output is not None else sys.stdout
    try:
        if output_format == "csv":
            sink.write("# " + json.dumps(summary, ensure_ascii=False) + "\nkey,step,count,std,lower,upper\n")
            for row in released.itertuples(index=False):
                sink.write(f"{_csv_field(row.key)},{row.step},{row.count},{row.std:.6g},{row.lower},{row.upper}\n")
        else:
            sink.write(json.dumps({"header": summary}, ensure_ascii=False) + "\n")
            for row in released.itertuples(index=False):
                record = {"key": row.key, "step": int(row.step), "count": int(row.count), "std": float(f"{row.std:.6g}")}
                sink.write(json.dumps({**record, "lower": int(row.lower), "upper": int(row.upper)}) + "\n")
    finally:
        if output is not None:
            sink.close()


def _reopen_output(output: Path, *, counters: KeyedCounters, header: str, rows, beta: float) -> IO[str]:
    """The output of a resumed run: complete lines of whole steps are kept, a partial step or line
    is cut, and the last released step's rows, if missing, are regenerated from the state (the
    same values: no new noise)."""
    text = output.read_text(encoding="utf-8") if output.exists() else ""
    header_lines = header.count("\n")
    lines = text[: text.rfind("\n") + 1].splitlines(keepends=True)
    body = lines[header_lines:] if len(lines) >= header_lines else []
    steps = len(body) // len(counters.keys)
    if not counters.released - 1 <= steps <= counters.released:
        raise InvalidInputError(f"--output {output} holds {steps} steps but the state has released {counters.released}")
    kept = "".join(lines[:header_lines]) if len(lines) >= header_lines else header
    kept += "".join(body[: steps * len(counters.keys)])
    sink = open(output, "w", encoding="utf-8")
    sink.write(kept)
    if steps < counters.released:
        sink.write(rows(counters.released, *counters.step_rows(counters.released, beta=beta)))
    sink.flush()
    os.fsync(sink.fileno())
    return sink


def _report_dropped(counters: KeyedCounters) -> None:
    dropped = counters.dropped
    error_console.print(
        f"operator log (not private, never publish): {dropped['unknown_key']} events with unknown keys dropped, "
        f"{dropped['over_bounds']} events (or parts) over the contribution bounds dropped",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _open_events(input_file: Path | None, key_column, step_column, value_column, user_column) -> Iterator[KeyedEvent]:
    rows: Iterator[list[str]] | IO[str]
    if input_file is not None and input_file.suffix == ".parquet":
        rows = _parquet_rows(input_file)
    else:
        rows = open(input_file, encoding="utf-8", newline="") if input_file is not None else sys.stdin
    return _events(rows, key_column=key_column, step_column=step_column, value_column=value_column, user_column=user_column)


def _write_parquet(output: Path, *, counters: KeyedCounters, keys: list[str], summary: dict, events, beta: float) -> None:
    """One row group per step (``_step_table``) in one file, written whole at the end of the run."""
    pyarrow = _pyarrow()
    with pyarrow.parquet.ParquetWriter(output, _step_schema(summary)) as writer:
        for step, counts, std, lower, upper in run_keyed(counters, events, beta=beta):
            writer.write_table(
                _step_table(step=step, counts=counts, std=std, lower=lower, upper=upper, keys=keys, summary=summary)
            )


STEP_FILE = "step-{:08d}.parquet"


def _step_schema(summary: dict):
    """The columns key, step, count, std, lower, upper; the summary in the key-value metadata
    ("pure_dp_mf")."""
    pyarrow = _pyarrow()
    fields = [("key", pyarrow.string()), ("step", pyarrow.int64()), ("count", pyarrow.int64())]
    fields += [("std", pyarrow.float64()), ("lower", pyarrow.int64()), ("upper", pyarrow.int64())]
    return pyarrow.schema(fields, metadata={"pure_dp_mf": json.dumps(summary, ensure_ascii=False)})


def _step_table(*, step: int, counts, std: float, lower, upper, keys: list[str], summary: dict):
    """One step's rows in ``_step_schema``."""
    pyarrow = _pyarrow()
    schema = _step_schema(summary)
    columns = [keys, [step] * len(keys), counts.tolist(), [std] * len(keys), lower.tolist(), upper.tolist()]
    return pyarrow.Table.from_arrays([pyarrow.array(c) for c in columns], schema=schema)


def _write_step_file(folder: Path, *, step: int, table) -> None:
    """The step's file, written atomically (temporary file, fsync, rename)."""
    from pure_dp_mf.atomic import atomic_write_bytes

    pyarrow = _pyarrow()
    buffer = pyarrow.BufferOutputStream()
    pyarrow.parquet.write_table(table, buffer)
    atomic_write_bytes(folder / STEP_FILE.format(step), buffer.getvalue().to_pybytes())


def _check_step_files(folder: Path, *, counters: KeyedCounters, summary: dict, beta: float) -> None:
    """A resumed run's folder must hold the files of steps 1 … s, s the state's released steps or
    one less (a crash after the state was written and before the step's file): that last file is
    then written from the state (the same values: no new noise). Temporary files of a write cut
    by the crash (names starting with ".") are removed."""
    for leftover in folder.glob(".step-*.tmp"):
        leftover.unlink()
    names = sorted(path.name for path in folder.iterdir())
    steps = len(names)
    if (
        names != [STEP_FILE.format(step) for step in range(1, steps + 1)]
        or not counters.released - 1 <= steps <= counters.released
    ):
        raise InvalidInputError(
            f"--output {folder} holds {steps} file(s) but the state has released {counters.released} step(s) "
            f"(expected {STEP_FILE.format(1)} … {STEP_FILE.format(max(counters.released, 1))})"
        )
    if steps < counters.released:
        counts, std, lower, upper = counters.step_rows(counters.released, beta=beta)
        table = _step_table(
            step=counters.released, counts=counts, std=std, lower=lower, upper=upper, keys=counters.keys, summary=summary
        )
        _write_step_file(folder, step=counters.released, table=table)


def _write_parquet_steps(folder: Path, *, counters: KeyedCounters, keys: list[str], summary: dict, events, beta: float) -> None:
    """With ``--state``: one Parquet file per released step in ``folder`` (a Parquet dataset that
    pandas, pyarrow and Spark read whole), each written atomically after the state records the
    step, so a run killed at any point and resumed writes every step exactly once."""
    for step, counts, std, lower, upper in run_keyed(counters, events, beta=beta):
        table = _step_table(step=step, counts=counts, std=std, lower=lower, upper=upper, keys=keys, summary=summary)
        _write_step_file(folder, step=step, table=table)
