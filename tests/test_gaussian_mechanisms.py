"""Honaker trees, stamping, the loss and the comparison table (Choquette-Choo et al., App. D), against dense references."""

import json

import numpy as np
import pytest
from conftest import dyadic_binary_tree, run_cli
from typer.testing import CliRunner

from pure_dp_mf.cli import all_commands
from pure_dp_mf.errors import InvalidInputError, PureDPMFError
from pure_dp_mf.gaussian.comparison import compare, default_stamps
from pure_dp_mf.gaussian.fft import FFTMechanism, FFTOptimalDecoderMechanism
from pure_dp_mf.gaussian.honaker import VARIANTS, HonakerMechanism, honaker_weights
from pure_dp_mf.gaussian.participation import Participation
from pure_dp_mf.gaussian.sensitivity import gram_sensitivity_squared
from pure_dp_mf.gaussian.stamping import (
    DenseMechanism,
    StampedMechanism,
    best_stamps,
    evaluate,
    pseudo_inverse_stamp,
    sensitivity_of,
)

app = all_commands()

SIZES = (1, 2, 3, 5, 8, 11, 16, 37, 64)


# ---------------------------------------------------------------- Honaker


def test_honaker_weights():
    # inverse-variance weights: α₁ = 2/3, α₂ = (4/3)/(7/3) = 4/7
    np.testing.assert_allclose(honaker_weights(3)[:3], [1, 2 / 3, 4 / 7])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_tree_variant_factorizes(n, variant):
    mechanism = HonakerMechanism(n, variant)
    B, C = mechanism.dense_decoder(), mechanism.dense_encoder()
    assert B.shape == (n, mechanism.inner_size) and C.shape == (mechanism.inner_size, n)
    assert np.max(np.abs(B @ C - np.tri(n))) < 1e-9
    assert np.all(C.T @ C >= 0)


@pytest.mark.parametrize("n", (4, 16, 32))
def test_tree_encoder_is_the_binary_tree(n):
    _, reference = dyadic_binary_tree(n)
    rows = {tuple(row) for row in HonakerMechanism(n, "online").dense_encoder()}
    assert rows == {tuple(row) for row in reference}


@pytest.mark.parametrize("n", (3, 5, 11, 37, 100))
def test_completion_with_virtual_noise_removed_beats_without(n):
    with_noise = HonakerMechanism(n, "completion")
    removed = HonakerMechanism(n, "completion-virtual-removed")
    online = HonakerMechanism(n, "online")
    assert removed.decoder_frobenius_squared() < with_noise.decoder_frobenius_squared()
    # same sensitivity (the removed rows are zero rows), so the loss is lower too
    for k in (1, n):
        b = n // k
        assert sensitivity_of(removed, max_participations=k, min_sep=b) == sensitivity_of(
            with_noise, max_participations=k, min_sep=b
        )
    # completion lowers the variance of the last step below the online estimate
    assert removed.per_step_variance()[-1] < online.per_step_variance()[-1]


@pytest.mark.parametrize("n", (8, 16))
def test_variants_coincide_for_powers_of_two(n):
    values = {HonakerMechanism(n, v).decoder_frobenius_squared() for v in VARIANTS[:3]}
    assert max(values) - min(values) < 1e-12


@pytest.mark.parametrize("n", (5, 12, 37))
def test_full_honaker_decoder_is_the_pseudo_inverse_decoder(n):
    mechanism = HonakerMechanism(n, "full")
    C = mechanism.dense_encoder()
    np.testing.assert_allclose(mechanism.dense_decoder(), np.tri(n) @ np.linalg.pinv(C), atol=1e-10)
    assert mechanism.decoder_frobenius_squared() < HonakerMechanism(n, "completion-virtual-removed").decoder_frobenius_squared()


def test_tree_streams_refuse_full_decoder():
    with pytest.raises(InvalidInputError, match="not online"):
        HonakerMechanism(5, "full").stream(lambda: 0.0)


def test_bad_variant():
    with pytest.raises(InvalidInputError, match="unknown tree variant"):
        HonakerMechanism(5, "bogus")


# ---------------------------------------------------------------- stamping


def bases(m):
    A = np.tri(m)
    C = np.linalg.cholesky(np.eye(m) + 0.3 * np.ones((m, m))).T
    return [
        FFTMechanism(m),
        FFTOptimalDecoderMechanism(m),
        HonakerMechanism(m, "completion-virtual-removed"),
        HonakerMechanism(m, "online"),
        DenseMechanism(decoder=A @ np.linalg.inv(C), encoder=C, name="dense"),
    ]


@pytest.mark.parametrize("m,s", [(1, 3), (5, 2), (8, 4), (16, 4), (21, 3)])
def test_stamped_mechanisms_factorize_and_fast_paths_match_dense(m, s):
    for base in bases(m):
        stamped = StampedMechanism(base, s)
        B, C = stamped.dense_decoder(), stamped.dense_encoder()
        assert np.max(np.abs(B @ C - np.tri(m * s))) < 1e-9, base.name
        np.testing.assert_allclose(stamped.per_step_variance(), np.sum(B * B, axis=1), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stamped.gram(), C.T @ C, atol=1e-10)
        z = np.random.default_rng(m).standard_normal((stamped.inner_size, 3))
        np.testing.assert_allclose(stamped.decode(z), B @ z, atol=1e-9)


@pytest.mark.parametrize("m,s", [(4, 2), (7, 3), (16, 2)])
def test_restart_construction_with_pseudo_inverse_base_is_the_pseudo_inverse_decoder(m, s):
    for base in (FFTOptimalDecoderMechanism(m), HonakerMechanism(m, "full")):
        restart = StampedMechanism(base, s).dense_decoder()
        pinv = pseudo_inverse_stamp(workload=np.tri(m * s), encoder=base.dense_encoder(), stamps=s).decoder
        np.testing.assert_allclose(restart, pinv, atol=1e-9)


def test_pseudo_inverse_stamping_for_any_workload():
    rng = np.random.default_rng(3)
    A = np.tril(rng.standard_normal((12, 12)))  # no constant columns: the restart construction does not apply
    C = FFTMechanism(4).dense_encoder()
    mechanism = pseudo_inverse_stamp(workload=A, encoder=C, stamps=3)
    assert np.max(np.abs(mechanism.decoder @ mechanism.encoder - A)) < 1e-9
    with pytest.raises(InvalidInputError, match="workload must be"):
        pseudo_inverse_stamp(workload=A, encoder=C, stamps=2)


def test_loss_and_best_stamps():
    k, b = 4, 8
    losses = {}
    for s in (1, 2, 4):
        mechanism = StampedMechanism(FFTMechanism(32 // s), s)
        B, C = mechanism.dense_decoder(), mechanism.dense_encoder()
        X = C.T @ C
        schema = Participation(max_participations=k, min_sep=b, n=32)
        loss = evaluate(mechanism, max_participations=k, min_sep=b)
        assert loss.decoder_frobenius_squared == pytest.approx(np.sum(B * B))
        assert loss.sensitivity_squared == pytest.approx(
            gram_sensitivity_squared(gram=X, schema=schema, method=loss.sensitivity_method)
        )
        assert loss.loss == pytest.approx(np.sum(B * B) * loss.sensitivity_squared)
        losses[s] = loss.loss
    best, best_loss, all_losses = best_stamps(FFTMechanism, n=32, stamps=(1, 2, 4), max_participations=k, min_sep=b)
    assert best_loss.loss == min(losses.values()) and best.stamps == min(losses, key=losses.get)
    assert {s: result.loss for s, result in all_losses.items()} == pytest.approx(losses)
    with pytest.raises(InvalidInputError, match="do not divide"):
        best_stamps(FFTMechanism, n=32, stamps=(3,), max_participations=k, min_sep=b)


@pytest.mark.parametrize("n", (10, 12))
def test_fft_sensitivity_is_a_sound_upper_bound_when_gram_has_negative_entries(n):
    # (k, b) = (n, 1): X = C_FᵀC_F has negative entries inside the pattern, so the exact
    # nonnegative formula does not apply; the eigenvalue bound must dominate the exact d = 1 value
    mechanism = FFTMechanism(n)
    schema = Participation(max_participations=n, min_sep=1, n=n)
    X = mechanism.gram()
    assert X.min() < 0
    sens, method = sensitivity_of(mechanism, max_participations=n, min_sep=1)
    assert method == "upper-bound"
    assert sens >= gram_sensitivity_squared(gram=X, schema=schema, method="exact") - 1e-12


# ---------------------------------------------------------------- comparison table


def test_compare_table_small():
    k, n = 4, 32
    rows = compare(n=n, max_participations=k)
    by_family = {row.family: row for row in rows}
    assert len(rows) == 12  # 8 dense families, the 3 Toeplitz strategies and the banded one
    for row in rows:
        B, C = row.mechanism.dense_decoder(), row.mechanism.dense_encoder()
        assert np.max(np.abs(B @ C - np.tri(n))) < 1e-9, row.family
        assert row.loss.loss == pytest.approx(min(row.losses_by_stamps.values()))
        assert row.step_variance().sum() == pytest.approx(row.loss.loss)
    fft, fft_opt = by_family["FFT"], by_family["FFT, optimal decoder"]
    for s in default_stamps(max_participations=k):
        assert fft_opt.losses_by_stamps[s] < fft.losses_by_stamps[s]
        assert (
            by_family["Honaker + completion, virtual noise removed"].losses_by_stamps[s]
            <= by_family["Honaker + completion"].losses_by_stamps[s]
        )
    assert by_family["independent noise"].loss.loss == pytest.approx(k * n * (n + 1) / 2)
    optimum = by_family[f"optimal MF(k={k}, b={n // k})"].loss.loss
    assert all(optimum <= row.loss.loss * (1 + 2e-3) for row in rows)  # optimizer gap 1e-3


def test_cli_compare_json_and_plot(tmp_path):
    plot = tmp_path / "v.png"
    result = CliRunner().invoke(
        app,
        [
            "multi-epoch",
            "compare",
            "--n",
            "16",
            "--participations",
            "2",
            "--no-optimizer",
            "--noise-multiplier",
            "3",
            "--delta",
            "1e-5",
            "--json",
            "--plot",
            str(plot),
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["epsilon"] > 0 and plot.stat().st_size > 1000
    rows = {row["family"]: row for row in document["rows"]}
    assert rows["FFT"]["rmse"] == pytest.approx(3 * np.sqrt(rows["FFT"]["loss"] / 16))
    text = CliRunner().invoke(app, ["multi-epoch", "compare", "--n", "16", "--participations", "2", "--no-optimizer"])
    assert text.exit_code == 0 and "Honaker" in text.output


def test_cli_compare_error_exit_code():
    result = run_cli("multi-epoch", "compare", "--no-optimizer", "--n", "15", "--participations", "2")
    assert result.returncode == 2 and "not a multiple" in result.stderr


@pytest.mark.parametrize(
    "arguments,message",
    [
        (["--stamps", "x"], "--stamps"),
        (["--stamps", "0,2"], "--stamps"),
        (["--noise-multiplier", "-1"], "noise_multiplier"),
        (["--plot", "/nonexistent/folder/v.png"], "does not exist"),
    ],
)
def test_cli_compare_errors_are_named(arguments, message):
    result = CliRunner().invoke(
        app, ["multi-epoch", "compare", "--no-optimizer", "--n", "16", "--participations", "2", *arguments]
    )
    assert isinstance(result.exception, PureDPMFError) and message in str(result.exception)
