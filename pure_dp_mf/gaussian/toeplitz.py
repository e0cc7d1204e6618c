"""Toeplitz strategies for prefix sums: banded Toeplitz, BLT and BISR (structured Gaussian
mechanisms that scale to n = 10⁵ and stream their noise in O(bands·d) or O(buffers·d) memory).

A strategy is a lower-triangular Toeplitz encoder C with coefficients c = (c₀, c₁, …) (C_{ij} =
c_{i−j}); with the prefix-sum workload A = T the decoder B = T·C⁻¹ is lower-triangular Toeplitz
too, with coefficients β = cumsum(u), u the coefficients of C⁻¹ (the noising coefficients). In
DP-SGD the gradient of step t gets σ·(C⁻¹z)_t; the released prefix sums get σ·(B·z)_t.

* Errors at noise multiplier 1: step t has variance sens²·Σ_{j≤t} β_j²; the loss (total squared
  error, Choquette-Choo et al., arXiv 2211.06530, Eq. 4) is sens²·‖B‖_F² = sens²·Σ_j (n−j)·β_j²;
  the max error is the last step's variance (the variances grow with t).
* Sensitivity (``sensitivity_squared``), for vector contributions of any dimension. When c is
  non-negative and non-increasing, under b-min-sep participation with at most k participations
  (and under fixed-epoch participation, whose patterns are min-sep patterns and include the
  pattern below):

      sens² = ‖Σ_{l<k′} C·e_{l·b}‖²,  k′ = min(k, ⌈n/b⌉)   ("toeplitz-monotone", exact)

  Proof (Kalinin & Lampert, arXiv 2405.13763, Theorem 2, which jax_privacy implements): X = CᵀC
  has X_ij = Σ_{s=0}^{n−1−max(i,j)} c_s·c_{s+|i−j|} ≥ 0, non-increasing in |i−j| (c
  non-increasing, c ≥ 0: term by term) and in max(i, j) (fewer non-negative terms). With X ≥ 0
  the worst contributions are aligned, sens² = max_π Σ_{i,j∈π} X_ij. For a pattern p₁ < … < p_m
  (m ≤ k′, gaps ≥ b) put q_l = (l−1)·b: p_l ≥ q_l and |p_l − p_j| ≥ |q_l − q_j|, so every term
  X_{p_l p_j} ≤ X_{q_l q_j}, and adding the terms up to k′ only adds non-negative terms. The
  pattern {0, b, …, (k′−1)b} is itself a fixed-epoch pattern (n a multiple of b), so both
  schemas give this value. Otherwise the dense X is used up to n = ``DENSE_LIMIT``
  (``sensitivity.schema_sensitivity_squared``), and beyond it the same formula on m, the least
  non-increasing majorant of |c| ("toeplitz-majorant", an upper bound): tr(GᵀX[π,π]G) ≤
  Σ_{i,j∈π}|X_ij| (Cauchy–Schwarz, ‖g_i‖ ≤ 1), |X(C)_ij| ≤ X(M)_ij term by term, and M is covered
  by the proof above.
* Families. ``banded_toeplitz``: c has p coefficients (C has p bands); optimized over
  non-negative, non-increasing c (ratios ρ_j = c_j/c_{j−1} ∈ [0, 1]) by L-BFGS-B (McKenna,
  arXiv 2405.15913; Choquette-Choo et al., arXiv 2306.08153). ``BufferedToeplitz`` (BLT,
  Dvijotham et al., arXiv 2404.16706 and 2408.08868): c₀ = 1, c_t = Σ_i ω_i·θ_i^{t−1}, m buffers;
  optimized over θ ∈ [0, 1), ω ≥ 0 with Σω ≤ 1 (then c is non-negative and non-increasing).
  ``bisr``: banded inverse square root (Kalinin et al., arXiv 2505.12128): C⁻¹ is the square
  root's inverse (1 − x)^{1/2} truncated to p bands, so the noise C⁻¹z is a p-tap filter of z.
"""

from __future__ import annotations

import math
import os
import time
import zipfile
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.signal
import scipy.special

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.matrix_files import declared_npy, declared_npz
from pure_dp_mf.gaussian.participation import MinSeparation, Participation, participation_schema
from pure_dp_mf.gaussian.sensitivity import schema_sensitivity_squared
from pure_dp_mf.gaussian.stamping import DenseMatrices
from pure_dp_mf.validation import check_size, parse_float_text, parse_json, read_bytes_limited

DENSE_LIMIT = 4096  # the dense X = CᵀC (a strategy outside the monotone case) up to this n
MAX_STEPS = 1 << 22
"""Largest n of a Toeplitz strategy (4 194 304 steps: its O(n) vectors stay within ~32 MiB each)."""
MAX_BLT_BUFFERS = 256
"""Most buffers of a BLT read from a file (its filters cost O(m²) to build; libraries use a few)."""
MAX_STRATEGY_BYTES = 1 << 28
"""Largest strategy file read as JSON or text (256 MiB)."""
ERRORS = ("mean", "max")


def _impulse(n: int) -> np.ndarray:
    x = np.zeros(n)
    x[0] = 1.0
    return x


def square_root_coefficients(n: int) -> np.ndarray:
    """r_j = C(2j, j)/4^j, the coefficients of T^{1/2} = (1 − x)^{−1/2} (r_j = r_{j−1}·(2j − 1)/(2j))."""
    n = check_size(n, name="n", maximum=MAX_STEPS)
    ratios = (2 * np.arange(1, n) - 1) / (2 * np.arange(1, n))
    return np.concatenate([[1.0], np.cumprod(ratios)])


def monotone_sensitivity_squared(coefficients: np.ndarray, *, n: int, participations: int, separation: int) -> float:
    """‖Σ_{l<k′} C·e_{l·b}‖² for non-negative, non-increasing c (see the module docstring), O(n)."""
    c = np.zeros(n)
    c[: min(n, len(coefficients))] = coefficients[:n]
    b = separation
    k = min(participations, -(-n // b))
    rows = -(-n // b)
    padded = np.zeros(rows * b)
    padded[:n] = c
    shifted = padded.reshape(rows, b).cumsum(axis=0)  # row r: Σ_{l ≤ r} c_{t − l·b} at t = r·b + s
    if rows > k:
        shifted[k:] -= shifted[:-k].copy()  # keep the k′ most recent shifts only
    v = shifted.reshape(-1)[:n]
    return float(v @ v)


@dataclass
class ToeplitzStrategy:
    """A lower-triangular Toeplitz encoder C (coefficients c) for the prefix workload; a
    ``stamping.GaussianMechanism`` (see the module docstring for its errors and sensitivity)."""

    coefficients: np.ndarray
    n: int
    name: str = "Toeplitz"
    noising: np.ndarray | None = None  # coefficients of C⁻¹ (computed when not given)
    blt: BufferedToeplitz | None = None  # the BLT parameters, when C is one
    parameters: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.n = check_size(self.n, name="n", maximum=MAX_STEPS)
        c = _vector(self.coefficients, name="Toeplitz coefficients")[: self.n]
        if c.size == 0 or not np.all(np.isfinite(c)) or c[0] <= 0:
            raise InvalidInputError("Toeplitz coefficients must be finite with c₀ > 0")
        self.coefficients = c
        if self.noising is None:
            self.noising = scipy.signal.lfilter([1.0], c, _impulse(self.n))
        self.noising = np.asarray(self.noising, dtype=np.float64)[: self.n]
        self.decoder_coefficients = np.cumsum(self.noising)

    @property
    def inner_size(self) -> int:
        return self.n

    @property
    def monotone(self) -> bool:
        """c non-negative and non-increasing (the exact sensitivity formula applies)."""
        c = self.coefficients
        return bool(np.all(c >= 0) and np.all(np.diff(c) <= 0))

    def per_step_variance(self) -> np.ndarray:
        return np.cumsum(self.decoder_coefficients**2)

    def decoder_frobenius_squared(self) -> float:
        beta = self.decoder_coefficients
        return float(np.sum((self.n - np.arange(self.n)) * beta**2))

    def max_error(self) -> float:
        """The largest per-step variance at unit sensitivity (the last step's)."""
        return float(self.per_step_variance()[-1])

    def sensitivity_squared(self, schema: Participation | MinSeparation) -> tuple[float, str]:
        """(sens², method) under ``schema``: "toeplitz-monotone" exact when c ≥ 0 is
        non-increasing, else from the dense X = CᵀC (n ≤ ``DENSE_LIMIT``)."""
        if schema.steps != self.n:
            raise InvalidInputError(f"the strategy has n = {self.n} but the participation schema has n = {schema.steps}")
        k = schema.max_participations
        b = schema.separation
        if self.monotone:
            return monotone_sensitivity_squared(self.coefficients, n=self.n, participations=k, separation=b), "toeplitz-monotone"
        if self.n <= DENSE_LIMIT:
            return schema_sensitivity_squared(gram=self.gram(), schema=schema)
        majorant = np.maximum.accumulate(np.abs(self.coefficients)[::-1])[::-1]
        return monotone_sensitivity_squared(majorant, n=self.n, participations=k, separation=b), "toeplitz-majorant"

    def dense_encoder(self) -> np.ndarray:
        return _lower_toeplitz(self.coefficients, self.n)

    def dense_decoder(self) -> np.ndarray:
        return _lower_toeplitz(self.decoder_coefficients, self.n)

    def gram(self) -> np.ndarray:
        C = self.dense_encoder()
        return C.T @ C

    def decode(self, z: np.ndarray) -> np.ndarray:
        """B·z (the columns of z are independent noise vectors), by FFT convolution."""
        z = np.asarray(z, dtype=np.float64)
        if z.shape[0] != self.n:
            raise InvalidInputError(f"z must have {self.n} rows, got shape {z.shape}")
        beta = self.decoder_coefficients.reshape((-1,) + (1,) * (z.ndim - 1))
        return scipy.signal.fftconvolve(z, beta, axes=0)[: self.n]

    def stream(self, draw: Callable[[], Any]) -> Iterator[Any]:
        """(B·z)_t for t = 0, …, n−1, drawing z_t with ``draw()`` (a vector of d normals, numpy or
        torch). Memory: O(m·d) for m BLT buffers, O(p·d) for p bands of C or of C⁻¹."""
        total = None
        for w in self._noising_stream(draw):
            total = w if total is None else total + w
            yield total

    def _noising_stream(self, draw: Callable[[], Any]) -> Iterator[Any]:
        """(C⁻¹z)_t in order."""
        if self.blt is not None:  # w_t = z_t − Σ_i ω_i·s_i, s_i ← θ_i·s_i + w_t
            theta, omega = self.blt.decay.tolist(), self.blt.scale.tolist()
            buffers: list = [None] * len(theta)
            for _ in range(self.n):
                w = draw()
                for i, s in enumerate(buffers):
                    if s is not None:
                        w = w - omega[i] * s
                buffers = [w if s is None else theta[i] * s + w for i, s in enumerate(buffers)]
                yield w
            return
        noising = np.asarray(self.noising)
        q = int(np.flatnonzero(noising)[-1]) + 1 if np.any(noising) else 1
        p = int(np.flatnonzero(self.coefficients)[-1]) + 1
        u, c = noising[:q].tolist(), self.coefficients[:p].tolist()  # Python floats: numpy or torch vectors alike
        if q <= p:  # C⁻¹ has q bands: w_t = Σ_{j<q} u_j z_{t−j}
            recent: deque = deque(maxlen=q)
            for _ in range(self.n):
                recent.appendleft(draw())
                w = None
                for j, z in enumerate(recent):
                    w = u[j] * z if w is None else w + u[j] * z
                yield w
            return
        earlier: deque = deque(maxlen=max(p - 1, 1))  # C has p bands: w_t = (z_t − Σ_{j≥1} c_j w_{t−j})/c₀
        for _ in range(self.n):
            w = draw()
            for j, previous in enumerate(earlier, start=1):
                if j < p:
                    w = w - c[j] * previous
            w = w / c[0]
            earlier.appendleft(w)
            yield w


def _vector(values: object, *, name: str) -> np.ndarray:
    """``values`` as a flat float64 vector of at most ``MAX_STEPS`` numbers, or ``InvalidInputError``
    (strings, nested or ragged lists, objects)."""
    size = getattr(values, "size", None)
    if size is None and isinstance(values, (list, tuple)):
        size = len(values)
    if size is not None and size > MAX_STEPS:
        raise InvalidInputError(f"{name}: {size} values, above the limit of {MAX_STEPS}")
    if isinstance(values, (str, bytes, dict)) or (isinstance(values, np.ndarray) and values.dtype.kind not in "biuf"):
        raise InvalidInputError(f"{name} must be numbers")
    if isinstance(values, (list, tuple)) and not all(
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values
    ):
        raise InvalidInputError(f"{name} must be a flat list of numbers")
    try:
        return np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInputError(f"{name} must be numbers") from None


def _lower_toeplitz(coefficients: np.ndarray, n: int) -> np.ndarray:
    if n > DENSE_LIMIT:
        raise InvalidInputError(f"a dense {n}×{n} matrix is above the limit {DENSE_LIMIT}")
    column = np.zeros(n)
    column[: min(n, len(coefficients))] = coefficients[:n]
    return scipy.linalg.toeplitz(column, np.zeros(n))


@dataclass(frozen=True)
class BufferedToeplitz:
    """A BLT: c₀ = 1, c_t = Σ_i ω_i·θ_i^{t−1} for t ≥ 1 (θ = ``decay``, ω = ``scale``, m buffers).

    Its generating function is c(x) = 1 + Σ_i ω_i·x/(1 − θ_i·x) = P(x)/Q(x), Q = Π_i(1 − θ_i·x),
    P = Q + x·Σ_i ω_i·Π_{j≠i}(1 − θ_j·x), so c and the coefficients of C⁻¹ (Q/P) are IIR
    filters of order m: O(n·m) for all n coefficients."""

    decay: np.ndarray
    scale: np.ndarray

    def __post_init__(self) -> None:
        theta = _vector(self.decay, name="BLT decay")
        omega = _vector(self.scale, name="BLT scale")
        if theta.size > MAX_BLT_BUFFERS:
            raise InvalidInputError(f"a BLT with {theta.size} buffers; at most {MAX_BLT_BUFFERS} are read")
        if theta.shape != omega.shape or not (np.all(np.isfinite(theta)) and np.all(np.isfinite(omega))):
            raise InvalidInputError("BLT decay and scale must be finite vectors of the same length")
        object.__setattr__(self, "decay", theta)
        object.__setattr__(self, "scale", omega)

    def _polynomials(self) -> tuple[np.ndarray, np.ndarray]:
        """(P, Q) as coefficient arrays in increasing powers of x."""
        Q = np.array([1.0])
        for theta in self.decay:
            Q = np.convolve(Q, [1.0, -theta])
        P = np.concatenate([Q, [0.0]])
        for i, omega in enumerate(self.scale):
            others = np.array([1.0])
            for j, theta in enumerate(self.decay):
                if j != i:
                    others = np.convolve(others, [1.0, -theta])
            P[1 : 1 + len(others)] += omega * others
        return P[: len(Q)], Q

    def coefficients(self, n: int) -> np.ndarray:
        P, Q = self._polynomials()
        return scipy.signal.lfilter(P, Q, _impulse(n))

    def inverse_coefficients(self, n: int) -> np.ndarray:
        P, Q = self._polynomials()
        return scipy.signal.lfilter(Q, P, _impulse(n))

    def strategy(self, n: int, *, name: str | None = None) -> ToeplitzStrategy:
        return ToeplitzStrategy(
            coefficients=self.coefficients(n),
            n=n,
            noising=self.inverse_coefficients(n),
            blt=self,
            name=name or f"BLT ({len(self.decay)} buffers)",
            parameters={"decay": self.decay.tolist(), "scale": self.scale.tolist()},
        )


def _objective(strategy: ToeplitzStrategy, schema: Participation | MinSeparation, error: str) -> float:
    sens2, _ = strategy.sensitivity_squared(schema)
    return sens2 * (strategy.decoder_frobenius_squared() if error == "mean" else strategy.max_error())


def _check_error(error: str) -> str:
    if error not in ERRORS:
        raise InvalidInputError(f"error must be one of {', '.join(ERRORS)}, got {error!r}")
    return error


@dataclass
class StrategyFit:
    """An optimized strategy, its loss (mean: sens²·‖B‖_F²; max: sens²·max_t variance) and time."""

    strategy: ToeplitzStrategy
    loss: float
    iterations: int
    seconds: float


def _loss_and_gradient(
    coefficients: np.ndarray, *, n: int, participations: int, separation: int, error: str
) -> tuple[float, np.ndarray]:
    """(sens²·F, its gradient in c) for non-negative, non-increasing c with p = len(c)
    coefficients: F = Σ_j (n − j)·β_j² (mean) or Σ_j β_j² (max), β = cumsum(u), u = 1/c as series.

    dF/du_i = Σ_{j≥i} ∂F/∂β_j; du = −u·dc·u (series), so dF/dc_m = −Σ_i (dF/du_i)·(u²)_{i−m};
    sens² = ‖v‖², v = Σ_{l<k′} shift(c, l·b), so dsens²/dc_m = 2·Σ_{l<k′} v_{m+l·b}. O(n log n)."""
    p = len(coefficients)
    u = scipy.signal.lfilter([1.0], coefficients, _impulse(n))
    beta = np.cumsum(u)
    weights = (n - np.arange(n)) if error == "mean" else np.ones(n)
    F = float(np.sum(weights * beta**2))
    dF_du = np.cumsum((2 * weights * beta)[::-1])[::-1]
    u_squared = scipy.signal.fftconvolve(u, u)[:n]
    dF_dc = -scipy.signal.fftconvolve(dF_du, u_squared[::-1])[n - 1 : n - 1 + p]
    b = separation
    k = min(participations, -(-n // b))
    c = np.zeros(n)
    c[:p] = coefficients
    rows = -(-n // b)
    padded = np.zeros(rows * b)
    padded[:n] = c
    shifted = padded.reshape(rows, b).cumsum(axis=0)
    if rows > k:
        shifted[k:] -= shifted[:-k].copy()
    v = np.zeros(rows * b)
    v[:n] = shifted.reshape(-1)[:n]
    S = float(v @ v)
    back = v.reshape(rows, b)[::-1].cumsum(axis=0)[::-1]  # row r: Σ_{l ≥ 0} v at r + l (in rows of b)
    if rows > k:
        back[: rows - k] -= back[k:].copy()
    dS_dc = 2 * back.reshape(-1)[:p]
    return S * F, S * dF_dc + F * dS_dc


def optimize_banded_toeplitz(
    *, n: int, bands: int, schema: Participation | MinSeparation, error: str = "mean", max_iterations: int = 500
) -> StrategyFit:
    """The best banded Toeplitz strategy with ``bands`` coefficients, non-negative and
    non-increasing (c₀ = 1, ratios ρ_j = c_j/c_{j−1} ∈ [10⁻¹², 1]), for ``error`` under
    ``schema``: started from the truncated square root, L-BFGS-B on the exact gradient
    (``_loss_and_gradient``, chained through c_j = Π_{i≤j} ρ_i)."""
    n, bands, error = check_size(n, name="n", maximum=MAX_STEPS), check_size(bands, name="bands"), _check_error(error)
    bands = min(bands, n)
    start = time.perf_counter()
    k, b = schema.max_participations, schema.separation
    initial = square_root_coefficients(bands)

    def make(ratios: np.ndarray) -> ToeplitzStrategy:
        return ToeplitzStrategy(
            coefficients=np.concatenate([[1.0], np.cumprod(np.clip(ratios, 0.0, 1.0))]),
            n=n,
            name=f"banded Toeplitz ({bands} bands)",
        )

    if bands == 1:
        best = make(np.zeros(0))
        return StrategyFit(best, _objective(best, schema, error), 0, time.perf_counter() - start)

    def objective(ratios: np.ndarray) -> tuple[float, np.ndarray]:
        c = np.concatenate([[1.0], np.cumprod(ratios)])
        value, gradient = _loss_and_gradient(c, n=n, participations=k, separation=b, error=error)
        # dc_j/dρ_i = c_j/ρ_i for j ≥ i ≥ 1
        by_ratio = np.cumsum((gradient[1:] * c[1:])[::-1])[::-1] / ratios
        return value / scale, by_ratio / scale

    ratios0 = initial[1:] / initial[:-1]
    scale = _loss_and_gradient(initial, n=n, participations=k, separation=b, error=error)[0]
    result = scipy.optimize.minimize(
        objective,
        ratios0,
        jac=True,
        method="L-BFGS-B",
        bounds=[(1e-12, 1.0)] * (bands - 1),
        options={"maxiter": max_iterations, "ftol": 1e-15, "gtol": 1e-12},
    )
    best = make(result.x)
    best.parameters = {"bands": bands}
    return StrategyFit(best, _objective(best, schema, error), int(result.nit), time.perf_counter() - start)


def optimize_blt(
    *, n: int, buffers: int, schema: Participation | MinSeparation, error: str = "mean", max_iterations: int = 500
) -> StrategyFit:
    """The best BLT with ``buffers`` buffers for ``error`` under ``schema``, over θ ∈ [0, 1) and
    ω ≥ 0 with Σω ≤ 1 (so c is non-negative and non-increasing and the sensitivity is exact):
    θ = sigmoid(a), ω = sigmoid(t)·softmax(s) (2m + 1 unconstrained parameters), L-BFGS-B with
    finite-difference gradients, started from θ spread geometrically over [1/2, 1 − 1/n]."""
    n, error = check_size(n, name="n", maximum=MAX_STEPS), _check_error(error)
    buffers = check_size(buffers, name="buffers", maximum=MAX_BLT_BUFFERS)
    start = time.perf_counter()

    def unpack(x: np.ndarray) -> BufferedToeplitz:
        theta = scipy.special.expit(x[:buffers])
        shares = np.exp(x[buffers : 2 * buffers] - np.max(x[buffers : 2 * buffers]))
        total = scipy.special.expit(x[-1])
        return BufferedToeplitz(decay=theta, scale=total * shares / shares.sum())

    theta0 = 1.0 - np.geomspace(0.5, max(1.0 / n, 1e-6), buffers)
    x0 = np.concatenate([np.log(theta0 / (1 - theta0)), np.zeros(buffers), [0.0]])

    def objective(x: np.ndarray) -> float:
        value = _objective(unpack(x).strategy(n), schema, error)
        return value if math.isfinite(value) else 1e300

    scale = objective(x0)
    result = scipy.optimize.minimize(lambda x: objective(x) / scale, x0, method="L-BFGS-B", options={"maxiter": max_iterations})
    blt = unpack(result.x)
    best = blt.strategy(n)
    return StrategyFit(best, _objective(best, schema, error), int(result.nit), time.perf_counter() - start)


def bisr(*, n: int, bands: int) -> ToeplitzStrategy:
    """Banded inverse square root: C⁻¹ has the first p coefficients of (1 − x)^{1/2} (Kalinin et
    al., arXiv 2505.12128), C its inverse; the noise C⁻¹z is a p-tap filter."""
    n, bands = check_size(n, name="n", maximum=MAX_STEPS), check_size(bands, name="bands")
    bands = min(bands, n)
    j = np.arange(1, bands)
    inverse = np.concatenate([[1.0], np.cumprod((2 * j - 3) / (2 * j))])  # (1 − x)^{1/2}: 1, −1/2, −1/8, …
    noising = np.zeros(n)
    noising[:bands] = inverse
    coefficients = scipy.signal.lfilter([1.0], inverse, _impulse(n))
    return ToeplitzStrategy(
        coefficients=coefficients, n=n, noising=noising, name=f"BISR ({bands} bands)", parameters={"bands": bands}
    )


def best_bisr(
    *, n: int, schema: Participation | MinSeparation, error: str = "mean", bands: list[int] | None = None
) -> StrategyFit:
    """BISR at its best number of bands among ``bands`` (default powers of two up to n)."""
    start = time.perf_counter()
    n = check_size(n, name="n", maximum=MAX_STEPS)
    candidates = bands or [2**i for i in range(0, int(math.log2(n)) + 1)]
    fits = [(lambda s: (s, _objective(s, schema, error)))(bisr(n=n, bands=p)) for p in candidates]
    strategy, loss = min(fits, key=lambda fit: fit[1])
    return StrategyFit(strategy, loss, len(candidates), time.perf_counter() - start)


def read_strategy(path: str | os.PathLike, *, n: int) -> ToeplitzStrategy:
    """A Toeplitz strategy as other libraries write it, for n steps:

    * Toeplitz coefficients of C (``c₀, c₁, …``, as jax_privacy's ``toeplitz`` functions return
      them): a 1-D ``.npy``, a ``.npz`` with one array, text or CSV numbers, or JSON
      ``{"coefficients": […]}``;
    * a BLT: JSON or ``.npz`` with ``buf_decay`` and ``output_scale`` (jax_privacy's
      ``BufferedToeplitz`` fields; ``decay``/``scale`` also accepted).

    Raises:
        InvalidInputError: an unreadable file, no coefficients, NaN/Inf, or c₀ ≤ 0.
    """
    path = Path(path)
    n = check_size(n, name="n", maximum=MAX_STEPS)
    if not path.is_file():
        raise InvalidInputError(f"{path}: no such file")
    record: dict = {}
    try:
        if path.suffix == ".json":
            data = read_bytes_limited(path, limit=MAX_STRATEGY_BYTES, what=str(path))
            record = parse_json(data.decode("utf-8"), what=f"{path}: the strategy")  # type: ignore[assignment]
            if isinstance(record, list):
                record = {"coefficients": record}
        elif path.suffix == ".npz":
            declared_npz(path, what="strategy array")  # shapes and dtypes from the headers, before reading
            with np.load(path, allow_pickle=False) as archive:
                record = {name: archive[name] for name in archive.files}
            if len(record) == 1:
                record = {"coefficients": next(iter(record.values()))}
        elif path.suffix == ".npy":
            declared_npy(path, what="strategy array")
            record = {"coefficients": np.load(path, allow_pickle=False)}
        else:
            data = read_bytes_limited(path, limit=MAX_STRATEGY_BYTES, what=str(path))
            tokens = data.decode("utf-8").replace(",", " ").split()
            record = {"coefficients": np.array([parse_float_text(token, what=str(path)) for token in tokens])}
    except InvalidInputError:
        raise
    except (OSError, ValueError, EOFError, UnicodeDecodeError, zipfile.BadZipFile) as error:
        raise InvalidInputError(f"{path}: cannot read a strategy ({type(error).__name__}: {str(error)[:200]})") from None
    if not isinstance(record, dict):
        raise InvalidInputError(f"{path}: expected coefficients or BLT parameters")
    decay = record.get("buf_decay", record.get("decay"))
    scale = record.get("output_scale", record.get("scale"))
    if decay is not None and scale is not None:
        blt = BufferedToeplitz(
            decay=_vector(decay, name=f"{path}: buf_decay"), scale=_vector(scale, name=f"{path}: output_scale")
        )
        return blt.strategy(n, name=f"BLT from {path.name} ({len(blt.decay)} buffers)")
    if "coefficients" not in record:
        raise InvalidInputError(f"{path}: no coefficients (or buf_decay and output_scale) found")
    raw = record["coefficients"]
    if isinstance(raw, np.ndarray) and raw.ndim != 1:
        raise InvalidInputError(f"{path}: expected a vector of Toeplitz coefficients, got shape {raw.shape}")
    try:
        coefficients = _vector(raw, name=f"{path}: the coefficients")
    except InvalidInputError:
        raise InvalidInputError(f"{path}: the coefficients are not numbers") from None
    if coefficients.ndim != 1 or coefficients.size == 0:
        raise InvalidInputError(f"{path}: expected a vector of Toeplitz coefficients, got shape {coefficients.shape}")
    return ToeplitzStrategy(coefficients=coefficients, n=n, name=f"Toeplitz from {path.name} ({coefficients.size} coefficients)")


def strategy_report(strategy: ToeplitzStrategy, *, max_participations: int, separation: int) -> dict:
    """The strategy's errors and its sensitivity under both schemas (fixed-epoch only where n is
    a multiple of b and k ≤ n/b): for each, sens² with its method, the total loss sens²·‖B‖_F²,
    the mean loss sens²·‖B‖_F²/n (jax_privacy's ``toeplitz.loss`` convention) and the max loss
    sens²·max_t variance."""
    n = strategy.n
    report: dict = {
        "strategy": strategy.name,
        "n": n,
        "max_participations": max_participations,
        "separation": separation,
        "monotone": strategy.monotone,
        "decoder_frobenius_squared": strategy.decoder_frobenius_squared(),
        "max_variance": strategy.max_error(),
        "schemas": {},
    }
    for name in ("fixed-epoch", "min-sep"):
        try:
            schema = participation_schema(name=name, max_participations=max_participations, separation=separation, n=n)
        except InvalidInputError as error:
            report["schemas"][name] = {"not_applicable": str(error)}
            continue
        sens2, method = strategy.sensitivity_squared(schema)
        report["schemas"][name] = {
            "sensitivity_squared": sens2,
            "method": method,
            "loss": sens2 * report["decoder_frobenius_squared"],
            "mean_loss": sens2 * report["decoder_frobenius_squared"] / n,
            "max_loss": sens2 * report["max_variance"],
        }
    return report


@dataclass
class BandedStrategy(DenseMatrices):
    """A lower-triangular encoder C with p bands and unit columns (column-normalized banded;
    McKenna, arXiv 2405.15913; Choquette-Choo et al., arXiv 2306.08153), dense, for n up to
    ``DENSE_LIMIT``. With p ≤ b, columns of participations b or more apart are orthogonal, so
    sens² = k′ exactly under both schemas (``sensitivity.min_sep_sensitivity_squared`` "banded")."""

    encoder: np.ndarray
    bands: int
    name: str = "banded"
    parameters: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.decoder = scipy.linalg.solve_triangular(self.encoder, np.tri(self.n).T, lower=True, trans="T").T  # T·C⁻¹

    @property
    def n(self) -> int:
        return int(self.encoder.shape[0])

    @property
    def inner_size(self) -> int:
        return self.n

    def max_error(self) -> float:
        return float(np.max(self.per_step_variance()))

    def stream(self, draw: Callable[[], Any]) -> Iterator[Any]:
        """(B·z)_t: w_t = (z_t − Σ_{1≤j<p} C_{t,t−j}·w_{t−j})/C_{t,t}, then the running sum; O(p·d)."""
        C = self.encoder
        earlier: deque = deque(maxlen=max(self.bands - 1, 1))
        total = None
        for t in range(self.n):
            w = draw()
            for j, previous in enumerate(earlier, start=1):
                if j < self.bands:
                    w = w - float(C[t, t - j]) * previous
            w = w / float(C[t, t])
            earlier.appendleft(w)
            total = w if total is None else total + w
            yield total


def optimize_banded(
    *, n: int, bands: int, schema: Participation | MinSeparation, error: str = "mean", max_iterations: int = 200
) -> StrategyFit:
    """The best column-normalized banded strategy with p = ``bands`` ≤ b bands for ``error`` under
    ``schema`` (sens² = k′ for any such C, so the loss is k′·F(C)), started from the best banded
    Toeplitz strategy. F = ‖T·C⁻¹‖_F² (mean) has gradient −2·BᵀB·C⁻ᵀ (B = T·C⁻¹), taken on the
    band and through the column normalization C = V·diag(1/‖v_j‖); L-BFGS-B. O(n²·p) per step
    (banded triangular solves against dense right-hand sides), so n ≤ ``DENSE_LIMIT``. ``error`` "max" uses the mean objective
    and reports the max loss of its result."""
    n, bands, error = check_size(n, name="n"), check_size(bands, name="bands"), _check_error(error)
    if n > DENSE_LIMIT:
        raise InvalidInputError(f"the banded optimizer is dense: n at most {DENSE_LIMIT}, got {n}")
    if bands > schema.separation:
        raise InvalidInputError(f"bands = {bands} exceeds the separation b = {schema.separation}")
    start = time.perf_counter()
    k = schema.participations if isinstance(schema, MinSeparation) else schema.max_participations
    initial = optimize_banded_toeplitz(n=n, bands=bands, schema=schema).strategy.dense_encoder()
    rows, columns = np.nonzero(np.tril(np.ones((n, n))) * (np.subtract.outer(np.arange(n), np.arange(n)) < bands))
    T = np.tri(n)

    def encoder(values: np.ndarray) -> np.ndarray:
        V = np.zeros((n, n))
        V[rows, columns] = values
        return V / np.linalg.norm(V, axis=0)

    def objective(values: np.ndarray) -> tuple[float, np.ndarray]:
        V = np.zeros((n, n))
        V[rows, columns] = values
        norms = np.linalg.norm(V, axis=0)
        C = V / norms
        lower = np.zeros((bands, n))  # C in LAPACK's banded storage: lower[d, j] = C[j + d, j]
        upper = np.zeros((bands, n))  # Cᵀ: upper[p − 1 − d, j + d] = C[j + d, j]
        for d in range(bands):
            lower[d, : n - d] = np.diagonal(C, -d)
            upper[bands - 1 - d, d:] = np.diagonal(C, -d)
        B = scipy.linalg.solve_banded((0, bands - 1), upper, T.T).T  # B = T·C⁻¹ (Cᵀ·Bᵀ = Tᵀ)
        W = scipy.linalg.solve_banded((bands - 1, 0), lower, B.T).T  # W = B·C⁻ᵀ (C·Wᵀ = Bᵀ)
        G = np.zeros((n, n))  # −2·⟨B[:, i], W[:, j]⟩ on the band, one offset i − j = d at a time
        for d in range(bands):
            j = np.arange(n - d)
            G[j + d, j] = -2 * np.einsum("tj,tj->j", B[:, d:], W[:, : n - d])
        along = np.sum(G * C, axis=0)
        gradient = (G - C * along) / norms
        return float(np.sum(B * B)) / scale, gradient[rows, columns] / scale

    scale = 1.0
    scale = objective(initial[rows, columns])[0]
    result = scipy.optimize.minimize(
        objective, initial[rows, columns], jac=True, method="L-BFGS-B", options={"maxiter": max_iterations}
    )
    best = BandedStrategy(encoder=encoder(result.x), bands=bands, name=f"banded ({bands} bands)", parameters={"bands": bands})
    sens2 = float(k)
    loss = sens2 * (best.decoder_frobenius_squared() if error == "mean" else best.max_error())
    return StrategyFit(best, loss, int(result.nit), time.perf_counter() - start)  # type: ignore[arg-type]
