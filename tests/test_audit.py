"""The privacy audit: valid on the real counters, powerful against broken ones; the samplers' laws.

Broken counters live here only (never in the library). Each is an ``AuditTarget`` whose claimed law
(decoder, scale) is the real counter's and whose released noise is the broken one's.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from conftest import SAFETY_LIMIT

from pure_dp_mf.engines.generator import NoiseGenerator, laplace_from_words, round_to_integers
from pure_dp_mf.mechanisms import trees
from pure_dp_mf.reports.audit import (
    AuditError,
    AuditTarget,
    Pair,
    audit,
    clopper_pearson,
    counter_target,
    default_pairs,
    pair_loss,
)
from pure_dp_mf.resources import BASE_FOLDER as BASES

ROOT = Path(__file__).resolve().parents[1]
K4 = BASES / "k004_maxse.npz"
ALPHA = 1e-6


# ------------------------------------------------------------------------------ building blocks


def test_clopper_pearson_edges_and_coverage():
    T, a = 1000, 0.01
    lower, upper = clopper_pearson(np.array([0, T]), T, alpha=a)
    assert lower[0] == 0 and upper[1] == 1
    assert upper[0] == pytest.approx(1 - a ** (1 / T), rel=1e-9)  # k = 0: (1 − p)^T = α
    assert lower[1] == pytest.approx(a ** (1 / T), rel=1e-9)  # k = T: p^T = α
    # exact one-sided coverage for p = 0.3: P[bound misses p] ≤ α, summed over the binomial law
    k = np.arange(T + 1)
    lo, hi = clopper_pearson(k, T, alpha=a)
    pmf = scipy.stats.binom.pmf(k, T, 0.3)
    assert pmf[lo > 0.3].sum() <= a and pmf[hi < 0.3].sum() <= a


@pytest.mark.parametrize("mechanism, arity", [("binary", None), ("kary", 3), ("kary-subtraction", 5), ("smooth-binary", None)])
def test_pair_loss_is_the_column_norm_for_square_trees(mechanism, arity):
    """L square and invertible: the only u with L·u = T·e_i is R·e_i, so λ = ‖R·e_i‖₁."""
    n = 20
    factorization = trees.tree_factorization(mechanism=mechanism, n=n, arity=arity)
    L, R = factorization.dense()
    T = np.tril(np.ones((n, n)))
    for i in (0, 7, n - 1):
        loss, u, v = pair_loss(decoder=L, shift=T[:, i])
        assert loss == pytest.approx(np.abs(R[:, i]).sum(), abs=1e-7)
        assert v @ T[:, i] == pytest.approx(loss, abs=1e-7) and np.abs(L.T @ v).max() <= 1 + 1e-7


def test_pair_loss_is_below_the_sensitivity_for_the_lifted_counter():
    target = counter_target(mechanism="lifted", n=40, epsilon=1.0, base=K4)
    losses = [pair_loss(decoder=target.decoder, shift=target.workload[:, i], dual=False)[0] / target.scale for i in range(40)]
    assert max(losses) <= 1 + 1e-9 and max(losses) > 0.5  # the counter's b = ‖R_p‖₁→₁/ε covers every column


def test_vectorised_noise_is_the_counter_noise_and_a_mismatch_is_caught():
    target = counter_target(mechanism="lifted", n=30, epsilon=0.7, base=K4)
    noise = target.sample_noise(3, 11)
    x = np.random.default_rng(0).integers(0, 2, size=30)
    assert target.cross_check([x, np.zeros(30, dtype=np.int64)], noise, 11) == 6
    bad = noise.copy()
    bad[1, 5] += 1
    with pytest.raises(AuditError, match="differs from ContinualCounter"):
        target.cross_check([x], bad, 11)


def test_default_pairs_are_neighbours():
    target = counter_target(mechanism="binary", n=16, epsilon=1.0)
    pairs = default_pairs(target)
    assert {p.name for p in pairs} >= {"first", "middle", "last", "dense"}
    for p in pairs:
        assert np.abs(p.stream - p.neighbour).sum() == 1 and set(np.unique(p.stream)) <= {0, 1}
    assert next(p for p in pairs if p.name == "first").position == 1
    assert next(p for p in pairs if p.name == "last").position == 16
    assert next(p for p in pairs if p.name == "dense").stream.sum() > 2


# --------------------------------------------------------------------- the real counters: valid


REAL = [
    ("lifted", 64, None, K4, 24_000),
    ("lifted", 64, None, None, 16_000),  # the default: the largest shipped MaxSE base
    ("binary", 64, None, None, 24_000),
    ("kary", 64, None, None, 16_000),
    ("kary-subtraction", 64, None, None, 16_000),
    ("smooth-binary", 64, None, None, 16_000),
    ("averaged-kary-subtraction", 64, None, None, 16_000),
]


@pytest.mark.parametrize("mechanism, n, arity, base, trials", REAL)
def test_real_counters_are_not_contradicted(mechanism, n, arity, base, trials):
    target = counter_target(mechanism=mechanism, n=n, epsilon=1.0, arity=arity, base=base)
    report = audit(target, trials=trials, seed=5, confidence=0.99)
    assert report.cross_checked > 0
    assert not report.contradicted, report.statement
    for pair in report.pairs:
        assert pair.exact_loss <= 1 + 1e-9
        assert pair.epsilon_lower <= pair.exact_loss  # holds with probability ≥ 0.99 (seeded: fixed)
    # not vacuous: the audit sees a real part of the loss of the first position
    first = next(p for p in report.pairs if p.name == "first")
    assert first.epsilon_lower > 0.2 * first.exact_loss


# ------------------------------------------------------------------ broken counters: flagged


def _laplace_target(base: AuditTarget, *, name: str, noise) -> AuditTarget:
    """A broken counter claiming ``base``'s law while releasing ``noise(trials, seed)``."""
    return AuditTarget(
        name=name,
        epsilon=base.epsilon,
        workload=base.workload,
        decoder=base.decoder,
        scale=base.scale,
        sample_noise=noise,
        description=f"broken: {name}",
    )


def _first(n: int) -> list[Pair]:
    zeros = np.zeros(n, dtype=np.int64)
    return [Pair("first", zeros, np.eye(n, dtype=np.int64)[0]), Pair("middle", zeros, np.eye(n, dtype=np.int64)[n // 2])]


def test_halved_noise_scale_is_flagged():
    real = counter_target(mechanism="binary", n=64, epsilon=1.0)

    def halved(trials, seed):
        z = np.random.default_rng(seed).laplace(size=(trials, real.decoder.shape[1]))
        return round_to_integers(real.scale / 2 * z @ real.decoder.T)

    report = audit(_laplace_target(real, name="halved", noise=halved), trials=60_000, seed=1, pairs=_first(64))
    assert report.contradicted and report.epsilon_lower > 1.1, report.statement


@pytest.mark.parametrize("base", [K4, BASES / "k128_maxse.npz"], ids=["k4", "k128"])
def test_halved_noise_scale_of_the_lifted_counter_is_flagged(base):
    if not base.exists():
        pytest.skip(f"{base.name} is not shipped")
    real = counter_target(mechanism="lifted", n=64, epsilon=1.0, base=base)

    def halved(trials, seed):
        z = np.random.default_rng(seed).laplace(size=(trials, real.decoder.shape[1]))
        return round_to_integers(real.scale / 2 * z @ real.decoder.T)

    report = audit(_laplace_target(real, name="halved", noise=halved), trials=100_000, seed=2, pairs=_first(64))
    assert report.contradicted, report.statement


def _truncated_sensitivity(encoder: np.ndarray, *, understate: float) -> float:
    """‖R̃‖₁→₁ of R truncated entrywise to a cap, the cap chosen so that ‖R̃‖₁→₁ = (1 − understate)·‖R‖₁→₁."""
    target = (1 - understate) * np.abs(encoder).sum(axis=0).max()
    low, high = 0.0, np.abs(encoder).max()
    for _ in range(100):
        cap = (low + high) / 2
        low, high = (cap, high) if np.minimum(np.abs(encoder), cap).sum(axis=0).max() < target else (low, cap)
    truncated = np.sign(encoder) * np.minimum(np.abs(encoder), high)
    return float(np.abs(truncated).sum(axis=0).max())


def test_sensitivity_from_a_truncated_encoder_is_flagged():
    n, arity = 64, 9
    real = counter_target(mechanism="kary", n=n, epsilon=1.0, arity=arity)
    _, R = trees.kary_tree(n=n, arity=arity).dense()
    truncated = _truncated_sensitivity(R, understate=0.3)
    assert truncated == pytest.approx(0.7 * np.abs(R).sum(axis=0).max(), rel=1e-6)
    scale = truncated / real.epsilon

    def broken(trials, seed):
        z = np.random.default_rng(seed).laplace(size=(trials, real.decoder.shape[1]))
        return round_to_integers(scale * z @ real.decoder.T)

    report = audit(_laplace_target(real, name="truncated R", noise=broken), trials=100_000, seed=3, pairs=_first(n))
    assert report.contradicted, report.statement


def test_noise_redrawn_after_resume_and_averaged_is_flagged():
    """Killed after step 1, the broken counter redraws step 1's noise on resume and releases the
    average of the two releases of step 1 as an extra output. Both draws are the real counter's."""
    n, arity = 64, 9
    real = counter_target(mechanism="kary", n=n, epsilon=1.0, arity=arity)
    L = real.decoder
    decoder = np.block([[L, np.zeros_like(L)], [L[:1] / 2, L[:1] / 2]])
    workload = np.vstack([real.workload, real.workload[:1]])

    def redrawn(trials, seed):
        first, second = real.sample_noise(trials, 2 * seed), real.sample_noise(trials, 2 * seed + 1)
        return np.hstack([first, (first[:, :1] + second[:, :1]) / 2])

    target = AuditTarget(
        name="redraw",
        epsilon=1.0,
        workload=workload,
        decoder=decoder,
        scale=real.scale,
        sample_noise=redrawn,
        description="broken: redraw after resume",
    )
    report = audit(target, trials=60_000, seed=4, pairs=_first(n))
    assert report.contradicted, report.statement


def test_gaussian_noise_of_equal_variance_is_flagged_at_small_epsilon():
    """Laplace(b) has variance 2b²; a Gaussian of σ = √2·b is never pure DP. One-level tree
    (arity n + 1: L = T, R = I), ε = 0.5."""
    n = 16
    real = counter_target(mechanism="kary", n=n, epsilon=0.5, arity=n + 1)

    def gaussian(trials, seed):
        g = np.random.default_rng(seed).normal(scale=math.sqrt(2) * real.scale, size=(trials, real.decoder.shape[1]))
        return round_to_integers(g @ real.decoder.T)

    report = audit(_laplace_target(real, name="gaussian", noise=gaussian), trials=200_000, seed=6, pairs=_first(n))
    assert report.contradicted, report.statement
    assert any(p.statistic in ("linear", "fisher") and p.contradicted for p in report.pairs)  # a tail event


# ------------------------------------------------------------------------------- the samplers


def _laplace_cdf(x):
    return scipy.stats.laplace.cdf(x)


def _seeded_laplace(size: int, seed: int = 7) -> np.ndarray:
    generator = NoiseGenerator.from_seed(seed)
    return laplace_from_words(generator.words_of_blocks(indices=range(size // 1000), size=1000))


def _chi2_pvalue(samples: np.ndarray, probabilities: np.ndarray, edges: np.ndarray) -> float:
    counts = np.histogram(samples, bins=edges)[0]
    expected = probabilities * samples.size
    return float(scipy.stats.chisquare(counts, expected).pvalue)


def test_laplace_sampler_passes_ks_and_chi2_and_rejects_a_30_percent_scale_error():
    z = _seeded_laplace(400_000)
    assert scipy.stats.kstest(z, _laplace_cdf).pvalue > ALPHA
    edges = np.concatenate([[-np.inf], scipy.stats.laplace.ppf(np.linspace(0, 1, 101)[1:-1]), [np.inf]])
    probabilities = np.full(100, 0.01)
    assert _chi2_pvalue(z, probabilities, edges) > ALPHA
    wrong = 1.3 * z  # power: the same tests reject a scale off by 30 %
    assert scipy.stats.kstest(wrong, _laplace_cdf).pvalue < ALPHA
    assert _chi2_pvalue(wrong, probabilities, edges) < ALPHA
    assert scipy.stats.kstest(z / 1.3, _laplace_cdf).pvalue < ALPHA


def test_released_noise_of_a_counter_has_the_rounded_laplace_law():
    """The binary tree's first release is S₁ + round(b·z), one node: its law is exactly
    P[k] = F((k + ½)/b) − F((k − ½)/b). χ² on the counter's own (vectorised, cross-checked) noise."""
    target = counter_target(mechanism="binary", n=8, epsilon=1.0)
    b = target.scale
    noise = target.sample_noise(60_000, 9)[:, 0]
    cut = int(3 * b)
    edges = np.concatenate([[-np.inf], np.arange(-cut, cut + 2) - 0.5, [np.inf]])
    cdf = _laplace_cdf(np.clip(edges, -1e9, 1e9) / b)
    probabilities = np.diff(cdf)
    assert _chi2_pvalue(noise, probabilities, edges) > ALPHA
    wrong = round_to_integers(1.3 * b * _seeded_laplace(60_000, seed=10))
    assert _chi2_pvalue(wrong, probabilities, edges) < ALPHA


# ------------------------------------------------------------------------------------- the CLI


def _main(capsys, monkeypatch, *arguments: str):
    """Run ``pure_dp_mf.cli.main`` in-process: (exit code, stdout, stderr)."""
    from pure_dp_mf.cli import main

    monkeypatch.setattr(sys, "argv", ["pure-dp-mf", *arguments])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_cli_json_report(capsys, monkeypatch):
    code, out, err = _main(
        capsys,
        monkeypatch,
        "audit",
        "--mechanism",
        "binary",
        "--n",
        "8",
        "--epsilon",
        "1",
        "--trials",
        "2000",
        "--seed",
        "3",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["mechanism"] == "binary" and report["n"] == 8 and report["trials"] == 2000 and not report["contradicted"]
    assert {p["name"] for p in report["pairs"]} >= {"first", "middle", "last", "dense"}
    assert all(p["count_favoured"] + p["count_other"] > 0 for p in report["pairs"])


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--mechanism", "nope", "--n", "8", "--epsilon", "1"], "unknown mechanism"),
        (["--mechanism", "binary", "--n", "0", "--epsilon", "1"], "n must be"),
        (["--mechanism", "binary", "--n", "8", "--epsilon", "-1"], "epsilon"),
        (["--mechanism", "binary", "--n", "8", "--epsilon", "1", "--trials", "5"], "trials"),
        (["--mechanism", "binary", "--n", "8", "--epsilon", "1", "--confidence", "1.5"], "confidence"),
        (["--mechanism", "binary", "--n", "5000", "--epsilon", "1"], "n must be at most"),
        (["--mechanism", "lifted", "--n", "8", "--epsilon", "1", "--base", "/nonexistent.npz"], "nonexistent"),
    ],
)
def test_cli_bad_arguments(capsys, monkeypatch, arguments, message):
    code, out, err = _main(capsys, monkeypatch, "audit", *arguments)
    assert code == 2 and message in err and "Traceback" not in err
    assert out == ""


def test_cli_exit_code_through_the_script():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pure_dp_mf.cli import main; main()",
            "audit",
            "--mechanism",
            "kary",
            "--n",
            "4",
            "--epsilon",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=SAFETY_LIMIT,
    )
    assert result.returncode == 2 and result.stderr.startswith("error: ") and result.stdout == ""


def test_the_audit_is_nearly_tight_on_a_tight_counter():
    """The one-level tree (L = T, R = I) loses exactly ε at every position; the audit's lower bound
    comes within 25 % of it, and its point estimate within 10 %."""
    target = counter_target(mechanism="kary", n=4, epsilon=1.0, arity=5)
    report = audit(target, trials=60_000, seed=8)
    first = next(p for p in report.pairs if p.name == "first")
    assert first.exact_loss == pytest.approx(1.0)
    assert 0.75 < first.epsilon_lower <= 1.0 and abs(first.epsilon_estimate - 1.0) < 0.1
    assert first.epsilon_lower == pytest.approx(math.log(first.probability_favoured_lower / first.probability_other_upper))
