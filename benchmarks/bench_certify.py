"""Certify + verify speed (issue 5): the flint/gmpy2 route against fractions.Fraction.

Run:  .venv/bin/python benchmarks/bench_certify.py [--sizes 128 256 1024] [--baseline-sizes 128 256]
      [--repeats 3]

For each k it builds the synthetic near-factorization R = L = Toeplitz square root of T_k
(coefficients binom(2j, j)/4^j), certifies it (maxse; the encoder is rounded to 2^-32), verifies
the certificate, and prints median wall times. For the baseline sizes it also runs the same
certifier steps (residual, G = Δ̃·T_k⁻¹, ρ, E₁ = −G·L̃, L̂, norms, square roots) with
``fractions.Fraction`` matrices and plain loops, checks that both give the identical decoder
bound, and prints the ratio. Target: certify + verify at k = 1024 under 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from pure_dp_mf import exact
from pure_dp_mf.certify import certify_factorization, verify_certificate
from pure_dp_mf.factorization import Factorization, decoder_from_encoder
from pure_dp_mf.workloads import toeplitz_square_root


def _sqrt_upper(value: Fraction, bits: int = 128) -> Fraction:
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
        rho = _sqrt_upper(max(sum(abs(v) for v in row) for row in G) * max(sum(abs(v) for v in col) for col in zip(*G)))
    assert rho < 1, "series does not converge"
    L_columns = list(zip(*L))
    first = [[-sum(a * b for a, b in zip(G[i], L_columns[j])) for j in range(n)] for i in range(n)]
    second = [[a + b for a, b in zip(L[i], first[i])] for i in range(n)]
    combine = max if metric == "maxse" else sum
    approximate = _sqrt_upper(combine(sum(v * v for v in row) for row in second))
    correction = _sqrt_upper(combine(sum(v * v for v in row) for row in first))
    return approximate + rho * correction / (1 - rho)


def _median_time(function, repeats: int):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 1024])
    parser.add_argument("--baseline-sizes", type=int, nargs="*", default=[128, 256])
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    print(f"{'k':>6} {'certify s':>10} {'verify s':>9} {'total s':>8} {'Fraction s':>11} {'ratio':>8}  bound agrees")
    with tempfile.TemporaryDirectory() as folder:
        for k in arguments.sizes:
            source = Path(folder) / f"sqrt{k}.npz"
            R = toeplitz_square_root(k)
            Factorization(decoder=R, encoder=R, metadata={"metric": "maxse"}).save(source, store_decoder=False)
            out = Path(folder) / f"sqrt{k}.json"
            certify_s, certificate = _median_time(lambda: certify_factorization(path=source, out=out), arguments.repeats)
            verify_s, _ = _median_time(lambda: verify_certificate(path=out), arguments.repeats)
            line = f"{k:>6} {certify_s:>10.2f} {verify_s:>9.2f} {certify_s + verify_s:>8.2f}"
            if k in arguments.baseline_sizes:
                rounded = exact.round_to_grid(R, grid_bits=32)[0]
                decoder = decoder_from_encoder(rounded)
                baseline_s, bound = _median_time(
                    lambda: fraction_decoder_bound(rounded, decoder, grid_bits=32, metric="maxse"), 1
                )
                agrees = bound == certificate.certifier_record["decoder_norm"].value
                line += f" {baseline_s:>11.1f} {baseline_s / certify_s:>7.0f}x  {agrees}"
            print(line, flush=True)
    print(f"python {sys.version.split()[0]}; medians of {arguments.repeats} runs (Fraction baseline: 1 run)")


if __name__ == "__main__":
    main()
