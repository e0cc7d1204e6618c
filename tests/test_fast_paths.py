"""The numpy fast paths of reading and writing streams give exactly what the line-by-line code gives.

* ``io.renderer`` (numpy ``join_columns``) against ``io.obvious_renderer`` (Python, line by line);
* ``StepReader`` with its bulk integer parser against the same reader parsing every line;
* ``keyed_io.Layout.text`` against ``Layout.obvious_text``;
* ``pure-dp-mf count`` with the fast paths against the same command with the line-by-line code
  in their place, byte for byte: standard output, the output file and its sidecar, standard
  error and the exit status, over valid and invalid inputs with every ``--invalid`` policy.
"""

from __future__ import annotations

import datetime
import io as stdio
from pathlib import Path

import numpy as np
import pytest
from conftest import run_main

from pure_dp_mf.engines import io
from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.keyed_io import Layout
from pure_dp_mf.errors import InvalidInputError

ROOT = Path(__file__).resolve().parents[1]


def _columns(rng, m: int, *, d: int = 1, big: bool = False) -> dict:
    counts = rng.integers(-(10**6), 10**6, (m, d) if d > 1 else m)
    if m >= 6 and d == 1:
        counts[:6] = [0, -1, 9, 10, -(10**18) + 1, 10**18 - 1]
    std = rng.random(m) * 10.0 ** rng.integers(-8, 9, m)
    if m >= 4:
        std[:4] = [np.nan, np.inf, 0.0, -0.0]
    columns = {"counts": counts, "std": std, "lower": counts - rng.integers(0, 50, counts.shape), "upper": counts + 3}
    if big:  # exact Python integers beyond int64, as the counter releases them
        columns["counts"] = np.array([int(v) * 10**20 for v in counts.reshape(-1)], dtype=object).reshape(counts.shape)
    return columns


@pytest.mark.parametrize("output_format, d", [("plain", 1), ("plain", 3), ("csv", 1), ("jsonl", 1)])
def test_renderer_matches_the_obvious_one(output_format, d):
    rng = np.random.default_rng(d)
    fast, obvious = io.renderer(output_format, dimension=d), io.obvious_renderer(output_format, dimension=d)
    for m in (1, 2, 7, 1000):
        for big in (False, True):
            columns = _columns(rng, m, d=d, big=big)
            if output_format != "plain" and big:
                columns["lower"] = columns["counts"]
            assert fast(41, columns) == obvious(41, columns)
    edge = {
        "counts": np.full((1, d) if d > 1 else 1, 10**18, dtype=np.int64),
        "std": np.ones(1),
        "lower": np.zeros(1, np.int64),
        "upper": np.ones(1, np.int64),
    }
    assert fast(0, edge) == obvious(0, edge)  # 19 digits: written by the obvious renderer


def _read(data: bytes, *, fast: bool, monkeypatch, **options) -> tuple[list, int, str | None]:
    """Every batch's first line and values, the invalid count, and the error message, if any."""
    reader = io.StepReader(**options)
    if not fast:
        monkeypatch.setattr(reader, "_plain_integers", lambda codes: None)
    batches, error = [], None
    try:
        for first, batch in reader.batches(stdio.BytesIO(data)):
            batches.append((first, batch.dtype.kind, batch.tolist()))
    except InvalidInputError as caught:
        error = str(caught)
    return batches, reader.invalid, error


INPUTS = [
    b"0\n1\n1\n0\n",
    b"3\n17\n0\n42\n5",
    b"007\n000000000000000001\n999999999999999999\n",
    b"1000000000000000000\n5\n",  # 19 digits: beyond the bulk parser
    b"12345678901234567890123456789\n1\n",  # beyond int64
    b"\xef\xbb\xbf4\n2\n",
    b"4\r\n2\r\n",
    b"4\n\n2\n",
    b"\n",
    b" 4\n2 \n",
    b"-1\n2\n",
    b"+1\n2\n",
    b"2.0\n3\n",
    b"1e3\n",
    b"1_000\n",
    b"\xd9\xa3\n",  # an Arabic-Indic digit
    b"\xff\xfe\n",
    b"6\n7\n8\n",  # above m = 5
    b"4,1\n2 3\n9 9\n",  # d = 2
    b"x,value\n1,4\n2,\n3,9\n4,2\n",  # --column value
]


@pytest.mark.parametrize("policy", io.INVALID_POLICIES)
@pytest.mark.parametrize("data", INPUTS)
def test_step_reader_matches_the_line_by_line_parser(data, policy, monkeypatch):
    column = "value" if data.startswith(b"x,") else None
    for d in (1, 2):
        for max_value in (1, 5, 10**30):
            options = {"dimension": d, "max_value": max_value, "policy": policy, "column": column, "largest": 3}
            fast = _read(data, fast=True, monkeypatch=monkeypatch, **options)
            assert fast == _read(data, fast=False, monkeypatch=monkeypatch, **options)


def test_step_reader_random_integer_files(monkeypatch):
    rng = np.random.default_rng(5)
    for _ in range(30):
        values = rng.integers(0, 10 ** rng.integers(1, 19), rng.integers(1, 3000))
        data = "".join(f"{v}\n" for v in values.tolist()).encode()
        options = {"dimension": 1, "max_value": int(values.max()) + int(rng.integers(-1, 2)), "policy": "zero", "largest": 999}
        options["max_value"] = max(options["max_value"], 1)
        fast = _read(data, fast=True, monkeypatch=monkeypatch, **options)
        assert fast == _read(data, fast=False, monkeypatch=monkeypatch, **options)


def test_keyed_layout_matches_the_obvious_text():
    keys = ["a", "b,c", 'd"e', "f\ng", "ü", "x" * 50] + [f"key{i}" for i in range(300)]
    rng = np.random.default_rng(3)
    calendar = Calendar(datetime.datetime(2024, 1, 1), datetime.timedelta(days=1))
    for show_keys in (True, False):
        for cal in (None, calendar):
            layout = Layout(keys=keys, show_keys=show_keys, calendar=cal)
            for output_format in ("csv", "jsonl"):
                for std in (3.25, 1e-7, 123456789.0, float("nan")):
                    counts = rng.integers(-(10**5), 10**5, len(keys))
                    lower, upper = np.minimum(np.maximum(counts - 9, 0), counts), counts + 9
                    got = layout.text(output_format, 17, counts, std, lower, upper)
                    assert got == layout.obvious_text(output_format, 17, counts, std, lower, upper)
                    huge = counts.astype(object) * 10**20
                    assert layout.text(output_format, 3, huge, std, lower, upper) == layout.obvious_text(
                        output_format, 3, huge, std, lower, upper
                    )


# ------------------------------------------------------------------ the command, against its line-by-line code


def _count(arguments: list[str], *, stdin: bytes, folder: Path, fast: bool, monkeypatch) -> tuple:
    """(exit status, stdout, stderr, output file, sidecar) of ``count`` run in ``folder``, with the
    fast paths (bulk parser, numpy renderer) or with the line-by-line code in their place."""
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(io.StepReader, "_plain_integers", lambda self, codes: None)
            patch.setattr(io, "renderer", io.obvious_renderer)
        patch.chdir(folder)
        patch.setenv("PURE_DP_MF_REGISTRY", str(folder / "registry.sqlite3"))
        code, out, err = run_main("count", *arguments, stdin=stdin.decode("utf-8"))
    output, sidecar = folder / "out.txt", folder / "out.txt.meta.json"
    return code, out, err, output.read_bytes() if output.exists() else None, sidecar.read_bytes() if sidecar.exists() else None


RNG = np.random.default_rng(11)
BITS = "".join(f"{v}\n" for v in (RNG.random(3000) < 0.3).astype(int).tolist()).encode()
SMALL = "".join(f"{v}\n" for v in RNG.integers(0, 6, 2500).tolist()).encode()
CASES = {
    "bits stdin": (BITS, ["--max-value", "1"]),
    "bits csv": (BITS, ["--format", "csv"]),
    "bits jsonl": (BITS, ["--format", "jsonl"]),
    "integers": (SMALL, ["--max-value", "5"]),
    "integers csv monotone": (SMALL, ["--max-value", "5", "--format", "csv", "--monotone"]),
    "huge m": (b"123456789012345678901234\n7\n0\n", ["--max-value", "10" + "0" * 30]),
    "crlf bom blanks zero": (b"\xef\xbb\xbf3\r\n\r\n4\n x\n9\n2", ["--max-value", "5", "--invalid", "zero"]),
    "clamp": (b"3\n-2\n99\n1,2\n4\n", ["--max-value", "5", "--invalid", "clamp"]),
    "stop": (SMALL[:200] + b"oops\n" + SMALL[:50], ["--max-value", "5", "--invalid", "stop"]),
    "d 2": (b"1 2\n0,3\n4 1\n9 9\n", ["--max-value", "5", "--dimension", "2", "--invalid", "zero"]),
    "column": (b"day,value\n1,3\n2,5\n3,\n4,1\n", ["--max-value", "5", "--column", "value", "--invalid", "clamp"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("where", ["stdin", "file", "state"])
def test_count_writes_what_the_line_by_line_code_writes(name, where, tmp_path, monkeypatch):
    data, options = CASES[name]
    results = []
    for fast in (True, False):
        folder = tmp_path / ("fast" if fast else "line_by_line")
        folder.mkdir()
        (folder / "in.txt").write_bytes(data)
        arguments = ["--epsilon", "1", "--horizon", "4000", "--seed", "7", *options]
        stdin = data
        if where != "stdin":
            arguments, stdin = ["in.txt", *arguments], b""
        if where == "state":
            arguments += ["--state", "counter.db", "--output", "out.txt", "--commit-every", "999"]
        results.append(_count(arguments, stdin=stdin, folder=folder, fast=fast, monkeypatch=monkeypatch))
    assert results[0] == results[1]
    assert results[0][0] in (0, 2)
