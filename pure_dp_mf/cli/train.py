"""``pure-dp-mf train``: find a base factorization T_k = L·R (Arkhipov & Kalinin, section 2.1)."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from pure_dp_mf.cli.app import app, console, print_json, print_table
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.matrix_files import MAX_ENTRIES
from pure_dp_mf.factorizations.train import TrainSettings, prepare_run, train_base_factorization
from pure_dp_mf.validation import check_size

MAX_BASE_SIZE = 8192
"""Largest k trained: every step holds several k×k float64 matrices (T_k, R, its gradient, Adam's two
moments, L-BFGS's history), 512 MiB each at k = 8192, and a file of more than 8192² = 2^26 entries
could not be read back (``matrix_files.MAX_ENTRIES``)."""
MAX_THREADS = 1024


@app.command()
def train(
    base_size: int = typer.Option(..., "--base-size", help="k: factorize the k×k prefix-sum matrix T_k"),
    metric: str = typer.Option(..., "--metric", help="maxse (minimise c₂) or meanse (minimise c_F)"),
    out: Path = typer.Option(..., "--out", help="output factorization file (.npz)"),
    inner_size: int = typer.Option(None, "--inner-size", help="s ≥ k: columns of L / rows of R (default k)"),
    adam_steps: int = typer.Option(50_000, "--adam-steps", help="Adam steps (paper: 50 000)"),
    lbfgs_steps: int = typer.Option(300, "--lbfgs-steps", help="L-BFGS steps after Adam (paper: 300)"),
    seed: int = typer.Option(0, "--seed", help="seed of the initial perturbation (research seed, not for noise)"),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda (cuda only when torch sees one)"),
    init: str = typer.Option(
        "identity", "--init", help="identity, toeplitz, or a square factorization file of T_m, m dividing k, to warm-start from"
    ),
    learning_rate: float = typer.Option(
        None, "--learning-rate", help="initial Adam learning rate, R having ‖R‖₁→₁ = 1 (default min(0.05, 0.64/k))"
    ),
    final_learning_rate: float = typer.Option(
        None, "--final-learning-rate", help="Adam learning rate at the last step, geometric decay (default: learning rate/1000)"
    ),
    p_start: float = typer.Option(16.0, "--p-start", help="initial exponent of the smooth max (p-norm) surrogate"),
    p_end: float = typer.Option(2048.0, "--p-end", help="final exponent of the surrogate (also used by L-BFGS)"),
    init_noise: float = typer.Option(
        0.01, "--init-noise", help="Gaussian perturbation of the start, entries N(0, (σ/k)²) (0 to fine-tune a trained base)"
    ),
    surrogate: str = typer.Option(
        "pnorm",
        "--surrogate",
        help="pnorm (annealed smooth max), exact (plain true cost) or projected (columns projected onto the unit ℓ1 ball, no column surrogate)",
    ),
    adam_precision: str = typer.Option(
        "float64",
        "--adam-precision",
        help="float64 or float32: precision of the Adam phase's objective (L-BFGS is always float64)",
    ),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="checkpoint file (default: OUT with suffix .ckpt)"),
    checkpoint_every: int = typer.Option(1000, "--checkpoint-every", help="steps between checkpoints"),
    resume: Path = typer.Option(None, "--resume", help="continue from this checkpoint (same k, metric, inner size)"),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads (default: torch's choice)"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show a progress bar"),
    as_json: bool = typer.Option(False, "--json", help="print the result and the cost history as JSON"),
) -> None:
    """Train L·R = T_k minimising c₂ or c_F; write the best factorization (R on the 2^-32 grid) to OUT.

    Checkpoints every --checkpoint-every steps. Ctrl-C (or SIGTERM) finishes the current step,
    saves a checkpoint and the best factorization so far and exits with code 130; --resume
    continues exactly where the run stopped.
    """
    check_size(base_size, name="--base-size", minimum=2, maximum=MAX_BASE_SIZE)  # T_k, R and Adam's state: k×k each
    if inner_size is not None:
        check_size(inner_size, name="--inner-size", minimum=1, maximum=MAX_ENTRIES // base_size)
    if threads is not None:
        check_size(threads, name="--threads", maximum=MAX_THREADS)
    warm = init not in ("identity", "toeplitz")
    settings = TrainSettings(
        base_size=base_size,
        metric=metric,
        inner_size=inner_size,
        adam_steps=adam_steps,
        lbfgs_steps=lbfgs_steps,
        learning_rate=learning_rate,
        final_learning_rate=final_learning_rate,
        p_start=p_start,
        p_end=p_end,
        surrogate=surrogate,
        init="file" if warm else init,
        init_file=init if warm else None,
        init_noise=init_noise,
        seed=seed,
        device=device,
        checkpoint_every=checkpoint_every,
        adam_precision=adam_precision,
    )
    checkpoint = checkpoint if checkpoint is not None else out.with_suffix(".ckpt")
    try:
        prepare_run(settings=settings, out=out, checkpoint=checkpoint, resume=resume)  # every error before any work
    except InvalidInputError as error:  # the library names its arguments; say the flags as typed
        raise InvalidInputError(_as_flags(str(error))) from None
    columns = (
        TextColumn(f"k={base_size} {metric}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("2C² {task.fields[current]:.5f}  best {task.fields[best]:.5f}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, disable=not progress or as_json, transient=False) as bar:
        task = bar.add_task("train", total=adam_steps + lbfgs_steps, current=float("nan"), best=float("nan"))

        def report(step: int, total: int, current: float, best: float) -> None:
            if step % 10 == 0 or step == total:
                bar.update(task, completed=step, total=total, current=current, best=best)

        result = train_base_factorization(
            settings=settings, out=out, checkpoint=checkpoint, resume=resume, progress=report, threads=threads
        )
    costs = result.factorization.metadata["costs"]
    record = {
        "out": str(out),
        "checkpoint": str(checkpoint),
        "base_size": result.factorization.n,
        "inner_size": result.factorization.inner_size,
        "metric": metric,
        "steps_done": result.steps_done,
        "interrupted": result.interrupted,
        "wall_time_seconds": result.wall_time,
        **costs,
    }
    if as_json:
        print_json({**record, "history": [{"step": s, "constant": c} for s, c in result.history]})
    else:
        print_table(f"trained {out}", ["quantity", "value"], list(record.items()))
    if result.interrupted:
        console.print(f"interrupted: best factorization saved to {out}; continue with --resume {checkpoint}")
        raise typer.Exit(130)


def _as_flags(message: str) -> str:
    """``message`` with every TrainSettings field name (base_size, …) written as its flag (--base-size)."""
    names = sorted((f.name for f in fields(TrainSettings)), key=len, reverse=True)
    return re.sub(r"\b(" + "|".join(names) + r")\b", lambda match: "--" + match.group(1).replace("_", "-"), message)
