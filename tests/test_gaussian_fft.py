"""The FFT mechanism and its optimal decoder (Choquette-Choo et al., section 4, App. J, K), against dense references."""

import numpy as np
import pytest

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.fft import (
    FFTMechanism,
    FFTOptimalDecoderMechanism,
    SymmetricToeplitzInverse,
    ToeplitzSolveError,
    prefix_circulant_eigenvalues,
)

SIZES = (1, 2, 3, 4, 7, 16, 31, 64)


def dense_fft_factorization(n):
    """C_F = F*·√Σ·F·E and B_F = P·F*·√Σ·F from explicit DFT matrices (App. K), independent of fft.py."""
    v = np.concatenate([np.ones(n), np.zeros(n)])
    F = np.fft.fft(np.eye(2 * n), norm="ortho")  # unitary DFT matrix
    eigenvalues = np.fft.fft(v)  # unnormalized: A_circ = F*·diag(λ)·F
    eigenvalues[np.abs(eigenvalues) < 1e-9] = 0.0  # the even frequencies are exactly zero
    K = F.conj().T @ np.diag(np.sqrt(eigenvalues)) @ F
    assert np.max(np.abs(K.imag)) < 1e-12  # Lemma K.1: real
    K = K.real
    return K[:n], K[:, :n]


@pytest.mark.parametrize("n", range(1, 21))
def test_closed_form_eigenvalues_are_the_dft_of_the_embedding(n):
    v = np.concatenate([np.ones(n), np.zeros(n)])
    np.testing.assert_allclose(prefix_circulant_eigenvalues(n), np.fft.fft(v), atol=1e-10)


@pytest.mark.parametrize("n", SIZES)
def test_fft_factorization_matches_dense_construction_and_factorizes(n):
    mechanism = FFTMechanism(n)
    B, C = mechanism.dense_decoder(), mechanism.dense_encoder()
    B_ref, C_ref = dense_fft_factorization(n)
    np.testing.assert_allclose(C, C_ref, atol=1e-12)
    np.testing.assert_allclose(B, B_ref, atol=1e-12)
    assert np.max(np.abs(B @ C - np.tri(n))) < 1e-9
    T = C.T @ C
    np.testing.assert_allclose(T, B @ B.T, atol=1e-10)
    np.testing.assert_allclose(mechanism.gram(), T, atol=1e-10)
    assert mechanism.decoder_frobenius_squared() == pytest.approx(np.sum(B * B), rel=1e-12)
    np.testing.assert_allclose(mechanism.per_step_variance(), np.sum(B * B, axis=1), rtol=1e-10)


@pytest.mark.parametrize("n", SIZES)
def test_optimal_decoder_equals_dense_pseudo_inverse_decoder(n):
    mechanism = FFTOptimalDecoderMechanism(n)
    C = mechanism.dense_encoder()
    B_pinv = np.tri(n) @ np.linalg.pinv(C)
    z = np.random.default_rng(n).standard_normal((2 * n, 5))
    np.testing.assert_allclose(mechanism.decode(z), B_pinv @ z, atol=1e-9)  # same z, same noise
    np.testing.assert_allclose(mechanism.decode(z[:, 0]), B_pinv @ z[:, 0], atol=1e-9)
    B = mechanism.dense_decoder()
    assert np.max(np.abs(B @ C - np.tri(n))) < 1e-9
    assert mechanism.last_residual <= 1e-10
    np.testing.assert_allclose(mechanism.per_step_variance(), np.sum(B_pinv**2, axis=1), rtol=1e-9, atol=1e-12)
    assert mechanism.decoder_frobenius_squared() == pytest.approx(np.sum(B_pinv**2), rel=1e-9)


@pytest.mark.parametrize("n", (2, 3, 10, 64, 500, 3000))
def test_optimal_decoder_loss_is_below_fft_loss(n):
    # same encoder, so same sensitivity: the loss ordering is the ‖B‖_F² ordering
    assert FFTOptimalDecoderMechanism(n).decoder_frobenius_squared() < FFTMechanism(n).decoder_frobenius_squared()


def test_fft_frobenius_norm_closed_form():
    # ‖B_F‖_F² = ‖λ‖₁/2 = (n + Σ_{k odd} 1/sin(πk/2n))/2
    for n in (5, 100, 1000):
        odd = np.arange(1, 2 * n, 2)
        expected = (n + np.sum(1 / np.sin(np.pi * odd / (2 * n)))) / 2
        assert FFTMechanism(n).decoder_frobenius_squared() == pytest.approx(expected, rel=1e-12)


def test_encode_transpose_is_the_transpose():
    mechanism = FFTMechanism(9)
    y = np.random.default_rng(0).standard_normal(18)
    np.testing.assert_allclose(mechanism.encode_transpose(y), mechanism.dense_encoder().T @ y, atol=1e-12)


def test_toeplitz_solver_residual_and_failure():
    n = 300
    fft = FFTMechanism(n)
    solver = SymmetricToeplitzInverse(fft.gram_column, fft.gram_apply)
    w = np.random.default_rng(1).standard_normal((n, 3))
    u = solver.solve(w)
    np.testing.assert_allclose(u, np.linalg.solve(fft.gram(), w), rtol=1e-9, atol=1e-12)
    assert solver.last_residual <= 1e-10 and solver.setup_residual <= 1e-10
    with pytest.raises(ToeplitzSolveError):
        SymmetricToeplitzInverse(fft.gram_column, fft.gram_apply, residual_tolerance=1e-30)


def test_large_n_is_fast_path_only():
    mechanism = FFTOptimalDecoderMechanism(20_000)
    z = np.random.default_rng(2).standard_normal((40_000, 2))
    noise = mechanism.decode(z)
    assert noise.shape == (20_000, 2) and mechanism.last_residual <= 1e-10
    with pytest.raises(InvalidInputError, match="dense forms"):
        mechanism.dense_encoder()


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.decode(np.zeros(5)),
        lambda m: m.encode(np.zeros((4, 2))),
        lambda m: m.decode(np.full(16, np.nan)),
    ],
)
def test_bad_shapes_and_values_are_named(call):
    with pytest.raises(InvalidInputError):
        call(FFTMechanism(8))


def test_bad_size():
    with pytest.raises(InvalidInputError, match="n must be"):
        FFTMechanism(0)
