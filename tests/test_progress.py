"""Progress bars: on standard error when it is a terminal, over the public steps only; nothing
when it is not (a pipe, a log file)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from conftest import SAFETY_LIMIT

COMMAND = [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", "count"]


def _on_a_terminal(arguments: list[str]) -> tuple[int, bytes]:
    """(exit status, what standard error showed) of the command with standard error on a pseudo-terminal."""
    leader, follower = pty.openpty()
    try:
        finished = subprocess.run(arguments, stdout=subprocess.DEVNULL, stderr=follower, timeout=SAFETY_LIMIT)
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
    return finished.returncode, shown


def _check(arguments: list[str], output) -> None:
    piped = subprocess.run(arguments, capture_output=True, text=True, timeout=SAFETY_LIMIT)
    assert piped.returncode == 0, piped.stderr
    assert "steps released" not in piped.stderr and "\r" not in piped.stderr and "\x1b[" not in piped.stderr
    output.unlink()
    code, shown = _on_a_terminal(arguments)
    assert code == 0 and b"steps released" in shown, shown[-2000:]


def test_keyed_progress_bar_on_a_terminal_only(tmp_path):
    (tmp_path / "keys.txt").write_text("de\nfr\n")
    (tmp_path / "events.csv").write_text("country,day\nde,1\nfr,2\nde,2\n")
    arguments = [*COMMAND, str(tmp_path / "events.csv"), "--key-column", "country", "--keys", str(tmp_path / "keys.txt")]
    arguments += ["--step-column", "day", "--epsilon", "1", "--horizon", "4", "--seed", "1"]
    _check([*arguments, "--output", str(tmp_path / "out.csv")], tmp_path / "out.csv")


def test_single_stream_progress_bar_on_a_terminal_only(tmp_path):
    (tmp_path / "bits.txt").write_text("1\n0\n" * 500)
    arguments = [*COMMAND, str(tmp_path / "bits.txt"), "--epsilon", "1", "--horizon", "1000", "--seed", "1"]
    _check([*arguments, "--output", str(tmp_path / "out.txt")], tmp_path / "out.txt")
