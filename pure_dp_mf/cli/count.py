"""``pure-dp-mf count``: private running counts of one stream (``engines.counter.Counter``,
``engines.runs.run_stream``) or, with ``--key-column``, of many public keys (``count_keyed``).

Thin: parses, builds the counter from the library, runs it into the output, prints."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import typer

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.io import StepReader
from pure_dp_mf.engines.journal import storage_error
from pure_dp_mf.engines.runs import check_output_options, describe, metadata, run_stream
from pure_dp_mf.errors import InvalidInputError, require_extra
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
_OUTPUT = typer.Option(
    None,
    "--output",
    help="write the counts to this new file (refused if it exists and is not empty; with --state, a run again "
    "completes it from the state: every step exactly once)",
)
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
    help="plain (one count per line), csv or jsonl (step, count, std, lower, upper: a guaranteed 1 − β interval for the "
    "noise on the bounded count); parquet for keyed counts",
)
_BETA = typer.Option(
    0.05,
    "--beta",
    help="with csv/jsonl: each interval covers the noise on the bounded count (the input as counted: after the "
    "contribution bounds, m and --invalid) with probability ≥ 1 − β; not what the bounds left out of the raw count",
)
_MONOTONE = typer.Option(
    False,
    "--monotone",
    help="post-process to non-negative, non-decreasing counts (isotonic fit of what was released; no privacy cost)",
)
_KEY_COLUMN = typer.Option(
    None, "--key-column", help="keyed counts: the CSV column of each event's key (with --keys, --step-column)"
)
_KEYS = typer.Option(None, "--keys", help="keyed counts: the public keys, one per line; other keys are dropped")
_STEP_COLUMN = typer.Option(
    None,
    "--step-column",
    help="input as event rows (CSV with a header): the column of each row's step, 1 … horizon, or its date with --start",
)
_START = typer.Option(None, "--start", help="with --step-column: dates and timestamps, step 1 begins at this ISO date/time")
_STEP_SIZE = typer.Option(None, "--step-size", help="with --start: how long a step lasts: 1d (default), 12h, 15min, 1w, …")
_PRIVACY_UNIT = typer.Option(
    None,
    "--privacy-unit",
    help="what one person's data is: step (a step's whole value ≤ --max-value; the default for one value per line), "
    "event (one event row, value ≤ --max-value; the default for event rows), user-step (one user's rows within one step: noise K·m) or user "
    "(one user over the whole stream: noise K·m·C·‖R‖) — docs/privacy.md, 'Privacy units'",
)
_USER_COLUMN = typer.Option(None, "--user-column", help="--privacy-unit user or user-step: the column naming each row's user")
_MAX_KEYS = typer.Option(None, "--max-keys", help="--privacy-unit user or user-step: K, keys kept per user (the first K)")
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
    help="event rows: release steps 1 … S, or through the step of a date with --start (default the horizon): the "
    "public schedule, fixed before any data",
)
_OPERATOR_LOG = typer.Option(
    None, "--operator-log", help="append diagnostics about the data (dropped events) to this file: not private, never publish"
)
_BUDGET = typer.Option(
    None, "--budget", help="charge ε to this named budget (pure-dp-mf budget create) before the first release; refused past it"
)
_FIRST_STEP = typer.Option(
    None,
    "--first-step",
    help="with --state: the first line is this step; lines of released steps must repeat their inputs and get "
    "their stored releases back (nothing drawn)",
)
_LEDGER = typer.Option(
    None,
    "--ledger",
    help="the ledger of publications (postgresql://… for jobs on several machines, sqlite:///path); default "
    "$PURE_DP_MF_LEDGER, else the lineage registry's file",
)
_KEY_FILE = typer.Option(
    None,
    "--key-file",
    help="event rows: the noise key in this file (created when missing, mode 0600; keep it secret), one publication "
    "in the ledger: a run again on the same input reproduces its output, on other input it is refused",
)
_PLOT = typer.Option(None, "--plot", help="draw the released series and its band into this PNG (with --output, csv)")
_BAND = typer.Option(
    "step",
    "--band",
    help="step (each interval holds with probability ≥ 1 − β) or simultaneous (all of the schedule's intervals hold "
    "together with probability ≥ 1 − β: each at β/n, the union bound)",
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
    start: str = _START,
    step_size: str = _STEP_SIZE,
    privacy_unit: str = _PRIVACY_UNIT,
    user_column: str = _USER_COLUMN,
    max_keys: int = _MAX_KEYS,
    max_per_key: int = _MAX_PER_KEY,
    engine: str = _ENGINE,
    commit_every: int = _COMMIT_EVERY,
    through: str = _THROUGH,
    operator_log: Path = _OPERATOR_LOG,
    invalid: str = _INVALID,
    budget: str = _BUDGET,
    first_step: int = _FIRST_STEP,
    plot: Path = _PLOT,
    band: str = _BAND,
    ledger: str = _LEDGER,
    key_file: Path = _KEY_FILE,
) -> None:
    """Release a noisy running count for every input line, flushing each (Arkhipov & Kalinin, Algorithm 3).

    With --step-column: the input is event rows, counted per step of a public schedule (dates with
    --start); with --key-column too: private running counts of every public key (docs/streaming.md)."""
    # Each run takes every flag above by name: context.params holds them as parsed.
    params = {name: value for name, value in context.params.items() if name not in ("plot", "ledger")}
    if ledger is not None:
        from pure_dp_mf.engines import ledger as ledger_module

        ledger_module.set_default(ledger)
    if band not in ("step", "simultaneous"):
        raise InvalidInputError(f"--band must be step or simultaneous, got {band!r}")
    rows = key_column is not None or step_column is not None  # event rows: csv by default
    if plot is not None and (output is None or output_format not in (("csv", "plain") if rows else ("csv",)) or dimension != 1):
        raise InvalidInputError("--plot draws the --output file: give --output and --format csv")
    if plot is not None:  # before anything is released or charged: a plot that cannot be written fails now
        _check_plot_path(plot)
        require_extra("matplotlib")
    if not rows and band == "simultaneous" and output_format == "plain":
        raise InvalidInputError(
            "--band simultaneous sets the intervals, and --format plain shows none: use --format csv or jsonl"
        )
    if not rows and dimension > MAX_DIMENSION:
        raise InvalidInputError(
            f"--dimension {dimension} is more than {MAX_DIMENSION:,} counters, the most one run keeps in bounded memory"
        )
    if rows:
        _count_keyed(**params)
    else:
        _count_stream(**params)
    if plot is not None:
        from pure_dp_mf.reports.plot import plot_output_file

        label = (
            f"{1 - beta:g} {'simultaneous band' if band == 'simultaneous' else 'interval per step'} (noise on the bounded count)"
        )
        plot_output_file(source=output, image=plot, band_label=label)
        error_console.print(f"plot: {plot}", markup=False, highlight=False)


MAX_DIMENSION = 1 << 20
"""The most counters (--dimension) one run keeps: each holds its own noise pages and sums."""


def _check_plot_path(plot: Path) -> None:
    """Refuse, before anything is read or released, a --plot that is not a .png path or whose
    folder cannot take a new file (tried with a temporary file there, removed at once)."""
    if plot.suffix.lower() != ".png":
        raise InvalidInputError(f"--plot {plot}: the plot is a PNG image; name it with .png")
    folder = plot.parent if str(plot.parent) else Path(".")
    if plot.is_dir() or (plot.exists() and not os.access(plot, os.W_OK)):
        raise InvalidInputError(f"--plot {plot}: cannot write there")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{plot.name}.", suffix=".tmp"):
            pass
    except OSError as error:
        raise InvalidInputError(f"--plot {plot}: cannot write there ({error.strerror or error})") from None


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
    first_step: int | None,
    band: str,
    **keyed: Any,
) -> None:
    """``count --key-column`` or ``--step-column`` (event rows): the line-per-step flags refused, then
    ``count_keyed`` with the ``keyed`` flags (``header_line`` and ``commit_every`` are options of
    line-per-step input that event rows, always CSV with a header, do not read)."""
    from pure_dp_mf.cli.count_keyed import count_keyed

    flag = "--key-column" if keyed["key_column"] is not None else "--step-column"
    if first_step is not None:
        raise InvalidInputError(
            f"--first-step is for one count per line; {flag} releases the public schedule --through "
            "(a run again with its --state skips the released steps)"
        )
    if certificate is not None or dimension != 1 or monotone or mechanism not in ("auto", "lifted"):
        raise InvalidInputError(f"{flag} runs lifted bases: no --certificate, --dimension, --monotone or tree --mechanism")
    count_keyed(**keyed, extend=extend, operator_log_file=operator_log, simultaneous=band == "simultaneous")


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
    budget: str | None,
    first_step: int | None,
    band: str,
    **keyed_flags: Any,
) -> None:
    """``count`` of one stream: the keyed-only flags (``keyed_flags``) refused, then the counter run over the input."""
    log = keyed_flags.pop("operator_log", None)
    _refuse_keyed_flags(operator_log=None, **keyed_flags)
    step_beta = _band_beta(band, beta=beta, steps=horizon)
    check_size(commit_every, name="--commit-every", maximum=1 << 20)
    check_output_options(output_format=output_format, dimension=dimension, beta=step_beta, invalid=invalid)
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
        beta=step_beta,
        monotone=monotone,
        state=state,
        rng=NoiseGenerator.from_seed(seed) if seed is not None else None,
        budget=budget,
    )
    if extend:
        if counter.counter.horizon is None:
            raise InvalidInputError("--extend: the counter has no horizon; it already goes on without one")
        counter.extend_horizon()
    _announce(counter, state=state, policy=policy, invalid=invalid)
    summary = {**metadata(counter, beta=beta, policy=policy), "band": band, "beta_per_step": step_beta}
    report = run_stream(
        counter,
        source=input_file,
        reader=reader,
        output=output,
        output_format=output_format,
        summary=summary,
        first_step=first_step,
    )
    if log is not None:  # the lines the policy replaced are about the data: the operator log only, never stderr
        _stream_operator_log(log, policy=policy, invalid=report.invalid, released=report.released)


def _stream_operator_log(path: Path, *, policy: str, invalid: int, released: int) -> None:
    """Append the stream's data diagnostics (not private: never publish) to ``path``."""
    record = {
        "not_private": "diagnostics about the data: for the operator only, never publish",
        "invalid_policy": policy,
        "invalid_lines": invalid,
        "released_steps": released,
    }
    try:
        with open(path, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")
    except OSError as error:
        raise storage_error(path, error, state=False) from None


def _band_beta(band: str, *, beta: float, steps: int | None) -> float:
    """The β of each step's interval: β itself (--band step), or for a band that holds over the
    whole schedule of ``steps`` steps at once β/steps (``error_bars.simultaneous_beta``)."""
    if band == "step":
        return beta
    if steps is None:
        raise InvalidInputError(
            "--band simultaneous needs --horizon n (or --through): the band holds over steps fixed in advance"
        )
    check_output_options(output_format="csv", dimension=1, beta=beta, invalid="refuse")
    from pure_dp_mf.release.error_bars import simultaneous_beta

    return simultaneous_beta(beta, steps=steps)


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
    start: str | None,
    step_size: str | None,
    privacy_unit: str | None,
    user_column: str | None,
    max_keys: int | None,
    max_per_key: int | None,
    engine: str,
    key_column: str | None,
    through: str | None,
    operator_log: Path | None,
    key_file: Path | None,
) -> None:
    """The flags of event rows, refused for one count per line (one error naming the flag).
    ``key_column`` and ``step_column`` are None here; --through is refused (every input line is
    a step: it would be ignored); --operator-log is not."""
    if engine != "local":
        raise InvalidInputError("--engine is for keyed counts: give --key-column too")
    if privacy_unit not in (None, "step"):
        raise InvalidInputError(
            f"--privacy-unit {privacy_unit} counts event rows: give --step-column (the column of each row's step or date); "
            "one value per line is --privacy-unit step"
        )
    given = {
        "--keys": keys_file,
        "--user-column": user_column,
        "--max-keys": max_keys,
        "--max-per-key": max_per_key,
        "--start": start,
        "--step-size": step_size,
        "--through": through,
        "--key-file": key_file,
    }
    for flag, value in given.items():
        if value is not None:
            raise InvalidInputError(f"{flag} is for event rows: give --step-column too")
