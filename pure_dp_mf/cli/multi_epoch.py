"""``pure-dp-mf multi-epoch``: optimal Gaussian factorizations under (k,b)-participation, and ε.

Thin: parses, calls ``pure_dp_mf.gaussian``, prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pure_dp_mf.atomic import check_writable_file
from pure_dp_mf.cli.app import app, console, error_console, print_json, print_table
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations import workloads
from pure_dp_mf.gaussian.optimize import DEFAULT_GAP, DEFAULT_MAX_ITERATIONS, MAX_STEPS, Constraint, optimize
from pure_dp_mf.validation import check_size

multi_epoch_app = typer.Typer(
    help="Gaussian multi-epoch matrix factorization (Choquette-Choo et al.): optimize under (k,b)-participation, account ε.",
    no_args_is_help=True,
)
app.add_typer(multi_epoch_app, name="multi-epoch")

# The options of multi-epoch optimize, in the order of its signature (and of --help).
_N = typer.Option(..., "--n", help="number of steps n (a multiple of n/k)")
_PARTICIPATIONS = typer.Option(..., "--participations", help="k: participations per example; b = n/k")
_SEPARATION = typer.Option(None, "--separation", help="b: steps between consecutive participations, exactly (default n/k)")
_PARTICIPATION = typer.Option(
    "fixed-epoch",
    "--participation",
    help="fixed-epoch (exactly b apart); the dense optimizer does not optimize for min-sep (see multi-epoch compare)",
)
_MIN_SEP = typer.Option(
    None,
    "--min-sep",
    hidden=True,
    help="deprecated: fixed-epoch separation b; use --participation fixed-epoch --separation b",
)
_WORKLOAD = typer.Option("prefix", "--workload", help="prefix | momentum | momentum-cooldown")
_MOMENTUM = typer.Option(workloads.DEFAULT_MOMENTUM, "--momentum", help="β for the momentum workloads")
_GAP = typer.Option(DEFAULT_GAP, "--gap", help="stop at this relative duality gap")
_CONSTRAINT = typer.Option("nonnegative", "--constraint", help="nonnegative | pairs | full")
_MAX_ITERATIONS = typer.Option(DEFAULT_MAX_ITERATIONS, "--max-iterations")
_OUT = typer.Option(..., "--out", help="factorization file (.npz) to write")
_JSON = typer.Option(
    False, "--json", help="print the result record and its history of certified (time, loss, bound, gap) as JSON"
)
# The rows of the table that optimize prints, in order.
_TABLE_KEYS = (
    "workload",
    "n",
    "max_participations",
    "participation",
    "separation",
    "constraint",
    "loss",
    "dual_bound",
    "relative_gap",
    "sensitivity",
    "iterations",
    "wall_seconds",
)


@multi_epoch_app.command("optimize")
def optimize_command(
    n: int = _N,
    participations: int = _PARTICIPATIONS,
    separation: int | None = _SEPARATION,
    participation: str = _PARTICIPATION,
    min_sep: int | None = _MIN_SEP,
    workload: str = _WORKLOAD,
    momentum: float = _MOMENTUM,
    gap: float = _GAP,
    constraint: str = _CONSTRAINT,
    max_iterations: int = _MAX_ITERATIONS,
    out: Path = _OUT,
    as_json: bool = _JSON,
) -> None:
    """Optimize A = B·C for (k,b) fixed-epoch participation and write the factorization file."""
    n = check_size(n, name="--n", maximum=MAX_STEPS)  # before the n×n workload is built
    participations = check_size(participations, name="--participations", maximum=n)
    separation = _checked_separation(n=n, separation=separation, min_sep=min_sep, participation=participation, out=out)
    with _progress_bar(total=max_iterations, disable=as_json) as report:
        result = optimize(
            workload=workloads.workload(workload, n=n, momentum=momentum),
            max_participations=participations,
            min_sep=separation,
            gap=gap,
            constraint=cast(Constraint, constraint),  # optimize refuses an unknown one
            max_iterations=max_iterations,
            progress=report,
            workload_name=workloads.workload_name(workload, momentum=momentum),
        )
    result.to_factorization().save(out)
    record = dict(result.metadata()["made_by"], n=n, out=str(out))
    if as_json:
        print_json({**record, "history": [check._asdict() for check in result.history]})
        return
    print_table(f"multi-epoch optimize → {out}", ("quantity", "value"), [(key, record[key]) for key in _TABLE_KEYS])
    if not result.converged:
        console.print(
            f"[yellow]gap {result.relative_gap:.3g} above the requested {gap:g} after {result.iterations} iterations[/]"
        )


def _checked_separation(*, n: int, separation: int | None, min_sep: int | None, participation: str, out: Path) -> int | None:
    """The remaining checks of optimize, in order (sizes, --out, --participation, the deprecated --min-sep);
    the separation b to optimize for (None: n/k)."""
    if separation is not None:
        separation = check_size(separation, name="--separation", maximum=n)
    if min_sep is not None:
        min_sep = check_size(min_sep, name="--min-sep", maximum=n)
    check_writable_file(out, name="--out")
    if participation != "fixed-epoch":
        raise InvalidInputError(
            f"--participation {participation}: the dense optimizer optimizes for fixed-epoch participation only; "
            "for min-sep use the Toeplitz strategies of multi-epoch compare --participation min-sep"
        )
    if min_sep is None:
        return separation
    if separation is not None and separation != min_sep:
        raise InvalidInputError(f"--min-sep {min_sep} and --separation {separation} disagree; give --separation only")
    error_console.print(
        f"warning: --min-sep is deprecated: it means fixed-epoch participation, exactly {min_sep} steps apart "
        f"(not a minimum separation); use --participation fixed-epoch --separation {min_sep}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return min_sep


@contextmanager
def _progress_bar(*, total: int, disable: bool) -> Iterator[Callable[[Any], None]]:
    """A transient progress bar of the optimizer's iterations; yields the callback that reports each check."""
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console, transient=True, disable=disable
    ) as bar:
        task = bar.add_task("optimizing", total=total)

        def report(check) -> None:
            bar.update(
                task,
                completed=check.iteration,
                description=f"loss {check.loss:.6g}  dual {check.dual_bound:.6g}  gap {check.relative_gap:.2e}",
            )

        yield report


@multi_epoch_app.command("epsilon")
def epsilon_command(
    noise_multiplier: float = typer.Option(..., "--noise-multiplier", help="z: noise std / sens(C)"),
    delta: float = typer.Option(..., "--delta"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """ε of the single Gaussian release G·C (PLD accountant of dp-accounting)."""

    from pure_dp_mf.gaussian.accounting import epsilon_for  # dp_accounting: only for this command

    epsilon = epsilon_for(noise_multiplier=noise_multiplier, delta=delta)
    if as_json:
        print_json({"epsilon": epsilon, "delta": delta, "noise_multiplier": noise_multiplier})
    else:
        typer.echo(f"epsilon = {epsilon:.6g} at delta = {delta:g}, noise multiplier {noise_multiplier:g}")


@multi_epoch_app.command("noise")
def noise_command(
    epsilon: float = typer.Option(..., "--epsilon"),
    delta: float = typer.Option(..., "--delta"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The noise multiplier giving (ε, δ)-DP for the single Gaussian release G·C."""

    from pure_dp_mf.gaussian.accounting import noise_multiplier_for  # dp_accounting: only for this command

    z = noise_multiplier_for(epsilon=epsilon, delta=delta)
    if as_json:
        print_json({"epsilon": epsilon, "delta": delta, "noise_multiplier": z})
    else:
        typer.echo(f"noise multiplier = {z:.6g} for epsilon = {epsilon:g}, delta = {delta:g}")
