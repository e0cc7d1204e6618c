"""Tests of the 0/1 lower-bound checker (Arkhipov & Kalinin, section 4): pure_dp_mf/lower_bounds.py and
``pure-dp-mf lower-bound``. Every fast path is compared with a slow obvious one (dense products,
Python sets, brute force over all 0/1 matrices)."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
from conftest import dyadic_binary_tree, run_cli
from typer.testing import CliRunner

from pure_dp_mf.cli import all_commands
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.costs import factorization_costs
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import lower_bounds as lb
from pure_dp_mf.mechanisms import trees
from pure_dp_mf.resources import BASE_FOLDER as BASES

app = all_commands()


def kary_tree(n: int, arity: int) -> tuple[scipy.sparse.csr_matrix, scipy.sparse.csr_matrix]:
    """k-ary tree without subtraction for any n, built here independently of trees.py: nodes are
    the full aligned blocks [q·k^l, (q+1)·k^l) ⊆ [0, n); prefix t uses, at every level l, the
    nodes q with ⌊t/k^(l+1)⌋·k ≤ q < ⌊t/k^l⌋ (its base-k digits)."""
    t = np.arange(1, n + 1)
    decoder_rows, decoder_columns, encoder_rows, encoder_columns = [], [], [], []
    offset, size = 0, 1
    while size <= n:
        count = n // size
        for j in range(arity - 1):
            q = (t // (size * arity)) * arity + j
            used = q < t // size
            decoder_rows.append(t[used] - 1)
            decoder_columns.append(offset + q[used])
        encoder_rows.append(np.repeat(offset + np.arange(count), size))
        encoder_columns.append(np.arange(count * size))
        offset, size = offset + count, size * arity

    def csr(rows, columns, shape):
        rows, columns = np.concatenate(rows), np.concatenate(columns)
        return scipy.sparse.csr_matrix((np.ones(rows.size), (rows, columns)), shape=shape)

    return csr(decoder_rows, decoder_columns, (n, offset)), csr(encoder_rows, encoder_columns, (offset, n))


def obvious_family_violation(L: np.ndarray, R: np.ndarray):
    """The proof's conditions straight from Python sets, in the order the checker reports them."""
    n = L.shape[0]
    A = {i: {k for k in range(R.shape[0]) if R[k, i] == 1} for i in range(1, n)}  # A_i = C_{i+1}
    B = {j: {k for k in range(L.shape[1]) if L[j - 1, k] == 1} for j in range(1, n)}
    for j in range(1, n):
        for i in range(1, j):
            if not A[i] & B[j]:
                return ("cross", i, j)
        if A[j] & B[j]:
            return ("disjoint", j, j)
    return None


def csr(matrix) -> scipy.sparse.csr_matrix:
    return scipy.sparse.csr_matrix(np.asarray(matrix, dtype=np.int64))


# ------------------------------------------------------------------------------ exact constants


def test_ln2_bounds_bracket_ln2():
    lower, upper = lb.ln2_bounds()
    reference = Fraction("0.693147180559945309417232121458176568")  # ln 2 to 36 digits
    assert lower < reference < upper and upper - lower < Fraction(1, 10**25)


@pytest.mark.parametrize("bits", [8, 12, 16])
def test_log2_bounds_are_exact_brackets(bits):
    for m in list(range(1, 40)) + [1000, 65535, 65536]:
        lower, upper = lb.log2_bounds(m, bits=bits)
        scale = 1 << bits
        assert lower.denominator in (1, 2) or scale % lower.denominator == 0
        # 2^(D·lower) ≤ m^D ≤ 2^(D·upper), in integers
        assert 2 ** int(lower * scale) <= m**scale <= 2 ** int(upper * scale)
        assert upper - lower <= Fraction(1, scale)
        assert (lower == upper) == (m & (m - 1) == 0)


def h(t: float) -> float:
    return t ** (-1 / 3) * math.log1p(t) + t ** (2 / 3) * math.log1p(1 / t)


def test_entropy_constant_gives_the_papers_0290():
    """max_t h(t) ≤ 1.5812 on a geometric grid with monotone brackets (each of t^{-1/3}, ln(1+t),
    t^{2/3}, ln(1+1/t) is monotone), with tails bounded analytically; then (ln 2/1.5812)^{3/2} ≥ 0.290.
    Floats with a margin of 5·10⁻⁴ against rounding errors of order 10⁻¹⁵."""
    grid = np.geomspace(1e-3, 1e6, 200_001)
    t0, t1 = grid[:-1], grid[1:]
    upper = t0 ** (-1 / 3) * np.log1p(t1) + t1 ** (2 / 3) * np.log1p(1 / t0)
    assert upper.max() <= 1.5812
    assert h(5.2357636) > 1.5810  # the maximum is attained near t = 5.236
    # tails: t ≤ 1e-3: h ≤ t^{2/3}(1 + ln(2/t)) ≤ 0.09; t ≥ 1e6: h ≤ t^{-1/3}(ln(2t) + 1) ≤ 0.16
    assert 1e-2 * (1 + math.log(2e3)) < 1.5 and 1e-2 * (math.log(2e6) + 1) < 1.5
    assert (math.log(2) / 1.5812) ** 1.5 >= 0.290 + 1e-4
    assert 2 ** (1 / 3) * 1.5812 < 1.9923 and 6 * math.log(3 / 2) >= 1.9923 * math.log(3)


def test_binomial_entropy_inequality_exactly():
    """(a+b)^{a+b} ≥ C(a+b, a)·a^a·b^b, the step 3 of the reconstructed proof, in integers."""
    for a, b in itertools.product(range(0, 60), repeat=2):
        assert math.comb(a + b, a) * a**a * b**b <= (a + b) ** (a + b)


# ------------------------------------------------------------------------------ trees: the theorem holds


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 64, 256, 1024])
def test_binary_tree_satisfies_both_bounds_and_costs_match_floats(n):
    L, R = dyadic_binary_tree(n) if n & (n - 1) == 0 else kary_tree(n, 2)
    report = lb.check_lower_bound(decoder=L, encoder=R)
    assert report.status == lb.STATUS_HOLDS, report.reason
    assert all(c.status == "holds" for c in report.conditions)
    costs = factorization_costs(decoder=L, encoder=R)
    assert report.c2 == pytest.approx(costs.c2, rel=1e-12) and report.cf == pytest.approx(costs.cf, rel=1e-12)
    h = n.bit_length() - 1
    assert (report.a, report.b) == (h + 1, h) if n > 2 else True
    assert report.c2_ratio >= 1 and report.cf_ratio >= 1


@pytest.mark.parametrize("arity", range(2, 9))
@pytest.mark.parametrize("n", [3, 7, 50, 729, 1000])
def test_kary_trees_satisfy_both_bounds(arity, n):
    L, R = kary_tree(n, arity)
    dense_L, dense_R = L.toarray(), R.toarray()
    if n <= 50:
        assert np.array_equal(dense_L @ dense_R, np.tri(n))
    report = lb.check_lower_bound(decoder=L, encoder=R)
    assert report.status == lb.STATUS_HOLDS, report.reason
    assert report.c2_squared == int(dense_L.sum(axis=1).max()) * int(dense_R.sum(axis=0).max()) ** 2
    assert report.cf_squared == Fraction(int(dense_L.sum()) * int(dense_R.sum(axis=0).max()) ** 2, n)


def test_binary_tree_at_2_to_16_sparse_is_fast():
    L, R = kary_tree(1 << 16, 2)
    report = lb.check_lower_bound(decoder=L, encoder=R)
    assert report.status == lb.STATUS_HOLDS
    assert report.c2_squared == 16 * 17**2  # rows use ≤ 16 nodes (t = 2^16 − 1), columns lie in 17 nodes
    assert (report.a, report.b) == (17, 16)
    assert report.c2_ratio == pytest.approx(68 / (0.290 * math.log2(65535) ** 1.5))  # ≈ 3.66


@pytest.mark.parametrize("tree,arity", [("binary", 2), ("kary", 2), ("kary", 3), ("kary", 8)])
def test_trees_from_trees_module(tree, arity):
    for n in (2, 5, 64, 1000):
        factorization = trees.tree_factorization(mechanism=tree, n=n, arity=None if tree == "binary" else arity)
        L, R = kary_tree(n, arity)
        report = lb.check_factorization_lower_bound(factorization)
        assert report.status == lb.STATUS_HOLDS, report.reason
        if n <= 64:
            ours = lb.check_lower_bound(decoder=L, encoder=R)
            assert report.c2_squared == ours.c2_squared and report.cf_squared == ours.cf_squared


def test_tree_ratios_rows_and_unknown_tree():
    rows = list(lb.tree_ratios(tree="kary", n_values=[4, 16, 256], arity=5))
    assert [row.n for row in rows] == [4, 16, 256]
    assert all(row.status == lb.STATUS_HOLDS and row.c2_ratio >= 1 and row.cf_ratio >= 1 for row in rows)
    with pytest.raises(InvalidInputError, match="outside|not 0 or 1"):
        list(lb.tree_ratios(tree="kary-subtraction", n_values=[27], arity=3))
    with pytest.raises(InvalidInputError, match="unknown"):
        list(lb.tree_ratios(tree="quaternary", n_values=[8]))


# ------------------------------------------------------------------------------ fast paths against obvious ones


def test_family_check_and_product_check_match_obvious_implementations():
    rng = np.random.default_rng(8)
    cases = 0
    for _ in range(400):
        n, inner = int(rng.integers(2, 8)), int(rng.integers(1, 9))
        density = rng.uniform(0.1, 0.9)
        L = (rng.random((n, inner)) < density).astype(np.int64)
        R = (rng.random((inner, n)) < density).astype(np.int64)
        assert lb.family_violation(csr(L), csr(R)) == obvious_family_violation(L, R)
        mismatch = lb.first_product_mismatch(csr(L), csr(R))
        wrong = np.argwhere(L @ R != np.tri(n, dtype=np.int64))
        if wrong.size:
            row, column = (int(v) for v in wrong[0])
            assert mismatch == (row, column, int((L @ R)[row, column]))
        else:
            assert mismatch is None
        cases += obvious_family_violation(L, R) is None
    assert cases > 0  # some random families satisfy the conditions, so both branches ran


def test_single_flips_of_a_tree_are_caught_like_the_dense_check():
    L, R = dyadic_binary_tree(8)
    L, R = L.astype(np.int64), R.astype(np.int64)
    for matrix in (L, R):
        for index in itertools.product(range(matrix.shape[0]), range(matrix.shape[1])):
            matrix[index] ^= 1
            assert lb.family_violation(csr(L), csr(R)) == obvious_family_violation(L, R)
            assert (lb.first_product_mismatch(csr(L), csr(R)) is None) == np.array_equal(L @ R, np.tri(8))
            matrix[index] ^= 1


def test_conditions_do_not_imply_a_factorization():
    """The implication L·R = T_n ⇒ conditions is one-way: column 1 and |A_i ∩ B_j| = 2 are free."""
    L = np.tri(3, dtype=np.int64)
    R = np.eye(3, dtype=np.int64)
    R[0, 0] = 0  # column 1 of R empty: conditions concern only columns 2..n
    assert lb.family_violation(csr(L), csr(R)) is None
    report = lb.check_lower_bound(decoder=L, encoder=R)
    assert report.status == lb.STATUS_NOT_FACTORIZATION and "(L·R)[0, 0] = 0" in report.reason


# ------------------------------------------------------------------------------ outside the class


def subtraction_binary_tree() -> tuple[np.ndarray, np.ndarray]:
    """The binary tree of T_4 where the prefix [1, 3] is read as root − leaf 4 (subtraction trick)."""
    L, R = dyadic_binary_tree(4)
    root, leaf4 = 0, int(np.flatnonzero((R == np.array([0, 0, 0, 1])).all(axis=1))[0])
    L[2] = 0
    L[2, root], L[2, leaf4] = 1, -1
    assert np.array_equal(L @ R, np.tri(4))
    return L, R


def test_subtraction_trick_is_outside_the_class():
    L, R = subtraction_binary_tree()
    report = lb.check_lower_bound(decoder=L, encoder=R)
    assert report.status == lb.STATUS_NOT_ZERO_ONE and not report.applies
    assert "decoder[2, " in report.reason and "-1" in report.reason and "does not apply" in report.reason


def test_kary_subtraction_tree_from_trees_module_is_outside_the_class():
    report = lb.check_factorization_lower_bound(trees.tree_factorization(mechanism="kary-subtraction", n=81, arity=3))
    assert report.status == lb.STATUS_NOT_ZERO_ONE, report.reason


def trained_base() -> tuple[Factorization, str]:
    """A shipped trained base when one exists, else from_encoder of a random matrix."""
    shipped = sorted((BASES).glob("k*_*.npz"))
    if shipped:
        return Factorization.load(min(shipped, key=lambda path: path.stat().st_size)), "shipped"
    rng = np.random.default_rng(0)
    return Factorization.from_encoder(np.eye(8) + 0.1 * rng.random((8, 8))), "random"


def test_trained_base_is_outside_the_class():
    factorization, _ = trained_base()
    report = lb.check_factorization_lower_bound(factorization)
    assert report.status == lb.STATUS_NOT_ZERO_ONE and "is not 0 or 1" in report.reason


def test_zero_one_pair_whose_product_is_not_the_workload_is_rejected():
    report = lb.check_lower_bound(decoder=np.eye(4), encoder=np.eye(4))
    assert report.status == lb.STATUS_NOT_FACTORIZATION
    assert "(L·R)[1, 0] = 0, T_n has 1" in report.reason and report.c2 is None


def test_sparse_inputs_explicit_zeros_and_non_binary_sparse_entries():
    L, R = dyadic_binary_tree(8)
    sparse_L = scipy.sparse.csr_matrix(L)
    sparse_L.data = sparse_L.data.copy()
    with_zero = scipy.sparse.coo_matrix(
        (np.append(sparse_L.tocoo().data, 0.0), (np.append(sparse_L.tocoo().row, 0), np.append(sparse_L.tocoo().col, 5))),
        shape=L.shape,
    )
    assert lb.check_lower_bound(decoder=with_zero, encoder=scipy.sparse.csc_matrix(R)).status == lb.STATUS_HOLDS
    doubled = scipy.sparse.csr_matrix(R * 2.0)
    report = lb.check_lower_bound(decoder=sparse_L, encoder=doubled)
    assert report.status == lb.STATUS_NOT_ZERO_ONE and "encoder[0, 0] = 2.0" in report.reason
    boolean = lb.check_lower_bound(decoder=L.astype(bool), encoder=R.astype(bool))
    assert boolean.status == lb.STATUS_HOLDS
    rows, columns = np.nonzero(R)  # duplicated entries summing to 2: named, the caller's matrix untouched
    duplicated = scipy.sparse.csr_matrix(
        (np.ones(rows.size + 1), (np.append(rows, rows[-1]), np.append(columns, columns[-1]))), shape=R.shape
    )
    duplicated.has_canonical_format = False
    before = duplicated.data.copy()
    report = lb.check_lower_bound(decoder=L, encoder=duplicated)
    assert f"encoder[{rows[-1]}, {columns[-1]}] = 2.0 is not 0 or 1" in report.reason
    assert np.array_equal(duplicated.data, before)


@pytest.mark.parametrize(
    "decoder,encoder,message",
    [
        (np.ones((3, 2)), np.ones((2, 4)), "not square"),
        (np.ones((3, 2)), np.ones((3, 3)), "inner sizes differ"),
        (np.ones((1, 1)), np.ones((1, 1)), "n >= 2"),
        (np.ones(3), np.ones((3, 3)), "2-dimensional"),
        (np.array([["a", "b"], ["c", "d"]]), np.eye(2), "dtype"),
        (np.zeros((0, 0)), np.zeros((0, 0)), "empty"),
    ],
)
def test_bad_input_is_a_clear_error(decoder, encoder, message):
    with pytest.raises(InvalidInputError, match=message):
        lb.check_lower_bound(decoder=decoder, encoder=encoder)


def test_nan_entry_is_named():
    L, R = dyadic_binary_tree(4)
    R[1, 2] = np.nan
    report = lb.check_lower_bound(decoder=L, encoder=R)
    assert report.status == lb.STATUS_NOT_ZERO_ONE and "encoder[1, 2] = nan" in report.reason


def test_a_gap_in_the_constant_is_reported_as_a_violation(monkeypatch):
    """Simulate a false constant (2.0 instead of 0.290): the checker must name the failing step."""
    monkeypatch.setattr(lb, "C2_CONSTANT", Fraction(2))
    L, R = dyadic_binary_tree(64)
    report = lb.check_lower_bound(decoder=L, encoder=R)
    assert report.status == lb.STATUS_VIOLATION
    assert report.first_failure().name == "entropy_c2" and "gap in the paper" in report.reason


# ------------------------------------------------------------------------------ bounds


def test_bounds_values_and_exact_comparison_near_the_threshold():
    assert lb.c2_bound(2) == 0 and lb.cf_bound(2) == 0
    assert lb.c2_bound(1025) == pytest.approx(0.290 * 10**1.5)
    assert lb.cf_bound(1025) == pytest.approx((math.log(2) / 6) ** 1.5 * math.sqrt(1024 / 1025) * 10**1.5)
    # bound² at n = 1025 is 0.0841·1000 = 84.1 exactly: 84.1 holds, 84.1 − 10⁻⁹ fails
    bracket = lb._c2_bound_squared_bracket(1025)
    assert lb._compare(Fraction(841, 10), bracket) == "holds"
    assert lb._compare(Fraction(841, 10) - Fraction(1, 10**9), bracket) == "fails"
    bracket = lb._c2_bound_squared_bracket(1000)  # irrational: decided within 10⁻⁶ either side
    value = Fraction(0.0841 * math.log2(999) ** 3)
    assert lb._compare(value * (1 + Fraction(1, 10**6)), bracket) == "holds"
    assert lb._compare(value * (1 - Fraction(1, 10**6)), bracket) == "fails"


# ------------------------------------------------------------------------------ exhaustive search


def brute_force_minimum(n: int, inner: int) -> tuple[int, Fraction]:
    """Least c₂², c_F² over all 0/1 R (inner × n), the best 0/1 L row by row (fewest ones)."""
    X = np.array(list(itertools.product((0, 1), repeat=inner)), dtype=np.int64)  # candidate rows of L
    Rs = np.array(list(itertools.product((0, 1), repeat=inner * n)), dtype=np.int64).reshape(-1, inner, n)
    products = np.einsum("xs,rsn->rxn", X, Rs)  # every candidate row times every R
    targets = np.tri(n, dtype=np.int64)
    ones = X.sum(axis=1)
    best2, bestF = math.inf, math.inf
    fewest = np.full((Rs.shape[0], n), 10**6)
    for i in range(n):
        match = (products == targets[i]).all(axis=2)
        fewest[:, i] = np.where(match, ones[None, :], 10**6).min(axis=1)
    feasible = (fewest < 10**6).all(axis=1)
    a = Rs.sum(axis=1).max(axis=1)
    best2 = int((fewest.max(axis=1) * a**2)[feasible].min())
    bestF = int((fewest.sum(axis=1) * a**2)[feasible].min())
    return best2, Fraction(bestF, n)


@pytest.mark.parametrize("n,inner", [(2, 2), (2, 3), (2, 4), (3, 3), (3, 4), (4, 4)])
def test_exhaustive_search_matches_brute_force(n, inner):
    result = lb.exhaustive_minimum(n=n, max_inner_size=inner)
    assert (result.c2_squared, result.cf_squared) == brute_force_minimum(n, inner)


@pytest.mark.parametrize("n", range(2, 7))
def test_exhaustive_minimum_witnesses_and_bounds(n):
    result = lb.exhaustive_minimum(n=n)
    for (L, R), square in ((result.c2_witness, result.c2_squared), (result.cf_witness, None)):
        assert np.array_equal(L @ R, np.tri(n))
        report = lb.check_lower_bound(decoder=L, encoder=R)
        assert report.status == lb.STATUS_HOLDS
        if square is not None:
            assert report.c2_squared == square
        else:
            assert report.cf_squared == result.cf_squared
    assert result.c2 >= lb.c2_bound(n) and result.cf >= lb.cf_bound(n)
    # n ≤ 6: the trivial factorization T_n·I is optimal (c₂² = n, c_F² = (n+1)/2), see docs
    assert (result.c2_squared, result.cf_squared) == (n, Fraction(n + 1, 2))
    assert lb.exhaustive_minimum(n=n, max_inner_size=n).c2_squared == n


def test_exhaustive_search_rejects_bad_sizes():
    with pytest.raises(InvalidInputError, match="at most 7"):
        lb.exhaustive_minimum(n=8)
    with pytest.raises(InvalidInputError, match="at least 2"):
        lb.exhaustive_minimum(n=1)
    with pytest.raises(InvalidInputError, match="inner size ≤ 2"):
        lb.exhaustive_minimum(n=3, max_inner_size=2)


# ------------------------------------------------------------------------------ command line

runner = CliRunner()


def saved(tmp_path: Path, decoder, encoder, name: str) -> Path:
    return Factorization(decoder=decoder, encoder=encoder, metadata={"metric": "maxse"}).save(tmp_path / name)


def test_cli_file_holds_with_json(tmp_path):
    path = saved(tmp_path, *dyadic_binary_tree(32), "tree.npz")
    result = runner.invoke(app, ["lower-bound", str(path), "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["status"] == "holds" and record["c2_ratio"] >= 1 and record["cf_ratio"] >= 1
    assert [c["name"] for c in record["conditions"]][:4] == ["zero_one", "factorization", "disjoint", "cross"]
    table = runner.invoke(app, ["lower-bound", str(path)])
    assert table.exit_code == 0 and "c₂ / bound" in table.output


def test_cli_outside_the_class_exit_code_3(tmp_path):
    path = saved(tmp_path, *subtraction_binary_tree(), "subtraction.npz")
    result = runner.invoke(app, ["lower-bound", str(path), "--json"])
    assert result.exit_code == 3 and json.loads(result.output)["status"] == "not_zero_one"
    path = saved(tmp_path, np.eye(5), np.eye(5), "identity.npz")
    result = runner.invoke(app, ["lower-bound", str(path)])
    assert result.exit_code == 3 and "not_a_factorization" in result.output


def main_in_process(monkeypatch, capsys, *arguments: str) -> tuple[int, str, str]:
    """``pure_dp_mf.cli.main`` (error → exit 2) in this process: (exit code, stdout, stderr)."""
    from pure_dp_mf.cli import main

    monkeypatch.setattr("sys.argv", ["pure-dp-mf", *arguments])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_cli_bad_files_and_arguments_exit_2(tmp_path, monkeypatch, capsys):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip")
    for arguments, message in [
        ((str(garbage),), "not an .npz file"),
        ((str(tmp_path / "missing.npz"),), "no such file"),
        ((), "exactly one of"),
        (("--tree", "ternary", "--n", "8"), "unknown tree"),
        (("--tree", "binary"), "needs --n"),
        (("--exhaustive", "9"), "at most 7"),
        ((str(garbage), "--plot", str(tmp_path / "x.png")), "--plot needs"),
    ]:
        code, _, error = main_in_process(monkeypatch, capsys, "lower-bound", *arguments)
        assert code == 2 and message in error, (arguments, error)
    one = saved(tmp_path, np.ones((1, 1)), np.ones((1, 1)), "one.npz")
    result = run_cli("lower-bound", str(one))  # once end to end, through the installed entry point
    assert result.returncode == 2 and "n >= 2" in result.stderr


def test_cli_exhaustive(tmp_path):
    result = runner.invoke(app, ["lower-bound", "--exhaustive", "4", "--json"])
    assert result.exit_code == 0
    record = json.loads(result.output)
    assert record["min_c2_squared"] == 4 and record["min_cf_squared"] == "5/2" and record["c2_bound"] < record["min_c2"]


def test_cli_trees_table_and_plot(tmp_path):
    result = runner.invoke(app, ["lower-bound", "--tree", "kary", "--arity", "4", "--n", "256", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["status"] == "holds"
    result = runner.invoke(app, ["lower-bound", "--tree", "kary-subtraction", "--arity", "3", "--n", "27"])
    assert result.exit_code == 3
    plot = tmp_path / "ratios.png"
    result = runner.invoke(app, ["lower-bound", "--sweep", "--n", "64", "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 8 * 5 and all(row["c2_ratio"] >= 1 and row["cf_ratio"] >= 1 for row in rows)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
