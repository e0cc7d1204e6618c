"""Benchmarks for the Gaussian mechanisms of Choquette-Choo et al. (run: .venv/bin/python benchmarks/bench_fft.py).

1. The FFT mechanism with the optimal decoder B_opt = A·C_F⁺: the fast path (conjugate-gradient
   setup + Gohberg–Semencul solves, O(n log n) per noise column) side by side with the dense
   pseudo-inverse A·pinv(C_F) at sizes where the dense one still fits, then the fast path alone at
   n = 10^4 (Choquette-Choo et al.: 146 minutes on a V100 with a pseudo-inverse; target here < 60 s on CPU).
   Medians of ``--repeats`` runs.
2. The comparison table of Choquette-Choo et al. App. D.5 for (k, b) = (20, 100), n = 2000, with the wall time
   of each row. The optimizer rows (O(n³) per dual iteration, hundreds of iterations) are run at a
   reduced size (``--optimizer-n``) unless ``--optimizer-full`` is given.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from pure_dp_mf.gaussian.comparison import compare
from pure_dp_mf.gaussian.fft import FFTOptimalDecoderMechanism


def median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fast_vs_dense(sizes, large: int, columns: int, repeats: int) -> None:
    print(f"FFT optimal decoder: fast path vs dense pseudo-inverse (noise for {columns} columns, median of {repeats})")
    print(
        f"{'n':>7} {'dense pinv s':>13} {'fast setup s':>13} {'fast noise s':>13} {'speed-up':>9} {'max |diff|':>11} {'residual':>9}"
    )
    rng = np.random.default_rng(0)
    for n in list(sizes) + [large]:
        z = rng.standard_normal((2 * n, columns))
        holder = {}

        def setup():
            holder["m"] = FFTOptimalDecoderMechanism(n)

        setup_seconds = median_seconds(setup, repeats)
        mechanism = holder["m"]
        noise_seconds = median_seconds(lambda: holder.__setitem__("noise", mechanism.decode(z)), repeats)
        if n in sizes:

            def dense():
                C = mechanism.dense_encoder()
                holder["dense"] = np.tri(n) @ (np.linalg.pinv(C) @ z)

            dense_seconds = median_seconds(dense, 1)
            difference = float(np.max(np.abs(holder["dense"] - holder["noise"])))
            speedup = f"{dense_seconds / (setup_seconds + noise_seconds):9.0f}"
            dense_text = f"{dense_seconds:13.3f}"
            diff_text = f"{difference:11.2e}"
        else:
            dense_text, speedup, diff_text = f"{'(too big)':>13}", f"{'-':>9}", f"{'-':>11}"
        print(
            f"{n:7d} {dense_text} {setup_seconds:13.3f} {noise_seconds:13.3f} {speedup} {diff_text} {mechanism.last_residual:9.1e}"
        )
    m = FFTOptimalDecoderMechanism(large)
    seconds = median_seconds(m.decoder_frobenius_squared, repeats)
    print(
        f"n = {large}: loss ‖B_opt‖_F² = {m.decoder_frobenius_squared():.6g} in {seconds:.4f} s "
        f"(FFT ‖B_F‖_F² = {m.fft.decoder_frobenius_squared():.6g}); CG setup {m.inverse.setup_iterations} iterations, "
        f"residual {m.inverse.setup_residual:.1e}\n"
    )


def table(n: int, k: int, include_optimizer: bool) -> None:
    start = time.perf_counter()
    rows = compare(n=n, max_participations=k, include_optimizer=include_optimizer)
    total = time.perf_counter() - start
    print(f"comparison table, n = {n}, (k, b) = ({k}, {n // k}), total {total:.1f} s")
    print(f"{'mechanism':50s} {'s':>3} {'sens²':>10} {'method':>12} {'‖B‖_F²':>12} {'loss':>14} {'RMSE':>8} {'seconds':>8}")
    for row in rows:
        loss = row.loss
        print(
            f"{loss.name:50s} {row.stamps:3d} {loss.sensitivity_squared:10.4f} {loss.sensitivity_method:>12} "
            f"{loss.decoder_frobenius_squared:12.2f} {loss.loss:14.1f} {loss.rmse:8.3f} {row.seconds:8.2f}"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--columns", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dense-sizes", type=int, nargs="*", default=[500, 1000, 2000])
    parser.add_argument("--table-n", type=int, default=2000)
    parser.add_argument("--participations", type=int, default=20)
    parser.add_argument("--optimizer-n", type=int, default=200)
    parser.add_argument("--optimizer-full", action="store_true", help="run the optimizer rows at --table-n (hours on 2 cores)")
    arguments = parser.parse_args()
    fast_vs_dense(arguments.dense_sizes, arguments.large, arguments.columns, arguments.repeats)
    table(arguments.table_n, arguments.participations, arguments.optimizer_full)
    if not arguments.optimizer_full:
        table(arguments.optimizer_n, arguments.participations, True)


if __name__ == "__main__":
    main()
