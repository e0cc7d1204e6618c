"""``pure-dp-mf lift BASE --n N``: costs of the lifted factorization of any size (Arkhipov & Kalinin, arXiv 2607.08963, section 2)."""

from __future__ import annotations

from pathlib import Path

import typer

from pure_dp_mf.atomic import check_writable_file
from pure_dp_mf.cli.app import ARRAY_OPTION, INTEGER_GRID_OPTION, app, console, print_json, print_table
from pure_dp_mf.factorizations.factorization import Factorization, file_sha256
from pure_dp_mf.mechanisms import lift as lifting
from pure_dp_mf.reports.figures import plot_lift_against_trees
from pure_dp_mf.validation import LARGEST_N, check_size

_BASE = typer.Argument(..., help="base factorization file of T_k (.npz), or a published square encoder (.npy, .npz, text)")
_N = typer.Option(..., "--n", "--horizon", help="stream length n, the horizon (any n ≥ 1, up to 2^60 and beyond)")
_METRIC = typer.Option(None, "--metric", help="maxse or meanse (α chosen for it); default: the base's metric, else maxse")
_EPSILON = typer.Option(1.0, "--epsilon", help="privacy budget ε for MaxSE / MeanSE")
_ALPHA_RULE = typer.Option(
    "paper", "--alpha-rule", help="paper (level-by-level optimal α) or truncated (last α tuned to the truncation at n)"
)
_OUT = typer.Option(None, "--out", help="write the explicit lifted factorization truncated to n (small n only)")
_PLOT = typer.Option(None, "--plot", help="write a PNG of the lifted leading constant against n, with the tree baselines")
_PLOT_MAX_N = typer.Option(2**60, "--plot-max-n", help="largest n on the plot")
_JSON = typer.Option(False, "--json", help="print JSON instead of a table")


@app.command()
def lift(
    base: Path = _BASE,
    n: int = _N,
    metric: str | None = _METRIC,
    epsilon: float = _EPSILON,
    alpha_rule: str = _ALPHA_RULE,
    out: Path | None = _OUT,
    plot: Path | None = _PLOT,
    plot_max_n: int = _PLOT_MAX_N,
    array: str | None = ARRAY_OPTION,
    integer_grid_bits: int | None = INTEGER_GRID_OPTION,
    as_json: bool = _JSON,
) -> None:
    """Lift BASE to n by the diamond-alpha construction and print levels, α's, MaxSE, MeanSE, leading constants."""
    check_size(n, name="--n", maximum=LARGEST_N)
    for flag, target in (("--out", out), ("--plot", plot)):
        if target is not None:
            check_writable_file(target, name=flag)  # before any work
    factorization = Factorization.load(base, array=array, integer_grid_bits=integer_grid_bits)
    metric = metric or factorization.metric or "maxse"
    plan = lifting.lift_plan(base=factorization, n=n, metric=metric, epsilon=epsilon, alpha_rule=alpha_rule)
    record = {"base": str(base), "base_sha256": file_sha256(base), **plan.as_dict()}
    if out is not None:
        lifting.lifted_factorization(base=factorization, plan=plan, base_file=base).save(out)
        record["out"] = str(out)
    if plot is not None:
        with console.status("computing the tree baselines", spinner="dots"):
            plot_lift_against_trees(base=factorization, metric=metric, path=plot, max_n=plot_max_n, alpha_rule=alpha_rule)
        record["plot"] = str(plot)
    if as_json:
        print_json(record)
        return
    print_table(f"lift of {base}", ["quantity", "value"], _table_rows(plan))
    for key in ("out", "plot"):
        if key in record:
            console.print(f"wrote {record[key]}")


def _table_rows(plan: lifting.LiftPlan) -> list[tuple[str, object]]:
    """The rows (quantity, value) of the table that ``lift`` prints for ``plan``."""
    costs, full = plan.costs, plan.untruncated_costs
    exact = plan.sensitivity_exact
    if exact is None:
        exact_text = "(not computed)"
    elif exact.denominator < 10**30:
        exact_text = f"{exact.numerator}/{exact.denominator}"
    else:
        exact_text = "(see --json)"
    return [
        ("base size k / inner size", f"{plan.base_size} / {plan.base_inner_size}"),
        ("metric (α chosen for) / α rule", f"{plan.metric} / {plan.alpha_rule}"),
        ("levels p", plan.levels),
        ("lifted size N_p / inner size M_p", f"{plan.lifted_size} / {plan.inner_sizes[-1]}"),
        ("α_1 … α_{p−1}", ", ".join(f"{a:.10g}" for a in plan.alphas) or "—"),
        ("n (truncation)", plan.n),
        ("‖L‖₂→∞² at n", plan.truncated_max_row_norm_squared),
        ("‖L‖_F² at n", plan.truncated_frobenius_squared),
        ("‖R‖₁→₁ at n (sensitivity)", plan.sensitivity),
        ("sensitivity, exact", exact_text),
        ("ε", plan.epsilon),
        ("MaxSE at n", costs.max_se),
        ("MeanSE at n", costs.mean_se),
        ("MaxSE·ε²/log₂(n)³ at n", costs.max_se_constant),
        ("MeanSE·ε²/log₂(n)³ at n", costs.mean_se_constant),
        ("same constant at N_p (untruncated)", full.max_se_constant if plan.metric == "maxse" else full.mean_se_constant),
        ("Theorem 2.5 asymptote 2C²(log₂k/log₂(2k+1))³", plan.asymptotic_constant),
    ]
