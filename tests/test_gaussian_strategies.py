"""Participation schemas against brute force over every pattern, and the Toeplitz strategies
(banded Toeplitz, BLT, BISR) against dense matrices: factorization, errors, sensitivity under
both schemas, gradients, optimizers, streaming noise, compare rows and the CLI."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import run_cli

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian import toeplitz
from pure_dp_mf.gaussian.comparison import strategy_rows
from pure_dp_mf.gaussian.participation import MinSeparation, Participation, best_separated_sums, patterns_of
from pure_dp_mf.gaussian.sensitivity import (
    gram_sensitivity_squared,
    min_sep_sensitivity_squared,
    schema_sensitivity_squared,
    sign_vectors,
)
from pure_dp_mf.gaussian.torch_noise import CorrelatedNoise


def brute_force(X: np.ndarray, schema) -> float:
    """max over every pattern of 1ᵀX[π,π]1 (the sensitivity² when X ≥ 0)."""
    return max(float(X[np.ix_(p, p)].sum()) for p in patterns_of(schema))


def brute_force_signs(X: np.ndarray, schema) -> float:
    """max over every pattern and sign vector of uᵀX[π,π]u (scalar contributions: ≤ the true sens²)."""
    return max(
        float(np.max(np.einsum("si,ij,sj->s", U, X[np.ix_(p, p)], U)))
        for p in patterns_of(schema)
        for U in [sign_vectors(len(p))]
    )


def min_sep_patterns_by_itertools(n: int, k: int, b: int) -> set[tuple[int, ...]]:
    return {
        pattern
        for size in range(1, k + 1)
        for pattern in itertools.combinations(range(n), size)
        if all(j - i >= b for i, j in itertools.pairwise(pattern))
    }


@pytest.mark.parametrize("n, k, b", [(7, 3, 2), (10, 2, 4), (9, 5, 2), (6, 1, 6), (11, 3, 3)])
def test_min_sep_patterns_are_every_separated_set(n, k, b):
    schema = MinSeparation(max_participations=k, separation=b, n=n)
    assert set(schema.patterns()) == min_sep_patterns_by_itertools(n, k, b)
    assert schema.participations == min(k, -(-n // b))


@pytest.mark.parametrize("seed", range(4))
def test_best_separated_sums_is_the_brute_force_maximum(seed):
    rng = np.random.default_rng(seed)
    n, k, b = 11, int(rng.integers(1, 4)), int(rng.integers(1, 4))
    values = rng.random((5, n))
    expected = [max(v[list(p)].sum() for p in min_sep_patterns_by_itertools(n, k, b)) for v in values]
    assert best_separated_sums(values, participations=k, separation=b) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_both_schemas_against_brute_force_on_dense_nonnegative_encoders(seed):
    rng = np.random.default_rng(seed)
    n, k, b = 12, 3, 3
    C = np.tril(rng.random((n, n)))
    X = C.T @ C
    fixed = Participation(max_participations=k, min_sep=b, n=n)
    minsep = MinSeparation(max_participations=k, separation=b, n=n)
    assert gram_sensitivity_squared(gram=X, schema=fixed) == pytest.approx(brute_force(X, fixed), rel=1e-12)
    exact = brute_force(X, minsep)
    assert min_sep_sensitivity_squared(gram=X, schema=minsep, method="brute-force")[0] == pytest.approx(exact, rel=1e-12)
    bound, method = schema_sensitivity_squared(gram=X, schema=minsep)
    assert method == "upper-bound" and bound >= exact * (1 - 1e-12)
    assert exact >= brute_force(X, fixed) * (1 - 1e-12)  # every fixed-epoch pattern is a min-sep pattern


def test_min_sep_can_exceed_fixed_epoch():
    """A user who only guarantees a minimum separation can be worse than the fixed epoch order."""
    n, k, b = 12, 2, 4
    C = np.eye(n)
    C[:, 1] += np.eye(n)[:, 6]  # columns 1 and 6 overlap: 5 apart, never together in a fixed-epoch pattern
    X = C.T @ C
    fixed = Participation(max_participations=k, min_sep=b, n=n)
    minsep = MinSeparation(max_participations=k, separation=b, n=n)
    assert brute_force(X, minsep) > brute_force(X, fixed)
    assert schema_sensitivity_squared(gram=X, schema=minsep)[0] >= brute_force(X, minsep)


@pytest.mark.parametrize("seed", range(4))
def test_banded_min_sep_is_exact(seed):
    rng = np.random.default_rng(seed)
    n, k, b = 12, 4, 3
    C = np.tril(rng.random((n, n))) * (np.subtract.outer(np.arange(n), np.arange(n)) < b)  # b bands
    X = C.T @ C
    schema = MinSeparation(max_participations=k, separation=b, n=n)
    value, method = schema_sensitivity_squared(gram=X, schema=schema)
    assert method == "banded" and value == pytest.approx(brute_force(X, schema), rel=1e-12)
    with pytest.raises(InvalidInputError, match="not zero at distance"):
        min_sep_sensitivity_squared(gram=np.ones((n, n)), schema=schema, method="banded")


def _random_monotone(rng, length: int) -> np.ndarray:
    return np.concatenate([[1.0], np.cumprod(rng.uniform(0.3, 1.0, length - 1))])


@pytest.mark.parametrize("seed", range(6))
def test_toeplitz_monotone_sensitivity_is_the_brute_force_under_both_schemas(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 14))
    b = int(rng.integers(1, 5))
    k = int(rng.integers(1, 5))
    strategy = toeplitz.ToeplitzStrategy(coefficients=_random_monotone(rng, int(rng.integers(1, n + 1))), n=n)
    X = strategy.gram()
    minsep = MinSeparation(max_participations=k, separation=b, n=n)
    value, method = strategy.sensitivity_squared(minsep)
    assert method == "toeplitz-monotone" and value == pytest.approx(brute_force(X, minsep), rel=1e-12)
    if n % b == 0 and k <= n // b:
        fixed = Participation(max_participations=k, min_sep=b, n=n)
        assert strategy.sensitivity_squared(fixed)[0] == pytest.approx(brute_force(X, fixed), rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_the_majorant_bound_covers_signed_coefficients(seed):
    rng = np.random.default_rng(seed)
    n, k, b = 10, 3, 2
    c = rng.normal(size=6)
    c[0] = 1.0
    strategy = toeplitz.ToeplitzStrategy(coefficients=c, n=n)
    schema = MinSeparation(max_participations=k, separation=b, n=n)
    majorant = np.maximum.accumulate(np.abs(c)[::-1])[::-1]
    bound = toeplitz.monotone_sensitivity_squared(majorant, n=n, participations=k, separation=b)
    X = strategy.gram()
    assert bound >= max(float(np.abs(X[np.ix_(p, p)]).sum()) for p in patterns_of(schema)) * (1 - 1e-12)
    assert bound >= brute_force_signs(X, schema) * (1 - 1e-12)


STRATEGIES = [
    lambda n: toeplitz.ToeplitzStrategy(coefficients=toeplitz.square_root_coefficients(5), n=n, name="banded"),
    lambda n: toeplitz.BufferedToeplitz(decay=np.array([0.95, 0.4]), scale=np.array([0.25, 0.2])).strategy(n),
    lambda n: toeplitz.bisr(n=n, bands=4),
    lambda n: toeplitz.optimize_banded(n=n, bands=4, schema=MinSeparation(max_participations=2, separation=n // 2, n=n)).strategy,
]


@pytest.mark.parametrize("make", STRATEGIES)
def test_strategies_against_dense_matrices(make):
    n = 40
    strategy = make(n)
    C, B = strategy.dense_encoder(), strategy.dense_decoder()
    assert np.max(np.abs(B @ C - np.tri(n))) < 1e-12
    assert strategy.per_step_variance() == pytest.approx(np.sum(B * B, axis=1), rel=1e-12)
    assert strategy.decoder_frobenius_squared() == pytest.approx(float(np.sum(B * B)), rel=1e-12)
    assert strategy.max_error() == pytest.approx(float(np.max(np.sum(B * B, axis=1))), rel=1e-12)
    z = np.random.default_rng(1).normal(size=(n, 3))
    assert np.max(np.abs(strategy.decode(z) - B @ z)) < 1e-10
    draws = iter(z)
    streamed = np.array(list(strategy.stream(lambda: next(draws))))
    assert np.max(np.abs(streamed - B @ z)) < 1e-10


def test_blt_coefficients_are_its_definition():
    blt = toeplitz.BufferedToeplitz(decay=np.array([0.9, 0.3, 0.6]), scale=np.array([0.1, 0.4, 0.2]))
    t = np.arange(1, 30)
    expected = np.concatenate([[1.0], (blt.scale[None, :] * blt.decay[None, :] ** (t[:, None] - 1)).sum(axis=1)])
    assert blt.coefficients(30) == pytest.approx(expected, rel=1e-12)
    C = toeplitz.ToeplitzStrategy(coefficients=expected, n=30).dense_encoder()
    assert blt.inverse_coefficients(30) == pytest.approx(np.linalg.inv(C)[:, 0], abs=1e-12)


def test_bisr_inverse_is_the_banded_square_root_inverse():
    strategy = toeplitz.bisr(n=30, bands=5)
    assert np.count_nonzero(strategy.noising) == 5
    assert strategy.noising[:5] == pytest.approx([1, -1 / 2, -1 / 8, -1 / 16, -5 / 128])
    assert strategy.monotone  # C = 1/(1 − a(x)) with a ≥ 0: non-negative, here non-increasing too


@pytest.mark.parametrize("error", ["mean", "max"])
def test_banded_toeplitz_gradient_is_the_finite_difference(error):
    rng = np.random.default_rng(0)
    n, k, b = 50, 3, 12
    c = _random_monotone(rng, 7)
    schema = MinSeparation(max_participations=k, separation=b, n=n)
    value, gradient = toeplitz._loss_and_gradient(c, n=n, participations=k, separation=b, error=error)
    assert value == pytest.approx(toeplitz._objective(toeplitz.ToeplitzStrategy(coefficients=c, n=n), schema, error), rel=1e-12)
    for m in range(7):
        step = np.zeros(7)
        step[m] = 1e-6
        up = toeplitz._objective(toeplitz.ToeplitzStrategy(coefficients=c + step, n=n), schema, error)
        down = toeplitz._objective(toeplitz.ToeplitzStrategy(coefficients=c - step, n=n), schema, error)
        assert (up - down) / 2e-6 == pytest.approx(gradient[m], rel=1e-5)


@pytest.mark.parametrize(
    "schema", [Participation(max_participations=4, min_sep=50, n=200), MinSeparation(max_participations=4, separation=30, n=200)]
)
def test_optimizers_improve_on_their_starting_points(schema):
    n = 200
    square_root = toeplitz.ToeplitzStrategy(coefficients=toeplitz.square_root_coefficients(schema.separation), n=n)
    banded = toeplitz.optimize_banded_toeplitz(n=n, bands=schema.separation, schema=schema)
    assert banded.strategy.monotone and banded.loss < toeplitz._objective(square_root, schema, "mean")
    blt = toeplitz.optimize_blt(n=n, buffers=2, schema=schema, error="max")
    assert blt.strategy.monotone and blt.loss < toeplitz._objective(toeplitz.bisr(n=n, bands=1), schema, "max")
    assert blt.loss == pytest.approx(blt.strategy.sensitivity_squared(schema)[0] * blt.strategy.max_error())


@pytest.mark.parametrize("make", STRATEGIES)
def test_torch_generator_streams_the_strategy(make):
    n, d = 24, 20_000
    strategy = make(n)
    generator = CorrelatedNoise(strategy, [(d,)], seed=2)
    assert generator.buffered_steps == 0
    Y = torch.stack([generator.next()[0].double() for _ in range(n)]).numpy()
    reference = strategy.dense_decoder() @ strategy.dense_decoder().T
    diagonal = np.diag(reference)
    error = np.sqrt((np.outer(diagonal, diagonal) + reference**2) / d)
    assert np.max(np.abs(Y @ Y.T / d - reference) / error) < 5


def test_compare_rows_and_cli_for_both_schemas(tmp_path):
    fixed = strategy_rows(n=120, max_participations=3, participation="fixed-epoch")
    minsep = strategy_rows(n=120, max_participations=3, participation="min-sep")
    assert [row.family for row in fixed] == ["banded Toeplitz", "BLT", "BISR", "banded"]
    for row in fixed + minsep:
        expected = {"banded": {"nonnegative", "banded"}}.get(row.family, {"toeplitz-monotone"})
        assert row.loss.sensitivity_method in expected and row.loss.loss > 0
    shown = run_cli("multi-epoch", "compare", "--n", "60", "--participations", "3", "--participation", "min-sep", "--json")
    assert shown.returncode == 0, shown.stderr
    assert '"participation": "min-sep"' in shown.stdout and "BLT" in shown.stdout and "optimal MF" in shown.stdout
    wrong = run_cli("multi-epoch", "compare", "--n", "60", "--participations", "3", "--participation", "sometimes")
    assert wrong.returncode == 2 and "--participation must be" in wrong.stderr


def test_min_sep_flag_is_deprecated_and_says_what_it_means(tmp_path):
    old = run_cli(
        "multi-epoch", "optimize", "--n", "8", "--participations", "2", "--min-sep", "4", "--out", str(tmp_path / "a.npz")
    )
    assert old.returncode == 0 and "deprecated" in old.stderr and "fixed-epoch participation, exactly 4 steps apart" in old.stderr
    refused = run_cli(
        "multi-epoch",
        "optimize",
        "--n",
        "8",
        "--participations",
        "2",
        "--participation",
        "min-sep",
        "--out",
        str(tmp_path / "b.npz"),
    )
    assert refused.returncode == 2 and "fixed-epoch participation only" in refused.stderr


def test_check_strategy_reads_other_libraries_files_and_reports_both_schemas(tmp_path):
    import json

    n, k, b = 60, 3, 20
    coefficients = toeplitz.square_root_coefficients(12)
    np.save(tmp_path / "c.npy", coefficients)
    (tmp_path / "c.txt").write_text(",".join(str(v) for v in coefficients))
    (tmp_path / "blt.json").write_text(json.dumps({"buf_decay": [0.9, 0.4], "output_scale": [0.3, 0.1]}))
    np.savez(tmp_path / "blt.npz", buf_decay=np.array([0.9, 0.4]), output_scale=np.array([0.3, 0.1]))
    for name in ("c.npy", "c.txt", "blt.json", "blt.npz"):
        strategy = toeplitz.read_strategy(tmp_path / name, n=n)
        report = toeplitz.strategy_report(strategy, max_participations=k, separation=b)
        X = strategy.gram()
        for schema in (
            Participation(max_participations=k, min_sep=b, n=n),
            MinSeparation(max_participations=k, separation=b, n=n),
        ):
            entry = report["schemas"][schema.name]
            assert entry["sensitivity_squared"] == pytest.approx(brute_force(X, schema), rel=1e-12)
            B = strategy.dense_decoder()
            assert entry["loss"] == pytest.approx(entry["sensitivity_squared"] * float(np.sum(B * B)), rel=1e-12)
            assert entry["max_loss"] == pytest.approx(
                entry["sensitivity_squared"] * float(np.max(np.sum(B * B, axis=1))), rel=1e-12
            )
    shown = run_cli(
        "multi-epoch",
        "check-strategy",
        str(tmp_path / "blt.json"),
        "--n",
        "61",
        "--participations",
        "3",
        "--separation",
        "20",
        "--json",
    )
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert "not a multiple" in record["schemas"]["fixed-epoch"]["not_applicable"] and record["schemas"]["min-sep"]["loss"] > 0
    (tmp_path / "bad.txt").write_text("1, nan, 0.2")
    (tmp_path / "empty.json").write_text("{}")
    for bad, message in [("bad.txt", "finite"), ("empty.json", "no coefficients"), ("missing.npy", "no such file")]:
        result = run_cli("multi-epoch", "check-strategy", str(tmp_path / bad), "--n", "60", "--participations", "3")
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_banded_strategy_gradient_optimizer_and_stream():
    n, k, b = 36, 3, 12
    schema = MinSeparation(max_participations=k, separation=b, n=n)
    fit = toeplitz.optimize_banded(n=n, bands=b, schema=schema)
    strategy = fit.strategy
    C, B = strategy.dense_encoder(), strategy.dense_decoder()
    assert np.max(np.abs(B @ C - np.tri(n))) < 1e-10
    assert np.allclose(np.linalg.norm(C, axis=0), 1) and not np.any(np.triu(C, 1)) and not np.any(np.tril(C, -b))
    value, method = schema_sensitivity_squared(gram=C.T @ C, schema=schema)
    assert method == "banded" and value == pytest.approx(k) and fit.loss == pytest.approx(k * float(np.sum(B * B)))
    toeplitz_fit = toeplitz.optimize_banded_toeplitz(n=n, bands=b, schema=schema)
    assert fit.loss <= toeplitz_fit.loss * (1 + 1e-9)  # started there, and the general band can do better
    z = np.random.default_rng(5).normal(size=(n, 2))
    draws = iter(z)
    assert np.max(np.abs(np.array(list(strategy.stream(lambda: next(draws)))) - B @ z)) < 1e-9
    with pytest.raises(InvalidInputError, match="exceeds the separation"):
        toeplitz.optimize_banded(n=n, bands=b + 1, schema=schema)
