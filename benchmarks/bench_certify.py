"""Certify + verify speed: the flint/gmpy2 route against fractions.Fraction, side by side.

Run:  .venv/bin/python benchmarks/bench_certify.py [--sizes 128 256 1024] [--baseline-sizes 128 256]
      [--repeats 3]

For each k it builds the synthetic near-factorization R = L = Toeplitz square root of T_k
(coefficients binom(2j, j)/4^j), certifies it (maxse; the encoder is rounded to 2^-32), verifies
the certificate, and prints median wall times. For the baseline sizes it also runs the same
certifier steps (residual, G = Δ̃·T_k⁻¹, ρ, E₁ = −G·L̃, L̂, norms, square roots) with
``fractions.Fraction`` matrices and plain loops, checks that both give the identical decoder
bound, and prints the ratio. Target: certify + verify at k = 2048 under 30 s on 2 cores
(set PURE_DP_MF_FLINT_THREADS=1 to compare with one FLINT thread).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pure_dp_mf import exact
from pure_dp_mf.certificates.certify import certify_factorization, verify_certificate
from pure_dp_mf.factorizations.factorization import Factorization, decoder_from_encoder
from pure_dp_mf.factorizations.workloads import toeplitz_square_root

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fraction_certifier import fraction_decoder_bound  # noqa: E402  (the slow reference lives with the tests)


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
