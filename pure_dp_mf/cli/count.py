"""``pure-dp-mf count``: private running counts of one stream (``engines.counter.Counter``,
``engines.runs.run_stream``) or, with ``--key-column``, of many public keys (``count_keyed``).

Thin: parses, builds the counter from the library, runs it into the output, prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.io import StepReader
from pure_dp_mf.engines.runs import check_output_options, describe, metadata, run_stream
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.generator import NoiseGenerator
from pure_dp_mf.validation import check_size

# The arguments and options of ``count``, in the order of its signature (and of --help).
_INPUT_FILE = typer.Argument(None, exists=True, dir_okay=False, help="file of 0/1 values, one per line (default: standard input)")
_EPSILON = typer.Option(..., "--epsilon", help="privacy budget ε")
_HORIZON = typer.Option(
    None, "--horizon", help="the number of steps n the counter may release (default: none, an anytime counter)"
)
_EXTEND = typer.Option(
    False, "--extend", help="go on past --horizon (or a state's horizon) as an anytime counter; nothing is redrawn"
)
_BASE = typer.Option(
    None,
    "--base",
    exists=True,
    dir_okay=False,
    help="base factorization file to lift (default: the planner's choice for the horizon, ε and --metric)",
)
_CERTIFICATE = typer.Option(
    None,
    "--certificate",
    exists=True,
    dir_okay=False,
    help="certificate of the base to count with (default: the shipped certificate of the default base)",
)
_STATE = typer.Option(None, "--state", help="state file: created, kept current before every release, resumed if it exists")
_SEED = typer.Option(None, "--seed", help="seeded noise, NOT private: for tests and research only")
_DIMENSION = typer.Option(1, "--dimension", help="d counters; each line holds d values with at most one 1")
_OUTPUT = typer.Option(None, "--output", help="append the counts to this file (exactly once across restarts with --state)")
_MECHANISM = typer.Option(
    "auto",
    "--mechanism",
    help="auto (the best that compare ranks for the horizon, ε and --metric), lifted, or a tree: binary, kary, …",
)
_METRIC = typer.Option("maxse", "--metric", help="what auto minimises: maxse (the worst step) or meanse (the average)")
_MAX_VALUE = typer.Option(
    1, "--max-value", help="m: each line is an integer from 0 to m (sums of bounded contributions; noise scaled to m)"
)
_HEADER = typer.Option(False, "--header", help="the first input line names the columns; it is not a step")
_COLUMN = typer.Option(None, "--column", help="read this column of a CSV input with a header line")
_FORMAT = typer.Option(
    "plain",
    "--format",
    help="plain (one count per line), csv or jsonl (step, count, std, lower, upper: a guaranteed 1 − β interval); parquet for keyed counts",
)
_BETA = typer.Option(0.05, "--beta", help="with csv/jsonl: each interval holds the true count with probability ≥ 1 − β")
_MONOTONE = typer.Option(
    False,
    "--monotone",
    help="post-process to non-negative, non-decreasing counts (isotonic fit of what was released; no privacy cost)",
)
_KEY_COLUMN = typer.Option(
    None, "--key-column", help="keyed counts: the CSV column of each event's key (with --keys, --step-column)"
)
_KEYS = typer.Option(None, "--keys", help="keyed counts: the public keys, one per line; other keys are dropped")
_STEP_COLUMN = typer.Option(None, "--step-column", help="keyed counts: the column of each event's step, 1 … horizon")
_PRIVACY_UNIT = typer.Option("event", "--privacy-unit", help="keyed counts: event or user (with contribution bounds)")
_USER_COLUMN = typer.Option(None, "--user-column", help="keyed counts with --privacy-unit user: the user column")
_MAX_KEYS = typer.Option(None, "--max-keys", help="--privacy-unit user: K, keys kept per user (the first K)")
_MAX_PER_KEY = typer.Option(None, "--max-per-key", help="--privacy-unit user: C, steps kept per user and key (the first C)")
_ENGINE = typer.Option("local", "--engine", help="keyed counts: local (in-process) or spark (the spark extra)")
_COMMIT_EVERY = typer.Option(
    1 << 16,
    "--commit-every",
    help="with --state: at most this many available lines per durable commit (one state transaction per group)",
)
_THROUGH = typer.Option(
    None,
    "--through",
    help="keyed counts: release steps 1 … S (default the horizon): the public schedule, fixed before any data",
)
_OPERATOR_LOG = typer.Option(
    None, "--operator-log", help="append diagnostics about the data (dropped events) to this file: not private, never publish"
)
_INVALID = typer.Option(
    "refuse",
    "--invalid",
    help="an invalid line: refuse (a file is checked whole before any release; on a pipe, zero), zero, clamp, "
    "or stop (at the first: not private)",
)


@app.command()
def count(
    context: typer.Context,
    input_file: Path = _INPUT_FILE,
    epsilon: float = _EPSILON,
    horizon: int = _HORIZON,
    extend: bool = _EXTEND,
    base: Path = _BASE,
    certificate: Path = _CERTIFICATE,
    state: Path = _STATE,
    seed: int = _SEED,
    dimension: int = _DIMENSION,
    output: Path = _OUTPUT,
    mechanism: str = _MECHANISM,
    metric: str = _METRIC,
    max_value: int = _MAX_VALUE,
    header_line: bool = _HEADER,
    column: str = _COLUMN,
    output_format: str = _FORMAT,
    beta: float = _BETA,
    monotone: bool = _MONOTONE,
    key_column: str = _KEY_COLUMN,
    keys_file: Path = _KEYS,
    step_column: str = _STEP_COLUMN,
    privacy_unit: str = _PRIVACY_UNIT,
    user_column: str = _USER_COLUMN,
    max_keys: int = _MAX_KEYS,
    max_per_key: int = _MAX_PER_KEY,
    engine: str = _ENGINE,
    commit_every: int = _COMMIT_EVERY,
    through: int = _THROUGH,
    operator_log: Path = _OPERATOR_LOG,
    invalid: str = _INVALID,
) -> None:
    """Release a noisy running count for every input line, flushing each (Arkhipov & Kalinin, Algorithm 3).

    With --key-column: private running counts of every public key at every step (docs/streaming.md)."""
    # Each run takes every flag above by name: context.params holds them as parsed.
    if key_column is not None:
        _count_keyed(**context.params)
    else:
        _count_stream(**context.params)


def _count_keyed(
    *,
    extend: bool,
    certificate: Path | None,
    dimension: int,
    monotone: bool,
    mechanism: str,
    header_line: bool,
    commit_every: int,
    operator_log: Path | None,
    **keyed: Any,
) -> None:
    """``count --key-column``: the single-stream flags refused, then ``count_keyed`` with the ``keyed`` flags
    (``header_line`` and ``commit_every`` are single-stream options a keyed run does not read)."""
    from pure_dp_mf.cli.count_keyed import count_keyed

    if extend:
        raise InvalidInputError("--extend is for a single stream; keyed counts release the public schedule --through")
    if certificate is not None or dimension != 1 or monotone or mechanism not in ("auto", "lifted"):
        raise InvalidInputError("--key-column runs lifted bases: no --certificate, --dimension, --monotone or tree --mechanism")
    count_keyed(**keyed, operator_log_file=operator_log)


def _count_stream(
    *,
    input_file: Path | None,
    epsilon: float,
    horizon: int | None,
    extend: bool,
    base: Path | None,
    certificate: Path | None,
    state: Path | None,
    seed: int | None,
    dimension: int,
    output: Path | None,
    mechanism: str,
    metric: str,
    max_value: int,
    header_line: bool,
    column: str | None,
    output_format: str,
    beta: float,
    monotone: bool,
    commit_every: int,
    invalid: str,
    **keyed_flags: Any,
) -> None:
    """``count`` of one stream: the keyed-only flags (``keyed_flags``) refused, then the counter run over the input."""
    _refuse_keyed_flags(**keyed_flags)
    check_size(commit_every, name="--commit-every", maximum=1 << 20)
    check_output_options(output_format=output_format, dimension=dimension, beta=beta, invalid=invalid)
    policy = invalid if invalid != "refuse" or input_file is not None else "zero"
    reader = StepReader(
        dimension=dimension, max_value=max_value, policy=policy, header=header_line, column=column, largest=commit_every
    )
    counter = Counter(
        epsilon=epsilon,
        horizon=horizon,
        mechanism=mechanism,
        metric=metric,
        base=base,
        certificate=certificate,
        max_value=max_value,
        dimension=dimension,
        beta=beta,
        monotone=monotone,
        state=state,
        rng=NoiseGenerator.from_seed(seed) if seed is not None else None,
    )
    if extend:
        if counter.counter.horizon is None:
            raise InvalidInputError("--extend: the counter has no horizon; it already goes on without one")
        counter.extend_horizon()
    _announce(counter, state=state, policy=policy, invalid=invalid)
    summary = metadata(counter, beta=beta, policy=policy, privacy_unit="step")
    run_stream(counter, source=input_file, reader=reader, output=output, output_format=output_format, summary=summary)


def _announce(counter: Counter, *, state: Path | None, policy: str, invalid: str) -> None:
    """Say on stderr what runs: the counter (or where it resumes), seeded noise, the policy for standard input."""
    say = lambda text: error_console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    of = f" of {counter.counter.horizon}" if counter.counter.horizon is not None else ""
    say(f"resuming after step {counter.released}{of} ({state})" if counter.resumed else describe(counter))
    if counter.seeded:
        say("warning: seeded noise (--seed): not for production, not private")
    if policy != invalid:
        say("standard input is a stream: an invalid line counts as 0 (--invalid zero); --invalid stop stops at it (not private)")


def _refuse_keyed_flags(
    *,
    keys_file: Path | None,
    step_column: str | None,
    privacy_unit: str,
    user_column: str | None,
    max_keys: int | None,
    max_per_key: int | None,
    engine: str,
    key_column: str | None,
    through: int | None,
    operator_log: Path | None,
) -> None:
    """The keyed-only flags, refused without --key-column (one error naming the flag). ``key_column`` is
    None here; --through and --operator-log are not refused: a single stream does not read them."""
    if engine != "local":
        raise InvalidInputError("--engine is for keyed counts: give --key-column too")
    if privacy_unit != "event":
        raise InvalidInputError("--privacy-unit is for keyed counts: give --key-column too")
    given = {
        "--keys": keys_file,
        "--step-column": step_column,
        "--user-column": user_column,
        "--max-keys": max_keys,
        "--max-per-key": max_per_key,
    }
    for flag, value in given.items():
        if value is not None:
            raise InvalidInputError(f"{flag} is for keyed counts: give --key-column too")
