"""Exact primitives of certificates : grids, square roots, logarithms, decimals, JSON."""

from __future__ import annotations

from fractions import Fraction

import gmpy2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pure_dp_mf import exact
from pure_dp_mf.errors import InvalidInputError


def test_round_to_grid_is_the_exact_nearest_grid_point():
    rng = np.random.default_rng(1)
    matrix = rng.normal(size=(6, 5)) * 3
    rounded, moved = exact.round_to_grid(matrix, grid_bits=20)
    assert moved
    for value, result in zip(matrix.ravel(), rounded.ravel()):
        scaled = Fraction(value) * 2**20  # exact rational of the float
        nearest = Fraction(round(scaled), 2**20)  # Python rounds half to even, as rint
        assert Fraction(result) == nearest
    again, moved_again = exact.round_to_grid(rounded, grid_bits=20)
    assert not moved_again and np.array_equal(again, rounded)


def test_grid_integers_exact_refuses_off_grid_and_handles_large_numerators():
    matrix = np.array([[0.5, -0.25], [3.0, 2.0**-20]])
    numerators = exact.grid_integers(matrix, grid_bits=20)
    assert numerators.dtype == np.int64 and numerators.tolist() == [[2**19, -(2**18)], [3 * 2**20, 1]]
    with pytest.raises(InvalidInputError, match="not on the grid 2\\^-10"):
        exact.grid_integers(matrix, grid_bits=10)
    large = exact.grid_integers(np.array([[1.5, -(2.0**-70)]]), grid_bits=80)
    assert large.dtype == object and large.tolist() == [[3 * 2**79, -(2**10)]]
    flint_matrix = exact.integer_matrix(large)
    assert [int(v) for v in flint_matrix.entries()] == [3 * 2**79, -(2**10)]
    nearest = exact.grid_integers(np.array([[0.3]]), grid_bits=4, nearest=True)
    assert nearest.tolist() == [[5]]  # 0.3·16 = 4.8 → 5
    with pytest.raises(InvalidInputError, match="NaN"):
        exact.round_to_grid(np.array([[np.nan]]), grid_bits=4)


def test_row_and_column_sums_match_a_direct_computation():
    rows = [[3, -4, 0], [-(2**70), 1, 2]]
    assert exact.row_sums_of_squares(rows) == [25, 2**140 + 5]
    assert exact.row_abs_sums(rows) == [7, 2**70 + 3]
    assert exact.column_abs_sums(rows) == [2**70 + 3, 5, 2]


@settings(max_examples=200, deadline=None)
@given(st.fractions(min_value=0, max_value=10**9), st.integers(min_value=1, max_value=200))
def test_sqrt_upper_is_an_upper_bound_within_its_precision(value, bits):
    root = exact.sqrt_upper(value, bits=bits)
    assert root * root >= exact.mpq(value)
    below = root - gmpy2.mpq(2, 2**bits)
    assert below < 0 or below * below < exact.mpq(value)


def test_sqrt_upper_refuses_negative_values_and_floats():
    with pytest.raises(InvalidInputError):
        exact.sqrt_upper(Fraction(-1, 3))
    with pytest.raises(InvalidInputError, match="floats"):
        exact.sqrt_upper(2.0)


@pytest.mark.parametrize("x", [2, 3, 5, 9, 17, 33, 129, 513, 1000, 1024, 2049, 10**6 + 3])
def test_log2_lower_bound_is_below_and_close_to_log2(x):
    bound = exact.log2_lower_bound(x)
    with gmpy2.context(precision=400, round=gmpy2.RoundDown):
        reference = gmpy2.log2(gmpy2.mpfr(x))  # correctly rounded down at 400 bits
    assert gmpy2.mpfr(bound, 400) <= reference
    assert reference - gmpy2.mpfr(bound, 400) < gmpy2.mpfr(2) ** -61
    assert exact.log2_lower_bound_holds(bound, x)
    if x & (x - 1):  # not a power of two: a bound 2^-40 above the log is refused
        assert not exact.log2_lower_bound_holds(bound + gmpy2.mpq(1, 2**40), x)
    else:
        assert bound == x.bit_length() - 1
        assert not exact.log2_lower_bound_holds(bound + gmpy2.mpq(1, 2**64), x)


def test_log2_check_refuses_denominators_it_cannot_decide():
    with pytest.raises(InvalidInputError, match="power-of-two denominator"):
        exact.log2_lower_bound_holds(Fraction(1, 3), 5)
    with pytest.raises(InvalidInputError, match="power-of-two denominator"):
        exact.log2_lower_bound_holds(Fraction(1, 2**65), 5)
    assert exact.log2_lower_bound_holds(Fraction(-1), 5)
    with pytest.raises(InvalidInputError):
        exact.log2_lower_bound(1)


@settings(max_examples=200, deadline=None)
@given(st.fractions(min_value=Fraction(1, 10**30), max_value=10**20), st.integers(min_value=1, max_value=20))
def test_decimal_ceil_is_the_smallest_decimal_above(value, digits):
    result = exact.decimal_ceil(value, digits=digits)
    assert result >= exact.mpq(value)
    text = exact.decimal_string(result)
    assert Fraction(text) == exact.fraction(result)
    significant = text.replace(".", "").lstrip("0")
    assert len(significant.rstrip("0")) <= digits + 1  # +1: 9.99… rounds up to 10.0…
    exponent = 0
    while Fraction(10) ** exponent > Fraction(value):
        exponent -= 1
    while Fraction(10) ** (exponent + 1) <= Fraction(value):
        exponent += 1
    unit = Fraction(10) ** (exponent - digits + 1)  # one unit in the last of `digits` places
    assert exact.fraction(result) - unit < Fraction(value)
    headroom = exact.decimal_ceil(value, digits=digits, extra_units=1)
    assert headroom > result
    below = exact.decimal_floor(value, digits=digits)
    assert below <= exact.mpq(value) and exact.fraction(below) + unit > Fraction(value)


def test_floor_and_ceil_are_exact_for_huge_rationals():
    value = Fraction(10**40 + 1, 10**20)  # 10^20 + 10^-20: a 53-bit float would lose the fraction
    assert exact.floor(value) == 10**20 and exact.ceil(value) == 10**20 + 1
    assert exact.floor(-value) == -(10**20) - 1 and exact.ceil(-value) == -(10**20)
    assert exact.ceil(Fraction(4)) == exact.floor(Fraction(4)) == 4


def test_decimal_string_examples_and_refusal():
    assert exact.decimal_string(Fraction(3, 8)) == "0.375"
    assert exact.decimal_string(Fraction(-7, 4)) == "-1.75"
    assert exact.decimal_string(12) == "12"
    assert exact.decimal_string(Fraction(1, 2**32)) == "0.00000000023283064365386962890625"
    assert exact.decimal_string(exact.decimal_ceil(Fraction(1, 3), digits=5)) == "0.33334"
    with pytest.raises(InvalidInputError, match="no finite decimal"):
        exact.decimal_string(Fraction(1, 3))


def test_fraction_json_round_trip_and_refusals():
    value = Fraction(-(2**80) + 1, 3**20)
    assert exact.fraction_from_json(exact.fraction_to_json(value)) == value
    for bad in (
        {"numerator": 1, "denominator": "2"},
        {"numerator": "1.5", "denominator": "2"},
        {"numerator": "1", "denominator": "0"},
        {"numerator": "1", "denominator": "-2"},
        {"numerator": "", "denominator": "2"},
        {"numerator": "1"},
        "1/2",
        None,
    ):
        assert exact.fraction_from_json(bad) is None
    assert exact.parse_decimal("1.25") == Fraction(5, 4)
    for bad in ("1e3", "-1", "1.", ".5", 1.5, ""):
        assert exact.parse_decimal(bad) is None
