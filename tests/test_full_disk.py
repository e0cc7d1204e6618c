"""A full disk, for real: a small tmpfs is mounted (the test is skipped where mounting is not
allowed) and filled. A state or an output that cannot be written ends in one ``error:`` line,
and the line says the state is intact only when it is: a failed creation leaves no state, a
state that fills mid-run resumes, once there is room, to exactly the releases of a run that
never stopped. The same refusals with ENOSPC injected run everywhere (no mount needed)."""

from __future__ import annotations

import errno
import gc
import io
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import SAFETY_LIMIT, one_error_line, run_cli, run_main

LINES = "".join(f"{i % 2}\n" for i in range(20_000))


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs at tmp_path/disk, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("cannot run mount here")
    if done.returncode != 0:
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, timeout=60)


def fill(disk: Path, *, leave_kib: int) -> Path:
    """Fill ``disk`` up to ``leave_kib`` KiB of free room (a filler file, deleted to make room)."""
    filler = disk / f"filler-{uuid.uuid4().hex}"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb") as handle:
        remaining = max(free - leave_kib * 1024, 0)
        while remaining > 0:
            chunk = min(remaining, 1 << 16)
            try:
                handle.write(b"\0" * chunk)
                handle.flush()
            except OSError:
                break
            remaining -= chunk
    return filler


def error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and lines and lines[-1].startswith("error: "), result.stderr[-2000:]
    return lines[-1]


def test_a_state_that_cannot_be_created_leaves_none_and_says_so(small_disk):
    fill(small_disk, leave_kib=0)
    state = small_disk / "s.db"
    line = error_line(run_cli("count", "--epsilon", "1", "--horizon", "8", "--state", str(state), input_text="1\n0\n"))
    assert line.startswith(f"error: cannot create the state {state}") and "no state was created" in line
    assert "intact" not in line
    assert [p.name for p in small_disk.iterdir() if not p.name.startswith("filler-")] == []  # no state, no temporary


def test_a_state_that_fills_up_mid_run_is_intact_and_resumes_exactly(small_disk, tmp_path):
    reference = tmp_path / "reference.db"
    arguments = ["count", "--epsilon", "1", "--horizon", "100000", "--seed", "3"]
    assert run_cli(*arguments, "--state", str(reference), input_text=LINES).returncode == 0
    filler = fill(small_disk, leave_kib=96)
    state = small_disk / "s.db"
    line = error_line(run_cli(*arguments, "--state", str(state), input_text=LINES))
    assert line.startswith(f"error: cannot write {state}") and line.endswith(
        "the state is intact, run again the same way to continue"
    )
    filler.unlink()
    resumed = run_cli(*arguments, "--state", str(state), input_text=LINES)
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr[-2000:]
    first = run_cli("releases", str(reference))
    second = run_cli("releases", str(state))
    assert first.returncode == second.returncode == 0
    assert second.stdout == first.stdout and len(first.stdout.splitlines()) == 20_001


def test_an_output_on_a_full_disk_is_one_error_line_and_the_state_resumes(small_disk, tmp_path):
    fill(small_disk, leave_kib=0)
    output, state = small_disk / "out.csv", tmp_path / "s.db"
    arguments = ["count", "--epsilon", "1", "--horizon", "100", "--seed", "3", "--format", "csv"]
    line = error_line(run_cli(*arguments, "--output", str(output), input_text="1\n0\n1\n"))
    assert line.startswith(f"error: cannot write {output}") and "state" not in line  # no state: nothing said about one
    line = error_line(run_cli(*arguments, "--state", str(state), "--output", str(output), input_text="1\n0\n1\n"))
    assert line.endswith("the state is intact, run again the same way to continue")
    elsewhere = tmp_path / "out.csv"
    resumed = run_cli(*arguments, "--state", str(state), "--output", str(elsewhere), input_text="1\n0\n1\n")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert len(elsewhere.read_text().splitlines()) == 4  # the header and the three steps


@pytest.mark.parametrize("command", ["keyed", "certify"])
def test_other_outputs_on_a_full_disk_are_one_error_line(small_disk, tmp_path, command):
    from pure_dp_mf.resources import BASE_FOLDER

    fill(small_disk, leave_kib=0)
    if command == "keyed":
        rows, keys = tmp_path / "rows.csv", tmp_path / "keys.txt"
        rows.write_text("step,key\n1,FR\n2,DE\n")
        keys.write_text("FR\nDE\n")
        arguments = ["count", str(rows), "--key-column", "key", "--keys", str(keys), "--step-column", "step"]
        arguments += ["--epsilon", "1", "--horizon", "4", "--format", "csv", "--output", str(small_disk / "o.csv")]
    else:
        arguments = ["certify", str(BASE_FOLDER / "k004_maxse.npz"), "--metric", "maxse", "--out", str(small_disk / "c.json")]
    line = error_line(run_cli(*arguments))
    assert line.startswith(f"error: cannot write {small_disk}") and "No space left on device" in line
    assert "intact" not in line


# ------------------------------------------------------------------ the same, with ENOSPC injected (no mount needed)


def no_room(*arguments, **options):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_injected_no_room_for_a_new_state_leaves_none(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "link", no_room)  # the last step of Journal.create
    state = tmp_path / "s.db"
    code, out, err = run_main("count", "--epsilon", "1", "--horizon", "8", "--state", str(state), stdin="1\n0\n")
    one_error_line(code, out, err, f"cannot create the state {state}", "no state was created")
    assert "intact" not in err and out == ""
    assert list(tmp_path.iterdir()) == []  # neither the state nor its temporary


def test_injected_no_room_for_the_sidecar_is_one_error_line(tmp_path, monkeypatch):
    from pure_dp_mf import atomic

    def refuse(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(atomic, "atomic_write_bytes", refuse)
    output = tmp_path / "o.csv"
    arguments = ["count", "--epsilon", "1", "--horizon", "8", "--seed", "1", "--format", "csv", "--output", str(output)]
    code, out, err = run_main(*arguments, stdin="1\n")
    last = err.strip().splitlines()[-1]
    assert code == 2 and out == "" and "Traceback" not in err
    assert last == f"error: cannot write {output}.meta.json: No space left on device" and not output.exists()
    code, out, err = run_main(*arguments, "--state", str(tmp_path / "s.db"), stdin="1\n")
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith("the state is intact, run again the same way to continue")
    gc.collect()  # the in-process run's state lock goes with its counter
    monkeypatch.undo()
    code, out, err = run_main(*arguments, "--state", str(tmp_path / "s.db"), stdin="1\n")
    assert code == 0 and len(output.read_text().splitlines()) == 2, err  # resumed: the header and the step


def test_atomic_writes_name_their_file_when_the_disk_is_full(tmp_path, monkeypatch):
    from pure_dp_mf import atomic

    class Full(io.BytesIO):
        def flush(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fdopen", lambda handle, mode: (os.close(handle), Full())[1])
    target = tmp_path / "x.json"
    with pytest.raises(OSError) as raised:
        atomic.atomic_write_bytes(target, b"{}")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []  # the temporary is gone


def test_no_room_met_anywhere_is_one_error_line(tmp_path, monkeypatch):
    from pure_dp_mf import atomic
    from pure_dp_mf.resources import BASE_FOLDER

    def refuse(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(atomic, "atomic_write_bytes", refuse)
    target = tmp_path / "c.json"
    code, out, err = run_main("certify", str(BASE_FOLDER / "k004_maxse.npz"), "--metric", "maxse", "--out", str(target))
    one_error_line(code, out, err, f"cannot write {target}: No space left on device")


def limited(*arguments: str, stdin: str = "1\n0\n") -> subprocess.CompletedProcess:
    """``pure-dp-mf ARGUMENTS`` held to 4 GiB of address space (a regression that reads a device
    forever fails the test with an error, not the machine)."""
    import resource
    import sys

    from conftest import ROOT

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run(
        [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=SAFETY_LIMIT,
        preexec_fn=cap,
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_resumed_run_never_reads_a_device_as_its_output(tmp_path):
    """A state whose output went to /dev/full, resumed the same way: /dev/full is not read to be
    completed (it reads zeros forever: 19 GB before a kill), it is refused in one line."""
    arguments = ["count", "--epsilon", "1", "--horizon", "8", "--output", "/dev/full", "--state", str(tmp_path / "s.db")]
    assert error_line(limited(*arguments)).endswith("the state is intact, run again the same way to continue")
    assert (
        error_line(limited(*arguments))
        == "error: --output /dev/full is not a regular file: a resumed run completes its output file in place"
    )
    elsewhere = tmp_path / "out.txt"
    arguments[arguments.index("/dev/full")] = str(elsewhere)
    done = limited(*arguments)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(elsewhere.read_text().splitlines()) == 4  # the two steps kept in the state, then two more


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_keyed_output_on_a_full_device_is_one_error_line_naming_it(tmp_path):
    rows, keys = tmp_path / "rows.csv", tmp_path / "keys.txt"
    rows.write_text("step,key\n1,FR\n2,DE\n")
    keys.write_text("FR\nDE\n")
    arguments = ["count", str(rows), "--key-column", "key", "--keys", str(keys), "--step-column", "step"]
    arguments += ["--epsilon", "1", "--horizon", "4", "--format", "csv", "--output", "/dev/full"]
    assert error_line(limited(*arguments)) == "error: cannot write /dev/full: No space left on device"  # no state
    state = ["--state", str(tmp_path / "s.db")]
    assert error_line(limited(*arguments, *state)).endswith("the state is intact, run again the same way to continue")
    assert error_line(limited(*arguments, *state)).endswith(
        "is not a regular file: a resumed run completes its output file in place"
    )
    arguments[arguments.index("/dev/full")] = str(tmp_path / "out.csv")
    done = limited(*arguments, *state)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len((tmp_path / "out.csv").read_text().splitlines()) == 1 + 2 * 4  # the header, two keys at four steps
