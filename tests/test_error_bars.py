"""Error bars: the per-step standard deviation against the empirical one, the guaranteed
interval's coverage on many seeded runs, and count --format csv/jsonl (also across a crash)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from conftest import run_cli

from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.mechanisms import mechanism as mechanisms
from pure_dp_mf.release.error_bars import dlap_variance
from pure_dp_mf.resources import BASE_FOLDER

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")

BASE = BASE_FOLDER / "k008_maxse.npz"


def test_std_matches_the_empirical_spread_and_the_interval_covers():
    """150 seeded runs of 120 steps. The runs draw their noise in pages of 256 (``page_size``:
    another layout of the same law; the counter's own pages hold 16 384 values per level);
    the counter's release is that same release with its default pages."""
    n, runs, beta = 120, 150, 0.2
    x = (np.random.default_rng(0).random(n) < 0.5).astype(int)
    mechanism = mechanisms.lifted(base=BASE, horizon=n)
    counter = ContinualCounter(mechanism=mechanism, epsilon=0.7, generator=NoiseGenerator.from_seed(0))
    own = mechanism.release(generators=[NoiseGenerator.from_seed(0)], epsilon=0.7)
    assert (counter.counts(x) - np.cumsum(x)).tolist() == np.asarray(own.noise(0, n)).reshape(-1).tolist()
    noise = []
    for seed in range(runs):
        release = mechanism.release(generators=[NoiseGenerator.from_seed(seed)], epsilon=0.7, page_size=256)
        noise.append(np.asarray(release.noise(0, n)).reshape(-1))
    noise = np.array(noise)
    bars = counter.bars(0, n, beta=beta)
    assert np.array_equal(bars.std, release.bars(0, n, beta=beta).std)
    ratio = noise.std(axis=0) / bars.std
    assert 0.93 < np.median(ratio) < 1.07 and ratio.min() > 0.7 and ratio.max() < 1.35
    # per step, the interval misses with probability ≤ β: with 150 runs, allow sampling slack only
    misses = (np.abs(noise) > bars.half_width).mean(axis=0)
    assert misses.max() <= beta + 3 * np.sqrt(beta * (1 - beta) / runs)
    assert misses.mean() <= beta
    # the guarantee costs width, but not absurdly: a few standard deviations
    assert np.all(bars.half_width > 1.2 * bars.std) and np.all(bars.half_width < 6 * bars.std)


def test_dlap_variance_is_the_exact_series():
    from fractions import Fraction

    rate = Fraction(3, 7)
    q = np.exp(-3 / 7)
    ys = np.arange(-400, 401)
    pmf = (1 - q) / (1 + q) * q ** np.abs(ys)
    assert dlap_variance(rate) == pytest.approx(float((pmf * ys**2).sum()), rel=1e-12)


def test_count_csv_and_jsonl_carry_std_and_bounds(tmp_path):
    values = [1, 0, 1, 1, 0, 1, 0, 0, 1, 1] * 3
    text = "".join(f"{v}\n" for v in values)
    arguments = ["count", "--epsilon", "1", "--horizon", "30", "--base", str(BASE), "--seed", "5"]
    plain = run_cli(*arguments, input_text=text)
    table = run_cli(*arguments, "--format", "csv", "--beta", "0.1", input_text=text)
    lines = run_cli(*arguments, "--format", "jsonl", "--beta", "0.1", input_text=text)
    assert plain.returncode == table.returncode == lines.returncode == 0, table.stderr
    table_lines = table.stdout.splitlines()
    assert table_lines[0] == "step,count,std,lower,upper"  # RFC 4180: the column names first, no comment line
    header, *records = [json.loads(line) for line in lines.stdout.splitlines()]
    assert header["header"]["beta"] == 0.1 and header["header"]["epsilon"] == 1.0 and header["header"]["horizon"] == 30
    assert header["header"]["mechanism"] == f"lifted base {BASE.name}" and header["header"]["seeded"] is True
    rows = list(csv.DictReader(io.StringIO("\n".join(table_lines))))
    counts = [int(line) for line in plain.stdout.splitlines()]
    truth = np.cumsum(values)
    for step, (row, record) in enumerate(zip(rows, records, strict=True), start=1):
        assert int(row["step"]) == record["step"] == step
        assert int(row["count"]) == record["count"] == counts[step - 1]
        assert float(row["std"]) == pytest.approx(record["std"]) and record["std"] > 0
        count = record["count"]  # the interval is cut to [0, t·m] but always holds its count
        assert min(0, count) <= record["lower"] <= truth[step - 1] <= record["upper"] <= max(step, count)  # this seed: covered
        assert record["lower"] <= count <= record["upper"]


def test_csv_output_file_is_completed_after_a_crash_in_its_own_format(tmp_path):
    values = [1, 0, 1, 1, 0, 0, 1, 1, 1, 0]
    arguments = [
        "count",
        str(tmp_path / "in.txt"),
        "--epsilon",
        "1",
        "--horizon",
        "10",
        "--base",
        str(BASE),
        "--seed",
        "2",
        "--state",
        str(tmp_path / "s.json"),
        "--output",
        str(tmp_path / "out.csv"),
        "--format",
        "csv",
        "--commit-every",
        "4",
    ]
    (tmp_path / "in.txt").write_text("".join(f"{v}\n" for v in values))
    assert run_cli(*arguments).returncode == 0
    whole = (tmp_path / "out.csv").read_text()
    for path in tmp_path.glob("s.json*"):
        path.unlink()
    (tmp_path / "out.csv").unlink()
    (tmp_path / "in.txt").write_text("".join(f"{v}\n" for v in values[:8]))
    assert run_cli(*arguments).returncode == 0
    lines = (tmp_path / "out.csv").read_text().splitlines()
    (tmp_path / "out.csv").write_text("\n".join(lines[:-3]) + "\n7,")  # the last group lost, a partial line
    (tmp_path / "in.txt").write_text("".join(f"{v}\n" for v in values))
    assert run_cli(*arguments).returncode == 0
    assert (tmp_path / "out.csv").read_text() == whole


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--format", "xml"], "--format must be one of"),
        (["--format", "csv", "--dimension", "2"], "--dimension 1"),
        (["--format", "csv", "--beta", "0"], "--beta must be a number in (0, 1)"),
    ],
)
def test_bad_format_options(extra, message):
    result = run_cli("count", "--epsilon", "1", "--horizon", "5", *extra, input_text="1\n")
    assert result.returncode == 2 and result.stderr.strip().startswith("error:") and message in result.stderr


def test_csv_input_with_a_header_a_column_and_a_byte_order_mark(tmp_path):
    days = [1, 0, 1, 1, 0]
    source = tmp_path / "daily.csv"
    source.write_bytes(
        b"\xef\xbb\xbf" + ("day,signups\n" + "".join(f"2026-01-0{i + 1},{v}\n" for i, v in enumerate(days))).encode()
    )
    arguments = ["--epsilon", "1", "--horizon", "10", "--base", str(BASE), "--seed", "4"]
    from_csv = run_cli("count", str(source), "--column", "signups", *arguments)
    plain = run_cli("count", *arguments, input_text="".join(f"{v}\n" for v in days))
    assert from_csv.returncode == 0, from_csv.stderr
    assert from_csv.stdout == plain.stdout
    headed = run_cli("count", "--header", *arguments, input_text="signups\n" + "".join(f"{v}\n" for v in days))
    assert headed.stdout == plain.stdout
    missing = run_cli("count", str(source), "--column", "views", *arguments)
    assert missing.returncode == 2 and "no such column" in missing.stderr and "day, signups" in missing.stderr


def test_a_blank_line_is_an_error_naming_it_after_the_lines_before_it():
    result = run_cli(
        "count",
        "--epsilon",
        "1",
        "--horizon",
        "10",
        "--base",
        str(BASE),
        "--seed",
        "4",
        "--invalid",
        "stop",
        input_text="1\n0\n\n1\n",
    )
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith("error: line 3: blank")
    assert len([line for line in result.stdout.splitlines() if line.strip()]) == 2


def test_sums_with_a_max_value_scale_the_noise_exactly_and_refuse_values_outside(tmp_path):
    one = ContinualCounter(base=BASE, epsilon=1.0, horizon=50, generator=NoiseGenerator.from_seed(1))
    three = ContinualCounter(base=BASE, epsilon=1.0, horizon=50, generator=NoiseGenerator.from_seed(2), max_value=3)
    assert three.step_sensitivity == 3 * one.step_sensitivity == 3
    levels = len(one.mechanism.alphas) + 1
    assert [3 * rate for rate in three.rates.levels(levels)] == one.rates.levels(levels)
    std_one, std_three = (c.bars(0, 50, beta=0.05).std for c in (one, three))
    assert np.allclose(std_three, 3 * std_one, rtol=1e-9)
    released = three.counts([3, 0, 2, 1])
    assert released.dtype == np.int64 and three.prefix_sums.tolist() == [6]
    for bad in (4, -1, 2.5):
        with pytest.raises(Exception, match="is not an integer from 0 to 3"):
            three.update(bad)
    vector = ContinualCounter(base=BASE, epsilon=1.0, horizon=50, dimension=2, generator=NoiseGenerator.from_seed(3), max_value=2)
    assert vector.step_sensitivity == 4  # a step's vector of ℓ1 norm ≤ 2 replaced by another
    vector.counts([[1, 1], [2, 0]])
    with pytest.raises(Exception, match="sum to 3"):
        vector.counts([[2, 1]])
    result = run_cli("count", "--epsilon", "1", "--horizon", "5", "--max-value", "3", "--invalid", "stop", input_text="3\n7\n")
    assert result.returncode == 2 and "line 2: a value is not an integer from 0 to 3" in result.stderr
    state = tmp_path / "s.json"
    assert (
        run_cli(
            "count", "--epsilon", "1", "--horizon", "5", "--max-value", "3", "--state", str(state), input_text="3\n"
        ).returncode
        == 0
    )
    other = run_cli("count", "--epsilon", "1", "--horizon", "5", "--max-value", "2", "--state", str(state), input_text="1\n")
    assert other.returncode == 2 and "max value 3, not 2" in other.stderr


@pytest.mark.parametrize("n", [1000, 5000, 1_000_000])
def test_auto_runs_the_mechanism_compare_ranks_best_with_its_errors(n):
    from pure_dp_mf.mechanisms.planner import comparison_rows

    best = comparison_rows(n=n, epsilon=0.5, sort_by="maxse")[0]
    counter = ContinualCounter.for_horizon(epsilon=0.5, horizon=n, generator=NoiseGenerator.from_seed(1))
    assert counter.choice == best and counter.mechanism.record["certificate"] is not None
    # the counter's own MaxSE, from its exact rates and decoder: the largest variance of a release
    own = float(np.max(counter.bars(0, n, beta=0.05).std ** 2))
    assert own == pytest.approx(best.max_se, rel=1e-9)
    if n == 5000:
        assert counter.mechanism.record["base_size"] == 64  # not the largest base: the horizon decides


def test_auto_runs_a_tree_where_a_tree_wins_and_resumes_it(tmp_path):
    counter = ContinualCounter.for_horizon(epsilon=1.0, horizon=2, generator=NoiseGenerator.from_seed(1))
    assert counter.choice.mechanism != "lifted" and counter.mechanism.kind == counter.choice.mechanism
    state = tmp_path / "s.json"
    first = run_cli("count", "--epsilon", "1", "--horizon", "2", "--seed", "3", "--state", str(state), input_text="1\n")
    assert first.returncode == 0 and "mechanism: kary tree" in first.stderr, first.stderr
    second = run_cli("count", "--epsilon", "1", "--horizon", "2", "--seed", "3", "--state", str(state), input_text="0\n")
    whole = run_cli("count", "--epsilon", "1", "--horizon", "2", "--seed", "3", input_text="1\n0\n")
    assert second.returncode == 0 and first.stdout.split() + second.stdout.split() == whole.stdout.split()
    long = run_cli("count", "--epsilon", "1", "--horizon", "5000", "--mechanism", "binary", input_text="1\n")
    assert long.returncode == 0 and "mechanism: binary tree" in long.stderr  # trees stream at any horizon


def test_the_counter_entry_point_releases_with_error_bars_and_resumes(tmp_path):
    from pure_dp_mf import Counter

    values = [3, 0, 2, 1, 0, 3, 3, 1]
    with Counter(epsilon=1.0, horizon=100, max_value=3, generator=NoiseGenerator.from_seed(6)) as whole:
        expected = whole.update_many(values)
    assert [r.step for r in expected] == list(range(1, 9)) and whole.released == 8
    assert whole.mechanism.startswith("lifted base k128_")  # compare's best for n = 100
    truth = np.cumsum(values)
    for release, true in zip(expected, truth, strict=True):
        assert release.std > 0 and release.lower <= release.count <= release.upper
        assert min(0, release.count) <= release.lower and release.upper <= max(3 * release.step, release.count)
        assert release.lower <= true <= release.upper  # this seed
    state = tmp_path / "c.json"
    with Counter(epsilon=1.0, horizon=100, max_value=3, generator=NoiseGenerator.from_seed(6), state=state) as first:
        part = [first.update(v) for v in values[:5]]
    with Counter(epsilon=1.0, horizon=100, max_value=3, generator=NoiseGenerator.from_seed(6), state=state) as again:
        rest = again.update_many(values[5:])
    assert part + rest == expected
    with pytest.raises(Exception, match="beta"):
        Counter(epsilon=1.0, horizon=10, beta=1.5)
