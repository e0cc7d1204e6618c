"""Tables and figures of the reproduction report (Arkhipov & Kalinin, Tables 1–2; Choquette-Choo et al., App. D.5).

This module computes nothing the other modules already compute; it adds the few quantities the
report needs that no other module exposes, each tested against a slow, obvious implementation:

* ``tree_limit_constants``: the n → ∞ leading constants of a tree mechanism at one arity, from
  the library's own exact finite-n costs (``trees.tree_costs``) on full trees of consecutive
  heights, never from typed formulas (Arkhipov & Kalinin, Table 1 and App. C);
* ``best_tree_limits``: their minimum over the arity (Table 1 uses the best arity per metric);

and renders tables (``Table``: markdown for the report, rows for rich) and every matplotlib figure
of the package (``plot_table2``, ``plot_step_noise_std``, ``plot_leading_constants``,
``plot_constant_curve``, ``plot_lift_against_trees``, ``plot_tree_ratios``), written atomically
as PNG. The papers' printed numbers come from ``published`` and are only shown *beside* ours.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from pure_dp_mf import published
from pure_dp_mf.atomic import atomic_write_bytes, check_writable_file
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import METRICS, Factorization
from pure_dp_mf.mechanisms import lift, lower_bounds, trees
from pure_dp_mf.mechanisms import planner as compare
from pure_dp_mf.validation import check_size

PRINTED_DIGITS = 4
"""Table 1 and 2 print 4 decimals: a value agrees with a printed one within half a unit (5e-5)."""

SMOOTH_LIMIT_HEIGHT = 120
"""Half-height h of the full smooth binary trees (height 2h) used for its limit (error ~1/h²)."""


def agrees_with_printed(value: float, printed: float, *, digits: int = PRINTED_DIGITS) -> bool:
    """True when ``value`` rounds to ``printed`` at ``digits`` decimals (|value − printed| ≤ ½·10^-digits)."""
    return abs(value - printed) <= 0.5 * 10.0**-digits + 1e-12


def status_against_published(ours: float, published: float) -> str:
    """ "reproduced" (agrees at the printed precision), "better" (smaller) or "not yet" (larger)."""
    if agrees_with_printed(ours, published):
        return "reproduced"
    return "better" if ours < published else "not yet"


# ------------------------------------------------------------------------ tree limits (Table 1)


def _full_size(mechanism: str, arity: int, height: int) -> int:
    """The n of the full tree with ``height`` levels (every level used by the last row)."""
    if mechanism in ("binary", "kary"):
        return arity**height - 1  # the largest t with `height` base-k digits
    if mechanism == "kary-subtraction":
        a = (arity - 1) // 2  # the largest t with `height` balanced digits
        return (arity - 1 - a) * (arity**height - 1) // (arity - 1)
    if mechanism == "averaged-kary-subtraction":
        return arity**height
    return math.comb(2 * height, height) - 1  # smooth binary: all weight-h leaves of height 2h


def tree_limit_constants(*, mechanism: str, arity: int | None = None) -> tuple[float, float]:
    """lim_{n→∞} MaxSE·ε²/log₂(n)³ and MeanSE·ε²/log₂(n)³ of a tree mechanism at one arity.

    On full trees n_h (``_full_size``), Δ = ‖R‖₁→₁, ‖L‖₂→∞² and ‖L‖_F²/n grow by constant
    amounts dΔ, dM, dF per level while log₂ n grows by g per level (g = log₂ k for the digit
    trees: n_{h+1}/n_h → k; g = 2 per unit of h for the smooth binary tree of height 2h, since
    log₂ C(2h, h) = 2h − ½·log₂(πh) + o(1)). MaxSE = 2Δ²‖L‖₂→∞² then gives the constant
    2·dM·dΔ²/g³, and MeanSE 2·dF·dΔ²/g³. The increments are exact differences of
    ``trees.tree_costs`` at heights h and h+1 with k^h ≥ 2^64 (exponentially small remainders);
    for the smooth tree at h = ``SMOOTH_LIMIT_HEIGHT`` (MeanSE remainder about 10^-5).
    """
    if mechanism not in trees.MECHANISMS:
        raise InvalidInputError(f"unknown tree mechanism {mechanism!r}; expected one of {', '.join(trees.MECHANISMS)}")
    if mechanism in trees.ARITY_MECHANISMS:
        k = check_size(arity, name="arity", minimum=2)
    elif arity is not None:
        raise InvalidInputError(f"mechanism {mechanism!r} takes no arity, got {arity!r}")
    else:
        k = 2
    if mechanism == "smooth-binary":
        height, growth = SMOOTH_LIMIT_HEIGHT, 2.0
    else:
        height, growth = math.ceil(64 / math.log2(k)) + 1, math.log2(k)
    costs = [trees.tree_costs(mechanism=mechanism, n=_full_size(mechanism, k, h), arity=arity) for h in (height, height + 1)]
    d_sensitivity = costs[1].sensitivity - costs[0].sensitivity
    d_max = costs[1].max_row_norm_squared - costs[0].max_row_norm_squared
    d_mean = costs[1].mean_row_norm_squared - costs[0].mean_row_norm_squared
    scale = 2 * d_sensitivity**2
    return float(scale * d_max) / growth**3, float(scale * d_mean) / growth**3


@dataclass(frozen=True)
class TreeLimit:
    """Table 1 row of a tree mechanism: the limits at the best arity per metric (None: no arity)."""

    mechanism: str
    max_se_constant: float
    max_se_arity: int | None
    mean_se_constant: float
    mean_se_arity: int | None


def best_tree_limits(*, mechanism: str, max_arity: int = trees.ARITY_SEARCH_MAX) -> TreeLimit:
    """``tree_limit_constants`` minimised over the arity 2 … ``max_arity`` (per metric; ties: smaller)."""
    if mechanism not in trees.ARITY_MECHANISMS:
        max_se, mean_se = tree_limit_constants(mechanism=mechanism)
        return TreeLimit(mechanism, max_se, None, mean_se, None)
    values = {
        k: tree_limit_constants(mechanism=mechanism, arity=k)
        for k in range(2, check_size(max_arity, name="max_arity", minimum=2) + 1)
    }
    best_max = min(values, key=lambda k: (values[k][0], k))
    best_mean = min(values, key=lambda k: (values[k][1], k))
    return TreeLimit(mechanism, values[best_max][0], best_max, values[best_mean][1], best_mean)


# ----------------------------------------------------------------------------------- tables


@dataclass
class Table:
    """A titled table: ``rows`` hold display strings or numbers; ``notes`` follow it in the report."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def select(self, columns: Sequence[str]) -> Table:
        """The same table with only ``columns`` (in that order), e.g. for a narrow terminal."""
        missing = [name for name in columns if name not in self.columns]
        if missing:
            raise InvalidInputError(f"table {self.title!r} has no column {', '.join(missing)}")
        index = [self.columns.index(name) for name in columns]
        return Table(self.title, list(columns), [[row[i] for i in index] for row in self.rows], list(self.notes))

    def cells(self) -> list[list[str]]:
        return [[format_cell(cell) for cell in row] for row in self.rows]

    def to_markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in self.cells()]
        for note in self.notes:  # one paragraph each
            lines += ["", note]
        return "\n".join(lines).rstrip() + "\n"


@dataclass(frozen=True)
class UpperBound:
    """A table cell that quotes a proven upper bound (a certificate's exact rational claim, or an exact
    function of claims): ``format_cell`` shows it rounded UP at the last digit shown, computed from the
    Fraction (never through a float), so the printed number is itself an upper bound."""

    value: Fraction

    def __float__(self) -> float:
        return float(self.value)


def round_up(value: Fraction | int, *, decimals: int) -> str:
    """The least multiple of 10^-decimals that is ≥ ``value``, as a decimal string, exactly: the one
    rounding of every number that quotes an upper bound (tables of the report, the docs' tables)."""
    value = Fraction(value)
    scale = 10**decimals
    units = -((-value.numerator * scale) // value.denominator)  # ⌈value·10^decimals⌉
    sign, units = ("-", -units) if units < 0 else ("", units)
    digits = str(units).rjust(decimals + 1, "0")
    return sign + (f"{digits[:-decimals]}.{digits[-decimals:]}" if decimals > 0 else digits)


def _decimal_exponent(value: Fraction) -> int:
    """⌊log₁₀ value⌋ of a positive rational, exactly."""
    exponent = len(str(value.numerator)) - len(str(value.denominator))
    while Fraction(10) ** exponent > value:
        exponent -= 1
    while Fraction(10) ** (exponent + 1) <= value:
        exponent += 1
    return exponent


def format_upper_bound(value: Fraction) -> str:
    """``format_cell``'s display form of a float, rounded up instead of to nearest: 4 decimals for
    values in [10⁻³, 10), 6 significant digits in [10, 10⁶), else 4 decimals of the mantissa."""
    value = Fraction(value)
    if value <= 0:
        return round_up(value, decimals=4)
    exponent = _decimal_exponent(value)
    if 1e-3 <= value < 10:
        return round_up(value, decimals=4)
    if 10 <= value < 10**6:
        return round_up(value, decimals=max(5 - exponent, 0))
    mantissa = round_up(value / Fraction(10) ** exponent, decimals=4)
    if mantissa == "10.0000":  # rounding up carried into the next power of ten
        mantissa, exponent = "1.0000", exponent + 1
    return f"{mantissa}e{exponent:+03d}"


def format_cell(cell: Any) -> str:
    """Display form: floats with 4 significant decimals for constants < 10, 6 significant digits otherwise;
    an ``UpperBound`` in the same form, rounded up (``format_upper_bound``)."""
    if cell is None:
        return "–"
    if isinstance(cell, UpperBound):
        return format_upper_bound(cell.value)
    if isinstance(cell, Fraction):
        cell = float(cell)
    if isinstance(cell, float):
        if math.isnan(cell):
            return "n/a"
        if cell != 0 and (abs(cell) >= 1e6 or abs(cell) < 1e-3):
            return f"{cell:.4e}"
        if abs(cell) < 10:
            return f"{cell:.4f}"
        return f"{cell:.6g}"
    return str(cell)


# ---------------------------------------------------------------------------------- figures


def save_png(figure, path: str | os.PathLike, *, dpi: int = 110) -> Path:
    """Write ``figure`` as a PNG of ``dpi`` at ``path`` (checked writable first), atomically, and close it."""
    import matplotlib.pyplot as plt

    path = check_writable_file(path, name="plot")
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=dpi)
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_table2(*, ours: dict[int, dict[str, float]], path: str | os.PathLike) -> Path:
    """Arkhipov & Kalinin's Table 2 against ours: 2C² and the lifted constant against k, one panel per metric.

    ``ours`` = {k: {"maxse": 2C₂², "maxse_lifted": …, "meanse": 2C_F², "meanse_lifted": …}} (any
    subset of keys); published values are drawn as open markers, ours as filled ones.
    """
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.3), sharey=True)
    published_k = sorted(published.TABLE2)
    for panel, (axis, metric, label) in enumerate(zip(axes, ("maxse", "meanse"), ("2C₂² (MaxSE)", "2C_F² (MeanSE)"))):
        axis.plot(
            published_k, [published.TABLE2[k][panel] for k in published_k], "o--", mfc="none", color="C0", label=f"paper: {label}"
        )
        axis.plot(
            published_k,
            [published.TABLE2[k][3 + panel] for k in published_k],
            "s--",
            mfc="none",
            color="C1",
            label="paper: lifted",
        )
        for key, marker, colour, text in ((metric, "o", "C0", label), (f"{metric}_lifted", "s", "C1", "lifted")):
            points = sorted((k, values[key]) for k, values in ours.items() if key in values)
            if points:
                axis.plot(
                    [p[0] for p in points], [p[1] for p in points], marker + "-", color=colour, label=f"ours, certified: {text}"
                )
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("base size k")
        axis.set_title(f"{'MaxSE' if metric == 'maxse' else 'MeanSE'}: Arkhipov & Kalinin Table 2 vs certified")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    axes[0].set_ylabel("leading constant")
    return save_png(figure, path)


def plot_step_noise_std(
    *,
    curves: dict[str, np.ndarray],
    path: str | os.PathLike,
    empirical: dict[str, np.ndarray] | None = None,
    title: str = "",
    bins: int = 40,
) -> Path:
    """Per-step noise standard deviation against the step t (log x axis), one line per mechanism.

    ``curves``: predicted standard deviations per step. ``empirical``: per-step *mean squared*
    errors (sample means over runs); they are too noisy to show per step, so they are pooled in
    ``bins`` log-spaced bins of t and drawn as √(mean squared error) of each bin (markers), beside
    the first curve pooled the same way (√ of its mean variance, open markers).
    """
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 4.8))
    for position, (label, values) in enumerate(curves.items()):
        steps = np.arange(1, len(values) + 1)
        axis.plot(steps, values, linewidth=0.6, color=f"C{position}", label=label)
    for position, (label, values) in enumerate((empirical or {}).items()):
        edges = np.unique(np.geomspace(1, len(values) + 1, bins + 1).astype(int))
        centres = np.sqrt(edges[:-1] * np.maximum(edges[1:] - 1, edges[:-1]))
        pooled = [math.sqrt(float(values[a - 1 : b - 1].mean())) for a, b in zip(edges[:-1], edges[1:])]
        axis.plot(centres, pooled, "o", markersize=4, color=f"C{position + len(curves)}", label=label)
        reference = next(iter(curves.values()), None)
        if reference is not None:
            expected = [math.sqrt(float((reference[a - 1 : b - 1] ** 2).mean())) for a, b in zip(edges[:-1], edges[1:])]
            axis.plot(centres, expected, "o", mfc="none", markersize=7, color="C0", label="predicted, same bins")
    axis.set_xscale("log")
    axis.set_xlabel("step t")
    axis.set_ylabel("standard deviation of the released count's error")
    axis.set_title(title, fontsize=10)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    return save_png(figure, path)


def plot_leading_constants(
    *, path: str | os.PathLike, exponents: Iterable[int] = range(4, 41), providers: Sequence[compare.RowProvider] | None = None
) -> Path:
    """Write a PNG of MaxSE·ε²/log₂(n)³ and MeanSE·ε²/log₂(n)³ against n = 2^e (one panel each).

    Dashed lines: the n → ∞ constants of Arkhipov & Kalinin's Table 1. The file is written atomically.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = check_writable_file(path, name="plot")
    series = compare.leading_constant_series(exponents=list(exponents), providers=providers)
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for position, (mechanism, points) in enumerate(series.items()):
        colour = colours[position % len(colours)]
        for panel, axis in enumerate(axes):
            axis.plot([p[0] for p in points], [p[1 + panel] for p in points], marker=".", color=colour, label=mechanism)
            limit = published.TABLE1.get(mechanism) if mechanism != "lifted" else None
            if limit is not None:
                axis.axhline(limit[panel], color=colour, linestyle="--", linewidth=0.8)
    for axis, title in zip(axes, ("MaxSE·ε²/log₂(n)³", "MeanSE·ε²/log₂(n)³")):
        axis.set_title(title)
        axis.set_xlabel("log₂ n")
        axis.set_yscale("log")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("leading constant (dashed: Table 1, n → ∞)")
    axes[1].legend(fontsize=8)
    return save_png(figure, path, dpi=120)


def plot_constant_curve(
    *,
    bases: Sequence[lift.Operand],
    metric: str,
    path: str | os.PathLike,
    max_n: int = 2**60,
    points: int = 200,
    alpha_rule: str = "paper",
    baselines: dict[str, tuple[list[int], list[float]]] | None = None,
) -> Path:
    """PNG of the lifted leading constant against n (log scale, n = 16 … max_n) for each base,
    each base's Theorem 2.5 asymptote dashed, and optional baseline curves (label → (ns, values),
    e.g. the tree mechanisms from ``compare.leading_constant_series``). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if metric not in METRICS:
        raise InvalidInputError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    max_n = check_size(max_n, name="max_n", minimum=32)
    path = check_writable_file(path, name="plot")
    sizes = sorted({int(x) for x in np.logspace(4, math.log2(max_n), points, base=2.0)})
    figure, axes = plt.subplots(figsize=(8, 5))
    for base in bases:
        family = lift.LiftedFamily(base=base, metric=metric)
        values = [family.plan(n=n, alpha_rule=alpha_rule).leading_constant for n in sizes]
        line = axes.plot(sizes, values, label=f"lifted, k = {family.k}")[0]
        axes.axhline(family.asymptotic_constant(), color=line.get_color(), linestyle="--", linewidth=0.8)
    for label, (ns, baseline) in (baselines or {}).items():
        axes.plot(ns, baseline, marker=".", linestyle=":", label=label)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.grid(True, which="both", alpha=0.3)
    axes.set_xlabel("n")
    axes.set_ylabel(("MaxSE" if metric == "maxse" else "MeanSE") + " · ε² / log₂(n)³")
    axes.set_title(f"Leading constant against n ({metric}); dashed: Theorem 2.5 asymptote of each base")
    axes.legend(fontsize=8)
    return save_png(figure, path, dpi=120)


def plot_lift_against_trees(
    *, base: Factorization, metric: str, path: str | os.PathLike, max_n: int = 2**60, alpha_rule: str = "paper"
) -> Path:
    """``plot_constant_curve`` of one base with the five tree mechanisms (best arity per metric,
    from ``compare.leading_constant_series``) as baselines, at n = 2^4, 2^8, … ≤ max_n."""
    max_n = check_size(max_n, name="max_n", minimum=32)
    column = 1 if metric == "maxse" else 2
    series = compare.leading_constant_series(exponents=range(4, max_n.bit_length(), 4), providers=[compare.tree_rows])
    baselines = {name: ([2 ** p[0] for p in points], [p[column] for p in points]) for name, points in series.items()}
    return plot_constant_curve(bases=[base], metric=metric, path=path, max_n=max_n, alpha_rule=alpha_rule, baselines=baselines)


def plot_tree_ratios(rows: list[lower_bounds.TreeRatio], path: str | os.PathLike) -> Path:
    """PNG plot of cost/bound ratios against n (log scale), one line per tree and cost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    keys = sorted({(row.tree, row.arity) for row in rows})
    for tree, arity in keys:
        series = sorted((row for row in rows if (row.tree, row.arity) == (tree, arity)), key=lambda row: row.n)
        label = "binary (= 2-ary)" if tree == "binary" else f"{arity}-ary"
        n_values = [row.n for row in series]
        style = {
            "marker": ".",
            "label": label,
            "linestyle": "--" if tree == "binary" else "-",
            "zorder": 3 if tree == "binary" else 2,
        }
        axes[0].plot(n_values, [row.c2_ratio for row in series], **style)
        axes[1].plot(n_values, [row.cf_ratio for row in series], **style)
    for axis, title in zip(axes, ("c₂ / 0.290·log₂^{3/2}(n−1)", "c_F / (ln2/6)^{3/2}√(1−1/n)·log₂^{3/2}(n−1)")):
        axis.set_xscale("log", base=2)
        axis.axhline(1, color="black", linewidth=0.8)
        axis.set_xlabel("n")
        axis.set_ylabel("cost / bound")
        axis.set_title(title, fontsize=10)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle("0/1 lower bounds (Arkhipov & Kalinin, §4): tree factorizations, ratio ≥ 1 promised")
    return save_png(figure, path)
