"""The ledger: one publication per secret key, and a digest of every released step's input.

A *publication* is the unit of noise identity: a name, the secret generator key it owns (kept
as the registry's sha256 tag, never the key), what it releases (the engine, the resolved
mechanism and its schedule, ε, the privacy unit and its bounds), the budget it is charged to and,
for a correction, the publication it corrects. The ledger holds every publication and, for each
released step, an HMAC of the step's input under a key derived from the publication's secret key.

Why: the noise of step t is a fixed function of the key and t (``engines.generator``), so two
releases of step t under one key on inputs x_t ≠ x′_t reveal T·(x − x′) exactly (ε = ∞). The
journal and the registry refuse this on one machine for one state; the ledger refuses it for
every route that holds the key, in every process that shares the ledger:

* **One key, one publication** (``claim``): a key already owned by another publication is refused;
  a publication name that owns another key is refused; a publication claimed again with other
  options (mechanism, ε, unit, bounds, keys) is refused.
* **One input per released step** (``record``): before a step's noise is shown, the HMAC of its
  input is checked against the ledger and inserted when new. The same input reproduces the
  stored release bit for bit (same key, same step, same input, same arithmetic); another input
  is refused before anything of the step is released, and the refusal names the step and the
  publication only (no input, no value). A correction is a new publication: a new key and a
  budget charge of its own, with ``corrects`` linking it to the one it corrects.
* **Atomic.** Claim-and-insert and check-and-insert are each one serializable transaction:
  ``BEGIN IMMEDIATE`` on SQLite (one writer at a time), ``ISOLATION LEVEL SERIALIZABLE`` on
  PostgreSQL (retried on a serialization failure), so two processes racing on one step cannot
  both pass with different inputs.

Backends, chosen by a URL (``--ledger``, ``$PURE_DP_MF_LEDGER``, ``set_default``):

* ``sqlite:///path`` or a plain path; by default the lineage registry's own SQLite file
  (``registry.registry_path``): one machine, one user.
* ``postgresql://…`` (psycopg 3, the ``postgres`` extra): a server outside any one machine's
  failure domain, shared by every process and machine of a job. Use it in production: a state
  and a local SQLite ledger restored together from one backup are indistinguishable from the
  originals, a remote ledger is not restored with them (docs/privacy.md, "Threat model").

Which counters it guards (``needs_ledger``): every counter whose secure key has left the process
that drew it, i.e. a key read from a key file or a record (``NoiseGenerator.from_key_file``,
``from_record``: a state, a checkpoint), or written out (``to_record``: a state, a message to
another process). A key drawn by ``secure()`` and kept in one process cannot serve two runs
(``generator.claim_in_process``); a seeded key is public and protects nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import sqlite3
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pure_dp_mf.errors import PureDPMFError

LEDGER_ENV = "PURE_DP_MF_LEDGER"
UNRECORDED = "unrecorded"  # the digest of a step released before its key left its process
_DIGEST_DOMAIN = b"pure_dp_mf ledger step digest v1\x00"
_KEYED_DOMAIN = b"pure_dp_mf ledger keyed step digest v1\x00"
_MODULUS = 1 << 256
_RETRIES = 20
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS publications (name TEXT PRIMARY KEY, key_tag TEXT NOT NULL UNIQUE, spec TEXT, "
    "budget TEXT, corrects TEXT, created DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS published_steps (publication TEXT NOT NULL, step BIGINT NOT NULL, digest TEXT NOT NULL, "
    "PRIMARY KEY (publication, step))",
    "CREATE TABLE IF NOT EXISTS published_parts (publication TEXT NOT NULL, part BIGINT NOT NULL, step BIGINT NOT NULL, "
    "digest TEXT NOT NULL, PRIMARY KEY (publication, part, step))",
    "CREATE TABLE IF NOT EXISTS lineage_homes (lineage TEXT PRIMARY KEY, home TEXT NOT NULL, updated DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ledger_log (at DOUBLE PRECISION NOT NULL, event TEXT NOT NULL, detail TEXT NOT NULL)",
)
_default_url: str | None = None


class LedgerError(PureDPMFError):
    """The ledger refuses: a key or publication used twice, a released step given another input,
    or a ledger that cannot be reached."""


def correction_hint(name: str) -> str:
    """How to make a correction, for every refusal."""
    return (
        "to publish corrected data, make a new publication: a new key under a new name (a new key file with "
        f"NoiseGenerator.from_key_file(new_path, query=new_name, corrects={name!r}), or a new --state), charged to its "
        "budget again"
    )


@dataclass(frozen=True)
class Publication:
    """What a publication is (module docstring). ``spec`` holds public options only (no data):
    the engine, the mechanism and schedule, ε as exact hex, the privacy unit and its bounds."""

    name: str | None
    key_tag: str
    spec: dict | None = None
    budget: str | None = None
    corrects: str | None = None

    def spec_text(self) -> str | None:
        return None if self.spec is None else json.dumps(self.spec, sort_keys=True, default=str)


@dataclass
class Ledger:
    """A ledger at ``url`` (module docstring). One connection, opened on first use."""

    url: str
    _connection: Any = field(default=None, repr=False)

    @property
    def backend(self) -> str:
        return "postgresql" if self.url.startswith(("postgresql://", "postgres://")) else "sqlite"

    # ------------------------------------------------------------------ connection

    def _connect(self) -> Any:
        if self._connection is not None:
            return self._connection
        connection: Any
        if self.backend == "postgresql":
            try:
                import psycopg
            except ImportError:
                raise LedgerError("a PostgreSQL ledger needs psycopg 3: pip install 'pure-dp-mf[postgres]'") from None
            try:
                connection = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
                for statement in _SCHEMA:
                    with contextlib.suppress(psycopg.errors.UniqueViolation):  # two first users racing
                        connection.execute(statement)
            except psycopg.Error as error:
                raise LedgerError(f"cannot use the ledger {_shown(self.url)}: {_first_line(error)}") from None
        else:
            path = _sqlite_path(self.url)
            try:
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                if not path.exists():
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
                connection = sqlite3.connect(path, timeout=30, isolation_level=None)
                connection.execute("PRAGMA synchronous = FULL")
                for statement in _SCHEMA:
                    connection.execute(statement)
            except (OSError, sqlite3.Error) as error:
                raise LedgerError(f"cannot use the ledger {path}: {error}") from None
        self._connection = connection
        return connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        """One serializable transaction (module docstring); yields ``run(sql, params)`` → rows."""
        connection = self._connect()
        if self.backend == "sqlite":

            def run_sqlite(sql: str, params: Sequence = ()) -> list:
                return connection.execute(sql, tuple(params)).fetchall()

            try:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    yield run_sqlite
                    connection.execute("COMMIT")
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise LedgerError(f"cannot use the ledger {_sqlite_path(self.url)}: {error}") from None
            return
        import psycopg

        def run_postgres(sql: str, params: Sequence = ()) -> list:
            cursor = connection.execute(sql.replace("?", "%s"), tuple(params))
            return cursor.fetchall() if cursor.description is not None else []

        try:
            connection.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            try:
                yield run_postgres
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
        except psycopg.Error as error:
            raise LedgerError(f"cannot use the ledger {_shown(self.url)}: {_first_line(error)}") from None

    def _retrying(self, function):
        """``function(run)`` in one serializable transaction, run again after a serialization failure."""
        for attempt in range(_RETRIES):
            try:
                with self._transaction() as run:
                    return function(run)
            except LedgerError as error:
                if self.backend != "postgresql" or "could not serialize" not in str(error) or attempt == _RETRIES - 1:
                    raise
                time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ publications

    def claim(self, publication: Publication, *, extending: bool = False) -> str:
        """Claim ``publication`` for its key (one serializable transaction); returns its name.

        A publication without a name takes the one its key already has, else ``"key " + tag[:16]``.
        Refused (``LedgerError``): a key owned by another publication, a name that owns another key,
        options other than the stored ones (with ``extending``: only the mechanism, the horizon and
        the sensitivity may change, as ``ContinualCounter.extend_horizon`` changes them), a
        ``corrects`` naming no publication."""

        def claim_in(run) -> str:
            owner = run("SELECT name, spec FROM publications WHERE key_tag = ?", (publication.key_tag,))
            name = publication.name or (owner[0][0] if owner else f"key {publication.key_tag[:16]}")
            if owner and owner[0][0] != name:
                raise LedgerError(
                    f"this noise key already serves the publication {owner[0][0]!r}, not {name!r}: one key serves one "
                    f"publication, or its noise would be reused on other data; {correction_hint(owner[0][0])}"
                )
            row = run("SELECT key_tag, spec FROM publications WHERE name = ?", (name,))
            if row and row[0][0] != publication.key_tag:
                raise LedgerError(
                    f"the publication {name!r} owns another noise key: a publication's key never changes (its released "
                    f"steps would be released again under other noise); {correction_hint(name)}"
                )
            if publication.corrects is not None:
                if publication.corrects == name or not run("SELECT 1 FROM publications WHERE name = ?", (publication.corrects,)):
                    raise LedgerError(f"corrects={publication.corrects!r}: no other publication of that name in the ledger")
            spec = publication.spec_text()
            if not row:
                run(
                    "INSERT INTO publications VALUES (?, ?, ?, ?, ?, ?)",
                    (name, publication.key_tag, spec, publication.budget, publication.corrects, time.time()),
                )
                return name
            stored = row[0][1]
            if spec is not None and stored is not None and stored != spec:
                differ = _differences(json.loads(stored), publication.spec or {})
                if not (extending and set(differ) <= {"mechanism", "horizon", "sensitivity"}):
                    raise LedgerError(
                        f"the publication {name!r} was made with other options ({', '.join(differ)}); the same noise under "
                        f"other options would release it twice; {correction_hint(name)}"
                    )
            if spec is not None and stored != spec:
                run("UPDATE publications SET spec = ? WHERE name = ?", (spec, name))
            if publication.budget is not None:
                run("UPDATE publications SET budget = ? WHERE name = ? AND budget IS NULL", (publication.budget, name))
            return name

        return self._retrying(claim_in)

    def record(self, name: str, *, first: int, digests: Sequence[str], part: int | None = None) -> int:
        """Check the input digests of the 0-based steps first, first + 1, … of publication ``name``
        against the ledger and insert the new ones (one serializable transaction); returns how many
        were new. A step recorded with another digest is refused (``LedgerError``) and nothing is
        inserted: the caller releases nothing of the call. ``part``: the digests are of one part
        of each step's input (a Spark stream's shard of keys, ``keyed_step_digest``), checked
        against that part's own records."""
        stop = first + len(digests)
        where = "" if part is None else f" (shard {int(part)})"

        def record_in(run) -> int:
            if part is None:
                known = dict(
                    run(
                        "SELECT step, digest FROM published_steps WHERE publication = ? AND step >= ? AND step < ?",
                        (name, first, stop),
                    )
                )
            else:
                known = dict(
                    run(
                        "SELECT step, digest FROM published_parts WHERE publication = ? AND part = ? AND step >= ? AND step < ?",
                        (name, int(part), first, stop),
                    )
                )
            for offset, digest in enumerate(digests):
                stored = known.get(first + offset)
                if stored == UNRECORDED and digest != UNRECORDED:
                    raise LedgerError(
                        f"step {first + offset + 1} of the publication {name!r} was released before its key left the "
                        "process that drew it, and its input was not recorded: it is never released again under this "
                        f"key; refused, nothing released; {correction_hint(name)}"
                    )
                if stored is not None and stored != digest:
                    raise LedgerError(
                        f"step {first + offset + 1} of the publication {name!r}{where} was released from other input: its noise "
                        f"cannot be used on another input (the difference would be revealed); refused, nothing released; "
                        f"{correction_hint(name)}"
                    )
            fresh = [(first + offset, digest) for offset, digest in enumerate(digests) if first + offset not in known]
            for step, digest in fresh:
                if part is None:
                    run("INSERT INTO published_steps VALUES (?, ?, ?)", (name, step, digest))
                else:
                    run("INSERT INTO published_parts VALUES (?, ?, ?, ?)", (name, int(part), step, digest))
            return len(fresh)

        return self._retrying(record_in)

    def publication(self, name: str) -> dict | None:
        """The stored publication ``name`` (its spec parsed), or None."""
        rows = self._retrying(
            lambda run: run("SELECT name, key_tag, spec, budget, corrects, created FROM publications WHERE name = ?", (name,))
        )
        if not rows:
            return None
        name, tag, spec, budget, corrects, created = rows[0]
        return {
            "name": name,
            "key_tag": tag,
            "spec": None if spec is None else json.loads(spec),
            "budget": budget,
            "corrects": corrects,
            "created": float(created),
        }

    def released_steps(self, name: str) -> int:
        """How many steps of ``name`` the ledger holds a digest of."""
        rows = self._retrying(lambda run: run("SELECT COUNT(*) FROM published_steps WHERE publication = ?", (name,)))
        return int(rows[0][0])

    # ------------------------------------------------------------------ homes of states

    def adopt(self, *, lineage: str, home: str, force_from: str | None = None, event: str = "adopt") -> str:
        """Record that ``lineage``'s state lives on the machine ``home`` (its name), logged; returns
        the previous home or "". Refused when the ledger knows the lineage on another machine,
        unless that machine is ``force_from`` (a move the caller has made explicit)."""

        def adopt_in(run) -> str:
            rows = run("SELECT home FROM lineage_homes WHERE lineage = ?", (lineage,))
            previous = rows[0][0] if rows else ""
            if previous and previous != home and previous != force_from:
                raise LedgerError(
                    f"the ledger knows this state's lineage on the machine {previous!r}: two copies of one state would "
                    "release the same steps twice; resume it there, or move it here explicitly, once "
                    f"(pure-dp-mf ledger adopt STATE --from {previous})"
                )
            if previous == home and event != "adopt":
                return previous
            now = time.time()
            if rows:
                run("UPDATE lineage_homes SET home = ?, updated = ? WHERE lineage = ?", (home, now, lineage))
            else:
                run("INSERT INTO lineage_homes VALUES (?, ?, ?)", (lineage, home, now))
            detail = json.dumps({"lineage": lineage, "from": previous, "to": home})
            run("INSERT INTO ledger_log VALUES (?, ?, ?)", (now, event, detail))
            return previous

        return self._retrying(adopt_in)

    def home(self, lineage: str) -> str | None:
        rows = self._retrying(lambda run: run("SELECT home FROM lineage_homes WHERE lineage = ?", (lineage,)))
        return rows[0][0] if rows else None

    def log(self) -> list[tuple[float, str, dict]]:
        rows = self._retrying(lambda run: run("SELECT at, event, detail FROM ledger_log ORDER BY at"))
        return [(float(at), event, json.loads(detail)) for at, event, detail in rows]


# ------------------------------------------------------------------ the process's ledger


def set_default(url: str | None) -> None:
    """Use the ledger at ``url`` in this process from now on (the CLI's ``--ledger``); None: back to
    ``$PURE_DP_MF_LEDGER`` or the registry's SQLite file."""
    global _default_url
    _default_url = None if url is None else check_url(url)
    _LEDGERS.clear()


def check_url(url: object, *, flag: str = "--ledger") -> str:
    if not isinstance(url, str) or not url.strip():
        raise LedgerError(f"{flag} must be a ledger URL (postgresql://…, sqlite:///path) or a path")
    if "://" in url and not url.startswith(("postgresql://", "postgres://", "sqlite://")):
        raise LedgerError(f"{flag}: unknown ledger URL scheme in {_shown(url)} (postgresql:// or sqlite:///path)")
    return url


def ledger_url(url: str | None = None) -> str:
    """The ledger to use: ``url``, else ``set_default``'s, else ``$PURE_DP_MF_LEDGER``, else the
    lineage registry's SQLite file."""
    if url is not None:
        return check_url(url)
    if _default_url is not None:
        return _default_url
    if os.environ.get(LEDGER_ENV):
        return check_url(os.environ[LEDGER_ENV], flag=LEDGER_ENV)
    from pure_dp_mf.engines.registry import registry_path

    return str(registry_path())


_LEDGERS: dict[str, Ledger] = {}


def open_ledger(url: str | None = None) -> Ledger:
    """The ledger at ``ledger_url(url)``, one shared connection per process and URL."""
    resolved = ledger_url(url)
    if resolved not in _LEDGERS:
        _LEDGERS[resolved] = Ledger(resolved)
    return _LEDGERS[resolved]


# ------------------------------------------------------------------ what engines call


def machine() -> str:
    """This machine's name in the ledger: ``$PURE_DP_MF_MACHINE`` (for containers whose host name
    changes at each start), else the host name."""
    import socket

    return os.environ.get("PURE_DP_MF_MACHINE") or socket.gethostname()


def claim_home(lineage: str) -> None:
    """A state of ``lineage`` is opened to release on this machine: refused when the ledger knows
    the lineage on another machine (a copy there, or a backup restored here while the state goes
    on there); recorded when new. Moves between machines are explicit (``adopt``). Moves on one
    machine are the registry's (``registry.check_state``)."""
    open_ledger().adopt(lineage=lineage, home=machine(), event="open")


def step_digest(key: bytes, *, step: int, data: bytes) -> str:
    """HMAC-SHA256 of one step's input under a key derived from the publication's secret key:
    without the key the digest says nothing of the input (a shared ledger learns no data, not
    even a 0/1 value by trying both), with it equal inputs give equal digests."""
    mac_key = hashlib.sha256(_DIGEST_DOMAIN + key).digest()
    return hmac.new(mac_key, int(step).to_bytes(8, "little") + data, hashlib.sha256).hexdigest()


def keyed_mac_key(key: bytes) -> bytes:
    """The MAC key of the keyed step digest (``keyed_step_digest``), derived from the publication's
    secret key in a domain of its own (not ``step_digest``'s, not the noise's)."""
    return hashlib.sha256(_KEYED_DOMAIN + key).digest()


def keyed_pair_sum(mac_key: bytes, *, step: int, keys: Sequence[str], values: Any) -> int:
    """Σ F(step, key, value) over the pairs (key, value) of one step whose value is not 0, as an
    integer (not reduced: partial sums of several shards add up), F = HMAC-SHA256 under
    ``mac_key`` of 0x01 ‖ step (8 bytes) ‖ the key's UTF-8 length (8 bytes) ‖ the key ‖ the
    value in ASCII decimal, read as a 256-bit integer (``keyed_step_digest``)."""
    import numpy as np

    vector = np.asarray(values)
    if vector.shape != (len(keys),):
        raise ValueError(f"{len(keys)} keys but values of shape {vector.shape}")
    base = hmac.new(mac_key, digestmod=hashlib.sha256)
    prefix = b"\x01" + int(step).to_bytes(8, "little")
    nonzero = np.flatnonzero(vector)  # the keys with an input only: the others add nothing
    total = 0
    for j, value in zip(nonzero.tolist(), vector[nonzero].tolist(), strict=True):
        encoded = keys[j].encode("utf-8")
        mac = base.copy()
        mac.update(b"%b%b%b%d" % (prefix, len(encoded).to_bytes(8, "little"), encoded, value))
        total += int.from_bytes(mac.digest(), "big")
    return total


def keyed_digest(mac_key: bytes, *, step: int, total: int, part: int | None = None) -> str:
    """The keyed step digest of 0-based ``step`` from the sum of its pairs' PRF values ``total``
    (``keyed_pair_sum``, summed over every shard): (F₀(step[, part]) + total) mod 2²⁵⁶ as 64 hex
    digits, F₀ = HMAC-SHA256 under ``mac_key`` of 0x00 ‖ step (8 bytes) [‖ "part" ‖ part (8 bytes)]."""
    label = b"\x00" + int(step).to_bytes(8, "little") + (b"" if part is None else b"part" + int(part).to_bytes(8, "little"))
    term = int.from_bytes(hmac.new(mac_key, label, hashlib.sha256).digest(), "big")
    return format((term + int(total)) % _MODULUS, "064x")


def keyed_step_digest(key: bytes, *, step: int, keys: Sequence[str], values: Any, part: int | None = None) -> str:
    """The digest of one step of a keyed publication: the input of every key at 0-based ``step``,
    ``values[j]`` the input of ``keys[j]``. One definition for every keyed route (local
    ``KeyedCounters``, Spark batch, which sums it over its shards on the executors, and with
    ``part`` a Spark stream's shard of keys):

        D_t = (F₀(t) + Σ_{(k, v): v ≠ 0} F(t, k, v)) mod 2²⁵⁶,

    F₀ and F HMAC-SHA256 under a key derived from the publication's secret key
    (``keyed_mac_key``), on disjoint messages (``keyed_digest``, ``keyed_pair_sum``). It is a MAC
    of the set of pairs (key, value ≠ 0), which determines the input vector because the keys are
    fixed by the publication (its ``keys_sha256``); the order of the pairs does not matter, so
    shards computed anywhere add up to the same digest, and no per-key record is stored.

    Why it is sound. Model F₀ and F as a random function (HMAC-SHA256 is a PRF, and its key is
    unknown to anyone without the publication's secret key). For two inputs of step t with pair
    sets S ≠ S′, D_t − D′_t = Σ_{S∖S′} F − Σ_{S′∖S} F, a sum in which at least one F value
    appears exactly once (each key appears at most once in each set): it is uniform on
    ℤ/2²⁵⁶, so the two digests are equal with probability 2⁻²⁵⁶. The stored D_t does not help:
    F₀(t) appears in it alone, a one-time pad, so D_t is uniform and independent of every F
    value (an all-zero step too). Equal inputs give equal digests. So, up to the PRF advantage,
    a changed input is never recorded as the stored one, and the ledger, which holds one
    uniform value per step, learns nothing of the data (docs/privacy.md, "The keyed step
    digest")."""
    mac_key = keyed_mac_key(key)
    return keyed_digest(mac_key, step=step, total=keyed_pair_sum(mac_key, step=step, keys=keys, values=values), part=part)


class Guard:
    """A counter's claim on its publication: ``check(first=, inputs=)`` before steps are released.

    Made lazily by the engines (``guard_for``) the first time a counter whose key has left its
    process releases; the publication is claimed then, before the first draw is shown."""

    def __init__(
        self, *, generator: Any, spec: dict, budget: str | None = None, corrects: str | None = None, extending: bool = False
    ) -> None:
        """``extending``: the counter went on past its horizon before its first guarded release
        (``KeyedCounters.extend_horizon``): its publication may be stored with the spec before or
        after the extension (``Ledger.claim``)."""
        from pure_dp_mf.engines.registry import generator_tag

        self.key = generator.key
        self.ledger = open_ledger()
        self.publication = Publication(
            name=getattr(generator, "publication", None),
            key_tag=generator_tag(generator.key),
            spec=spec,
            budget=budget,
            corrects=corrects,
        )
        self.name = self.ledger.claim(self.publication, extending=extending)

    def check(self, *, first: int, inputs: Sequence[bytes]) -> None:
        """Record the inputs (canonical bytes) of the 0-based steps first, … (``Ledger.record``)."""
        digests = [step_digest(self.key, step=first + i, data=data) for i, data in enumerate(inputs)]
        self.ledger.record(self.name, first=first, digests=digests)

    def check_keyed(self, *, first: int, keys: Sequence[str], increments: Sequence[Any]) -> None:
        """Record every key's input at the 0-based steps first, …: ``increments[i][j]`` the input of
        ``keys[j]`` at step first + i (``keyed_step_digest``)."""
        digests = [keyed_step_digest(self.key, step=first + i, keys=keys, values=row) for i, row in enumerate(increments)]
        self.ledger.record(self.name, first=first, digests=digests)

    def record(self, *, first: int, digests: Sequence[str]) -> None:
        """Record digests computed elsewhere (Spark's executors, ``keyed_digest``) for the 0-based
        steps first, …"""
        self.ledger.record(self.name, first=first, digests=digests)

    def extend(self, spec: dict) -> None:
        """The counter went on past its horizon (``extend_horizon``): its new schedule, same key."""
        self.publication = Publication(
            name=self.name, key_tag=self.publication.key_tag, spec=spec, budget=self.publication.budget
        )
        self.ledger.claim(self.publication, extending=True)


def guard_for(counter: Any, spec_of) -> Guard | None:
    """The counter's ``Guard``: made on first need (``needs_ledger``), kept in ``counter._guard``.
    A counter that releases unguarded (its key has not left the process) is remembered: if its
    key leaves the process later (``to_record``), ``key_exported`` bars its released steps."""
    guard = getattr(counter, "_guard", None)
    if guard is None:
        if needs_ledger(counter.generator):
            guard = Guard(generator=counter.generator, spec=spec_of(), corrects=getattr(counter, "corrects", None))
            counter._guard = guard
        elif not counter.generator.seeded:
            _UNGUARDED.setdefault(hashlib.sha256(counter.generator.key).digest(), weakref.WeakSet()).add(counter)
    return guard


_UNGUARDED: dict[bytes, weakref.WeakSet] = {}  # key sha256 → counters of this process that released on it unguarded


def key_exported(tag: bytes) -> None:
    """The secure key with sha256 ``tag`` leaves this process (``generator.mark_exported``): every
    counter of this process that released steps on it unguarded claims its publication now and
    bars those steps in the ledger (their inputs were not recorded: they are never released again
    under this key, by any process)."""
    for counter in list(_UNGUARDED.pop(tag, ())):
        if getattr(counter, "_guard", None) is not None or counter.released == 0:
            continue
        guard = Guard(generator=counter.generator, spec=counter.publication_spec(), corrects=getattr(counter, "corrects", None))
        counter._guard = guard
        guard.ledger.record(guard.name, first=0, digests=[UNRECORDED] * counter.released)


def needs_ledger(generator: Any) -> bool:
    """True for a secure key that has left the process that drew it (module docstring)."""
    from pure_dp_mf.engines.registry import is_exported

    return not generator.seeded and is_exported(generator)


# ------------------------------------------------------------------ helpers


def _differences(stored: dict, given: dict) -> list[str]:
    return sorted(name for name in set(stored) | set(given) if stored.get(name) != given.get(name))


def _sqlite_path(url: str) -> Path:
    return Path(url[len("sqlite://") :]) if url.startswith("sqlite://") else Path(url)


def _shown(url: str) -> str:
    """A URL without its password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        return f"{scheme}://{credentials.split(':', 1)[0]}@{host}"
    return url


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
