"""Every code example of README.md and docs/*.md runs, as a reader would run it.

Each document's examples run in order in one temporary folder (a later example may use what an
earlier one wrote) that holds links to the repository's ``examples/``, ``base_factorizations/``,
``certificates/``, ``docs/`` and ``benchmarks/``, a ``.venv`` link to this interpreter's
environment, and the small input files the docs name (``FIXTURES``). The units:

* a ``python`` block: executed with ``exec`` (one namespace per document);
* a ``bash`` block: each command (continuation lines joined) through ``bash -o pipefail``, with
  ``pure-dp-mf`` and ``python`` resolved to this environment; it must exit 0;
* an untagged block that holds ``$ `` lines (a transcript): each command is run; it must exit 2
  when the transcript shows ``error: …`` and 0 otherwise, and print every decimal number the
  transcript shows.

Untagged blocks without ``$ `` (synopses, diagrams, outputs) and ``json`` blocks are not run.
``NOT_RUN`` lists the two commands that CI runs itself; ``KNOWN_WRONG`` an example that fails today
(it is run and must still fail, so that a fixed example leaves the list). ``SLOW`` units run only in the slow set (``pytest -m slow``); ``DOWNLOAD`` units need files that
are not in the repository and are skipped while those files are missing.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from docs_blocks import DOCUMENTS, ROOT, Block, blocks

BIN = Path(sys.executable).parent

SLOW = {  # (document, text the unit holds): why it is not in the quick loop
    ("README.md", "--n 20000 --participations 10"): "three Toeplitz optimizations at n = 2·10⁴ (about 45 s)",
    ("README.md", "audit --mechanism lifted --n 64"): "20 000 audit trials",
    ("README.md", "compare --n 1048576 --plot"): "every mechanism at n = 2^20 and a figure",
    ("docs/streaming.md", "local_session()"): "starts Spark (Java 17)",
    ("docs/streaming.md", "private_running_counts_stream("): "starts a Spark streaming query (Java 17)",
    ("docs/streaming.md", "RocksDBStateStoreProvider"): "starts a Spark streaming query (Java 17)",
    ("docs/trees.md", "reports.plot_leading_constants"): "a figure of every mechanism at n = 2^4 … 2^40",
}
KNOWN_WRONG = {  # (document, text the unit holds): an example that fails today, checked to still fail
}
NOT_RUN = {  # (document, text the unit holds): why the test does not run it
    ("README.md", "make demo"): "one of the two commands CI runs itself, from a fresh clone (.ci/run)",
    ("README.md", "make test"): "one of the two commands CI runs itself, from a fresh clone (.ci/run)",
}
DOWNLOAD = {  # (document, text the unit holds): the files it needs, not in the repository
    ("README.md", "arkhipov_kalinin_maxse_k1024.json"): ["docs/claims/maxse_n1024_R.npy"],
}


def _fixtures(folder: Path) -> None:
    """The small input files the docs' examples name (public, made up)."""
    rng = np.random.default_rng(0)
    bits = "".join(f"{bit}\n" for bit in rng.integers(0, 2, 1000))
    (folder / "bits.txt").write_text(bits)
    (folder / "days.txt").write_text("".join(f"{bit}\n" for bit in rng.integers(0, 2, 365)))
    (folder / "today.txt").write_text(bits[:60])
    (folder / "day366.txt").write_text("1\n")
    (folder / "countries.txt").write_text("de\nfr\nit\n")
    rows = [
        f"{country},{day},{value},u{user}"
        for country, day, value, user in zip(
            rng.choice(["de", "fr", "it", "es"], 400),
            np.sort(rng.integers(1, 121, 400)),
            rng.integers(0, 6, 400),
            rng.integers(0, 40, 400),
        )
    ]
    (folder / "events.csv").write_text("country,day,value,uid\n" + "\n".join(rows) + "\n")
    (folder / "events").mkdir()  # a folder a streaming query reads
    (folder / "events" / "part-0.csv").write_text("country,day,value,uid\n" + "\n".join(rows[:50]) + "\n")
    (folder / "blt.json").write_text('{"buf_decay": [0.9, 0.4], "output_scale": [0.3, 0.1]}\n')


@dataclass(frozen=True)
class Unit:
    block: Block
    kind: str  # "python", "bash" or "transcript"
    code: str
    expected: str = ""  # a transcript's output

    @property
    def key(self) -> str:
        return str(self.block.document.relative_to(ROOT))

    def marked(self, table: dict, *, whole_block: bool = False) -> object:
        text = self.block.text if whole_block else self.code
        return next((value for (document, needle), value in table.items() if document == self.key and needle in text), None)


def _commands(text: str) -> list[str]:
    """The commands of a bash block: comments dropped, continuation lines joined."""
    commands, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        commands.append(current.strip())
        current = ""
    return commands


def units(document: Path) -> list[Unit]:
    found: list[Unit] = []
    for block in blocks(document):
        if block.language == "python":
            found.append(Unit(block, "python", block.text))
        elif block.language in ("bash", "sh", "shell"):
            found += [Unit(block, "bash", command) for command in _commands(block.text)]
        elif block.language == "" and any(line.startswith("$ ") for line in block.text.splitlines()):
            lines = block.text.splitlines()
            starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
            for start, end in zip(starts, [*starts[1:], len(lines)]):
                found.append(Unit(block, "transcript", lines[start][2:], "\n".join(lines[start + 1 : end])))
    return found


def _folder(tmp_path: Path) -> Path:
    for name in ("examples", "base_factorizations", "certificates", "docs", "benchmarks", "notebooks"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / ".venv").symlink_to(BIN.parent)
    _fixtures(tmp_path)
    return tmp_path


def _run(unit: Unit, folder: Path, namespace: dict) -> None:
    where = f"{unit.block.name} ({unit.kind}): {unit.code[:200]}"
    if unit.kind == "python":
        out = io.StringIO()
        cwd = Path.cwd()
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(unit.code, unit.block.name, "exec"), namespace)
        finally:
            os.chdir(cwd)
        return
    environment = dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    completed = subprocess.run(
        ["bash", "-o", "pipefail", "-c", unit.code],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,  # a safety limit for a stuck command (a loaded 2-core machine is slow), not a speed test
    )
    output = completed.stdout + completed.stderr
    if unit.kind == "bash":
        assert completed.returncode == 0, f"{where}\n{output[-3000:]}"
        return
    expected_code = 2 if unit.expected.lstrip().startswith("error:") else 0
    assert completed.returncode == expected_code, f"{where}\n{output[-3000:]}"
    for number in re.findall(r"\d+\.\d+", unit.expected):
        assert number in output, f"{where}: {number} is not in the output\n{output[-3000:]}"


def _run_document(document: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, slow: bool) -> None:
    folder, namespace = _folder(tmp_path), {"__name__": "__docs__"}
    monkeypatch.setenv("PURE_DP_MF_REGISTRY", str(folder / "registry.sqlite3"))  # budgets and lineages of this run only
    ran = 0
    try:
        for unit in units(document):
            if unit.marked(NOT_RUN) or (unit.marked(SLOW) and not slow):
                continue
            needs = unit.marked(DOWNLOAD, whole_block=True)  # the block's later commands use its files
            if needs and not all((ROOT / path).exists() for path in needs):
                continue
            start = time.perf_counter()
            if unit.marked(KNOWN_WRONG):  # once it runs, it must leave KNOWN_WRONG
                with pytest.raises(AssertionError):
                    _run(unit, folder, namespace)
                continue
            _run(unit, folder, namespace)
            print(f"{time.perf_counter() - start:7.1f} s  {unit.block.name}: {unit.code[:100]!r}")  # shown with -s
            ran += 1
    finally:
        spark = namespace.get("spark")
        if spark is not None:  # a Spark example's session and streaming queries end with the document
            for query in spark.streams.active:
                query.stop()
            spark.stop()
    assert ran or not units(document)


RUNNABLE = [document for document in DOCUMENTS if units(document)]


@pytest.mark.parametrize("document", RUNNABLE, ids=lambda path: str(path.relative_to(ROOT)))
def test_examples_run(document, tmp_path, monkeypatch):
    _run_document(document, tmp_path, monkeypatch, slow=False)


WITH_SLOW = [document for document in RUNNABLE if any(unit.marked(SLOW) for unit in units(document))]


@pytest.mark.slow
@pytest.mark.parametrize("document", WITH_SLOW, ids=lambda path: str(path.relative_to(ROOT)))
def test_examples_run_with_the_slow_ones(document, tmp_path, monkeypatch):
    _run_document(document, tmp_path, monkeypatch, slow=True)


def test_every_marker_names_a_unit():
    """A marker whose example was edited away would silently stop marking anything."""
    every = [unit for document in DOCUMENTS for unit in units(document)]
    for table in (SLOW, NOT_RUN, DOWNLOAD, KNOWN_WRONG):
        for document, needle in table:
            assert any(unit.key == document and needle in unit.code for unit in every), (document, needle)
