"""Check that a virtual environment holds exactly the packages of a lock file, at its versions.

``python tools/check_lock.py requirements.lock`` (run by ``make check-lock`` and CI): exits 1 with
one line per difference, so that a dependency installed outside the lock (an unpinned range
resolved to whatever is newest that day) fails here first.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(lock: str) -> int:
    pinned = {canonical(m[1]): m[2] for line in Path(lock).read_text().splitlines() if (m := PIN.match(line))}
    installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    installed.pop("pure-dp-mf", None)
    for tool in ("pip",):  # the venv's own installer is not a dependency
        installed.pop(tool, None)
    problems = [f"{name}: installed {version}, not in {lock}" for name, version in installed.items() if name not in pinned]
    problems += [f"{name}: locked {version}, not installed" for name, version in pinned.items() if name not in installed]
    problems += [
        f"{name}: installed {installed[name]}, locked {version}"
        for name, version in pinned.items()
        if name in installed and installed[name] != version
    ]
    for problem in sorted(problems):
        print(problem)
    print(f"{len(pinned)} locked packages; {len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
