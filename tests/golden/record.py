"""Record the golden releases: seeded runs of ``pure-dp-mf count`` whose released values must
stay bit-identical across refactors (run once from the repository root; the test
``tests/test_golden.py`` replays every case and compares)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _inputs() -> dict[str, str]:
    rng = np.random.default_rng(20261206)
    bits = lambda n: "".join(f"{int(v)}\n" for v in rng.integers(0, 2, n))  # noqa: E731
    values = lambda n, m: "".join(f"{int(v)}\n" for v in rng.integers(0, m + 1, n))  # noqa: E731
    vectors = "".join(
        " ".join(str(int(x)) for x in np.eye(3, dtype=int)[rng.integers(0, 3)] * rng.integers(0, 2)) + "\n" for _ in range(50)
    )
    events = ["key,day,value,user"]
    keys = ["FR", "DE", "IT", "ES"]
    for day in range(1, 31):
        for _ in range(int(rng.integers(0, 6))):
            events.append(f"{keys[int(rng.integers(0, 4))]},{day},{int(rng.integers(0, 4))},u{int(rng.integers(0, 7))}")
    events.append("FR,30,1,u0")
    return {
        "bits10.txt": bits(10),
        "bits300.txt": bits(300),
        "bits1500.txt": bits(1500),
        "values5000.txt": values(5000, 7),
        "bits200.txt": bits(200),
        "vectors50.txt": vectors,
        "bits100.txt": bits(100),
        "events.csv": "\n".join(events) + "\n",
        "keys.txt": "\n".join(keys) + "\n",
    }


CASES = {
    "single_h10": ("bits10.txt", "--epsilon 1 --horizon 10 --seed 1 --format jsonl"),
    "single_h300_meanse": ("bits300.txt", "--epsilon 0.5 --horizon 300 --seed 2 --metric meanse --format jsonl"),
    "single_h1500": ("bits1500.txt", "--epsilon 2 --horizon 1500 --seed 3 --format jsonl"),
    "single_h5000_m7": ("values5000.txt", "--epsilon 1 --horizon 5000 --seed 4 --max-value 7 --format jsonl"),
    "single_h200_monotone": ("bits200.txt", "--epsilon 1 --horizon 200 --seed 5 --monotone --format jsonl"),
    "single_h50_d3": ("vectors50.txt", "--epsilon 1 --horizon 50 --seed 6 --dimension 3"),
    "single_h100_lifted_csv": ("bits100.txt", "--epsilon 1 --horizon 100 --seed 7 --mechanism lifted --format csv"),
    "keyed_event": (
        "events.csv",
        "--epsilon 1 --horizon 30 --seed 8 --key-column key --step-column day --column value --max-value 3 --keys {keys} "
        "--format jsonl",
    ),
    "keyed_user": (
        "events.csv",
        "--epsilon 1 --horizon 30 --seed 9 --key-column key --step-column day --column value --max-value 3 --keys {keys} "
        "--privacy-unit user --user-column user --max-keys 2 --max-per-key 3 --format jsonl",
    ),
}


def records(text: str) -> list[dict]:
    """The released rows of a jsonl, csv or plain output (header and comment lines dropped)."""
    rows = []
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    if lines and lines[0].startswith("step,"):
        names = lines[0].split(",")
        for line in lines[1:]:
            rows.append({name: (float(v) if name == "std" else int(v)) for name, v in zip(names, line.split(","), strict=True)})
        return rows
    for line in lines:
        if line.startswith("{"):
            record = json.loads(line)
            if "header" not in record:
                rows.append(record)
        else:
            rows.append({"counts": [int(v) for v in line.split()]})
    return rows


def dump(golden: dict[str, list[dict]]) -> str:
    """One release per line, so that a change shows as a readable diff."""
    cases = [
        json.dumps(case) + ": [\n" + ",\n".join(json.dumps(row, sort_keys=True) for row in rows) + "\n]"
        for case, rows in sorted(golden.items())
    ]
    return "{\n" + ",\n".join(cases) + "\n}\n"


def run(case: str, folder: Path) -> list[dict]:
    name, arguments = CASES[case]
    arguments = [a.replace("{keys}", str(folder / "keys.txt")) for a in arguments.split()]
    done = subprocess.run(
        [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", "count", str(folder / name), *arguments],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{case}: {done.stderr}")
    return records(done.stdout)


if __name__ == "__main__":
    inputs = HERE / "inputs"
    inputs.mkdir(exist_ok=True)
    for name, text in _inputs().items():
        (inputs / name).write_text(text)
    golden = {case: run(case, inputs) for case in CASES}
    (HERE / "releases.json").write_text(dump(golden))
    print({case: len(rows) for case, rows in golden.items()})
