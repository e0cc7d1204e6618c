"""Which mechanism a counter runs: the one dispatch over anytime, certificate, base and planner.

Every route that builds a counter asks here (``Counter``, ``ContinualCounter.for_horizon``,
``KeyedCounters``, the DataFrame function and Spark through ``KeyedCounters``, ``plan``, the
audit), and a state's recorded mechanism is rebuilt here (``from_record``):

* no horizon: the shipped anytime schedule for the metric (``anytime.anytime``); a base, a
  certificate or a tree needs a horizon;
* a certificate: the lifted base it certifies, its sha256 and sensitivity claim re-checked
  exactly (``mechanism.lifted``);
* a base file: that base lifted to the horizon (Arkhipov & Kalinin, arXiv 2607.08963,
  Construction 2.4), its α's planned for the metric;
* otherwise the planner's best row for (horizon, metric) (``planner.choose``: every shipped
  lifted base and the five trees; "lifted" or a tree name restricts it; keyed counts default to
  the best lifted base, whose column norms give user-level sensitivities), built from its
  certificate (``build``).

The planner's ranking does not depend on ε (every row's errors scale as 1/ε²), so the choice is
public: it is a function of the horizon, the metric and the shipped files only.

Layering: this module sits above ``planner``, ``mechanism`` and ``anytime`` in ``mechanisms/``
(docs/architecture.md), so none of them imports another upward.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pure_dp_mf import resources
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import mechanism as mechanisms
from pure_dp_mf.mechanisms import planner
from pure_dp_mf.mechanisms.anytime import AnytimeMechanism, Schedule, anytime
from pure_dp_mf.validation import UNIT_EPSILON

ANYTIME_CHOICES = ("auto", "anytime")


@dataclass(frozen=True)
class Resolved:
    """A resolved mechanism: what the counter runs, and the planner row that chose it (None when
    a base, a certificate or the anytime schedule was given)."""

    mechanism: Any  # a ``Mechanism`` or an ``AnytimeMechanism``
    row: planner.ComparisonRow | None = None


def resolve_mechanism(
    *,
    horizon: int | None,
    metric: str = "maxse",
    mechanism: str = "auto",
    base: Factorization | str | os.PathLike | None = None,
    certificate: str | os.PathLike | None = None,
    keyed: bool = False,
    epsilon: float = UNIT_EPSILON,
) -> Resolved:
    """The mechanism a counter of ``horizon`` runs (module docstring). ``keyed``: the "auto"
    choice is the best lifted base (keyed counts' default). ``epsilon``: the ε at which the
    planner row's figures are given (``Resolved.row``); the choice does not depend on it."""
    check_choice(mechanism=mechanism, base=base, certificate=certificate)
    if horizon is None:
        if base is not None or certificate is not None or mechanism not in ANYTIME_CHOICES:
            raise InvalidInputError(
                "without a horizon the counter runs the anytime schedule: give --horizon to run a base, a certificate or a tree"
            )
        return Resolved(mechanism=anytime(metric=metric))
    if mechanism == "anytime":
        raise InvalidInputError("--mechanism anytime runs without a horizon: leave out --horizon")
    if certificate is not None:
        return Resolved(mechanism=mechanisms.lifted(base=Path(certificate), horizon=horizon, certificate=certificate))
    if base is not None:
        return Resolved(mechanism=mechanisms.lifted(base=base, horizon=horizon, metric=metric))
    choice = "lifted" if keyed and mechanism == "auto" else mechanism
    row = planner.choose(horizon=horizon, epsilon=epsilon, metric=metric, mechanism=choice)
    return Resolved(mechanism=build(row, horizon=horizon), row=row)


def check_choice(*, mechanism: str, base: object | None, certificate: object | None) -> None:
    """Refuse a request that names two mechanisms: a base and a certificate (a certificate names its
    base), or either with a tree. Checked before a counter is made or resumed."""
    if base is not None and certificate is not None:
        raise InvalidInputError("give a base or a certificate, not both (a certificate names its base)")
    if (base is not None or certificate is not None) and mechanism not in ("auto", "lifted"):
        raise InvalidInputError(f"mechanism {mechanism!r} is a tree; a base or a certificate chooses a lifted base")


def build(row: planner.ComparisonRow, *, horizon: int) -> mechanisms.Mechanism:
    """The ``Mechanism`` of a planner row for ``horizon``: a lifted base from its certificate
    (loaded and checked now, its α's those the row was planned with), a tree from its closed form."""
    if row.mechanism == "lifted":
        base_file = Path(str(row.base_file))
        certificate = resources.certificate_file(base_file, folder=base_file.parent.parent / "certificates")
        return mechanisms.lifted(
            base=base_file,
            horizon=horizon,
            metric=row.metric,
            certificate=certificate if certificate.is_file() else None,
        )
    return mechanisms.tree(mechanism=row.mechanism, horizon=horizon, arity=row.arity)


def mechanism_for(*, horizon: int, metric: str = "maxse", mechanism: str = "auto") -> mechanisms.Mechanism:
    """``build(planner.choose(…))``: the mechanism the planner ranks best, ready to run."""
    return build(planner.choose(horizon=horizon, epsilon=1.0, metric=metric, mechanism=mechanism), horizon=horizon)


def from_record(record: dict, *, horizon: int | None):
    """The mechanism a state recorded (``Mechanism.record``, ``AnytimeMechanism.record``), rebuilt
    for ``horizon``; a base whose file changed (sha256) is refused. An anytime record (no
    horizon) rebuilds its schedule."""
    if record.get("kind") == "anytime":
        schedule = Schedule.from_record(record["schedule"])
        return AnytimeMechanism(schedule=schedule, name=str(record.get("name") or f"anytime ({schedule.metric} segments)"))
    return mechanisms.from_record(record, horizon=horizon)
