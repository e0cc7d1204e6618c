"""Every stored record of a state is authenticated (engines/journal.py): the progress record and
the released rows carry a digest (``journal.record_digest``), the header its checksum. A state
with any single-byte change is refused or resumed exactly, never served as a different release."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.journal import OLD_FORMAT, Journal, StateFileError
from pure_dp_mf.errors import PureDPMFError
from pure_dp_mf.resources import BASE_FOLDER

BASE = BASE_FOLDER / "k004_maxse.npz"


def _state(path, *, steps=(1, 0, 1, 1)) -> None:
    counter = ContinualCounter(base=BASE, epsilon=1.0, horizon=8, generator=NoiseGenerator.secure())
    counter.save_state(path)
    counter.counts(list(steps[:2]))
    counter.counts(list(steps[2:]))
    counter.close()


def _contents(path) -> tuple:
    """What a resume serves: the header, the released count, the progress record, every kept block."""
    journal = Journal.open(path)
    try:
        blocks = [(start, np.asarray(rows, dtype=object).tolist()) for start, rows in journal.blocks(0)]
        return json.dumps(journal.header, sort_keys=True), journal.released, json.dumps(journal.progress), blocks
    finally:
        journal.close()


def _edit(path, sql: str, *parameters) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(sql, parameters)
    connection.close()


def test_an_edited_progress_record_is_refused_naming_it(tmp_path):
    path = tmp_path / "s.db"
    _state(path)
    record = json.loads(sqlite3.connect(path).execute("SELECT record FROM progress").fetchone()[0])
    record["sums"] = [int(record["sums"][0]) + 5]  # the attack of the sweep: [2] → [7], step 5 released off by 5
    _edit(path, "UPDATE progress SET record = ?", json.dumps(record))
    with pytest.raises(StateFileError, match="progress record fails its checksum"):
        ContinualCounter.resume(path)


def test_an_edited_release_is_refused_naming_its_steps(tmp_path):
    path = tmp_path / "s.db"
    _state(path)
    data = bytearray(sqlite3.connect(path).execute("SELECT rows FROM blocks WHERE first = 2").fetchone()[0])
    data[-3] ^= 0x01
    _edit(path, "UPDATE blocks SET rows = ? WHERE first = 2", bytes(data))
    with (
        Counter(epsilon=1.0, horizon=8, base=BASE, state=path) as counter,
        pytest.raises(StateFileError, match="steps 3 … 4 fails its checksum"),
    ):
        counter.releases()


def test_a_moved_block_is_refused(tmp_path):
    path = tmp_path / "s.db"
    _state(path)
    _edit(path, "UPDATE blocks SET last = 2 WHERE first = 0")  # the rows of steps 1, 2 claimed for 1 … 3
    with (
        Counter(epsilon=1.0, horizon=8, base=BASE, state=path) as counter,
        pytest.raises(StateFileError, match="fails its checksum"),
    ):
        counter.releases(first_step=1, last_step=4)


def test_every_single_byte_change_is_refused_or_resumed_exactly(tmp_path):
    path = tmp_path / "s.db"
    _state(path)
    with sqlite3.connect(path) as connection:  # the smallest pages SQLite allows: fewer bytes to flip
        connection.execute("PRAGMA page_size = 512")
        connection.execute("VACUUM")
    connection.close()
    original = path.read_bytes()
    expected = _contents(path)
    outcomes = {"refused": 0, "same": 0}
    for position in range(len(original)):
        changed = bytearray(original)
        changed[position] ^= 0xFF if position % 2 else 0x01
        path.write_bytes(bytes(changed))
        try:
            seen = _contents(path)
        except PureDPMFError:
            outcomes["refused"] += 1
            continue
        assert seen == expected, f"byte {position} changed what the state serves"
        outcomes["same"] += 1
    path.write_bytes(original)
    assert _contents(path) == expected
    assert outcomes["refused"] > 100 and outcomes["same"] > 0  # both happen: the loop tried real changes


def test_a_state_of_the_older_format_is_migrated_and_authenticated(tmp_path):
    path = tmp_path / "s.db"
    _state(path)
    expected = _contents(path)
    header = {row[0]: json.loads(row[1]) for row in sqlite3.connect(path).execute("SELECT name, value FROM header")}
    header["format"] = OLD_FORMAT
    import hashlib

    header["checksum"] = hashlib.sha256(
        json.dumps({k: v for k, v in header.items() if k != "checksum"}, sort_keys=True).encode()
    ).hexdigest()
    with sqlite3.connect(path) as connection:  # what version 1 wrote: no digest column
        for name, value in header.items():
            connection.execute("UPDATE header SET value = ? WHERE name = ?", (json.dumps(value), name))
        for table in ("progress", "blocks"):
            connection.execute(f"ALTER TABLE {table} DROP COLUMN digest")
    connection.close()
    migrated = _contents(path)
    assert migrated[1:] == expected[1:]  # the same released count, progress and rows
    assert json.loads(migrated[0])["format"] != OLD_FORMAT
    _edit(path, "UPDATE progress SET record = replace(record, '\"sums\": [', '\"sums\": [1')")
    with pytest.raises(StateFileError, match="fails its checksum"):
        Journal.open(path)


def test_a_failed_commit_raises_its_own_error_not_a_failed_rollback(tmp_path, monkeypatch):
    from pure_dp_mf.engines import journal as journal_module
    from pure_dp_mf.engines.journal import StorageError

    path = tmp_path / "s.db"
    _state(path)
    journal = Journal.open(path)

    class Full:
        """A connection on a full disk: the write fails, SQLite rolls back by itself, then ROLLBACK fails."""

        def __init__(self, real):
            self.real, self.in_transaction = real, False

        def execute(self, sql, *parameters):
            if sql.startswith("UPDATE progress"):
                self.in_transaction = True
                raise sqlite3.OperationalError("database or disk is full")
            if sql == "ROLLBACK":
                raise sqlite3.OperationalError("cannot rollback - no transaction is active")
            return self.real.execute(sql, *parameters)

    monkeypatch.setattr(journal, "_connection", Full(journal._connection))
    with pytest.raises(StorageError, match="disk is full"):
        journal.commit(released=5, progress={"sums": [9]})
    monkeypatch.undo()
    journal._connection.execute("ROLLBACK")
    journal.close()
    assert journal_module.FORMAT.endswith("/2")
