"""The exact lattice release: discrete Laplace noise on the encoder's lattice, exactly rounded outputs.

Arkhipov & Kalinin (arXiv 2607.08963), Algorithm 3, made exactly ε-DP for the code as it runs
(docs/privacy.md holds the theorem and its proof; this docstring states what each piece does).

Set-up. R̃ = 2^-g·P is the base encoder on the lattice 2^-g ℤ (P integer, k×k), L = T_k·R̃⁻¹ its
exact (rational) decoder, and (L_p, R_p) the p-fold lift with the plan's dyadic α₁…α_{p−1}
(``lift.py``). Every inner row of R_p is a row of R̃ (a *base* coordinate) or a row of R̃/α_{ℓ−1}
(a *coarse* coordinate of level ℓ ≥ 2), so coordinate i of every column of R_p lies on c_i·ℤ with
c_i = 2^-g (base) or 2^-g/α_{ℓ−1} (coarse of level ℓ). Δ = Δ_step·‖R_p[:, :n]‖₁→₁ is exact
(``LiftPlan.sensitivity_exact``; Δ_step = 1 for d = 1 and 2 for vectors).

Noise. w_i = c_i·Y_i with Y_i ~ DLap(λ_i) independent, λ_i = ε·c_i/Δ (``discrete_laplace``, exact,
unbounded support; the bits come from the counter's keyed SHAKE-256 stream, a page of 2^14 draws
per level at a time (``LatticeSource``), so a page is regenerated, never redrawn). Then y = R_p·x + w is exactly ε-DP: a neighbour moves
R_p·x by a vector whose coordinate i is a multiple m_i·c_i with Σ|m_i|·c_i ≤ Δ, and the
probability of every y changes by at most Π_i e^{λ_i·|m_i|} = e^{ε·Σ|m_i|c_i/Δ} ≤ e^ε.

Release. s_t = ⌊(L_p·y)_t + ½⌋ = S_t + ⌊(L_p·w)_t + ½⌋ (L_p·R_p = T exactly, S_t an integer,
and ⌊v + ½⌋ commutes with adding integers), a function of y alone: post-processing. In L_p·w
the factor α_{ℓ−1} of a coarse block meets the 1/α_{ℓ−1} of its lattice, so

    (L_p·w)_t = 2^-g·(L̄_p·Y)_t,

L̄_p the lift with every α = 1: each value is a signed sum of at most p entries (L·Y_b)_row of
base-decoder products with integer blocks Y_b (``StreamingDecoder.terms``).

Deciding the floor exactly. ``ExactDecoder`` holds L̃, a float64 matrix on the grid 2^-h, and a
proven bound τ ≥ max_i ‖L_i − L̃_i‖₂ (the certifier's Neumann-series argument, in integers:
G = (L̃R̃ − T_k)·T_k⁻¹, ρ = ‖G‖∞→∞ < 1, E₁ = −G·L̃, τ = ‖E₁‖₂→∞/(1 − ρ), since L − L̃ = E₁ − G·(L − L̃)).
The float value v of (L̄_p·Y)_t (Y exact in float64 when |Y| < 2^53) has

    |v − (L̄_p·Y)_t| ≤ e = q·(τ·‖Y‖₂ + γ_r·a·‖Y‖∞) + γ_q·q·a·‖Y‖∞·(1 + γ_r),

q ≤ p the number of terms, a = max_i Σ_j |L̃_ij|, γ_m = m·2^-53/(1 − m·2^-53) (Higham, Theorem 3.5
and Lemma 3.1: a dot product of length r in any order, then q − 1 additions), ‖Y‖ the largest
over the blocks drawn. When v·2^-g is more than e·2^-g plus a float-rounding slack from a
half-integer, ⌊v·2^-g + ½⌋ is the exact answer. Once some |Y| ≥ 2^53 the float blocks are
Ŷ = fl(Y) (rounded to nearest, |Ŷ − Y| ≤ u·|Ŷ|), and e grows by q·(a + √r·τ)·u·‖Ŷ‖∞, since
|(L̄_p·(Ŷ − Y))_t| ≤ q·max_i ‖L_i‖₁·u·‖Ŷ‖∞ and ‖L_i‖₁ ≤ a + √r·τ. Otherwise the
value is decided in integers (``ExactDecoder.refine``, ``ExactRelease.exact_value``). The
decoder L̃ = M·2^-h is dyadic, and L·R̃·T_k⁻¹ = I, so for any vector Y

    L·Y = L̃·Y + L·Y',   Y' = Y − R̃·T_k⁻¹·L̃·Y = (2^(g+h)·Y − P·T_k⁻¹·M·Y)·2^-(g+h).

Starting from Y_0 = Y_b and stepping Y_{i+1} = Y_i' (exact integer products in float64 limbs,
``integer_product``),
2^-g·(L·Y)_row = c_j + 2^-g·((L − L̃)·Y_j)_row with the exact dyadic centre
c_j = 2^-g·Σ_{i ≤ j} (L̃·Y_i)_row, and |2^-g·((L − L̃)·Y_j)_row| ≤ r_j = 2^-g·τ·‖Y_j‖₂
(Cauchy–Schwarz on row ``row``): the exact value lies in [c_j − r_j, c_j + r_j], and a value is
decided once that interval (summed over the terms, with their exact weights) holds no rounding
boundary. ‖Y_j‖ shrinks by about ρ a step (2^-40 for the shipped bases), so one or two steps
decide almost every value; a step is two k×k integer products, tens of milliseconds at k = 2048
whatever the size of Y. Only a value still undecided after ``REFINEMENTS`` steps (an exact tie,
or a base whose steps do not contract) is recomputed in rationals: (L·Y_b)_row =
2^g·Σ_{l ≤ row} (P⁻¹·Y_b)_l, one exact solve P·u = Y_b (FLINT), over the common denominator of
u (never det P nor the inverse). ``fallbacks`` counts the values decided in integers. (Measured at
k = 1024: the exact solve took 7.7 s for small Y and 32 s for |Y| near 2^60, ball arithmetic
11.1 s; the refinement takes milliseconds.)

Tie rule: ⌊v + ½⌋ (round half up), which commutes with adding integers; round-half-even does not.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

import flint
import gmpy2
import numpy as np

from pure_dp_mf import exact
from pure_dp_mf.cache import read_entry, write_entry
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import decoder_from_encoder
from pure_dp_mf.release.discrete_laplace import discrete_laplace_block, discrete_laplace_blocks

UNIT_ROUNDOFF = 2.0**-53
REFINEMENTS = 8  # integer refinement steps before the exact solve (``ExactRelease.exact_value``)
EXACT_INTEGER = 2.0**53  # |Y| below this is exact in float64
_KEY_DOMAIN = b"pure_dp_mf lattice noise v1\x00"


@functools.lru_cache(maxsize=256)
def gamma(m: int) -> float:
    """γ_m = m·u/(1 − m·u), u = 2^-53, rounded up (a bound on m successive float64 roundings)."""
    value = Fraction(m) * Fraction(UNIT_ROUNDOFF) / (1 - Fraction(m) * Fraction(UNIT_ROUNDOFF))
    return float_upper(value)


def float_upper(value: Fraction | gmpy2.mpq) -> float:
    """The smallest float64 ≥ ``value`` (a rational): the one rounding up of an exact quantity to
    a float, used wherever a float must bound an exact value from above (docs/privacy.md,
    "float_upper"): float(value) is the nearest float, and it is replaced by the next one up
    exactly when it lies below ``value`` (compared exactly as rationals)."""
    candidate = float(value)
    return candidate if Fraction(candidate) >= Fraction(value) else math.nextafter(candidate, math.inf)


@dataclass(frozen=True)
class ExactDecoder:
    """The base decoder of an encoder R̃ = 2^-g·P on the lattice: a float64 L̃, a proven row-wise
    error bound τ ≥ max_i ‖L_i − L̃_i‖₂ of the exact decoder L, a ≥ max_i Σ_j |L̃_ij|, and the
    exact values 2^-g·(L·Y)_row for integer vectors Y (module docstring).

    Two routes: a square encoder (every base of ``train``/``certify``) has L = T_k·R̃⁻¹ bounded by
    the Neumann series; any other factorization (the trees) must store a dyadic decoder L̃ with
    L̃·R̃ = T_n exactly (checked in integers), and then L = L̃, τ = 0."""

    P: np.ndarray
    grid_bits: int
    decoder: np.ndarray
    tau: float
    rho: float
    row_abs_sum: float
    exact_decoder: np.ndarray | None = None  # integer D with L = D·2^-h (second route), else None
    decoder_bits: int = 0

    @classmethod
    def from_factorization(cls, *, decoder: np.ndarray, encoder: np.ndarray, grid_bits: int = exact.GRID_BITS) -> ExactDecoder:
        """Refuses an encoder off the lattice 2^-g, a square encoder whose error series does not
        converge (ρ ≥ 1: R̃ not shown invertible), and a non-square factorization whose decoder is
        not dyadic or does not factor T_n exactly."""
        encoder = np.asarray(encoder, dtype=np.float64)
        P = exact.grid_integers(
            encoder, grid_bits=grid_bits, name="the base encoder (the exact release needs a certified base: pure-dp-mf certify)"
        )
        if encoder.shape[0] == encoder.shape[1]:
            return cls._square(P, encoder, grid_bits)
        decoder = np.asarray(decoder, dtype=np.float64)
        n = encoder.shape[1]
        if decoder.shape != (n, encoder.shape[0]):
            raise InvalidInputError(f"decoder of shape {decoder.shape} does not match an encoder of shape {encoder.shape}")
        h = _grid_bits_for(decoder)
        try:
            D = exact.grid_integers(decoder, grid_bits=h)
        except InvalidInputError:
            raise InvalidInputError(
                "the exact release needs a dyadic decoder (entries m·2^-h) for a non-square factorization"
            ) from None
        with exact.flint_threads():
            product = exact.integer_matrix(D) * exact.integer_matrix(P)
        target = 1 << (grid_bits + h)
        for i, row in enumerate(exact.rows_of(product)):
            for j, value in enumerate(row):
                if int(value) != (target if j <= i else 0):
                    raise InvalidInputError(f"the decoder times the encoder is not T_{n} exactly (entry {i}, {j})")
        row_abs = float_upper(Fraction(max(exact.row_abs_sums(D.tolist())), 1 << h))
        return cls(
            P=P, grid_bits=grid_bits, decoder=decoder, tau=0.0, rho=0.0, row_abs_sum=row_abs, exact_decoder=D, decoder_bits=h
        )

    @classmethod
    def _square(cls, P: np.ndarray, encoder: np.ndarray, grid_bits: int) -> ExactDecoder:
        approximate = decoder_from_encoder(encoder)
        h = _grid_bits_for(approximate)
        decoder, _ = exact.round_to_grid(approximate, grid_bits=h)
        M = exact.grid_integers(decoder, grid_bits=h)
        tag = _bound_tag(P, M, grid_bits, h)
        bound = _cached_bound(tag)
        if bound is None:
            bound = _decoder_bound(P, M, grid_bits, h)
            _store_bound(tag, bound)
        tau, rho, row_abs = bound
        return cls(P=P, grid_bits=grid_bits, decoder=decoder, tau=tau, rho=rho, row_abs_sum=row_abs, decoder_bits=h)

    @property
    def inner_size(self) -> int:
        """r: the length of one noise block (columns of the decoder)."""
        return self.P.shape[0]

    def error_bound(self, *, terms: int, largest: float, largest_norm: float, rounded_inputs: bool = False) -> float:
        """e of the module docstring for ``terms`` summands, blocks with ‖Y‖∞ ≤ ``largest`` and
        ‖Y‖₂ ≤ ``largest_norm`` (float arithmetic here, inflated by 2^-40 relative to cover it).

        ``rounded_inputs``: the float blocks are Ŷ = fl(Y), Y rounded to nearest (some |Y| ≥ 2^53),
        and ``largest``, ``largest_norm`` are those of Ŷ. Then e bounds |v − (L̄_p·Ŷ)_t| and
        |(L̄_p·Ŷ)_t − (L̄_p·Y)_t| ≤ q·max_i ‖L_i‖₁·max|Ŷ − Y| ≤ q·(a + √r·τ)·u·‖Ŷ‖∞ (|w| ≤ 1,
        ‖L_i‖₁ ≤ ‖L̃_i‖₁ + √r·‖L_i − L̃_i‖₂, and |Y − fl(Y)| ≤ u·|fl(Y)| for rounding to nearest)
        is added."""
        g_r, g_q, a = gamma(self.inner_size), gamma(terms), self.row_abs_sum
        bound = terms * (self.tau * largest_norm + g_r * a * largest) + g_q * terms * a * largest * (1 + g_r)
        if rounded_inputs:
            root = math.sqrt(self.inner_size) * (1 + 2.0**-50)  # ≥ √r: one correctly rounded square root
            bound += terms * (a + root * self.tau) * UNIT_ROUNDOFF * largest
        return bound * (1 + 2.0**-40)

    def exact_rows(self, Y: Sequence[int]) -> tuple[list[int], int]:
        """2^-g·(L·Y)_row for every row, exactly, as (integer numerators, their common positive
        denominator). Square route: 2^-g·L = T_k·P⁻¹, so the prefix sums of u with P·u = Y (one
        exact solve, over the least common denominator of u, a divisor of det P by Cramer's rule);
        second route: D·Y/2^(g+h). The last resort of ``ExactRelease.exact_value``
        (``refine`` first): the solve costs seconds to minutes at k ≥ 1024."""
        if self.exact_decoder is not None:
            Y = [int(v) for v in Y]
            numerators = [sum(int(d) * y for d, y in zip(row, Y, strict=True)) for row in self.exact_decoder]
            return numerators, 1 << (self.grid_bits + self.decoder_bits)
        r = self.inner_size
        with exact.flint_threads():
            solution = self._integer_matrices[0].solve(flint.fmpz_mat(r, 1, [int(v) for v in Y]))
        entries = [solution[i, 0] for i in range(r)]
        denominator = math.lcm(*(int(value.q) for value in entries)) if entries else 1
        total, out = 0, []
        for value in entries:
            total += int(value.p) * (denominator // int(value.q))
            out.append(total)
        return out, denominator

    def refinement(self, Y: Sequence[int]) -> Refinement:
        """Step 0 of the integer refinement of 2^-g·L·Y (module docstring): the centre
        c_0 = 2^-g·L̃·Y for every row and its radius r_0 = 2^-g·τ·‖Y‖₂, exactly."""
        return self._step(
            Refinement(
                numerators=[0] * self.inner_size,
                exponent=0,
                radius=Fraction(0),
                steps=-1,
                residual=[int(v) for v in Y],
                residual_exponent=0,
            )
        )

    def refine(self, state: Refinement) -> Refinement:
        """The next step: Y_{j+1} = (2^(g+h)·N_j − P·T_k⁻¹·M·N_j)·2^-(e_j+g+h) for Y_j = N_j·2^-e_j,
        then its centre and radius (module docstring)."""
        shift = self.grid_bits + self.decoder_bits
        products = state.products
        differences = [products[0], *(products[i] - products[i - 1] for i in range(1, len(products)))]
        moved = integer_product(self._split_matrices[0], differences)
        residual = [(n << shift) - v for n, v in zip(state.residual, moved, strict=True)]
        return self._step(replace(state, residual=residual, residual_exponent=state.residual_exponent + shift))

    def _step(self, state: Refinement) -> Refinement:
        """Add 2^-g·L̃·Y_j to the centre and set the radius 2^-g·τ·‖Y_j‖₂ (Y_j = ``state.residual``·2^-e_j)."""
        if self.exact_decoder is not None:
            raise InvalidInputError("the integer refinement is for square bases (a dyadic decoder is exact)")
        g, h = self.grid_bits, self.decoder_bits
        exponent = state.residual_exponent + g + h  # the centre's denominator is 2^exponent
        products = integer_product(self._split_matrices[1], state.residual)
        scale = exponent - state.exponent if state.steps >= 0 else 0
        numerators = [(c << scale) + v for c, v in zip(state.numerators, products, strict=True)]
        squares = sum(v * v for v in state.residual)
        norm = math.isqrt(squares - 1) + 1 if squares else 0  # ⌈‖N_j‖₂⌉
        radius = Fraction(self.tau) * norm / (1 << (state.residual_exponent + g))
        return Refinement(
            numerators=numerators,
            exponent=exponent,
            radius=radius,
            steps=state.steps + 1,
            residual=state.residual,
            residual_exponent=state.residual_exponent,
            products=products,
        )

    @functools.cached_property
    def _integer_matrices(self) -> tuple[flint.fmpz_mat]:
        return (exact.integer_matrix(self.P),)

    @functools.cached_property
    def _split_matrices(self) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """``split_matrix`` of P and of M = L̃·2^h (square route)."""
        M = np.ldexp(self.decoder, self.decoder_bits).astype(np.int64)
        return split_matrix(self.P), split_matrix(M)


@dataclass(frozen=True)
class Refinement:
    """Step ``steps`` of the integer refinement of 2^-g·L·Y for one block Y (``ExactDecoder.refine``):
    the centre c_j = ``numerators``·2^-``exponent`` of every row, exact, and its radius r_j, with
    |2^-g·(L·Y)_row − c_j,row| ≤ r_j; the residual Y_j = ``residual``·2^-``residual_exponent`` and
    ``products`` = M·``residual`` carry the next step."""

    numerators: list[int]
    exponent: int
    radius: Fraction
    steps: int
    residual: list[int]
    residual_exponent: int
    products: list[int] = field(default_factory=list)


PRODUCT_PART_BITS = 26


def split_matrix(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(H, W) as float64 with A = H·2^26 + W, 0 ≤ W < 2^26 and |H| ≤ 2^26 (integers, exact in
    float64), for an int64 matrix A with |A_ij| ≤ 2^52 (P and M = L̃·2^h both are:
    ``exact.grid_integers``, ``_grid_bits_for``)."""
    matrix = np.asarray(matrix, dtype=np.int64)
    if matrix.size and int(np.abs(matrix).max()) > 1 << 52:
        raise InvalidInputError("an exact product needs integer entries of at most 2^52")
    high, low = matrix >> PRODUCT_PART_BITS, matrix & ((1 << PRODUCT_PART_BITS) - 1)
    return high.astype(np.float64), low.astype(np.float64)


def integer_product(parts: tuple[np.ndarray, np.ndarray], vector: Sequence[int]) -> list[int]:
    """A·x exactly, A given as ``split_matrix(A)`` (k columns) and x Python integers of any size:
    x = Σ_l d_l·2^(b·l) with signed digits |d_l| < 2^b, b = 27 − bitlength(k). Every product
    H_ij·d and W_ij·d is an integer below 2^(26+b) in magnitude and a sum of k < 2^bitlength(k)
    of them stays below 2^53, so every partial sum of the float64 products H·D and W·D (BLAS, in
    any order, with or without fused multiply-adds) is an integer that float64 holds exactly: the
    products are exact. Then A·x = Σ_l (H·d_l·2^26 + W·d_l)·2^(b·l) in Python integers."""
    high, low = parts
    k = high.shape[1]
    if len(vector) != k:
        raise InvalidInputError(f"a vector of length {len(vector)} does not match {k} columns")
    bits = 53 - PRODUCT_PART_BITS - k.bit_length()
    if bits < 1:
        raise InvalidInputError(f"an exact float64 product needs fewer than 2^26 columns, got {k}")
    mask = (1 << bits) - 1
    values = [int(v) for v in vector]
    magnitudes = [abs(v) for v in values]
    signs = np.array([-1.0 if v < 0 else 1.0 for v in values])
    count = max((m.bit_length() for m in magnitudes), default=0) // bits + 1
    digits = np.empty((k, count), dtype=np.float64)
    for limb in range(count):
        digits[:, limb] = [(m >> (bits * limb)) & mask for m in magnitudes]
    digits *= signs[:, None]
    upper, lower = (high @ digits).astype(np.int64).tolist(), (low @ digits).astype(np.int64).tolist()
    out = []
    for up, low_row in zip(upper, lower, strict=True):
        total = 0
        for limb in range(count - 1, -1, -1):
            total = (total << bits) + (up[limb] << PRODUCT_PART_BITS) + low_row[limb]
        out.append(total)
    return out


def _grid_bits_for(matrix: np.ndarray) -> int:
    """h with |matrix|·2^h < 2^53, so the matrix rounded to 2^-h is exact in float64."""
    largest = float(np.abs(matrix).max(initial=0.0))
    if not math.isfinite(largest) or largest == 0:
        raise InvalidInputError("the base decoder is zero or not finite: the encoder is singular")
    return 52 - max(math.frexp(largest)[1], 0)


PAGE = 1 << 14
"""Noise coordinates drawn together: the integer noise of level ℓ is sampled a page at a time."""
MIN_PAGE = 1 << 8
"""The smallest page of a shrinking layout (``LatticeSource``, ``shrink=True``)."""


@dataclass(frozen=True)
class Rates:
    """The noise rate of every level: λ_ℓ = ε·c_ℓ/Δ (``noise_rate``), c_1 = 2^-g and, for a lifted
    decoder, c_ℓ = 2^-g/α_{ℓ−1} on the coarse level ℓ ≥ 2; without ``alphas`` (trees) every level
    has the rate of level 1."""

    base: Fraction
    alphas: tuple[Fraction, ...] | None = None

    def __call__(self, level: int) -> Fraction:
        if level == 1 or self.alphas is None:
            return sampler_rate(self.base)
        return sampler_rate(self.base / self.alphas[level - 2])

    def levels(self, count: int) -> list[Fraction]:
        return [self(level) for level in range(1, count + 1)]


def noise_rate(*, epsilon: Fraction | float, sensitivity: Fraction, grid_bits: int) -> Fraction:
    """λ = ε·2^-g/Δ: the rate per lattice step of discrete Laplace noise DLap(λ) on the lattice
    2^-g ℤ that makes y = R·x + w exactly ε-DP for an ℓ1 sensitivity Δ of R·x whose moves are
    multiples of 2^-g (docs/privacy.md, "noise_rate"). ε and Δ are taken exactly (a float ε is
    its exact dyadic value); the one implementation of the rate."""
    epsilon, sensitivity = Fraction(epsilon), Fraction(sensitivity)
    if epsilon <= 0 or sensitivity <= 0:
        raise InvalidInputError(f"the noise rate needs epsilon > 0 and a positive sensitivity, got {epsilon}, {sensitivity}")
    return epsilon / (sensitivity * (1 << grid_bits))


SAMPLER_DENOMINATOR_BITS = 56


def sampler_rate(rate: Fraction) -> Fraction:
    """The rate the sampler draws for an exact rate λ: λ itself when its denominator is below 2^62
    (the vectorised sampler's range, ``discrete_laplace.VECTOR_LIMIT``), else the largest
    multiple of 2^-56 not above λ (a coarse level's rate 2^-g·s_ℓ/Δ with a tilted dyadic α has a
    denominator near 2^63 and would take the scalar sampler, tens of times slower). Never larger
    than λ: a smaller rate is more noise, so the proof of ``noise_rate`` holds as it is
    (docs/privacy.md); the relative change is below 2^-56/λ, about 10^-7 at λ ≈ 2^-34."""
    if rate.denominator < 1 << 62:
        return rate
    rounded = Fraction(math.floor(rate * (1 << SAMPLER_DENOMINATOR_BITS)), 1 << SAMPLER_DENOMINATOR_BITS)
    return rounded if rounded > 0 else rate


class LatticeSource:
    """The integer noise Y of one counter coordinate. Coordinate i of level ℓ carries
    Y_i ~ DLap(λ_ℓ) (``rates``): entry i mod P_ℓ of page (ℓ, ⌊i/P_ℓ⌋), a page being P_ℓ
    independent DLap(λ_ℓ) draws from the keyed stream SHAKE-256(key, ℓ·2^64 + page), with
    P_ℓ = ``page_size`` on every level, or P_ℓ = max(``page_size``·2^{1−ℓ}, ``MIN_PAGE``) with
    ``shrink=True`` (the heights of a tree, whose level ℓ has 2^{1−ℓ} as many nodes as its leaves)
    (``discrete_laplace.discrete_laplace_block``). Every (ℓ, i) reads its own page entry, so the
    Y_i are independent; every page is a pure function of (key, ℓ, page): regenerated on demand,
    never redrawn. (A page holds entries that its level never uses; they are drawn and ignored.)

    ``block`` returns a block in float64 (exact while |Y| < 2^53) and records the largest ‖Y‖∞ and
    ‖Y‖₂ seen, for the rounding bound; ``integers`` returns it as Python integers."""

    def __init__(self, *, key: bytes, rates: Rates, page_size: int = PAGE, cached_pages: int = 8, shrink: bool = False):
        self.key = hashlib.sha256(_KEY_DOMAIN + bytes(key)).digest()
        self.rates = rates
        self.largest = 0.0
        self.largest_norm = 0.0
        self.exact_in_float = True
        self._pages: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self.page_size = page_size  # a page size other than PAGE is another (equally private) layout
        self.shrink = shrink
        self.cached_pages = cached_pages

    def size_of(self, level: int) -> int:
        """P_ℓ, the page size of level ℓ."""
        return max(self.page_size >> (level - 1), MIN_PAGE) if self.shrink else self.page_size

    def page(self, level: int, number: int) -> np.ndarray:
        """Page ``number`` of level ``level``: ``page_size`` draws of DLap(λ_level) (int64 or Python ints)."""
        key = (level, number)
        cached = self._pages.get(key)
        if cached is None:
            rate = self.rates(level)
            cached = discrete_laplace_block(
                s=rate.numerator, t=rate.denominator, count=self.size_of(level), key=self.key, index=_page_index(level, number)
            )
            self._keep(key, cached)
        else:
            self._pages.move_to_end(key)
        return cached

    def _keep(self, key: tuple[int, int], page: np.ndarray) -> None:
        self._pages[key] = page
        if len(self._pages) > self.cached_pages:
            self._pages.popitem(last=False)

    def _values(self, offset: int, size: int, level: int) -> np.ndarray:
        if offset < 0:
            raise InvalidInputError(f"noise coordinate {offset} of level {level} does not exist")
        parts, position = [], offset
        while position < offset + size:
            page_size = self.size_of(level)
            number, start = divmod(position, page_size)
            stop = min(page_size, start + offset + size - position)
            parts.append(self.page(level, number)[start:stop])
            position += stop - start
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def integers(self, offset: int, size: int, level: int = 1) -> list[int]:
        return [int(v) for v in self._values(offset, size, level).tolist()]

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray:
        values = self._values(offset, size, level)
        if values.dtype == object:  # a value beyond int64: certainly not exact in float64
            self.exact_in_float = False
            values = np.array([float(v) if abs(v) < 1 << 1023 else math.copysign(math.inf, v) for v in values])
        array = values.astype(np.float64)
        largest = float(np.abs(array).max(initial=0.0))
        if largest >= EXACT_INTEGER:
            self.exact_in_float = False
        self.largest = max(self.largest, largest)
        # ‖Ŷ‖₂ of the float block Ŷ (Y itself while |Y_i| < 2^53, else fl(Y), and exact_in_float
        # is off: ``ExactDecoder.error_bound`` then adds the rounding Y → Ŷ) bounded above in
        # floats: a float dot product of r terms has relative error ≤ γ_r (Higham, Theorem 3.5),
        # so Σ Ŷ_i² ≤ fl(Ŷ·Ŷ)/(1 − γ_r); the square root and the division are then inflated by
        # 2^-50 to cover their own roundings.
        squares = float(np.dot(array, array)) / (1 - gamma(len(array)))
        self.largest_norm = max(self.largest_norm, math.sqrt(squares) * (1 + 2.0**-50))
        return array

    def blocks(self, offsets: Sequence[int], size: int) -> np.ndarray:
        return np.stack([self.block(offset, size) for offset in offsets]) if offsets else np.zeros((0, size))


def _page_index(level: int, number: int) -> int:
    return (level << 64) + number


def fill_pages(sources: Sequence[LatticeSource], *, offset: int, size: int, level: int) -> None:
    """Draw, for every source at once, the pages of ``level`` that entries [offset, offset + size)
    read and that the source does not hold (``discrete_laplace_blocks``: the same values as each
    source's own ``page``, so this changes the speed of many counters, never their noise). The
    sources must share their rates and page size (the counters of one keyed release)."""
    if not sources:
        return
    first = sources[0]
    rate = first.rates(level)
    page_size = first.size_of(level)
    if any(source.rates(level) != rate or source.size_of(level) != page_size for source in sources):
        raise InvalidInputError("pages are filled together only for sources with the same rates and page size")
    for number in range(offset // page_size, (offset + size - 1) // page_size + 1):
        missing = [source for source in sources if (level, number) not in source._pages]
        pages = discrete_laplace_blocks(
            s=rate.numerator,
            t=rate.denominator,
            count=page_size,
            keys=[source.key for source in missing],
            index=_page_index(level, number),
        )
        for source, page in zip(missing, pages, strict=True):
            source._keep((level, number), page)


class BatchSource:
    """The integer noise of many coordinates side by side (the keys of a keyed release): ``block``
    stacks each source's block as a column, every source's pages drawn in one pass."""

    def __init__(self, sources: Sequence[LatticeSource]) -> None:
        self.sources = list(sources)
        self.columns = len(self.sources)

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray:
        fill_pages(self.sources, offset=offset, size=size, level=level)
        return np.stack([source.block(offset, size, level) for source in self.sources], axis=1)

    def blocks(self, offsets: Sequence[int], size: int) -> np.ndarray:
        return np.stack([self.block(offset, size) for offset in offsets])

    @property
    def largest(self) -> float:
        return max(source.largest for source in self.sources)

    @property
    def largest_norm(self) -> float:
        return max(source.largest_norm for source in self.sources)

    @property
    def exact_in_float(self) -> bool:
        return all(source.exact_in_float for source in self.sources)


def decide_roundings(values: np.ndarray, *, terms: int, atoms: ExactDecoder, source) -> tuple[np.ndarray, np.ndarray]:
    """(⌊2^-g·v + ½⌋ as int64, the mask of entries decided): v ≈ (L̄·Y)_t in float64 (any shape),
    each a sum of at most ``terms`` terms, an entry decided when its distance to the rounding
    boundary exceeds the proven error bound of v (``ExactDecoder.error_bound`` for the largest
    noise the source has drawn, with the rounding of the noise to float64 added once a value
    was not exact there) plus the float error of forming 2^-g·v + ½; nothing is decided when a
    result reaches 2^52. Undecided entries must be computed exactly (``ExactRelease.exact_value``)."""
    bound = atoms.error_bound(
        terms=terms, largest=source.largest, largest_norm=source.largest_norm, rounded_inputs=not source.exact_in_float
    )
    g = atoms.grid_bits
    r = np.ldexp(values, -g) + 0.5
    n = np.floor(r)
    margin = np.minimum(r - n, n + 1 - r)
    slack = math.ldexp(bound, -g) + 2.0**-50 * (np.abs(r) + 1)
    decided = (margin > slack) & np.isfinite(r)
    if np.any(np.abs(n) >= 2.0**52):
        decided[:] = False
    return np.where(decided, n, 0).astype(np.int64), decided


def _rounded_interval(terms, states: Sequence[Refinement]) -> tuple[int, int]:
    """(⌊c − r + ½⌋, ⌊c + r + ½⌋) for c = Σ w·c_row and r = Σ |w|·r over the terms (weights w,
    rows) and their blocks' refinements, exactly: every quantity over one common denominator D,
    then floor((2N + D)/(2D)). Equal ends decide ⌊x + ½⌋ for every x in [c − r, c + r] (if
    c + r + ½ were an integer with r > 0, the low end would fall below it)."""
    denominator = 1
    for term, state in zip(terms, states, strict=True):
        weight = Fraction(term.weight)
        denominator = math.lcm(denominator, weight.denominator << state.exponent, weight.denominator * state.radius.denominator)
    centre, radius = 0, 0
    for term, state in zip(terms, states, strict=True):
        weight = Fraction(term.weight)
        centre += weight.numerator * state.numerators[term.row] * (denominator // (weight.denominator << state.exponent))
        radius += (
            abs(weight.numerator) * state.radius.numerator * (denominator // (weight.denominator * state.radius.denominator))
        )
    return (2 * (centre - radius) + denominator) // (2 * denominator), (2 * (centre + radius) + denominator) // (2 * denominator)


def round_half_up(value: Fraction) -> int:
    """⌊value + ½⌋ exactly."""
    return math.floor(value + Fraction(1, 2))


class ExactRelease:
    """The rounded noise ⌊2^-g·(L̄·Y)_t + ½⌋ of a streaming decoder (``mechanisms.streaming``) for
    one noise source, or for many side by side (the keys of a keyed release: one matrix product per
    base block for all of them), every rounding decided exactly (module docstring): in floats with
    the proven error bound of the largest noise over all sources (the bound grows with it, so it
    holds for each), the rest in rationals by that source's own noise. ``noise(start, stop)``
    returns int64 values (an object array of Python ints if one does not fit), shape (steps,) for
    one source and (steps, sources) for many; ``fallbacks`` counts the values decided in rationals."""

    def __init__(self, *, decoder, atoms: ExactDecoder, sources: Sequence[LatticeSource]) -> None:
        self.decoder, self.atoms, self.sources = decoder, atoms, list(sources)
        self.source = self.sources[0] if len(self.sources) == 1 else BatchSource(self.sources)
        self.fallbacks = 0
        self._state = decoder.init()
        self._solved: OrderedDict[tuple[int, int, int], tuple[list[int], int]] = OrderedDict()
        self._refined: OrderedDict[tuple[int, int, int], Refinement] = OrderedDict()

    def noise(self, start: int, stop: int) -> np.ndarray:
        if self._state.t != start:
            self._state = self.decoder.init(start=start)
        values, self._state = self.decoder.next(self._state, self.source, steps=stop - start)
        out, decided = decide_roundings(values, terms=self.decoder.max_terms(stop), atoms=self.atoms, source=self.source)
        undecided = np.argwhere(~decided)
        if len(undecided):
            exact = [self.exact_value(start + int(index[0]), int(index[1]) if out.ndim > 1 else 0) for index in undecided]
            if any(not -(2**62) < value < 2**62 for value in exact):
                out = out.astype(object)
            for index, value in zip(undecided, exact, strict=True):
                out[tuple(index)] = value
            self.fallbacks += len(exact)
        return out

    def exact_value(self, t: int, column: int = 0) -> int:
        """⌊2^-g·(L̄·Y)_t + ½⌋ of source ``column`` in exact integer arithmetic (module docstring).
        Square bases: each term's block is refined in integers (``ExactDecoder.refine``) until the
        exact interval Σ w·[c − r, c + r] holds no rounding boundary, at most ``REFINEMENTS``
        steps; then (or for a dyadic decoder at once) every term's row over one common
        denominator (the weights are dyadic), and floor((2N + D)/(2D))."""
        terms = self.decoder.terms(t)
        if self.atoms.exact_decoder is None:
            for _ in range(REFINEMENTS + 1):
                states = [self._refinement(column, term.offset, term.level) for term in terms]
                low, high = _rounded_interval(terms, states)
                if low == high:
                    return low
                if not self._refine([(column, term.offset, term.level) for term in terms]):
                    break
        numerator, denominator = 0, 1
        for term in terms:
            rows, scale = self._prefix(column, term.offset, term.level)
            weight = Fraction(term.weight)
            value_num, value_den = weight.numerator * rows[term.row], weight.denominator * scale
            numerator, denominator = numerator * value_den + value_num * denominator, denominator * value_den
            common = math.gcd(numerator, denominator)
            numerator, denominator = numerator // common, denominator // common
        return (2 * numerator + denominator) // (2 * denominator)

    def _refinement(self, column: int, offset: int, level: int) -> Refinement:
        key = (column, offset, level)
        cached = self._refined.get(key)
        if cached is None:
            cached = self.atoms.refinement(self.sources[column].integers(offset, self.atoms.inner_size, level))
            self._refined[key] = cached
            if len(self._refined) > 64:
                self._refined.popitem(last=False)
        else:
            self._refined.move_to_end(key)
        return cached

    def _refine(self, keys: list[tuple[int, int, int]]) -> bool:
        """One more step for every block of ``keys`` with a positive radius; False when none can
        take one (all exact, or ``REFINEMENTS`` steps reached)."""
        stepped = False
        for key in dict.fromkeys(keys):
            state = self._refinement(*key)
            if state.radius and state.steps < REFINEMENTS:
                self._refined[key] = self.atoms.refine(state)
                stepped = True
        return stepped

    def _prefix(self, column: int, offset: int, level: int) -> tuple[list[int], int]:
        key = (column, offset, level)
        cached = self._solved.get(key)
        if cached is None:
            cached = self.atoms.exact_rows(self.sources[column].integers(offset, self.atoms.inner_size, level))
            self._solved[key] = cached
            if len(self._solved) > 16:
                self._solved.popitem(last=False)
        return cached


# ---------------------------------------------------------------------------------------------
# The decoder bound, and its cache.

BOUND_FORMAT = "pure_dp_mf.decoder_bound/1"


def _decoder_bound(P: np.ndarray, M: np.ndarray, grid_bits: int, h: int) -> tuple[float, float, float]:
    """(τ, ρ, a) of the module docstring for R̃ = P·2^-g and L̃ = M·2^-h, in integers
    (``exact.neumann_series``); refuses ρ ≥ 1 (R̃ not shown invertible)."""
    with exact.flint_threads():
        series = exact.neumann_series(P, exact.integer_matrix(M), grid_bits=grid_bits, decoder_bits=h, second_order=False)
    rho = series.rho
    if rho >= 1:
        raise InvalidInputError(
            f"the base decoder cannot be bounded: ‖(L̃R̃ − T_k)·T_k⁻¹‖∞ ≥ {float(rho):.3g} ≥ 1 (is the encoder invertible?)"
        )
    first = exact.sqrt_upper(gmpy2.mpq(max(series.first_squares), gmpy2.mpz(4) ** series.scale_bits))
    tau = float_upper(first / (1 - rho))
    row_abs = float_upper(Fraction(max(exact.row_abs_sums(M.tolist())), 1 << h))
    return tau, float(rho), row_abs


def _bound_tag(P: np.ndarray, M: np.ndarray, grid_bits: int, h: int) -> str:
    """sha256 of exactly the integer matrices (and g, h) a decoder bound is proven for."""
    digest = hashlib.sha256(f"{BOUND_FORMAT}:{grid_bits}:{h}:{P.shape}:{M.shape}:".encode())
    digest.update(np.ascontiguousarray(P, dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(M, dtype="<i8").tobytes())
    return digest.hexdigest()


def _cached_bound(tag: str) -> tuple[float, float, float] | None:
    """A decoder bound proven by an earlier process (``cache.py``; about half a minute of exact
    arithmetic for a k = 2048 base), when its entry names exactly these matrices."""
    record = read_entry(f"{tag}.json")
    if record is None or record.get("format") != BOUND_FORMAT or record.get("tag") != tag:
        return None
    try:
        return float.fromhex(record["tau"]), float.fromhex(record["rho"]), float.fromhex(record["row_abs"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _store_bound(tag: str, bound: tuple[float, float, float]) -> None:
    tau, rho, row_abs = bound
    write_entry(f"{tag}.json", {"format": BOUND_FORMAT, "tag": tag, "tau": tau.hex(), "rho": rho.hex(), "row_abs": row_abs.hex()})
