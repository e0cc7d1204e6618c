"""The certifier's decoder bound with ``fractions.Fraction`` matrices and plain loops.

A slow, obvious implementation of ``certify``'s steps 3-8 (residual Δ̃ = L̃R̃ − T, G = Δ̃·T⁻¹,
ρ, E₁ = −G·L̃, L̂ = L̃ + E₁, norms, upper square roots), used by the tests to check the fast
flint/gmpy2 route exactly and by ``benchmarks/bench_certify.py`` as the baseline.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def sqrt_upper(value: Fraction, bits: int = 128) -> Fraction:
    target = -(-value.numerator * 4**bits // value.denominator)
    root = math.isqrt(target)
    return Fraction(root + (root * root < target), 2**bits)


def fraction_decoder_bound(encoder: np.ndarray, decoder: np.ndarray, *, grid_bits: int, metric: str) -> Fraction:
    """The certifier's steps 3-8 with Fraction matrices and plain loops (the slow baseline)."""
    n = encoder.shape[0]
    unit = Fraction(1, 2**grid_bits)
    R = [[Fraction(int(v)) * unit for v in row] for row in np.rint(np.ldexp(encoder, grid_bits))]
    L = [[Fraction(int(v)) * unit for v in row] for row in np.rint(np.ldexp(decoder, grid_bits))]
    columns = list(zip(*R))
    residual = [[sum(a * b for a, b in zip(L[i], columns[j])) - (1 if j <= i else 0) for j in range(n)] for i in range(n)]
    G = [[row[j] - (row[j + 1] if j + 1 < n else 0) for j in range(n)] for row in residual]
    if metric == "maxse":
        rho = max(sum(abs(v) for v in row) for row in G)
    else:
        rho = sqrt_upper(max(sum(abs(v) for v in row) for row in G) * max(sum(abs(v) for v in col) for col in zip(*G)))
    assert rho < 1, "series does not converge"
    L_columns = list(zip(*L))
    first = [[-sum(a * b for a, b in zip(G[i], L_columns[j])) for j in range(n)] for i in range(n)]
    second = [[a + b for a, b in zip(L[i], first[i])] for i in range(n)]
    combine = max if metric == "maxse" else sum
    approximate = sqrt_upper(combine(sum(v * v for v in row) for row in second))
    correction = sqrt_upper(combine(sum(v * v for v in row) for row in first))
    return approximate + rho * correction / (1 - rho)
