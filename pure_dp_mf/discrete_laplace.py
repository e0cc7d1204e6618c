"""Exact discrete Laplace sampling on ℤ, in integer arithmetic only.

The distribution DLap(λ) with rate λ = s/t > 0 (s, t positive integers) is

    P(Y = y) = (1 − e^{−λ}) / (1 + e^{−λ}) · e^{−λ·|y|},   y ∈ ℤ,

with unbounded support. On the lattice 2^-g ℤ, w = 2^-g·Y with λ = ε·2^-g/Δ has
P(w) ∝ exp(−ε·|w|/Δ): the Laplace mechanism of sensitivity Δ on that lattice, exactly ε-DP for
lattice-valued queries (a neighbour shifts the query by a lattice vector of ℓ1 norm ≤ Δ, and
the density ratio of every output is at most e^ε; there is no float, no cut-off, no rounding).

The samplers follow Canonne, Kamath & Steinke, *The Discrete Gaussian for Differential
Privacy*, arXiv 2004.00010, Algorithms 1 and 2, with every random choice an exact uniform integer
``below(m)`` (rejection sampling on whole bits: no bias, no floats):

* ``bernoulli(numerator, denominator)``: P(1) = n/d exactly, as below(d) < n.
* ``bernoulli_exp_minus(gamma)``: P(1) = e^{−γ} for rational γ ≥ 0. For γ ∈ [0, 1] draw
  A_K ~ Bernoulli(γ/K) for K = 1, 2, … until the first 0 and return whether that K is odd:
  P(K = k is the first 0) = γ^{k−1}/(k−1)! − γ^k/k!, whose sum over odd k is Σ_j (−γ)^j/j! = e^{−γ}.
  For γ > 1, e^{−γ} = (e^{−1})^{⌊γ⌋}·e^{−(γ−⌊γ⌋)}: independent trials, all must succeed.
* ``discrete_laplace(s, t)``: U uniform on {0, …, t−1} kept with probability e^{−U/t}, and
  V ≥ 0 the number of successes of Bernoulli(e^{−1}) before the first failure (geometric,
  P(V = v) ∝ e^{−v}); then X = U + t·V has P(X = x) ∝ e^{−x/t} on ℕ (x ↦ (x mod t, ⌊x/t⌋) is a
  bijection and the two weights multiply). Y = ⌊X/s⌋ has P(Y = y) ∝ Σ_{x: ⌊x/s⌋ = y} e^{−x/t}
  ∝ e^{−y·s/t} on ℕ. A fair sign B, rejecting (B = 1, Y = 0) so that 0 is not counted twice,
  gives P(±y) ∝ e^{−λ|y|} on ℤ: exactly DLap(s/t).

Randomness: a ``UniformSource`` gives ``below(m)``. ``ShakeStream`` is the keyed stream of the
counter's noise: for a 32-byte key and a coordinate index, the SHAKE-256 output of
(domain, key, index) read as a bit string, so coordinate i's draws are a pure function of
(key, i): regenerated, never redrawn (computationally indistinguishable from true randomness
under the standard assumption that keyed SHAKE-256 is a PRF). ``SystemUniform`` uses the
operating system's generator (``secrets``) for tests of the samplers themselves.
"""

from __future__ import annotations

import hashlib
import secrets
from fractions import Fraction
from typing import Protocol

from pure_dp_mf.errors import InvalidInputError

DOMAIN = b"pure_dp_mf discrete laplace v1\x00"
_CHUNK = 64  # bytes of SHAKE output produced at a time


class UniformSource(Protocol):
    """Exact uniform integers: ``below(m)`` is uniform on {0, …, m − 1} for every integer m ≥ 1."""

    def below(self, m: int) -> int: ...


def _below_from_bits(m: int, bits) -> int:
    """Uniform on {0, …, m−1} by rejection: draw ⌈log₂ m⌉ bits until the number is < m."""
    if m < 1:
        raise InvalidInputError(f"a uniform draw needs m >= 1, got {m}")
    if m == 1:
        return 0
    width = (m - 1).bit_length()
    while True:
        value = bits(width)
        if value < m:
            return value


class ShakeStream:
    """The bit stream of one noise coordinate: SHAKE-256(domain ‖ key ‖ index), read in order.

    Guarantee: the sequence of ``below`` results is a deterministic function of (key, index) and
    the sequence of arguments, so a coordinate can be recomputed exactly; distinct indices (and
    keys) read disjoint PRF outputs."""

    def __init__(self, *, key: bytes, index: int) -> None:
        if not isinstance(key, bytes | bytearray) or len(key) < 16:
            raise InvalidInputError("a noise key must be at least 16 bytes")
        if index < 0:
            raise InvalidInputError(f"a coordinate index must be >= 0, got {index}")
        self._hash = hashlib.shake_256(DOMAIN + bytes(key) + index.to_bytes(16, "little"))
        self._buffer, self._produced, self._bit = b"", 0, 0  # bits consumed from the start
        self._value = 0

    def _bits(self, width: int) -> int:
        needed = self._bit + width
        if needed > 8 * len(self._buffer):
            size = max(len(self._buffer) + _CHUNK, (needed + 7) // 8)
            self._buffer = self._hash.digest(size)  # an XOF: a longer digest extends the shorter one
            self._value = int.from_bytes(self._buffer, "little")
        value = (self._value >> self._bit) & ((1 << width) - 1)
        self._bit = needed
        return value

    def below(self, m: int) -> int:
        return _below_from_bits(m, self._bits)


class SystemUniform:
    """Uniform integers from the operating system's generator (``secrets.randbelow``)."""

    def below(self, m: int) -> int:
        if m < 1:
            raise InvalidInputError(f"a uniform draw needs m >= 1, got {m}")
        return secrets.randbelow(m)


def bernoulli(numerator: int, denominator: int, *, source: UniformSource) -> bool:
    """True with probability numerator/denominator exactly (0 ≤ numerator ≤ denominator)."""
    if denominator < 1 or not 0 <= numerator <= denominator:
        raise InvalidInputError(f"a Bernoulli probability must be in [0, 1], got {numerator}/{denominator}")
    return source.below(denominator) < numerator


def bernoulli_exp_minus(gamma: Fraction, *, source: UniformSource) -> bool:
    """True with probability e^{−γ} exactly, γ ≥ 0 rational (module docstring for the proof)."""
    gamma = Fraction(gamma)
    if gamma < 0:
        raise InvalidInputError(f"bernoulli_exp_minus needs gamma >= 0, got {gamma}")
    whole = gamma.numerator // gamma.denominator
    for _ in range(whole):
        if not _bernoulli_exp_minus_unit(Fraction(1), source):
            return False
    return _bernoulli_exp_minus_unit(gamma - whole, source)


def _bernoulli_exp_minus_unit(gamma: Fraction, source: UniformSource) -> bool:
    """e^{−γ} for γ ∈ [0, 1]: the first K with A_K = 0, A_K ~ Bernoulli(γ/K), is odd."""
    k = 1
    while bernoulli(gamma.numerator, gamma.denominator * k, source=source):
        k += 1
    return k % 2 == 1


def discrete_laplace(*, s: int, t: int, source: UniformSource) -> int:
    """One draw of DLap(s/t): P(Y = y) ∝ e^{−|y|·s/t} on ℤ, exactly (Canonne–Kamath–Steinke,
    Algorithm 2; the proof is in the module docstring)."""
    if s < 1 or t < 1:
        raise InvalidInputError(f"the discrete Laplace rate s/t needs integers s, t >= 1, got {s}/{t}")
    while True:
        u = source.below(t)
        if not bernoulli_exp_minus(Fraction(u, t), source=source):
            continue
        v = 0
        while _bernoulli_exp_minus_unit(Fraction(1), source):
            v += 1
        y = (u + t * v) // s
        negative = source.below(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def lattice_rate(*, epsilon: Fraction, sensitivity: Fraction, grid_bits: int) -> tuple[int, int]:
    """(s, t) with s/t = ε·2^-g/Δ: the rate per lattice step of the ε-DP Laplace noise on 2^-g ℤ
    for ℓ1 sensitivity Δ. ε and Δ are taken exactly (a float ε is its exact dyadic value)."""
    epsilon, sensitivity = Fraction(epsilon), Fraction(sensitivity)
    if epsilon <= 0 or sensitivity <= 0:
        raise InvalidInputError(f"the lattice rate needs epsilon > 0 and sensitivity > 0, got {epsilon}, {sensitivity}")
    rate = epsilon / (sensitivity * (1 << grid_bits))
    return rate.numerator, rate.denominator


def pmf(y: int, *, s: int, t: int) -> float:
    """P(Y = y) of DLap(s/t) in float64 (for tests and plots, not for sampling)."""
    import math

    rate = s / t
    return (1 - math.exp(-rate)) / (1 + math.exp(-rate)) * math.exp(-rate * abs(y))
