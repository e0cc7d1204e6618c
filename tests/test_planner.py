"""mechanisms/planner.py: the one planner. The shipped bases are planned from their profiles
(base_factorizations/profiles.json) exactly as from their matrices, the shipped file is a fresh
build, a chosen mechanism carries the exact sensitivity of its lift, and counting one step
imports neither the Gaussian side, scipy.signal nor torch."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, SAFETY_LIMIT

from pure_dp_mf.certificates.profiles import write_profiles
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import planner, resolve
from pure_dp_mf.mechanisms.lift import lift_plan
from pure_dp_mf.resources import BASE_FOLDER, CERTIFICATE_FOLDER


def test_the_shipped_profiles_are_a_fresh_build(tmp_path):
    (tmp_path / "base_factorizations").mkdir()
    built = write_profiles(certificates=CERTIFICATE_FOLDER, folder=tmp_path / "base_factorizations")
    shipped = json.loads((BASE_FOLDER / "profiles.json").read_text())
    fresh = json.loads(built.read_text())
    assert shipped.keys() == fresh.keys() and shipped["bases"].keys() == fresh["bases"].keys()
    for name, profile in fresh["bases"].items():
        for field in ("certificate_sha256", "base_sha256", "column_sums", "metric", "inner_size"):
            assert shipped["bases"][name][field] == profile[field], (name, field)
        # float64 row norms of the float decoder: the last bit depends on the BLAS thread count of
        # the solve (they rank bases only; every privacy quantity is exact and read from the matrices)
        assert np.allclose(shipped["bases"][name]["row_norms_squared"], profile["row_norms_squared"], rtol=1e-12, atol=0)


@pytest.mark.parametrize("n", [2, 10, 100, 1500, 5000, 10**6, 2**40])
def test_profiles_plan_what_the_matrices_plan(n):
    """The same choice (base, levels, metric) and the same errors from the profiles as from the
    matrices. The errors are float64 sums over the float decoder T_k·R⁻¹, whose last bits depend on
    the BLAS library and its threads (the profiles were computed on another machine), so they are
    compared to 10⁻¹² relative, as the profiles' row norms are; every privacy quantity is exact
    and read from the matrices, and the exact fields must be equal."""
    from_profiles = planner.lifted_rows(n=n)
    from_files = planner.lifted_rows(n=n, directory=BASE_FOLDER)
    assert len(from_profiles) == len(from_files)
    for planned, computed in zip(from_profiles, from_files, strict=True):
        for field in dataclasses.fields(planned):
            value, expected = getattr(planned, field.name), getattr(computed, field.name)
            if isinstance(expected, float) and not math.isnan(expected):
                assert value == pytest.approx(expected, rel=1e-12, abs=0), (n, field.name)
            elif isinstance(expected, float):
                assert math.isnan(value), (n, field.name)
            else:
                assert value == expected, (n, field.name)


@pytest.mark.parametrize("n", [3, 100, 3000])
def test_a_chosen_mechanism_has_the_exact_sensitivity_of_its_lift(n):
    row = planner.choose(horizon=n, metric="maxse", mechanism="lifted")
    mechanism = resolve.build(row, horizon=n)
    plan = lift_plan(base=Factorization.load(row.base_file), n=n, metric=row.metric)
    assert mechanism.sensitivity == plan.sensitivity_exact and mechanism.record["certificate"] is not None
    assert mechanism.expected["max_se"] == pytest.approx(row.max_se, rel=1e-12)


def test_every_choice_the_cli_offers_is_planned():
    for mechanism in planner.CHOICES:
        row = planner.choose(horizon=200, mechanism=mechanism)
        assert mechanism in ("auto", row.mechanism)
    with pytest.raises(Exception, match="unknown mechanism"):
        planner.choose(horizon=10, mechanism="oak")


def test_counting_one_step_loads_only_what_it_needs():
    code = (
        "import sys, io; sys.stdin = io.StringIO('1\\n'); sys.argv = ['pure-dp-mf', 'count', '--epsilon', '1', '--horizon', '10'];\n"
        "from pure_dp_mf.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in sys.modules if m.startswith(('torch', 'scipy.signal', 'pure_dp_mf.gaussian', 'matplotlib', 'pyspark'))]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=SAFETY_LIMIT)
    assert "HEAVY []" in done.stderr, done.stderr[-2000:]
