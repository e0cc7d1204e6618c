"""``pure-dp-mf train``: find a base factorization T_k = L·R (Arkhipov & Kalinin, section 2.1)."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from pure_dp_mf.cli.app import app, console, print_json, print_table
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.factorizations.matrix_files import MAX_ENTRIES
from pure_dp_mf.factorizations.sparse_train import SparseOptions, prepare_sparse_run, train_sparse_factorization
from pure_dp_mf.factorizations.train import TrainResult, TrainSettings, polish_settings, prepare_run, train_base_factorization
from pure_dp_mf.validation import check_size

MAX_BASE_SIZE = 8192
"""Largest k trained: every step holds several k×k float64 matrices (T_k, R, its gradient, Adam's two
moments, L-BFGS's history), 512 MiB each at k = 8192, and a file of more than 8192² = 2^26 entries
could not be read back (``matrix_files.MAX_ENTRIES``)."""
MAX_THREADS = 1024


_BASE_SIZE = typer.Option(..., "--base-size", help="k: factorize the k×k prefix-sum matrix T_k")
_METRIC = typer.Option(..., "--metric", help="maxse (minimise c₂) or meanse (minimise c_F)")
_OUT = typer.Option(..., "--out", help="output factorization file (.npz)")
_INNER_SIZE = typer.Option(None, "--inner-size", help="s ≥ k: columns of L / rows of R (default k)")
_ADAM_STEPS = typer.Option(50_000, "--adam-steps", help="Adam steps (paper: 50 000)")
_LBFGS_STEPS = typer.Option(300, "--lbfgs-steps", help="L-BFGS steps after Adam (paper: 300)")
_SEED = typer.Option(0, "--seed", help="seed of the initial perturbation (research seed, not for noise)")
_DEVICE = typer.Option("cpu", "--device", help="cpu or cuda (cuda only when torch sees one)")
_INIT = typer.Option(
    "identity", "--init", help="identity, toeplitz, or a square factorization file of T_m, m dividing k, to warm-start from"
)
_LEARNING_RATE = typer.Option(
    None, "--learning-rate", help="initial Adam learning rate, R having ‖R‖₁→₁ = 1 (default min(0.05, 0.64/k))"
)
_FINAL_LEARNING_RATE = typer.Option(
    None, "--final-learning-rate", help="Adam learning rate at the last step, geometric decay (default: learning rate/1000)"
)
_P_START = typer.Option(16.0, "--p-start", help="initial exponent of the smooth max (p-norm) surrogate")
_P_END = typer.Option(2048.0, "--p-end", help="final exponent of the surrogate (also used by L-BFGS)")
_INIT_NOISE = typer.Option(
    0.01, "--init-noise", help="Gaussian perturbation of the start, entries N(0, (σ/k)²) (0 to fine-tune a trained base)"
)
_SURROGATE = typer.Option(
    "pnorm",
    "--surrogate",
    help="pnorm (annealed smooth max), exact (plain true cost) or projected (columns projected onto the unit ℓ1 ball, no column surrogate)",
)
_ADAM_PRECISION = typer.Option(
    "float64",
    "--adam-precision",
    help="float64 or float32: precision of the Adam phase's objective (L-BFGS is always float64)",
)
_POLISH = typer.Option(
    None,
    "--polish",
    help="projected polish: this many projected-gradient steps at p = --p-end from --init FILE of the same k "
    "(no Adam, no perturbation; --adam-steps, --lbfgs-steps, --surrogate, --init-noise, --p-start not used)",
)
_SPARSE = typer.Option(
    False,
    "--sparse/--dense",
    help="sparse trainer: R on a support of --support-per-column entries per column plus the diagonal, pruned and "
    "regrown every --prune-every steps, L = T_k·R⁻¹ by sparse LU (Adam only: --lbfgs-steps not used)",
)
_SUPPORT_PER_COLUMN = typer.Option(6, "--support-per-column", help="--sparse: entries per column of R besides the diagonal")
_PRUNE_EVERY = typer.Option(50, "--prune-every", help="--sparse: steps between prune-and-grow of the support")
_CHECKPOINT = typer.Option(None, "--checkpoint", help="checkpoint file (default: OUT with suffix .ckpt)")
_CHECKPOINT_EVERY = typer.Option(1000, "--checkpoint-every", help="steps between checkpoints")
_RESUME = typer.Option(None, "--resume", help="continue from this checkpoint (same k, metric, inner size)")
_THREADS = typer.Option(None, "--threads", help="torch CPU threads (default: torch's choice)")
_PROGRESS = typer.Option(True, "--progress/--no-progress", help="show a progress bar")
_JSON = typer.Option(False, "--json", help="print the result and the cost history as JSON")


@app.command()
def train(
    base_size: int = _BASE_SIZE,
    metric: str = _METRIC,
    out: Path = _OUT,
    inner_size: int = _INNER_SIZE,
    adam_steps: int = _ADAM_STEPS,
    lbfgs_steps: int = _LBFGS_STEPS,
    seed: int = _SEED,
    device: str = _DEVICE,
    init: str = _INIT,
    learning_rate: float = _LEARNING_RATE,
    final_learning_rate: float = _FINAL_LEARNING_RATE,
    p_start: float = _P_START,
    p_end: float = _P_END,
    init_noise: float = _INIT_NOISE,
    surrogate: str = _SURROGATE,
    adam_precision: str = _ADAM_PRECISION,
    polish: int = _POLISH,
    sparse: bool = _SPARSE,
    support_per_column: int = _SUPPORT_PER_COLUMN,
    prune_every: int = _PRUNE_EVERY,
    checkpoint: Path = _CHECKPOINT,
    checkpoint_every: int = _CHECKPOINT_EVERY,
    resume: Path = _RESUME,
    threads: int = _THREADS,
    progress: bool = _PROGRESS,
    as_json: bool = _JSON,
) -> None:
    """Train L·R = T_k minimising c₂ or c_F; write the best factorization (R on the 2^-32 grid) to OUT.

    Checkpoints every --checkpoint-every steps. Ctrl-C (or SIGTERM) finishes the current step,
    saves a checkpoint and the best factorization so far and exits with code 130; --resume
    continues exactly where the run stopped.
    """
    _check_sizes(base_size=base_size, inner_size=inner_size, threads=threads)
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
    if polish is not None:
        if sparse:
            raise InvalidInputError("--polish and --sparse cannot be combined: the polish is a dense trainer phase")
        settings = _polish(settings=settings, steps=polish)
    options = SparseOptions(support_per_column=support_per_column, prune_every=prune_every) if sparse else None
    if options is not None:
        settings = replace(settings, lbfgs_steps=0)
    checkpoint = _prepare(settings=settings, out=out, checkpoint=checkpoint, resume=resume, options=options)
    result = _train_with_progress(
        settings=settings,
        out=out,
        checkpoint=checkpoint,
        resume=resume,
        threads=threads,
        disable=not progress or as_json,
        options=options,
    )
    _report(result, out=out, checkpoint=checkpoint, metric=metric, as_json=as_json)


def _check_sizes(*, base_size: int, inner_size: int | None, threads: int | None) -> None:
    """Refuse a --base-size, --inner-size or --threads out of range, before anything is allocated."""
    check_size(base_size, name="--base-size", minimum=2, maximum=MAX_BASE_SIZE)  # T_k, R and Adam's state: k×k each
    if inner_size is not None:
        check_size(inner_size, name="--inner-size", minimum=1, maximum=MAX_ENTRIES // base_size)
    if threads is not None:
        check_size(threads, name="--threads", maximum=MAX_THREADS)


def _polish(*, settings: TrainSettings, steps: int) -> TrainSettings:
    """The ``--polish STEPS`` run: ``polish_settings`` from --init FILE, which must factorize T_k itself."""
    check_size(steps, name="--polish", minimum=1)
    if settings.init_file is None:
        raise InvalidInputError("--polish needs --init FILE, a trained factorization of the same --base-size")
    source = Factorization.load(settings.init_file)
    if source.n != settings.base_size:
        raise InvalidInputError(
            f"--polish needs --init FILE of the same --base-size: {settings.init_file} factorizes T_{source.n}, "
            f"--base-size is {settings.base_size}"
        )
    polished = polish_settings(
        base_size=settings.base_size,
        metric=settings.metric,
        init_file=settings.init_file,
        steps=steps,
        p=settings.p_end,
        checkpoint_every=settings.checkpoint_every,
    )
    return replace(polished, inner_size=settings.inner_size, seed=settings.seed, device=settings.device)


def _prepare(
    *, settings: TrainSettings, out: Path, checkpoint: Path | None, resume: Path | None, options: SparseOptions | None = None
) -> Path:
    """The checkpoint file (default: OUT with suffix .ckpt), after the checks of ``prepare_run`` (``prepare_sparse_run``
    under --sparse; errors naming the flags)."""
    checkpoint = checkpoint if checkpoint is not None else out.with_suffix(".ckpt")
    try:  # every error before any work
        if options is None:
            prepare_run(settings=settings, out=out, checkpoint=checkpoint, resume=resume)
        else:
            prepare_sparse_run(settings=settings, options=options, out=out, checkpoint=checkpoint, resume=resume)
    except InvalidInputError as error:  # the library names its arguments; say the flags as typed
        raise InvalidInputError(_as_flags(str(error))) from None
    return checkpoint


def _train_with_progress(
    *,
    settings: TrainSettings,
    out: Path,
    checkpoint: Path,
    resume: Path | None,
    threads: int | None,
    disable: bool,
    options: SparseOptions | None = None,
) -> TrainResult:
    """``train_base_factorization`` (``train_sparse_factorization`` with ``options``) under a progress bar (none when ``disable``)."""
    columns = (
        TextColumn(f"k={settings.base_size} {settings.metric}{' sparse' if options is not None else ''}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("2C² {task.fields[current]:.5f}  best {task.fields[best]:.5f}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, disable=disable, transient=False) as bar:
        task = bar.add_task("train", total=settings.adam_steps + settings.lbfgs_steps, current=float("nan"), best=float("nan"))

        plain = not disable and not console.is_terminal  # a log file: a line every 10 steps, not a bar drawn at the end
        started = time.monotonic()

        def report(step: int, total: int, current: float, best: float) -> None:
            if step % 10 == 0 or step == total:
                bar.update(task, completed=step, total=total, current=current, best=best)
                if plain:
                    print(
                        f"step {step}/{total}  2C² {current:.7f}  best {best:.7f}  {time.monotonic() - started:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )

        if options is not None:
            return train_sparse_factorization(
                settings=settings,
                options=options,
                out=out,
                checkpoint=checkpoint,
                resume=resume,
                progress=report,
                threads=threads,
            )
        return train_base_factorization(
            settings=settings, out=out, checkpoint=checkpoint, resume=resume, progress=report, threads=threads
        )


def _report(result: TrainResult, *, out: Path, checkpoint: Path, metric: str, as_json: bool) -> None:
    """Print the trained factorization's record (with its cost history under --json); exit 130 when interrupted."""
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
    names = sorted({f.name for f in (*fields(TrainSettings), *fields(SparseOptions))}, key=len, reverse=True)
    return re.sub(r"\b(" + "|".join(names) + r")\b", lambda match: "--" + match.group(1).replace("_", "-"), message)
