"""The package as a user installs it: a wheel built from this tree, installed (not editable, its
dependencies resolved by pip) into a fresh virtual environment and run from another folder through
its console script, finds its shipped bases and certificates. It is the counting-only install:
none of the extras (torch, Spark, pandas, matplotlib, sympy, OpenDP, dp-accounting) is pulled in,
and a feature that needs one says which in one error line."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT, SAFETY_LIMIT

EXTRAS_ONLY = ("torch", "pyspark", "pandas", "matplotlib", "sympy", "opendp", "dp_accounting", "psycopg")


@pytest.mark.slow
def test_the_wheel_ships_the_data_and_runs_from_elsewhere(tmp_path):
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        timeout=SAFETY_LIMIT,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("pure_dp_mf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pure_dp_mf/data/base_factorizations/k1024_maxse.npz" in names
    assert "pure_dp_mf/data/certificates/k1024_meanse.json" in names
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=SAFETY_LIMIT)
    python = venv / "bin" / "python"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = subprocess.run(  # a plain install: pip resolves the dependencies from the registry; run from
        # elsewhere, since pip run here would find this checkout's pure_dp_mf.egg-info and skip the wheel
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=environment,
        timeout=SAFETY_LIMIT,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]

    def run(*arguments: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(venv / "bin" / "pure-dp-mf"), *arguments],  # the console script the wheel installs
            input=stdin,
            capture_output=True,
            text=True,
            cwd=elsewhere,
            env=environment,
            timeout=SAFETY_LIMIT,
        )

    where = subprocess.run(
        [str(python), "-c", "import pure_dp_mf; print(pure_dp_mf.__file__)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=environment,
    )
    assert where.stdout.strip().startswith(str(venv)), where.stdout  # the installed copy, not this tree
    counted = run("count", "--epsilon", "1", "--horizon", "5", "--format", "csv", stdin="1\n0\n1\n")
    assert counted.returncode == 0 and counted.stdout.splitlines()[0] == "step,count,std,lower,upper", counted.stderr
    assert len(counted.stdout.splitlines()) == 4 and "mechanism: lifted base" in counted.stderr
    anytime = run("count", "--epsilon", "1", "--seed", "1", stdin="1\n0\n")  # the shipped anytime schedule
    assert anytime.returncode == 0 and "without a horizon" in anytime.stderr, anytime.stderr
    compared = run("compare", "--n", "1000000", "--json")
    assert compared.returncode == 0 and '"lifted"' in compared.stdout and "k1024" in compared.stdout, compared.stderr[-2000:]
    certificates = where.stdout.strip().rsplit("/", 1)[0] + "/data/certificates"
    verified = run("verify", f"{certificates}/k004_maxse.json")
    assert verified.returncode == 0, verified.stderr
    absent = subprocess.run(
        [str(python), "-c", f"import importlib.util as u; print([m for m in {EXTRAS_ONLY!r} if u.find_spec(m)])"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=environment,
    )
    assert absent.stdout.strip() == "[]", absent.stdout + absent.stderr  # a counting install pulls in no extra
    plotted = run(
        "count", "--epsilon", "1", "--horizon", "5", "--plot", "p.png", "--output", "c.csv", "--format", "csv", stdin="1\n"
    )
    lines = plotted.stderr.strip().splitlines()
    assert plotted.returncode == 2 and lines[-1].startswith("error: ") and "matplotlib" in lines[-1] and "[plot]" in lines[-1], (
        plotted.stderr
    )
    assert "Traceback" not in plotted.stderr
