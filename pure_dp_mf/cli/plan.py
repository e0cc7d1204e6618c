"""``pure-dp-mf plan``: the ε that meets an accuracy target at a step, or the accuracy an ε gives
(``engines.accuracy``: the error bars that ``count`` then reports).

Thin: parses the flags into one ``CountSpec`` (``engines.spec``, checked as it is made; the
count ``count`` runs for the same flags), calls ``accuracy.plan`` once, prints a short table or
JSON."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from pure_dp_mf.cli.app import app, error_console, print_json, print_table
from pure_dp_mf.engines.accuracy import Plan
from pure_dp_mf.engines.accuracy import plan as plan_accuracy
from pure_dp_mf.engines.spec import CountSpec
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import UNIT_EPSILON

# The options of ``plan``, in the order of its signature (and of --help).
_STEP = typer.Option(..., "--step", help="the 1-based step t whose release is planned")
_HORIZON = typer.Option(None, "--horizon", help="the counter's horizon n (default: none, the anytime counter)")
_EPSILON = typer.Option(None, "--epsilon", help="privacy budget ε: print the std and the interval it gives at --step")
_TARGET_STD = typer.Option(None, "--target-std", help="find the smallest ε whose noise std at --step is at most this (counts)")
_TARGET_HALF_WIDTH = typer.Option(
    None, "--target-half-width", help="find the smallest ε whose guaranteed 1 − β interval at --step has at most this half-width"
)
_BETA = typer.Option(0.05, "--beta", help="the interval covers the noise on the bounded count with probability ≥ 1 − β")
_METRIC = typer.Option("maxse", "--metric", help="what auto minimises: maxse (the worst step) or meanse (the average)")
_MECHANISM = typer.Option(
    "auto", "--mechanism", help="auto (as count chooses), lifted, or a tree: binary, kary, …; anytime without --horizon"
)
_BASE = typer.Option(None, "--base", exists=True, dir_okay=False, help="base factorization file to lift (as count --base)")
_CERTIFICATE = typer.Option(
    None, "--certificate", exists=True, dir_okay=False, help="certificate of the base to count with (as count --certificate)"
)
_PRIVACY_UNIT = typer.Option(
    "step",
    "--privacy-unit",
    help="what ε protects: step (a step's value ≤ m, one value per line), event (one event ≤ m), "
    "user-step (a user's K keys at one step), user (a user's K keys × C steps); all but step count event rows",
)
_MAX_VALUE = typer.Option(1, "--max-value", help="m: the largest value of a step (step), an event, or a user's key at a step")
_MAX_KEYS = typer.Option(None, "--max-keys", help="user-step, user: K, keys a user contributes to (default 1)")
_MAX_PER_KEY = typer.Option(None, "--max-per-key", help="user: C, steps a user contributes to per key")
_JSON = typer.Option(False, "--json", help="print JSON instead of a table")
_NOT_SPEC = ("step", "epsilon", "target_std", "target_half_width", "as_json")
"""The parameters of ``plan`` that are not ``CountSpec`` fields: the question and the output."""


@app.command()
def plan(
    context: typer.Context,
    step: int = _STEP,
    horizon: int = _HORIZON,
    epsilon: float = _EPSILON,
    target_std: float = _TARGET_STD,
    target_half_width: float = _TARGET_HALF_WIDTH,
    beta: float = _BETA,
    metric: str = _METRIC,
    mechanism: str = _MECHANISM,
    base: Path = _BASE,
    certificate: Path = _CERTIFICATE,
    privacy_unit: str = _PRIVACY_UNIT,
    max_value: int = _MAX_VALUE,
    max_keys: int = _MAX_KEYS,
    max_per_key: int = _MAX_PER_KEY,
    as_json: bool = _JSON,
) -> None:
    """The smallest ε for a target std or interval half-width at a step, or the std and interval an ε gives there.

    The numbers are those count then reports for that step, and plan refuses what count refuses
    for the same flags (docs/planning.md). An ε above 10 is answered with one warning line on
    stderr (and "warning" in --json)."""
    given = [flag for flag, value in (("--epsilon", epsilon), ("--target-std", target_std)) if value is not None]
    given += ["--target-half-width"] if target_half_width is not None else []
    if len(given) != 1:
        raise InvalidInputError(
            f"give exactly one of --epsilon, --target-std, --target-half-width (got {', '.join(given) or 'none'})"
        )
    # the flags after --target-half-width are count's, named as CountSpec's fields; with a target,
    # ε = 1 stands in (the search does not use the spec's ε); every unit but step counts event rows
    options = {name: value for name, value in context.params.items() if name not in _NOT_SPEC}
    spec = CountSpec(epsilon=UNIT_EPSILON if epsilon is None else epsilon, rows=privacy_unit != "step", **options)
    planned = plan_accuracy(spec=spec, step=step, target_std=target_std, target_half_width=target_half_width)
    if planned.warning is not None:  # a public number: ε, said on stderr, once
        error_console.print(f"warning: {planned.warning}", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        print_json(planned.as_dict())
        return
    columns = ["ε", "std", f"half-width (1 − β = {1 - planned.beta:.4g})", "interval", "privacy unit", "sensitivity", "mechanism"]
    print_table(_title(planned), columns, [_row(planned)])


def _title(planned: Plan) -> str:
    where = f"step {planned.step} of {planned.horizon}" if planned.horizon is not None else f"step {planned.step}, no horizon"
    if planned.target_std is not None:
        return f"{where}: the smallest ε (to {planned.relative_tolerance:g} relative) with std ≤ {planned.target_std:g}"
    if planned.target_half_width is not None:
        return f"{where}: the smallest ε (to {planned.relative_tolerance:g} relative) with half-width ≤ {planned.target_half_width:g}"
    return f"{where}: the error of ε = {planned.epsilon:g}"


def _row(planned: Plan) -> list:
    bounds = [f"m = {planned.max_value}"]
    bounds += [f"K = {planned.max_keys}"] if planned.max_keys is not None else []
    bounds += [f"C = {planned.max_per_key}"] if planned.max_per_key is not None else []
    return [
        planned.epsilon,
        planned.std,
        planned.half_width,
        f"count ± {math.floor(planned.half_width)}",
        f"{planned.privacy_unit} ({', '.join(bounds)})",
        "per segment" if planned.sensitivity is None else planned.sensitivity,
        planned.mechanism,
    ]
