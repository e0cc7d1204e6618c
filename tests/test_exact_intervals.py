"""Every interval is exact at any magnitude: a half-width past 2^63 (or 2^128) never collapses the
interval to [count, count] (release/error_bars.py ``floor_half_widths``, engines/keyed.py)."""

from __future__ import annotations

import gc
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import run_main
from hypothesis import given, settings
from hypothesis import strategies as st

from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.error_bars import ErrorBars, floor_half_widths

magnitudes = st.integers(min_value=0, max_value=140).flatmap(lambda bits: st.integers(-(2**bits), 2**bits))


@settings(max_examples=300, deadline=None)
@given(
    counts=st.lists(magnitudes, min_size=1, max_size=4),
    exponent=st.integers(min_value=-3, max_value=135),
    mantissa=st.floats(min_value=1.0, max_value=2.0, exclude_max=True),
    max_value=st.integers(min_value=1, max_value=2**130),
    first_step=st.integers(min_value=0, max_value=2**64),
)
def test_bounds_match_an_exact_fraction_computation(counts, exponent, mantissa, max_value, first_step):
    half = np.array([math.ldexp(mantissa, exponent) * (1 + i) for i in range(len(counts))])
    bars = ErrorBars(std=half / 2, half_width=half, beta=0.05)
    array = np.array(counts, dtype=object) if any(abs(c) >= 2**62 for c in counts) else np.array(counts, dtype=np.int64)
    lower, upper = bars.bounds(array, first_step=first_step, max_value=max_value)
    for i, count in enumerate(counts):
        t = first_step + 1 + i
        h = math.floor(Fraction(half[i]))  # the exact floor of the float half-width
        assert int(lower[i]) == min(max(count - h, 0), count)
        assert int(upper[i]) == max(min(count + h, max_value * t), count)
        assert int(lower[i]) <= count <= int(upper[i])
        if h > 0 and 0 < count < max_value * t:
            assert int(lower[i]) < int(upper[i])  # never collapsed


def test_a_half_width_that_is_not_finite_is_refused():
    with pytest.raises(InvalidInputError, match="overflows float64"):
        floor_half_widths(np.array([1.0, math.inf]))


def test_keyed_intervals_are_exact_past_int64():
    from pure_dp_mf.engines.keyed import KeyedCounters

    counters = KeyedCounters(keys=["a", "b"], epsilon=1.0, horizon=4, max_value=10**18, generator=NoiseGenerator.from_seed(3))
    counts = counters.release(np.array([1, 0]))
    std, lower, upper = counters.intervals(np.asarray(counts), start=0, beta=0.05)
    half = math.floor(Fraction(counters.bars(0, 1, beta=0.05).half_width[0]))
    assert half > 2**63
    for count, lo, hi in zip(np.asarray(counts).tolist(), lower.tolist(), upper.tolist(), strict=True):
        assert int(hi) == int(count) + half and int(lo) == min(max(int(count) - half, 0), int(count))


def test_a_counter_with_a_huge_noise_keeps_its_interval():
    with pytest.warns(UserWarning, match="seeded"):
        counter = Counter(epsilon=1e-20, horizon=10, generator=NoiseGenerator.from_seed(1))
    release = counter.update(1)
    assert release.lower <= 1 <= release.upper  # this seed: the true count is inside
    assert release.upper - release.lower > 2**64


@pytest.mark.parametrize("output_format", ["csv", "jsonl"])
def test_the_cli_interval_is_not_collapsed_at_m_10_18(output_format):
    code, out, err = run_main(
        "count",
        "--epsilon",
        "1",
        "--horizon",
        "10",
        "--seed",
        "1",
        "--max-value",
        str(10**18),
        "--format",
        output_format,
        stdin="1\n0\n",
    )
    assert code == 0, err
    rows = (
        out.strip().splitlines()[1:]
        if output_format == "csv"
        else [line for line in out.splitlines() if line.startswith('{"step"')]
    )
    values = [
        [int(v) for v in row.split(",")[3:5]] if output_format == "csv" else [json.loads(row)["lower"], json.loads(row)["upper"]]
        for row in rows
    ]
    assert values and all(lower <= 1 <= upper and lower < upper for lower, upper in values)


# ---------------------------------------------------------------- one key normalisation


def test_a_key_string_is_refused_not_split_into_characters():
    pd = pytest.importorskip("pandas")
    from pure_dp_mf.engines.dataframe import private_running_counts

    frame = pd.DataFrame({"key": ["FR"], "step": [1]})
    with pytest.raises(InvalidInputError, match="not the string 'FR'"):
        private_running_counts(frame, keys="FR", epsilon=1.0, horizon=4, key_column="key", step_column="step")


def test_a_key_with_spaces_is_one_key_for_the_cli_and_the_dataframe(tmp_path):
    pd = pytest.importorskip("pandas")
    from pure_dp_mf.engines.dataframe import private_running_counts

    events = tmp_path / "events.csv"
    events.write_text("step,key\n1,FR\n2, FR\n2,DE \n")
    keys = tmp_path / "keys.txt"
    keys.write_text("FR\nDE\n")
    code, out, err = run_main(
        "count",
        str(events),
        "--key-column",
        "key",
        "--keys",
        str(keys),
        "--step-column",
        "step",
        "--horizon",
        "4",
        "--epsilon",
        "1",
        "--seed",
        "5",
        "--format",
        "csv",
    )
    assert code == 0, err
    cli = {(row.split(",")[0], int(row.split(",")[1])): int(row.split(",")[2]) for row in out.strip().splitlines()[1:]}
    frame = pd.read_csv(events, dtype=str)
    with pytest.warns(UserWarning, match="seeded"):
        released = private_running_counts(
            frame,
            keys=["FR", "DE"],
            epsilon=1.0,
            horizon=4,
            key_column="key",
            step_column="step",
            generator=NoiseGenerator.from_seed(5),
        )
    for row in released.itertuples():
        assert cli[(row.key, int(row.step))] == int(row.count)  # the same events counted: the same releases


def test_tiny_epsilon_intervals_hold_past_int64_in_the_run_and_in_releases(tmp_path):
    """ε = 10⁻¹⁹ at m = 1: half-widths past 2⁶³. The csv rows of the run and of ``releases`` on its
    state are the same and each interval holds the true count; anytime jsonl prints them exactly."""
    state = tmp_path / "s.db"
    arguments = ["count", "--epsilon", "1e-19", "--horizon", "10", "--seed", "1", "--format", "csv"]
    code, out, err = run_main(*arguments, "--state", str(state), stdin="1\n0\n1\n")
    assert code == 0, err
    gc.collect()  # the in-process run's state lock goes with its counter
    code, again, err = run_main("releases", str(state), "--format", "csv")
    assert code == 0, err
    rows = [line.split(",") for line in out.strip().splitlines()[1:]]
    assert again.strip().splitlines()[1:] == out.strip().splitlines()[1:] and len(rows) == 3
    for (step, count, _, lower, upper), truth in zip(rows, (1, 1, 2), strict=True):
        assert int(lower) <= truth <= int(upper) and int(upper) - int(lower) > 2**63
    code, out, err = run_main("count", "--epsilon", "1e-19", "--seed", "1", "--format", "jsonl", stdin="1\n0\n")
    assert code == 0 and "Traceback" not in err, err
    released = [json.loads(line) for line in out.splitlines() if line.startswith('{"step"')]
    assert [row["step"] for row in released] == [1, 2]
    assert all(row["lower"] <= 1 <= row["upper"] and row["upper"] - row["lower"] > 2**63 for row in released)
