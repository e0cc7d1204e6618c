"""The comparison table of paper 001 (Table 1) at a given n and ε, and its plot against n.

``comparison_rows(n=, epsilon=)`` lists every tree mechanism of ``trees.MECHANISMS`` with its
exact finite-n MaxSE and MeanSE (from ``trees.tree_costs``) and the leading constants
MaxSE·ε²/log₂(n)³ and MeanSE·ε²/log₂(n)³ (DESIGN.md), sorted by error. Mechanisms with an arity
appear with the best arity for MaxSE and the best arity for MeanSE (one row when they agree).

The lifted factorization mechanism (``lifted_rows``, best shipped base per metric) is in the
default table. Other mechanisms join it through row providers: any callable
``provider(*, n, epsilon)`` returning ``ComparisonRow`` objects, passed in ``providers=`` or
registered once with ``register_row_provider``.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from pure_dp_mf import trees
from pure_dp_mf.atomic import atomic_write_bytes
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_positive, check_size

SORT_KEYS = ("maxse", "meanse")


@dataclass(frozen=True)
class ComparisonRow:
    """One mechanism at one (n, ε): errors and leading constants (NaN constants for n = 1).

    ``best_for`` names the metrics for which ``arity`` was chosen (empty when there is no arity
    or it was given); ``source`` says where the numbers come from (e.g. "closed form").
    """

    mechanism: str
    arity: int | None
    best_for: tuple[str, ...]
    n: int
    epsilon: float
    max_se: float
    mean_se: float
    max_se_constant: float
    mean_se_constant: float
    source: str = "closed form"

    @classmethod
    def from_errors(
        cls, *, mechanism: str, arity: int | None, n: int, epsilon: float, max_se: float, mean_se: float,
        best_for: tuple[str, ...] = (), source: str = "closed form",
    ) -> "ComparisonRow":
        """A row from MaxSE and MeanSE at ε; the leading constants are derived here."""
        def constant(error: float) -> float:
            return error * epsilon**2 / math.log2(n) ** 3 if n >= 2 else math.nan

        return cls(mechanism, arity, tuple(best_for), n, epsilon, max_se, mean_se, constant(max_se), constant(mean_se), source)

    def as_dict(self) -> dict:
        record = asdict(self)
        record["best_for"] = list(self.best_for)
        return record


RowProvider = Callable[..., Iterable[ComparisonRow]]


def tree_rows(*, n: int, epsilon: float = 1.0) -> list[ComparisonRow]:
    """Rows of the five tree mechanisms (best arity per metric), exact closed-form errors."""
    rows = []
    for mechanism in trees.MECHANISMS:
        if mechanism in trees.ARITY_MECHANISMS:
            chosen: dict[int, list[str]] = {}
            for metric in trees.METRICS:
                chosen.setdefault(trees.best_arity(mechanism=mechanism, n=n, metric=metric), []).append(metric)
            choices = [(arity, tuple(metrics)) for arity, metrics in chosen.items()]
        else:
            choices = [(None, ())]
        for arity, best_for in choices:
            costs = trees.tree_costs(mechanism=mechanism, n=n, arity=arity)
            rows.append(
                ComparisonRow.from_errors(
                    mechanism=mechanism, arity=arity, best_for=best_for, n=n, epsilon=epsilon,
                    max_se=costs.max_se(epsilon=epsilon), mean_se=costs.mean_se(epsilon=epsilon),
                )
            )
    return rows


def lifted_rows(*, n: int, epsilon: float = 1.0) -> list[ComparisonRow]:
    """Rows of the lifted factorization mechanism (paper 001, Theorem 2.5): for each metric, the
    shipped base in ``base_factorizations/`` whose lift has the least error at n (``lift.py``)."""
    from pure_dp_mf.lift import lifted_comparison_rows  # lift.py builds ComparisonRow: import late

    return lifted_comparison_rows(n=n, epsilon=epsilon)


_REGISTERED: list[RowProvider] = [tree_rows, lifted_rows]


def register_row_provider(provider: RowProvider) -> None:
    """Add ``provider(*, n, epsilon) -> rows`` to the default table (idempotent)."""
    if provider not in _REGISTERED:
        _REGISTERED.append(provider)


def comparison_rows(
    *, n: int, epsilon: float = 1.0, providers: Sequence[RowProvider] | None = None, sort_by: str = "maxse"
) -> list[ComparisonRow]:
    """All rows at (n, ε), sorted by MaxSE (``sort_by="maxse"``) or MeanSE, then by the other."""
    n = check_size(n, name="n")
    epsilon = check_positive(epsilon, name="epsilon")
    if sort_by not in SORT_KEYS:
        raise InvalidInputError(f"unknown sort key {sort_by!r}; expected one of {SORT_KEYS}")
    rows = [row for provider in (_REGISTERED if providers is None else providers) for row in provider(n=n, epsilon=epsilon)]
    first, second = ("max_se", "mean_se") if sort_by == "maxse" else ("mean_se", "max_se")
    return sorted(rows, key=lambda row: (getattr(row, first), getattr(row, second), row.mechanism))


def leading_constant_series(
    *, exponents: Iterable[int] = range(4, 41), providers: Sequence[RowProvider] | None = None
) -> dict[str, list[tuple[int, float, float]]]:
    """{label: [(log₂ n, MaxSE constant, MeanSE constant)]} for n = 2^e, best arity per metric.

    An arity mechanism's MaxSE constant is taken at its best MaxSE arity and its MeanSE constant
    at its best MeanSE arity (as in Table 1).
    """
    series: dict[str, list[tuple[int, float, float]]] = {}
    for exponent in exponents:
        exponent = check_size(exponent, name="exponent")
        best: dict[str, list[float]] = {}
        for row in comparison_rows(n=1 << exponent, providers=providers):
            entry = best.setdefault(row.mechanism, [math.inf, math.inf])
            entry[0] = min(entry[0], row.max_se_constant)
            entry[1] = min(entry[1], row.mean_se_constant)
        for mechanism, (max_constant, mean_constant) in best.items():
            series.setdefault(mechanism, []).append((exponent, max_constant, mean_constant))
    order = {name: position for position, name in enumerate(trees.MECHANISMS)}
    return dict(sorted(series.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))


def plot_leading_constants(
    *, path: str | os.PathLike, exponents: Iterable[int] = range(4, 41), providers: Sequence[RowProvider] | None = None
) -> Path:
    """Write a PNG of MaxSE·ε²/log₂(n)³ and MeanSE·ε²/log₂(n)³ against n = 2^e (one panel each).

    Dashed lines: the n → ∞ constants of paper 001's Table 1. The file is written atomically.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    if not path.parent.exists():
        raise InvalidInputError(f"cannot write {path}: folder {path.parent} does not exist")
    series = leading_constant_series(exponents=list(exponents), providers=providers)
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for position, (mechanism, points) in enumerate(series.items()):
        colour = colours[position % len(colours)]
        for panel, axis in enumerate(axes):
            axis.plot([p[0] for p in points], [p[1 + panel] for p in points], marker=".", color=colour, label=mechanism)
            limit = trees.TABLE1_CONSTANTS.get(mechanism)
            if limit is not None:
                axis.axhline(limit[panel], color=colour, linestyle="--", linewidth=0.8)
    for axis, title in zip(axes, ("MaxSE·ε²/log₂(n)³", "MeanSE·ε²/log₂(n)³")):
        axis.set_title(title)
        axis.set_xlabel("log₂ n")
        axis.set_yscale("log")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("leading constant (dashed: paper 001 Table 1, n → ∞)")
    axes[1].legend(fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())
    return path
