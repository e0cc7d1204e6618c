"""Accuracy planning (``engines.accuracy``, ``pure-dp-mf plan``): the planned ε meets its target
in the counter that then runs, a slightly smaller ε does not, and every planned number is the
one ``Counter`` or the keyed engine reports for that step; ``plan`` refuses what ``count`` refuses for
the same flags."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_fuzz_inputs import run_cli

from pure_dp_mf import Counter
from pure_dp_mf.engines.accuracy import accuracy, plan, plan_epsilon
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import KeyedCounters, user_sensitivity
from pure_dp_mf.engines.spec import CountSpec
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.mechanisms import planner

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "base_factorizations" / "k008_maxse.npz"
CERTIFICATE = ROOT / "certificates" / "k008_maxse.json"


def _spec(epsilon: float = 1.0, **options) -> CountSpec:
    """The spec of a count (ε = 1 stands in where a target is planned: ``plan_epsilon`` does not use it)."""
    return CountSpec(epsilon=epsilon, **options)


def _released(epsilon: float, steps: int, **options) -> tuple[Counter, list]:
    """A seeded counter run for ``steps`` steps of alternating 0/1 values, one release at a time."""
    counter = Counter(epsilon=epsilon, generator=NoiseGenerator.from_seed(7), **options)
    return counter, [counter.update(t % 2) for t in range(steps)]


def test_planned_epsilon_meets_the_target_std_in_the_counter_and_a_smaller_one_does_not():
    planned = plan_epsilon(spec=_spec(horizon=200), step=150, target_std=6.0)
    counter, releases = _released(planned.epsilon, 150, horizon=200)
    assert counter.mechanism == planned.mechanism
    assert releases[-1].std == planned.std <= 6.0
    assert planned.std > 6.0 * (1 - 1e-4)  # the smallest ε to the tolerance
    _, smaller = _released(planned.epsilon * (1 - 1e-3), 150, horizon=200)
    assert smaller[-1].std > 6.0
    batch = Counter(epsilon=planned.epsilon, horizon=200, generator=NoiseGenerator.from_seed(8)).release([1] * 150)
    assert batch.std is not None and batch.std[-1] == planned.std  # steps released together: the same bars
    assert len(repr(planned.epsilon)) <= 8  # a short decimal


def test_planned_epsilon_meets_the_target_half_width():
    planned = plan_epsilon(spec=_spec(horizon=64, beta=0.1, metric="meanse"), step=64, target_half_width=30.0)
    counter, releases = _released(planned.epsilon, 64, horizon=64, beta=0.1, metric="meanse")
    bars = counter.counter.bars(63, 64, beta=0.1)
    assert bars.half_width[0] == planned.half_width <= 30.0 and releases[-1].std == planned.std
    last = releases[-1]
    if 0 < last.count - math.floor(planned.half_width) and last.count + math.floor(planned.half_width) < 64:
        assert last.upper - last.count == last.count - last.lower == math.floor(planned.half_width)
    smaller = accuracy(spec=_spec(planned.epsilon * (1 - 1e-3), horizon=64, beta=0.1, metric="meanse"), step=64)
    assert smaller.half_width > 30.0


@pytest.mark.parametrize("mechanism", ["auto", "binary", "kary"])
def test_accuracy_is_what_the_counter_reports(mechanism):
    spec = _spec(0.7, horizon=100, mechanism=mechanism, max_value=3, beta=0.02)
    planned = accuracy(spec=spec, step=37)
    counter, releases = _released(0.7, 37, horizon=100, mechanism=mechanism, max_value=3, beta=0.02)
    assert (releases[-1].std, planned.mechanism) == (planned.std, counter.mechanism)
    assert counter.counter.bars(36, 37, beta=0.02).half_width[0] == planned.half_width
    assert planned.sensitivity == float(3 * counter.counter.sensitivity)
    assert plan(spec=spec, step=37) == planned


def test_user_step_is_the_keyed_count_with_k_times_m():
    bounds = {"privacy_unit": "user-step", "max_keys": 3, "max_value": 2}
    planned = accuracy(spec=_spec(1.5, horizon=64, rows=True, **bounds), step=20)
    counters, std = _keyed_std(1.5, 20, horizon=64, **bounds)
    assert std == planned.std and counters.mechanism.name == planned.mechanism and planned.max_keys == 3
    _, releases = _released(1.5, 20, horizon=64, max_value=6, mechanism="lifted")  # the single counter with m → K·m
    assert releases[-1].std == planned.std
    one_key = accuracy(spec=_spec(horizon=3, privacy_unit="user-step", rows=True), step=2)  # K = 1 for one stream
    assert one_key.max_keys == 1 and one_key.mechanism.startswith("lifted")  # event rows run lifted bases, as count does


def test_the_anytime_counter_without_a_horizon():
    planned = plan_epsilon(spec=_spec(), step=300, target_std=12.0)
    assert planned.horizon is None and planned.sensitivity is None and "anytime" in planned.mechanism
    counter, releases = _released(planned.epsilon, 300)
    assert counter.mechanism == planned.mechanism
    assert releases[-1].std == planned.std <= 12.0
    assert counter.counter.bars(299, 300, beta=0.05).half_width[0] == planned.half_width
    assert accuracy(spec=_spec(planned.epsilon * (1 - 1e-3)), step=300).std > 12.0


def _keyed_std(epsilon: float, steps: int, **options) -> tuple[KeyedCounters, float]:
    counters = KeyedCounters(keys=["a", "b"], epsilon=epsilon, generator=NoiseGenerator.from_seed(3), **options)
    std = 0.0
    for t in range(steps):
        counts = counters.release(np.array([t % 2, 1]))
        std = float(counters.intervals(counts, start=t, beta=0.05)[0][0])
    return counters, std


def test_user_level_is_the_keyed_engines_error_bars():
    bounds = {"privacy_unit": "user", "max_keys": 2, "max_per_key": 3, "max_value": 2}
    planned = accuracy(spec=_spec(2.0, horizon=64, rows=True, **bounds), step=40)
    counters, std = _keyed_std(2.0, 40, horizon=64, **bounds)
    assert std == planned.std and counters.mechanism.name == planned.mechanism
    norms = counters.mechanism.column_norms(64)
    assert planned.sensitivity == float(user_sensitivity(norms, max_keys=2, max_per_key=3, max_value=2))
    target = plan_epsilon(spec=_spec(123.0, horizon=64, rows=True, **bounds), step=40, target_std=4.0)  # ε unused
    assert _keyed_std(target.epsilon, 40, horizon=64, **bounds)[1] == target.std <= 4.0
    assert accuracy(spec=_spec(target.epsilon * (1 - 1e-3), horizon=64, rows=True, **bounds), step=40).std > 4.0
    assert plan_epsilon(spec=_spec(horizon=64, rows=True, **bounds), step=40, target_std=4.0) == target


def test_event_level_runs_what_keyed_counts_run():
    planned = accuracy(spec=_spec(horizon=3, privacy_unit="event", max_value=4, rows=True), step=2)
    _, std = _keyed_std(1.0, 2, horizon=3, max_value=4)
    lifted = accuracy(spec=_spec(horizon=3, mechanism="lifted", max_value=4), step=2)
    assert std == planned.std == lifted.std and planned.mechanism.startswith("lifted")
    assert accuracy(spec=_spec(horizon=3, max_value=4), step=2).mechanism.startswith("kary")  # one value per line: a tree wins
    keyed = accuracy(spec=_spec(horizon=3, max_value=4, keys=("a", "b", "c")), step=2)  # public keys: one key's bars
    assert keyed == planned


@pytest.mark.parametrize("horizon", [5, 64, 1000])
def test_the_planners_choice_does_not_depend_on_epsilon(horizon):
    def key(epsilon: float) -> tuple:
        row = planner.choose(horizon=horizon, epsilon=epsilon, metric="maxse")
        return row.mechanism, row.arity, row.base_file

    assert key(1e-3) == key(1.0) == key(1e3)


def test_the_command_prints_the_library_plan_as_json():
    code, out, err = run_cli("plan", "--step", "50", "--horizon", "100", "--target-std", "4", "--beta", "0.1", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document == plan_epsilon(spec=_spec(horizon=100, beta=0.1), step=50, target_std=4.0).as_dict()
    code, out, err = run_cli("plan", "--step", "50", "--horizon", "100", "--epsilon", str(document["epsilon"]), "--beta", "0.1")
    assert code == 0 and "std" in out and f"count ± {math.floor(document['half_width'])}" in out, (out, err)


@pytest.mark.parametrize(
    "arguments, needle",
    [
        (["--step", "65", "--horizon", "64", "--epsilon", "1"], "--step must be in 1 … 64 (--horizon)"),
        (["--step", "3", "--horizon", "64"], "exactly one of --epsilon / --target-std / --target-half-width"),
        (["--step", "3", "--horizon", "64", "--epsilon", "1", "--target-std", "2"], "exactly one of"),
        (["--step", "3", "--horizon", "64", "--target-half-width", "0.3"], "--target-half-width 0.3 cannot be met"),
        (["--step", "3", "--horizon", "64", "--epsilon", "1", "--max-per-key", "2"], "--max-per-key"),
        (["--step", "3", "--horizon", "64", "--epsilon", "1", "--privacy-unit", "user"], "--max-per-key"),
        (["--step", "3", "--horizon", "64", "--epsilon", "1", "--privacy-unit", "users"], "--privacy-unit"),
        (["--step", "3", "--horizon", "64", "--epsilon", "1", "--mechanism", "bogus"], "--mechanism must be one of"),
        (["--step", "3", "--epsilon", "1", "--mechanism", "binary"], "give --horizon to run a base, a certificate or a tree"),
        (["--step", "3", "--horizon", "64", "--epsilon", "1", "--beta", "1.5"], "--beta"),
        (["--step", "3", "--horizon", "64", "--epsilon", "-1"], "--epsilon"),
        (["--step", "3", "--horizon", "64", "--target-std", "0"], "--target-std"),
        (["--step", "3", "--epsilon", "1e-7"], "--epsilon must be at least"),
    ],
)
def test_bad_input_is_one_error_line_naming_the_flag(arguments, needle):
    code, out, err = run_cli("plan", *arguments)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "", (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle.replace(" / ", ", ") in lines[0], err


def test_the_library_refuses_bad_input_with_the_flag():
    with pytest.raises(InvalidInputError, match="--target-std, --target-half-width"):
        plan_epsilon(spec=_spec(horizon=8), step=3)
    with pytest.raises(InvalidInputError, match="--max-keys is for"):
        _spec(horizon=8, max_keys=2)  # the spec checks its options once, when it is made
    with pytest.raises(InvalidInputError, match="--base needs --horizon"):  # keyed counts' words
        accuracy(spec=_spec(base=BASE, rows=True), step=3)
    with pytest.raises(InvalidInputError, match="give --horizon to run a base"):  # Counter's words
        accuracy(spec=_spec(base=BASE), step=3)
    with pytest.raises(InvalidInputError, match="--privacy-unit event counts event rows"):
        accuracy(spec=_spec(horizon=8, privacy_unit="event"), step=3)  # one value per line is privacy unit step


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"extend": True}, "--extend"),
        ({"dimension": 2}, "--dimension"),
        ({"monotone": True}, "--monotone"),
        ({"band": "simultaneous"}, "--band simultaneous"),
    ],
)
def test_options_whose_error_bars_are_not_planned_are_refused(options, needle):
    with pytest.raises(InvalidInputError, match=needle):
        accuracy(spec=_spec(horizon=8, **options), step=3)


def test_the_publication_is_not_used(tmp_path):
    spec = CountSpec.of(epsilon=1.0, horizon=8, state=tmp_path / "state", budget="not made")
    assert accuracy(spec=spec, step=3) == accuracy(spec=_spec(horizon=8), step=3)
    assert list(tmp_path.iterdir()) == []  # no state made, no budget charged


def test_a_large_epsilon_is_answered_with_one_warning_line_and_a_json_field():
    code, out, err = run_cli("plan", "--step", "50", "--horizon", "100", "--epsilon", "12.5", "--json")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning: ε = 12.5 is large (> 10)"), err
    document = json.loads(out)
    assert document["warning"] == lines[0].removeprefix("warning: ") and document["epsilon"] == 12.5
    code, out, err = run_cli("plan", "--step", "50", "--horizon", "100", "--target-std", "0.4")  # a target that needs ε > 10
    planned = plan_epsilon(spec=_spec(horizon=100), step=50, target_std=0.4)
    assert code == 0 and planned.epsilon > 10 and err.startswith("warning: ") and len(err.splitlines()) == 1, err
    code, out, err = run_cli("plan", "--step", "50", "--horizon", "100", "--epsilon", "10", "--json")
    assert code == 0 and err == "" and json.loads(out)["warning"] is None, err  # 10 itself is not large


# The flags of ``plan`` and ``count`` alike, each set refused by ``count`` (``count`` also gets the
# columns its input layout needs: ``plan`` counts event rows for every unit but step).
_LINES: tuple[str, ...] = ()
_ROWS = ("--step-column", "step", "--through", "2")
_USERS = (*_ROWS, "--user-column", "user")
REFUSED_BY_COUNT = [
    (("--horizon", "8", "--privacy-unit", "user", "--max-keys", "2"), _USERS),
    (("--horizon", "8", "--max-keys", "2"), _LINES),
    (("--horizon", "8", "--privacy-unit", "users"), _ROWS),
    (("--horizon", "8", "--privacy-unit", "event", "--mechanism", "binary"), _ROWS),
    (("--horizon", "8", "--privacy-unit", "user-step", "--certificate", str(CERTIFICATE)), _USERS),
    (("--mechanism", "kary"), _LINES),
    (("--privacy-unit", "event", "--base", str(BASE)), _ROWS),
    (("--base", str(BASE)), _LINES),
    (("--horizon", "8", "--mechanism", "anytime"), _LINES),
    (("--horizon", "8", "--mechanism", "bogus", "--privacy-unit", "event"), _ROWS),
    (("--horizon", "8", "--base", str(BASE), "--certificate", str(CERTIFICATE)), _LINES),
    (("--horizon", "8", "--base", str(BASE), "--mechanism", "binary"), _LINES),
    (("--horizon", "8", "--metric", "worst"), _LINES),
    (("--horizon", "8", "--max-value", "0"), _LINES),
    (("--horizon", "8", "--beta", "1"), _LINES),
    (("--horizon", "8", "--privacy-unit", "event", "--max-per-key", "2"), _ROWS),
]


def _error_line(code: int, out: str, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("error: "), (code, out, err)
    return lines[0]


@pytest.mark.parametrize("flags, layout", REFUSED_BY_COUNT)
def test_plan_refuses_what_count_refuses_in_the_same_words(flags, layout, tmp_path):
    data = tmp_path / ("events.csv" if layout else "values.txt")
    data.write_text("step,user\n1,a\n2,b\n" if layout else "0\n1\n")
    planned = _error_line(*run_cli("plan", "--step", "2", "--epsilon", "1", *flags))
    counted = _error_line(*run_cli("count", str(data), "--epsilon", "1", *flags, *layout))
    assert planned == counted


@pytest.mark.parametrize(
    "flags, layout",
    [
        (("--horizon", "8", "--privacy-unit", "user-step", "--max-keys", "2", "--max-value", "3"), _USERS),
        (("--horizon", "8", "--privacy-unit", "user", "--max-per-key", "2"), _USERS),
        (("--privacy-unit", "event", "--max-value", "2"), _ROWS),
        (("--horizon", "8", "--certificate", str(CERTIFICATE)), _LINES),
        (("--horizon", "8", "--mechanism", "binary", "--max-value", "2"), _LINES),
    ],
)
def test_plan_accepts_what_count_accepts_and_plans_the_std_count_reports(flags, layout, tmp_path):
    data = tmp_path / ("events.csv" if layout else "values.txt")
    data.write_text("step,user\n1,a\n2,b\n2,a\n" if layout else "0\n1\n")
    code, out, err = run_cli("plan", "--step", "2", "--epsilon", "0.8", *flags, "--json")
    assert code == 0, err
    planned = json.loads(out)
    code, out, err = run_cli("count", str(data), "--epsilon", "0.8", *flags, *layout, "--seed", "5", "--format", "jsonl")
    assert code == 0, err
    (release,) = [row for row in map(json.loads, out.splitlines()) if row.get("step") == 2]
    assert release["std"] == pytest.approx(planned["std"], rel=1e-5)  # printed to 6 digits
    if layout:  # a keyed interval is cut below only (at 0, never past the count)
        assert release["upper"] - release["count"] == math.floor(planned["half_width"])
