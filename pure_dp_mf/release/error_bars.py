"""Error bars of the counter's releases: the noise standard deviation of every step and a
guaranteed (1 − β) interval for the true running count.

The release at step t is s_t = S_t + N_t with N_t = ⌊W_t + ½⌋, W_t = Σ_i a_i·Y_i, Y_i independent
discrete Laplace DLap(λ_i) and a_i = 2^-g·L̄_{t,i} (``lattice.py``). Row t of L̄ is a sum of
weighted atom rows on disjoint noise blocks (``StreamingDecoder.terms``: the base decoder's
rows for a lift, single nodes for a tree; weights ±2^-j with |w| ≤ 1), each block of one level ℓ
with its own rate λ_ℓ, so everything below is a sum over the few terms of each step.

**Standard deviation.** Var W_t = Σ_terms 2^-2g·w²·‖L_row‖₂²·σ²(λ_ℓ), σ²(λ) = 2q/(1 − q)², q = e^{−λ},
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
from pure_dp_mf.validation import check_beta


@dataclass(frozen=True)
class ErrorBars:
    """Per released step: the noise standard deviation and the guaranteed half-width h_t."""

    std: np.ndarray
    half_width: np.ndarray
    beta: float

    def bounds(
        self, counts: np.ndarray, *, first_step: int, max_value: int, shown: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper): the integers of [count − h_t, count + h_t] ∩ [0, m·t] for the releases
        of the 1-based steps t = first_step + 1, … (a sum of t values in [0, m] lies in [0, m·t],
        a public fact, so the cut is post-processing and keeps the guarantee). Exact integer
        arithmetic: count − ⌊h_t⌋ and count + ⌊h_t⌋, whatever the size of the count. The cut never
        passes the count shown beside the interval (``shown``, default ``counts``; with monotone
        post-processing the processed count): a count outside [0, m·t] is its own end, so the
        interval always holds it; widening keeps the guarantee."""
        counts = np.asarray(counts)
        shown = counts if shown is None else np.asarray(shown)
        steps = np.arange(first_step + 1, first_step + 1 + len(counts), dtype=object)
        half = floor_half_widths(self.half_width)
        small = lambda values: values.dtype != object and np.abs(values).max(initial=0) < 2**61  # noqa: E731
        if small(counts) and small(shown) and small(half) and max_value * (first_step + len(counts)) < 2**61:
            lower = np.minimum(np.maximum(counts - half, 0), shown)
            upper = np.maximum(np.minimum(counts + half, max_value * steps.astype(np.int64)), shown)
            return lower.astype(np.int64), upper.astype(np.int64)
        counts, shown, half = counts.astype(object), shown.astype(object), half.astype(object)
        lower = np.array([min(max(c - h, 0), s) for c, h, s in zip(counts, half, shown, strict=True)], dtype=object)
        upper = np.array(
            [max(min(c + h, max_value * t), s) for c, h, t, s in zip(counts, half, steps, shown, strict=True)], dtype=object
        )
        return lower, upper


def floor_half_widths(half_width: np.ndarray) -> np.ndarray:
    """⌊h_t⌋ of every half-width, exactly: int64 when every h_t < 2^61 (the floor of a float below
    2^61 is exact in int64, and sums of three such values stay inside int64), else Python integers
    (the floor of a finite float is an exact integer at any magnitude). A half-width that is not
    finite is refused: the interval would say nothing, and no integer holds it."""
    half = np.asarray(half_width, dtype=np.float64)
    if not np.all(np.isfinite(half)):
        raise InvalidInputError(
            "the guaranteed interval's half-width overflows float64 at this epsilon and --max-value; "
            "choose a larger epsilon or a smaller --max-value"
        )
    if np.abs(half).max(initial=0.0) < 2.0**61:
        return np.floor(half).astype(np.int64)
    return np.array([math.floor(h) for h in half.tolist()], dtype=object).reshape(half.shape)


@dataclass(frozen=True)
class NoiseMoments:
    """Per step, what the error bars of a release are made of (module docstring): Var W_t, the
    sub-gamma variance factor ν_t and scale c_t of its Laplace part, the bound A_t on its lattice
    corrections, and the number of independent roundings summed into the released noise (1 for
    one counter; an anytime counter adds one per earlier segment). For a sum of independent
    releases Var, ν, A and the roundings add and c is the largest (``plus``): a sum of
    independent sub-gamma variables is sub-gamma with ν = Σν_j and c = max c_j (Boucheron,
    Lugosi & Massart, section 2.4), and each rounding moves its release by at most ½."""

    var: np.ndarray
    nu: np.ndarray
    c: np.ndarray
    a: np.ndarray
    roundings: int = 1

    @classmethod
    def zero(cls) -> NoiseMoments:
        """The moments of no noise (one step, no rounding)."""
        return cls(var=np.zeros(1), nu=np.zeros(1), c=np.zeros(1), a=np.zeros(1), roundings=0)

    def at(self, index: int) -> NoiseMoments:
        """The moments of one step, as a one-step ``NoiseMoments``."""
        pick = slice(index, index + 1)
        return NoiseMoments(var=self.var[pick], nu=self.nu[pick], c=self.c[pick], a=self.a[pick], roundings=self.roundings)

    def plus(self, other: NoiseMoments) -> NoiseMoments:
        """The moments of this noise plus an independent one (``other`` per step or one step for all)."""
        return NoiseMoments(
            var=self.var + other.var,
            nu=self.nu + other.nu,
            c=np.maximum(self.c, other.c),
            a=self.a + other.a,
            roundings=self.roundings + other.roundings,
        )

    def scaled(self, weight: float) -> NoiseMoments:
        """The moments of w·N for this rounded noise N = W + ρ (|ρ| ≤ roundings/2) and a weight
        w ≥ 0: w·W has Var w²·Var, its Laplace part is sub-gamma with (w²ν, w·c), its lattice
        part is within w·A, and w·ρ within w·roundings/2, so the result has no rounding of its
        own (``rounded`` adds the next one). Exact for a dyadic w (float products, covered by the
        2^-40 inflation of ``bars``)."""
        return NoiseMoments(
            var=self.var * weight * weight,
            nu=self.nu * weight * weight,
            c=self.c * weight,
            a=(self.a + 0.5 * self.roundings) * weight,
            roundings=0,
        )

    @classmethod
    def discrete_laplace(cls, rate: Fraction) -> NoiseMoments:
        """The moments of one DLap(λ) draw Y (one step): Var σ²(λ) (``dlap_variance``) and, from
        Y = Z/λ + D with Z ~ Laplace(1) and |D| < 1 (module docstring), ν = 2/λ², c = 1/λ, A = 1;
        no rounding (Y is an integer). 1/λ is rounded up."""
        b = 1 / float(rate) * (1 + 2.0**-40)
        return cls(var=np.array([dlap_variance(rate)]), nu=np.array([2 * b * b]), c=np.array([b]), a=np.ones(1), roundings=0)

    def rounded(self) -> NoiseMoments:
        """The moments after one more rounding to an integer (⌊v + ½⌋ moves v by at most ½)."""
        return NoiseMoments(var=self.var, nu=self.nu, c=self.c, a=self.a, roundings=self.roundings + 1)

    @staticmethod
    def concatenate(pieces: list[NoiseMoments]) -> NoiseMoments:
        """Consecutive steps' moments as one; the roundings of the whole are the largest (a bound per step)."""
        if not pieces:
            return NoiseMoments(var=np.zeros(0), nu=np.zeros(0), c=np.zeros(0), a=np.zeros(0))
        if len(pieces) == 1:
            return pieces[0]
        return NoiseMoments(
            var=np.concatenate([p.var for p in pieces]),
            nu=np.concatenate([p.nu for p in pieces]),
            c=np.concatenate([p.c for p in pieces]),
            a=np.concatenate([p.a + 0.5 * (p.roundings - min(q.roundings for q in pieces)) for p in pieces]),
            roundings=min(q.roundings for q in pieces),
        )

    def bars(self, *, beta: float) -> ErrorBars:
        """The standard deviation √Var and the guaranteed half-width
        h_t = √(2ν_t·s) + c_t·s + A_t + roundings/2, s = ln(2/β), at confidence 1 − β."""
        check_beta(beta, name="beta")
        s = math.log(2 / beta)
        half = (np.sqrt(2 * self.nu * s) + self.c * s + self.a + 0.5 * self.roundings) * (1 + 2.0**-40)
        return ErrorBars(std=np.sqrt(self.var), half_width=half, beta=beta)


def dlap_variance(rate: Fraction) -> float:
    """σ² = 2q/(1 − q)², q = e^{−λ}: the variance of DLap(λ), in float64."""
    q = math.exp(-float(rate))
    return 2 * q / (-math.expm1(-float(rate))) ** 2


class ErrorBarModel:
    """The per-step error bars of a streaming decoder under the exact release (module docstring):
    ``decoder`` (its ``term_arrays``), its exact ``atoms`` (``ExactDecoder``: L̃ and the proven
    row error τ) and the noise ``rates`` of every level. One model serves every engine (one
    counter, every key of a keyed release, which share the mechanism and the rates)."""

    def __init__(self, *, decoder, atoms, rates) -> None:
        self.decoder = decoder
        L = np.asarray(atoms.decoder, dtype=np.float64)
        r = L.shape[1]
        inflate = 1 + 2 * gamma(r)
        tau = atoms.tau
        self.row_l2 = np.sqrt(np.einsum("ij,ij->i", L, L) * inflate) * (1 + 2.0**-50) + tau
        self.row_max = np.abs(L).max(axis=1) + tau
        self.row_l1 = np.abs(L).sum(axis=1) * inflate + math.sqrt(r) * tau
        self.g = atoms.grid_bits
        self.unit = math.ldexp(1.0, -self.g)
        self.rates = rates
        self._levels: dict[int, tuple[float, float]] = {}

    def _level(self, level: int) -> tuple[float, float]:
        """(2^-g/λ_ℓ inflated, Var of 2^-g·DLap(λ_ℓ)) of one level."""
        if level not in self._levels:
            rate = self.rates(level)
            self._levels[level] = (
                math.ldexp(1.0, -self.g) / float(rate) * (1 + 2.0**-40),
                math.ldexp(1.0, -2 * self.g) * dlap_variance(rate),
            )
        return self._levels[level]

    def moments(self, start: int, stop: int) -> NoiseMoments:
        """The noise moments of the steps start … stop − 1 (0-based), vectorised over the terms of
        every row (``term_arrays``)."""
        count = stop - start
        positions, levels, rows, weights = self.decoder.term_arrays(start, stop)
        levels = np.asarray(levels, dtype=np.int64)  # 1, 2, …: a table indexed by level, no sort
        table = np.zeros((int(levels.max(initial=0)) + 1, 2))
        for level in np.bincount(levels).nonzero()[0].tolist():
            table[level] = self._level(level)
        b, variance = table[:, 0].take(levels), table[:, 1].take(levels)
        w = np.abs(np.asarray(weights, dtype=np.float64))
        l2 = self.row_l2[rows] * w
        var = np.bincount(positions, weights=variance * l2 * l2, minlength=count)
        nu = 2 * np.bincount(positions, weights=(b * l2) ** 2, minlength=count)
        c = np.zeros(count)
        np.maximum.at(c, positions, b * w * self.row_max[rows])
        a = np.bincount(positions, weights=self.unit * w * self.row_l1[rows], minlength=count)
        return NoiseMoments(var=var, nu=nu, c=c, a=a)

    def bars(self, start: int, stop: int, *, beta: float) -> ErrorBars:
        """Error bars of the steps start … stop − 1 (0-based) at confidence 1 − β."""
        return self.moments(start, stop).bars(beta=beta)


def simultaneous_beta(beta: float, *, steps: int) -> float:
    """The per-step β' that makes the intervals of ``steps`` steps hold together with probability
    ≥ 1 − β: by the union bound P(some step misses) ≤ Σ_t P(step t misses) ≤ steps·β' ≤ β. β' is
    β/steps rounded toward 0, so steps·β' ≤ β holds for the float used, not only for the real."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InvalidInputError(f"a simultaneous band needs a positive number of steps, got {steps!r}")
    per_step = beta / steps
    while Fraction(per_step) * steps > Fraction(beta):  # exact: at most one step down from round-to-nearest
        per_step = math.nextafter(per_step, 0.0)
    return per_step
