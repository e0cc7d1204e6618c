"""Error bars of the counter's releases: the noise standard deviation of every step and a
guaranteed (1 − β) interval for the true running count.

The release at step t is s_t = S_t + N_t with N_t = ⌊W_t + ½⌋, W_t = Σ_i a_i·Y_i, Y_i independent
discrete Laplace DLap(λ_i) and a_i = 2^-g·(L̄_p)_{t,i} (``lattice.py``). Row t of L̄_p is a signed
sum of base-decoder rows on disjoint noise blocks (``LiftedNoise.terms``), each block of one lift
level ℓ with its own rate λ_ℓ, so everything below is a sum over at most p terms per step.

**Standard deviation.** Var W_t = Σ_terms 2^-2g·‖L_row‖₂²·σ²(λ_ℓ), σ²(λ) = 2q/(1 − q)², q = e^{−λ},
the exact variance of DLap(λ); ``std`` is √Var W_t (the final rounding to an integer moves N_t by
at most ½ from W_t).

**Guaranteed interval.** A geometric variable G with P(G ≥ k) = e^{−λk} has the law of ⌊E/λ⌋,
E ~ Exp(1), and DLap(λ) that of G₁ − G₂; so Y_i = Z_i/λ_i + D_i with Z_i = E₁ − E₂ ~ Laplace(1)
and |D_i| < 1. Hence |W_t − T_t| ≤ A_t = Σ|a_i| for T_t = Σ b_i·Z_i, b_i = a_i/λ_i. For
Laplace(1), log E e^{uZ} = −log(1 − u²) ≤ u²/(1 − |u|) (compare the series term by term), so
log E e^{uT} ≤ u²·ν/(2(1 − u·c)) with ν = 2Σb_i² and c = max|b_i|: T is sub-gamma, and
P(T > √(2νs) + c·s) ≤ e^{−s} (Boucheron, Lugosi & Massart, *Concentration Inequalities*,
Theorem 2.3 and section 2.4). With s = ln(2/β) and the symmetric tail,

    P(|N_t| > h_t) ≤ β,   h_t = √(2ν_t·s) + c_t·s + A_t + ½,

so [s_t − h_t, s_t + h_t] holds the true count S_t with probability ≥ 1 − β at each step (a
statement per step, not simultaneous over steps). The bounds are rounded inward to integers (S_t
is one). Here b_i = (Δ/ε)·(L_p)_{t,i}, so √(ν_t/2) is the familiar b·‖(L_p)_t‖₂ of the Laplace
mechanism. ν_t, c_t and A_t are computed from the float64 decoder L̃ with its proven row error
τ (``ExactDecoder``): ‖L_row‖₂ ≤ ‖L̃_row‖₂ + τ, max_j |L_row,j| ≤ max_j |L̃_row,j| + τ,
‖L_row‖₁ ≤ ‖L̃_row‖₁ + √r·τ; the float sums of squares are inflated by Higham's γ_r and the
result by 2^-40 relative, so every h_t is an upper bound of the exact one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.lattice import gamma


@dataclass(frozen=True)
class ErrorBars:
    """Per released step: the noise standard deviation and the guaranteed half-width h_t."""

    std: np.ndarray
    half_width: np.ndarray
    beta: float

    def bounds(self, counts: np.ndarray, *, first_step: int, max_value: int) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper): the integers of [count − h_t, count + h_t] ∩ [0, m·t] for the releases
        of the 1-based steps t = first_step + 1, …: a sum of t values in [0, m] lies in [0, m·t],
        a public fact, so the cut is post-processing and keeps the guarantee."""
        counts = np.asarray(counts, dtype=np.float64)
        steps = np.arange(first_step + 1, first_step + 1 + len(counts))
        lower = np.maximum(np.ceil(counts - self.half_width).astype(np.int64), 0)
        upper = np.minimum(np.floor(counts + self.half_width).astype(np.int64), max_value * steps)
        return lower, upper


def dlap_variance(rate: Fraction) -> float:
    """σ² = 2q/(1 − q)², q = e^{−λ}: the variance of DLap(λ), in float64."""
    q = math.exp(-float(rate))
    return 2 * q / (-math.expm1(-float(rate))) ** 2


class ErrorBarModel:
    """The per-step error bars of one counter (``ContinualCounter``): see the module docstring."""

    def __init__(self, counter) -> None:
        release = counter._releases[0]
        self.engine = release.engine
        decoder = release.decoder
        L = np.asarray(decoder.decoder, dtype=np.float64)
        r = L.shape[1]
        inflate = 1 + 2 * gamma(r)
        tau = decoder.tau
        self.row_l2 = np.sqrt(np.einsum("ij,ij->i", L, L) * inflate) * (1 + 2.0**-50) + tau
        self.row_max = np.abs(L).max(axis=1) + tau
        self.row_l1 = np.abs(L).sum(axis=1) * inflate + math.sqrt(r) * tau
        g = decoder.grid_bits
        rates = release.source.rates
        self.scale = [math.ldexp(1.0, -g) / float(rate) * (1 + 2.0**-40) for rate in rates]  # 2^-g/λ_ℓ
        self.unit = math.ldexp(1.0, -g)
        self.variance = [math.ldexp(1.0, -2 * g) * dlap_variance(rate) for rate in rates]

    def bars(self, start: int, stop: int, *, beta: float) -> ErrorBars:
        """Error bars of the steps start … stop − 1 (0-based) at confidence 1 − β."""
        if not 0 < beta < 1:
            raise InvalidInputError(f"beta must be in (0, 1), got {beta!r}")
        s = math.log(2 / beta)
        count = stop - start
        std, half = np.empty(count), np.empty(count)
        for index, t in enumerate(range(start, stop)):
            variance = nu = c = a = 0.0
            for level, _, row, _ in self.engine.terms(t):
                l2 = self.row_l2[row]
                variance += self.variance[level - 1] * l2 * l2
                b = self.scale[level - 1]
                nu += 2 * (b * l2) ** 2
                c = max(c, b * self.row_max[row])
                a += self.unit * self.row_l1[row]
            std[index] = math.sqrt(variance)
            half[index] = (math.sqrt(2 * nu * s) + c * s + a + 0.5) * (1 + 2.0**-40)
        return ErrorBars(std=std, half_width=half, beta=beta)
