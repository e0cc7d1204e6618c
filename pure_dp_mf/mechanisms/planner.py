"""The planner: which mechanism to run for a horizon, ε and metric, and the comparison table.

One planner serves ``compare``, ``count``, ``Counter``, keyed counts, Spark, ``reproduce`` and
the audit. ``comparison_rows(n=, epsilon=)`` lists every tree mechanism of ``trees.MECHANISMS``
with its exact finite-n MaxSE and MeanSE (``trees.tree_costs``, closed forms) and the lifted
factorization mechanism (for each metric the shipped base whose ◇α lift has the least error at
n, ``lift.LiftedFamily``), with the leading constants MaxSE·ε²/log₂(n)³ and MeanSE·ε²/log₂(n)³,
sorted by error (Arkhipov & Kalinin, arXiv 2607.08963, Table 1). The shipped bases are planned
from their profiles (``base_factorizations/profiles.json``: row norms and exact column sums, no matrix
loaded, nothing solved); a folder of other bases is planned from its files. ``choose`` takes the
best row for a horizon; ``mechanism_for`` builds its ``Mechanism`` (loading the chosen base
only). Mechanisms with an arity appear with the best arity for MaxSE and the best arity for
MeanSE (one row when they agree). More mechanisms join through ``providers=``: callables
``provider(*, n, epsilon)`` returning ``ComparisonRow`` objects.

Data flow: profiles, tree costs → rows (this module) → tables and figures (``reports``); the
chosen row → ``mechanism.Mechanism`` → the engines.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pure_dp_mf import resources
from pure_dp_mf.certificates.profiles import read_profiles
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.costs import leading_constant
from pure_dp_mf.factorizations.factorization import METRICS, Factorization
from pure_dp_mf.mechanisms import trees
from pure_dp_mf.mechanisms.lift import LiftedFamily, Operand
from pure_dp_mf.validation import UNIT_EPSILON, check_epsilon, check_size

SORT_KEYS = METRICS


@dataclass(frozen=True)
class ComparisonRow:
    """One mechanism at one (n, ε): errors and leading constants (NaN constants for n = 1).

    ``best_for`` names the metrics for which ``arity`` was chosen (empty when there is no arity
    or it was given); ``source`` says where the numbers come from (e.g. "closed form"). Lifted
    rows also carry ``levels`` (p), ``base_file`` (the base's path, or None for an in-memory
    base) and ``asymptotic_constant`` (Theorem 2.5's limit of the chosen base).
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
    levels: int | None = None
    base_file: str | None = None
    asymptotic_constant: float | None = None

    @classmethod
    def from_errors(
        cls,
        *,
        mechanism: str,
        arity: int | None,
        n: int,
        epsilon: float,
        max_se: float,
        mean_se: float,
        best_for: tuple[str, ...] = (),
        source: str = "closed form",
        levels: int | None = None,
        base_file: str | None = None,
        asymptotic_constant: float | None = None,
    ) -> ComparisonRow:
        """A row from MaxSE and MeanSE at ε; the leading constants are derived here."""
        return cls(
            mechanism,
            arity,
            tuple(best_for),
            n,
            epsilon,
            max_se,
            mean_se,
            leading_constant(max_se, n=n, epsilon=epsilon),
            leading_constant(mean_se, n=n, epsilon=epsilon),
            source,
            levels,
            base_file,
            asymptotic_constant,
        )

    @property
    def metric(self) -> str | None:
        """The one metric this row was chosen for, if exactly one."""
        return self.best_for[0] if len(self.best_for) == 1 else None

    def as_dict(self) -> dict:
        record = asdict(self)
        record["best_for"] = list(self.best_for)
        return record


RowProvider = Callable[..., Iterable[ComparisonRow]]


def tree_rows(*, n: int, epsilon: float = UNIT_EPSILON) -> list[ComparisonRow]:
    """Rows of the five tree mechanisms (best arity per metric), exact closed-form errors."""
    rows = []
    for mechanism in trees.MECHANISMS:
        if mechanism in trees.ARITY_MECHANISMS:
            chosen: dict[int, list[str]] = {}
            for metric in METRICS:
                chosen.setdefault(trees.best_arity(mechanism=mechanism, n=n, metric=metric), []).append(metric)
            choices: list[tuple[int | None, tuple[str, ...]]] = [(arity, tuple(metrics)) for arity, metrics in chosen.items()]
        else:
            choices = [(None, ())]
        for arity, best_for in choices:
            costs = trees.tree_costs(mechanism=mechanism, n=n, arity=arity)
            rows.append(
                ComparisonRow.from_errors(
                    mechanism=mechanism,
                    arity=arity,
                    best_for=best_for,
                    n=n,
                    epsilon=epsilon,
                    max_se=costs.max_se(epsilon=epsilon),
                    mean_se=costs.mean_se(epsilon=epsilon),
                )
            )
    return rows


# ---------------------------------------------------------------------------------------------
# Lifted rows: the best base per metric.


def _families(bases: Iterable[tuple[Operand, str | None]]) -> list[tuple[LiftedFamily, str | None]]:
    """One ``LiftedFamily`` per (base, metric it competes for), with the base's file (or None).

    A base whose metadata names a metric competes only for that metric; one without, for both."""
    families = []
    for base, file in bases:
        declared = base.metric if isinstance(base, Factorization) else None
        families += [(LiftedFamily(base=base, metric=metric), file) for metric in METRICS if declared in (None, metric)]
    return families


def _best_rows(
    *, n: int, epsilon: float, families: Sequence[tuple[LiftedFamily, str | None]], alpha_rule: str
) -> list[ComparisonRow]:
    n = check_size(n, name="n")
    rows = []
    for metric in METRICS:
        plans = [
            (family.plan(n=n, epsilon=epsilon, alpha_rule=alpha_rule, exact_sensitivity=False), file)
            for family, file in families
            if family.metric == metric
        ]
        if not plans:
            continue
        plan, file = min(plans, key=lambda item: item[0].costs.max_se if metric == "maxse" else item[0].costs.mean_se)
        where = f"lift of {Path(file).name}" if file is not None else "lift of a given base"
        rows.append(
            ComparisonRow.from_errors(
                mechanism="lifted",
                arity=plan.base_size,
                best_for=(metric,),
                n=n,
                epsilon=plan.epsilon,
                max_se=plan.costs.max_se,
                mean_se=plan.costs.mean_se,
                source=f"{where}, {plan.levels} levels",
                levels=plan.levels,
                base_file=file,
                asymptotic_constant=plan.asymptotic_constant,
            )
        )
    return rows


def best_lifted_rows(
    *, n: int, epsilon: float = UNIT_EPSILON, bases: Iterable[Operand], alpha_rule: str = "paper"
) -> list[ComparisonRow]:
    """For each metric, the lift (α chosen for that metric) of the base with the least error at n.

    Args:
        n: the stream length (rows of the truncated lift).
        epsilon: the privacy parameter ε of the errors.
        bases: Factorizations of T_k (any k) or exact (decoder, encoder) pairs.
        alpha_rule: "paper" or "truncated" (see ``lift.LiftedFamily.plan``).

    Returns:
        One lifted ``ComparisonRow`` per metric that has a candidate (``maxse`` first).
    """
    return _best_rows(n=n, epsilon=epsilon, families=_families((base, None) for base in bases), alpha_rule=alpha_rule)


@functools.lru_cache(maxsize=4)
def _folder_families(folder: str, stamp: tuple) -> tuple[tuple[LiftedFamily, str | None], ...]:
    """Families of a folder's bases, cached while the files (names, mtimes, sizes) are unchanged."""
    files = resources.base_files(folder)
    return tuple(_families((Factorization.load(path), str(path)) for path in files))


@functools.lru_cache(maxsize=2)
def _profile_families(folder: str, stamp: tuple) -> tuple[tuple[LiftedFamily, str | None], ...]:
    """Families of the certified bases of a base folder, from its profiles (no matrix loaded)."""
    families = []
    for profile in read_profiles(folder).values():
        family = LiftedFamily.from_profile(
            metric=profile["metric"],
            inner_size=profile["inner_size"],
            row_norms_squared=profile["row_norms_squared"],
            column_sums=profile["column_sums"],
        )
        families.append((family, str(profile["base"])))
    return tuple(families)


def shipped_families() -> tuple[tuple[LiftedFamily, str | None], ...]:
    """(family, base file) of every shipped certified base, from its profile (no matrix loaded)."""
    profiles = resources.BASE_FOLDER / "profiles.json"
    stamp = (profiles.stat().st_mtime_ns, profiles.stat().st_size) if profiles.exists() else ()
    return _profile_families(str(resources.BASE_FOLDER), stamp)


def lifted_rows(
    *, n: int, epsilon: float = UNIT_EPSILON, directory: str | os.PathLike | None = None, alpha_rule: str = "paper"
) -> list[ComparisonRow]:
    """The lifted rows of the bases in ``directory`` (default: the shipped ones, planned from
    their profiles): for each metric the base whose lift has the least error at n, with its file
    in ``base_file``."""
    if directory is None:
        return _best_rows(n=n, epsilon=epsilon, families=shipped_families(), alpha_rule=alpha_rule)
    folder = Path(directory)
    files = resources.base_files(folder)
    files_stamp = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    return _best_rows(n=n, epsilon=epsilon, families=_folder_families(str(folder), files_stamp), alpha_rule=alpha_rule)


DEFAULT_PROVIDERS: tuple[RowProvider, ...] = (tree_rows, lifted_rows)


def comparison_rows(
    *, n: int, epsilon: float = UNIT_EPSILON, providers: Sequence[RowProvider] | None = None, sort_by: str = "maxse"
) -> list[ComparisonRow]:
    """All rows at (n, ε), sorted by MaxSE (``sort_by="maxse"``) or MeanSE, then by the other.

    ``providers`` default to ``DEFAULT_PROVIDERS`` (the trees and the shipped lifted bases)."""
    n = check_size(n, name="n")
    epsilon = check_epsilon(epsilon)
    if sort_by not in SORT_KEYS:
        raise InvalidInputError(f"unknown sort key {sort_by!r}; expected one of {SORT_KEYS}")
    rows = [row for provider in (DEFAULT_PROVIDERS if providers is None else providers) for row in provider(n=n, epsilon=epsilon)]
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


def winning_bases(
    *, metric: str, exponents: Iterable[int] = range(1, 61), directory: str | os.PathLike | None = None
) -> list[tuple[int, int, float]]:
    """Where each base wins: [(first exponent e, base size k, leading constant at n = 2^e)], one
    entry each time the best base (least error of ``metric`` at n = 2^e among the bases in
    ``directory``, default the shipped ones) changes, in increasing n."""
    if metric not in METRICS:
        raise InvalidInputError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    changes: list[tuple[int, int, float]] = []
    for exponent in exponents:
        rows = [
            row for row in lifted_rows(n=1 << check_size(exponent, name="exponent"), directory=directory) if row.metric == metric
        ]
        if not rows:
            raise InvalidInputError(f"no {metric} base factorization in {directory or resources.BASE_FOLDER}")
        row = rows[0]
        constant = row.max_se_constant if metric == "maxse" else row.mean_se_constant
        if not changes or changes[-1][1] != row.arity:
            changes.append((exponent, int(row.arity or 0), constant))
    return changes


# ---------------------------------------------------------------------------------------------
# Choosing and building.

CHOICES = ("auto", "lifted", *trees.MECHANISMS)


def choose(*, horizon: int, epsilon: float = UNIT_EPSILON, metric: str = "maxse", mechanism: str = "auto") -> ComparisonRow:
    """The row to run for ``horizon``: "auto" the best of every mechanism for ``metric`` (ties:
    the other metric, then the name), "lifted" the best shipped lifted base, a tree name that tree
    at its best arity for ``metric``."""
    horizon = check_size(horizon, name="horizon")
    if mechanism not in CHOICES:
        raise InvalidInputError(f"unknown mechanism {mechanism!r}; expected auto, lifted or one of {', '.join(trees.MECHANISMS)}")
    if metric not in METRICS:
        raise InvalidInputError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    rows = comparison_rows(n=horizon, epsilon=epsilon, sort_by=metric)
    if mechanism != "auto":
        rows = [row for row in rows if row.mechanism == mechanism and (row.metric in (None, metric) or not row.best_for)]
    if not rows:
        raise InvalidInputError(f"no {mechanism} mechanism is available for horizon {horizon}")
    return rows[0]
