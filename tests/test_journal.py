"""engines/journal.py and engines/registry.py: every ordinary operation that used to reuse noise,
tried as an attacker would, is refused. Each attack below recovered T·(x − x′) exactly from
version 0.1 (two releases of the same noise on different data): a deleted stale lock file, a
second path to the same state (a symlink), a copy of a state (before or after its first step),
an older snapshot of a state, a closed or saved-away counter that keeps releasing, one key file
serving two queries, a generator reused by a counter in another process, a caller-chosen lineage."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import ROOT, SAFETY_LIMIT

from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.journal import Journal, StateFileError, decode_rows, encode_rows
from pure_dp_mf.engines.keyed import KeyedCounters
from pure_dp_mf.engines.registry import RegistryError, registry_path
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.resources import BASE_FOLDER

BASE = BASE_FOLDER / "k008_maxse.npz"


def _counter(rng: NoiseGenerator | None = None, horizon: int = 40) -> ContinualCounter:
    return ContinualCounter(base=BASE, epsilon=1.0, horizon=horizon, generator=rng or NoiseGenerator.secure())


def _run(code: str) -> subprocess.CompletedProcess:
    """Python code in another process (the same registry: the environment is inherited)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT, timeout=SAFETY_LIMIT
    )


def test_the_state_itself_is_locked_no_lock_file_to_delete(tmp_path):
    path = tmp_path / "state.db"
    counter = _counter()
    counter.save_state(path)
    counter.counts([1, 0, 1])
    beside = sorted(p.name for p in tmp_path.iterdir())
    assert set(beside) <= {"state.db", "state.db-journal"}  # no .lock, no ledger: SQLite's own rollback journal only
    for name in beside[1:]:
        (tmp_path / name).unlink()  # deleting what lies beside the state unlocks nothing
    assert os.stat(path).st_mode & 0o777 == 0o600  # it holds the generator key
    with pytest.raises(StateFileError, match="in use by another counter"):
        ContinualCounter.resume(path)  # this process, a second counter
    other = _run(f"from pure_dp_mf.engines.continual import ContinualCounter; ContinualCounter.resume({str(path)!r})")
    assert other.returncode != 0 and "in use by another counter" in other.stderr  # another process
    counter.close()
    resumed = ContinualCounter.resume(path)
    assert resumed.released == 3


def test_a_killed_holder_releases_the_lock_with_its_process(tmp_path):
    path = tmp_path / "state.db"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            from pure_dp_mf.engines.continual import ContinualCounter
            from pure_dp_mf.engines.generator import NoiseGenerator
            counter = ContinualCounter(base={str(BASE)!r}, epsilon=1.0, horizon=40, generator=NoiseGenerator.secure())
            counter.save_state({str(path)!r})
            counter.counts([1, 1])
            print("ready", flush=True)
            time.sleep(600)
            """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert holder.stdout.readline().strip() == "ready"
    with pytest.raises(StateFileError, match="in use"):
        ContinualCounter.resume(path)
    holder.kill()  # kill -9: no clean-up runs
    holder.wait()
    assert ContinualCounter.resume(path).released == 2


def test_a_symlink_or_hard_link_reaches_the_same_lock(tmp_path):
    path = tmp_path / "state.db"
    counter = _counter()
    counter.save_state(path)
    (tmp_path / "link.db").symlink_to(path)
    os.link(path, tmp_path / "hard.db")
    for other in ("link.db", "hard.db"):
        with pytest.raises(StateFileError, match="in use"):
            ContinualCounter.resume(tmp_path / other)


def test_a_copy_made_before_the_first_step_is_refused_once_the_original_releases(tmp_path):
    path = tmp_path / "state.db"
    counter = _counter()
    counter.save_state(path)
    counter.close()
    shutil.copy(path, tmp_path / "copy.db")  # released = 0: v0.1 needed no ledger for it
    original = ContinualCounter.resume(path)
    original.counts([1, 0, 1, 1])
    original.close()
    with pytest.raises(RegistryError, match="released 0 step.*lineage has released 4"):
        ContinualCounter.resume(tmp_path / "copy.db")


def test_a_copy_is_refused_while_its_original_is_there_and_an_old_snapshot_always(tmp_path):
    path = tmp_path / "state.db"
    counter = _counter()
    counter.save_state(path)
    counter.counts([1, 1])
    counter.close()
    shutil.copy(path, tmp_path / "copy.db")
    with pytest.raises(RegistryError, match="copy of"):
        ContinualCounter.resume(tmp_path / "copy.db")  # the same step count, another path
    snapshot = path.read_bytes()
    resumed = ContinualCounter.resume(path)
    resumed.counts([0, 1, 0])
    resumed.close()
    path.write_bytes(snapshot)  # the state as it was two releases ago
    with pytest.raises(RegistryError, match="released 2 step.*lineage has released 5"):
        ContinualCounter.resume(path)


def test_a_moved_state_resumes_and_save_state_moves_it_for_good(tmp_path):
    path = tmp_path / "state.db"
    counter = _counter()
    counter.save_state(path)
    counter.counts([1])
    counter.close()
    os.rename(path, tmp_path / "renamed.db")  # mv: the original is gone, so this is no copy
    resumed = ContinualCounter.resume(tmp_path / "renamed.db")
    resumed.save_state(tmp_path / "moved.db")  # the lock moves with it
    resumed.counts([1, 1])
    with pytest.raises(StateFileError, match="moved to"):
        ContinualCounter.resume(tmp_path / "renamed.db")
    assert resumed.state_path == tmp_path / "moved.db"
    resumed.close()
    with pytest.raises(StateFileError, match="closed"):
        resumed.counts([1])  # a closed counter releases nothing more
    assert ContinualCounter.resume(tmp_path / "moved.db").released == 3


def test_a_keyed_save_state_moves_the_lock_and_the_old_run_stops(tmp_path):
    keyed = KeyedCounters(keys=["a", "b"], epsilon=1.0, horizon=10, base=BASE, generator=NoiseGenerator.secure())
    keyed.save_state(tmp_path / "one.db")
    keyed.release(np.array([1, 0]))
    keyed.save_state(tmp_path / "two.db")
    with pytest.raises(StateFileError, match="moved to"):
        KeyedCounters.resume(tmp_path / "one.db", keys=["a", "b"], epsilon=1.0, horizon=10, base=BASE)
    with pytest.raises(StateFileError, match="in use"):
        KeyedCounters.resume(tmp_path / "two.db", keys=["a", "b"], epsilon=1.0, horizon=10, base=BASE)
    keyed.close()
    with pytest.raises(StateFileError, match="closed"):
        keyed.release(np.array([1, 1]))


def test_one_generator_feeds_one_counter_across_processes(tmp_path):
    rng = NoiseGenerator.secure()
    first = _counter(rng)
    first.save_state(tmp_path / "first.db")
    with pytest.raises(InvalidInputError, match="already feeds another counter"):
        _counter(rng)  # this process
    record = rng.to_record()
    other = _run(f"""
        from pure_dp_mf.engines.continual import ContinualCounter
        from pure_dp_mf.engines.generator import NoiseGenerator
        rng = NoiseGenerator.from_record({record!r})
        counter = ContinualCounter(base={str(BASE)!r}, epsilon=1.0, horizon=40, generator=rng)
        counter.save_state({str(tmp_path / "second.db")!r})
        """)
    assert other.returncode != 0 and "already feeds another counter" in other.stderr
    assert not (tmp_path / "second.db").exists()
    child = _counter(rng.child("second"))  # a child generator is another key: accepted
    assert not np.array_equal(first.counts(np.zeros(5, dtype=int)), child.counts(np.zeros(5, dtype=int)))


def test_a_key_file_is_bound_to_its_first_query(tmp_path):
    key_file = tmp_path / "noise.key"
    first = NoiseGenerator.from_key_file(key_file, query=tmp_path / "checkpoint-a")
    assert NoiseGenerator.from_key_file(key_file, query=tmp_path / "checkpoint-a") == first  # a restart of the query
    with pytest.raises(InvalidInputError, match="bound to the query .*checkpoint-a"):
        NoiseGenerator.from_key_file(key_file, query=tmp_path / "checkpoint-b")
    other = _run(f"""
        from pure_dp_mf.engines.generator import NoiseGenerator
        NoiseGenerator.from_key_file({str(key_file)!r}, query="another process, another query")
        """)
    assert other.returncode != 0 and "bound to the query" in other.stderr


def test_no_public_api_takes_a_lineage():
    from pure_dp_mf.engines import spark

    for function in (ContinualCounter, KeyedCounters, spark.private_running_counts, spark.private_running_counts_stream):
        assert "lineage" not in inspect.signature(function).parameters


def test_the_registry_and_the_state_commit_together(tmp_path):
    """The lineage's record follows every commit; a journal committed to by hand keeps both in step."""
    import sqlite3

    counter = _counter()
    counter.save_state(tmp_path / "s.db")
    counter.counts([1, 1, 1])
    with sqlite3.connect(registry_path()) as registry:
        (released,) = registry.execute("SELECT released FROM lineages WHERE lineage = ?", (counter.lineage,)).fetchone()
    assert released == counter.journal.released == 3
    counter.close()
    with pytest.raises(StateFileError, match="no such state"):
        Journal.open(tmp_path / "missing.db")
    (tmp_path / "not-a-state.db").write_text("hello")
    with pytest.raises(StateFileError, match="not a counter state"):
        Journal.open(tmp_path / "not-a-state.db")


def test_rows_round_trip_in_int64_and_beyond():
    small = np.arange(12, dtype=np.int64).reshape(4, 3)
    assert np.array_equal(decode_rows(encode_rows(small)), small)
    big = np.array([[2**70, -(2**65)], [1, 2]], dtype=object)
    assert decode_rows(encode_rows(big)).tolist() == big.tolist()
