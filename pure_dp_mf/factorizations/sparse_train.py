"""A sparse trainer for base factorizations T_k = L·R (Arkhipov & Kalinin, arXiv 2607.08963, section 2.1).

Trained encoders are sparse: at k = 1024 and 2048 a column of R has about 6 entries above
10⁻³ of the largest, and zeroing the rest changes the cost by at most 0.03 %. This trainer keeps R
on such a support from the start and never forms a dense k×k product with it.

Support. R (k×k, square) is held as values on a set S of positions: the diagonal (always in S,
so that a start near the identity or a block-diagonal warm start stays invertible) and about
``support_per_column`` = s more entries per column, |S| = (s + 1)·k in all. The start takes, in
every column of the initial R, the diagonal and the s entries largest in magnitude among those
above ``prune_threshold`` × max|R| (none of a perturbed identity's noise; the large entries of a
warm start's blocks), and fills every column up to s + 1 with the positions of largest gradient,
as a regrowth does (at value 0, so the start's cost is that of the initial R restricted to S).

Decoder. L = T_k·R⁻¹ = cumsum over rows of X, X = R⁻¹, from a sparse LU of R
(``scipy.sparse.linalg.splu``: SuperLU with COLAMD ordering): X is one solve against the identity,
O(k·nnz(LU)) flops, and trained encoders factor with almost no fill. The backward pass is the
adjoint solve. With Ḡ = ∂f/∂L, dL = T·dX and dX = −X·dR·X, so

    df = ⟨Ḡ, T·dX⟩ = ⟨Tᵀ·Ḡ, −X·dR·X⟩ = ⟨−Xᵀ·(Tᵀ·Ḡ)·Xᵀ, dR⟩,   ∂f/∂R = −R⁻ᵀ·(Tᵀ·Ḡ)·R⁻ᵀ,

computed as X̄ = Tᵀ·Ḡ (a reversed cumulative sum), W = R⁻ᵀ·X̄ (solve Rᵀ·W = X̄) and
∂f/∂R = −W·Xᵀ. Adam needs it on S only: (∂f/∂R)_ij = −⟨W_i, X_j⟩ for (i, j) ∈ S, |S|·k flops.
A step is thus one sparse LU and two solves with k right-hand sides, O(k²·nnz(LU)/k), against
the dense trainer's k³ inversion and products. The whole ∂f/∂R = −(R⁻¹·Wᵀ)ᵀ (a third solve) is
formed only when the support is regrown, which ranks it.

Objective and optimiser. The same as the dense trainer's "pnorm" surrogate
(``pure_dp_mf.factorizations.train``): log ĉ = ½·smax_p(log ‖L_t‖²) + smax_p(log ‖R_{:,j}‖₁) for
MaxSE, ½·log(‖L‖_F²/k) + smax_p(log ‖R_{:,j}‖₁) for MeanSE, p annealed geometrically from p_start
to p_end, the learning rate from learning_rate to final_learning_rate, ‖R‖₁→₁ = 1 restored after
every step. Adam (torch's update, β = (0.9, 0.999), ε = 10⁻⁸) runs on the values, its moments
kept per position so that the support can change under it.

Prune and grow. Every ``prune_every`` steps, the off-diagonal entries with |R_ij| below
``prune_threshold`` × max|R| leave S, and every column is refilled to s + 1 entries with the
positions where the dense gradient |∂f/∂R| is largest in that column (Evci et al., "Rigging the
Lottery", ICML 2020), at value 0 with fresh Adam moments: the cost is unchanged by the swap.

Everything else is the dense trainer's: the divergence guard (a step to a singular R or to a cost
above ``guard_factor`` × the best is undone and the learning rate halved), the best true cost
tracked and written, R rounded to the grid 2^-32 with L = T_k·R⁻¹ recomputed in float64 (so
``certify`` accepts the file), warm starts from a factorization of T_m, m dividing k
(R = diag(B, …, B)), atomic checkpoints from which a resumed run continues bit for bit, and
SIGINT / SIGTERM ending the current step and saving. Only Adam steps: ``lbfgs_steps`` is not used.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, replace
from typing import Any, cast

import numpy as np

import pure_dp_mf
from pure_dp_mf.errors import InvalidInputError, PureDPMFError
from pure_dp_mf.factorizations.train import (
    MAX_REJECTIONS,
    RESUMED_SETTINGS,
    ProgressCallback,
    TrainResult,
    TrainSettings,
    _save_checkpoint,
    _schedule,
    check_settings,
    check_writable,
    initial_encoder,
    read_checkpoint,
    require_torch,
    run_steps,
    train_result,
)
from pure_dp_mf.validation import check_size

SPARSE_CHECKPOINT_FORMAT = "pure_dp_mf.sparse-train-checkpoint/1"
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@dataclass(frozen=True)
class SparseOptions:
    """The support: ``support_per_column`` entries per column besides the diagonal, pruned below
    ``prune_threshold`` × max|R| and regrown by the gradient every ``prune_every`` steps."""

    support_per_column: int = 6
    prune_every: int = 50
    prune_threshold: float = 1e-3

    def as_dict(self) -> dict:
        return asdict(self)


def check_sparse_options(options: SparseOptions, *, base_size: int) -> SparseOptions:
    """Validate the options (clear ``InvalidInputError``); s is capped at k − 1 (then S is dense)."""
    s = check_size(options.support_per_column, name="support_per_column", minimum=0)
    check_size(options.prune_every, name="prune_every", minimum=1)
    if not (0 <= options.prune_threshold < 1):
        raise InvalidInputError(f"prune_threshold must be a number in [0, 1), got {options.prune_threshold!r}")
    return replace(options, support_per_column=min(s, base_size - 1))


def _check_sparse_settings(settings: TrainSettings) -> TrainSettings:
    """``check_settings``, and refuse what the sparse trainer does not do."""
    settings = check_settings(settings)
    if settings.inner_size != settings.base_size:
        raise InvalidInputError("the sparse trainer needs a square encoder (inner_size = base_size)")
    if settings.surrogate != "pnorm":
        raise InvalidInputError(f"the sparse trainer supports surrogate 'pnorm' only, got {settings.surrogate!r}")
    if settings.device != "cpu":
        raise InvalidInputError("the sparse trainer runs on the cpu (scipy's sparse LU); device must be cpu")
    if settings.adam_precision != "float64":
        raise InvalidInputError("the sparse trainer runs in float64; adam_precision must be float64")
    return settings


# ------------------------------------------------------------------------------- the sparse decoder


def _csc(values: np.ndarray, rows: np.ndarray, columns: np.ndarray, k: int):
    from scipy.sparse import csc_matrix

    return csc_matrix((values, (rows, columns)), shape=(k, k))


def sparse_lu(values: np.ndarray, rows: np.ndarray, columns: np.ndarray, k: int):
    """SuperLU factors of R (the entries ``values`` at (``rows``, ``columns``)); RuntimeError if R is singular.

    Minimum-degree ordering of Rᵀ + R and threshold pivoting (a pivot within 10× of the column's largest
    entry, the diagonal preferred): on warm starts at k = 512–2048 the factors hold 2–3× fewer entries than
    with COLAMD and partial pivoting, and the solves are 2× faster (``benchmarks/bench_sparse_train.py``)."""
    from scipy.sparse.linalg import splu

    return splu(_csc(values, rows, columns, k), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.1)


def _row_dots(W: np.ndarray, X: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """(W·Xᵀ)[rows, columns], entry by entry, a block of positions at a time (|S|·k flops, no k³ product)."""
    k = W.shape[1]
    out = np.empty(rows.size)
    block = max(1, (1 << 16) // k)  # gathered blocks that stay in cache
    for start in range(0, rows.size, block):
        part = slice(start, start + block)
        out[part] = np.einsum("ij,ij->i", W[rows[part]], X[columns[part]])
    return out


def _make_decoder_function():
    import torch

    class SparseDecoder(torch.autograd.Function):
        """L = T_k·R⁻¹ from the values of R on its support; backward by the adjoint solve
        ∂f/∂R = −W·Xᵀ, W = R⁻ᵀ·(Tᵀ·Ḡ), X = R⁻¹ (module docstring), formed only on the support. With
        ``sink = {"dense": True}``, ``sink["dense_gradient"]`` receives the whole ∂f/∂R (numpy, k×k;
        one more solve, made only when the support is regrown)."""

        @staticmethod
        def forward(ctx, values, rows, columns, k, sink):  # type: ignore[override]
            lu = sparse_lu(values.detach().numpy(), rows, columns, k)
            X = np.ascontiguousarray(lu.solve(np.eye(k), trans="T").T)  # (R⁻ᵀ)ᵀ: SuperLU's transposed solve is faster
            if not np.all(np.isfinite(X)):
                raise RuntimeError("R is numerically singular")
            ctx.lu, ctx.X, ctx.rows, ctx.columns, ctx.sink = lu, X, rows, columns, sink
            return torch.from_numpy(np.cumsum(X, axis=0))

        @staticmethod
        def backward(ctx, decoder_gradient):  # type: ignore[override]
            G = decoder_gradient.detach().numpy()
            partial = np.cumsum(G, axis=0)
            X_bar = partial[-1] - partial + G  # Tᵀ·Ḡ: row i sums rows t ≥ i
            W = np.ascontiguousarray(ctx.lu.solve(X_bar, trans="T"))  # Rᵀ·W = X̄ (SuperLU answers column-major)
            if ctx.sink is not None and ctx.sink.get("dense"):
                ctx.sink["dense_gradient"] = -ctx.lu.solve(np.ascontiguousarray(W.T)).T  # −W·R⁻ᵀ = −(R⁻¹·Wᵀ)ᵀ
            return torch.from_numpy(-_row_dots(W, ctx.X, ctx.rows, ctx.columns)), None, None, None, None

    return SparseDecoder


_DECODER: Any = None


def sparse_decoder(values, rows: np.ndarray, columns: np.ndarray, k: int, sink: dict | None = None):
    """L = T_k·R⁻¹ (torch, k×k, float64) for R with ``values`` (a float64 torch vector) at
    (``rows``, ``columns``), differentiable in ``values`` through the sparse LU (``SparseDecoder``)."""
    global _DECODER
    if _DECODER is None:
        _DECODER = _make_decoder_function()
    return _DECODER.apply(values, rows, columns, k, sink)


def sparse_objective(values, rows: np.ndarray, columns: np.ndarray, *, k: int, metric: str, p: float, sink: dict | None = None):
    """(pnorm surrogate log-cost, true log-cost) of R given by its support values (see the module docstring)."""
    import torch

    L = sparse_decoder(values, rows, columns, k, sink)
    log_rows = torch.log((L * L).sum(dim=1))
    column_sums = torch.zeros(k, dtype=values.dtype).index_add(0, torch.from_numpy(columns), values.abs())
    log_columns = torch.log(column_sums)
    if metric == "maxse":
        true = 0.5 * log_rows.max() + log_columns.max()
        row_term = 0.5 * torch.logsumexp(p * log_rows, 0) / p
    else:
        true = 0.5 * (torch.logsumexp(log_rows, 0) - math.log(k)) + log_columns.max()
        row_term = 0.5 * (torch.logsumexp(log_rows, 0) - math.log(k))
    return row_term + torch.logsumexp(p * log_columns, 0) / p, true


# ------------------------------------------------------------------------------- support


def initial_support(R: np.ndarray, *, support_per_column: int, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of the diagonal and, in every column, the ``support_per_column`` largest other entries
    with |R_ij| ≥ ``threshold``·max|R| (ties to the lower row), sorted column-major. The trainer then fills
    the support up to its budget by the gradient (``prune_and_grow``)."""
    k = R.shape[0]
    magnitude = np.abs(R).copy()
    np.fill_diagonal(magnitude, -1.0)  # the diagonal is added separately
    order = np.argsort(-magnitude, axis=0, kind="stable")[:support_per_column]
    large = np.take_along_axis(magnitude, order, axis=0) >= threshold * np.abs(R).max()
    columns = np.broadcast_to(np.arange(k), order.shape)
    rows = np.concatenate([np.arange(k), order[large]])
    return _sorted(rows, np.concatenate([np.arange(k), columns[large]]), k)


def _sorted(rows: np.ndarray, columns: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(columns.astype(np.int64) * k + rows, kind="stable")
    return rows[order].astype(np.int64), columns[order].astype(np.int64)


def prune_and_grow(
    *,
    values: np.ndarray,
    rows: np.ndarray,
    columns: np.ndarray,
    dense_gradient: np.ndarray,
    per_column: int,
    threshold: float,
) -> np.ndarray:
    """The new support as flat indices (row·k + column), sorted column-major.

    Off-diagonal entries with |v| < ``threshold``·max|v| are dropped (the diagonal always stays);
    then every column with fewer than ``per_column`` entries takes the positions outside the
    support where |∂f/∂R| is largest in that column, until it has ``per_column``. The budget is
    per column: a global one collects, at a start near the identity, the whole budget in a few
    columns (the MeanSE gradient there is −T_kᵀ·T_k, largest in the first rows and columns)."""
    k = dense_gradient.shape[0]
    keep = (np.abs(values) >= threshold * np.abs(values).max()) | (rows == columns)
    kept_rows, kept_columns = rows[keep], columns[keep]
    deficit = np.maximum(per_column - np.bincount(kept_columns, minlength=k), 0)
    most = int(deficit.max())
    new_rows, new_columns = [kept_rows], [kept_columns]
    if most > 0:
        score = np.abs(dense_gradient)
        score[kept_rows, kept_columns] = -1.0
        top = np.argpartition(-score, most - 1, axis=0)[:most] if most < k else np.arange(k)[:, None].repeat(k, 1)
        top = np.take_along_axis(top, np.argsort(-np.take_along_axis(score, top, axis=0), axis=0, kind="stable"), axis=0)
        chosen = (np.arange(top.shape[0])[:, None] < deficit[None, :]) & (np.take_along_axis(score, top, axis=0) >= 0)
        new_rows.append(top[chosen])
        new_columns.append(np.broadcast_to(np.arange(k), top.shape)[chosen])
    sorted_rows, sorted_columns = _sorted(np.concatenate(new_rows), np.concatenate(new_columns), k)
    return sorted_rows * k + sorted_columns


# ------------------------------------------------------------------------------- run state


@dataclass
class _SparseRun:
    """What a checkpoint holds: support, values, Adam's moments and step count, the best encoder."""

    rows: np.ndarray
    columns: np.ndarray
    values: np.ndarray  # float64, on (rows, columns)
    first_moment: np.ndarray
    second_moment: np.ndarray
    adam_count: int
    step: int
    history: list[tuple[int, float]]
    elapsed: float
    best_log: float
    best_rows: np.ndarray
    best_columns: np.ndarray
    best_values: np.ndarray
    lr_scale: float = 1.0
    rejections: int = 0
    swaps: int = 0
    swapped_at: int = 0  # the step of the last prune-and-grow
    good: tuple | None = None  # (rows, columns, values, m, v, adam_count) before the last accepted step


def _dense(values: np.ndarray, rows: np.ndarray, columns: np.ndarray, k: int) -> np.ndarray:
    R = np.zeros((k, k))
    R[rows, columns] = values
    return R


def _normalised(values: np.ndarray, columns: np.ndarray, k: int) -> np.ndarray:
    """values / ‖R‖₁→₁ (the cost is scale invariant)."""
    sums = np.bincount(columns, weights=np.abs(values), minlength=k)
    return values / sums.max()


def _fresh_run(settings: TrainSettings, options: SparseOptions) -> _SparseRun:
    k = settings.base_size
    R0 = initial_encoder(settings, np.random.default_rng(settings.seed))
    rows, columns = initial_support(R0, support_per_column=options.support_per_column, threshold=options.prune_threshold)
    values = _normalised(R0[rows, columns], columns, k)
    zeros = np.zeros_like(values)
    run = _SparseRun(
        rows=rows,
        columns=columns,
        values=values,
        first_moment=zeros.copy(),
        second_moment=zeros.copy(),
        adam_count=0,
        step=0,
        history=[],
        elapsed=0.0,
        best_log=math.inf,
        best_rows=rows.copy(),
        best_columns=columns.copy(),
        best_values=values.copy(),
    )
    _swap_support(run, settings, options, threshold=0.0)  # fill the support by the gradient at the start
    run.best_rows, run.best_columns, run.best_values = run.rows.copy(), run.columns.copy(), run.values.copy()
    return run


def _snapshot(run: _SparseRun, settings: TrainSettings, options: SparseOptions) -> dict:
    import torch

    def tensor(array: np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(array).copy())

    return {
        "format": SPARSE_CHECKPOINT_FORMAT,
        "settings": settings.as_dict(),
        "sparse": options.as_dict(),
        "rows": tensor(run.rows),
        "columns": tensor(run.columns),
        "values": tensor(run.values),
        "first_moment": tensor(run.first_moment),
        "second_moment": tensor(run.second_moment),
        "adam_count": run.adam_count,
        "step": run.step,
        "history": torch.tensor(run.history, dtype=torch.float64).reshape(-1, 2),
        "elapsed": run.elapsed,
        "best_log": run.best_log,
        "best_rows": tensor(run.best_rows),
        "best_columns": tensor(run.best_columns),
        "best_values": tensor(run.best_values),
        "lr_scale": run.lr_scale,
        "rejections": run.rejections,
        "swaps": run.swaps,
        "swapped_at": run.swapped_at,
        "library_version": pure_dp_mf.__version__,
    }


def _restored(state: dict, k: int) -> _SparseRun:
    def array(name: str) -> np.ndarray:
        return state[name].numpy().copy()

    return _SparseRun(
        rows=array("rows"),
        columns=array("columns"),
        values=array("values"),
        first_moment=array("first_moment"),
        second_moment=array("second_moment"),
        adam_count=int(state["adam_count"]),
        step=int(state["step"]),
        history=[(int(a), float(b)) for a, b in state["history"].tolist()],
        elapsed=float(state["elapsed"]),
        best_log=float(state["best_log"]),
        best_rows=array("best_rows"),
        best_columns=array("best_columns"),
        best_values=array("best_values"),
        lr_scale=float(state["lr_scale"]),
        rejections=int(state["rejections"]),
        swaps=int(state["swaps"]),
        swapped_at=int(state["swapped_at"]),
    )


def load_sparse_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by ``train_sparse_factorization`` (clear error if it is not one)."""
    return read_checkpoint(
        path,
        checkpoint_format=SPARSE_CHECKPOINT_FORMAT,
        what="a pure_dp_mf sparse training checkpoint (train --sparse)",
    )


_RESUMED = tuple(name for name in RESUMED_SETTINGS if name not in ("lbfgs_steps", "adam_precision"))  # sparse: Adam, float64


def prepare_sparse_run(
    *,
    settings: TrainSettings,
    options: SparseOptions,
    out: str | os.PathLike | None = None,
    checkpoint: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
) -> tuple[TrainSettings, SparseOptions, dict | None]:
    """Check everything before any work; on resume the checkpoint's schedule and support options replace the given ones."""
    require_torch()
    settings = _check_sparse_settings(settings)
    options = check_sparse_options(options, base_size=settings.base_size)
    if out is not None:
        check_writable(out, name="output")
    if checkpoint is not None:
        check_writable(checkpoint, name="checkpoint")
    if resume is None:
        return settings, options, None
    state = load_sparse_checkpoint(resume)
    saved = state["settings"]
    for name in ("base_size", "metric"):
        if saved.get(name) != getattr(settings, name):
            raise InvalidInputError(
                f"checkpoint {resume} was made for {name} = {saved.get(name)!r}, this run has {getattr(settings, name)!r}"
            )
    settings = _check_sparse_settings(replace(settings, **{key: saved[key] for key in _RESUMED}))
    options = check_sparse_options(SparseOptions(**state["sparse"]), base_size=settings.base_size)
    return settings, options, state


# ------------------------------------------------------------------------------- steps


def _evaluate(run: _SparseRun, settings: TrainSettings, p: float, *, gradient: bool, dense: bool = False):
    """(surrogate, true log-cost, values tensor, sink); a singular R gives (None, inf, None, sink).
    ``dense``: the backward pass also leaves the whole ∂f/∂R in ``sink["dense_gradient"]``."""
    import torch

    values = torch.from_numpy(run.values.copy()).requires_grad_(gradient)
    sink: dict = {"dense": dense}
    try:
        loss, true = sparse_objective(values, run.rows, run.columns, k=settings.base_size, metric=settings.metric, p=p, sink=sink)
    except RuntimeError:  # SuperLU: "Factor is exactly singular", or a non-finite inverse
        return None, math.inf, None, sink
    current = float(true.detach())
    return loss, current, values, sink


def _adam_step(run: _SparseRun, settings: TrainSettings, options: SparseOptions) -> float | None:
    """One Adam step on the values (torch's Adam update), then the scale fixed; the log-cost before
    it, or None when the divergence guard undid the previous step."""
    fraction = run.step / max(settings.adam_steps - 1, 1)
    p = _schedule(settings.p_start, settings.p_end, fraction)
    learning_rate = run.lr_scale * _schedule(
        cast(float, settings.learning_rate), cast(float, settings.final_learning_rate), fraction
    )
    loss, current, values, sink = _evaluate(run, settings, p, gradient=True)
    if not math.isfinite(current) or current > run.best_log + math.log(settings.guard_factor):
        if run.good is None or run.rejections >= MAX_REJECTIONS:
            raise PureDPMFError(
                f"training diverged at step {run.step} (cost {current}) after {run.rejections} rejected steps; lower --learning-rate"
            )
        run.rows, run.columns, run.values, run.first_moment, run.second_moment, run.adam_count = run.good
        run.lr_scale, run.rejections, run.good = run.lr_scale / 2, run.rejections + 1, None
        return None
    loss.backward()
    g = values.grad.numpy()
    if current < run.best_log:
        run.best_log = current
        run.best_rows, run.best_columns, run.best_values = run.rows.copy(), run.columns.copy(), run.values.copy()
    run.good = (run.rows, run.columns, run.values.copy(), run.first_moment.copy(), run.second_moment.copy(), run.adam_count)
    beta1, beta2 = ADAM_BETAS
    run.adam_count += 1
    run.first_moment = beta1 * run.first_moment + (1 - beta1) * g
    run.second_moment = beta2 * run.second_moment + (1 - beta2) * g * g
    corrected = np.sqrt(run.second_moment / (1 - beta2**run.adam_count)) + ADAM_EPS
    step = learning_rate / (1 - beta1**run.adam_count)
    run.values = _normalised(run.values - step * run.first_moment / corrected, run.columns, settings.base_size)
    return current


def _swap_support(run: _SparseRun, settings: TrainSettings, options: SparseOptions, *, threshold: float | None = None) -> None:
    """Prune (below ``threshold``, default the options') and grow (module docstring); the gradient is taken
    at the current values, p at the schedule's."""
    k = settings.base_size
    fraction = run.step / max(settings.adam_steps - 1, 1)
    loss, current, values, sink = _evaluate(
        run, settings, _schedule(settings.p_start, settings.p_end, fraction), gradient=True, dense=True
    )
    if loss is None:
        return
    loss.backward()
    flat = prune_and_grow(
        values=run.values,
        rows=run.rows,
        columns=run.columns,
        dense_gradient=sink["dense_gradient"],
        per_column=options.support_per_column + 1,
        threshold=options.prune_threshold if threshold is None else threshold,
    )
    old = dict(zip((run.rows * k + run.columns).tolist(), range(run.rows.size), strict=True))
    where = np.array([old.get(int(f), -1) for f in flat])
    present = where >= 0

    def carried(array: np.ndarray) -> np.ndarray:
        new = np.zeros(flat.size)
        new[present] = array[where[present]]
        return new

    run.values, run.first_moment, run.second_moment = carried(run.values), carried(run.first_moment), carried(run.second_moment)
    run.rows, run.columns = flat // k, flat % k
    run.swaps += int((~present).sum())


def train_sparse_factorization(
    *,
    settings: TrainSettings,
    options: SparseOptions | None = None,
    out: str | os.PathLike | None = None,
    checkpoint: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    progress: ProgressCallback | None = None,
    stop_after: int | None = None,
    threads: int | None = None,
) -> TrainResult:
    """Minimise c₂ (metric "maxse") or c_F ("meanse") over T_k = L·R with R on a sparse support;
    see the module docstring. ``settings.adam_steps`` Adam steps (``lbfgs_steps`` is not used);
    ``out``, ``checkpoint``, ``resume``, ``progress``, ``stop_after`` and ``threads`` as for
    ``train_base_factorization``. The returned cost is the true c₂ / c_F of the written matrices,
    never above the start's (the start is the first candidate), up to the rounding of R to 2^-32.
    Research code: the only randomness is the seeded start."""
    options = SparseOptions() if options is None else options
    settings, options, state = prepare_sparse_run(
        settings=settings, options=options, out=out, checkpoint=checkpoint, resume=resume
    )
    if stop_after is not None:
        check_size(stop_after, name="stop_after", minimum=0)
    import torch

    if threads is not None:
        torch.set_num_threads(check_size(threads, name="threads"))
    k = settings.base_size
    run = _fresh_run(settings, options) if state is None else _restored(state, k)
    total = settings.adam_steps

    def step() -> float | None:
        if run.step > 0 and run.step % options.prune_every == 0 and run.swapped_at != run.step:
            _swap_support(run, settings, options)
            run.swapped_at = run.step
        return _adam_step(run, settings, options)

    interrupted = run_steps(
        run,
        step=step,
        total=total,
        base_size=k,
        stop_after=stop_after,
        progress=progress,
        checkpoint=checkpoint,
        checkpoint_every=settings.checkpoint_every,
        snapshot=lambda: _snapshot(run, settings, options),
    )
    interrupted = interrupted or run.step < total
    if checkpoint is not None:
        _save_checkpoint(checkpoint, _snapshot(run, settings, options))
    return _sparse_result(run=run, settings=settings, options=options, interrupted=interrupted, out=out)


def _sparse_result(
    *, run: _SparseRun, settings: TrainSettings, options: SparseOptions, interrupted: bool, out: str | os.PathLike | None
) -> TrainResult:
    """The best R found, rounded to the grid, as a factorization with its true costs (written to ``out``)."""

    made_by: dict[str, Any] = {
        "tool": "pure_dp_mf.train --sparse",
        "settings": settings.as_dict(),
        "sparse": options.as_dict(),
        "support_size": int(run.best_values.size),
        "support_swaps": run.swaps,
    }
    encoder = _dense(run.best_values, run.best_rows, run.best_columns, settings.base_size)
    return train_result(
        run,
        encoder=encoder,
        settings=settings,
        made_by=made_by,
        steps_planned=settings.adam_steps,
        interrupted=interrupted,
        out=out,
    )
