"""Benchmark: the exact rounding of values the float route cannot decide, by integer refinement
(``ExactDecoder.refine``) against the exact solve it replaced (``ExactDecoder.exact_rows``).

    .venv/bin/python benchmarks/bench_exact_fallback.py [--sizes 256 1024 2048] [--bits 40 60 94]
    .venv/bin/python benchmarks/bench_exact_fallback.py --quick     # k = 256 only: seconds

For each shipped base k and noise magnitude |Y| ≈ 2^bits (60: an anytime count at m = 10⁶; 94:
at m = 10¹⁸), one noise block Y: the time to decide ⌊2^-g·(L·Y)_row + ½⌋ for every row by
refinement steps (the first interval, then steps until no row is undecided; rows still undecided
after ``REFINEMENTS`` steps would go to the solve and are counted), and the time of one exact
solve P·u = Y (FLINT), skipped above ``--solve-limit`` (minutes at k = 2048). Both answers are
compared row by row where both ran; the ratio is solve / refinement. One BLAS thread.
"""

from __future__ import annotations

import argparse
import os
import time
from fractions import Fraction

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import numpy as np  # noqa: E402

from pure_dp_mf.factorizations.factorization import Factorization  # noqa: E402
from pure_dp_mf.mechanisms.mechanism import exact_decoder  # noqa: E402
from pure_dp_mf.release.lattice import REFINEMENTS, round_half_up  # noqa: E402
from pure_dp_mf.resources import BASE_FOLDER  # noqa: E402


def refined_roundings(atoms, Y: list[int]) -> tuple[list[int | None], int]:
    """Every row's rounding by refinement (None where still undecided), and the steps taken."""
    state = atoms.refinement(Y)
    out: list[int | None] = [None] * len(Y)
    while True:
        for row, known in enumerate(out):
            if known is None:
                centre = Fraction(state.numerators[row], 1 << state.exponent)
                low, high = round_half_up(centre - state.radius), round_half_up(centre + state.radius)
                if low == high:
                    out[row] = low
        if all(v is not None for v in out) or state.steps >= REFINEMENTS or not state.radius:
            return out, state.steps
        state = atoms.refine(state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--bits", type=int, nargs="+", default=[40, 60, 94])
    parser.add_argument("--solve-limit", type=int, default=1024, help="largest k whose exact solve is timed")
    parser.add_argument("--quick", action="store_true", help="k = 256 only")
    options = parser.parse_args()
    sizes = [256] if options.quick else options.sizes
    print(f"{'k':>5} {'bits':>5} {'refine s':>9} {'steps':>5} {'undecided':>9} {'solve s':>8} {'ratio':>7}  agree")
    for k in sizes:
        atoms = exact_decoder(Factorization.load(BASE_FOLDER / f"k{k:03d}_maxse.npz"))
        atoms.refinement([0] * k)  # the split matrices, once per process (not timed)
        rng = np.random.default_rng(k)
        for bits in options.bits:
            Y = [int(v) << max(bits - 62, 0) for v in rng.integers(-(2 ** min(bits, 62)), 2 ** min(bits, 62), k)]
            start = time.perf_counter()
            refined, steps = refined_roundings(atoms, Y)
            refine_time = time.perf_counter() - start
            undecided = sum(v is None for v in refined)
            solve_time, agree = float("nan"), "-"
            if k <= options.solve_limit:
                start = time.perf_counter()
                numerators, denominator = atoms.exact_rows(Y)
                solve_time = time.perf_counter() - start
                exact = [round_half_up(Fraction(n, denominator)) for n in numerators]
                agree = str(all(v is None or v == e for v, e in zip(refined, exact, strict=True)))
            print(
                f"{k:>5} {bits:>5} {refine_time:>9.3f} {steps:>5} {undecided:>9} {solve_time:>8.2f} "
                f"{solve_time / refine_time:>7.0f}  {agree}"
            )


if __name__ == "__main__":
    main()
