"""The Toeplitz strategies side by side with jax_privacy's: loss and wall time.

Needs jax_privacy, which is not a dependency of pure_dp_mf: run it in an environment of its own,

    python3 -m venv .bench-venv
    .bench-venv/bin/pip install 'jax[cpu]' jax-privacy -e .
    .bench-venv/bin/python benchmarks/bench_strategies.py --n 2000 10000 --participations 10

For each n, k participations and b = n/k, under fixed-epoch and min-sep participation, each
library optimizes its strategy for the mean loss (prefix sums), and both results are scored by
the same evaluator (``pure_dp_mf.gaussian.toeplitz``, exact for non-negative non-increasing
coefficients; jax_privacy's own ``toeplitz.minsep_sensitivity_squared`` and ``per_query_error``
are printed beside it as a cross-check). Loss = sens²·‖B‖_F² (total squared error at noise
multiplier 1). Times are wall seconds of one optimization each (jax: including compilation).

* banded Toeplitz with b bands: ours ``optimize_banded_toeplitz`` (the multi-participation loss,
  exact gradient, L-BFGS-B) against ``jax_privacy.matrix_factorization.toeplitz.optimize_banded_toeplitz``
  (which optimizes the single-participation mean loss; for bands ≤ b the two objectives differ
  only by the truncation of the last participations).
* BLT: ours at the best of 1…6 buffers against ``buffered_toeplitz.optimize`` (min-sep, mean
  error, its own choice of buffers up to 10).
* BISR: ours only (jax_privacy does not ship it).
* banded (column-normalized, b bands, n ≤ ``--banded-limit``): ours ``optimize_banded`` (exact
  gradient, L-BFGS-B, from the best banded Toeplitz) against ``banded.optimize`` (200 steps).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from pure_dp_mf.gaussian import toeplitz
from pure_dp_mf.gaussian.comparison import MAX_BUFFERS
from pure_dp_mf.gaussian.participation import participation_schema


def _timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[2000, 10000])
    parser.add_argument("--participations", type=int, default=10)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--banded-limit", type=int, default=2000, help="run the dense banded strategies up to this n")
    arguments = parser.parse_args()

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    from jax_privacy.matrix_factorization import banded as jax_banded
    from jax_privacy.matrix_factorization import buffered_toeplitz as jax_blt
    from jax_privacy.matrix_factorization import toeplitz as jax_toeplitz

    def jax_loss(coefficients: np.ndarray, n: int, k: int, b: int) -> float:
        coefficients = jnp.asarray(coefficients)
        sens2 = float(jax_toeplitz.minsep_sensitivity_squared(coefficients, min_sep=b, max_participations=k, n=n))
        errors = np.asarray(jax_toeplitz.per_query_error(strategy_coef=coefficients, n=n))
        return sens2 * float(errors.sum())

    rows = []
    print(
        f"{'n':>6} {'schema':>11} {'strategy':>16} {'ours loss':>14} {'theirs loss':>14} {'loss ratio':>10} "
        f"{'ours s':>8} {'theirs s':>9} {'time ratio':>10}  cross-check"
    )
    for n in arguments.n:
        k = arguments.participations
        b = n // k
        for name in ("fixed-epoch", "min-sep"):
            schema = participation_schema(name=name, max_participations=k, separation=b, n=n)

            ours, ours_time = _timed(lambda: toeplitz.optimize_banded_toeplitz(n=n, bands=b, schema=schema))
            theirs, theirs_time = _timed(lambda: np.asarray(jax_toeplitz.optimize_banded_toeplitz(n=n, bands=b)))
            theirs_strategy = toeplitz.ToeplitzStrategy(coefficients=theirs, n=n)
            theirs_loss = toeplitz._objective(theirs_strategy, schema, "mean")
            rows.append(
                (
                    "banded Toeplitz",
                    n,
                    name,
                    ours.loss,
                    theirs_loss,
                    ours_time,
                    theirs_time,
                    jax_loss(theirs, n, k, b) / theirs_loss,
                )
            )

            def our_blt():
                fits = [toeplitz.optimize_blt(n=n, buffers=m, schema=schema) for m in range(1, MAX_BUFFERS + 1)]
                return min(fits, key=lambda fit: fit.loss)

            ours_blt, ours_time = _timed(our_blt)
            theirs_blt, theirs_time = _timed(lambda: jax_blt.optimize(n=n, min_sep=b, max_participations=k, error="mean"))
            blt = toeplitz.BufferedToeplitz(decay=np.asarray(theirs_blt.buf_decay), scale=np.asarray(theirs_blt.output_scale))
            theirs_loss = toeplitz._objective(blt.strategy(n), schema, "mean")
            rows.append(
                (
                    "BLT",
                    n,
                    name,
                    ours_blt.loss,
                    theirs_loss,
                    ours_time,
                    theirs_time,
                    jax_loss(blt.coefficients(n), n, k, b) / theirs_loss,
                )
            )

            bisr, bisr_time = _timed(lambda: toeplitz.best_bisr(n=n, schema=schema))
            rows.append(("BISR", n, name, bisr.loss, float("nan"), bisr_time, float("nan"), float("nan")))
            shown = 3
            if n <= arguments.banded_limit:
                banded, ours_time = _timed(lambda: toeplitz.optimize_banded(n=n, bands=b, schema=schema))
                theirs_banded, theirs_time = _timed(lambda: jax_banded.optimize(n, bands=b, max_optimizer_steps=200))
                C = np.asarray(theirs_banded.materialize())
                theirs_loss = k * float(np.sum(np.linalg.solve(C.T, np.tri(n).T) ** 2))  # sens² = k (unit columns, p ≤ b)
                rows.append(("banded", n, name, banded.loss, theirs_loss, ours_time, theirs_time, float("nan")))
                shown = 4
            for strategy, n_, schema_name, a, t, ta, tt, check in rows[-shown:]:
                print(
                    f"{n_:>6} {schema_name:>11} {strategy:>16} {a:>14.6g} {t:>14.6g} {a / t:>10.7f} "
                    f"{ta:>8.2f} {tt:>9.2f} {ta / tt:>10.3f}  jax/ours evaluator {check:.9f}"
                )
    if arguments.json:
        keys = ("strategy", "n", "participation", "ours_loss", "theirs_loss", "ours_seconds", "theirs_seconds", "evaluator_ratio")
        with open(arguments.json, "w") as handle:
            json.dump([dict(zip(keys, row, strict=True)) for row in rows], handle, indent=1)


if __name__ == "__main__":
    main()
