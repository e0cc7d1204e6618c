"""A throwaway PostgreSQL server for the ledger tests (``engines.ledger``).

``server_url()`` gives a server's URL: ``$PURE_DP_MF_TEST_POSTGRES_URL`` when set (CI starts one),
else a cluster made here in a temporary folder (``initdb`` and ``pg_ctl`` from the system's
PostgreSQL, on a unix socket only, as the ``postgres`` user when run as root: PostgreSQL refuses
to run as root), stopped when the test session ends; None when no server can be found, with the
reason in ``REASON``. ``fresh_database(url)`` makes an empty database on it for one test.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import subprocess
import tempfile
import uuid

URL_ENV = "PURE_DP_MF_TEST_POSTGRES_URL"
REASON: list[str] = []
_STARTED: dict[str, str] = {}


def _binaries() -> str | None:
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(found)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[-3]))
    return os.path.dirname(candidates[-1]) if candidates else None


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


def server_url() -> str | None:
    if os.environ.get(URL_ENV):
        return os.environ[URL_ENV]
    if "url" in _STARTED:
        return _STARTED["url"]
    try:
        import psycopg  # noqa: F401
    except ImportError:
        REASON.append("psycopg 3 is not installed (pip install 'pure-dp-mf[postgres]')")
        return None
    binaries = _binaries()
    if binaries is None:
        REASON.append(f"no PostgreSQL server: initdb not found, and ${URL_ENV} is not set")
        return None
    folder = tempfile.mkdtemp(prefix="pure_dp_mf_pg_")
    if os.geteuid() == 0:
        shutil.chown(folder, user="postgres")
    data = os.path.join(folder, "data")
    try:
        subprocess.run(
            _as_server_user([f"{binaries}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"]),
            check=True,
            capture_output=True,
            timeout=120,
        )
        options = f"-k {folder} -c listen_addresses='' -c fsync=off -c max_connections=50"
        subprocess.run(
            _as_server_user([f"{binaries}/pg_ctl", "-D", data, "-o", options, "-l", f"{folder}/log", "-w", "start"]),
            check=True,
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as error:
        REASON.append(f"cannot start a PostgreSQL server with {binaries}: {error}")
        shutil.rmtree(folder, ignore_errors=True)
        return None

    def stop() -> None:
        subprocess.run(_as_server_user([f"{binaries}/pg_ctl", "-D", data, "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    _STARTED["url"] = f"postgresql://postgres@/postgres?host={folder}"
    return _STARTED["url"]


def fresh_database(url: str) -> str:
    """An empty database on the server of ``url``; its URL."""
    import psycopg

    name = f"ledger_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    base, _, query = url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
