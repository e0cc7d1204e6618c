"""stream.py and ``pure-dp-mf count``: streamed noise against the explicit lifted matrices,
statistics of the noise, the counter, crash-safe state files, bad input."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction

import numpy as np
import pytest
import scipy.stats
from conftest import ROOT, dyadic_binary_tree, run_cli
from typer.testing import CliRunner

from pure_dp_mf.cli import app
from pure_dp_mf.engines.continual import (
    ArraySource,
    ContinualCounter,
    GeneratorSource,
    LiftedNoise,
    StateFileError,
    float_upper,
    noise,
    noise_reversed,
    read_state,
)
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.costs import max_column_abs_sum_exact
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms.lift import as_exact, explicit_lift, lift_plan
from pure_dp_mf.release.generator import NoiseGenerator
from pure_dp_mf.resources import largest_base_file


def _grid_base(k: int, seed: int) -> Factorization:
    """A square base of T_k: a random encoder on the 2⁻³² grid, decoder T_k·R⁻¹."""
    rng = np.random.default_rng(seed)
    encoder = np.round((np.eye(k) + 0.3 * np.triu(rng.normal(size=(k, k)), 1)) * 2**32) / 2**32
    return Factorization.from_encoder(encoder, metadata={"metric": "maxse"})


def _tree_base(k: int) -> Factorization:
    decoder, encoder = dyadic_binary_tree(k)
    return Factorization(decoder=decoder, encoder=encoder, metadata={"metric": "meanse"})


BASES = {"grid k=3": _grid_base(3, 0), "tree k=4 (r=7)": _tree_base(4), "k=1": _tree_base(1)}


@pytest.fixture(scope="module")
def base_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bases") / "k008_maxse.npz"
    _grid_base(8, 1).save(path, store_decoder=False)
    return path


# ---------------------------------------------------------------------------------------------
# Streamed noise = dense L·z of the explicit lift.


@pytest.mark.parametrize("name", sorted(BASES))
def test_streamed_noise_equals_dense_lift_for_every_n(name):
    base = BASES[name]
    decoder = base.dense()[0]
    rng = np.random.default_rng(7)
    full = {}  # p -> (dense L_p, z); explicit_lift(n=n) is L_p[:n] (checked for a few n)
    for n in range(1, 301):
        plan = lift_plan(base=base, n=n, metric=base.metric)
        if plan.levels not in full:
            L = explicit_lift(base=base, levels=plan.levels, alphas=plan.alphas).dense()[0]
            full[plan.levels] = (L, rng.laplace(size=L.shape[1]))
        L, z = full[plan.levels]
        if n % 37 == 0:
            truncated = explicit_lift(base=base, levels=plan.levels, alphas=plan.alphas, n=n).dense()[0]
            assert np.array_equal(truncated, L[:n])
        engine = LiftedNoise(decoder=decoder, alphas=plan.alphas, source=ArraySource(z))
        assert np.max(np.abs(engine.values(0, n) - L[:n] @ z)) <= 1e-9, n
    assert len(full) >= 3
    for p, (L, z) in full.items():  # NoiseReversed(p) is the reverse of Noise(p), also in pieces
        alphas = lift_plan(base=base, n=L.shape[0], metric=base.metric).alphas
        engine = LiftedNoise(decoder=decoder, alphas=alphas, source=ArraySource(z))
        dense = L @ z
        assert np.max(np.abs(np.array(list(noise(engine, block=5))) - dense)) <= 1e-9
        assert np.max(np.abs(np.array(list(noise_reversed(engine, block=7))) - dense[::-1])) <= 1e-9
        for start, stop in [(0, 1), (1, min(4, engine.n)), (engine.n // 3, engine.n - 1), (engine.n - 1, engine.n)]:
            assert np.allclose(engine.values(start, stop), dense[start:stop], atol=1e-9, rtol=0)
            assert np.allclose(engine.reversed_values(start, stop), dense[::-1][start:stop], atol=1e-9, rtol=0)


def test_single_steps_in_any_order_match_and_memory_stays_per_level():
    base = BASES["grid k=3"]
    alphas = lift_plan(base=base, n=1000, metric="maxse").alphas
    engine = LiftedNoise(decoder=base.dense()[0], alphas=alphas, source=GeneratorSource(NoiseGenerator.from_seed(5)))
    whole = engine.values(0, engine.n)
    order = np.random.default_rng(0).permutation(engine.n)[:200]
    assert all(engine.values(t, t + 1)[0] == pytest.approx(whole[t], abs=1e-12) for t in order)
    assert len(engine._coarse_cache) <= engine.levels - 1  # one coarse vector per level, one base block


def test_generator_source_is_a_fixed_z():
    """The keyed generator defines one z (blocks of r columns at their offsets): the streamed
    noise equals L_p·z for that z."""
    base = BASES["tree k=4 (r=7)"]
    plan = lift_plan(base=base, n=300, metric="meanse")
    L = explicit_lift(base=base, levels=plan.levels, alphas=plan.alphas).dense()[0]
    generator = NoiseGenerator.from_seed(3)
    r = base.inner_size
    z = np.concatenate([generator.laplace(index=offset, size=r) for offset in range(0, L.shape[1], r)])
    engine = LiftedNoise(decoder=base.dense()[0], alphas=plan.alphas, source=GeneratorSource(generator))
    assert np.max(np.abs(engine.values(0, engine.n) - L @ z)) <= 1e-9


# ---------------------------------------------------------------------------------------------
# Sensitivity: exact, never a float estimate that could be low.


def test_counter_sensitivity_is_the_exact_norm_of_the_truncated_lift():
    base = _tree_base(2)
    exact = as_exact(base)
    for n in (12, 62):
        plan = lift_plan(base=exact, n=n, metric="maxse")
        R = explicit_lift(base=exact, levels=plan.levels, alphas=plan.alphas_exact, n=n)[1]
        counter = ContinualCounter(base=base, epsilon=1.0, horizon=n, rng=NoiseGenerator.from_seed(0))
        assert counter.sensitivity == max_column_abs_sum_exact(R) == plan.sensitivity_exact


def test_encoder_sensitivity_exact_on_and_off_the_grid():
    grid = BASES["grid k=3"].encoder
    assert max_column_abs_sum_exact(grid) == max(sum(abs(Fraction(float(x))) for x in column) for column in grid.T)
    rng = np.random.default_rng(4)
    general = rng.normal(size=(6, 5)) * np.array([1e-30, 1, 1e20, 3, 1e-300])
    assert max_column_abs_sum_exact(general) == max(sum(abs(Fraction(float(x))) for x in column) for column in general.T)


def test_float_upper_rounds_up():
    for value in (Fraction(1, 3), Fraction(2, 3), Fraction(10**20 + 1, 7), Fraction(5, 4)):
        upper = float_upper(value)
        assert Fraction(upper) >= value and Fraction(math.nextafter(upper, -math.inf)) < value


def test_counter_scale_is_the_rounded_up_exact_sensitivity(base_file):
    counter = ContinualCounter(base=base_file, epsilon=0.7, horizon=5000, rng=NoiseGenerator.from_seed(0))
    plan = lift_plan(base=Factorization.load(base_file), n=5000, metric="maxse")
    assert counter.sensitivity == plan.sensitivity_exact
    assert Fraction(counter.scale) >= counter.sensitivity / Fraction(0.7)
    assert counter.scale >= plan.sensitivity / 0.7 * (1 - 1e-12)
    assert ContinualCounter(base=base_file, epsilon=0.7, horizon=50, dimension=3, rng=NoiseGenerator.from_seed(0)).scale == (
        float_upper(
            2
            * ContinualCounter(base=base_file, epsilon=0.7, horizon=50, rng=NoiseGenerator.from_seed(0)).sensitivity
            / Fraction(0.7)
        )
    )


# ---------------------------------------------------------------------------------------------
# Statistics of the noise.


def test_noise_mean_and_variance_per_step():
    """Over R = 1500 seeded runs, each step's noise b·(L·z)_t has mean 0 and variance
    2b²‖L_t‖². Statistics: Z_mean = mean/√(σ²/R) and Z_var = (s² − σ²)/√((μ₄ − σ⁴)/R) with the
    exact fourth moment μ₄ = 12b⁴(Σc²)² + 12b⁴Σc⁴ of Σ c_j z_j, z_j ~ Laplace(b). Every |Z| must stay
    below the Bonferroni threshold for a total false-alarm rate of 10⁻⁴ (normal approximation)
    over the 2n statistics. Power: the same samples must be rejected when the claimed scale is off
    by 30% in either direction."""
    base, epsilon, n, runs = BASES["grid k=3"], 0.5, 40, 1500
    counter = ContinualCounter(base=base, epsilon=epsilon, horizon=n, rng=NoiseGenerator.from_seed(0))
    b = counter.scale
    samples = np.array(
        [
            b
            * LiftedNoise(
                decoder=base.dense()[0], alphas=counter.alphas, source=GeneratorSource(NoiseGenerator.from_seed(seed))
            ).values(0, n)
            for seed in range(1, runs + 1)
        ]
    )
    L = explicit_lift(base=base, levels=len(counter.alphas) + 1, alphas=counter.alphas, n=n).dense()[0]
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
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=n, rng=NoiseGenerator.from_seed(9))
    released = [counter.update(int(v)) for v in x]
    assert all(type(v) is int for v in released)
    batch = ContinualCounter(base=base_file, epsilon=1.0, horizon=n, rng=NoiseGenerator.from_seed(9))
    assert np.array_equal(np.concatenate([batch.counts(x[:17]), batch.counts(x[17:])]), released)
    assert counter.fallbacks == 0  # at n = 300 a float decision is essentially never too close to call


def test_vector_counter(base_file):
    x = np.zeros((30, 3), dtype=int)
    x[np.arange(30), np.arange(30) % 3] = np.arange(30) % 2
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=30, dimension=3, rng=NoiseGenerator.from_seed(2))
    released = np.array([counter.update(row) for row in x])
    again = ContinualCounter(base=base_file, epsilon=1.0, horizon=30, dimension=3, rng=NoiseGenerator.from_seed(2)).counts(x)
    assert released.shape == (30, 3) and np.array_equal(released, again)
    noise_part = released - np.cumsum(x, axis=0)
    assert not np.array_equal(noise_part[:, 0], noise_part[:, 1])  # independent streams


@pytest.mark.parametrize(
    "bad, message",
    [(2, "not 0 or 1"), (-1, "not 0 or 1"), (0.5, "not 0 or 1"), (math.nan, "NaN"), ("a", "numbers"), ([1, 1], "dimension")],
)
def test_bad_values_change_nothing(base_file, bad, message):
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=10, rng=NoiseGenerator.from_seed(4))
    reference = ContinualCounter(base=base_file, epsilon=1.0, horizon=10, rng=NoiseGenerator.from_seed(4))
    first = [counter.update(1), counter.update(0)]
    with pytest.raises(InvalidInputError, match=message):
        counter.update(bad)
    assert counter.released == 2
    assert first + [counter.update(1)] == [reference.update(v) for v in (1, 0, 1)]


def test_vector_steps_with_two_ones_and_the_horizon(base_file):
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=3, dimension=2, rng=NoiseGenerator.from_seed(4))
    with pytest.raises(InvalidInputError, match="at most one"):
        counter.update([1, 1])
    counter.counts([[1, 0], [0, 1], [0, 0]])
    with pytest.raises(InvalidInputError, match="exceed the horizon"):
        counter.update([0, 0])
    assert counter.released == 3


# ---------------------------------------------------------------------------------------------
# State files.


def test_resume_continues_exactly_and_refuses_stale_or_foreign_states(base_file, tmp_path):
    x = (np.random.default_rng(2).random(120) < 0.5).astype(int)
    uninterrupted = ContinualCounter(base=base_file, epsilon=1.0, horizon=120, rng=NoiseGenerator.from_seed(8)).counts(x)
    path = tmp_path / "counter.json"
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=120, rng=NoiseGenerator.from_seed(8))
    first = counter.counts(x[:50])
    counter.save_state(path)
    assert os.stat(path).st_mode & 0o777 == 0o600  # it holds the generator key
    snapshot = path.read_bytes()
    middle = [counter.update(int(v)) for v in x[50:70]]  # the state is rewritten before each release
    with pytest.raises(StateFileError, match="in use by another counter"):
        ContinualCounter.resume(path)  # the first counter still holds the state
    counter.close()  # as when its process ends
    resumed = ContinualCounter.resume(path)
    assert resumed.released == 70 and resumed.seeded
    rest = resumed.counts(x[70:])
    assert np.array_equal(np.concatenate([first, middle, rest]), uninterrupted)

    resumed.close()
    path.write_bytes(snapshot)  # an older copy of the state: steps 51..120 were released since
    with pytest.raises(StateFileError, match="stale state"):
        ContinualCounter.resume(path)


def test_state_mismatch_and_corruption(base_file, tmp_path):
    path = tmp_path / "state.json"
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=50, rng=NoiseGenerator.from_seed(1))
    counter.counts([1, 0, 1])
    counter.save_state(path)
    counter.close()
    other_base = tmp_path / "other.npz"
    _grid_base(8, 2).save(other_base, store_decoder=False)
    with pytest.raises(StateFileError, match="another base"):
        ContinualCounter.resume(path, base=other_base)
    with pytest.raises(StateFileError, match="epsilon"):
        ContinualCounter.resume(path, epsilon=2.0)
    with pytest.raises(StateFileError, match="horizon"):
        ContinualCounter.resume(path, horizon=60)
    with pytest.raises(StateFileError, match="another generator"):
        ContinualCounter.resume(path, rng=NoiseGenerator.from_seed(2))
    text = path.read_text()
    record = json.loads(text)
    record["released"] = 1
    path.write_text(json.dumps(record))
    with pytest.raises(StateFileError, match="checksum"):
        ContinualCounter.resume(path)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(StateFileError, match="corrupted"):
        ContinualCounter.resume(path)
    path.write_text(text)
    (tmp_path / "state.json.released").write_text('{"lineage": "someone else", "released": 3}')
    with pytest.raises(StateFileError, match="ledger belongs to another counter"):
        ContinualCounter.resume(path)
    with pytest.raises(StateFileError, match="no such"):
        ContinualCounter.resume(tmp_path / "missing.json")


# ---------------------------------------------------------------------------------------------
# One noise lineage per counter: no shared generator, no copied state, no second process.


def test_a_secure_generator_feeds_one_counter_only(base_file):
    rng = NoiseGenerator.secure()
    first = ContinualCounter(base=base_file, epsilon=1.0, horizon=40, rng=rng)
    with pytest.raises(InvalidInputError, match="already feeds another counter"):
        ContinualCounter(base=base_file, epsilon=1.0, horizon=40, rng=rng)
    child = ContinualCounter(base=base_file, epsilon=1.0, horizon=40, rng=rng.child("second"))
    x = np.zeros(40, dtype=int)
    assert not np.array_equal(first.counts(x), child.counts(x))  # independent noise, not the same
    assert rng.child("a").key != rng.child("b").key and rng.child("a").key == rng.child("a").key
    with pytest.raises(InvalidInputError):
        rng.child("")


def test_a_copied_state_or_a_missing_ledger_is_refused(base_file, tmp_path):
    path = tmp_path / "state.json"
    counter = ContinualCounter(base=base_file, epsilon=1.0, horizon=30, rng=NoiseGenerator.secure())
    counter.save_state(path)
    counter.counts([1, 0, 1, 1])
    counter.close()
    copy = tmp_path / "copy.json"
    copy.write_bytes(path.read_bytes())  # the state without its ledger
    with pytest.raises(StateFileError, match="ledger copy.json.released is missing"):
        ContinualCounter.resume(copy)
    (tmp_path / "state.json.released").unlink()
    with pytest.raises(StateFileError, match="ledger state.json.released is missing"):
        ContinualCounter.resume(path)


def test_a_second_process_on_the_same_state_is_refused_at_once(base_file, tmp_path):
    """Two ``count --state S`` at once: the second ends with one error line, releasing nothing."""
    state = tmp_path / "state.json"
    arguments = [
        sys.executable,
        "-c",
        "from pure_dp_mf.cli import main; main()",
        "count",
        "--epsilon",
        "1",
        "--horizon",
        "20",
        "--state",
        str(state),
    ]
    first = subprocess.Popen([*arguments, "--base", str(base_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    first.stdin.write("1\n")
    first.stdin.flush()
    assert first.stdout.readline().strip().lstrip("-").isdigit()  # the first run holds the state
    second = subprocess.run(arguments, input="1\n", capture_output=True, text=True, timeout=120)
    first.stdin.close()
    first.wait(timeout=120)
    assert second.returncode == 2 and second.stdout == ""
    assert second.stderr.strip().startswith("error:") and "in use by another counter" in second.stderr


# ---------------------------------------------------------------------------------------------
# The command.


def test_default_base_is_the_largest_shipped_maxse_base(tmp_path):
    for name in ("k008_maxse.npz", "k016_maxse.npz", "k1024_meanse.npz", "k256_maxse.npz", "k064_maxse.npz.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert largest_base_file(folder=tmp_path).name == "k256_maxse.npz"
    assert largest_base_file(folder=tmp_path, metric="meanse").name == "k1024_meanse.npz"
    with pytest.raises(InvalidInputError, match="no shipped base"):
        largest_base_file(folder=tmp_path / "empty")


def test_count_command_matches_the_library(base_file):
    x = [1, 0, 0, 1, 1, 1, 0, 1]
    result = CliRunner().invoke(
        app,
        ["count", "--epsilon", "2", "--horizon", "20", "--base", str(base_file), "--seed", "3"],
        input="\n".join(map(str, x)) + "\n",
    )
    assert result.exit_code == 0, result.output
    expected = ContinualCounter(base=base_file, epsilon=2.0, horizon=20, rng=NoiseGenerator.from_seed(3)).counts(x)
    lines = [line for line in result.stdout.splitlines() if not line.startswith("warning")]
    assert [int(line) for line in lines] == expected.tolist()


@pytest.mark.parametrize(
    "text, message",
    [
        ("1\n0\n2\n", "line 3: stream value 2 is not 0 or 1"),
        ("1\nnan\n", "line 2: NaN"),
        ("1\nx\n", "line 2: 'x' is not a number"),
        ("1\n1\n1\n1\n", "line 4: more steps than the horizon 3"),
    ],
)
def test_count_command_bad_input(base_file, text, message):
    """The error names the line; everything before it was released, unaltered."""
    result = CliRunner().invoke(
        app, ["count", "--epsilon", "1", "--horizon", "3", "--base", str(base_file), "--seed", "1"], input=text
    )
    assert isinstance(result.exception, InvalidInputError) and message in str(result.exception)
    released = [int(line) for line in result.stdout.splitlines() if not line.startswith("warning")]
    good = [int(line) for line in text.split()[: len(released)]]
    assert (
        released
        == ContinualCounter(base=base_file, epsilon=1.0, horizon=3, rng=NoiseGenerator.from_seed(1)).counts(good).tolist()
    )


def test_count_command_error_is_one_line_and_exit_2(base_file):
    result = run_cli("count", "--epsilon", "1", "--horizon", "3", "--base", str(base_file), input_text="1\n0.5\n")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "error: line 2: stream value 0.5 is not 0 or 1" in result.stderr.splitlines()
    assert len(result.stdout.split()) == 1


def test_count_command_refuses_a_state_of_another_epsilon_or_seed(base_file, tmp_path):
    state = tmp_path / "s.json"
    arguments = ["count", "--horizon", "5", "--state", str(state)]
    assert CliRunner().invoke(app, arguments + ["--epsilon", "1", "--base", str(base_file)], input="1\n").exit_code == 0
    result = CliRunner().invoke(app, arguments + ["--epsilon", "2"], input="1\n")
    assert isinstance(result.exception, StateFileError) and "epsilon" in str(result.exception)
    result = CliRunner().invoke(app, arguments + ["--epsilon", "1", "--seed", "3"], input="1\n")
    assert isinstance(result.exception, StateFileError) and "another generator" in str(result.exception)
    result = CliRunner().invoke(app, arguments + ["--epsilon", "1"], input="0\n")
    assert result.exit_code == 0 and len(result.stdout.split()) == 1


def test_kill_9_and_restart_loses_and_repeats_nothing(base_file, tmp_path):
    """kill -9 twice during ``count --state``: the output file equals the uninterrupted run."""
    n = 150
    values = (np.random.default_rng(5).random(n) < 0.4).astype(int)
    source = tmp_path / "input.txt"
    source.write_text("\n".join(map(str, values)) + "\n")
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
        str(tmp_path / "state.json"),
        "--output",
        str(tmp_path / "out.txt"),
        "--commit-every",
        "7",  # groups of 7 lines per durable commit: the kills land inside and between groups
    ]
    output = tmp_path / "out.txt"
    for kill_after in (30, 90):
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            if output.exists() and output.read_text().count("\n") >= kill_after:
                break
            time.sleep(0.005)
        assert process.poll() is None, "the counter finished before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stderr
    expected = ContinualCounter(base=base_file, epsilon=1.0, horizon=n, rng=NoiseGenerator.from_seed(12)).counts(values)
    assert [int(line) for line in output.read_text().splitlines()] == expected.tolist()


def test_output_file_is_reconciled_after_a_kill_between_state_and_output(base_file, tmp_path):
    """The state is written before each output: a kill right after it leaves the output one
    line short (or with a partial line); the restart writes that step's kept value, once."""
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
        str(tmp_path / "state.json"),
        "--output",
        str(tmp_path / "out.txt"),
    ]
    expected = ContinualCounter(base=base_file, epsilon=1.0, horizon=12, rng=NoiseGenerator.from_seed(4)).counts(values).tolist()
    for cut, partial in ((5, ""), (9, "1")):
        (tmp_path / "in.txt").write_text("\n".join(map(str, values[:cut])) + "\n")
        assert CliRunner().invoke(app, arguments).exit_code == 0
        lines = (tmp_path / "out.txt").read_text().splitlines()
        (tmp_path / "out.txt").write_text("".join(line + "\n" for line in lines[:-1]) + partial)
    (tmp_path / "in.txt").write_text("\n".join(map(str, values)) + "\n")
    assert CliRunner().invoke(app, arguments).exit_code == 0
    assert [int(line) for line in (tmp_path / "out.txt").read_text().splitlines()] == expected


@pytest.mark.parametrize("lost", [1, 3, 4])
def test_a_whole_group_commit_lost_from_the_output_is_written_again_from_the_state(base_file, tmp_path, lost):
    """``--commit-every 4``: one state write per group of 4 lines, before the group is output. A
    kill after the write loses up to the whole group from the output file (and may leave a partial
    line); the restart writes exactly those released values again, from the state, once."""
    values = [1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1]
    arguments = [
        "count",
        str(tmp_path / "in.txt"),
        "--epsilon",
        "1",
        "--horizon",
        str(len(values)),
        "--base",
        str(base_file),
        "--seed",
        "4",
        "--state",
        str(tmp_path / "state.json"),
        "--output",
        str(tmp_path / "out.txt"),
        "--commit-every",
        "4",
    ]
    rng = NoiseGenerator.from_seed(4)
    expected = ContinualCounter(base=base_file, epsilon=1.0, horizon=len(values), rng=rng).counts(values).tolist()
    (tmp_path / "in.txt").write_text("\n".join(map(str, values[:10])) + "\n")  # groups 4, 4, 2
    assert CliRunner().invoke(app, arguments).exit_code == 0
    assert read_state(tmp_path / "state.json")["last_block"] == [[v] for v in expected[8:10]]
    (tmp_path / "in.txt").write_text("\n".join(map(str, values[:12])) + "\n")  # one more group: 11, 12
    assert CliRunner().invoke(app, arguments).exit_code == 0
    lines = (tmp_path / "out.txt").read_text().splitlines()
    kept = lines[: len(lines) - min(lost, 2)]
    (tmp_path / "out.txt").write_text("".join(line + "\n" for line in kept) + ("9" if lost == 3 else ""))
    if lost == 4:  # more lines missing than the last commit holds: refused, nothing written
        (tmp_path / "out.txt").write_text("".join(line + "\n" for line in lines[:7]))
        result = run_cli(*arguments)
        assert result.returncode == 2 and "has 7 lines but the state has released 12" in result.stderr
        return
    (tmp_path / "in.txt").write_text("\n".join(map(str, values)) + "\n")
    assert CliRunner().invoke(app, arguments).exit_code == 0
    assert [int(line) for line in (tmp_path / "out.txt").read_text().splitlines()] == expected


def test_count_releases_the_lines_before_a_bad_one_and_names_it(base_file, tmp_path):
    (tmp_path / "in.txt").write_text("1\n0\n1\n2\n1\n")
    arguments = ["count", str(tmp_path / "in.txt"), "--epsilon", "1", "--horizon", "10", "--base", str(base_file)]
    result = run_cli(*arguments, "--seed", "3")
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith("error: line 4")
    expected = ContinualCounter(base=base_file, epsilon=1.0, horizon=10, rng=NoiseGenerator.from_seed(3)).counts([1, 0, 1])
    released = [int(line) for line in result.stdout.splitlines() if line.lstrip("-").isdigit()]
    assert released == expected.tolist()


# ---------------------------------------------------------------------------------------------
# From a certificate: the documented flow train → certify → lift → count.


def test_counter_from_a_certificate_binds_the_base_and_rechecks_its_sensitivity(tmp_path):
    import shutil

    from pure_dp_mf.certificates.certify import ClaimFailedError
    from pure_dp_mf.resources import BASE_FOLDER, CERTIFICATE_FOLDER

    counter = ContinualCounter.from_certificate(
        CERTIFICATE_FOLDER / "k004_maxse.json", epsilon=1.0, horizon=50, rng=NoiseGenerator.from_seed(0)
    )
    assert counter.certificate == str((CERTIFICATE_FOLDER / "k004_maxse.json").resolve())
    assert counter.base_file == str((BASE_FOLDER / "k004_maxse.npz").resolve())
    direct = ContinualCounter(base=BASE_FOLDER / "k004_maxse.npz", epsilon=1.0, horizon=50, rng=NoiseGenerator.from_seed(0))
    x = np.ones(50, dtype=int)
    assert np.array_equal(counter.counts(x), direct.counts(x)) and counter.sensitivity == direct.sensitivity
    counter.save_state(tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text())["base"]["certificate"] == counter.certificate
    counter.close()
    # a base file changed after certification is refused
    (tmp_path / "certificates").mkdir()
    (tmp_path / "base_factorizations").mkdir()
    shutil.copy(CERTIFICATE_FOLDER / "k004_maxse.json", tmp_path / "certificates")
    other = Factorization.load(BASE_FOLDER / "k004_meanse.npz")
    other.metadata = {**other.metadata, "metric": "maxse"}
    other.save(tmp_path / "base_factorizations" / "k004_maxse.npz", store_decoder=False)
    with pytest.raises(ClaimFailedError, match="sha256|factorization"):
        ContinualCounter.from_certificate(tmp_path / "certificates" / "k004_maxse.json", epsilon=1.0, horizon=50)
