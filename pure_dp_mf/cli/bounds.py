"""``pure-dp-mf bounds``: a private suggestion of --max-keys, --max-per-key and --max-value.

Thin: reads event rows as keyed counts read them (``engines.keyed_io.EventReader``), calls
``engines.bounds.suggest_bounds`` and prints the answers (no count of users or events, no value
of the data)."""

from __future__ import annotations

from pathlib import Path

import typer

from pure_dp_mf.cli.app import app, error_console, print_json
from pure_dp_mf.engines.bounds import DEFAULT_VALUE_RANGE, QUANTITIES, suggest_bounds
from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import public_schedule
from pure_dp_mf.engines.keyed_io import EventReader, read_keys
from pure_dp_mf.engines.keys import SINGLE_KEY
from pure_dp_mf.errors import InvalidInputError

VALUE_CAP = 10**18  # a value is data here, not refused for its size: sums above --value-range count as U

_INPUT_FILE = typer.Argument(None, exists=True, dir_okay=False, help="CSV (or Parquet) event rows (default: standard input)")
_EPSILON = typer.Option(..., "--epsilon", help="ε spent on the suggestion (split in three: one third per bound)")
_USER_COLUMN = typer.Option(..., "--user-column", help="the column naming each row's user")
_STEP_COLUMN = typer.Option(..., "--step-column", help="the column of each row's step, 1 … horizon, or its date with --start")
_KEY_COLUMN = typer.Option(None, "--key-column", help="the column of each row's key (with --keys; without: one stream)")
_KEYS = typer.Option(None, "--keys", help="the public keys, one per line; other keys are dropped")
_COLUMN = typer.Option(None, "--column", help="the column of each row's value (default: every row counts 1)")
_HORIZON = typer.Option(None, "--horizon", help="the steps the counts will release, 1 … n (or give --through)")
_THROUGH = typer.Option(None, "--through", help="the last step of the schedule (a step, or a date with --start)")
_START = typer.Option(None, "--start", help="dates and timestamps: step 1 begins at this ISO date/time")
_STEP_SIZE = typer.Option(None, "--step-size", help="with --start: how long a step lasts: 1d (default), 12h, 15min, 1w, …")
_QUANTILE = typer.Option(
    "0.9", "--quantile", help="each bound covers every contribution of this share of users (the DP quantile q)"
)
_VALUE_RANGE = typer.Option(
    DEFAULT_VALUE_RANGE, "--value-range", help="the --max-value search runs over 1 … U (public; larger sums count as U)"
)
_BUDGET = typer.Option(None, "--budget", help="charge ε to this named budget, once, when the suggestion is printed")
_SEED = typer.Option(None, "--seed", help="seeded noise, NOT private: for tests and research only")
_INVALID = typer.Option("refuse", "--invalid", help="an invalid row: refuse (the input is refused whole), zero or clamp")
_JSON = typer.Option(False, "--json", help="print JSON instead of the flags")


@app.command()
def bounds(
    input_file: Path = _INPUT_FILE,
    epsilon: float = _EPSILON,
    user_column: str = _USER_COLUMN,
    step_column: str = _STEP_COLUMN,
    key_column: str = _KEY_COLUMN,
    keys_file: Path = _KEYS,
    column: str = _COLUMN,
    horizon: int = _HORIZON,
    through: str = _THROUGH,
    start: str = _START,
    step_size: str = _STEP_SIZE,
    quantile: str = _QUANTILE,
    value_range: int = _VALUE_RANGE,
    budget: str = _BUDGET,
    seed: int = _SEED,
    invalid: str = _INVALID,
    as_json: bool = _JSON,
) -> None:
    """Suggest --max-keys K, --max-per-key C and --max-value m from the data, ε-DP for one user.

    Each is the DP --quantile over users of: keys per user, steps per user and key, value per user, key and step.

    A user's steps and values are the most over the user's keys and steps (docs/privacy.md, "Contribution bounds")."""
    if (key_column is None) != (keys_file is None):
        raise InvalidInputError("--key-column and --keys go together (without both the rows are one stream)")
    if invalid not in ("refuse", "zero", "clamp"):
        raise InvalidInputError(f"--invalid must be one of refuse, zero, clamp, got {invalid!r}")
    keys = [SINGLE_KEY] if keys_file is None else read_keys(keys_file)
    calendar = Calendar.of(start=start, step_size=step_size)
    last = public_schedule(horizon, through, calendar=calendar)
    reader = EventReader(
        keys=keys,
        key_column=key_column,
        step_column=step_column,
        value_column=column,
        user_column=user_column,
        through=last,
        max_value=VALUE_CAP,
        policy=invalid,
        calendar=calendar,
    )
    generator = NoiseGenerator.from_seed(seed) if seed is not None else None
    if generator is not None:
        error_console.print("warning: seeded noise (--seed): not private, for tests and research only", markup=False)
    suggestion = suggest_bounds(
        events=reader.events(input_file),
        epsilon=epsilon,
        key_range=len(keys),
        step_range=last,
        value_range=value_range,
        quantile=quantile,
        generator=generator,
        budget=budget,
    )
    if as_json:
        print_json(suggestion.as_dict())
        return
    words = ", ".join(f"{name} in 1 … {suggestion.ranges[name]}" for name in QUANTITIES)
    error_console.print(
        f"bounds: ε = {suggestion.epsilon:g} (ε/3 each), quantile {suggestion.quantile:g} of users; searched {words}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    typer.echo(suggestion.flags())
