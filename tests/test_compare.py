"""The comparison table (Arkhipov & Kalinin, Table 1) at finite n, its plot, and `pure-dp-mf compare`."""

from __future__ import annotations

import functools
import json
import math

import pytest
from conftest import run_cli
from typer.testing import CliRunner

from pure_dp_mf.cli import all_commands
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.mechanisms import planner as compare
from pure_dp_mf.mechanisms import trees
from pure_dp_mf.reports import figures as reports

app = all_commands()

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_rows_are_exact_tree_errors_sorted():
    n, epsilon = 2**20, 0.5
    rows = compare.comparison_rows(n=n, epsilon=epsilon, providers=[compare.tree_rows])
    assert {row.mechanism for row in rows} == set(trees.MECHANISMS)
    assert [row.max_se for row in rows] == sorted(row.max_se for row in rows)
    for row in rows:
        cost = trees.tree_costs(mechanism=row.mechanism, n=n, arity=row.arity)
        assert row.max_se == float(2 * cost.c2_squared) / epsilon**2 == 4 * cost.max_se()
        assert row.mean_se == float(2 * cost.cf_squared) * 4
        assert row.max_se_constant == pytest.approx(row.max_se * epsilon**2 / 20**3, rel=1e-15)
        assert row.mean_se_constant == pytest.approx(row.mean_se * epsilon**2 / 20**3, rel=1e-15)
        for metric in row.best_for:
            assert trees.best_arity(mechanism=row.mechanism, n=n, metric=metric) == row.arity
        assert bool(row.best_for) == (row.mechanism in trees.ARITY_MECHANISMS)
    # every arity mechanism covers both metrics, in one row or two
    for mechanism in trees.ARITY_MECHANISMS:
        covered = [metric for row in rows if row.mechanism == mechanism for metric in row.best_for]
        assert sorted(covered) == ["maxse", "meanse"]
    by_mean = compare.comparison_rows(n=n, epsilon=epsilon, sort_by="meanse", providers=[compare.tree_rows])
    assert [row.mean_se for row in by_mean] == sorted(row.mean_se for row in by_mean)


def test_extra_row_providers_join_the_table():
    def lifted(*, n, epsilon):
        return [
            compare.ComparisonRow.from_errors(
                mechanism="lifted", arity=None, n=n, epsilon=epsilon, max_se=1.0, mean_se=0.5, source="test"
            )
        ]

    rows = compare.comparison_rows(n=64, providers=[compare.tree_rows, lifted])
    assert rows[0].mechanism == "lifted" and rows[0].max_se_constant == 1.0 / 6**3
    assert len(compare.comparison_rows(n=64, providers=[lifted])) == 1
    assert "test" not in {row.source for row in compare.comparison_rows(n=64)}


def test_default_table_has_trees_and_the_lifted_mechanism():
    rows = compare.comparison_rows(n=2**30, epsilon=0.5)
    assert {row.mechanism for row in rows} == set(trees.MECHANISMS) | {"lifted"}
    lifted = [row for row in rows if row.mechanism == "lifted"]
    assert lifted == compare.lifted_rows(n=2**30, epsilon=0.5)
    assert sorted(metric for row in lifted for metric in row.best_for) == ["maxse", "meanse"]


def test_n_one_and_bad_input():
    rows = compare.comparison_rows(n=1, providers=[compare.tree_rows])
    assert all(math.isnan(row.max_se_constant) and row.max_se == 2.0 for row in rows)
    for bad in (dict(n=0), dict(n=2.5), dict(n=8, epsilon=0), dict(n=8, epsilon=float("nan")), dict(n=8, sort_by="x")):
        with pytest.raises(InvalidInputError):
            compare.comparison_rows(**bad)


def test_plot(tmp_path):
    path = reports.plot_leading_constants(path=tmp_path / "constants.png", exponents=[4, 6])
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    series = compare.leading_constant_series(exponents=[6])
    assert list(series) == [*trees.MECHANISMS, "lifted"]
    row = series["kary"][0]
    best = [
        trees.tree_costs(mechanism="kary", n=64, arity=trees.best_arity(mechanism="kary", n=64, metric=m)) for m in trees.METRICS
    ]
    assert row == (6, best[0].max_se_constant(), best[1].mean_se_constant())
    with pytest.raises(InvalidInputError, match="does not exist"):
        reports.plot_leading_constants(path=tmp_path / "missing" / "x.png", exponents=[4])


def test_cli_json_and_table():
    runner = CliRunner()
    result = runner.invoke(app, ["compare", "--n", "1000", "--epsilon", "2", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["n"] == 1000 and document["epsilon"] == 2.0
    expected = [row.as_dict() for row in compare.comparison_rows(n=1000, epsilon=2)]
    assert document["rows"] == json.loads(json.dumps(expected))
    table = runner.invoke(app, ["compare", "--n", str(2**40)])
    assert table.exit_code == 0 and "binary" in table.output and "MaxSE" in table.output


def test_cli_plot(tmp_path, monkeypatch):
    import pure_dp_mf.cli.compare as command

    monkeypatch.setattr(
        command, "plot_leading_constants", functools.partial(reports.plot_leading_constants, exponents=range(4, 7))
    )
    result = CliRunner().invoke(app, ["compare", "--n", "100", "--plot", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "c.png").read_bytes().startswith(PNG_SIGNATURE)


def test_cli_errors():
    completed = run_cli("compare", "--n", "0")  # through main(): one line on stderr, exit 2
    assert completed.returncode == 2
    assert completed.stderr.startswith("error:") and "n must be at least 1" in completed.stderr
    for arguments, message in [(["--n", "8", "--epsilon", "-1"], "epsilon"), (["--n", "8", "--sort-by", "l1"], "sort key")]:
        result = CliRunner().invoke(app, ["compare", *arguments])
        assert isinstance(result.exception, InvalidInputError) and message in str(result.exception)


def test_the_horizon_has_one_name_on_every_command():
    """``--horizon`` (the word of ``count`` and ``plan``) is accepted wherever a stream length is
    asked for, the same as ``--n``."""
    from tests.conftest import ROOT, run_main

    for command in (["compare"], ["lift", str(ROOT / "base_factorizations" / "k004_maxse.npz")]):
        by_n = run_main(*command, "--n", "1000")
        by_horizon = run_main(*command, "--horizon", "1000")
        assert by_n[0] == 0 and by_n == by_horizon, command
