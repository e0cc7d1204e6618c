"""The package as a user installs it: a wheel built from this tree, installed (not editable) into
a folder of its own and run from another folder, finds its shipped bases and certificates."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

from conftest import ROOT


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
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("pure_dp_mf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pure_dp_mf/data/base_factorizations/k1024_maxse.npz" in names
    assert "pure_dp_mf/data/certificates/k1024_meanse.json" in names
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {**os.environ, "PYTHONPATH": str(site)}

    def run(*arguments: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", "from pure_dp_mf.cli import main; main()", *arguments],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=elsewhere,
            env=environment,
            timeout=600,
        )

    where = subprocess.run(
        [sys.executable, "-c", "import pure_dp_mf; print(pure_dp_mf.__file__)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=environment,
    )
    assert where.stdout.strip().startswith(str(site)), where.stdout  # the installed copy, not this tree
    counted = run("count", "--epsilon", "1", "--horizon", "5", "--format", "csv", stdin="1\n0\n1\n")
    assert counted.returncode == 0 and counted.stdout.splitlines()[0] == "step,count,std,lower,upper", counted.stderr
    compared = run("compare", "--n", "1000000", "--json")
    assert compared.returncode == 0 and '"lifted"' in compared.stdout and "k1024" in compared.stdout, compared.stderr[-2000:]
    verified = run("verify", str(site / "pure_dp_mf" / "data" / "certificates" / "k004_maxse.json"))
    assert verified.returncode == 0, verified.stderr
