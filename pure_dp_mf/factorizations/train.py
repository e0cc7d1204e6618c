"""Base factorizations T_k = L·R found numerically (Arkhipov & Kalinin, arXiv 2607.08963, section 2.1, Table 2).

Parametrisation. We optimise only the encoder R (s×k, s = ``inner_size`` ≥ k, square by
default) and take the decoder L = T_k·R⁺, i.e. L = T_k·R⁻¹ for square R (one LU solve of
Rᵀ·Lᵀ = T_kᵀ) and L = T_k·(RᵀR)⁻¹·Rᵀ otherwise. For a fixed R every row ℓ_t of L solves
ℓ_t·R = (T_k)_t with minimal ℓ2 norm, so this L minimises every row norm at once: it is the
optimal decoder for both ‖L‖₂→∞ (MaxSE) and ‖L‖_F (MeanSE), and the search runs over R alone
with L·R = T_k holding to rounding error throughout.

Objective. The costs c₂ = ‖L‖₂→∞·‖R‖₁→₁ and c_F = ‖L‖_F·‖R‖₁→₁/√k are invariant under
R → R/c (L → c·L); we fix the scale ‖R‖₁→₁ = 1 after every step, which changes no cost. The
maxima are non-smooth (at an optimum many rows and columns tie), so Adam minimises the log of
a smooth surrogate,

    log ĉ = ½·smax_p(log ‖L_t‖²) + smax_p(log ‖R_{:,j}‖₁)         (MaxSE)
    log ĉ = ½·log(‖L‖_F²/k)      + smax_p(log ‖R_{:,j}‖₁)         (MeanSE)

with smax_p(v) = logsumexp(p·v)/p, which lies in [max v, max v + log(k)/p]: the log of a p-norm
of the row norms / column sums. The exponent p is annealed geometrically from ``p_start`` to
``p_end`` (the surrogate tends to the true cost) while the learning rate decays geometrically
from ``learning_rate`` (default min(0.05, 0.64/k)) to ``final_learning_rate`` (default 1/1000
of it); L-BFGS (strong Wolfe line search) then polishes at p = ``p_end``. ``surrogate="exact"`` minimises the true log-cost instead (max and
absolute values through their subgradients: the paper's plain procedure, our baseline).
``surrogate="projected"`` treats the column term as what it is, the constraint ‖R‖₁→₁ ≤ 1:
after every step each column of R is projected (in ℓ2) onto the unit ℓ1 ball (Duchi, Shalev-Shwartz,
Singer & Chandra, ICML 2008: soft thresholding at the θ that makes the column's ℓ1 norm 1), and
only the row term is minimised: ½·log(‖L‖_F²/k) exactly for MeanSE (no surrogate left at all),
½·smax_p(log ‖L_t‖²) for MaxSE. The p-norm column term is biased: ‖v‖_p ≤ k^{1/p}·‖v‖_∞, so its
optimum can sit up to a factor k^{1/p} above the true one (0.34 % in c at k = 1024, p = 2048); the
projection has no such bias, which is what a fine-tune of a converged base needs. With it the
polish phase (``lbfgs_steps``) is projected gradient descent with Armijo backtracking along the
projection arc, monotone in the surrogate, instead of L-BFGS (whose quasi-Newton steps ignore the
constraint). The projection zeroes entries (soft thresholding): the k = 1024 MeanSE base polished
this way has over 99 % of its encoder entries exactly zero.

Every reported cost is the true c₂ / c_F of actual matrices, never the surrogate: the trainer
tracks the best true cost seen, and the returned factorization holds R rounded to the dyadic
grid 2^-32 with L = T_k·R⁻¹ recomputed in float64, its costs computed on exactly those matrices.

Precision and the divergence guard. ``adam_precision="float32"`` evaluates the objective and its
gradient in float32 during the Adam phase (the parameter, Adam's moments and the checkpoints stay
float64; L-BFGS always runs in float64): at k = 1024 a step is then about twice as fast. The
guard: a step after which the true cost exceeds ``guard_factor`` × the best cost so far (or is
not finite: R singular, L = T·R⁻¹ exploding) is undone, parameter and Adam moments both, and the
learning rate is halved for the rest of the run; after ``MAX_REJECTIONS`` such steps the run
stops with an error. In the L-BFGS phase a rejected step returns to the best encoder with a
fresh L-BFGS memory.

Initialisations (``init``): "identity" (R = I, L = T_k, plus a seeded perturbation),
"toeplitz" (R = L = the Toeplitz square root of T_k, coefficients binom(2j, j)/4^j), and
"file" (warm start from a square factorization A·B = T_m with m dividing k, for example the
shipped base of size k/2: R = diag(B, …, B), for which L = T_k·R⁻¹ has, in block b, the rows
[a, …, a, A_i, 0, …] with a the last row of A, see ``block_warm_start``).

Checkpoints (torch.save, written atomically) hold the parameter, both optimisers' states, the
step, the best encoder and the history; randomness (a seeded numpy generator) is drawn only
for the initial R, so this is the whole state, and a resumed run continues bit for bit like an
uninterrupted one. Ctrl-C saves a checkpoint and the best factorization found so far.
"""

from __future__ import annotations

import io
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

import pure_dp_mf
from pure_dp_mf import published
from pure_dp_mf.atomic import atomic_write_bytes, check_writable_file
from pure_dp_mf.errors import FactorizationFileError, InvalidInputError, PureDPMFError
from pure_dp_mf.exact import GRID_BITS, round_to_grid
from pure_dp_mf.factorizations.costs import leading_constant
from pure_dp_mf.factorizations.factorization import METRICS, Factorization, file_sha256
from pure_dp_mf.factorizations.workloads import toeplitz_square_root
from pure_dp_mf.validation import check_positive, check_size

INITS = ("identity", "toeplitz", "file")
SURROGATES = ("pnorm", "exact", "projected")
PRECISIONS = ("float64", "float32")
MAX_REJECTIONS = 40
PGD_FIRST_STEP = 1e-4  # first step of the projected-gradient polish (adapted by backtracking)
CHECKPOINT_FORMAT = "pure_dp_mf.train-checkpoint/1"

# Arkhipov & Kalinin, Table 2: 2C₂² (MaxSE) and 2C_F² (MeanSE) of the numerically optimised T_k = L·R.
PAPER_TABLE_2 = {k: row[:2] for k, row in published.TABLE2.items()}


def paper_target(*, base_size: int, metric: str) -> float | None:
    """Table 2's leading constant for ``base_size`` and ``metric`` (None where not listed)."""
    row = PAPER_TABLE_2.get(base_size)
    return None if row is None else row[METRICS.index(metric)]


@dataclass(frozen=True)
class TrainSettings:
    """Everything that determines a training run (recorded in checkpoints and output metadata)."""

    base_size: int
    metric: str
    inner_size: int | None = None
    adam_steps: int = 50_000
    lbfgs_steps: int = 300
    learning_rate: float | None = None
    final_learning_rate: float | None = None
    p_start: float = 16.0
    p_end: float = 2048.0
    surrogate: str = "pnorm"
    init: str = "identity"
    init_file: str | None = None
    init_noise: float = 1e-2
    seed: int = 0
    device: str = "cpu"
    checkpoint_every: int = 1000
    adam_precision: str = "float64"
    guard_factor: float = 2.0

    def as_dict(self) -> dict:
        return asdict(self)


def default_learning_rate(base_size: int) -> float:
    """min(0.05, 0.64/k). Adam's first steps move every entry of R by about the learning rate,
    so a column (ℓ1 norm 1) moves by up to k·lr: 0.64/k keeps that below one. Larger rates
    wrecked k = 64 (lr 0.02) and k = 256 (lr 0.005) runs; smaller ones were slower (k = 4 … 256)."""
    return min(0.05, 0.64 / base_size)


def polish_settings(
    *, base_size: int, metric: str, init_file: str, steps: int, p: float = 8192.0, checkpoint_every: int = 10
) -> TrainSettings:
    """The projected polish of a trained base of the same k: ``steps`` projected-gradient steps,
    no Adam, no perturbation, at the surrogate's exact exponent p (no annealing).

    Each step is R ← P(R − t·∇f(R)), f the "projected" surrogate (½·smax_p(log ‖L_t‖²) for
    MaxSE, ½·log(‖L‖_F²/k) for MeanSE, L = T_k·R⁻¹) and P the Euclidean projection of every column
    onto the unit ℓ1 ball, with t halved until the Armijo condition f(R') ≤ f(R) + 10⁻⁴·⟨∇f, R' − R⟩
    holds and doubled after: f never rises, ‖R‖₁→₁ ≤ 1 throughout, and the start (loaded without
    perturbation) is itself a candidate, so the returned true cost c₂ / c_F is never above the
    start's (up to the rounding of R to the 2^-32 grid). The MaxSE surrogate lies within
    ½·log(k)/p above the true log-cost: 0.05 % in c at k = 2048 and p = 8192, 0.19 % at p = 2048.
    """
    return TrainSettings(
        base_size=base_size,
        metric=metric,
        adam_steps=0,
        lbfgs_steps=steps,
        p_start=p,
        p_end=p,
        surrogate="projected",
        init="file",
        init_file=init_file,
        init_noise=0.0,
        checkpoint_every=checkpoint_every,
    )


def check_settings(settings: TrainSettings) -> TrainSettings:
    """Validate every setting (clear ``InvalidInputError``); returns them with inner_size filled."""
    k = check_size(settings.base_size, name="base_size", minimum=2)
    if settings.metric not in METRICS:
        raise InvalidInputError(f"unknown metric {settings.metric!r}; expected one of {', '.join(METRICS)}")
    s = k if settings.inner_size is None else check_size(settings.inner_size, name="inner_size", minimum=1)
    if s < k:
        raise InvalidInputError(f"inner_size must be at least base_size = {k} (R must have rank k), got {s}")
    check_size(settings.adam_steps, name="adam_steps", minimum=0)
    check_size(settings.lbfgs_steps, name="lbfgs_steps", minimum=0)
    check_size(settings.checkpoint_every, name="checkpoint_every", minimum=1)
    check_size(settings.seed, name="seed", minimum=0)
    learning_rate = default_learning_rate(k) if settings.learning_rate is None else settings.learning_rate
    final_learning_rate = learning_rate / 1000 if settings.final_learning_rate is None else settings.final_learning_rate
    settings = replace(settings, learning_rate=learning_rate, final_learning_rate=final_learning_rate)
    for name in ("learning_rate", "final_learning_rate", "p_start", "p_end"):
        check_positive(getattr(settings, name), name=name)
    if not (settings.init_noise >= 0 and math.isfinite(settings.init_noise)):
        raise InvalidInputError(f"init_noise must be a finite number >= 0, got {settings.init_noise!r}")
    if settings.surrogate not in SURROGATES:
        raise InvalidInputError(f"unknown surrogate {settings.surrogate!r}; expected one of {', '.join(SURROGATES)}")
    if settings.init not in INITS:
        raise InvalidInputError(f"unknown init {settings.init!r}; expected one of {', '.join(INITS)}")
    if (settings.init == "file") != (settings.init_file is not None):
        raise InvalidInputError('init "file" needs an init_file, and an init_file needs init "file"')
    if settings.init_file is not None:
        source = Factorization.load(settings.init_file)
        if k % source.n or source.inner_size != source.n:
            raise InvalidInputError(
                f"init_file {settings.init_file} factorizes T_{source.n} with inner size {source.inner_size}; "
                f"a warm start needs a square factorization of T_m with m dividing base_size = {k}"
            )
        if s != k:
            raise InvalidInputError("a warm start from a file needs a square target (inner_size = base_size)")
    if settings.adam_precision not in PRECISIONS:
        raise InvalidInputError(f"unknown adam_precision {settings.adam_precision!r}; expected one of {', '.join(PRECISIONS)}")
    if not (settings.guard_factor > 1 and math.isfinite(settings.guard_factor)):
        raise InvalidInputError(f"guard_factor must be a finite number > 1, got {settings.guard_factor!r}")
    if settings.device not in ("cpu", "cuda"):
        raise InvalidInputError(f"unknown device {settings.device!r}; expected cpu or cuda")
    if settings.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InvalidInputError("device cuda was asked for but torch sees no CUDA device; use --device cpu")
    return replace(settings, base_size=k, inner_size=s)


def check_writable(path: str | os.PathLike, *, name: str) -> Path:
    """Refuse, before any work, an output path that cannot be written (``atomic.check_writable_file``)."""
    return check_writable_file(path, name=name)


# ------------------------------------------------------------------------------- matrices


def block_warm_start(encoder: np.ndarray, k: int) -> np.ndarray:
    """R = diag(B, …, B) (k/m blocks) for a square factorization A·B = T_m with m dividing k.

    Blockwise, row i of block b of T_k is [𝟙ᵀ, …, 𝟙ᵀ, (T_m)_i, 0, …] and 𝟙ᵀ·B⁻¹ = a, the last
    row of A, so L = T_k·R⁻¹ has the rows [a, …, a, A_i, 0, …]: ‖R‖₁→₁ = ‖B‖₁→₁ and the row
    norms grow to (b−1)‖a‖² + ‖A_i‖². A start that is exact, not optimal.
    """
    m = encoder.shape[0]
    if encoder.shape != (m, m) or k % m:
        raise InvalidInputError(f"a block warm start needs a square m×m encoder with m dividing k = {k}, got {encoder.shape}")
    return np.kron(np.eye(k // m), encoder)


def initial_encoder(settings: TrainSettings, generator: np.random.Generator) -> np.ndarray:
    """The start R (s×k) of a run: identity, Toeplitz square root or a warm start, plus noise."""
    k, s = settings.base_size, settings.inner_size or settings.base_size
    if settings.init == "identity":
        R = np.eye(s, k)
    elif settings.init == "toeplitz":
        R = np.vstack([toeplitz_square_root(k), np.zeros((s - k, k))])
    else:
        source = Factorization.load(cast(str, settings.init_file))
        B = source.dense()[1]
        R = block_warm_start(B / np.abs(B).sum(axis=0).max(), k)
    R = R / np.abs(R).sum(axis=0).max()
    return R + settings.init_noise * generator.standard_normal((s, k)) / k


def factorization_from_encoder(encoder: np.ndarray, *, metadata: dict) -> Factorization:
    """(T_k·R⁺, R) in float64 for R rounded to the grid; square R gives L = T_k·R⁻¹."""
    R = round_to_grid(encoder, grid_bits=GRID_BITS)[0]
    if R.shape[0] == R.shape[1]:
        return Factorization.from_encoder(R, metadata=metadata)
    k = R.shape[1]
    L = np.linalg.solve(R.T @ R, np.tri(k).T).T @ R.T
    return Factorization(decoder=L, encoder=R, metadata=metadata)


# ------------------------------------------------------------------------------- objective


class _Objective:
    """log of the true cost and of its surrogate, with L = T_k·R⁺ (see the module docstring)."""

    def __init__(self, settings: TrainSettings, torch_module, device):
        self.torch = torch_module
        self.k, self.s = settings.base_size, settings.inner_size
        self.metric = settings.metric
        self.exact = settings.surrogate == "exact"
        self.projected = settings.surrogate == "projected"
        self.T = torch_module.tril(torch_module.ones(self.k, self.k, dtype=torch_module.float64, device=device))
        self.log_k = math.log(self.k)

    def decoder(self, R):
        """L = T_k·R⁻¹ = cumsum(R⁻¹) over rows (T_k sums rows 1…t); non-square: T_k·(RᵀR)⁻¹Rᵀ.

        For square R one inversion (getrf + getri, 2k³ flops) and, backward, two products
        −R⁻ᵀ·Ĝ·R⁻ᵀ (4k³). In float64 it is as fast as a solve against T_kᵀ on two threads (1.14×
        slower on one); in float32 torch's solve is slow and the inversion is what makes the
        float32 phase pay: 0.094 s a step on one thread, 0.048 s on two, against 0.129 s for the
        float64 solve (k = 1024, ``benchmarks/bench_train.py --step-time 1024``)."""
        torch = self.torch
        if self.s == self.k:
            return torch.cumsum(torch.linalg.inv(R), dim=0)
        T = self.T.to(R.dtype)
        return torch.linalg.solve(R.T @ R, T.T).T @ R.T

    def __call__(self, R, p: float):
        """(surrogate log-cost to minimise, true log-cost), both as tensors."""
        torch = self.torch
        L = self.decoder(R)
        log_rows = torch.log((L * L).sum(dim=1))
        log_columns = torch.log(R.abs().sum(dim=0))
        if self.metric == "maxse":
            true = 0.5 * log_rows.max() + log_columns.max()
        else:
            true = 0.5 * (torch.logsumexp(log_rows, 0) - self.log_k) + log_columns.max()
        if self.exact:
            return true, true
        # "projected": the columns are held in the unit ℓ1 ball by projection, not by a penalty.
        column_term = 0.0 if self.projected else torch.logsumexp(p * log_columns, 0) / p
        if self.metric == "maxse":
            surrogate = 0.5 * torch.logsumexp(p * log_rows, 0) / p + column_term
        else:
            surrogate = 0.5 * (torch.logsumexp(log_rows, 0) - self.log_k) + column_term
        return surrogate, true


def project_columns_to_l1_ball(R) -> None:
    """Project every column of the torch matrix R (in place) onto {v : ‖v‖₁ ≤ 1}, the Euclidean
    projection of Duchi et al. (ICML 2008, Figure 1): for a column with ‖v‖₁ > 1, u = |v| sorted
    decreasingly, ρ = max{j : u_j > (Σ_{i≤j} u_i − 1)/j}, θ = (Σ_{i≤ρ} u_i − 1)/ρ, and
    v ← sign(v)·max(|v| − θ, 0). Columns already inside the ball are left as they are."""
    import torch

    with torch.no_grad():
        norms = R.abs().sum(dim=0)
        over = torch.nonzero(norms > 1).flatten()
        if over.numel() == 0:
            return
        columns = R[:, over]
        u = torch.sort(columns.abs(), dim=0, descending=True).values
        excess = torch.cumsum(u, dim=0) - 1
        j = torch.arange(1, u.shape[0] + 1, dtype=u.dtype, device=u.device).unsqueeze(1)
        rho = (u > excess / j).sum(dim=0)  # the condition holds exactly for j ≤ ρ (u decreasing)
        theta = excess.gather(0, (rho - 1).unsqueeze(0)).squeeze(0) / rho.to(u.dtype)
        R[:, over] = torch.sign(columns) * torch.clamp(columns.abs() - theta, min=0)


def true_cost_to_constant(log_cost: float, *, base_size: int) -> float:
    """2C² = 2·c²/log₂(k)³ from log c (``costs.leading_constant`` of the error 2c²)."""
    return leading_constant(2.0 * math.exp(2.0 * log_cost), n=base_size)


# ------------------------------------------------------------------------------- training


@dataclass
class TrainResult:
    """The returned factorization (rounded R), the history of true constants and how it ended."""

    factorization: Factorization
    history: list[tuple[int, float]] = field(default_factory=list)
    steps_done: int = 0
    interrupted: bool = False
    wall_time: float = 0.0
    rejected_steps: int = 0


ProgressCallback = Callable[[int, int, float, float], None]


def _copy_state(state):
    """A deep copy of an optimiser's state dict (tensors cloned), for the divergence guard."""
    import copy

    return copy.deepcopy(state)


def _schedule(start: float, end: float, fraction: float) -> float:
    return start * (end / start) ** min(max(fraction, 0.0), 1.0)


def _save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by ``train_base_factorization`` (clear error if it is not one)."""
    return read_checkpoint(path, checkpoint_format=CHECKPOINT_FORMAT, what="a pure_dp_mf training checkpoint")


def read_checkpoint(path: str | os.PathLike, *, checkpoint_format: str, what: str) -> dict:
    """A training checkpoint of ``checkpoint_format`` at ``path`` (the dense or the sparse
    trainer's), refused in one ``FactorizationFileError`` naming ``what`` it is not."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FactorizationFileError(f"checkpoint {path}: no such file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types for foreign or corrupt files
        raise FactorizationFileError(f"checkpoint {path}: unreadable ({type(error).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != checkpoint_format:
        raise FactorizationFileError(f"checkpoint {path}: not {what}")
    return state


def check_resume(path: str | os.PathLike, settings: TrainSettings) -> dict:
    """The checkpoint at ``path``, refused unless it was made for the same k, metric and inner size."""
    state = load_checkpoint(path)
    saved = state["settings"]
    for name in ("base_size", "metric", "inner_size", "surrogate"):
        if saved.get(name) != getattr(settings, name):
            raise InvalidInputError(
                f"checkpoint {path} was made for {name} = {saved.get(name)!r}, this run has {getattr(settings, name)!r}"
            )
    return state


def require_torch() -> None:
    """Refuse, with one clear error, to train without torch (an optional extra)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InvalidInputError(
            "training needs torch: pip install 'torch==2.13.0' (the CPU wheel; or pip install '.[train]' from a checkout)"
        ) from None


def prepare_run(
    *,
    settings: TrainSettings,
    out: str | os.PathLike | None = None,
    checkpoint: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
) -> tuple[TrainSettings, dict | None]:
    """Check everything a run needs before any work: settings, writable outputs, the resume file.

    Returns the settings to use (on resume, the checkpoint's schedule, seed and initialisation
    replace the given ones) and the checkpoint state (None for a fresh run).
    """
    require_torch()
    settings = check_settings(settings)
    if out is not None:
        check_writable(out, name="output")
    if checkpoint is not None:
        check_writable(checkpoint, name="checkpoint")
    if resume is None:
        return settings, None
    state = check_resume(resume, settings)
    saved = {key: state["settings"].get(key, getattr(settings, key)) for key in RESUMED_SETTINGS}
    return check_settings(replace(settings, **saved)), state


LBFGS_OPTIONS: dict[str, Any] = dict(
    lr=1.0,
    max_iter=1,
    history_size=50,
    line_search_fn="strong_wolfe",
    tolerance_grad=1e-14,
    tolerance_change=1e-16,
)

RESUMED_SETTINGS = (
    "adam_steps",
    "lbfgs_steps",
    "learning_rate",
    "final_learning_rate",
    "p_start",
    "p_end",
    "init",
    "init_file",
    "init_noise",
    "seed",
    "adam_precision",
    "guard_factor",
)


@dataclass
class _RunState:
    """The mutable state of a run: what a checkpoint holds, plus the divergence guard's last good point."""

    parameter: Any  # the encoder R being optimised (torch tensor, float64, requires_grad)
    adam: Any  # torch.optim.Adam over ``parameter``
    lbfgs: Any  # torch.optim.LBFGS over ``parameter`` (replaced, memory cleared, after a rejected step)
    step: int
    history: list[tuple[int, float]]
    elapsed: float
    best_log: float
    best_R: np.ndarray
    lr_scale: float = 1.0
    rejections: int = 0
    pgd_step: float = PGD_FIRST_STEP
    good: tuple | None = None  # (parameter, Adam state) before the last accepted Adam step


def _start_state(*, settings: TrainSettings, state: dict | None, device: Any) -> _RunState:
    """A fresh run's state (seeded initial R) or the one restored from checkpoint ``state``."""
    import torch

    if state is None:
        generator = np.random.default_rng(settings.seed)
        R0 = initial_encoder(settings, generator)
        parameter = torch.tensor(R0, dtype=torch.float64, device=device, requires_grad=True)
        step, history, elapsed = 0, [], 0.0
        best_log, best_R = math.inf, R0.copy()
    else:
        parameter = state["parameter"].to(device).clone().requires_grad_(True)
        step, elapsed = int(state["step"]), float(state["elapsed"])
        history = [(int(a), float(b)) for a, b in state["history"].tolist()]
        best_log, best_R = float(state["best_log"]), state["best_encoder"].numpy().copy()

    learning_rate = cast(float, settings.learning_rate)
    adam = torch.optim.Adam([parameter], lr=learning_rate)
    lbfgs = torch.optim.LBFGS([parameter], **LBFGS_OPTIONS)
    run = _RunState(
        parameter=parameter,
        adam=adam,
        lbfgs=lbfgs,
        step=step,
        history=history,
        elapsed=elapsed,
        best_log=best_log,
        best_R=best_R,
    )
    if state is not None:
        adam.load_state_dict(state["adam"])
        lbfgs.load_state_dict(state["lbfgs"])
        run.lr_scale, run.rejections = float(state.get("lr_scale", 1.0)), int(state.get("rejections", 0))
        run.pgd_step = float(state.get("pgd_step", PGD_FIRST_STEP))
    return run


def _snapshot(*, run: _RunState, settings: TrainSettings) -> dict:
    """The checkpoint of ``run`` (``CHECKPOINT_FORMAT``)."""
    import torch

    return {
        "format": CHECKPOINT_FORMAT,
        "settings": settings.as_dict(),
        "parameter": run.parameter.detach().cpu().clone(),
        "adam": run.adam.state_dict(),
        "lbfgs": run.lbfgs.state_dict(),
        "step": run.step,
        "elapsed": run.elapsed,
        "history": torch.tensor(run.history, dtype=torch.float64).reshape(-1, 2),
        "best_log": run.best_log,
        "best_encoder": torch.from_numpy(run.best_R.copy()),
        "lr_scale": run.lr_scale,
        "rejections": run.rejections,
        "pgd_step": run.pgd_step,
        "library_version": pure_dp_mf.__version__,
    }


def _normalise(*, run: _RunState, settings: TrainSettings) -> None:
    """Fix the scale after a step: ‖R‖₁→₁ = 1, or project the columns onto the ℓ1 ball ("projected")."""
    import torch

    if settings.surrogate == "projected":
        project_columns_to_l1_ball(run.parameter)
        return
    with torch.no_grad():
        run.parameter.div_(run.parameter.abs().sum(dim=0).max())


def _evaluate(*, objective: _Objective, run: _RunState, p: float, dtype: Any) -> tuple:
    """(surrogate, true log-cost as a float); a singular R counts as an infinite cost."""
    try:
        loss, true = objective(run.parameter.to(dtype), p)
    except RuntimeError:  # torch.linalg.inv on an exactly singular matrix
        return None, math.inf
    return loss, float(true.detach())


def _rejected(*, run: _RunState, settings: TrainSettings, current: float) -> bool:
    """Whether the divergence guard refuses a step that reached log-cost ``current``."""
    return not math.isfinite(current) or current > run.best_log + math.log(settings.guard_factor)


def _best_candidate(*, run: _RunState, current: float) -> np.ndarray | None:
    """A copy of the current R when its log-cost ``current`` beats the best so far, else None."""
    return run.parameter.detach().cpu().numpy().copy() if current < run.best_log else None


def _adam_step(*, run: _RunState, settings: TrainSettings, objective: _Objective) -> tuple[float, np.ndarray | None] | None:
    """One Adam step on the annealed surrogate: (log-cost, R if best) or None when the guard undid a step."""
    import torch

    learning_rate, final_learning_rate = cast(float, settings.learning_rate), cast(float, settings.final_learning_rate)
    fraction = run.step / max(settings.adam_steps - 1, 1)
    p = _schedule(settings.p_start, settings.p_end, fraction)
    for group in run.adam.param_groups:
        group["lr"] = run.lr_scale * _schedule(learning_rate, final_learning_rate, fraction)
    run.adam.zero_grad(set_to_none=True)
    adam_dtype = torch.float32 if settings.adam_precision == "float32" else torch.float64
    loss, current = _evaluate(objective=objective, run=run, p=p, dtype=adam_dtype)
    if _rejected(run=run, settings=settings, current=current):
        # Divergence guard: the last step blew the cost up (L = T·R⁻¹ near singular).
        # Undo it (parameter and Adam moments), halve the learning rate, retry.
        if run.good is None or run.rejections >= MAX_REJECTIONS:
            raise PureDPMFError(
                f"training diverged at step {run.step} (cost {current}) after {run.rejections} rejected steps; lower --learning-rate"
            )
        with torch.no_grad():
            run.parameter.copy_(run.good[0])
        run.adam.load_state_dict(run.good[1])
        run.lr_scale, run.rejections = run.lr_scale / 2, run.rejections + 1
        run.good = None
        return None
    loss.backward()
    R_now = _best_candidate(run=run, current=current)
    run.good = (run.parameter.detach().clone(), _copy_state(run.adam.state_dict()))
    run.adam.step()
    _normalise(run=run, settings=settings)
    return current, R_now


def _projected_step(*, run: _RunState, settings: TrainSettings, objective: _Objective) -> tuple[float, np.ndarray | None]:
    """One projected-gradient polish step with Armijo backtracking: (log-cost, R if best)."""
    import torch

    # Projected gradient with backtracking (L-BFGS would not respect the constraint):
    # R ← P(R − t·g), accepted when the surrogate drops by at least 10⁻⁴·⟨g, ΔR⟩
    # (Armijo along the projection arc), t halved until it does and doubled after.
    parameter = run.parameter
    parameter.grad = None
    loss, true = objective(parameter, settings.p_end)
    loss.backward()
    gradient = cast(Any, parameter.grad)
    with torch.no_grad():
        value, trial, current = float(loss), parameter.detach().clone(), float(true.detach())
        while run.pgd_step > 1e-30:
            trial = parameter - run.pgd_step * gradient
            project_columns_to_l1_ball(trial)
            try:
                trial_loss, trial_true = objective(trial, settings.p_end)
            except RuntimeError:  # an exactly singular trial R: too long a step
                run.pgd_step /= 2
                continue
            if float(trial_loss) <= value + 1e-4 * float((gradient * (trial - parameter)).sum()):
                current = float(trial_true)  # the true cost at the accepted R (no second evaluation)
                break
            run.pgd_step /= 2
        else:  # no descent step left: stay
            trial = parameter.detach().clone()
        parameter.copy_(trial)
        run.pgd_step = min(2 * run.pgd_step, 1e6)
    return current, _best_candidate(run=run, current=current)


def _lbfgs_step(*, run: _RunState, settings: TrainSettings, objective: _Objective) -> tuple[float, np.ndarray | None] | None:
    """One L-BFGS polish step at p_end: (log-cost, R if best) or None when the guard went back to the best R."""
    import torch

    p = settings.p_end
    parameter, lbfgs = run.parameter, run.lbfgs

    def closure():
        lbfgs.zero_grad(set_to_none=True)
        loss, _ = objective(parameter, p)
        loss.backward()
        return loss

    try:
        lbfgs.step(closure)
    except RuntimeError:  # singular R inside the line search
        pass
    _normalise(run=run, settings=settings)
    with torch.no_grad():
        current = _evaluate(objective=objective, run=run, p=p, dtype=torch.float64)[1]
    if _rejected(run=run, settings=settings, current=current):
        if run.rejections >= MAX_REJECTIONS:
            raise PureDPMFError(f"L-BFGS diverged at step {run.step} (cost {current})")
        with torch.no_grad():  # back to the best encoder, with a fresh L-BFGS memory
            parameter.copy_(torch.from_numpy(run.best_R).to(torch.device(settings.device)))
        run.lbfgs = torch.optim.LBFGS([parameter], **LBFGS_OPTIONS)
        run.rejections += 1
        return None
    return current, _best_candidate(run=run, current=current)


def _train_steps(
    *,
    run: _RunState,
    settings: TrainSettings,
    objective: _Objective,
    checkpoint: str | os.PathLike | None,
    stop_after: int | None,
    progress: ProgressCallback | None,
) -> bool:
    """Run the Adam, then the polish steps until done, ``stop_after``, a signal or a ``KeyboardInterrupt``
    from ``progress`` (True then), checkpointing every ``checkpoint_every`` steps; adds the time to ``run.elapsed``."""

    def step() -> float | None:
        if run.step < settings.adam_steps:
            outcome = _adam_step(run=run, settings=settings, objective=objective)
        elif settings.surrogate == "projected":
            outcome = _projected_step(run=run, settings=settings, objective=objective)
        else:
            outcome = _lbfgs_step(run=run, settings=settings, objective=objective)
        if outcome is None:  # rejected by the divergence guard
            return None
        current, R_now = outcome
        if R_now is not None:
            run.best_log, run.best_R = current, R_now
        return current

    return run_steps(
        run,
        step=step,
        total=settings.adam_steps + settings.lbfgs_steps,
        base_size=settings.base_size,
        stop_after=stop_after,
        progress=progress,
        checkpoint=checkpoint,
        checkpoint_every=settings.checkpoint_every,
        snapshot=lambda: _snapshot(run=run, settings=settings),
    )


def run_steps(
    run: Any,
    *,
    step: Any,
    total: int,
    base_size: int,
    stop_after: int | None,
    progress: ProgressCallback | None,
    checkpoint: str | os.PathLike | None,
    checkpoint_every: int,
    snapshot: Any,
) -> bool:
    """The training loop of both trainers: ``step()`` (the cost's log after the step, or None when
    the divergence guard rejected it: tried again) until ``run.step`` reaches ``total``,
    ``stop_after``, SIGINT/SIGTERM (the current step ends first) or a ``KeyboardInterrupt`` from
    ``progress`` (then True); the history every 50 steps, a checkpoint (``snapshot()``) every
    ``checkpoint_every`` steps, the time added to ``run.elapsed``. ``run`` has ``step``,
    ``history``, ``best_log`` and ``elapsed``."""
    interrupted = False
    started = time.perf_counter()
    last_checkpoint = run.step
    stop_signals: list[int] = []
    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():  # Ctrl-C / SIGTERM end the current step first
        for number in (signal.SIGINT, signal.SIGTERM):
            previous_handlers[number] = signal.signal(number, lambda signum, frame: stop_signals.append(signum))
    try:
        while run.step < total and (stop_after is None or run.step < stop_after) and not stop_signals:
            current = step()
            if current is None:  # rejected by the divergence guard: retry
                continue
            run.step += 1
            if run.step % 50 == 0 or run.step == total:
                run.history.append((run.step, true_cost_to_constant(current, base_size=base_size)))
            if progress is not None:
                progress(
                    run.step,
                    total,
                    true_cost_to_constant(current, base_size=base_size),
                    true_cost_to_constant(run.best_log, base_size=base_size),
                )
            if checkpoint is not None and run.step - last_checkpoint >= checkpoint_every:
                elapsed_now = run.elapsed + time.perf_counter() - started
                run.elapsed, started = elapsed_now, time.perf_counter()
                _save_checkpoint(checkpoint, snapshot())
                last_checkpoint = run.step
    except KeyboardInterrupt:  # raised by a progress callback
        interrupted = True
    finally:
        for number, handler in previous_handlers.items():
            signal.signal(number, handler)
    run.elapsed += time.perf_counter() - started
    return interrupted


def _train_result(*, run: _RunState, settings: TrainSettings, interrupted: bool, out: str | os.PathLike | None) -> TrainResult:
    """The best R found as a factorization on the grid (costs and provenance in its metadata), written to ``out``."""
    made_by = {"tool": "pure_dp_mf.train", "settings": settings.as_dict()}
    return train_result(
        run,
        encoder=run.best_R,
        settings=settings,
        made_by=made_by,
        steps_planned=settings.adam_steps + settings.lbfgs_steps,
        interrupted=interrupted,
        out=out,
    )


def train_result(
    run: Any,
    *,
    encoder: np.ndarray,
    settings: TrainSettings,
    made_by: dict[str, Any],
    steps_planned: int,
    interrupted: bool,
    out: str | os.PathLike | None,
) -> TrainResult:
    """The factorization of the best ``encoder`` (R on the grid) of either trainer, its true costs
    and provenance (``made_by`` first, then the run's figures) in its metadata, written to ``out``."""
    import torch

    k = settings.base_size
    made_by = {
        **made_by,
        "steps_done": run.step,
        "steps_planned": steps_planned,
        "rejected_steps": run.rejections,
        "finished": not interrupted,
        "wall_time_seconds": round(run.elapsed, 3),
        "library_version": pure_dp_mf.__version__,
        "torch_version": torch.__version__,
        "encoder_grid": f"2^-{GRID_BITS}",
    }
    if settings.init_file is not None and Path(settings.init_file).is_file():  # which file was warm-started or polished
        made_by["init_file_sha256"] = file_sha256(settings.init_file)
    metadata: dict[str, Any] = {"metric": settings.metric, "base_size": k, "made_by": made_by}
    factorization = factorization_from_encoder(encoder, metadata=metadata)
    costs = factorization.costs()
    metadata["costs"] = {
        "c2": costs.c2,
        "cf": costs.cf,
        "max_se_constant": costs.max_se_constant,
        "mean_se_constant": costs.mean_se_constant,
        "residual": factorization.residual(),
        "paper_table_2": paper_target(base_size=k, metric=settings.metric),
    }
    factorization.metadata = metadata
    if out is not None:
        factorization.save(out, store_decoder=factorization.inner_size != factorization.n)
    return TrainResult(
        factorization=factorization,
        history=run.history,
        steps_done=run.step,
        interrupted=interrupted,
        wall_time=run.elapsed,
        rejected_steps=run.rejections,
    )


def train_base_factorization(
    *,
    settings: TrainSettings,
    out: str | os.PathLike | None = None,
    checkpoint: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    progress: ProgressCallback | None = None,
    stop_after: int | None = None,
    threads: int | None = None,
) -> TrainResult:
    """Minimise c₂ (metric "maxse") or c_F ("meanse") over T_k = L·R; see the module docstring.

    ``out``: write the best factorization (R on the 2^-32 grid, no decoder stored when square).
    ``checkpoint``: write the training state there every ``settings.checkpoint_every`` steps,
    at the end and on interruption (SIGINT / SIGTERM, which end the current step first, or a
    ``KeyboardInterrupt`` raised by ``progress``); an interrupted run still writes ``out``. ``resume``: continue from such a checkpoint (same k, metric,
    inner size, surrogate; the other settings come from the checkpoint). ``stop_after``: stop
    (with a checkpoint) after this many total steps, as an interruption would. ``progress`` is
    called as progress(step, total, current constant, best constant). All inputs are checked
    before any work starts. Uses only a seeded generator: this is research code, not noise.
    """
    settings, state = prepare_run(settings=settings, out=out, checkpoint=checkpoint, resume=resume)
    if stop_after is not None:
        check_size(stop_after, name="stop_after", minimum=0)

    import torch

    if threads is not None:
        torch.set_num_threads(check_size(threads, name="threads"))
    device = torch.device(settings.device)
    objective = _Objective(settings, torch, device)
    total = settings.adam_steps + settings.lbfgs_steps
    run = _start_state(settings=settings, state=state, device=device)
    if state is None and settings.init == "file" and settings.init_noise == 0:
        # A fine-tune (a polish above all) never returns worse than its start: the start is a candidate.
        with torch.no_grad():
            start = _evaluate(objective=objective, run=run, p=settings.p_end, dtype=torch.float64)[1]
        if math.isfinite(start):
            run.best_log, run.best_R = start, run.parameter.detach().cpu().numpy().copy()
    interrupted = _train_steps(
        run=run, settings=settings, objective=objective, checkpoint=checkpoint, stop_after=stop_after, progress=progress
    )
    if run.step < total:
        interrupted = True
    if checkpoint is not None:
        _save_checkpoint(checkpoint, _snapshot(run=run, settings=settings))
    return _train_result(run=run, settings=settings, interrupted=interrupted, out=out)
