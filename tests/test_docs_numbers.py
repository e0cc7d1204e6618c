"""Numbers the README and docs quote from certificates and from the library, regenerated and compared:
every certificate-quoting cell is ≥ its certificate's exact bound (rounded UP at its last digit,
``figures.round_up``), and the measured tables are what the library computes now (the expected
table is printed on failure, ready to paste)."""

from __future__ import annotations

import json
import re
import shutil
from fractions import Fraction

import pytest
from conftest import ROOT

from pure_dp_mf import published
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms.lift import lift_plan
from pure_dp_mf.reports import reproduce as reproduce_module
from pure_dp_mf.reports.figures import format_upper_bound, round_up

CERTIFICATES = ROOT / "certificates"


def claim(k: int, metric: str, name: str) -> Fraction:
    """The exact claim ``name`` of the shipped certificate of the k, metric base."""
    value = json.loads((CERTIFICATES / f"k{k:03d}_{metric}.json").read_text())["claims"][name]
    return Fraction(int(value["numerator"]), int(value["denominator"]))


def markdown_table(text: str, header_start: str) -> list[list[str]]:
    """The body rows of the markdown table whose header line starts with ``header_start``."""
    lines = text.splitlines()
    [start] = [i for i, line in enumerate(lines) if line.startswith(header_start)]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("*") for cell in line.strip().strip("|").split("|")])
    return rows


def upper_bound_at_its_digits(printed: str, bound: Fraction) -> bool:
    """``printed`` is ≥ the exact ``bound`` and less than one unit of its last digit above it."""
    value = Fraction(printed)
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return bound <= value < bound + Fraction(1, 10**decimals)


def test_the_readmes_table_2_quotes_each_certificate_rounded_up():
    rows = markdown_table((ROOT / "README.md").read_text(), "| k | 2C₂² certified")
    assert len(rows) >= 10
    for row in rows:
        k = int(row[0])
        for column, (metric, name) in zip(
            (1, 3, 5, 7),
            (
                ("maxse", "leading_constant"),
                ("maxse", "lifted_constant"),
                ("meanse", "leading_constant"),
                ("meanse", "lifted_constant"),
            ),
        ):
            bound = claim(k, metric, name)
            assert upper_bound_at_its_digits(row[column], bound), (k, metric, name, row[column], float(bound))
        if k in published.TABLE2:
            paper = published.TABLE2[k]
            assert [float(row[c]) for c in (2, 4, 6, 8)] == [paper[0], paper[3], paper[1], paper[4]], k


def test_the_readmes_twelve_digit_constants_are_certificate_claims():
    """The k = 1024 and 2048 constants quoted in full in the README are claims of the certificates."""
    text = (ROOT / "README.md").read_text()
    quoted = {
        (1024, "maxse", "leading_constant"): "0.0987109201604",
        (1024, "maxse", "lifted_constant"): "0.0741487324186",
        (1024, "meanse", "leading_constant"): "0.0943985657317",
        (1024, "meanse", "lifted_constant"): "0.0709094189352",
        (2048, "maxse", "lifted_constant"): "0.0718491655802",
        (2048, "meanse", "lifted_constant"): "0.0690324515116",
    }
    for (k, metric, name), printed in quoted.items():
        assert printed in text
        assert upper_bound_at_its_digits(printed, claim(k, metric, name)), (k, metric, name)


def test_the_certificates_page_quotes_the_k4_certificate():
    text = (ROOT / "docs" / "certificates.md").read_text()
    match = re.search(r"2C² ≤ ([0-9.]+) \(float64 ([0-9.]+)\), lifted ≤ ([0-9]+\.[0-9]+)", text)
    assert match, "the k004_maxse example is gone from docs/certificates.md"
    assert Fraction(match[1]) == claim(4, "maxse", "leading_constant")
    assert Fraction(match[3]) == claim(4, "maxse", "lifted_constant")
    document = json.loads((CERTIFICATES / "k004_maxse.json").read_text())
    assert float(match[2]) == pytest.approx(document["float64"]["leading_constant"], rel=1e-12)


def lifting_rows() -> list[list[str]]:
    """docs/lifting.md's "Measured" table as the library computes it now: the certificate's 2C² and
    Theorem 2.5 asymptote rounded up, and the finite-n leading constants (``paper``/``truncated``)."""
    rows = []
    for k in (4, 8, 16):
        for metric in ("maxse", "meanse"):
            base = Factorization.load(ROOT / "base_factorizations" / f"k{k:03d}_{metric}.npz")
            cells = [
                f"k{k:03d}_{metric} ({'MaxSE' if metric == 'maxse' else 'MeanSE'})",
                round_up(claim(k, metric, "leading_constant"), decimals=4),
                round_up(claim(k, metric, "lifted_constant"), decimals=4),
            ]
            for exponent in (10, 20, 30, 60):
                constants = [
                    lift_plan(base=base, n=2**exponent, metric=metric, alpha_rule=rule).leading_constant
                    for rule in ("paper", "truncated")
                ]
                cells.append("/".join(f"{value:.4f}" for value in constants))
            rows.append(cells)
    return rows


def test_the_lifting_pages_measured_table_is_what_the_library_computes():
    printed = markdown_table((ROOT / "docs" / "lifting.md").read_text(), "| base | 2C² of base")
    computed = lifting_rows()
    expected = "\n".join("| " + " | ".join(row) + " |" for row in computed)
    assert [row[:3] for row in printed] == [row[:3] for row in computed], expected
    for mine, theirs in zip(computed, printed):
        for a, b in zip(mine[3:], theirs[3:]):  # floats: within half a unit of the 4th decimal
            assert all(abs(float(x) - float(y)) <= 0.5e-4 + 1e-12 for x, y in zip(a.split("/"), b.split("/"))), expected


def test_the_reports_table_2_rounds_every_certificate_up(tmp_path):
    """The certificates section of ``reproduce`` on the k = 4 and 8 certificates: every "ours" cell
    of Table 2 is ≥ its certificate's exact bound and within one unit of its last digit."""
    for folder, suffix in (("certificates", "json"), ("base_factorizations", "npz")):
        (tmp_path / folder).mkdir()
        for k in (4, 8):
            for metric in ("maxse", "meanse"):
                shutil.copy(ROOT / folder / f"k{k:03d}_{metric}.{suffix}", tmp_path / folder)
    result = reproduce_module.reproduce(
        out=tmp_path / "out",
        only=["certificates"],
        certificates=tmp_path / "certificates",
        bases=tmp_path / "base_factorizations",
    )
    assert result.failures == []
    check_report_table_2(json.loads((tmp_path / "out" / "report.json").read_text()), ks={4, 8})


def check_report_table_2(document: dict, *, ks: set[int]) -> None:
    """Every certificate-quoting cell of the report's Table 2 (and its ratios) is an upper bound."""
    [table] = [t for s in document["sections"] for t in s["tables"] if t["title"].startswith("Arkhipov & Kalinin, Table 2")]
    by_k = {int(row[0]): row for row in table["rows"]}
    assert ks <= set(by_k)
    for k in ks:
        row = by_k[k]
        for metric, leading, ratio, lifted, paper in (("maxse", 2, 3, 9, 0), ("meanse", 5, 6, 11, 1)):
            bound = claim(k, metric, "leading_constant")
            assert row[leading] == format_upper_bound(bound) and upper_bound_at_its_digits(row[leading], bound), row
            lifted_bound = claim(k, metric, "lifted_constant")
            assert upper_bound_at_its_digits(row[lifted], lifted_bound), row
            printed_paper = Fraction(repr(published.TABLE2[k][paper]))
            assert upper_bound_at_its_digits(row[ratio], bound / printed_paper), row


def test_the_streaming_pages_csv_example_is_what_count_prints():
    from conftest import run_main

    text = (ROOT / "docs" / "streaming.md").read_text()
    command = re.search(r"printf '0\\n1\\n' \| \.venv/bin/pure-dp-mf (count [^#\n]*?)\s+#", text)
    assert command, "the CSV example's command is gone from docs/streaming.md"
    printed = re.search(r"```\n(step,count,std,lower,upper\n.*?)```", text, re.S)
    assert printed
    code, out, err = run_main(*command[1].split(), stdin="0\n1\n")
    assert code == 0, err
    assert out.splitlines()[:3] == printed[1].splitlines(), out


def test_every_section_the_code_points_to_exists():
    """A help text or docstring that says docs/X.md, "Section" names a heading or a bold paragraph there."""
    pointers = set()
    for path in (ROOT / "pure_dp_mf").rglob("*.py"):
        text = " ".join(path.read_text(encoding="utf-8").split())  # pointers broken across lines
        pointers |= set(re.findall(r"docs/(\w+)\.md, ['\"“]([^'\"”]+)['\"”]", text))
    assert ("privacy", "Privacy units") in pointers
    for name, section in sorted(pointers):
        lines = (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8").splitlines()
        headings = [line for line in lines if line.startswith("#") and section.lower() in line.lower()]
        bold = [line for line in lines if f"**{section.lower()}" in line.lower()]
        assert headings or bold, f"docs/{name}.md has no section {section!r}"


def test_the_readmes_finite_n_table_is_what_compare_computes():
    """README, "Finite n": the best-arity leading constants of every mechanism at n = 2^10, 2^20, 2^40
    (``compare.comparison_rows``, within half a unit of the 4th decimal) and Table 1's limits."""
    from pure_dp_mf.mechanisms import planner as compare

    printed = {row[0]: row[1:] for row in markdown_table((ROOT / "README.md").read_text(), "| mechanism | n = 2^10")}
    assert set(printed) == set(published.TABLE1)
    for column, exponent in enumerate((10, 20, 40)):
        best: dict[str, list[float]] = {}
        for row in compare.comparison_rows(n=2**exponent, epsilon=1.0):
            constants = best.setdefault(row.mechanism, [float("inf")] * 2)
            constants[:] = [min(constants[0], row.max_se_constant), min(constants[1], row.mean_se_constant)]
        for mechanism, cells in printed.items():
            shown = [float(value) for value in cells[column].split(" / ")]
            assert all(abs(a - b) <= 0.5e-4 + 1e-12 for a, b in zip(shown, best[mechanism])), (
                mechanism,
                exponent,
                best[mechanism],
            )
    for mechanism, cells in printed.items():
        shown = [float(value) for value in cells[3].split(" / ")]
        assert all(abs(a - b) <= 0.5e-4 + 1e-12 for a, b in zip(shown, published.TABLE1[mechanism])), mechanism


def test_the_lifting_pages_winning_bases_are_what_the_library_computes():
    """docs/lifting.md, "Which shipped base wins at n": ``compare.winning_bases`` for both metrics."""
    from pure_dp_mf.mechanisms import planner as compare

    text = (ROOT / "docs" / "lifting.md").read_text()
    for metric in ("maxse", "meanse"):
        line = re.search(rf"^\*\*{metric}\*\*: (.*)$", text, re.M)
        assert line, metric
        printed = [(int(e), int(k), float(c)) for e, k, c in re.findall(r"from 2\^(\d+): k = (\d+) \(([0-9.]+)\)", line[1])]
        computed = compare.winning_bases(metric=metric)
        expected = "; ".join(f"from 2^{e}: k = {k} ({c:.4f})" for e, k, c in computed)
        assert [(e, k) for e, k, _ in printed] == [(e, k) for e, k, _ in computed], expected
        assert all(abs(a[2] - b[2]) <= 0.5e-4 + 1e-12 for a, b in zip(printed, computed)), expected
