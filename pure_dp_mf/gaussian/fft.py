"""The FFT mechanism and the FFT mechanism with the optimal decoder (Choquette-Choo et al., section 4, App. C, J, K).

Circulant embedding (App. J). The prefix-sum matrix A (n×n, lower-triangular ones) is the top-left
block of the 2n×2n circulant A_circ whose first column is v = (1,…,1, 0,…,0) (n ones, n zeros):
A = P·A_circ·E, with E: Rⁿ → R²ⁿ padding zeros and P: R²ⁿ → Rⁿ keeping the first n entries.
With the orthonormal DFT F, A_circ = F*·Σ·F, Σ = diag(λ), λ = DFT(v) (unnormalized):

    λ₀ = n,   λ_k = 0 for even k ≠ 0,   λ_k = 1 − i·cot(πk/(2n)) for odd k,   |λ_k| = 1/sin(πk/(2n)).

The closed form is used (no numerical DFT of v), so the zeros are exact zeros.

Real factorization (App. K, Lemma K.1). Re λ_k ≥ 0, so the principal square root keeps the
conjugate symmetry λ_{2n−k} = conj(λ_k); K = F*·√Σ·F is then a real circulant and

    encoder C_F = K·E  (2n×n),   decoder B_F = P·K  (n×2n),   B_F·C_F = P·F*·Σ·F·E = A.

(Choquette-Choo et al.'s public code scales by Λ instead of √Λ; then B·C ≠ A. Not done here.)
Both Grams are the same symmetric Toeplitz matrix T = C_Fᵀ·C_F = B_F·B_Fᵀ = P·F*·|Σ|·F·E, the top-left
n×n block of the circulant with eigenvalues |λ|; so ‖B_F‖_F² = n·T₀₀ = ‖λ‖₁/2 and every step has
the same noise variance T₀₀.

Optimal decoder (App. K). C_F is one-to-one, so C_F⁺ = (C_Fᵀ·C_F)⁻¹·C_Fᵀ and

    B_opt = A·C_F⁺ = A·T⁻¹·C_Fᵀ,   B_opt·B_optᵀ = A·T⁻¹·Aᵀ.

T⁻¹ is applied with the Gohberg–Semencul formula from x = T⁻¹·e₀ (computed once by preconditioned
conjugate gradients with T. Chan's circulant preconditioner, O(n log n) per iteration):

    T⁻¹ = (L(x)·L(x)ᵀ − L(y)·L(y)ᵀ)/x₀,   y = (0, x_{n−1}, …, x₁),

L(c) the lower-triangular Toeplitz matrix with first column c; every product is an FFT
convolution, so B_opt·z costs O(n log n) per column after the setup. Each solve is checked:
the relative residual ‖T·u − w‖/‖w‖ of every column is computed (one more FFT product), one
step of iterative refinement is applied, and a solve whose residual stays above
``residual_tolerance`` raises. Since A·L(c) = L(cumsum c), the loss and the per-step variances
of B_opt are O(n) closed forms in x (no n×n matrix is ever formed).

Dense matrices (``dense_encoder``/``dense_decoder``) exist only for tests at small n.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.fft
import scipy.linalg

from pure_dp_mf.errors import InvalidInputError, PureDPMFError
from pure_dp_mf.validation import check_positive, check_size

DENSE_LIMIT = 4096
DEFAULT_RESIDUAL_TOLERANCE = 1e-10


class ToeplitzSolveError(PureDPMFError):
    """A Toeplitz solve did not reach its stated residual."""


def prefix_circulant_eigenvalues(n: int) -> np.ndarray:
    """λ = DFT(1ⁿ0ⁿ) (length 2n, unnormalized), from the closed form above."""
    n = check_size(n, name="n")
    k = np.arange(2 * n)
    eigenvalues = np.zeros(2 * n, dtype=np.complex128)
    eigenvalues[0] = n
    odd = k % 2 == 1
    eigenvalues[odd] = 1.0 - 1j / np.tan(np.pi * k[odd] / (2 * n))
    return eigenvalues


def _as_columns(values: np.ndarray, *, rows: int, name: str) -> tuple[np.ndarray, bool]:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim not in (1, 2) or array.shape[0] != rows:
        raise InvalidInputError(f"{name} must have shape ({rows},) or ({rows}, d), got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise InvalidInputError(f"{name} contains NaN or infinity")
    return (array[:, None], True) if array.ndim == 1 else (array, False)


def _circular(spectrum: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Circular convolution (length ``size``) of the columns of ``values`` with a real kernel given by its rfft."""
    transformed = scipy.fft.rfft(values, n=size, axis=0, workers=-1)
    return scipy.fft.irfft(transformed * spectrum[:, None], n=size, axis=0, workers=-1)


@dataclass(frozen=True)
class FFTMechanism:
    """The real FFT factorization (B_F, C_F) of the n×n prefix-sum matrix (see the module docstring)."""

    n: int
    name: str = "FFT"

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_size(self.n, name="n"))

    @property
    def inner_size(self) -> int:
        return 2 * self.n

    @cached_property
    def _root_spectrum(self) -> np.ndarray:
        """rfft of the kernel of K = F*·√Σ·F: √λ_k for k = 0..n (bin n is real: λ_n ∈ {0, 1})."""
        return np.sqrt(prefix_circulant_eigenvalues(self.n)[: self.n + 1])

    @cached_property
    def gram_spectrum(self) -> np.ndarray:
        """rfft of the kernel of F*·|Σ|·F (its top-left n×n block is T)."""
        return np.abs(prefix_circulant_eigenvalues(self.n)[: self.n + 1])

    @cached_property
    def gram_column(self) -> np.ndarray:
        """First column t of the symmetric Toeplitz T = C_Fᵀ·C_F = B_F·B_Fᵀ (T_ij = t_|i−j|)."""
        return scipy.fft.irfft(self.gram_spectrum, n=2 * self.n)[: self.n]

    def encode(self, x: np.ndarray) -> np.ndarray:
        """C_F·x (x of shape (n,) or (n, d)), O(n log n) per column."""
        x, vector = _as_columns(x, rows=self.n, name="x")
        out = _circular(self._root_spectrum, x, 2 * self.n)
        return out[:, 0] if vector else out

    def encode_transpose(self, y: np.ndarray) -> np.ndarray:
        """C_Fᵀ·y (y of shape (2n,) or (2n, d))."""
        y, vector = _as_columns(y, rows=2 * self.n, name="y")
        out = _circular(np.conj(self._root_spectrum), y, 2 * self.n)[: self.n]
        return out[:, 0] if vector else out

    def decode(self, z: np.ndarray) -> np.ndarray:
        """B_F·z (z of shape (2n,) or (2n, d)): the correlated noise of every step."""
        z, vector = _as_columns(z, rows=2 * self.n, name="z")
        out = _circular(self._root_spectrum, z, 2 * self.n)[: self.n]
        return out[:, 0] if vector else out

    def gram_apply(self, u: np.ndarray) -> np.ndarray:
        """T·u by the circulant embedding (u of shape (n,) or (n, d))."""
        u, vector = _as_columns(u, rows=self.n, name="u")
        out = _circular(self.gram_spectrum, u, 2 * self.n)[: self.n]
        return out[:, 0] if vector else out

    def decoder_frobenius_squared(self) -> float:
        """‖B_F‖_F² = n·t₀."""
        return float(self.n * self.gram_column[0])

    def per_step_variance(self) -> np.ndarray:
        """diag(B_F·B_Fᵀ) = t₀ at every step (the FFT noise is stationary)."""
        return np.full(self.n, self.gram_column[0])

    def gram(self) -> np.ndarray:
        """X = C_Fᵀ·C_F = T as a dense n×n matrix, for the sensitivity (not entrywise ≥ 0 in general)."""
        self._dense_check()
        return scipy.linalg.toeplitz(self.gram_column)

    def _dense_check(self) -> None:
        if self.n > DENSE_LIMIT:
            raise InvalidInputError(f"dense forms are for tests at small n (n ≤ {DENSE_LIMIT}), got n = {self.n}")

    def dense_encoder(self) -> np.ndarray:
        """C_F as a dense 2n×n matrix (tests only)."""
        self._dense_check()
        return self.encode(np.eye(self.n))

    def dense_decoder(self) -> np.ndarray:
        """B_F as a dense n×2n matrix (tests only)."""
        self._dense_check()
        return self.decode(np.eye(2 * self.n))


@dataclass
class SymmetricToeplitzInverse:
    """T⁻¹ for a symmetric positive-definite Toeplitz T given by its first column (Gohberg–Semencul).

    ``apply_matrix(u)`` must return T·u; it is used by the conjugate-gradient setup and the residual
    checks. ``setup_residual`` is ‖T·x − e₀‖ after setup, ``last_residual`` the largest relative
    residual ‖T·u − w‖/‖w‖ over the columns of the last ``solve``.
    """

    column: np.ndarray
    apply_matrix: Callable[[np.ndarray], np.ndarray]
    residual_tolerance: float = DEFAULT_RESIDUAL_TOLERANCE
    max_iterations: int = 2000
    setup_iterations: int = field(init=False, default=0)
    setup_residual: float = field(init=False, default=float("nan"))
    last_residual: float = field(init=False, default=float("nan"))

    def __post_init__(self) -> None:
        self.column = np.asarray(self.column, dtype=np.float64)
        self.residual_tolerance = check_positive(self.residual_tolerance, name="residual_tolerance")
        n = self.n
        self._size = scipy.fft.next_fast_len(2 * n, real=True)
        self.first = self._first_column()
        reversed_tail = np.concatenate(([0.0], self.first[:0:-1]))
        self._spectra = (
            scipy.fft.rfft(self.first, n=self._size),
            scipy.fft.rfft(reversed_tail, n=self._size),
        )

    @property
    def n(self) -> int:
        return int(self.column.shape[0])

    def _chan_preconditioner(self) -> np.ndarray:
        """Eigenvalues of T. Chan's optimal circulant approximation of T (size n)."""
        n, t = self.n, self.column
        j = np.arange(n)
        c = ((n - j) * t + j * np.concatenate(([0.0], t[:0:-1]))) / n
        eigenvalues = scipy.fft.fft(c).real
        if eigenvalues.min() <= 0:  # not positive definite: fall back to the diagonal
            eigenvalues = np.full(n, t[0])
        return eigenvalues

    def _first_column(self) -> np.ndarray:
        """x = T⁻¹·e₀ by preconditioned conjugate gradients, to ``residual_tolerance``/100."""
        n = self.n
        preconditioner = self._chan_preconditioner()

        def precondition(r):
            return scipy.fft.ifft(scipy.fft.fft(r) / preconditioner).real

        target = np.zeros(n)
        target[0] = 1.0
        x = np.zeros(n)
        r = target.copy()
        p = precondition(r)
        rz = r @ p
        goal = self.residual_tolerance / 100
        for iteration in range(1, self.max_iterations + 1):
            q = np.asarray(self.apply_matrix(p))
            alpha = rz / (p @ q)
            x += alpha * p
            r -= alpha * q
            if np.linalg.norm(r) <= goal:
                break
            z = precondition(r)
            rz, rz_old = r @ z, rz
            p = z + (rz / rz_old) * p
        residual = float(np.linalg.norm(np.asarray(self.apply_matrix(x)) - target))
        self.setup_iterations, self.setup_residual = iteration, residual
        if not residual <= self.residual_tolerance:
            raise ToeplitzSolveError(
                f"conjugate gradients reached residual {residual:.3g} > {self.residual_tolerance:g} "
                f"after {iteration} iterations (T is too ill-conditioned)"
            )
        if x[0] <= 0:
            raise ToeplitzSolveError("T is not positive definite (x₀ ≤ 0)")
        return x

    def _lower(self, spectrum: np.ndarray, u: np.ndarray) -> np.ndarray:
        return scipy.fft.irfft(scipy.fft.rfft(u, n=self._size, axis=0) * spectrum[:, None], n=self._size, axis=0)[: self.n]

    def _gohberg_semencul(self, w: np.ndarray) -> np.ndarray:
        out = np.zeros_like(w)
        for spectrum, sign in zip(self._spectra, (1.0, -1.0)):
            transposed = self._lower(spectrum, w[::-1])[::-1]  # L(c)ᵀ·w = J·L(c)·J·w
            out += sign * self._lower(spectrum, transposed)
        return out / self.first[0]

    def solve(self, w: np.ndarray) -> np.ndarray:
        """T⁻¹·w (w of shape (n,) or (n, d)), checked to the stated relative residual."""
        w, vector = _as_columns(w, rows=self.n, name="w")
        u = self._gohberg_semencul(w)
        u += self._gohberg_semencul(w - self.apply_matrix(u))  # one step of iterative refinement
        norms = np.linalg.norm(w, axis=0)
        norms[norms == 0] = 1.0
        residual = float(np.max(np.linalg.norm(w - self.apply_matrix(u), axis=0) / norms))
        self.last_residual = residual
        if not residual <= self.residual_tolerance:
            raise ToeplitzSolveError(f"Toeplitz solve residual {residual:.3g} > {self.residual_tolerance:g}")
        return u[:, 0] if vector else u

    def cumulative_quadratic(self) -> np.ndarray:
        """diag(A·T⁻¹·Aᵀ) for the prefix-sum A: Σ_{j≤i} (u_j² − v_j²)/x₀, u = cumsum(x), v = cumsum(y)."""
        u = np.cumsum(self.first)
        v = np.cumsum(np.concatenate(([0.0], self.first[:0:-1])))
        return np.cumsum(u * u - v * v) / self.first[0]


class FFTOptimalDecoderMechanism:
    """The FFT encoder C_F with its optimal decoder B_opt = A·C_F⁺ = A·T⁻¹·C_Fᵀ (App. K).

    Privacy is that of C_F (the decoder does not change the sensitivity). ``decode(z)`` is exactly
    the noise of the pseudo-inverse decoder for the same z, up to the stated solve residual.
    """

    name = "FFT (optimal decoder)"

    def __init__(self, n: int, *, residual_tolerance: float = DEFAULT_RESIDUAL_TOLERANCE) -> None:
        self.fft = FFTMechanism(n)
        self.n = self.fft.n
        self.inverse = SymmetricToeplitzInverse(self.fft.gram_column, self.fft.gram_apply, residual_tolerance=residual_tolerance)

    @property
    def inner_size(self) -> int:
        return 2 * self.n

    def encode(self, x: np.ndarray) -> np.ndarray:
        return self.fft.encode(x)

    def gram(self) -> np.ndarray:
        return self.fft.gram()

    def decode(self, z: np.ndarray) -> np.ndarray:
        """B_opt·z = cumsum(T⁻¹·C_Fᵀ·z) (z of shape (2n,) or (2n, d)), O(n log n) per column."""
        return np.cumsum(self.inverse.solve(self.fft.encode_transpose(z)), axis=0)

    @property
    def last_residual(self) -> float:
        """Largest relative residual ‖T·u − w‖/‖w‖ of the last ``decode``."""
        return self.inverse.last_residual

    def per_step_variance(self) -> np.ndarray:
        """diag(B_opt·B_optᵀ) = diag(A·T⁻¹·Aᵀ), O(n)."""
        return self.inverse.cumulative_quadratic()

    def decoder_frobenius_squared(self) -> float:
        """‖B_opt‖_F² = tr(A·T⁻¹·Aᵀ), O(n)."""
        return float(self.per_step_variance().sum())

    def dense_encoder(self) -> np.ndarray:
        return self.fft.dense_encoder()

    def dense_decoder(self) -> np.ndarray:
        """B_opt as a dense n×2n matrix, from the fast solve (tests compare it with A·pinv(C_F))."""
        self.fft._dense_check()
        return self.decode(np.eye(2 * self.n))
