"""Tests of the base-factorization trainer (Arkhipov & Kalinin, section 2.1, Table 2)."""

from __future__ import annotations

import hashlib
import math
import os
import re
import subprocess
import sys
from fractions import Fraction
from math import comb
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SAFETY_LIMIT, run_cli

from pure_dp_mf.errors import FactorizationFileError, InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.factorizations.train import (
    PAPER_TABLE_2,
    TrainSettings,
    block_warm_start,
    load_checkpoint,
    project_columns_to_l1_ball,
    toeplitz_square_root,
    train_base_factorization,
)
from pure_dp_mf.resources import BASE_FOLDER as BASES

SHIPPED = BASES


def constant_by_hand(decoder: np.ndarray, encoder: np.ndarray, metric: str) -> float:
    """2C² straight from the definitions, with plain loops (the slow obvious implementation)."""
    k = decoder.shape[0]
    rows = [sum(float(x) ** 2 for x in row) for row in decoder]
    columns = [sum(abs(float(encoder[i, j])) for i in range(encoder.shape[0])) for j in range(encoder.shape[1])]
    decoder_norm_squared = max(rows) if metric == "maxse" else sum(rows) / k
    return 2 * decoder_norm_squared * max(columns) ** 2 / math.log2(k) ** 3


# Fixed seed and fixed small budgets; each must reach Arkhipov & Kalinin's Table 2 value.
REACH = [
    (4, "maxse", dict(adam_steps=600, lbfgs_steps=50, learning_rate=5e-2, final_learning_rate=5e-5)),
    (4, "meanse", dict(adam_steps=600, lbfgs_steps=50, learning_rate=5e-2, final_learning_rate=5e-5)),
    (8, "maxse", dict(adam_steps=600, lbfgs_steps=50, learning_rate=5e-2, final_learning_rate=5e-5)),
]


@pytest.mark.parametrize("k, metric, budget", REACH)
def test_small_k_reaches_table_2(tmp_path, k, metric, budget):
    out = tmp_path / "f.npz"
    result = train_base_factorization(settings=TrainSettings(base_size=k, metric=metric, seed=0, **budget), out=out)
    loaded = Factorization.load(out)
    assert loaded.validate(tolerance=1e-9) <= 1e-9
    L, R = loaded.dense()
    achieved = constant_by_hand(L, R, metric)
    assert achieved <= PAPER_TABLE_2[k][0 if metric == "maxse" else 1]
    # the recorded cost is the true cost of the stored matrices, not a surrogate
    key = "max_se_constant" if metric == "maxse" else "mean_se_constant"
    assert loaded.metadata["costs"][key] == pytest.approx(achieved, rel=1e-12)
    assert result.history[-1][0] == budget["adam_steps"] + budget["lbfgs_steps"]


def test_k8_meanse_reaches_table_2_from_the_maxse_base():
    """k = 8, MeanSE: from the identity, Toeplitz or random starts the trainer stalls at
    2C_F² = 0.33346, 1.4 % above Table 2's 0.3288 (docs/training.md); warm-started from the shipped
    MaxSE base (another basin) it reaches Table 2 within a small budget."""
    settings = TrainSettings(
        base_size=8,
        metric="meanse",
        seed=0,
        init="file",
        init_file=str(SHIPPED / "k008_maxse.npz"),
        adam_steps=500,
        lbfgs_steps=100,
    )
    result = train_base_factorization(settings=settings)
    L, R = result.factorization.dense()
    assert constant_by_hand(L, R, "meanse") <= PAPER_TABLE_2[8][1]


def test_output_file_format(tmp_path):
    out = tmp_path / "f.npz"
    settings = TrainSettings(base_size=5, metric="meanse", adam_steps=40, lbfgs_steps=5, seed=3)
    train_base_factorization(settings=settings, out=out)
    loaded = Factorization.load(out)
    assert loaded.metadata["arrays"].keys() == {"encoder"}  # L is recomputed as T_k·R⁻¹
    R = loaded.encoder
    assert R.dtype == np.float64 and np.array_equal(R, np.round(R * 2.0**32) / 2.0**32)
    made_by = loaded.metadata["made_by"]
    assert made_by["settings"]["seed"] == 3 and made_by["settings"]["adam_steps"] == 40
    assert made_by["steps_done"] == 45 and made_by["finished"] is True and made_by["wall_time_seconds"] > 0
    assert loaded.metric == "meanse" and loaded.metadata["base_size"] == 5
    costs = loaded.costs()
    assert loaded.metadata["costs"]["c2"] == costs.c2 and loaded.metadata["costs"]["cf"] == costs.cf


def test_rectangular_inner_size(tmp_path):
    out = tmp_path / "f.npz"
    settings = TrainSettings(base_size=4, metric="maxse", inner_size=6, adam_steps=100, lbfgs_steps=5)
    result = train_base_factorization(settings=settings, out=out)
    loaded = Factorization.load(out)
    assert loaded.inner_size == 6 and loaded.n == 4
    assert loaded.validate(tolerance=1e-9) <= 1e-9
    # the decoder is the minimal-norm one: rows in the row space of Rᵀ
    L, R = loaded.dense()
    assert np.allclose(L, np.tri(4) @ np.linalg.pinv(R), atol=1e-12)
    assert result.factorization.costs().c2 == pytest.approx(loaded.costs().c2, rel=1e-12)


def _run(tmp_path, name, *, stop_after=None, resume=None):
    settings = TrainSettings(base_size=6, metric="maxse", adam_steps=30, lbfgs_steps=10, seed=7, checkpoint_every=7)
    return train_base_factorization(
        settings=settings,
        out=tmp_path / f"{name}.npz",
        checkpoint=tmp_path / f"{name}.ckpt",
        stop_after=stop_after,
        resume=resume,
    )


@pytest.mark.parametrize("stop", [13, 34])  # inside the Adam phase and inside the L-BFGS phase
def test_resume_continues_identically(tmp_path, stop):
    whole = _run(tmp_path, "whole")
    part = _run(tmp_path, "part", stop_after=stop)
    assert part.interrupted and part.steps_done == stop
    assert load_checkpoint(tmp_path / "part.ckpt")["step"] == stop
    resumed = _run(tmp_path, "resumed", resume=tmp_path / "part.ckpt")
    assert not resumed.interrupted and resumed.steps_done == 40
    assert np.array_equal(resumed.factorization.encoder, whole.factorization.encoder)
    assert resumed.history == whole.history
    final_whole = load_checkpoint(tmp_path / "whole.ckpt")["parameter"]
    final_resumed = load_checkpoint(tmp_path / "resumed.ckpt")["parameter"]
    assert torch.equal(final_whole, final_resumed)


def test_ctrl_c_saves_best_and_checkpoint(tmp_path):
    def interrupt(step, total, current, best):
        if step == 25:
            raise KeyboardInterrupt

    settings = TrainSettings(base_size=5, metric="maxse", adam_steps=100, lbfgs_steps=0)
    result = train_base_factorization(
        settings=settings, out=tmp_path / "f.npz", checkpoint=tmp_path / "f.ckpt", progress=interrupt
    )
    assert result.interrupted and result.steps_done == 25
    saved = Factorization.load(tmp_path / "f.npz")
    assert saved.metadata["made_by"]["finished"] is False and saved.metadata["made_by"]["steps_done"] == 25
    assert load_checkpoint(tmp_path / "f.ckpt")["step"] == 25
    finished = train_base_factorization(settings=settings, resume=tmp_path / "f.ckpt")
    assert finished.steps_done == 100 and not finished.interrupted


def test_sigint_ends_the_step_then_saves(tmp_path):
    """A real SIGINT (Ctrl-C) lets the current step finish, then checkpoints and writes the best."""
    import signal

    def send(step, total, current, best):
        if step == 10:
            os.kill(os.getpid(), signal.SIGINT)

    settings = TrainSettings(base_size=5, metric="meanse", adam_steps=50, lbfgs_steps=0)
    before = signal.getsignal(signal.SIGINT)
    result = train_base_factorization(settings=settings, out=tmp_path / "f.npz", checkpoint=tmp_path / "f.ckpt", progress=send)
    assert result.interrupted and result.steps_done == 10
    assert signal.getsignal(signal.SIGINT) is before
    assert Factorization.load(tmp_path / "f.npz").metadata["made_by"]["steps_done"] == 10
    resumed = train_base_factorization(settings=settings, resume=tmp_path / "f.ckpt")
    whole = train_base_factorization(settings=settings)
    assert np.array_equal(resumed.factorization.encoder, whole.factorization.encoder)


def test_toeplitz_square_root_is_exact():
    k = 9
    S = [[Fraction(comb(2 * (i - j), i - j), 4 ** (i - j)) if i >= j else Fraction(0) for j in range(k)] for i in range(k)]
    square = [[sum(S[i][m] * S[m][j] for m in range(k)) for j in range(k)] for i in range(k)]
    assert square == [[Fraction(int(j <= i)) for j in range(k)] for i in range(k)]
    assert np.allclose(toeplitz_square_root(k), np.array(S, dtype=float), rtol=0, atol=1e-15)


def test_block_warm_start_costs():
    """R = diag(B, B): later decoder rows are [A's last row, A's row], as the docstring claims."""
    rng = np.random.default_rng(1)
    B = np.tril(rng.uniform(0.5, 1.5, (4, 4)))
    A = np.tri(4) @ np.linalg.inv(B)
    R = block_warm_start(B, 8)
    L = np.tri(8) @ np.linalg.inv(R)
    expected = np.block([[A, np.zeros((4, 4))], [np.tile(A[-1], (4, 1)), A]])
    assert np.allclose(L, expected, atol=1e-12)
    assert np.abs(R).sum(axis=0).max() == pytest.approx(np.abs(B).sum(axis=0).max())
    with pytest.raises(InvalidInputError, match="m dividing k"):
        block_warm_start(B, 6)


def test_warm_start_from_file(tmp_path):
    small = tmp_path / "small.npz"
    train_base_factorization(settings=TrainSettings(base_size=4, metric="maxse", adam_steps=200, lbfgs_steps=0), out=small)
    settings = TrainSettings(
        base_size=8, metric="maxse", adam_steps=1, lbfgs_steps=0, init="file", init_file=str(small), init_noise=0.0
    )
    first = train_base_factorization(settings=settings)
    A, B = Factorization.load(small).dense()
    R = block_warm_start(B, 8)
    assert first.factorization.costs().c2 == pytest.approx(Factorization.from_encoder(R).costs().c2, rel=1e-6)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(base_size=1), "base_size must be at least 2"),
        (dict(metric="maxmse"), "unknown metric"),
        (dict(adam_steps=-1), "adam_steps must be at least 0"),
        (dict(lbfgs_steps=-5), "lbfgs_steps must be at least 0"),
        (dict(inner_size=3), "inner_size must be at least"),
        (dict(init="random"), "unknown init"),
        (dict(learning_rate=float("nan")), "learning_rate"),
    ],
)
def test_bad_settings_fail_before_work(tmp_path, changes, message):
    settings = TrainSettings(**{**dict(base_size=4, metric="maxse", adam_steps=10, lbfgs_steps=0), **changes})
    with pytest.raises(InvalidInputError, match=message):
        train_base_factorization(settings=settings, out=tmp_path / "f.npz", checkpoint=tmp_path / "f.ckpt")
    assert list(tmp_path.iterdir()) == []


def test_resume_file_for_other_run_is_refused(tmp_path):
    base = dict(base_size=4, metric="maxse", adam_steps=5, lbfgs_steps=0)
    train_base_factorization(settings=TrainSettings(**base), checkpoint=tmp_path / "a.ckpt")
    for changes, name in ((dict(base_size=5), "base_size"), (dict(metric="meanse"), "metric")):
        with pytest.raises(InvalidInputError, match=f"made for {name}"):
            train_base_factorization(
                settings=TrainSettings(**{**base, **changes}), out=tmp_path / "o.npz", resume=tmp_path / "a.ckpt"
            )
    assert not (tmp_path / "o.npz").exists()
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(FactorizationFileError, match="unreadable"):
        train_base_factorization(settings=TrainSettings(**base), resume=tmp_path / "junk.ckpt")


def test_unwritable_output_is_refused(tmp_path):
    settings = TrainSettings(base_size=4, metric="maxse", adam_steps=5, lbfgs_steps=0)
    with pytest.raises(InvalidInputError, match="does not exist"):
        train_base_factorization(settings=settings, out=tmp_path / "missing" / "f.npz")
    with pytest.raises(InvalidInputError, match="is a folder"):
        train_base_factorization(settings=settings, out=tmp_path)
    if os.geteuid() != 0:  # root ignores permissions
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(InvalidInputError, match="permission denied"):
            train_base_factorization(settings=settings, out=locked / "f.npz")


def test_cuda_request_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(InvalidInputError, match="cuda"):
        train_base_factorization(settings=TrainSettings(base_size=4, metric="maxse", device="cuda"))


def test_train_into_a_log_file_prints_a_progress_line_every_10_steps(tmp_path):
    """Run as a background job writes it (standard output and error not a terminal): a plain line
    every 10 steps with the step, the current and the best 2C², not a progress bar drawn only at
    the end; under --json no such line."""
    arguments = ["train", "--base-size", "4", "--metric", "maxse", "--adam-steps", "25", "--lbfgs-steps", "0"]
    finished = run_cli(*arguments, "--out", str(tmp_path / "k4.npz"))
    assert finished.returncode == 0, finished.stderr
    lines = [line for line in finished.stderr.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in lines] == ["10/25", "20/25", "25/25"]
    assert all(re.fullmatch(r"step \d+/25  2C² \d+\.\d{7}  best \d+\.\d{7}  \d+ s", line) for line in lines)
    quiet = run_cli(*arguments, "--out", str(tmp_path / "j.npz"), "--json")
    assert quiet.returncode == 0 and not [line for line in quiet.stderr.splitlines() if line.startswith("step ")]


def test_cli_train(tmp_path):
    from typer.testing import CliRunner

    from pure_dp_mf.cli import all_commands

    app = all_commands()

    out = tmp_path / "k4.npz"
    arguments = [
        "train",
        "--base-size",
        "4",
        "--metric",
        "maxse",
        "--adam-steps",
        "30",
        "--lbfgs-steps",
        "2",
        "--out",
        str(out),
        "--json",
    ]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert '"steps_done": 32' in result.output and '"history"' in result.output
    assert Factorization.load(out).metadata["made_by"]["steps_done"] == 32
    assert (tmp_path / "k4.ckpt").exists()
    for bad, message in (
        (["--base-size", "1", "--metric", "maxse"], "--base-size must be at least 2"),  # flags, as typed
        (["--base-size", "4", "--metric", "mean"], "unknown --metric"),
        (["--base-size", "4", "--metric", "maxse", "--adam-steps", "-3"], "--adam-steps must be at least 0"),
        (["--base-size", "5", "--metric", "maxse", "--resume", str(tmp_path / "k4.ckpt")], "made for --base-size"),
        (["--base-size", "4", "--metric", "maxse", "--device", "tpu"], "unknown --device"),
    ):
        failed = CliRunner().invoke(app, ["train", *bad, "--out", str(tmp_path / "x.npz")])
        assert isinstance(failed.exception, InvalidInputError) and message in str(failed.exception)
    assert not (tmp_path / "x.npz").exists()


def test_cli_error_exit_code(tmp_path):
    """Through ``main``: one line "error: ...", exit code 2, no traceback."""
    executable = Path(sys.executable).parent / "pure-dp-mf"
    failed = subprocess.run(
        [str(executable), "train", "--base-size", "8", "--metric", "maxse", "--out", str(tmp_path / "no" / "x.npz")],
        capture_output=True,
        text=True,
        timeout=SAFETY_LIMIT,
    )
    assert failed.returncode == 2 and failed.stderr.startswith("error: cannot write output"), failed.stderr
    assert "Traceback" not in failed.stderr


# Shipped bases whose certified constant is still above the paper's Table 2, with the relative gap
# the README states. None is: every shipped base is at most Table 2's value.
SHIPPED_ABOVE_TABLE_2: dict[str, float] = {}


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("k*_*.npz")), ids=lambda p: p.name)
def test_shipped_base_factorizations(path):
    """Every shipped file loads, factors T_k, sits on the 2^-32 grid and records its true cost."""
    loaded = Factorization.load(path)
    k, metric = int(path.stem.split("_")[0][1:]), path.stem.split("_")[1]
    assert loaded.n == k and loaded.metric == metric and loaded.metadata["base_size"] == k
    assert loaded.validate(tolerance=1e-8) <= 1e-8
    R = loaded.encoder
    assert np.array_equal(R, np.round(R * 2.0**32) / 2.0**32)
    key = "max_se_constant" if metric == "maxse" else "mean_se_constant"
    achieved = getattr(loaded.costs(), key)
    assert loaded.metadata["costs"][key] == pytest.approx(achieved, rel=1e-12)
    # beyond Table 2 (k = 2048), a base must beat the table's largest k for its metric
    paper = PAPER_TABLE_2[min(k, max(PAPER_TABLE_2))][0 if metric == "maxse" else 1]
    if path.name in SHIPPED_ABOVE_TABLE_2:
        # shipped and certified, but not yet below Table 2: the stated gap is the true one
        assert paper < achieved <= paper * (1 + SHIPPED_ABOVE_TABLE_2[path.name])
    else:
        assert achieved <= paper


# ---------------------------------------------------------------------------------------------
# Divergence guard and the float32 Adam phase.


def test_guard_rejects_a_blow_up_restores_and_halves_the_rate(tmp_path):
    """At learning rate 3 (about 60× the default for k = 12) Adam throws R far off; the guard
    undoes each step whose true cost c exceeds 2× the best so far and halves the rate. Without the
    guard the same run's cost explodes."""

    def run(**changes):
        settings = TrainSettings(
            base_size=12, metric="maxse", adam_steps=120, lbfgs_steps=0, learning_rate=3.0, seed=1, **changes
        )
        seen: list[float] = []
        result = train_base_factorization(
            settings=settings, checkpoint=tmp_path / "g.ckpt", progress=lambda step, total, now, best: seen.append(now)
        )
        return result, seen

    result, seen = run()
    assert result.rejected_steps >= 1
    state = load_checkpoint(tmp_path / "g.ckpt")
    assert state["rejections"] == result.rejected_steps and state["lr_scale"] == 0.5**result.rejected_steps
    best = np.minimum.accumulate(seen)
    # the guard bounds the cost c by 2× its best, so the constant 2C² ∝ c² by 4×
    assert np.all(np.isfinite(seen)) and np.all(np.array(seen[1:]) <= 4.0 * best[:-1] * (1 + 1e-9))
    constant = result.factorization.metadata["costs"]["max_se_constant"]
    assert constant == pytest.approx(min(seen), rel=1e-6)
    assert result.factorization.metadata["made_by"]["rejected_steps"] == result.rejected_steps
    unguarded, wild = run(guard_factor=1e300)
    assert unguarded.rejected_steps == 0 and max(wild) > 10 * min(wild)


def test_guard_and_resume_stay_bit_identical(tmp_path):
    settings = TrainSettings(
        base_size=10, metric="maxse", adam_steps=60, lbfgs_steps=0, learning_rate=2.0, seed=3, checkpoint_every=5
    )
    whole = train_base_factorization(settings=settings, checkpoint=tmp_path / "w.ckpt")
    assert whole.rejected_steps >= 1
    train_base_factorization(settings=settings, checkpoint=tmp_path / "p.ckpt", stop_after=30)
    resumed = train_base_factorization(settings=settings, checkpoint=tmp_path / "r.ckpt", resume=tmp_path / "p.ckpt")
    assert resumed.rejected_steps == whole.rejected_steps
    assert np.array_equal(resumed.factorization.encoder, whole.factorization.encoder)


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_float32_adam_phase_reaches_the_float64_constant(metric):
    """The float32 objective changes the Adam steps only by rounding: after the float64 L-BFGS
    polish both runs land within 1 % of each other (k = 16), and the result is float64 on the grid."""
    results = {}
    for precision in ("float64", "float32"):
        settings = TrainSettings(base_size=16, metric=metric, adam_steps=600, lbfgs_steps=20, adam_precision=precision)
        results[precision] = train_base_factorization(settings=settings).factorization
    key = "max_se_constant" if metric == "maxse" else "mean_se_constant"
    single, double = (results[p].metadata["costs"][key] for p in ("float32", "float64"))
    assert single == pytest.approx(double, rel=0.01)
    encoder = results["float32"].encoder
    assert encoder.dtype == np.float64 and np.array_equal(encoder * 2.0**32, np.round(encoder * 2.0**32))
    with pytest.raises(InvalidInputError, match="adam_precision"):
        train_base_factorization(settings=TrainSettings(base_size=4, metric=metric, adam_precision="float16"))
    with pytest.raises(InvalidInputError, match="guard_factor"):
        train_base_factorization(settings=TrainSettings(base_size=4, metric=metric, guard_factor=1.0))


def test_decoder_by_inverse_equals_the_solve():
    """L = cumsum(R⁻¹) over rows is T_k·R⁻¹ (T_k sums rows 1…t)."""
    from pure_dp_mf.factorizations.train import _Objective

    rng = np.random.default_rng(5)
    R = np.eye(9) + 0.1 * rng.standard_normal((9, 9))
    objective = _Objective(TrainSettings(base_size=9, metric="maxse", inner_size=9), torch, torch.device("cpu"))
    L = objective.decoder(torch.tensor(R)).numpy()
    np.testing.assert_allclose(L, np.tri(9) @ np.linalg.inv(R), rtol=1e-12, atol=1e-12)


def _projection_by_bisection(v: np.ndarray) -> np.ndarray:
    """The slow obvious projection onto the unit ℓ1 ball: θ ≥ 0 with Σ max(|v_i| − θ, 0) = 1 by
    bisection (the KKT conditions of min ‖w − v‖₂ s.t. ‖w‖₁ ≤ 1)."""
    if np.abs(v).sum() <= 1:
        return v.copy()
    low, high = 0.0, float(np.abs(v).max())
    for _ in range(200):
        theta = (low + high) / 2
        low, high = (theta, high) if np.maximum(np.abs(v) - theta, 0).sum() > 1 else (low, theta)
    return np.sign(v) * np.maximum(np.abs(v) - (low + high) / 2, 0)


def test_l1_ball_projection_equals_bisection_and_is_the_nearest_point():
    rng = np.random.default_rng(3)
    R = rng.standard_normal((9, 40)) * rng.choice([0.01, 0.2, 1.0], size=40)  # columns inside and outside
    projected = torch.tensor(R)
    project_columns_to_l1_ball(projected)
    W = projected.numpy()
    for j in range(R.shape[1]):
        assert np.allclose(W[:, j], _projection_by_bisection(R[:, j]), atol=1e-12)
        assert np.abs(W[:, j]).sum() <= 1 + 1e-12
        # nearest point of a convex set: ⟨v − w, z − w⟩ ≤ 0 for every z in the ball
        for z in rng.standard_normal((50, 9)):
            z = z / np.abs(z).sum() * rng.random()
            assert np.dot(R[:, j] - W[:, j], z - W[:, j]) <= 1e-12
    inside = np.abs(R).sum(axis=0) <= 1
    assert inside.any() and (~inside).any()
    assert np.array_equal(W[:, inside], R[:, inside])


def test_projected_surrogate_improves_a_converged_base():
    """From the shipped k = 16 MeanSE base (trained with the p-norm surrogate), the projected
    constraint finds a lower true cost: the p-norm column term's bias is gone."""
    start = SHIPPED / "k016_meanse.npz"
    before = Factorization.load(start).costs().mean_se_constant
    settings = TrainSettings(
        base_size=16,
        metric="meanse",
        adam_steps=1500,
        lbfgs_steps=0,
        init="file",
        init_file=str(start),
        init_noise=0.0,
        learning_rate=1e-4,
        surrogate="projected",
    )
    result = train_base_factorization(settings=settings)
    encoder = result.factorization.dense()[1]
    assert np.abs(encoder).sum(axis=0).max() <= 1 + 1e-9
    assert result.factorization.costs().mean_se_constant < before * (1 - 1e-5)


def test_projected_polish_descends_monotonically_and_resumes_bit_identically(tmp_path):
    """With the projected surrogate the polish phase is projected gradient descent with
    backtracking: the cost never rises, the columns stay in the unit ℓ1 ball, and a run stopped
    in the middle and resumed ends bit for bit like the uninterrupted one."""
    start = SHIPPED / "k016_meanse.npz"
    before = Factorization.load(start).costs().mean_se_constant
    settings = TrainSettings(
        base_size=16,
        metric="meanse",
        adam_steps=5,
        lbfgs_steps=60,
        init="file",
        init_file=str(start),
        init_noise=0.0,
        learning_rate=1e-5,
        surrogate="projected",
        checkpoint_every=7,
    )
    seen: list[float] = []
    whole = train_base_factorization(
        settings=settings, checkpoint=tmp_path / "whole.ckpt", progress=lambda step, total, current, best: seen.append(current)
    )
    polish = seen[settings.adam_steps :]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(polish, polish[1:], strict=False))
    assert whole.factorization.costs().mean_se_constant < before
    assert np.abs(whole.factorization.dense()[1]).sum(axis=0).max() <= 1 + 1e-9
    part = train_base_factorization(settings=settings, checkpoint=tmp_path / "part.ckpt", stop_after=30)
    assert part.interrupted and load_checkpoint(tmp_path / "part.ckpt")["pgd_step"] > 0
    resumed = train_base_factorization(settings=settings, checkpoint=tmp_path / "resumed.ckpt", resume=tmp_path / "part.ckpt")
    assert np.array_equal(resumed.factorization.encoder, whole.factorization.encoder)
    assert torch.equal(
        load_checkpoint(tmp_path / "whole.ckpt")["parameter"], load_checkpoint(tmp_path / "resumed.ckpt")["parameter"]
    )


def test_training_without_torch_is_one_error_line(tmp_path):
    """torch is an optional extra: without it, ``train`` says so in one line (no traceback)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None\n"
        f"sys.argv = ['pure-dp-mf', 'train', '--base-size', '8', '--metric', 'maxse', '--out', {str(tmp_path / 'x.npz')!r}]\n"
        "from pure_dp_mf.cli import main\nmain()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=SAFETY_LIMIT)
    assert result.returncode == 2 and result.stderr.startswith("error: training needs torch"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.npz").exists()


# ------------------------------------------------------------------------------- projected polish


def _reference_projection(v: np.ndarray) -> np.ndarray:
    """Projection onto {‖v‖₁ ≤ 1} by its defining breakpoint: the θ ≥ 0 with Σ max(|v| − θ, 0) = 1,
    found on the interval [u_{ρ+1}, u_ρ] of the sorted |v| where the sum is linear in θ."""
    if np.abs(v).sum() <= 1:
        return v.copy()
    u = np.concatenate([np.sort(np.abs(v))[::-1], [0.0]])
    for rho in range(1, len(v) + 1):
        theta = (u[:rho].sum() - 1) / rho
        if u[rho] <= theta <= u[rho - 1]:
            return np.sign(v) * np.maximum(np.abs(v) - theta, 0)
    raise AssertionError("no breakpoint interval holds θ")


def _reference_surrogate(R: np.ndarray, metric: str, p: float) -> tuple[float, np.ndarray]:
    """The projected surrogate f(R) and its gradient by hand: L = T·R⁻¹, r_t = ‖L_t‖²,
    f = ½·logsumexp(p·log r)/p (MaxSE) or ½·log(Σr/k) (MeanSE); ∂f/∂L = diag(∂f/∂r)·2L and,
    from dL = −L·dR·R⁻¹, ∂f/∂R = −Lᵀ·(∂f/∂L)·R⁻ᵀ."""
    k = R.shape[0]
    inverse = np.linalg.inv(R)
    L = np.tri(k) @ inverse
    r = (L * L).sum(axis=1)
    if metric == "maxse":
        z = p * np.log(r)
        top = z.max()
        f = 0.5 * (top + math.log(np.exp(z - top).sum())) / p
        weights = np.exp(z - top) / np.exp(z - top).sum()
        d_r = 0.5 * weights / r
    else:
        f = 0.5 * math.log(r.sum() / k)
        d_r = 0.5 * np.ones(k) / r.sum()
    G_L = 2 * d_r[:, None] * L
    return f, -L.T @ G_L @ inverse.T


@pytest.mark.parametrize("k, metric", [(8, "maxse"), (16, "meanse"), (32, "maxse"), (32, "meanse")])
def test_polish_step_matches_a_dense_reference(tmp_path, k, metric):
    """One ``--polish`` step equals a slow dense step by hand: the gradient from the matrix calculus,
    each column projected by the breakpoint definition, the step halved from 10⁻⁴ until Armijo holds."""
    from pure_dp_mf.factorizations.train import PGD_FIRST_STEP, polish_settings

    p = 8192.0
    settings = polish_settings(
        base_size=k, metric=metric, init_file=str(SHIPPED / f"k{k:03d}_{metric}.npz"), steps=3, p=p, checkpoint_every=1
    )
    train_base_factorization(settings=settings, checkpoint=tmp_path / "0.ckpt", stop_after=0)
    train_base_factorization(settings=settings, checkpoint=tmp_path / "1.ckpt", stop_after=1)
    R = load_checkpoint(tmp_path / "0.ckpt")["parameter"].numpy()
    after = load_checkpoint(tmp_path / "1.ckpt")
    value, gradient = _reference_surrogate(R, metric, p)
    step = PGD_FIRST_STEP
    while True:
        trial = np.column_stack([_reference_projection(column) for column in (R - step * gradient).T])
        if _reference_surrogate(trial, metric, p)[0] <= value + 1e-4 * float((gradient * (trial - R)).sum()):
            break
        step /= 2
    assert after["pgd_step"] == 2 * step
    assert np.allclose(after["parameter"].numpy(), trial, rtol=1e-9, atol=1e-14)
    assert not np.array_equal(trial, R)  # the step moved R


@pytest.mark.parametrize("k, metric", [(8, "meanse"), (16, "maxse"), (32, "meanse")])
def test_polish_never_raises_the_certified_cost(tmp_path, k, metric):
    """The polished file certifies (exactly) at most at its start's constant: from a shipped base
    and from an unconverged one (200 Adam steps), where it must lower it."""
    from pure_dp_mf.certificates.certify import certify_factorization
    from pure_dp_mf.factorizations.train import polish_settings

    rough = tmp_path / "rough.npz"
    train_base_factorization(settings=TrainSettings(base_size=k, metric=metric, adam_steps=200, lbfgs_steps=0), out=rough)
    for start, strictly in ((SHIPPED / f"k{k:03d}_{metric}.npz", False), (rough, True)):
        polished = tmp_path / f"polished_{start.stem}.npz"
        settings = polish_settings(base_size=k, metric=metric, init_file=str(start), steps=40)
        train_base_factorization(settings=settings, out=polished)
        before = certify_factorization(path=start, rounded_out=tmp_path / "b.npz").claims["leading_constant"].value
        after = certify_factorization(path=polished, rounded_out=tmp_path / "a.npz").claims["leading_constant"].value
        assert after < before if strictly else after <= before
        # the columns are in the unit ℓ1 ball before R is rounded to 2^-32, each entry moving ≤ 2^-33
        assert np.abs(Factorization.load(polished).encoder).sum(axis=0).max() <= 1 + k * 2.0**-33


def test_cli_polish(tmp_path):
    """``train --polish N``: N projected steps from --init of the same k; refusals name the flags."""
    from typer.testing import CliRunner

    from pure_dp_mf.cli import all_commands

    app = all_commands()
    out = tmp_path / "p.npz"
    start = str(SHIPPED / "k016_maxse.npz")
    common = ["train", "--base-size", "16", "--metric", "maxse", "--out", str(out)]
    result = CliRunner().invoke(app, [*common, "--init", start, "--polish", "12", "--p-end", "4096", "--json"])
    assert result.exit_code == 0, result.output
    made_by = Factorization.load(out).metadata["made_by"]
    assert made_by["steps_done"] == 12
    assert made_by["settings"]["adam_steps"] == 0 and made_by["settings"]["surrogate"] == "projected"
    assert made_by["settings"]["p_end"] == 4096 and made_by["settings"]["init_noise"] == 0
    assert made_by["init_file_sha256"] == hashlib.sha256(Path(start).read_bytes()).hexdigest()
    assert Factorization.load(out).costs().max_se_constant <= Factorization.load(start).costs().max_se_constant
    for bad, message in (
        (["--polish", "5"], "--polish needs --init FILE"),
        (["--polish", "0", "--init", start], "--polish must be at least 1"),
        (["--polish", "5", "--init", str(SHIPPED / "k008_maxse.npz")], "factorizes T_8, --base-size is 16"),
    ):
        failed = CliRunner().invoke(app, [*common[:-2], "--out", str(tmp_path / "x.npz"), *bad])
        assert isinstance(failed.exception, InvalidInputError) and message in str(failed.exception), failed.output
    assert not (tmp_path / "x.npz").exists()
