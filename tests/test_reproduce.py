"""`pure-dp-mf reproduce`: the quick run end to end, every table row and figure, failures that are
reported and make the command exit non-zero; the report's own computations against slow versions."""

from __future__ import annotations

import json
import math
import shutil
from fractions import Fraction

import matplotlib.image
import numpy as np
import pytest
from conftest import ROOT, run_cli
from typer.testing import CliRunner

from pure_dp_mf import published
from pure_dp_mf.cli import all_commands
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import lift, trees
from pure_dp_mf.reports import figures as reports
from pure_dp_mf.reports import reproduce as reproduce_module
from pure_dp_mf.resources import BASE_FOLDER as BASES
from pure_dp_mf.resources import CERTIFICATE_FOLDER as CERTIFICATES

app = all_commands()

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXTRA_N = 5000


@pytest.fixture
def quick_run(tmp_path):
    """`reproduce --quick` through the real entry point, as `make demo` runs it (one test uses it).
    The limit only stops a hung run: the report takes 1–2 minutes on a quiet 2-core machine and
    several times that beside other work."""
    out = tmp_path / "out"
    completed = run_cli("reproduce", "--quick", "--out", str(out), "--n", str(EXTRA_N), timeout=1800)
    return completed, out


def _valid_png(path) -> bool:
    data = path.read_bytes()
    image = matplotlib.image.imread(path)  # decodes the whole file
    return data.startswith(PNG_SIGNATURE) and image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


@pytest.mark.slow
def test_quick_run_writes_every_table_row_and_figure(quick_run):
    completed, out = quick_run
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    report = (out / "report.md").read_text()
    document = json.loads((out / "report.json").read_text())
    assert document["mode"] == "quick" and document["failures"] == []
    assert [section["key"] for section in document["sections"]] == [key for key, _, _ in reproduce_module.SECTIONS]
    tables = {table["title"]: table for section in document["sections"] for table in section["tables"]}

    def table(prefix: str) -> dict:
        [found] = [t for title, t in tables.items() if title.startswith(prefix)]
        for row in found["rows"]:  # every row is in report.md, cell by cell
            assert "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" in report, row
        return found

    # Table 2: every published k, with the computed lift factor
    table2 = table("Arkhipov & Kalinin, Table 2")
    by_k = {int(row[0]): row for row in table2["rows"]}
    assert set(published.TABLE2) <= set(by_k)
    for k, row in by_k.items():
        assert float(row[7]) == pytest.approx((math.log2(k) / math.log2(2 * k + 1)) ** 3, abs=5e-5)
        if k in published.TABLE2:
            assert float(row[7]) == pytest.approx(published.TABLE2[k][2], abs=5e-5)  # the paper's own column
    # "ours" = the claims of the shipped certificates (all verified, since the run passed)
    claims: dict = {}
    for path in (CERTIFICATES).glob("*.json"):
        certificate = json.loads(path.read_text())
        key = (certificate["factorization"]["n"], certificate["factorization"]["metric"])
        values = [
            Fraction(int(c["numerator"]), int(c["denominator"]))
            for c in (certificate["claims"]["leading_constant"], certificate["claims"]["lifted_constant"])
        ]
        claims[key] = [min(a, b) for a, b in zip(values, claims.get(key, values))]
    assert claims, "no certificate shipped"
    for (k, metric), (leading, lifted_value) in claims.items():
        columns = (2, 9) if metric == "maxse" else (5, 11)
        # rounded UP at the 4th decimal, exactly: each printed cell is ≥ the certificate's bound
        assert [by_k[k][c] for c in columns] == [reports.format_upper_bound(leading), reports.format_upper_bound(lifted_value)]
        assert all(Fraction(by_k[k][c]) >= bound for c, bound in zip(columns, (leading, lifted_value))), (k, metric)
    # Table 1: every tree reproduced, plus the factorization row
    table1 = table("Arkhipov & Kalinin, Table 1")
    rows = {row[0]: row for row in table1["rows"]}
    assert set(trees.MECHANISMS) | {"lifted (certified)"} == set(rows)
    for mechanism in trees.MECHANISMS:
        assert rows[mechanism][4] == "reproduced" and rows[mechanism][8] == "reproduced", rows[mechanism]
    for metric, column in (("maxse", 1), ("meanse", 5)):
        best = min((value[1], k) for (k, m), value in claims.items() if m == metric)
        assert rows["lifted (certified)"][column : column + 2] == [reports.format_upper_bound(best[0]), f"k = {best[1]}"]
        assert Fraction(rows["lifted (certified)"][column]) >= best[0]
    # the comparison at 2^10, 2^20, 2^30 and --n, every mechanism present, best MaxSE first
    for n in (*reproduce_module.N_VALUES, EXTRA_N):
        found = table(f"n = {n} ")
        mechanisms = {row[1] for row in found["rows"]}
        assert set(trees.MECHANISMS) | {"lifted"} <= mechanisms
        errors = [float(row[4]) for row in found["rows"]]
        assert errors == sorted(errors)
    lower = table("0/1 factorizations")
    assert {(int(row[0]), row[1]) for row in lower["rows"]} == {
        (n, tree) for n in (*reproduce_module.N_VALUES, EXTRA_N) for tree in ("binary", "kary")
    }
    assert all(float(row[5]) >= 1 and float(row[8]) >= 1 for row in lower["rows"])
    gaussian = table("Choquette-Choo et al. App. D.5")
    assert gaussian["rows"][0][0].startswith("optimal MF") and gaussian["rows"][-1][0].startswith("independent noise")
    streaming = table("Continual counter, 100000 steps")
    assert len(streaming["rows"]) == 5
    # figures: the three report figures and the Gaussian variance plot, all valid PNGs
    figures = {name for section in document["sections"] for name in section["figures"]}
    assert {"leading_constants.png", "step_noise_std.png", "table2.png", "gaussian_step_variance.png"} == figures
    for name in figures:
        assert f"]({name})" in report and _valid_png(out / name), name
    # the rich summary on stdout
    assert "Arkhipov & Kalinin, Table 1" in completed.stdout and "reproduce (quick)" in completed.stdout
    # streaming: the empirical error matches the prediction (deterministic seeds; the coarse levels share
    # few noise variables, so 8 runs estimate MeanSE within about ±5 % (1σ))
    rows = {row[0].split(" (")[0]: row for row in streaming["rows"]}
    assert 0.8 < float(rows["MeanSE"][3]) < 1.25
    assert 0.9 < float(rows["share of errors within 2 predicted standard deviations"][2]) < 0.99


@pytest.fixture
def tampered(tmp_path):
    """Copies of the shipped k = 4 certificates and bases, with one claim of k004_maxse.json lowered
    (fraction and decimal agree, so only the re-proof can catch it)."""
    for folder, suffix in (("certificates", "json"), ("base_factorizations", "npz")):
        (tmp_path / folder).mkdir()
        for metric in ("maxse", "meanse"):
            shutil.copy(ROOT / folder / f"k004_{metric}.{suffix}", tmp_path / folder)
    path = tmp_path / "certificates" / "k004_maxse.json"
    document = json.loads(path.read_text())
    document["claims"]["leading_constant"] = {"numerator": "1", "denominator": "10", "decimal": "0.1"}
    path.write_text(json.dumps(document, indent=2))
    return tmp_path


def test_tampered_certificate_fails_and_is_named(tampered):
    completed = run_cli(
        "reproduce",
        "--quick",
        "--only",
        "certificates",
        "--out",
        str(tampered / "out"),
        "--certificates",
        str(tampered / "certificates"),
        "--bases",
        str(tampered / "base_factorizations"),
    )
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert "k004_maxse.json" in completed.stderr and "leading_constant" in completed.stderr
    report = (tampered / "out" / "report.md").read_text()
    assert "**This section failed:**" in report and "k004_maxse.json" in report
    # the untouched copy verifies: the same run without the tampering passes (library call: no second process)
    shutil.copy(CERTIFICATES / "k004_maxse.json", tampered / "certificates" / "k004_maxse.json")
    result = reproduce_module.reproduce(
        out=tampered / "out2",
        only=["certificates"],
        certificates=tampered / "certificates",
        bases=tampered / "base_factorizations",
    )
    assert result.ok, result.failures


def test_a_certificate_for_a_file_outside_the_base_folder_fails(tampered, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    result = reproduce_module.reproduce(
        out=tmp_path / "out", only=["certificates"], certificates=tampered / "certificates", bases=other
    )
    assert not result.ok and "not in the base folder" in result.failures[0] and "k004_meanse.json" in result.failures[0]


def test_a_section_that_raises_is_reported_not_silent(tmp_path, monkeypatch):
    def broken(section, context):
        raise KeyError("missing")

    def fine(section, context):
        section.tables.append(reports.Table("fine", ["a"], [[1.5]]))

    monkeypatch.setattr(reproduce_module, "SECTIONS", [("one", "One", fine), ("two", "Two", broken)])
    result = reproduce_module.reproduce(out=tmp_path / "out", quick=True)
    assert not result.ok and result.failures == ["two: KeyError raised: 'missing'"]
    assert result.section("one").ok
    report = result.report.read_text()
    assert "**This section failed:** KeyError raised: 'missing'" in report and "| 1.5000 |" in report


def test_bad_arguments(tmp_path):
    with pytest.raises(reproduce_module.InvalidInputError, match="unknown section nope"):
        reproduce_module.reproduce(out=tmp_path, only=["nope"])
    with pytest.raises(reproduce_module.InvalidInputError, match="certificate folder"):
        reproduce_module.reproduce(out=tmp_path, certificates=tmp_path / "absent")
    with pytest.raises(reproduce_module.InvalidInputError, match="n must be at least 2"):
        CliRunner().invoke(app, ["reproduce", "--n", "1", "--out", str(tmp_path)], catch_exceptions=False)


# ----------------------------------------------------------------- the report's computations


def _formula_limits(mechanism: str, k: int) -> tuple[float, float]:
    """Slow, independent: per-level max/mean digit contributions (Arkhipov & Kalinin, App. C)."""
    cube = math.log2(k) ** 3
    if mechanism == "kary":
        return 2 * (k - 1) / cube, (k - 1) / cube
    if mechanism == "kary-subtraction":
        digits = [abs(d) for d in range(-((k - 1) // 2), k - (k - 1) // 2)]
        return 2 * max(digits) / cube, 2 * sum(digits) / k / cube
    return (k - 1) / 2 / cube, (k - 1) / 2 / cube


@pytest.mark.parametrize("mechanism", trees.ARITY_MECHANISMS)
@pytest.mark.parametrize("k", [2, 3, 8, 17, 19, 64])
def test_tree_limits_against_the_digit_formulas(mechanism, k):
    assert reports.tree_limit_constants(mechanism=mechanism, arity=k) == pytest.approx(_formula_limits(mechanism, k), rel=1e-12)


def test_best_tree_limits_are_table_1():
    limit = reports.best_tree_limits(mechanism="kary-subtraction", max_arity=40)
    assert (limit.max_se_arity, limit.mean_se_arity) == (17, 19)
    assert (limit.max_se_constant, limit.mean_se_constant) == pytest.approx(published.TABLE1["kary-subtraction"], rel=1e-12)
    binary = reports.best_tree_limits(mechanism="binary")
    assert (binary.max_se_constant, binary.mean_se_constant) == pytest.approx((2, 1), rel=1e-12)
    smooth = reports.tree_limit_constants(mechanism="smooth-binary")
    assert smooth[0] == pytest.approx(0.25, rel=1e-12) and smooth[1] == pytest.approx(0.25, abs=5e-5)
    with pytest.raises(reports.InvalidInputError):
        reports.tree_limit_constants(mechanism="binary", arity=3)


@pytest.mark.parametrize("name, n", [("k004_maxse.npz", 300), ("k004_meanse.npz", 41), ("k008_maxse.npz", 2000)])
def test_lifted_row_norms_against_the_explicit_lift(name, n):
    base = Factorization.load(BASES / name)
    plan = lift.lift_plan(base=base, n=n, metric=base.metric)
    decoder, _ = lift.explicit_lift(base=base, levels=plan.levels, alphas=plan.alphas_exact, n=n).dense()
    family = lift.LiftedFamily(base=base, metric=base.metric)
    fast = family.row_norms_squared(n=n)
    np.testing.assert_allclose(fast, (decoder**2).sum(axis=1), rtol=1e-12)
    assert fast.max() == pytest.approx(plan.truncated_max_row_norm_squared, rel=1e-12)
    assert fast.sum() == pytest.approx(plan.truncated_frobenius_squared, rel=1e-12)
    columns = family.columns.sequence(plan.levels, n)
    _, encoder = lift.explicit_lift(base=base, levels=plan.levels, alphas=plan.alphas_exact, n=n).dense()
    np.testing.assert_allclose(columns, np.abs(encoder).sum(axis=0), rtol=1e-12)
    with pytest.raises(reports.InvalidInputError, match="exceed"):
        family.rows.sequence(plan.levels, plan.lifted_size + 1)


def test_status_and_cells():
    assert reports.status_against_published(0.07784, 0.0778) == "reproduced"
    assert reports.status_against_published(0.0771, 0.0778) == "better"
    assert reports.status_against_published(0.0790, 0.0778) == "not yet"
    assert [reports.format_cell(x) for x in (None, math.nan, Fraction(1, 3), 12345.678, 2e-5, "x")] == [
        "–",
        "n/a",
        "0.3333",
        "12345.7",
        "2.0000e-05",
        "x",
    ]
    table = reports.Table("t", ["a", "b"], [[1, 2.0]]).select(["b"])
    assert table.columns == ["b"] and table.cells() == [["2.0000"]]
