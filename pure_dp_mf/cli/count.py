"""``pure-dp-mf count``: private running counts of one stream (``engines.counter.Counter``,
``engines.runs.run_stream``) or, with ``--key-column``, of many public keys (``count_keyed``).

Thin: parses, builds the counter from the library, runs it into the output, prints."""

from __future__ import annotations

from pathlib import Path

import typer

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.io import StepReader
from pure_dp_mf.engines.runs import check_output_options, describe, metadata, run_stream
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.generator import NoiseGenerator
from pure_dp_mf.validation import check_size


@app.command()
def count(
    input_file: Path = typer.Argument(
        None, exists=True, dir_okay=False, help="file of 0/1 values, one per line (default: standard input)"
    ),
    epsilon: float = typer.Option(..., "--epsilon", help="privacy budget ε"),
    horizon: int = typer.Option(
        None, "--horizon", help="the number of steps n the counter may release (default: none, an anytime counter)"
    ),
    extend: bool = typer.Option(
        False, "--extend", help="go on past --horizon (or a state's horizon) as an anytime counter; nothing is redrawn"
    ),
    base: Path = typer.Option(
        None,
        "--base",
        exists=True,
        dir_okay=False,
        help="base factorization file to lift (default: the planner's choice for the horizon, ε and --metric)",
    ),
    certificate: Path = typer.Option(
        None,
        "--certificate",
        exists=True,
        dir_okay=False,
        help="certificate of the base to count with (default: the shipped certificate of the default base)",
    ),
    state: Path = typer.Option(
        None, "--state", help="state file: created, kept current before every release, resumed if it exists"
    ),
    seed: int = typer.Option(None, "--seed", help="seeded noise, NOT private: for tests and research only"),
    dimension: int = typer.Option(1, "--dimension", help="d counters; each line holds d values with at most one 1"),
    output: Path = typer.Option(
        None, "--output", help="append the counts to this file (exactly once across restarts with --state)"
    ),
    mechanism: str = typer.Option(
        "auto",
        "--mechanism",
        help="auto (the best that compare ranks for the horizon, ε and --metric), lifted, or a tree: binary, kary, …",
    ),
    metric: str = typer.Option("maxse", "--metric", help="what auto minimises: maxse (the worst step) or meanse (the average)"),
    max_value: int = typer.Option(
        1, "--max-value", help="m: each line is an integer from 0 to m (sums of bounded contributions; noise scaled to m)"
    ),
    header_line: bool = typer.Option(False, "--header", help="the first input line names the columns; it is not a step"),
    column: str = typer.Option(None, "--column", help="read this column of a CSV input with a header line"),
    output_format: str = typer.Option(
        "plain",
        "--format",
        help="plain (one count per line), csv or jsonl (step, count, std, lower, upper: a guaranteed 1 − β interval); parquet for keyed counts",
    ),
    beta: float = typer.Option(
        0.05, "--beta", help="with csv/jsonl: each interval holds the true count with probability ≥ 1 − β"
    ),
    monotone: bool = typer.Option(
        False,
        "--monotone",
        help="post-process to non-negative, non-decreasing counts (isotonic fit of what was released; no privacy cost)",
    ),
    key_column: str = typer.Option(
        None, "--key-column", help="keyed counts: the CSV column of each event's key (with --keys, --step-column)"
    ),
    keys_file: Path = typer.Option(None, "--keys", help="keyed counts: the public keys, one per line; other keys are dropped"),
    step_column: str = typer.Option(None, "--step-column", help="keyed counts: the column of each event's step, 1 … horizon"),
    privacy_unit: str = typer.Option("event", "--privacy-unit", help="keyed counts: event or user (with contribution bounds)"),
    user_column: str = typer.Option(None, "--user-column", help="keyed counts with --privacy-unit user: the user column"),
    max_keys: int = typer.Option(None, "--max-keys", help="--privacy-unit user: K, keys kept per user (the first K)"),
    max_per_key: int = typer.Option(
        None, "--max-per-key", help="--privacy-unit user: C, steps kept per user and key (the first C)"
    ),
    engine: str = typer.Option("local", "--engine", help="keyed counts: local (in-process) or spark (the spark extra)"),
    commit_every: int = typer.Option(
        1 << 16,
        "--commit-every",
        help="with --state: at most this many available lines per durable commit (one state transaction per group)",
    ),
    through: int = typer.Option(
        None,
        "--through",
        help="keyed counts: release steps 1 … S (default the horizon): the public schedule, fixed before any data",
    ),
    operator_log: Path = typer.Option(
        None, "--operator-log", help="append diagnostics about the data (dropped events) to this file: not private, never publish"
    ),
    invalid: str = typer.Option(
        "refuse",
        "--invalid",
        help="an invalid line: refuse (a file is checked whole before any release; on a pipe, zero), zero, clamp, "
        "or stop (at the first: not private)",
    ),
) -> None:
    """Release a noisy running count for every input line, flushing each (Arkhipov & Kalinin, Algorithm 3).

    With --key-column: private running counts of every public key at every step (docs/streaming.md)."""
    if key_column is not None:
        from pure_dp_mf.cli.count_keyed import count_keyed

        if extend:
            raise InvalidInputError("--extend is for a single stream; keyed counts release the public schedule --through")
        if certificate is not None or dimension != 1 or monotone or mechanism not in ("auto", "lifted"):
            raise InvalidInputError(
                "--key-column runs lifted bases: no --certificate, --dimension, --monotone or tree --mechanism"
            )
        count_keyed(
            input_file=input_file, keys_file=keys_file, key_column=key_column, step_column=step_column, column=column,
            user_column=user_column, privacy_unit=privacy_unit, max_keys=max_keys, max_per_key=max_per_key,
            max_value=max_value, epsilon=epsilon, horizon=horizon, base=base, metric=metric, seed=seed, output=output,
            output_format=output_format, beta=beta, engine=engine, state=state, through=through, invalid=invalid,
            operator_log_file=operator_log,
        )  # fmt: skip
        return
    _refuse_keyed_flags(
        keys_file=keys_file,
        step_column=step_column,
        user_column=user_column,
        max_keys=max_keys,
        max_per_key=max_per_key,
        privacy_unit=privacy_unit,
        engine=engine,
    )
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
    say = lambda text: error_console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    if extend:
        if counter.counter.horizon is None:
            raise InvalidInputError("--extend: the counter has no horizon; it already goes on without one")
        counter.extend_horizon()
    of = f" of {counter.counter.horizon}" if counter.counter.horizon is not None else ""
    say(f"resuming after step {counter.released}{of} ({state})" if counter.resumed else describe(counter))
    if counter.seeded:
        say("warning: seeded noise (--seed): not for production, not private")
    if policy != invalid:
        say("standard input is a stream: an invalid line counts as 0 (--invalid zero); --invalid stop stops at it (not private)")
    summary = metadata(counter, beta=beta, policy=policy, privacy_unit="step")
    run_stream(counter, source=input_file, reader=reader, output=output, output_format=output_format, summary=summary)


def _refuse_keyed_flags(**given) -> None:
    """The keyed-only flags, refused without --key-column (one error naming the flag)."""
    if given.pop("engine") != "local":
        raise InvalidInputError("--engine is for keyed counts: give --key-column too")
    if given.pop("privacy_unit") != "event":
        raise InvalidInputError("--privacy-unit is for keyed counts: give --key-column too")
    for name, value in given.items():
        if value is not None:
            flag = {"keys_file": "--keys"}.get(name, "--" + name.replace("_", "-"))
            raise InvalidInputError(f"{flag} is for keyed counts: give --key-column too")
