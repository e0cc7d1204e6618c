"""Shared test helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

# Every test (and every command it runs) keeps its noise lineages in a registry of its own
# session, never in the user's ~/.local/state/pure_dp_mf/registry.sqlite3.
if "PURE_DP_MF_TEST_REGISTRY" not in os.environ:
    os.environ["PURE_DP_MF_TEST_REGISTRY"] = tempfile.mkdtemp(prefix="pure_dp_mf_registry_")
os.environ["PURE_DP_MF_REGISTRY"] = os.path.join(os.environ["PURE_DP_MF_TEST_REGISTRY"], f"registry-{os.getpid()}.sqlite3")


#: The time limit of every subprocess a test starts, in seconds. It only stops a run that hangs, so
#: that a broken change fails instead of stalling the suite; it is never a speed check (speed is
#: measured in benchmarks/), and it is generous because CI machines are shared and slow at times.
SAFETY_LIMIT = 900


@pytest.fixture(scope="module")
def spark():
    """A local[2] Spark session for a test module (the spark extra; Java 17), with the RocksDB
    state store the streaming tests use; stopped after the module."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pure_dp_mf tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .getOrCreate()
    )
    yield session
    session.stop()


def spark_environment(**changes: str | None) -> dict[str, str]:
    """This process's environment for a child that starts Spark: no ``PYSPARK_*`` settings (the
    child's ``local_session`` sets its own) and no ``VIRTUAL_ENV``; then ``changes`` (None removes
    a variable)."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYSPARK_")}
    environment.pop("VIRTUAL_ENV", None)
    for name, value in changes.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return environment


def run_cli(
    *arguments: str, input_text: str | None = None, timeout: float = SAFETY_LIMIT, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``pure-dp-mf`` through its real entry point (``main``), as a user would; ``env`` is
    laid over this process's environment."""
    return subprocess.run(
        [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", *arguments],
        input=input_text,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
    )


def run_main(*arguments: str, stdin: str = "") -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``pure-dp-mf ARGUMENTS`` run in-process through ``main``
    (faster than ``run_cli``; a command holding a state keeps it until collected)."""
    import contextlib
    import io

    from pure_dp_mf.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv, sys.stdin
    sys.argv, sys.stdin = ["pure-dp-mf", *arguments], io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv, sys.stdin = saved
    return code, out.getvalue(), err.getvalue()


def one_error_line(code: int, out: str, err: str, *needles: str) -> None:
    """The command failed with exit status 2 and exactly one line ``error: …`` holding ``needles``:
    no traceback, no usage box."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "╭" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def dyadic_binary_tree(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The complete binary tree for n = 2^h, root used: R has one row per node, L sums the
    nodes of the dyadic decomposition of [1, t]. Written out directly, independent of trees.py."""
    nodes = []
    size = n
    while size >= 1:
        nodes += [(start, start + size) for start in range(0, n, size)]
        size //= 2
    encoder = np.zeros((len(nodes), n))
    for row, (start, stop) in enumerate(nodes):
        encoder[row, start:stop] = 1
    decoder = np.zeros((n, len(nodes)))
    index = {node: row for row, node in enumerate(nodes)}
    for t in range(1, n + 1):
        start, remaining = 0, t
        size = n
        while remaining:
            if size <= remaining:
                decoder[t - 1, index[(start, start + size)]] = 1
                start, remaining = start + size, remaining - size
            size //= 2
    return decoder, encoder


@pytest.fixture
def tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request, tmp_path, monkeypatch):
    """Every ledger test runs on both backends: a fresh SQLite ledger, and a fresh database on a
    real PostgreSQL server (``tests/postgres_server.py``). Without a server the PostgreSQL case is
    skipped, with the reason, except under CI (``CI=true``), where it fails."""
    from pure_dp_mf.engines import ledger

    if request.param == "sqlite":
        url = f"sqlite://{tmp_path / 'ledger.sqlite3'}"
    else:
        import postgres_server

        server = postgres_server.server_url()
        if server is None:
            reason = "; ".join(postgres_server.REASON) or "no PostgreSQL server"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"CI needs the PostgreSQL ledger backend: {reason}")
            pytest.skip(reason)
        url = postgres_server.fresh_database(server)
    monkeypatch.setenv("PURE_DP_MF_LEDGER", url)
    ledger.set_default(None)
    yield url
    for open_ledger in ledger._LEDGERS.values():
        open_ledger.close()
    ledger.set_default(None)
