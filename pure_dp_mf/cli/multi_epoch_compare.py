"""``pure-dp-mf multi-epoch compare``: the loss table of Choquette-Choo et al. App. D.5 and the per-step variance plot.

Thin: parses, calls ``pure_dp_mf.gaussian.comparison``, prints.
"""

from __future__ import annotations

from pathlib import Path

import typer

from pure_dp_mf.atomic import check_writable_file
from pure_dp_mf.cli.app import console, print_json, print_table
from pure_dp_mf.cli.multi_epoch import multi_epoch_app
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.comparison import DENSE_LIMIT, Row, compare, plot_step_variance
from pure_dp_mf.gaussian.toeplitz import MAX_STEPS
from pure_dp_mf.validation import check_positive, check_size, parse_integer


def _stamps(text: str | None) -> list[int] | None:
    if text is None:
        return None
    values = [parse_integer(part, what="--stamps") for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise InvalidInputError(f"--stamps must list positive integers, got {text[:60]!r}")
    return values


_N = typer.Option(..., "--n", help="number of steps n = k·b")
_PARTICIPATIONS = typer.Option(..., "--participations", help="k: participations per example; b = n/k")
_NOISE_MULTIPLIER = typer.Option(None, "--noise-multiplier", help="z: report ε and the RMSE at this noise multiplier")
_DELTA = typer.Option(1e-6, "--delta", help="δ for ε")
_STAMPS = typer.Option(None, "--stamps", help="comma-separated numbers of stamps s to try (default: divisors of k)")
_OPTIMIZER = typer.Option(True, "--optimizer/--no-optimizer", help="include the optimizer's rows (O(n³) per iteration)")
_PARTICIPATION = typer.Option(
    "fixed-epoch",
    "--participation",
    help="fixed-epoch (participations exactly b = n/k apart) or min-sep (at most k, any two at least b apart)",
)
_DENSE = typer.Option(
    True, "--dense/--no-dense", help="include the dense mechanisms (optimizer, FFT, Honaker, stamping: O(n²) memory)"
)
_JSON = typer.Option(False, "--json", help="print the table as JSON")
_PLOT = typer.Option(None, "--plot", help="write the per-step noise variance plot (PNG/PDF) here")


@multi_epoch_app.command("compare")
def compare_command(
    n: int = _N,
    participations: int = _PARTICIPATIONS,
    noise_multiplier: float = _NOISE_MULTIPLIER,
    delta: float = _DELTA,
    stamps: str = _STAMPS,
    optimizer: bool = _OPTIMIZER,
    participation: str = _PARTICIPATION,
    dense: bool = _DENSE,
    as_json: bool = _JSON,
    plot: Path = _PLOT,
) -> None:
    """Total loss ‖B‖_F²·sens² and RMSE of every mechanism for prefix sums under (k,b)-participation."""
    epsilon = _epsilon(noise_multiplier=noise_multiplier, delta=delta)
    if participation not in ("fixed-epoch", "min-sep"):
        raise InvalidInputError(f"--participation must be fixed-epoch or min-sep, got {participation!r}")
    if plot is not None:
        check_writable_file(plot, name="--plot")
    n, participations = _checked_sizes(n=n, participations=participations, dense=dense)
    chosen_stamps = _stamps(stamps)
    rows = _compare(
        n=n,
        participations=participations,
        stamps=chosen_stamps,
        optimizer=optimizer,
        participation=participation,
        dense=dense,
        quiet=as_json,
    )
    b = n // participations
    if plot is not None:
        plot_step_variance(
            rows,
            str(plot),
            noise_multiplier=noise_multiplier or 1.0,
            title=f"per-step noise variance, n = {n}, (k, b) = ({participations}, {b})",
        )
    if as_json:
        print_json(
            {
                "n": n,
                "max_participations": participations,
                "participation": participation,
                "separation": b,
                "noise_multiplier": noise_multiplier,
                "delta": delta if epsilon is not None else None,
                "epsilon": epsilon,
                "rows": [row.as_dict(noise_multiplier=noise_multiplier) for row in rows],
                "plot": str(plot) if plot is not None else None,
            }
        )
        return
    title = f"prefix sums, n = {n}, {participation} participation, (k, b) = ({participations}, {b})"
    _print_loss_table(rows, title=title, noise_multiplier=noise_multiplier, epsilon=epsilon, delta=delta)
    if plot is not None:
        console.print(f"plot written to {plot}")


def _epsilon(*, noise_multiplier: float | None, delta: float) -> float | None:
    """ε at --noise-multiplier and --delta (None without a noise multiplier), once --delta is checked."""
    if not check_positive(delta, name="--delta") < 1:
        raise InvalidInputError(f"--delta must be in (0, 1), got {delta!r}")
    if noise_multiplier is None:
        return None
    from pure_dp_mf.gaussian.accounting import epsilon_for  # dp_accounting: only for this command

    return epsilon_for(noise_multiplier=noise_multiplier, delta=delta)


def _checked_sizes(*, n: int, participations: int, dense: bool) -> tuple[int, int]:
    """--n and --participations checked before anything of size n is allocated (the library checks them again)."""
    n = check_size(n, name="--n", maximum=MAX_STEPS)
    if dense and n > DENSE_LIMIT:
        raise InvalidInputError(
            f"--n {n}: the dense mechanisms (n×n matrices) are compared up to n = {DENSE_LIMIT}; add --no-dense "
            f"to compare the Toeplitz strategies alone (up to n = {MAX_STEPS})"
        )
    participations = check_size(participations, name="--participations", maximum=n)
    if n % participations:
        raise InvalidInputError(f"--n {n} is not a multiple of --participations {participations} (b = n/k)")
    return n, participations


def _compare(
    *, n: int, participations: int, stamps: list[int] | None, optimizer: bool, participation: str, dense: bool, quiet: bool
) -> list[Row]:
    """The rows of ``compare``, under a status line naming the mechanism being evaluated unless ``quiet``."""
    if quiet:
        return compare(
            n=n,
            max_participations=participations,
            stamps=stamps,
            include_optimizer=optimizer,
            participation=participation,
            dense=dense,
        )
    with console.status("comparing mechanisms") as status:
        return compare(
            n=n,
            max_participations=participations,
            stamps=stamps,
            include_optimizer=optimizer,
            progress=lambda name: status.update(f"comparing mechanisms: {name}"),
            participation=participation,
            dense=dense,
        )


def _print_loss_table(
    rows: list[Row], *, title: str, noise_multiplier: float | None, epsilon: float | None, delta: float
) -> None:
    """Print the rows as the loss table; the RMSE at --noise-multiplier (1 by default)."""
    z = noise_multiplier or 1.0
    if epsilon is not None:
        title += f": every row is ({epsilon:.4g}, {delta:g})-DP at noise multiplier {z:g}"
    print_table(
        title,
        ("mechanism", "best s", "sens²", "sensitivity method", "‖B‖_F²", "loss", f"RMSE (z = {z:g})", "seconds"),
        [
            (
                r.loss.name,
                r.stamps,
                r.loss.sensitivity_squared,
                r.loss.sensitivity_method,
                r.loss.decoder_frobenius_squared,
                r.loss.loss,
                z * r.loss.rmse,
                r.seconds,
            )
            for r in rows
        ],
    )


@multi_epoch_app.command("check-strategy")
def check_strategy_command(
    strategy_file: Path = typer.Argument(
        ..., help="Toeplitz coefficients (.npy, .npz, text/CSV, JSON) or a BLT (JSON/.npz with buf_decay, output_scale)"
    ),
    n: int = typer.Option(..., "--n", help="number of steps n"),
    participations: int = typer.Option(..., "--participations", help="k: at most k participations"),
    separation: int = typer.Option(None, "--separation", help="b: steps between participations (default n/k)"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Loss and sensitivity of a Toeplitz or BLT strategy from another library, under both schemas."""
    from pure_dp_mf.gaussian.toeplitz import read_strategy, strategy_report

    n = check_size(n, name="--n", maximum=MAX_STEPS)  # before any vector of n steps
    participations = check_size(participations, name="--participations", maximum=n)
    if separation is None:
        if n % participations:
            raise InvalidInputError(f"--participations {participations} does not divide --n {n}; give --separation")
        separation = n // participations
    separation = check_size(separation, name="--separation", maximum=n)
    report = strategy_report(read_strategy(strategy_file, n=n), max_participations=participations, separation=separation)
    if as_json:
        print_json(report)
        return
    rows = []
    for name, entry in report["schemas"].items():
        if "not_applicable" in entry:
            rows.append((name, "n/a", entry["not_applicable"], "", "", ""))
        else:
            rows.append(
                (name, entry["sensitivity_squared"], entry["method"], entry["loss"], entry["mean_loss"], entry["max_loss"])
            )
    print_table(
        f"{report['strategy']}: n = {n}, (k, b) = ({participations}, {separation}), ‖B‖_F² = "
        f"{report['decoder_frobenius_squared']:.6g}, max variance {report['max_variance']:.6g}",
        ("participation", "sens²", "method", "loss sens²·‖B‖_F²", "mean loss (/n)", "max loss"),
        rows,
    )
