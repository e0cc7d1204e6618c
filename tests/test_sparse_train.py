"""Tests of the sparse trainer (``train --sparse``): the adjoint-solve gradient, runs against dense
training, certification of its output, checkpoint and resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from pure_dp_mf.certificates.certify import certify_factorization, verify_certificate
from pure_dp_mf.cli import all_commands
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.factorizations.sparse_train import (
    SparseOptions,
    initial_support,
    load_sparse_checkpoint,
    prune_and_grow,
    sparse_objective,
    train_sparse_factorization,
)
from pure_dp_mf.factorizations.train import TrainSettings, train_base_factorization
from pure_dp_mf.resources import BASE_FOLDER

KEY = {"maxse": "max_se_constant", "meanse": "mean_se_constant"}


def random_support(k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A well-conditioned sparse R (diagonal plus 3 random entries a column): rows, columns, values."""
    rng = np.random.default_rng(seed)
    R = np.eye(k) * 2 + rng.standard_normal((k, k)) * (rng.random((k, k)) < 0.3)
    rows, columns = initial_support(R, support_per_column=3, threshold=0.0)
    return rows, columns, R[rows, columns]


def dense_objective(R, *, metric: str, p: float):
    """The same surrogate with L = cumsum(R⁻¹) by torch's dense inverse (autograd through it)."""
    k = R.shape[0]
    L = torch.cumsum(torch.linalg.inv(R), dim=0)
    log_rows = torch.log((L * L).sum(dim=1))
    log_columns = torch.log(R.abs().sum(dim=0))
    row_term = (
        0.5 * torch.logsumexp(p * log_rows, 0) / p if metric == "maxse" else 0.5 * (torch.logsumexp(log_rows, 0) - math.log(k))
    )
    return row_term + torch.logsumexp(p * log_columns, 0) / p


@pytest.mark.parametrize("k", [8, 12, 16])
@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_sparse_backward_equals_dense_autograd(k, metric):
    rows, columns, R_values = random_support(k, seed=k)
    values = torch.tensor(R_values, requires_grad=True)
    sink: dict = {"dense": True}
    loss, _ = sparse_objective(values, rows, columns, k=k, metric=metric, p=64.0, sink=sink)
    loss.backward()

    dense_values = torch.tensor(R_values, requires_grad=True)
    R = torch.zeros(k, k, dtype=torch.float64).index_put((torch.from_numpy(rows), torch.from_numpy(columns)), dense_values)
    R.retain_grad()
    reference = dense_objective(R, metric=metric, p=64.0)
    reference.backward()

    assert float(loss.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
    scale = float(dense_values.grad.abs().max())
    assert np.abs(values.grad.numpy() - dense_values.grad.numpy()).max() <= 1e-10 * scale
    # Off the support the column term's subgradient is 0 (|x|' at 0), so the whole gradient there
    # is the decoder's −R⁻ᵀ·(Tᵀ·Ḡ)·R⁻ᵀ, the one the regrowth ranks.
    off = np.ones((k, k), dtype=bool)
    off[rows, columns] = False
    assert np.abs(sink["dense_gradient"][off] - R.grad.numpy()[off]).max() <= 1e-10 * scale
    assert np.abs(R.grad.numpy()[off]).max() > 1e-3 * scale  # a real check, not zeros against zeros


def test_prune_and_grow_keeps_diagonal_and_fills_columns_by_gradient():
    k = 6
    rows = np.array([0, 3, 1, 2, 4, 3, 4, 5])
    columns = np.array([0, 0, 1, 2, 2, 3, 4, 5])
    values = np.array([1.0, 1e-6, 1e-9, 0.5, 0.2, 1.0, 1.0, 1.0])  # (3, 0) is pruned; diagonal (1, 1) is tiny but stays
    gradient = np.arange(k * k, dtype=float).reshape(k, k)[::-1].copy()  # largest in the top rows
    flat = prune_and_grow(values=values, rows=rows, columns=columns, dense_gradient=gradient, per_column=2, threshold=1e-3)
    new = {(int(f) // k, int(f) % k) for f in flat}
    assert all((j, j) in new for j in range(k))
    assert (3, 0) not in new
    assert np.bincount(flat % k, minlength=k).tolist() == [2, 2, 2, 2, 2, 2]
    assert (1, 0) in new and (0, 1) in new and (4, 2) in new and (2, 2) in new  # kept entries stay; (1, 0) grown
    assert (0, 3) in new and (0, 5) in new  # the largest gradient outside the support, column by column


def warm_settings(k: int, metric: str, **changes) -> TrainSettings:
    base = BASE_FOLDER / f"k{k // 2:03d}_{metric}.npz"
    values = dict(base_size=k, metric=metric, adam_steps=300, lbfgs_steps=0, init="file", init_file=str(base), init_noise=0.0)
    values.update(changes)
    return TrainSettings(**values)


@pytest.mark.parametrize("k, metric", [(16, "maxse"), (32, "meanse"), (64, "maxse")])
def test_sparse_run_matches_dense_from_the_same_warm_start(k, metric):
    """Warm-started from the k/2 base, 300 Adam steps each: sparse within 0.5 % of dense (the
    criterion of the k = 256 / 512 validation), and never above the cost of its own start."""
    settings = warm_settings(k, metric)
    dense = train_base_factorization(settings=settings).factorization.metadata["costs"][KEY[metric]]
    result = train_sparse_factorization(settings=settings)
    sparse = result.factorization.metadata["costs"][KEY[metric]]
    assert sparse <= dense * 1.005
    assert np.count_nonzero(result.factorization.encoder) <= 7 * k  # the diagonal and 6 a column
    start = Factorization.from_encoder(warm_start_on_support(k, metric)).costs()
    assert sparse <= getattr(start, KEY[metric]) * (1 + 1e-9)  # the start is a candidate (rounding to 2^-32 aside)
    assert sparse < getattr(start, KEY[metric])  # and training moved


def warm_start_on_support(k: int, metric: str) -> np.ndarray:
    """The sparse trainer's start: diag(B, B) restricted to its initial support (values only; the grown
    positions start at 0)."""
    B = Factorization.load(BASE_FOLDER / f"k{k // 2:03d}_{metric}.npz").dense()[1]
    R = np.kron(np.eye(2), B)
    rows, columns = initial_support(R, support_per_column=6, threshold=1e-3)
    start = np.zeros_like(R)
    start[rows, columns] = R[rows, columns]
    return start


def test_sparse_output_certifies(tmp_path):
    out = tmp_path / "sparse.npz"
    result = train_sparse_factorization(settings=warm_settings(32, "maxse", adam_steps=100), out=out)
    certificate = certify_factorization(path=out, out=tmp_path / "sparse.json")
    assert certificate.rounded_from is None  # already on the grid: the trained file itself is certified
    verified = verify_certificate(path=tmp_path / "sparse.json")
    assert verified.n == 32
    proven = float(certificate.claims["leading_constant"].value)
    achieved = result.factorization.metadata["costs"]["max_se_constant"]
    assert achieved <= proven <= achieved * (1 + 1e-6)


def test_checkpoint_and_resume_continue_bit_for_bit(tmp_path):
    settings = warm_settings(16, "meanse", adam_steps=120, checkpoint_every=1000)
    options = SparseOptions(prune_every=25)
    whole = train_sparse_factorization(settings=settings, options=options)
    checkpoint = tmp_path / "run.ckpt"
    first = train_sparse_factorization(settings=settings, options=options, checkpoint=checkpoint, stop_after=60)
    assert first.interrupted and first.steps_done == 60
    assert load_sparse_checkpoint(checkpoint)["step"] == 60
    resumed = train_sparse_factorization(settings=settings, options=options, checkpoint=checkpoint, resume=checkpoint)
    assert resumed.steps_done == 120 and not resumed.interrupted
    assert np.array_equal(resumed.factorization.encoder, whole.factorization.encoder)
    assert resumed.history == whole.history


def test_sparse_refusals():
    with pytest.raises(InvalidInputError, match="surrogate"):
        train_sparse_factorization(settings=TrainSettings(base_size=8, metric="maxse", surrogate="projected"))
    with pytest.raises(InvalidInputError, match="square"):
        train_sparse_factorization(settings=TrainSettings(base_size=8, metric="maxse", inner_size=9))
    with pytest.raises(InvalidInputError, match="support_per_column"):
        train_sparse_factorization(
            settings=TrainSettings(base_size=8, metric="maxse"), options=SparseOptions(support_per_column=-1)
        )


def test_cli_sparse_trains_and_refuses_bad_combinations(tmp_path):
    runner, app = CliRunner(), all_commands()
    out = tmp_path / "cli.npz"
    base = str(BASE_FOLDER / "k008_maxse.npz")
    args = ["train", "--base-size", "16", "--metric", "maxse", "--out", str(out), "--sparse", "--init", base]
    result = runner.invoke(app, [*args, "--init-noise", "0", "--adam-steps", "60", "--prune-every", "20", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["steps_done"] == 60
    assert Factorization.load(out).metadata["made_by"]["sparse"]["prune_every"] == 20
    for bad, message in (
        (["--polish", "10"], "--polish and --sparse cannot be combined"),
        (["--support-per-column", "-2"], "--support-per-column must be at least 0"),
        (["--prune-every", "0"], "--prune-every must be at least 1"),
        (["--surrogate", "projected"], "supports --surrogate 'pnorm' only, got 'projected'"),
    ):
        refused = runner.invoke(app, [*args[:6], str(tmp_path / "x.npz"), *args[7:], *bad])
        assert isinstance(refused.exception, InvalidInputError) and message in str(refused.exception), refused.output
    assert not (tmp_path / "x.npz").exists()


def test_divergence_guard_undoes_steps_across_support_swaps():
    """A learning rate far too large: steps that blow the cost up are undone (support included, across
    prune-and-grow) and the rate halved; the run ends no worse than its start."""
    settings = warm_settings(16, "maxse", adam_steps=80, learning_rate=5.0, final_learning_rate=5.0)
    result = train_sparse_factorization(settings=settings, options=SparseOptions(prune_every=10))
    assert result.rejected_steps > 0 and result.steps_done == 80
    start = Factorization.from_encoder(warm_start_on_support(16, "maxse")).costs().max_se_constant
    assert result.factorization.metadata["costs"]["max_se_constant"] <= start * (1 + 1e-9)
