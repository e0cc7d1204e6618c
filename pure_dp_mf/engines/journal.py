"""The journal: a counter's state, one SQLite database, locked by its process, committed with the registry.

Every engine (one stream, many keys, the anytime counter; Spark through its driver) keeps its
state here. What it guarantees (proofs and the tests that attack each in docs/privacy.md,
"The system around the release"):

* **Atomic, durable commits.** A commit (``commit``) writes the new released count, the
  engine's progress record (prefix sums, post-processing, contribution bounds) and the released
  rows of the committed steps, and updates the lineage's record in the registry, in *one*
  SQLite transaction across both databases (the registry is attached to the state's
  connection; rollback journals, ``synchronous=FULL``): after a crash both hold the state before
  or both the state after. An engine commits before it shows a release, so a crash never loses
  a released step and never releases one twice.
* **One process, one state.** The state is opened in SQLite's exclusive locking mode and its
  lock taken before anything is read: a second process (or a second counter in this one, or the
  same file through a symlink or a hard link) is refused at once, and the kernel drops the lock
  when the process ends, however it ends. There is no lock file to delete.
* **No copy is ever resumed.** Opening checks the state against the registry (``registry.
  check_state``): a step count that differs from the lineage's, or a copy at another path while
  the lineage's own state still exists, is refused, at step 0 too. ``move`` carries a state to
  another path (the old file is marked moved and refused thereafter).
* **The generator key** (in the header) is claimed for the lineage in the registry: a key
  feeding another lineage is refused.

The released rows are kept in ``blocks`` (one row per commit: first and last step and the
rows), all of them (``history=True``: single counters, so that ``releases`` reads back what was
released and a re-run of a released step returns it; keyed counters, every key's counts of each
step) or the last commit's (keyed states made by earlier versions). A keyed run records, with
each step, the digest of the step's input events in ``step_inputs`` (``engines.partitions``: a
resumed run's input is checked against it, the events never stored).
States are created atomically (a temporary file, linked into place) with mode 0600: they hold
the generator key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pure_dp_mf.engines import registry as registry_module
from pure_dp_mf.errors import PureDPMFError

FORMAT = "pure_dp_mf.journal/2"
OLD_FORMAT = "pure_dp_mf.journal/1"  # the same tables without record digests: migrated on open (``_migrate``)
_TABLES = """
CREATE TABLE header (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE progress (id INTEGER PRIMARY KEY CHECK (id = 0), released INTEGER NOT NULL, record TEXT NOT NULL, digest TEXT);
CREATE TABLE blocks (first INTEGER PRIMARY KEY, last INTEGER NOT NULL, rows BLOB NOT NULL, digest TEXT);
"""


class StateFileError(PureDPMFError):
    """A counter state is missing, corrupted, in use, a copy, or belongs to another counter."""


class StorageError(PureDPMFError):
    """Writing a state or an output failed (a full disk, a file-size limit, a read-only place);
    the state is left as it was before the write."""


def storage_error(path: object, error: BaseException, *, state: bool = True) -> StorageError:
    """One line naming the path and the cause of a failed write; "the state is intact" only for a
    run with a state (``state``), where it is true (every write is after the state's commit or
    rolled back with it)."""
    reason = getattr(error, "strerror", None) or str(error)
    if not state:
        return StorageError(f"cannot write {path}: {reason}")
    return StorageError(f"cannot write {path}: {reason}; the state is intact, run again the same way to continue")


def encode_rows(rows: np.ndarray | Sequence) -> bytes:
    """Released rows as bytes: int64 when every value fits, else exact JSON integers."""
    array = np.asarray(rows)
    if array.dtype != object and np.issubdtype(array.dtype, np.integer):
        return b"i8" + json.dumps(list(array.shape)).encode() + b"\n" + np.ascontiguousarray(array, dtype="<i8").tobytes()
    return b"js" + json.dumps(np.asarray(rows, dtype=object).tolist(), default=int).encode()


def decode_rows(data: bytes) -> np.ndarray:
    """The inverse of ``encode_rows`` (an int64 array, or an object array of Python ints)."""
    if data[:2] == b"i8":
        shape_text, raw = data[2:].split(b"\n", 1)
        return np.frombuffer(raw, dtype="<i8").reshape(json.loads(shape_text)).copy()
    return np.array(json.loads(data[2:]), dtype=object)


def _checksum(header: dict) -> str:
    return hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()


def record_digest(lineage: str, kind: str, fields: Sequence[int | str], payload: bytes = b"") -> str:
    """The digest that authenticates one stored record: SHA-256 over the format, the state's
    lineage, the record's kind ("progress" or "blocks"), its fields and its payload, each
    length-delimited (JSON, then the raw bytes), so no two distinct records share an encoding. A
    record whose digest does not match is refused (``_verified``): a one-byte change of a stored
    record is never resumed or read back as a release. It detects corruption, not a forger who
    holds the file (the file holds everything such a forger needs, the generator key included)."""
    digest = hashlib.sha256(json.dumps([FORMAT, lineage, kind, *fields]).encode() + b"\x00")
    digest.update(payload)
    return digest.hexdigest()


def _verified(path: Path, what: str, stored: object, expected: str) -> None:
    if stored != expected:
        raise StateFileError(f"{path}: corrupted state ({what} fails its checksum); it is refused, restore a backup")


class Journal:
    """An open, locked state (module docstring). Made by ``create`` or ``open``; ``close`` it (or
    let the process end) to release it."""

    def __init__(self, path: Path, connection: sqlite3.Connection, header: dict, registry: Path) -> None:
        self.path = path
        self._connection: sqlite3.Connection | None = connection
        self.header = header
        self.registry = registry
        try:
            released, record, digest = connection.execute("SELECT released, record, digest FROM progress WHERE id = 0").fetchone()
            _verified(path, "the progress record", digest, record_digest(self.lineage, "progress", [int(released), record]))
            self.released: int = int(released)
            self.progress: dict = json.loads(record)
        except (sqlite3.Error, TypeError, ValueError):
            raise StateFileError(f"{path}: corrupted state (the progress record cannot be read)") from None
        self.resumed = False
        self.registry_status = "new"
        self.read_only = False

    # ------------------------------------------------------------------ opening

    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        *,
        header: dict,
        progress: dict,
        history: bool,
        registry: str | os.PathLike | None = None,
    ) -> Journal:
        """A new state at ``path`` (refused when the path exists), with ``header`` (must hold
        ``lineage`` and ``generator``, the generator's record), the engine's initial
        ``progress`` and its choice of ``history`` (keep every released block, or the last)."""
        path = Path(path)
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            raise StateFileError(f"cannot create the state {path}: folder {folder} does not exist")
        if path.exists() or path.is_symlink():
            raise StateFileError(f"{path} already exists; resume it, or choose another state path")
        header = {**header, "format": FORMAT, "history": bool(history), "created": time.time()}
        header["checksum"] = _checksum(header)
        _claim_first(header, registry)  # a generator that feeds another lineage is refused before any file exists
        temporary = folder / f".{path.name}.{uuid.uuid4().hex}.tmp"
        linked = False
        try:
            os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            with sqlite3.connect(temporary, isolation_level=None) as building:
                building.executescript(_TABLES)
                building.execute("BEGIN")
                building.executemany("INSERT INTO header VALUES (?, ?)", [(k, json.dumps(v)) for k, v in header.items()])
                record = json.dumps(progress)
                digest = record_digest(header["lineage"], "progress", [0, record])
                building.execute("INSERT INTO progress VALUES (0, 0, ?, ?)", (record, digest))
                building.execute("COMMIT")
            building.close()
            _fsync(temporary)
            os.link(temporary, path)  # fails if another process created it meanwhile: theirs stands
            linked = True
            _fsync(folder)
        except FileExistsError:
            raise StateFileError(f"{path} already exists; resume it, or choose another state path") from None
        except (OSError, sqlite3.Error) as error:
            if linked:
                path.unlink(missing_ok=True)  # nothing was released on it: a failed creation leaves no state
            reason = getattr(error, "strerror", None) or str(error)
            raise StorageError(f"cannot create the state {path}: {reason}; no state was created, nothing was released") from None
        finally:
            if temporary.exists():
                temporary.unlink()
        try:
            return cls.open(path, registry=registry, _new=True)
        except BaseException:
            path.unlink(missing_ok=True)  # nothing was released on it: a failed creation leaves no state
            raise

    @classmethod
    def open(
        cls, path: str | os.PathLike, *, registry: str | os.PathLike | None = None, _new: bool = False, read_only: bool = False
    ) -> Journal:
        """The state at ``path``, locked for this process and checked against the registry.

        ``read_only``: to read its releases back (``pure-dp-mf releases``), also when the registry
        does not know it; it commits nothing. To resume a state the registry does not know (one
        with released steps, moved here from another machine or registry), adopt it first
        (``pure-dp-mf ledger adopt STATE``, ``adopt``): a resume of an unknown state is refused.

        Raises:
            StateFileError: missing, not a state, corrupted, in use by another counter, moved.
            RegistryError: a copy, an older or newer version than its lineage's record, or a
                generator that feeds another lineage.
        """
        path, connection = _locked(path)
        try:
            header = _read_header(path, connection)
            if header.get("format") == OLD_FORMAT:
                header = _migrate(path, connection, header)
            if header.get("moved_to"):
                raise StateFileError(f"{path}: this state was moved to {header['moved_to']}; resume that one")
            registry_path = registry_module.registry_path(registry)
            if read_only:
                journal = cls(path, connection, header, registry_path)
                journal.registry_status, journal.resumed, journal.read_only = "read-only", True, True
                return journal
            _attach_registry(connection, registry_path)
            journal = cls(path, connection, header, registry_path)
            with _immediate(connection):
                journal.registry_status = registry_module.check_state(
                    connection, lineage=header["lineage"], state=path, released=journal.released, schema="registry"
                )
                if journal.registry_status == "unknown" and journal.released > 0 and not _new:
                    raise registry_module.RegistryError(
                        f"{path}: the lineage registry {registry_path} does not know this state ({journal.released} step(s) "
                        "released): a state moved from another machine or registry is taken over explicitly, once: "
                        f"pure-dp-mf ledger adopt {path} (to read its releases only: pure-dp-mf releases {path})"
                    )
                key = secure_key(header)
                if key is not None:
                    registry_module.claim_generator(
                        connection,
                        key=key,
                        lineage=header["lineage"],
                        what=str(header.get("what", "counter")),
                        schema="registry",
                    )
                if journal.registry_status == "unknown" or _new:
                    _record_lineage(connection, header, path, journal.released)
            journal.resumed = not _new
            return journal
        except (sqlite3.DatabaseError, ValueError, TypeError) as error:
            connection.close()
            raise StateFileError(f"{path}: corrupted state ({error})") from None
        except BaseException:
            connection.close()
            raise

    # ------------------------------------------------------------------ committing

    @property
    def lineage(self) -> str:
        return str(self.header["lineage"])

    def commit(
        self,
        *,
        released: int,
        progress: dict,
        first: int | None = None,
        rows: Any = None,
        also: Any = None,
        inputs: dict[int, str] | None = None,
    ) -> None:
        """One atomic, durable commit: the released count, the progress record, the released rows
        of steps ``first`` … released − 1 (0-based; kept as ``history`` says) and the lineage's
        record in the registry; ``also(connection)``, when given, joins the same transaction (the
        budget charge of a counter's first released step, ``budget.charge``); ``inputs`` {0-based
        step: digest of its input events} (``partitions.step_input_digest``) are recorded with it."""
        if self.read_only:
            raise StateFileError(f"{self.path}: opened to read its releases only; it releases nothing")
        record = json.dumps(progress)
        digest = record_digest(self.lineage, "progress", [int(released), record])
        with _transaction(self._live(), self.path) as connection:
            if also is not None:
                also(connection)
            connection.execute(
                "UPDATE progress SET released = ?, record = ?, digest = ? WHERE id = 0", (int(released), record, digest)
            )
            if inputs:
                connection.execute("CREATE TABLE IF NOT EXISTS main.step_inputs (step INTEGER PRIMARY KEY, digest TEXT NOT NULL)")
                connection.executemany("INSERT OR REPLACE INTO main.step_inputs VALUES (?, ?)", sorted(inputs.items()))
            if rows is not None and first is not None and released > first:
                if not self.header["history"]:
                    connection.execute("DELETE FROM blocks")
                data = encode_rows(rows)
                block_digest = record_digest(self.lineage, "blocks", [int(first), int(released) - 1], data)
                connection.execute(
                    "INSERT OR REPLACE INTO blocks VALUES (?, ?, ?, ?)", (int(first), int(released) - 1, data, block_digest)
                )
            changed = connection.execute(
                "UPDATE registry.lineages SET released = ?, updated = ? WHERE lineage = ?",
                (int(released), time.time(), self.lineage),
            ).rowcount
            if changed != 1:
                _record_lineage(connection, self.header, self.path, int(released))
        self.released, self.progress = int(released), progress

    def update_header(self, changes: dict) -> None:
        """Change header fields (what the counter runs from now on: an extended counter's
        mechanism) in one atomic, durable transaction; the lineage, generator and format stay."""
        fixed = {"lineage", "generator", "format", "checksum", "history", "created"}
        if fixed & set(changes):
            raise StateFileError(f"the header fields {sorted(fixed & set(changes))} of a state never change")
        header = {k: v for k, v in {**self.header, **changes}.items() if k not in ("checksum", "moved_to")}
        header["checksum"] = _checksum(header)
        with _transaction(self._live(), self.path) as connection:
            connection.executemany("INSERT OR REPLACE INTO header VALUES (?, ?)", [(k, json.dumps(v)) for k, v in header.items()])
        self.header = header

    def blocks(self, first: int = 0, stop: int | None = None) -> list[tuple[int, np.ndarray]]:
        """The kept released blocks overlapping steps [first, stop) (0-based): (first step, rows)."""
        stop = self.released if stop is None else stop
        connection = self._live()
        try:
            rows = connection.execute(
                "SELECT first, last, rows, digest FROM blocks WHERE last >= ? AND first < ? ORDER BY first",
                (int(first), int(stop)),
            ).fetchall()
        except sqlite3.Error:
            raise StateFileError(f"{self.path}: corrupted state (its released rows cannot be read)") from None
        out = []
        for start, last, data, digest in rows:
            what = f"the released rows of steps {int(start) + 1} … {int(last) + 1}"
            if not isinstance(data, bytes):
                raise StateFileError(f"{self.path}: corrupted state ({what} are not stored as bytes)")
            _verified(self.path, what, digest, record_digest(self.lineage, "blocks", [int(start), int(last)], data))
            try:
                block = decode_rows(data)
            except (ValueError, TypeError):
                raise StateFileError(f"{self.path}: corrupted state ({what} cannot be decoded)") from None
            if len(block) != int(last) - int(start) + 1:
                raise StateFileError(f"{self.path}: corrupted state ({what} hold {len(block)} rows)")
            out.append((int(start), block))
        kept = (max(int(first), 0), min(int(stop), self.released)) if self.header["history"] else None
        if kept is not None and kept[0] < kept[1]:  # every released step is kept: the blocks must tile the range
            ends = [(start, start + len(block)) for start, block in out]
            tiled = bool(ends) and ends[0][0] <= kept[0] and ends[-1][1] >= kept[1]
            tiled = tiled and all(a[1] == b[0] for a, b in zip(ends, ends[1:], strict=False))
            if not tiled:
                raise StateFileError(
                    f"{self.path}: corrupted state (the released rows of steps {kept[0] + 1} … {kept[1]} are incomplete)"
                )
        return out

    def step_inputs(self, stop: int) -> dict[int, str]:
        """{0-based step: digest of its input events} of the released steps before ``stop`` that
        recorded one (``commit``'s ``inputs``; none in a state written before they were recorded)."""
        try:
            rows = (
                self._live()
                .execute("SELECT step, digest FROM step_inputs WHERE step < ? AND step < ?", (int(stop), self.released))
                .fetchall()
            )
        except sqlite3.OperationalError:  # no such table: nothing recorded
            return {}
        return {int(step): str(digest) for step, digest in rows}

    def rows(self, first: int, stop: int) -> list:
        """The released rows of steps [first, stop) (0-based), as kept (a clear error for steps not kept)."""
        out: list = []
        for start, block in self.blocks(first, stop):
            for offset in range(max(first - start, 0), min(len(block), stop - start)):
                out.append(block[offset])
        if len(out) != stop - first:
            raise StateFileError(f"{self.path}: the state keeps the released rows of steps it last committed only")
        return out

    # ------------------------------------------------------------------ moving and closing

    def move(self, path: str | os.PathLike) -> None:
        """Carry this state to ``path`` (a new file, locked; the registry follows), and mark the old
        file moved: it is refused thereafter, so the two can never both release."""
        target = Path(path)
        if target.resolve() == self.path.resolve():
            return
        connection = self._live()
        folder = target.parent if str(target.parent) else Path(".")
        if target.exists() or not folder.is_dir():
            raise StateFileError(f"cannot move the state to {target}: it exists or its folder does not")
        temporary = folder / f".{target.name}.{uuid.uuid4().hex}.tmp"
        try:
            os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            connection.execute("VACUUM main INTO ?", (str(temporary),))
            _fsync(temporary)
            os.link(temporary, target)
            _fsync(folder)
        except (OSError, sqlite3.Error) as error:
            raise storage_error(target, error) from None
        finally:
            if temporary.exists():
                temporary.unlink()
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("INSERT OR REPLACE INTO header VALUES ('moved_to', ?)", (json.dumps(str(target.resolve())),))
        connection.execute(
            "UPDATE registry.lineages SET state = ?, updated = ? WHERE lineage = ?",
            (str(target.resolve()), time.time(), self.lineage),
        )
        connection.execute("COMMIT")
        self.close()
        moved = Journal.open(target, registry=self.registry)
        self.path, self._connection = moved.path, moved._connection
        moved._connection = None

    def close(self) -> None:
        """Release the state (also released when the process ends); the journal refuses commits after."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    @property
    def closed(self) -> bool:
        return self._connection is None

    def _live(self) -> sqlite3.Connection:
        if self._connection is None:
            raise StateFileError(f"{self.path}: the counter was closed or its state moved; it releases nothing more")
        return self._connection


# ------------------------------------------------------------------ helpers


@contextlib.contextmanager
def _immediate(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One IMMEDIATE transaction: committed when the block ends, rolled back (``_rollback``) on
    any exception, which is re-raised."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
        connection.execute("COMMIT")
    except BaseException:
        _rollback(connection)
        raise


@contextlib.contextmanager
def _transaction(connection: sqlite3.Connection, path: Path) -> Iterator[sqlite3.Connection]:
    """``_immediate``, an SQLite error becoming the package's ``StorageError`` naming ``path``."""
    try:
        with _immediate(connection):
            yield connection
    except sqlite3.Error as error:
        raise storage_error(path, error) from None


def _rollback(connection: sqlite3.Connection) -> None:
    """Roll back the open transaction, if any. SQLite may already have rolled it back itself (a
    full disk, SQLITE_FULL): a failed ROLLBACK then says nothing new, and the error that caused it
    is the one raised."""
    if connection.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            connection.execute("ROLLBACK")


def _locked(path: str | os.PathLike) -> tuple[Path, sqlite3.Connection]:
    """The state file at ``path`` (refused when there is none) and a connection holding its lock."""
    path = Path(path)
    if not path.is_file():
        raise StateFileError(f"{path}: no such state file")
    return path, _lock(path)


def _lock(path: Path) -> sqlite3.Connection:
    """A connection holding the state's exclusive lock (refused at once when another holds it)."""
    try:
        connection = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            connection.execute("PRAGMA main.locking_mode = EXCLUSIVE")
            connection.execute("PRAGMA main.journal_mode = DELETE")
            connection.execute("PRAGMA main.synchronous = FULL")
            connection.execute("BEGIN EXCLUSIVE")
            connection.execute("COMMIT")
        except BaseException:
            connection.close()  # a refused state keeps no lock behind (a lock left to the collector refuses the next open)
            raise
    except sqlite3.OperationalError as error:
        if "locked" in str(error) or "busy" in str(error):
            raise StateFileError(
                f"{path} is in use by another counter (its lock is held); two runs on one state would release the same "
                "steps twice"
            ) from None
        raise StateFileError(f"{path}: not a counter state ({error})") from None
    except sqlite3.DatabaseError as error:
        raise StateFileError(f"{path}: not a counter state ({error})") from None
    except ValueError:  # text SQLite hands back that is not UTF-8: a damaged file
        raise StateFileError(f"{path}: not a counter state (its database header cannot be read)") from None
    return connection


def _read_header(path: Path, connection: sqlite3.Connection) -> dict:
    try:
        header = {name: json.loads(value) for name, value in connection.execute("SELECT name, value FROM header")}
        connection.execute("SELECT released, record FROM progress WHERE id = 0").fetchone()
    except (sqlite3.Error, ValueError, TypeError):
        raise StateFileError(f"{path}: not a counter state (format {FORMAT!r} expected)") from None
    moved = header.pop("moved_to", None)
    if header.get("format") not in (FORMAT, OLD_FORMAT):
        raise StateFileError(f"{path}: not a counter state of this version (format {FORMAT!r} expected)")
    if header.get("checksum") != _checksum({k: v for k, v in header.items() if k != "checksum"}):
        raise StateFileError(f"{path}: corrupted state (header checksum mismatch)")
    if not isinstance(header.get("lineage"), str):
        raise StateFileError(f"{path}: corrupted state (no lineage)")
    if moved:
        header["moved_to"] = moved
    return header


def _migrate(path: Path, connection: sqlite3.Connection, header: dict) -> dict:
    """Carry a state of the older format (``OLD_FORMAT``: the header checksummed, its other records
    not) to ``FORMAT``, in one transaction: a digest column for the progress record and the
    released rows, each record's digest computed from the record as it is now, and the header's
    format. The older format could not tell a corrupted record from a sound one, so the migration
    cannot either: it authenticates the records from now on (docs/privacy.md, "The system around the release")."""
    lineage = str(header["lineage"])
    try:
        with _transaction(connection, path):
            for table in ("progress", "blocks"):
                columns = [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
                if "digest" not in columns:
                    connection.execute(f"ALTER TABLE {table} ADD COLUMN digest TEXT")
            for released, record in connection.execute("SELECT released, record FROM progress").fetchall():
                connection.execute(
                    "UPDATE progress SET digest = ? WHERE id = 0", (record_digest(lineage, "progress", [int(released), record]),)
                )
            for first, last, data in connection.execute("SELECT first, last, rows FROM blocks").fetchall():
                connection.execute(
                    "UPDATE blocks SET digest = ? WHERE first = ?",
                    (record_digest(lineage, "blocks", [int(first), int(last)], bytes(data)), first),
                )
            migrated = {k: v for k, v in header.items() if k not in ("checksum", "moved_to")}
            migrated["format"] = FORMAT
            migrated["checksum"] = _checksum(migrated)
            connection.executemany(
                "INSERT OR REPLACE INTO header VALUES (?, ?)", [(k, json.dumps(v)) for k, v in migrated.items()]
            )
    except (TypeError, ValueError):
        raise StateFileError(f"{path}: corrupted state (a record of the older format cannot be read)") from None
    if header.get("moved_to"):
        migrated["moved_to"] = header["moved_to"]
    return migrated


def _claim_first(header: dict, registry: str | os.PathLike | None) -> None:
    """Claim the header's secure generator for its lineage in the registry (``registry.claim_generator``)."""
    key = secure_key(header)
    if key is None:
        return
    connection = registry_module.connect(registry)
    try:
        with _immediate(connection):
            registry_module.claim_generator(
                connection, key=key, lineage=header["lineage"], what=str(header.get("what", "counter"))
            )
    finally:
        connection.close()


def _attach_registry(connection: sqlite3.Connection, path: Path) -> None:
    registry_module.connect(path).close()  # create it (folder 0700, file 0600, tables) when missing
    connection.execute(f"PRAGMA busy_timeout = {registry_module.BUSY_TIMEOUT_MS}")
    connection.execute("ATTACH DATABASE ? AS registry", (str(path),))
    connection.execute("PRAGMA registry.journal_mode = DELETE")
    connection.execute("PRAGMA registry.synchronous = FULL")


def peek_lineage(path: str | os.PathLike) -> str:
    """The lineage of the state at ``path`` (its header read under its lock, nothing else)."""
    path, connection = _locked(path)
    try:
        return str(_read_header(path, connection)["lineage"])
    finally:
        connection.close()


def adopt(path: str | os.PathLike, *, registry: str | os.PathLike | None = None) -> dict:
    """Take over a state this registry does not know (moved here from another machine or
    registry): its lineage and generator are recorded with its released count, so it can be
    resumed here. Refused when the registry knows its lineage or its generator already (the
    state is then known, or a copy). Returns the state's lineage and released count."""
    path, connection = _locked(path)
    try:
        header = _read_header(path, connection)
        if header.get("moved_to"):
            raise StateFileError(f"{path}: this state was moved to {header['moved_to']}; adopt that one")
        released = int(connection.execute("SELECT released FROM progress WHERE id = 0").fetchone()[0])
        _attach_registry(connection, registry_module.registry_path(registry))
        with _immediate(connection):
            known = connection.execute("SELECT state FROM registry.lineages WHERE lineage = ?", (header["lineage"],)).fetchone()
            if known is not None:
                raise registry_module.RegistryError(
                    f"{path}: this registry knows the state's lineage already (at {known[0]}); nothing to adopt"
                )
            key = secure_key(header)
            if key is not None:
                registry_module.claim_generator(
                    connection, key=key, lineage=header["lineage"], what=str(header.get("what", "counter")), schema="registry"
                )
            _record_lineage(connection, header, path, released)
    finally:
        connection.close()
    return {"lineage": header["lineage"], "released": released, "seeded": secure_key(header) is None}


def _record_lineage(connection: sqlite3.Connection, header: dict, path: Path, released: int) -> None:
    now = time.time()
    key = secure_key(header)
    tag = registry_module.generator_tag(key) if key is not None else "seeded"
    connection.execute(
        "INSERT OR REPLACE INTO registry.lineages VALUES (?, ?, ?, ?, ?, ?, ?)",
        (header["lineage"], tag, str(path.resolve()), int(released), str(header.get("what", "counter")), now, now),
    )


def secure_key(header: dict) -> bytes | None:
    """The secure generator key of a state's header (its ``generator`` record), None when seeded."""
    record = header.get("generator")
    if not isinstance(record, dict) or record.get("seeded", True):
        return None
    try:
        return bytes.fromhex(str(record["key"]))
    except (KeyError, ValueError):
        raise StateFileError("corrupted state (its generator record has no valid key)") from None


def _fsync(path: Path) -> None:
    """Flush the file or folder at ``path`` to disk (a folder: the names it holds)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
