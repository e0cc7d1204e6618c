"""engines/continual.py and ``pure-dp-mf count``: the counter's exact sensitivity and noise
statistics, releases by step and by batch, vectors, exact integers beyond int64, bad input, and
the command's output, errors and crash safety (the journal's attacks: tests/test_journal.py)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import warnings
from fractions import Fraction

import numpy as np
import pytest
import scipy.stats
from conftest import ROOT, SAFETY_LIMIT, dyadic_binary_tree, run_cli

from pure_dp_mf.engines.continual import ContinualCounter, float_upper
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.generator import GeneratorSource, NoiseGenerator
from pure_dp_mf.engines.journal import StateFileError
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.costs import max_column_abs_sum_exact
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import mechanism as mechanisms
from pure_dp_mf.mechanisms.lift import as_exact, explicit_lift, lift_plan
from pure_dp_mf.mechanisms.lifted import LiftedDecoder
from pure_dp_mf.mechanisms.resolve import resolve_mechanism

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")


def _grid_base(k: int, seed: int) -> Factorization:
    rng = np.random.default_rng(seed)
    encoder = np.round((np.eye(k) + 0.3 * np.triu(rng.normal(size=(k, k)), 1)) * 2**32) / 2**32
    return Factorization.from_encoder(encoder, metadata={"metric": "maxse"})


def _tree_base(k: int) -> Factorization:
    decoder, encoder = dyadic_binary_tree(k)
    return Factorization(decoder=decoder, encoder=encoder, metadata={"metric": "meanse"})


@pytest.fixture(scope="module")
def base_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bases") / "k008_maxse.npz"
    _grid_base(8, 1).save(path, store_decoder=False)
    return path


def _seeded(seed: int) -> NoiseGenerator:
    return NoiseGenerator.from_seed(seed)


# ---------------------------------------------------------------------------------------------
# Sensitivity: exact, never a float estimate that could be low.


def test_counter_sensitivity_is_the_exact_norm_of_the_truncated_lift():
    base = _tree_base(2)
    exact = as_exact(base)
    for n in (12, 62):
        plan = lift_plan(base=exact, n=n, metric="maxse")
        R = explicit_lift(base=exact, levels=plan.levels, alphas=plan.alphas_exact, n=n)[1]
        counter = ContinualCounter(base=base, epsilon=1.0, horizon=n, metric="maxse", generator=_seeded(0))
        assert counter.sensitivity == max_column_abs_sum_exact(R) == plan.sensitivity_exact


def test_float_upper_rounds_up():
    for value in (Fraction(1, 3), Fraction(2, 3), Fraction(10**20 + 1, 7), Fraction(5, 4)):
        upper = float_upper(value)
        assert Fraction(upper) >= value and Fraction(math.nextafter(upper, -math.inf)) < value


def test_counter_scale_is_the_rounded_up_exact_sensitivity(base_file):
    counter = ContinualCounter(base=base_file, epsilon=0.7, horizon=5000, generator=_seeded(0))
    plan = lift_plan(base=Factorization.load(base_file), n=5000, metric="maxse")
    assert counter.sensitivity == plan.sensitivity_exact
    assert Fraction(counter.scale) >= counter.sensitivity / Fraction(0.7)
    vector = ContinualCounter(base=base_file, epsilon=0.7, horizon=50, dimension=3, generator=_seeded(1))
    assert vector.scale == float_upper(2 * vector.sensitivity / Fraction(0.7))


def test_tree_sensitivity_is_the_closed_form_and_the_matrix_norm():
    from pure_dp_mf.mechanisms import trees

    for mechanism, arity in (
        ("binary", None),
        ("kary-subtraction", 5),
        ("averaged-kary-subtraction", 3),
        ("smooth-binary", None),
    ):
        tree = mechanisms.tree(mechanism=mechanism, horizon=200, arity=arity)
        encoder = trees.tree_factorization(mechanism=mechanism, n=200, arity=arity).dense()[1]
        assert tree.sensitivity == max_column_abs_sum_exact(encoder)


# ---------------------------------------------------------------------------------------------
# Statistics of the noise.


def test_noise_mean_and_variance_per_step():
    """Over R = 1500 seeded runs, each step's noise b·(L·z)_t has mean 0 and variance
    2b²‖L_t‖². Statistics: Z_mean = mean/√(σ²/R) and Z_var = (s² − σ²)/√((μ₄ − σ⁴)/R) with the
    exact fourth moment μ₄ = 12b⁴(Σc²)² + 12b⁴Σc⁴ of Σ c_j z_j, z_j ~ Laplace(b). Every |Z| must stay
    below the Bonferroni threshold for a total false-alarm rate of 10⁻⁴ (normal approximation)
    over the 2n statistics. Power: the same samples must be rejected when the claimed scale is off
    by 30% in either direction."""
    base, epsilon, n, runs = _grid_base(3, 0), 0.5, 40, 1500
    counter = ContinualCounter(base=base, epsilon=epsilon, horizon=n, generator=_seeded(0))
    alphas = [float(a) for a in counter.mechanism.alphas]
    b = counter.scale
    engine = LiftedDecoder(decoder=base.dense()[0], alphas=alphas, rows=n)
    samples = np.array([b * engine.values(GeneratorSource(_seeded(seed)), 0, n) for seed in range(1, runs + 1)])
    L = explicit_lift(base=base, levels=len(alphas) + 1, alphas=alphas, n=n).dense()[0]
    threshold = scipy.stats.norm.isf(1e-4 / (2 * 2 * n))

    def largest_statistic(scale: float) -> float:
        sigma2 = 2 * scale**2 * (L**2).sum(axis=1)
        mu4 = 12 * scale**4 * ((L**2).sum(axis=1) ** 2 + (L**4).sum(axis=1))
        z_mean = samples.mean(axis=0) / np.sqrt(sigma2 / runs)
        z_var = (samples.var(axis=0, ddof=1) - sigma2) / np.sqrt((mu4 - sigma2**2) / runs)
        return float(np.max(np.abs(np.concatenate([z_mean, z_var]))))

    assert largest_statistic(b) < threshold
    assert largest_statistic(1.3 * b) > threshold
    assert largest_statistic(b / 1.3) > threshold


# ---------------------------------------------------------------------------------------------
# The counter.


def test_releases_by_step_and_by_batch_agree_and_are_integers(base_file):
    """(The releases against the dense exact lift: tests/test_lattice.py.)"""
    n = 300
    x = (np.random.default_rng(1).random(n) < 0.3).astype(int)
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=n, generator=_seeded(9))
    released = [counter.update(int(v)) for v in x]
    assert all(type(v) is int for v in released)
    batch = ContinualCounter(base=base_file, epsilon=1.0, horizon=n, generator=_seeded(9))
    assert np.array_equal(np.concatenate([batch.counts(x[:17]), batch.counts(x[17:])]), released)
    assert counter.fallbacks == 0  # at n = 300 a float decision is essentially never too close to call


def test_every_tree_runs_through_the_counter_at_any_horizon():
    """Trees stream (no dense n×n matrix): a binary tree of horizon 10⁶ releases, and a fresh
    counter started at step 19 990 reads the same node noise as the one that ran there."""
    tree = mechanisms.tree(mechanism="binary", horizon=10**6)
    counter = ContinualCounter(epsilon=1.0, mechanism=tree, generator=_seeded(3))
    counter.counts(np.zeros(19_990, dtype=np.int64))
    tail = counter.counts(np.ones(10, dtype=np.int64))
    fresh = ContinualCounter(epsilon=1.0, mechanism=tree, generator=_seeded(3))
    assert np.array_equal(tail, np.arange(1, 11) + fresh._release.noise(19_990, 20_000))


def test_vector_counter(base_file):
    x = np.zeros((30, 3), dtype=int)
    x[np.arange(30), np.arange(30) % 3] = np.arange(30) % 2
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=30, dimension=3, generator=_seeded(2))
    released = np.array([counter.update(row) for row in x])
    again = ContinualCounter(base=base_file, epsilon=1.0, horizon=30, dimension=3, generator=_seeded(2)).counts(x)
    assert released.shape == (30, 3) and np.array_equal(released, again)
    noise_part = released - np.cumsum(x, axis=0)
    assert not np.array_equal(noise_part[:, 0], noise_part[:, 1])  # independent streams


@pytest.mark.parametrize(
    "bad, message",
    [
        (2, "not 0 or 1"),
        (-1, "not 0 or 1"),
        (0.5, "not 0 or 1"),
        (math.nan, "not 0 or 1"),
        ("a", "not 0 or 1"),
        ([1, 1], "dimension"),
    ],
)
def test_bad_values_change_nothing(base_file, bad, message):
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=10, generator=_seeded(4))
    reference = ContinualCounter(base=base_file, epsilon=1.0, horizon=10, generator=_seeded(4))
    first = [counter.update(1), counter.update(0)]
    with pytest.raises(InvalidInputError, match=message):
        counter.update(bad)
    assert counter.released == 2
    assert first + [counter.update(1)] == [reference.update(v) for v in (1, 0, 1)]


def test_vector_steps_with_two_ones_and_the_horizon(base_file):
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=3, dimension=2, generator=_seeded(4))
    with pytest.raises(InvalidInputError, match="at most one"):
        counter.update([1, 1])
    counter.counts([[1, 0], [0, 1], [0, 0]])
    with pytest.raises(InvalidInputError, match="exceed the horizon"):
        counter.update([0, 0])
    assert counter.released == 3


def test_counts_are_exact_integers_beyond_int64():
    """m = 5·10^15 over 2 000 steps: the running count passes 2⁶³ and stays exact (Python ints),
    within its interval of the true sum; 2⁶⁰ is taken exactly, never as a float. (A k = 16 base:
    noise this large takes the exact route at every step, an exact solve per block.)"""
    m, n = 5 * 10**15, 2000
    base = ROOT / "base_factorizations" / "k016_maxse.npz"
    counter = Counter(epsilon=1.0, horizon=n, max_value=m, base=base, generator=_seeded(5))
    released = counter.release([m] * n)
    truth = [m * t for t in range(1, n + 1)]
    assert released.counts[-1] > 2**63 and released.counts.dtype == object
    assert all(low <= true <= high for low, true, high in zip(released.lower, truth, released.upper, strict=True))
    big = Counter(epsilon=1.0, horizon=3, max_value=2**60, generator=_seeded(6))
    first = big.update(2**53 + 1)
    again = Counter(epsilon=1.0, horizon=3, max_value=2**60, generator=_seeded(6)).update(0)
    assert first.count - again.count == 2**53 + 1  # the same noise: the difference is the value, exactly
    assert 0 <= first.lower <= first.upper <= 2**60


def test_a_closed_counter_releases_nothing(base_file, tmp_path):
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=10, generator=_seeded(4))
    counter.update(1)
    counter.close()
    with pytest.raises(StateFileError, match="closed"):
        counter.update(1)


# ---------------------------------------------------------------------------------------------
# The command.


def test_count_command_matches_the_library(base_file):
    x = [1, 0, 0, 1, 1, 1, 0, 1]
    result = run_cli(
        "count",
        "--epsilon",
        "2",
        "--horizon",
        "20",
        "--base",
        str(base_file),
        "--seed",
        "3",
        input_text="\n".join(map(str, x)) + "\n",
    )
    assert result.returncode == 0, result.stderr
    expected = ContinualCounter(base=base_file, epsilon=2.0, horizon=20, generator=_seeded(3)).counts(x)
    assert [int(line) for line in result.stdout.splitlines()] == expected.tolist()


@pytest.mark.parametrize(
    "text, message",
    [
        ("1\n0\n2\n", "line 3: a value is not 0 or 1"),
        ("1\nnan\n", "line 2: not an integer"),
        ("1\n1_0\n", "line 2: not an integer"),
        ("1\n١\n", "line 2: not an integer"),
        ("1\n1\n1\n1\n", "line 4: more steps than the horizon 3"),
    ],
)
def test_a_bad_file_is_refused_before_any_release(base_file, tmp_path, text, message):
    """A file is checked whole first: one error line naming the line, nothing released, no state."""
    (tmp_path / "in.txt").write_text(text)
    result = run_cli(
        "count",
        str(tmp_path / "in.txt"),
        "--epsilon",
        "1",
        "--horizon",
        "3",
        "--base",
        str(base_file),
        "--seed",
        "1",
        "--state",
        str(tmp_path / "s.db"),
    )
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert f"error: {message}" in result.stderr.splitlines()[-1]
    assert Counter(epsilon=1.0, horizon=3, base=base_file, generator=_seeded(1), state=tmp_path / "s.db").released == 0


def test_a_stream_follows_its_invalid_policy(base_file):
    """On standard input an invalid line counts as 0 by default (the policy in the metadata),
    clamped with --invalid clamp, or stops the run with --invalid stop (not private)."""
    expected = ContinualCounter(base=base_file, epsilon=1.0, horizon=5, generator=_seeded(1)).counts([1, 0, 1, 1, 0])
    command = ["count", "--epsilon", "1", "--horizon", "5", "--base", str(base_file), "--seed", "1"]
    zero = run_cli(*command, "--format", "jsonl", input_text="1\nx\n1\n1\n0\n")
    assert zero.returncode == 0 and '"invalid": "zero"' in zero.stdout.splitlines()[0]
    assert [int(line.split('"count": ')[1].split(",")[0]) for line in zero.stdout.splitlines()[1:]] == expected.tolist()
    clamp = run_cli(*command, "--invalid", "clamp", input_text="1\n0\n7\n1\n0\n")
    assert [int(v) for v in clamp.stdout.split()] == expected.tolist()
    stop = run_cli(*command, "--invalid", "stop", input_text="1\n0\n7\n")
    assert stop.returncode == 2 and "line 3" in stop.stderr and len(stop.stdout.split()) == 2


def test_csv_output_is_plain_csv_with_a_sidecar(base_file, tmp_path):
    import csv

    out = tmp_path / "out.csv"
    result = run_cli(
        "count",
        "--epsilon",
        "1",
        "--horizon",
        "6",
        "--base",
        str(base_file),
        "--seed",
        "2",
        "--format",
        "csv",
        "--output",
        str(out),
        input_text="1\n0\n1\n",
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert [int(row["step"]) for row in rows] == [1, 2, 3] and set(rows[0]) == {"step", "count", "std", "lower", "upper"}
    meta = (tmp_path / "out.csv.meta.json").read_text()
    assert '"epsilon": 1.0' in meta and '"privacy_unit": "step"' in meta


def test_kill_9_and_restart_loses_and_repeats_nothing(base_file, tmp_path):
    """kill -9 twice during ``count --state``: the output file equals the uninterrupted run."""
    n = 150
    values = (np.random.default_rng(5).random(n) < 0.4).astype(int)
    source = tmp_path / "input.txt"
    source.write_text("\n".join(map(str, values)) + "\n")
    output = tmp_path / "out.txt"
    command = [
        sys.executable,
        "-c",
        "from pure_dp_mf.cli import main; main()",
        "count",
        str(source),
        "--epsilon",
        "1",
        "--horizon",
        str(n),
        "--base",
        str(base_file),
        "--seed",
        "12",
        "--state",
        str(tmp_path / "state.db"),
        "--output",
        str(output),
        "--commit-every",
        "7",
    ]  # groups of 7 lines: kills land inside and between groups
    for kill_after in (30, 90):
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if output.exists() and output.read_text().count("\n") >= kill_after:
                break
            time.sleep(0.005)
        assert process.poll() is None, "the counter finished before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=SAFETY_LIMIT)
    assert finished.returncode == 0, finished.stderr
    expected = ContinualCounter(base=base_file, epsilon=1.0, horizon=n, generator=_seeded(12)).counts(values)
    assert [int(line) for line in output.read_text().splitlines()] == expected.tolist()


@pytest.mark.parametrize("lost, partial", [(1, ""), (2, "1"), (9, "")])
def test_an_output_short_of_the_state_is_completed_from_it(base_file, tmp_path, lost, partial):
    """A kill after a commit and before its lines reach the output leaves the output short (or
    with a partial line); the restart writes exactly the released values again, from the state
    (which keeps every released row), once."""
    values = [1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 0]
    arguments = [
        "count",
        str(tmp_path / "in.txt"),
        "--epsilon",
        "1",
        "--horizon",
        "12",
        "--base",
        str(base_file),
        "--seed",
        "4",
        "--state",
        str(tmp_path / "state.db"),
        "--output",
        str(tmp_path / "out.txt"),
    ]
    expected = ContinualCounter(base=base_file, epsilon=1.0, horizon=12, generator=_seeded(4)).counts(values).tolist()
    (tmp_path / "in.txt").write_text("\n".join(map(str, values[:10])) + "\n")
    assert run_cli(*arguments).returncode == 0
    lines = (tmp_path / "out.txt").read_text().splitlines()
    (tmp_path / "out.txt").write_text("".join(line + "\n" for line in lines[:-lost]) + partial)
    (tmp_path / "in.txt").write_text("\n".join(map(str, values)) + "\n")
    finished = run_cli(*arguments)
    assert finished.returncode == 0, finished.stderr
    assert [int(line) for line in (tmp_path / "out.txt").read_text().splitlines()] == expected


def test_count_refuses_a_state_of_another_epsilon_or_seed_and_says_it_resumes(base_file, tmp_path):
    state = tmp_path / "s.db"
    arguments = ["count", "--horizon", "5", "--state", str(state)]
    assert run_cli(*arguments, "--epsilon", "1", "--base", str(base_file), input_text="1\n").returncode == 0
    result = run_cli(*arguments, "--epsilon", "2", input_text="1\n")
    assert result.returncode == 2 and "epsilon" in result.stderr
    result = run_cli(*arguments, "--epsilon", "1", "--seed", "3", input_text="1\n")
    assert result.returncode == 2 and "another generator" in result.stderr
    result = run_cli(*arguments, "--epsilon", "1", input_text="0\n")
    assert result.returncode == 0 and len(result.stdout.split()) == 1 and f"resuming after step 1 of 5 ({state})" in result.stderr


def test_counter_from_a_certificate_binds_the_base_and_rechecks_its_sensitivity(tmp_path):
    import shutil

    from pure_dp_mf.certificates.certify import ClaimFailedError
    from pure_dp_mf.resources import BASE_FOLDER, CERTIFICATE_FOLDER

    counter = ContinualCounter.from_certificate(
        CERTIFICATE_FOLDER / "k004_maxse.json", epsilon=1.0, horizon=50, generator=_seeded(0)
    )
    assert counter.mechanism.record["certificate"] == str((CERTIFICATE_FOLDER / "k004_maxse.json").resolve())
    assert counter.mechanism.record["base"] == str((BASE_FOLDER / "k004_maxse.npz").resolve())
    direct = ContinualCounter(base=BASE_FOLDER / "k004_maxse.npz", epsilon=1.0, horizon=50, generator=_seeded(0))
    x = np.ones(50, dtype=int)
    assert np.array_equal(counter.counts(x), direct.counts(x)) and counter.sensitivity == direct.sensitivity
    (tmp_path / "certificates").mkdir()
    (tmp_path / "base_factorizations").mkdir()
    shutil.copy(CERTIFICATE_FOLDER / "k004_maxse.json", tmp_path / "certificates")
    other = Factorization.load(BASE_FOLDER / "k004_meanse.npz")
    other.metadata = {**other.metadata, "metric": "maxse"}
    other.save(tmp_path / "base_factorizations" / "k004_maxse.npz", store_decoder=False)
    with pytest.raises(ClaimFailedError, match="sha256|factorization"):  # a base changed after certification
        ContinualCounter.from_certificate(tmp_path / "certificates" / "k004_maxse.json", epsilon=1.0, horizon=50)


def test_a_seeded_counter_warns_in_the_library():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Counter(epsilon=1.0, horizon=5, generator=_seeded(1))
    assert any("seeded noise" in str(warning.message) for warning in caught)


def test_update_one_step_at_a_time_is_the_batch_release_with_the_same_state(tmp_path):
    """``update`` takes a short path for one count (no batch machinery): the same releases, the
    same journal rows and progress as ``counts`` of the same steps, and the same errors."""
    x = [int(v) for v in np.random.default_rng(8).integers(0, 4, 300)]
    batch = ContinualCounter.for_horizon(epsilon=1.0, horizon=400, max_value=3, generator=_seeded(21))
    batch.save_state(tmp_path / "batch.db")
    expected = batch.counts(x).tolist()
    single = ContinualCounter.for_horizon(epsilon=1.0, horizon=400, max_value=3, generator=_seeded(21))
    single.save_state(tmp_path / "single.db")
    got = [single.update(np.int64(v) if i % 2 else v) for i, v in enumerate(x)]
    assert got == expected and all(type(v) is int for v in got)
    assert single.releases() == batch.releases() and single.journal.progress == batch.journal.progress
    for bad in (4, -1, 1.5, "1"):
        with pytest.raises(InvalidInputError):
            single.update(bad)
    assert single.released == 300


def test_a_counter_needs_exactly_one_of_a_mechanism_and_a_base():
    """Neither a mechanism nor a base is refused with a line that says what to give (not "not
    both"); both are refused too."""
    mechanism = resolve_mechanism(horizon=8, base=None, metric="maxse").mechanism
    with pytest.raises(InvalidInputError, match=r"give a mechanism \(mechanism=…\) or a base with its horizon"):
        ContinualCounter(epsilon=1.0, horizon=8, generator=NoiseGenerator.from_seed(0))
    with pytest.raises(InvalidInputError, match="not both"):
        ContinualCounter(epsilon=1.0, mechanism=mechanism, base="k002_maxse.npz", generator=NoiseGenerator.from_seed(0))
