"""The lineage registry: one SQLite database per user that remembers every noise lineage.

A *lineage* is one stream of noise: a secure generator key (the noise of every coordinate is a
pure function of the key and its address) used by one counter. Adding the same noise to two
different data streams reveals their difference exactly, so a lineage must never serve two
counters, and a counter's state must never be resumed from two copies. The state file alone
cannot guarantee this (a copy of a file is indistinguishable from the file); this registry,
outside every state, can, on one machine:

* ``generators``: the sha256 of each secure generator key → the one lineage it feeds. A second
  counter on the same key (the same ``NoiseGenerator``, a key file shared by two queries, the
  generator of a state) is refused (``claim_generator``).
* ``lineages``: each lineage's state file and its released step count, updated in the same
  SQLite transaction that commits a step to the state (the journal attaches this database to
  the state's connection, so the two commit atomically, ``journal.py``). A state whose step
  count differs from its lineage's record, or a copy at another path while the original is
  still there, is refused (``check_state``), at step 0 too.
* ``key_files``: each key file (``NoiseGenerator.from_key_file``) is bound to the first query
  that uses it (a checkpoint or state path); another query is refused (``bind_key_file``).
* ``budgets`` and ``spends``: named privacy budgets and what each counter drew from them
  (``budget.py``).

A state moved from another machine (or kept past a deleted registry) is unknown here: with
released steps it is read (``Journal.open(read_only=True)``) but resumed only once adopted,
explicitly (``journal.adopt``, ``pure-dp-mf ledger adopt``; the ledger, ``engines.ledger``,
refuses the adoption while it knows the lineage on another machine). docs/privacy.md.

Location: ``$PURE_DP_MF_REGISTRY`` if set, else ``$XDG_STATE_HOME/pure_dp_mf/registry.sqlite3``
(default ``~/.local/state/pure_dp_mf/registry.sqlite3``), created mode 0600 in a folder of mode
0700; every function takes ``registry=`` to override it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from pure_dp_mf.errors import InvalidInputError, PureDPMFError

BUSY_TIMEOUT_MS = 30_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS generators (generator TEXT PRIMARY KEY, lineage TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS lineages (
    lineage TEXT PRIMARY KEY, generator TEXT NOT NULL, state TEXT, released INTEGER NOT NULL,
    what TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS key_files (key_file TEXT PRIMARY KEY, generator TEXT NOT NULL, query TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS budgets (name TEXT PRIMARY KEY, epsilon TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS spends (
    budget TEXT NOT NULL, lineage TEXT NOT NULL, epsilon TEXT NOT NULL, what TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (budget, lineage)
);
"""


class RegistryError(PureDPMFError):
    """The registry refuses: a lineage, key file or state would be used twice, or it cannot be read."""


def registry_path(registry: str | os.PathLike | None = None) -> Path:
    """Where the registry lives (module docstring)."""
    if registry is not None:
        return Path(registry)
    if os.environ.get("PURE_DP_MF_REGISTRY"):
        return Path(os.environ["PURE_DP_MF_REGISTRY"])
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "pure_dp_mf" / "registry.sqlite3"


def generator_tag(key: bytes) -> str:
    """The registry's name of a generator key: sha256 of the key (the key itself is never stored)."""
    return hashlib.sha256(b"pure_dp_mf registry v1\x00" + bytes(key)).hexdigest()


_EXPORTED: set[bytes] = set()  # sha256 of each secure key that left this process or came from outside it


def note_exported(generator: Any) -> bool:
    """Note that the secure key of ``generator`` may serve runs outside this process (``is_exported``);
    True the first time (``generator.mark_exported``), False for a seeded key or one noted before."""
    if generator.seeded:
        return False
    tag = hashlib.sha256(generator.key).digest()
    if tag in _EXPORTED:
        return False
    _EXPORTED.add(tag)
    return True


def is_exported(generator: Any) -> bool:
    """True when the secure key of ``generator`` left this process (``to_record``) or came from outside
    it (``from_record``, ``from_key_file``, a child of such a key): another process may hold it,
    so its counters claim their publication in the ledger (``ledger.needs_ledger``)."""
    return not generator.seeded and hashlib.sha256(generator.key).digest() in _EXPORTED


def connect(registry: str | os.PathLike | None = None) -> sqlite3.Connection:
    """A connection to the registry, created (folder 0700, file 0600, tables) when missing."""
    path = registry_path(registry)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        connection.executescript(_SCHEMA)
    except (OSError, sqlite3.Error) as error:
        raise RegistryError(f"cannot open the lineage registry {path}: {error}") from None
    return connection


def ensure_schema(connection: sqlite3.Connection, schema: str = "main") -> None:
    """The registry's tables in the database attached as ``schema`` (the journal's connection)."""
    for statement in _SCHEMA.strip().split(";"):
        if statement.strip():
            connection.execute(statement.replace("IF NOT EXISTS ", f"IF NOT EXISTS {schema}.", 1))


def claim_generator(
    connection: sqlite3.Connection, *, key: bytes, lineage: str, what: str, state: str | None = None, schema: str = "main"
) -> None:
    """Bind a secure generator key to ``lineage`` (and record the lineage), or refuse it when it
    already feeds another lineage.

    Guarantee: one secure key feeds at most one lineage on this machine, so no two counters add
    the same noise to different data (their difference would reveal T·(x − x′) exactly)."""
    tag, now = generator_tag(key), time.time()
    row = connection.execute(f"SELECT lineage FROM {schema}.generators WHERE generator = ?", (tag,)).fetchone()
    if row is not None and row[0] != lineage:
        owner = connection.execute(f"SELECT what, state FROM {schema}.lineages WHERE lineage = ?", (row[0],)).fetchone()
        where = f" ({owner[0]}{', state ' + owner[1] if owner and owner[1] else ''})" if owner else ""
        raise RegistryError(
            f"this noise generator already feeds another counter{where}: its noise would be reused on other data; "
            "give each counter its own generator (NoiseGenerator.secure(), or generator.child(label))"
        )
    connection.execute(f"INSERT OR IGNORE INTO {schema}.generators VALUES (?, ?, ?)", (tag, lineage, now))
    connection.execute(
        f"INSERT OR IGNORE INTO {schema}.lineages VALUES (?, ?, ?, 0, ?, ?, ?)", (lineage, tag, state, what, now, now)
    )


def check_state(connection: sqlite3.Connection, *, lineage: str, state: Path, released: int, schema: str = "main") -> str:
    """Check a state (its lineage, its path resolved, its released steps) against the registry
    and bring the record up to date; returns "known", "moved" or "unknown" (the blind spot).

    Refuses a state whose released count differs from its lineage's (an old copy, or a newer
    one), and a copy at another path while the lineage's own state is still there."""
    row = connection.execute(f"SELECT state, released FROM {schema}.lineages WHERE lineage = ?", (lineage,)).fetchone()
    real = str(Path(state).resolve())
    if row is None:
        return "unknown"
    recorded, count = row
    if count != released:
        raise RegistryError(
            f"{state}: the state has released {released} step(s) but its lineage has released {count} "
            f"(registry {registry_path_of(connection, schema)}): it is a copy or an older version of "
            f"{recorded or 'another state'}; resuming it would reuse noise"
        )
    if recorded is not None and recorded != real:
        if Path(recorded).exists() and _same_lineage(Path(recorded), lineage):
            raise RegistryError(
                f"{state} is a copy of {recorded}, the state of this lineage: two copies of one state would release "
                "the same noise twice; resume the original"
            )
        connection.execute(f"UPDATE {schema}.lineages SET state = ?, updated = ? WHERE lineage = ?", (real, time.time(), lineage))
        return "moved"
    if recorded is None:
        connection.execute(f"UPDATE {schema}.lineages SET state = ? WHERE lineage = ?", (real, lineage))
    return "known"


def _same_lineage(path: Path, lineage: str) -> bool:
    """True when ``path`` is a journal of ``lineage`` (a state file that can be read without its lock)."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.1) as peek:
            row = peek.execute("SELECT value FROM header WHERE name = 'lineage'").fetchone()
    except sqlite3.Error as error:
        return "locked" in str(error)  # held by a running counter: certainly a live state
    return row is not None and row[0] == json.dumps(lineage)


def registry_path_of(connection: sqlite3.Connection, schema: str = "main") -> str:
    for _, name, file in connection.execute("PRAGMA database_list").fetchall():
        if name == schema:
            return file
    return "?"


def bind_key_file(key_file: Path, *, key: bytes, query: str, registry: str | os.PathLike | None = None) -> bool:
    """Bind a key file to the first query that uses it (``query``: its checkpoint or state path),
    or refuse a second query with an error naming the first. True when this call bound it
    (``unbind_key_file`` undoes that when the ledger then refuses the key)."""
    real, tag = str(Path(key_file).resolve()), generator_tag(key)
    query = str(query)
    connection = connect(registry)
    try:
        with connection:
            connection.execute("BEGIN IMMEDIATE")
            row = connection.execute("SELECT generator, query FROM key_files WHERE key_file = ?", (real,)).fetchone()
            if row is None:
                connection.execute("INSERT INTO key_files VALUES (?, ?, ?)", (real, tag, query))
                return True
            if row[1] != query:
                raise InvalidInputError(
                    f"key file {key_file} is bound to the query {row[1]}; a second query on one key would reuse its noise "
                    "on other data: give each query its own key file"
                )
            return False
    finally:
        connection.close()


def unbind_key_file(key_file: Path, *, query: str, registry: str | os.PathLike | None = None) -> None:
    """Undo a binding ``bind_key_file`` just made (the ledger refused the key file)."""
    connection = connect(registry)
    try:
        with connection:
            connection.execute(
                "DELETE FROM key_files WHERE key_file = ? AND query = ?", (str(Path(key_file).resolve()), str(query))
            )
    finally:
        connection.close()
