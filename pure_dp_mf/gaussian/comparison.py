"""The comparison of Choquette-Choo et al., App. D.5 (Table 1, Fig. 1/4): every mechanism's loss for prefix sums
under (k,b)-participation, and the per-step noise variance.

Rows (each at its best number of stamps s, chosen by loss among ``stamps``):

* the optimizer's factorization for (k,b) (``gaussian.optimize``), s = 1;
* the single-epoch optimum MF(k=1, n/s) re-used under k participations, stamped s times
  (pseudo-inverse decoder);
* the FFT mechanism (B_F, C_F) and the FFT mechanism with the optimal decoder, stamped;
* the online Honaker tree with tree completion, with and without the noise of virtual steps,
  stamped by the restart construction; the full (pseudo-inverse) Honaker decoder, stamped;
* independent noise (C = I, B = A): DP-SGD without amplification, sens² = k;
* the Toeplitz strategies (``toeplitz.py``), each optimized for the schema and the loss: banded
  Toeplitz with b bands, BLT at its best number of buffers (1 to ``MAX_BUFFERS``), BISR at its
  best number of bands. They are O(n) to evaluate and run alone at n = 10⁵ (``dense=False``);
  up to n = ``BANDED_LIMIT`` also the column-normalized banded strategy with b bands.

``participation`` names the schema: "fixed-epoch" (exactly b = n/k apart, the paper's) or
"min-sep" (at most k participations, any two ≥ b apart). The dense optimizer optimizes for
fixed-epoch participation; under "min-sep" its factorization is evaluated as it is.

Every encoder is normalised to sensitivity 1 and the run is one Gaussian mechanism, so at a
given noise multiplier z every row has the same (ε, δ) and differs only in error:
total squared error = z²·loss, RMSE = z·√(loss/n), loss = ‖B‖_F²·sens². The sensitivity
method of each row is reported: ``nonnegative`` (exact, X ≥ 0) or ``upper-bound``
(k·λ_max, sound for vector contributions; used for the FFT encoder whose X has negative
entries on the participation pairs in general).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.workloads import prefix_sum
from pure_dp_mf.gaussian import toeplitz
from pure_dp_mf.gaussian.fft import FFTMechanism, FFTOptimalDecoderMechanism
from pure_dp_mf.gaussian.honaker import HonakerMechanism
from pure_dp_mf.gaussian.optimize import optimize
from pure_dp_mf.gaussian.participation import Participation, participation_schema
from pure_dp_mf.gaussian.stamping import DenseMechanism, GaussianMechanism, Loss, best_stamps, evaluate
from pure_dp_mf.validation import check_size


@dataclass
class Row:
    """One line of the table: the best stamped member of a family, its loss and the losses of every s."""

    family: str
    mechanism: GaussianMechanism
    loss: Loss
    stamps: int
    losses_by_stamps: dict[int, float] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self, *, noise_multiplier: float | None = None) -> dict:
        record = {
            "family": self.family,
            "mechanism": self.loss.name,
            "stamps": self.stamps,
            "decoder_frobenius_squared": self.loss.decoder_frobenius_squared,
            "sensitivity_squared": self.loss.sensitivity_squared,
            "sensitivity_method": self.loss.sensitivity_method,
            "loss": self.loss.loss,
            "rmse_unit_noise": self.loss.rmse,
            "losses_by_stamps": {str(s): v for s, v in self.losses_by_stamps.items()},
            "seconds": self.seconds,
            "parameters": getattr(self.mechanism, "parameters", {}),
        }
        if noise_multiplier is not None:
            record["rmse"] = noise_multiplier * self.loss.rmse
        return record

    def step_variance(self) -> np.ndarray:
        """Per-step noise variance at noise multiplier 1 (sensitivity-normalised): diag(B·Bᵀ)·sens²."""
        return np.asarray(self.mechanism.per_step_variance()) * self.loss.sensitivity_squared


def default_stamps(*, max_participations: int) -> list[int]:
    """The divisors of k (Choquette-Choo et al. sweeps s ∈ {1, 2, 5, 10, 20} for k = 20)."""
    return [s for s in range(1, max_participations + 1) if max_participations % s == 0]


def _optimize(n: int, k: int, b: int) -> DenseMechanism:

    result = optimize(workload=prefix_sum(n), max_participations=k, min_sep=b)
    return DenseMechanism(decoder=result.decoder, encoder=result.encoder, name=f"optimal MF(k={k})")


MAX_BUFFERS = 6
DENSE_LIMIT = toeplitz.DENSE_LIMIT  # the dense mechanisms (n×n matrices, the optimizer O(n³)) up to this n
BANDED_LIMIT = 1024  # the column-normalized banded optimizer is O(n²·b) per step: in the table up to this n


def _family(
    name: str, make: Callable[[int], GaussianMechanism], n: int, stamps: Iterable[int], k: int, b: int, participation: str
) -> Row:
    start = time.perf_counter()
    stamps = [s for s in stamps if n % s == 0]
    mechanism, loss, losses = best_stamps(make, n=n, stamps=stamps, max_participations=k, min_sep=b, participation=participation)
    return Row(
        name, mechanism, loss, mechanism.stamps, {s: result.loss for s, result in losses.items()}, time.perf_counter() - start
    )


def compare(
    *,
    n: int,
    max_participations: int,
    stamps: Iterable[int] | None = None,
    include_optimizer: bool = True,
    progress: Callable[[str], None] | None = None,
    participation: str = "fixed-epoch",
    dense: bool = True,
    strategies: bool = True,
) -> list[Row]:
    """All rows of the comparison for prefix sums on n = k·b steps (see the module docstring):
    the dense mechanisms unless ``dense`` is False, the Toeplitz strategies unless
    ``strategies`` is False."""
    n = check_size(n, name="n", maximum=toeplitz.MAX_STEPS)
    if dense and n > DENSE_LIMIT:
        raise InvalidInputError(
            f"n = {n}: the dense mechanisms (n×n matrices) are compared up to n = {DENSE_LIMIT}; "
            "beyond it compare the Toeplitz strategies alone (dense=False, --no-dense)"
        )
    k = check_size(max_participations, name="max_participations", maximum=n)
    if n % k:
        raise InvalidInputError(f"n = {n} is not a multiple of max_participations = {k}")
    schema = Participation(max_participations=k, min_sep=n // k, n=n)  # checks k ≤ n/b
    k, b = schema.max_participations, schema.min_sep
    stamps = default_stamps(max_participations=k) if stamps is None else sorted(set(stamps))
    say = progress or (lambda message: None)

    def single_epoch(m: int) -> GaussianMechanism:

        result = optimize(workload=prefix_sum(m), max_participations=1, min_sep=m)
        return DenseMechanism(decoder=result.decoder, encoder=result.encoder, name=f"MF(k=1, n={m})")

    families: list[tuple[str, Callable[[int], GaussianMechanism], list[int]]] = [
        ("FFT", FFTMechanism, stamps),
        ("FFT, optimal decoder", FFTOptimalDecoderMechanism, stamps),
        ("Honaker + completion", lambda m: HonakerMechanism(m, "completion"), stamps),
        ("Honaker + completion, virtual noise removed", lambda m: HonakerMechanism(m, "completion-virtual-removed"), stamps),
        ("Honaker full (pseudo-inverse)", lambda m: HonakerMechanism(m, "full"), stamps),
    ]
    if include_optimizer:
        families.insert(0, ("single-epoch optimum MF(k=1)", single_epoch, stamps))
        families.insert(0, (f"optimal MF(k={k}, b={b})", lambda m: _optimize(m, k, b), [1]))
    rows = []
    if dense:
        for name, make, candidates in families:
            say(name)
            rows.append(_family(name, make, n, candidates, k, b, participation))
        say("independent noise")
        start = time.perf_counter()
        independent = DenseMechanism(
            decoder=prefix_sum(n), encoder=np.eye(n), name="independent noise (DP-SGD, no amplification)"
        )
        loss = evaluate(independent, max_participations=k, min_sep=b, participation=participation)
        rows.append(Row("independent noise", independent, loss, 1, {1: loss.loss}, time.perf_counter() - start))
    if strategies:
        rows += strategy_rows(n=n, max_participations=k, participation=participation, progress=say)
    return rows


def strategy_rows(
    *, n: int, max_participations: int, participation: str = "fixed-epoch", progress: Callable[[str], None] | None = None
) -> list[Row]:
    """The Toeplitz strategies' rows, each optimized for the loss ‖B‖_F²·sens² under the schema."""
    n = check_size(n, name="n", maximum=toeplitz.MAX_STEPS)
    k = check_size(max_participations, name="max_participations", maximum=n)
    b = n // k
    schema = participation_schema(name=participation, max_participations=k, separation=b, n=n)
    say = progress or (lambda message: None)
    fits: list[tuple[str, toeplitz.StrategyFit]] = []
    say("banded Toeplitz")
    fits.append(("banded Toeplitz", toeplitz.optimize_banded_toeplitz(n=n, bands=b, schema=schema)))
    say("BLT")
    start = time.perf_counter()
    blts = [toeplitz.optimize_blt(n=n, buffers=m, schema=schema) for m in range(1, MAX_BUFFERS + 1)]
    best = min(blts, key=lambda fit: fit.loss)
    fits.append(("BLT", toeplitz.StrategyFit(best.strategy, best.loss, best.iterations, time.perf_counter() - start)))
    say("BISR")
    fits.append(("BISR", toeplitz.best_bisr(n=n, schema=schema)))
    if n <= BANDED_LIMIT:
        say("banded")
        fits.append(("banded", toeplitz.optimize_banded(n=n, bands=b, schema=schema)))  # type: ignore[arg-type]
    rows = []
    for family, fit in fits:
        loss = evaluate(fit.strategy, max_participations=k, min_sep=b, participation=participation)
        rows.append(Row(family, fit.strategy, loss, 1, {1: loss.loss}, fit.seconds))
    return rows


def plot_step_variance(rows: list[Row], path: str, *, noise_multiplier: float = 1.0, title: str = "") -> None:
    """Per-step noise variance z²·diag(B·Bᵀ)·sens² of every row (Choquette-Choo et al. Fig. 1/4), log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    colors = {id(row): f"C{i % 10}" for i, row in enumerate(rows)}
    for row in sorted(rows, key=lambda row: -row.loss.loss):  # lowest loss drawn last, on top
        axis.plot(
            np.arange(1, row.mechanism.n + 1),
            noise_multiplier**2 * row.step_variance(),
            label=row.loss.name,
            linewidth=0.8,
            alpha=0.85,
            color=colors[id(row)],
        )
    axis.set_yscale("log")
    axis.set_xlabel("step")
    axis.set_ylabel("noise variance of the released prefix sum")
    axis.set_title(title)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
