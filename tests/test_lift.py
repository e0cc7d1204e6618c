"""The diamond-alpha lifting (pure_dp_mf/lift.py): exact identities, implicit costs, bad input."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import flint
import numpy as np
import pytest
from conftest import dyadic_binary_tree, run_cli
from typer.testing import CliRunner

from pure_dp_mf import resources
from pure_dp_mf.cli import all_commands
from pure_dp_mf.errors import FactorizationFileError, InvalidInputError, NotAFactorizationError
from pure_dp_mf.factorizations.costs import factorization_costs
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import lift
from pure_dp_mf.mechanisms import planner as compare

app = all_commands()


def exact_random_base(k: int, seed: int) -> lift.ExactPair:
    """(T_k·R⁻¹, R) for a random invertible integer R, the decoder in exact rationals (flint)."""
    rng = np.random.default_rng(seed)
    while True:
        encoder = rng.integers(-3, 4, size=(k, k))
        matrix = flint.fmpq_mat(k, k, [int(x) for x in encoder.ravel()])
        if matrix.det() != 0:
            break
    prefix = flint.fmpq_mat(k, k, [1 if j <= i else 0 for i in range(k) for j in range(k)])
    product = prefix * matrix.inv()
    decoder = np.empty((k, k), dtype=object)
    for i in range(k):
        for j in range(k):
            decoder[i, j] = Fraction(int(product[i, j].p), int(product[i, j].q))
    return decoder, encoder.astype(object)


def exact_tree_base(k: int) -> lift.ExactPair:
    decoder, encoder = dyadic_binary_tree(k)
    return decoder.astype(np.int64).astype(object), encoder.astype(np.int64).astype(object)


def float_random_base(k: int, seed: int) -> Factorization:
    rng = np.random.default_rng(seed)
    return Factorization.from_encoder(rng.normal(size=(k, k)) + 2 * np.eye(k), metadata={"metric": "maxse"})


def exact_prefix(n: int) -> np.ndarray:
    return np.tri(n, dtype=np.int64).astype(object)


def exact_rows(decoder) -> list[Fraction]:
    return [sum((Fraction(x) ** 2 for x in row), Fraction(0)) for row in decoder]


def exact_columns(encoder) -> list[Fraction]:
    return [sum((abs(Fraction(x)) for x in column), Fraction(0)) for column in np.asarray(encoder).T]


# ---------------------------------------------------------------------------------------------
# The diamond operation: Lemma 2.3 and the three norm identities, exactly.


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_diamond_factorizes_prefix_sums_exactly_with_the_three_norm_identities(n, k):
    first = exact_random_base(n, seed=10 * n + k)
    second = exact_tree_base(k) if k == 4 else exact_random_base(k, seed=k)
    lower_first, lower_second = lift.level_norms(first), lift.level_norms(second)
    for alpha in (Fraction(1), Fraction(3, 7), Fraction(5, 2)):
        L, R = lift.diamond(first=first, second=second, alpha=alpha)
        N = 2 * k * n + n + k
        assert L.shape == (N, (2 * k + 1) * first[0].shape[1] + second[0].shape[1])
        assert (L.dot(R) == exact_prefix(N)).all()
        rows, columns = exact_rows(L), exact_columns(R)
        assert max(rows) == lower_first.max_row_norm_squared + alpha**2 * lower_second.max_row_norm_squared
        assert sum(rows) == (2 * k + 1) * lower_first.frobenius_squared + (2 * n + 1) * alpha**2 * lower_second.frobenius_squared
        assert max(columns) == lower_first.sensitivity + lower_second.sensitivity / alpha
        assert all(isinstance(x, (int, Fraction)) for x in L.ravel())


def test_diamond_layout_matches_the_documented_noise_stream():
    """L·z = A·z_head, then per group g: −(A·z_g) reversed, 0, A·z_g', each + α·(C·z_coarse)[g]."""
    A, B = exact_random_base(3, seed=1)
    C, D = exact_random_base(2, seed=2)
    alpha = Fraction(2, 3)
    L, _ = lift.diamond(first=(A, B), second=(C, D), alpha=alpha)
    r, k = 3, 2
    rng = np.random.default_rng(0)
    z = np.array([Fraction(int(x), 7) for x in rng.integers(-20, 20, size=L.shape[1])], dtype=object)
    head, coarse = z[:r], z[(2 * k + 1) * r :]
    expected = list(A.dot(head))
    for g in range(k):
        reversed_part, forward_part = z[r + 2 * g * r : r + 2 * g * r + r], z[r + 2 * g * r + r : r + 2 * (g + 1) * r]
        shift = alpha * C[g].dot(coarse)
        expected += [-value + shift for value in A.dot(reversed_part)[::-1]]
        expected += [shift]
        expected += [value + shift for value in A.dot(forward_part)]
    assert list(L.dot(z)) == expected


def test_float_diamond_equals_the_exact_one():
    first, second = exact_random_base(3, seed=3), exact_random_base(2, seed=4)
    to_float = lambda pair: Factorization(decoder=pair[0].astype(float), encoder=pair[1].astype(float))  # noqa: E731
    L, R = lift.diamond(first=first, second=second, alpha=Fraction(3, 4))
    lifted = lift.diamond(first=to_float(first), second=to_float(second), alpha=0.75)
    assert isinstance(lifted, Factorization)
    np.testing.assert_allclose(lifted.decoder, L.astype(float), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(lifted.encoder, R.astype(float), rtol=1e-14, atol=1e-14)
    assert lifted.residual() < 1e-12


# ---------------------------------------------------------------------------------------------
# The optimal alpha.


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_optimal_alpha_minimises_the_cost_of_the_explicit_diamond(metric):
    first, second = float_random_base(5, seed=5), float_random_base(3, seed=6)
    norms_first, norms_second = lift.level_norms(first), lift.level_norms(second)
    alpha = lift.optimal_alpha(first_costs=norms_first, second_costs=norms_second, metric=metric)
    assert alpha == pytest.approx(
        lift.optimal_alpha(first_costs=first.costs(), second_costs=second.costs(), metric=metric), rel=1e-12
    )

    def cost(a):
        costs = lift.diamond(first=first, second=second, alpha=a).costs()
        return costs.c2 if metric == "maxse" else costs.cf

    best = cost(alpha)
    for factor in (0.5, 0.8, 0.95, 0.99, 1.01, 1.05, 1.25, 2.0):
        assert best < cost(alpha * factor)
    # the closed-form minimum ((ab²)^{1/3} + (cd²)^{1/3})³ of (a + α²c)(b + d/α)²
    if metric == "maxse":
        a, c = norms_first.max_row_norm_squared, norms_second.max_row_norm_squared
        scale = 1.0
    else:
        a, c = 7 * norms_first.frobenius_squared, 11 * norms_second.frobenius_squared
        scale = 1 / (2 * 3 * 5 + 5 + 3)
    b, d = norms_first.sensitivity, norms_second.sensitivity
    assert best**2 == pytest.approx(scale * ((a * b * b) ** (1 / 3) + (c * d * d) ** (1 / 3)) ** 3, rel=1e-10)


def test_greedy_alpha_is_one_at_every_level_and_c2_grows_as_p_cubed_exactly():
    """With a fixed base, (a_i, b_i) = (i·a_1, i·b_1) and f_i = i(2k+1)^{i−1}f_1 for α = 1, so the
    level-i optimal α is 1 for both metrics: c₂(L_p, R_p)² = p³·c₂(base)² (Theorem 2.5 with equality)."""
    base = exact_random_base(3, seed=7)
    base_norms = lift.level_norms(base)
    for metric in ("maxse", "meanse"):
        plan = lift.lift_plan(base=base, n=10**15, metric=metric)
        assert plan.alphas_exact == (1,) * (plan.levels - 1)
        for i in range(1, plan.levels + 1):
            levels = plan.per_level_exact
            assert levels["max_row_norm_squared"][i - 1] == i * base_norms.max_row_norm_squared
            assert levels["sensitivities"][i - 1] == i * base_norms.sensitivity
            assert levels["frobenius_squared"][i - 1] == i * 7 ** (i - 1) * base_norms.frobenius_squared


def test_dyadic_alpha_is_exact_in_float64():
    for value in (1.0, 0.7937005259840998, 3.3, 1e-9, 12345.678):
        alpha = lift.dyadic(value)
        assert float(alpha) == alpha and abs(float(alpha) / value - 1) < 2**-31
        assert alpha.denominator & (alpha.denominator - 1) == 0


# ---------------------------------------------------------------------------------------------
# Implicit costs against explicit matrices.


def _explicit_profiles(factorization):
    decoder, encoder = factorization.dense()
    rows = (decoder**2).sum(axis=1)
    return np.maximum.accumulate(rows), np.cumsum(rows), np.maximum.accumulate(np.abs(encoder).sum(axis=0))


@pytest.mark.parametrize(
    "base",
    [
        pytest.param(Factorization(decoder=np.tri(1), encoder=np.eye(1)), id="k1"),
        pytest.param(float_random_base(2, seed=8), id="k2-random"),
        pytest.param(float_random_base(3, seed=9), id="k3-random"),
        pytest.param(Factorization(*dyadic_binary_tree(4)), id="k4-tree"),
    ],
)
def test_implicit_costs_equal_explicit_costs_for_every_level_up_to_5000_and_every_truncation(base):
    k = base.n
    explicit_lifts = {}  # (levels, alphas) -> dense lift; both metrics choose α = 1 (tested above)
    for metric in ("maxse", "meanse"):
        family = lift.LiftedFamily(base=base, metric=metric)
        p = 1
        while lift.lifted_size(base_size=k, levels=p) <= 5000:
            N = lift.lifted_size(base_size=k, levels=p)
            plan = family.plan(n=N)
            assert (plan.levels, plan.sizes[-1]) == (p, N)
            key = (p, plan.alphas)
            if key not in explicit_lifts:
                explicit = lift.explicit_lift(base=base, levels=p, alphas=plan.alphas)
                explicit_lifts[key] = (explicit, _explicit_profiles(explicit))
                if N <= 1000:  # L·R = T_N (float); larger N costs N³ and is covered exactly elsewhere
                    assert explicit.residual() < 1e-9
            explicit, (row_max, row_sum, sensitivity) = explicit_lifts[key]
            assert explicit.decoder.shape == (N, plan.inner_sizes[-1])
            reference = factorization_costs(decoder=explicit.decoder, encoder=explicit.encoder)
            for field in (
                "decoder_max_row_norm",
                "encoder_max_column_sum",
                "decoder_frobenius_norm",
                "c2",
                "cf",
                "max_se",
                "mean_se",
            ):
                assert getattr(plan.costs, field) == pytest.approx(getattr(reference, field), rel=1e-12)
                assert getattr(plan.untruncated_costs, field) == pytest.approx(getattr(reference, field), rel=1e-12)
            # every truncation n that uses this level (every 5th for the second metric: same α)
            lower = lift.lifted_size(base_size=k, levels=p - 1) + 1 if p > 1 else 1
            for n in range(lower, N + 1, 1 if metric == "maxse" else 5):
                small = family.plan(n=n)
                assert math.isclose(small.truncated_max_row_norm_squared, row_max[n - 1], rel_tol=1e-12)
                assert math.isclose(small.truncated_frobenius_squared, row_sum[n - 1], rel_tol=1e-12)
                assert math.isclose(small.sensitivity, sensitivity[n - 1], rel_tol=1e-12)
            n = (lower + N) // 2
            truncated = lift.explicit_lift(base=base, levels=p, alphas=plan.alphas, n=n)
            small = family.plan(n=n)
            assert small.costs.max_se == pytest.approx(truncated.costs().max_se, rel=1e-12)
            assert small.costs.mean_se == pytest.approx(truncated.costs().mean_se, rel=1e-12)
            p += 1


@pytest.mark.parametrize("k, levels", [(1, 4), (2, 3), (3, 2), (4, 2)])
def test_exact_implicit_prefix_and_suffix_queries_equal_exact_matrices(k, levels):
    base = exact_tree_base(k) if k == 4 else exact_random_base(k, seed=20 + k)
    family = lift.LiftedFamily(base=base, metric="meanse")
    plan = family.plan(n=lift.lifted_size(base_size=k, levels=levels))
    L, R = lift.explicit_lift(base=base, levels=levels, alphas=plan.alphas_exact)
    assert (L.dot(R) == exact_prefix(L.shape[0])).all()
    rows, columns = exact_rows(L), exact_columns(R)
    N = len(rows)
    for m in range(1, N + 1):
        assert family.rows.prefix(levels, m) == (sum(rows[:m]), max(rows[:m]))
        assert family.rows.suffix(levels, m) == (sum(rows[N - m :]), max(rows[N - m :]))
        assert family.columns.prefix(levels, m)[1] == max(columns[:m])
        assert family.columns.suffix(levels, m)[1] == max(columns[N - m :])
    small = family.plan(n=N - 1)
    assert small.sensitivity_exact == max(columns[: N - 1])
    assert small.truncated_frobenius_squared_exact == sum(rows[: N - 1])
    assert small.truncated_max_row_norm_squared_exact == max(rows[: N - 1])


def test_exact_lift_with_non_unit_rational_alphas():
    base = exact_random_base(2, seed=30)
    alphas = [Fraction(2, 3), Fraction(7, 5)]
    L, R = lift.explicit_lift(base=base, levels=3, alphas=alphas)
    assert (L.dot(R) == exact_prefix(L.shape[0])).all()
    L7, R7 = lift.explicit_lift(base=base, levels=3, alphas=alphas, n=7)
    assert (L7.dot(R7) == exact_prefix(7)).all()


# ---------------------------------------------------------------------------------------------
# Truncation, large n, the asymptotic constant.


def test_truncation_never_exceeds_the_untruncated_norms_or_maxse():
    for base in (float_random_base(3, seed=11), Factorization(*dyadic_binary_tree(8))):
        family = lift.LiftedFamily(base=base, metric="maxse")
        for n in range(1, 1500):
            plan = family.plan(n=n)
            full = plan.untruncated_costs
            assert plan.truncated_max_row_norm_squared <= plan.max_row_norm_squared[-1]
            assert plan.truncated_frobenius_squared <= plan.frobenius_squared[-1]
            assert plan.sensitivity <= plan.sensitivities[-1]
            assert plan.costs.max_se <= full.max_se
            assert plan.costs.mean_se <= plan.costs.max_se  # the mean of row norms ≤ their max


def test_truncated_meanse_can_exceed_the_untruncated_meanse():
    """Documented in docs/lifting.md: the per-step average is not monotone under truncation."""
    family = lift.LiftedFamily(base=Factorization(*dyadic_binary_tree(8)), metric="meanse")
    for n in (137, 2167):  # found by scanning n ∈ [137, 2600]: up to 1.5% above at n = 2167
        plan = family.plan(n=n)
        assert plan.costs.mean_se > plan.untruncated_costs.mean_se


def test_plan_for_huge_n_is_fast_and_approaches_the_asymptotic_constant():
    base = Factorization(*dyadic_binary_tree(16))
    for metric in ("maxse", "meanse"):
        plan = lift.lift_plan(base=base, n=2**60, metric=metric)
        N = plan.sizes
        assert N[-1] >= 2**60 > N[-2] and N[-1] == (33**plan.levels - 1) // 2
        assert plan.inner_sizes[-1] == base.inner_size * (33**plan.levels - 1) // 32
        asymptote = lift.asymptotic_constant(base=base, metric=metric)
        assert asymptote == plan.asymptotic_constant
        costs = base.costs()
        c = costs.c2 if metric == "maxse" else costs.cf
        assert asymptote == pytest.approx(2 * c**2 * (math.log2(16) / math.log2(33)) ** 3 / math.log2(16) ** 3, rel=1e-12)
        # at n = N_p the constant is 2p³c²/log₂(N_p)³ (MaxSE), and the same times k(2k+1)^{p−1}/N_p
        # → 2k/(2k+1) (MeanSE): it decreases to the limit, which is the asymptote (MaxSE) or
        # 2k/(2k+1) times it (MeanSE; Theorem 2.5's bound is not tight there)
        limit = asymptote * (1 if metric == "maxse" else 32 / 33)
        values = [
            lift.lift_plan(base=base, n=lift.lifted_size(base_size=16, levels=p), metric=metric).leading_constant
            for p in range(2, 14)
        ]
        assert all(later < earlier for earlier, later in zip(values, values[1:]))
        assert values[-1] > limit and values[-1] / limit < 1.05


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_truncated_alpha_rule_is_never_worse_and_locally_optimal(metric):
    base = float_random_base(3, seed=15)
    family = lift.LiftedFamily(base=base, metric=metric)

    def error(plan):
        return plan.costs.max_se if metric == "maxse" else plan.costs.mean_se

    gains = []
    for n in range(4, 1201, 19):
        paper, tuned = family.plan(n=n), family.plan(n=n, alpha_rule="truncated")
        assert tuned.alphas[:-1] == paper.alphas[:-1]
        assert error(tuned) <= error(paper) * (1 + 1e-12)
        gains.append(error(tuned) / error(paper))
    if metric == "meanse":
        assert min(gains) < 0.9  # a real gain for some n
    for n in (30, 100, 200, 1000):
        tuned = family.plan(n=n, alpha_rule="truncated")
        explicit = lift.explicit_lift(base=base, levels=tuned.levels, alphas=tuned.alphas, n=n).costs()
        assert error(tuned) == pytest.approx(explicit.max_se if metric == "maxse" else explicit.mean_se, rel=1e-12)
        for factor in (0.5, 0.9, 0.99, 1.01, 1.1, 2.0):
            other = list(tuned.alphas[:-1]) + [tuned.alphas[-1] * factor]
            moved = lift.explicit_lift(base=base, levels=tuned.levels, alphas=other, n=n).costs()
            assert error(tuned) <= (moved.max_se if metric == "maxse" else moved.mean_se) * (1 + 1e-9)


def test_exact_sensitivity_of_a_float_base_is_the_exact_column_sum():
    base = float_random_base(3, seed=16)
    to_fraction = np.vectorize(lambda x: Fraction(float(x)), otypes=[object])
    B = to_fraction(base.encoder)
    for alpha_rule in ("paper", "truncated"):
        for n in (2, 3, 20, 24, 100, 171):
            plan = lift.lift_plan(base=base, n=n, metric="meanse", alpha_rule=alpha_rule)
            R = B
            for alpha in plan.alphas_exact:  # the mathematical R_p, exact (entries B and B[:, g]/α)
                _, R = lift._diamond_matrices(np.zeros(R.shape[::-1], dtype=object), R, B.T, B, alpha, kind="exact")
            assert plan.sensitivity_exact == max(exact_columns(R[:, :n]))
            assert plan.sensitivity == pytest.approx(float(plan.sensitivity_exact), rel=1e-15)
    tree = Factorization(*dyadic_binary_tree(4))
    assert (
        lift.lift_plan(base=tree, n=999, metric="maxse").sensitivity_exact
        == lift.lift_plan(base=lift.as_exact(tree), n=999, metric="maxse").sensitivity_exact
    )


def test_asymptotic_factor_matches_paper_table_2():
    """Arkhipov & Kalinin Table 2, column (log₂k/log₂(2k+1))³, as the ratio asymptote / base constant 2C²."""
    table_2 = {4: 0.2512, 8: 0.3954, 16: 0.4986, 32: 0.5723, 64: 0.6267}
    for k, factor in table_2.items():
        base = Factorization(decoder=np.tri(k), encoder=np.eye(k))  # c₂² = k, c_F² = (k+1)/2
        for metric in ("maxse", "meanse"):
            costs = base.costs()
            own = costs.max_se_constant if metric == "maxse" else costs.mean_se_constant
            assert round(lift.asymptotic_constant(base=base, metric=metric) / own, 4) == factor


# ---------------------------------------------------------------------------------------------
# Comparison rows, plot, bad input.


def test_best_lifted_rows_pick_the_cheaper_base():
    tree = Factorization(*dyadic_binary_tree(8))
    identity = Factorization(decoder=np.tri(8), encoder=np.eye(8))
    rows = compare.best_lifted_rows(n=10**6, epsilon=0.5, bases=[identity, tree])
    assert [row.metric for row in rows] == ["maxse", "meanse"]
    for row in rows:
        plans = [lift.lift_plan(base=b, n=10**6, metric=row.metric, epsilon=0.5) for b in (identity, tree)]
        errors = [p.costs.max_se if row.metric == "maxse" else p.costs.mean_se for p in plans]
        chosen = row.max_se if row.metric == "maxse" else row.mean_se
        assert chosen == min(errors)
    shipped_like = Factorization(*dyadic_binary_tree(4), metadata={"metric": "meanse"})
    assert [row.metric for row in compare.best_lifted_rows(n=100, bases=[shipped_like])] == ["meanse"]


def test_shipped_bases_and_comparison_rows_read_a_folder(tmp_path):
    Factorization(*dyadic_binary_tree(4), metadata={"metric": "maxse"}).save(tmp_path / "k004_maxse.npz")
    Factorization(decoder=np.tri(8), encoder=np.eye(8), metadata={"metric": "maxse"}).save(tmp_path / "k008_maxse.npz")
    bases = [Factorization.load(path) for path in resources.base_files(tmp_path)]
    assert [base.n for base in bases] == [4, 8] and all(base.metric == "maxse" for base in bases)
    (row,) = compare.lifted_rows(n=5000, epsilon=2.0, directory=tmp_path)
    plans = [lift.lift_plan(base=base, n=5000, metric="maxse", epsilon=2.0) for base in bases]
    plan = min(plans, key=lambda plan: plan.costs.max_se)
    assert plans[0].costs.max_se != plans[1].costs.max_se
    assert (row.mechanism, row.arity, row.best_for) == ("lifted", plan.base_size, ("maxse",))
    assert row.max_se == plan.costs.max_se and row.max_se_constant == pytest.approx(plan.costs.max_se_constant)
    assert row.base_file == str(tmp_path / f"k{plan.base_size:03d}_maxse.npz") and row.levels == plan.levels


def test_bad_input_is_refused_with_clear_errors():
    base = float_random_base(3, seed=12)
    broken = Factorization(decoder=base.decoder + 1e-3, encoder=base.encoder)
    with pytest.raises(NotAFactorizationError, match="is not T_3"):
        lift.lift_plan(base=broken, n=100, metric="maxse")
    wrong_exact = exact_random_base(3, seed=13)
    wrong_exact[0][2, 0] += Fraction(1, 3)
    with pytest.raises(NotAFactorizationError, match="not T_3 exactly"):
        lift.lift_plan(base=wrong_exact, n=100, metric="maxse")
    with pytest.raises(NotAFactorizationError):
        lift.diamond(first=base, second=broken, alpha=1.0)
    for alpha in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError, match="alpha"):
            lift.diamond(first=base, second=base, alpha=alpha)
    exact = exact_random_base(2, seed=14)
    for alpha in (Fraction(-1, 2), 0, 0.5):
        with pytest.raises(InvalidInputError, match="alpha"):
            lift.diamond(first=exact, second=exact, alpha=alpha)
    for n in (0, -5, 2.5):
        with pytest.raises(InvalidInputError, match="n must"):
            lift.lift_plan(base=base, n=n, metric="maxse")
    with pytest.raises(InvalidInputError, match="metric"):
        lift.lift_plan(base=base, n=10, metric="mse")
    with pytest.raises(InvalidInputError, match="2 alphas"):
        lift.explicit_lift(base=base, levels=3, alphas=[1.0])
    with pytest.raises(InvalidInputError, match="use lift_plan"):
        lift.explicit_lift(base=base, levels=8, alphas=[1.0] * 7)
    with pytest.raises(InvalidInputError, match="non-exact entry"):
        lift.diamond(first=(np.array([[1.0]], dtype=object), np.array([[1]], dtype=object)), second=exact, alpha=1)
    with pytest.raises(InvalidInputError, match="Factorization or an exact"):
        lift.lift_plan(base="k004.npz", n=10, metric="maxse")


def test_cli_lift_json_table_out_and_plot(tmp_path):
    path = tmp_path / "k004_maxse.npz"
    Factorization(*dyadic_binary_tree(4), metadata={"metric": "maxse"}).save(path)
    runner = CliRunner()
    result = runner.invoke(app, ["lift", str(path), "--n", "1000", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    plan = lift.lift_plan(base=Factorization.load(path), n=1000, metric="maxse")
    assert record["levels"] == plan.levels and record["costs"]["max_se"] == pytest.approx(plan.costs.max_se)
    assert record["asymptotic_constant"] == pytest.approx(plan.asymptotic_constant)
    out, png = tmp_path / "lifted.npz", tmp_path / "curve.png"
    result = runner.invoke(
        app,
        [
            "lift",
            str(path),
            "--n",
            "300",
            "--metric",
            "meanse",
            "--alpha-rule",
            "truncated",
            "--out",
            str(out),
            "--plot",
            str(png),
            "--plot-max-n",
            "64",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "MeanSE" in result.output and "Theorem 2.5" in result.output
    saved = Factorization.load(out)
    assert saved.n == 300 and saved.residual() < 1e-9
    tuned = lift.lift_plan(base=Factorization.load(path), n=300, metric="meanse", alpha_rule="truncated")
    assert saved.costs().mean_se == pytest.approx(tuned.costs.mean_se, rel=1e-12)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    failed = run_cli("lift", str(path), "--n", "0")
    assert failed.returncode == 2 and failed.stderr.startswith("error: --n must be at least 1")
    missing = runner.invoke(app, ["lift", str(tmp_path / "missing.npz"), "--n", "10"])
    assert isinstance(missing.exception, FactorizationFileError) and "no such file" in str(missing.exception)
