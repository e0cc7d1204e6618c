"""Named pure-DP budgets: a total ε that the counters of one analysis draw on, kept exactly.

A *budget* is a name and a total ε_total, kept in the lineage registry (``registry.py``, tables
``budgets`` and ``spends``) beside the noise lineages. A counter *charges* a budget with its ε
under its lineage (``charge``, ``charge_counter``): the registry records (budget, lineage, ε,
what) and refuses the charge when the budget's spends plus ε would exceed its total.

Guarantee (basic sequential composition of pure DP: Dwork & Roth, *The Algorithmic Foundations
of Differential Privacy*, Theorem 3.14): if mechanisms M_1 … M_k on the same data are ε_i-DP
for the same privacy unit (one step's value, one event, one user), their joint release is
(Σ_i ε_i)-DP, whatever the order and even when each is chosen after seeing the others' outputs.
Every counter of this package releases exactly ε-DP for its privacy unit (docs/privacy.md) and
a lineage is one counter (one noise stream, all of its releases, across restarts), so: **the
releases of every counter charged to a budget are together ε_total-DP**, provided each is charged
before its first release. The counters must protect the same privacy unit for the sum to mean
one guarantee; a budget does not check that.

How it is enforced:

* **Exact arithmetic.** Every ε is the exact rational value of the float given (``Fraction(float)``,
  the dyadic value the counter's noise is computed from, ``lattice.noise_rate``), stored as the
  text "p/q"; sums and comparisons are exact. So 0.1 + 0.2 does not fit a budget of 0.3: the two
  floats' exact values add up to more than the float 0.3's.
* **No race.** The check (total − spent ≥ ε) and the insert are one SQLite transaction taken with
  ``BEGIN IMMEDIATE`` (the registry's write lock is held from before the read until the commit),
  so two processes asking for the last ε cannot both pass: one waits, then sees the other's spend.
* **Idempotent per lineage.** A lineage charges a budget once: charging it again with the same ε
  is a no-op (a resumed counter charges again when it restarts), with another ε it is refused.

Blind spots: a counter that is not charged (no ``budget`` given) is not counted; a counter run on
another machine, or against another registry (``$PURE_DP_MF_REGISTRY``), charges that registry,
not this one; deleting the registry forgets every spend. The budget is an accounting of what was
charged here, not a bound on what anyone released.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

from pure_dp_mf.engines import registry as registry_module
from pure_dp_mf.errors import InvalidInputError, PureDPMFError
from pure_dp_mf.validation import check_epsilon

MAX_NAME = 200


class BudgetError(PureDPMFError):
    """A budget refuses: unknown, created twice with different totals, or a charge that does not fit."""


class Spend(NamedTuple):
    """One charge of a budget: the lineage (one counter), its exact ε, what it is, and when (Unix time)."""

    lineage: str
    epsilon: Fraction
    what: str
    created: float


def exact_epsilon(value: object, *, name: str = "epsilon") -> Fraction:
    """ε as an exact rational: a float (or int) is its exact binary value, a ``Fraction`` stays as is.

    Refuses what ``validation.check_epsilon`` refuses (≤ 0, NaN, infinities, out of float range)."""
    if isinstance(value, Fraction):
        if value <= 0 or abs(value.numerator).bit_length() - value.denominator.bit_length() > 1000:
            raise InvalidInputError(f"{name} must be a positive finite number, got {value}")
        check_epsilon(float(value), name=name)
        return value
    return Fraction(check_epsilon(value, name=name))


def epsilon_text(value: Fraction) -> str:
    """The registry's text of an exact ε: "p/q" (q = 1 for an integer: "p/1")."""
    return f"{value.numerator}/{value.denominator}"


def show_epsilon(value: Fraction) -> str:
    """ε for people: the float when it is exactly a float, else "≈ float (exactly p/q)"."""
    nearest = float(value)
    if Fraction(nearest) == value:
        return repr(nearest)
    return f"≈ {nearest!r} (exactly {value.numerator}/{value.denominator})"


def float_below(value: Fraction) -> float:
    """The largest float64 ≤ ``value``: an ε that a counter may be given and still fit."""
    nearest = float(value)
    return nearest if Fraction(nearest) <= value else math.nextafter(nearest, -math.inf)


def _parse(text: str, *, what: str) -> Fraction:
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise BudgetError(f"the lineage registry holds an unreadable ε {text!r} for {what}") from None
    if value < 0:
        raise BudgetError(f"the lineage registry holds a negative ε {text!r} for {what}")
    return value


def check_name(name: object, *, flag: str = "budget name") -> str:
    """A budget's name: a non-empty printable string of at most 200 characters, no surrounding spaces."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not name.isprintable() or name != name.strip():
        raise InvalidInputError(f"{flag} must be 1 to {MAX_NAME} printable characters without surrounding spaces, got {name!r}")
    return name


def _total(connection: sqlite3.Connection, name: str, schema: str) -> Fraction | None:
    row = connection.execute(f"SELECT epsilon FROM {schema}.budgets WHERE name = ?", (name,)).fetchone()
    return None if row is None else _parse(row[0], what=f"budget {name!r}")


def _spends(connection: sqlite3.Connection, name: str, schema: str) -> list[Spend]:
    rows = connection.execute(
        f"SELECT lineage, epsilon, what, created FROM {schema}.spends WHERE budget = ? ORDER BY created, lineage", (name,)
    ).fetchall()
    return [
        Spend(lineage, _parse(text, what=f"lineage {lineage}"), what, float(created)) for lineage, text, what, created in rows
    ]


def _unknown(name: str, connection: sqlite3.Connection, schema: str) -> BudgetError:
    where = registry_module.registry_path_of(connection, schema)
    return BudgetError(f"no budget named {name!r} in the registry {where}; create it first (pure-dp-mf budget create)")


class _Immediate:
    """``with _Immediate(connection):`` one BEGIN IMMEDIATE transaction, committed at the end and
    rolled back on any exception; inside a transaction the caller already holds, it only runs."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection, self.own = connection, not connection.in_transaction

    def __enter__(self) -> sqlite3.Connection:
        if self.own:
            self.connection.execute("BEGIN IMMEDIATE")
        return self.connection

    def __exit__(self, kind, error, trace) -> None:
        if self.own and self.connection.in_transaction:
            self.connection.execute("COMMIT" if kind is None else "ROLLBACK")


def _registry_call(function, registry: str | os.PathLike | None):
    """Run ``function(connection)`` on a fresh registry connection; SQLite errors become ``BudgetError``."""
    connection = registry_module.connect(registry)
    try:
        return function(connection)
    except sqlite3.Error as error:
        raise BudgetError(f"cannot use the lineage registry {registry_module.registry_path(registry)}: {error}") from None
    finally:
        connection.close()


@dataclass(frozen=True)
class Budget:
    """A named pure-DP budget in the lineage registry (module docstring). Made by ``create`` or
    ``open``; ``spent``, ``remaining`` and ``spends()`` read the registry each time (other processes
    charge it too). All amounts are exact ``Fraction``s."""

    name: str
    total: Fraction
    registry: Path
    created: float

    @classmethod
    def create(cls, name: str, *, epsilon: float | Fraction, registry: str | os.PathLike | None = None) -> Budget:
        """Create the budget ``name`` with total ε (exact value of the float); creating it again with
        the same ε returns it, with another ε is refused (``BudgetError``)."""
        name, total = check_name(name), exact_epsilon(epsilon)

        def create_in(connection: sqlite3.Connection) -> Budget:
            with _Immediate(connection):
                existing = _total(connection, name, "main")
                if existing is None:
                    connection.execute("INSERT INTO budgets VALUES (?, ?, ?)", (name, epsilon_text(total), time.time()))
                elif existing != total:
                    raise BudgetError(
                        f"budget {name!r} already exists with ε = {show_epsilon(existing)}, not {show_epsilon(total)}; "
                        "a budget's total never changes: choose another name"
                    )
            return cls._read(connection, name, registry)

        return _registry_call(create_in, registry)

    @classmethod
    def open(cls, name: str, *, registry: str | os.PathLike | None = None) -> Budget:
        """The budget ``name``; an unknown name is refused (``BudgetError``)."""
        name = check_name(name)
        return _registry_call(lambda connection: cls._read(connection, name, registry), registry)

    @classmethod
    def _read(cls, connection: sqlite3.Connection, name: str, registry: str | os.PathLike | None) -> Budget:
        row = connection.execute("SELECT epsilon, created FROM budgets WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise _unknown(name, connection, "main")
        total = _parse(row[0], what=f"budget {name!r}")
        return cls(name=name, total=total, registry=registry_module.registry_path(registry), created=float(row[1]))

    @property
    def epsilon(self) -> Fraction:
        """The total ε (exact)."""
        return self.total

    def spends(self) -> list[Spend]:
        """Every charge of this budget, oldest first: (lineage, ε, what, created)."""
        return _registry_call(lambda connection: _spends(connection, self.name, "main"), self.registry)

    @property
    def spent(self) -> Fraction:
        """The sum of every charge's ε (exact)."""
        return sum((spend.epsilon for spend in self.spends()), Fraction(0))

    @property
    def remaining(self) -> Fraction:
        """total − spent (exact, ≥ 0: a charge that would make it negative is refused)."""
        return self.total - self.spent


def charge(
    *,
    budget: str,
    epsilon: float | Fraction,
    lineage: str,
    what: str,
    registry: str | os.PathLike | None = None,
    connection: sqlite3.Connection | None = None,
    schema: str = "main",
    dry_run: bool = False,
) -> bool:
    """Record that lineage ``lineage`` (one counter) draws ``epsilon`` from budget ``budget``.

    The check and the insert are one ``BEGIN IMMEDIATE`` transaction, so of two processes asking
    for the last ε exactly one passes. With ``connection`` (a connection to which the registry is
    attached as ``schema``, e.g. a journal's, schema "registry") the charge joins the transaction
    the caller holds, if any (it should be IMMEDIATE, as the journal's are: a deferred one may fail
    with "database is locked" instead of waiting), and otherwise takes its own on that connection.

    Returns True when the charge was recorded, False when this lineage had already charged the same
    ε (a resumed counter: nothing changes). With ``dry_run`` nothing is recorded (the transaction is
    rolled back): the answer and the refusals are those the charge would give now, for a counter
    that checks its budget when it is made and charges it with its first released step.

    Raises:
        BudgetError: an unknown budget; a lineage that charged another ε; spent + ε > total (the
            message names the budget, its total, what is spent and what was asked; nothing is
            recorded).
        InvalidInputError: a bad ε, name or lineage.
    """
    budget, amount = check_name(budget, flag="budget"), exact_epsilon(epsilon)
    if not isinstance(lineage, str) or not lineage:
        raise InvalidInputError(f"lineage must be a non-empty string, got {lineage!r}")
    if not schema.isidentifier():
        raise InvalidInputError(f"schema must be an SQL identifier, got {schema!r}")

    def charge_in(live: sqlite3.Connection) -> bool:
        registry_module.ensure_schema(live, schema)
        if dry_run:
            live.execute("BEGIN IMMEDIATE")
            try:
                return _charge(live, budget=budget, amount=amount, lineage=lineage, what=str(what), schema=schema)
            finally:
                live.execute("ROLLBACK")
        with _Immediate(live):
            return _charge(live, budget=budget, amount=amount, lineage=lineage, what=str(what), schema=schema)

    if connection is None:
        return _registry_call(charge_in, registry)
    try:
        return charge_in(connection)
    except sqlite3.Error as error:
        raise BudgetError(f"cannot charge budget {budget!r} in the lineage registry: {error}") from None


def _charge(connection: sqlite3.Connection, *, budget: str, amount: Fraction, lineage: str, what: str, schema: str) -> bool:
    """The check and the insert of ``charge``, inside the caller's transaction."""
    total = _total(connection, budget, schema)
    if total is None:
        raise _unknown(budget, connection, schema)
    row = connection.execute(
        f"SELECT epsilon, what FROM {schema}.spends WHERE budget = ? AND lineage = ?", (budget, lineage)
    ).fetchone()
    if row is not None:
        charged = _parse(row[0], what=f"lineage {lineage}")
        if charged == amount:
            return False
        raise BudgetError(
            f"lineage {lineage} ({row[1]}) already charged ε = {show_epsilon(charged)} to budget {budget!r}, "
            f"not {show_epsilon(amount)}: a counter's ε never changes"
        )
    spent = sum((spend.epsilon for spend in _spends(connection, budget, schema)), Fraction(0))
    if spent + amount > total:
        raise BudgetError(
            f"budget {budget!r} (ε = {show_epsilon(total)}) has spent {show_epsilon(spent)} and has "
            f"{show_epsilon(total - spent)} left; {what} asks ε = {show_epsilon(amount)}: refused, nothing released"
        )
    connection.execute(
        f"INSERT INTO {schema}.spends VALUES (?, ?, ?, ?, ?)", (budget, lineage, epsilon_text(amount), what, time.time())
    )
    return True


def charge_counter(
    *, budget: str | None, epsilon: float, lineage: str, what: str, registry: str | os.PathLike | None = None
) -> bool:
    """Charge a counter's ε to ``budget`` before its first release (``budget=None``: nothing to do,
    returns False). ``lineage`` is the counter's ``lineage`` attribute (``ContinualCounter``,
    ``KeyedCounters``: a fresh id for a new counter, the state header's for a resumed one);
    ``registry`` the registry of its state (``counter.journal.registry``), or None for the default.

    Call it once the lineage is known and before anything is released: for a new counter before
    its state is created, for a resumed one right after it is opened (charging the same lineage
    again with the same ε is a no-op). A refusal is a ``BudgetError``; the counter must then release
    nothing. Returns ``charge``'s answer."""
    if budget is None:
        return False
    return charge(budget=budget, epsilon=epsilon, lineage=lineage, what=what, registry=registry)


@dataclass
class PendingCharge:
    """A counter's charge, checked when the counter is made (``check``: a dry run, so an unknown
    budget or one too small is refused before anything exists) and made with its first released
    step: inside the journal commit of that step (``in_transaction``, the registry attached as
    "registry": the charge and the step commit together or not at all), or, for a counter
    without a state, right before the step is returned (``now``). A run that releases nothing is
    charged nothing."""

    budget: str
    epsilon: float
    lineage: str
    what: str
    registry: str | os.PathLike | None = None

    def check(self) -> bool:
        return charge(
            budget=self.budget, epsilon=self.epsilon, lineage=self.lineage, what=self.what, registry=self.registry, dry_run=True
        )

    def in_transaction(self, connection: sqlite3.Connection) -> None:
        charge(
            budget=self.budget,
            epsilon=self.epsilon,
            lineage=self.lineage,
            what=self.what,
            connection=connection,
            schema="registry",
        )

    def now(self) -> None:
        charge(budget=self.budget, epsilon=self.epsilon, lineage=self.lineage, what=self.what, registry=self.registry)


def charge_with_release(counter) -> Callable[[sqlite3.Connection], None] | None:
    """The pending charge of ``counter`` (a ``ContinualCounter`` or ``KeyedCounters``) at its
    next release: made now and cleared for a counter without a state; for one with a state,
    returned as the journal commit's ``also``, so that the charge and the step commit in one
    transaction (``PendingCharge``); None when nothing is pending."""
    pending = counter.pending_charge
    if pending is None:
        return None
    if counter.journal is not None:
        return pending.in_transaction
    pending.now()
    counter.pending_charge = None
    return None
