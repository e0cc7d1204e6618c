"""The private suggestion of contribution bounds (``engines/bounds.py``, ``pure-dp-mf bounds``):
the guarantee checked by exact enumeration of the output distribution on neighbouring inputs,
the sampler against that distribution, answers near the true quantiles on large synthetic data,
the budget charged once and only when the answer is printed, and one error line for bad input."""

from __future__ import annotations

import json
import math
import random
from collections import Counter as Tally
from collections import defaultdict
from fractions import Fraction

import mpmath
import pytest
from conftest import one_error_line, run_cli

from pure_dp_mf.engines.bounds import private_quantile, suggest_bounds
from pure_dp_mf.engines.budget import Budget, BudgetError
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import KeyedEvent
from pure_dp_mf.errors import InvalidInputError

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")
mpmath.mp.dps = 60


def _at_least(k: int, rate: Fraction) -> mpmath.mpf:
    """P(Y ≥ k) for Y ~ DLap(rate): P(Y = y) = (1 − r)/(1 + r)·r^|y|, r = e^−rate."""
    r = mpmath.exp(-mpmath.mpf(rate.numerator) / rate.denominator)
    return r**k / (1 + r) if k >= 1 else 1 - r ** (1 - k) / (1 + r)


def _distribution(values: list[int], *, quantile: Fraction, upper: int, epsilon: Fraction, rate_factor: int = 1) -> dict:
    """The exact output distribution of the noisy binary search, written out independently: at
    the midpoint c it goes left when b·#{x ≤ c} − a·N + Y ≥ 0, Y ~ DLap(ε/(⌈log₂ U⌉·max(a, b − a)))."""
    a, b = quantile.numerator, quantile.denominator
    rate = rate_factor * epsilon / (math.ceil(math.log2(upper)) * max(a, b - a))
    out: dict[int, mpmath.mpf] = defaultdict(lambda: mpmath.mpf(0))

    def walk(low: int, high: int, probability) -> None:
        if low == high:
            out[low] += probability
            return
        middle = (low + high) // 2
        v = b * sum(1 for x in values if min(x, upper) <= middle) - a * len(values)
        left = _at_least(-v, rate)
        walk(low, middle, probability * left)
        walk(middle + 1, high, probability * (1 - left))

    walk(1, upper, mpmath.mpf(1))
    return dict(out)


def _neighbours(values: list[int], upper: int) -> list[list[int]]:
    """Every input with one user removed, or one user added (with any value in 1 … upper + 1)."""
    removed = [values[:i] + values[i + 1 :] for i in range(len(values))]
    return removed + [values + [x] for x in range(1, upper + 2)]


def _worst_ratio(values: list[int], **options) -> mpmath.mpf:
    """max over neighbours and outputs of P(output | one) / P(output | other), both ways."""
    mine = _distribution(values, **options)
    worst = mpmath.mpf(1)
    for other in _neighbours(values, options["upper"]):
        theirs = _distribution(other, **options)
        for answer in range(1, options["upper"] + 1):
            p, q = mine.get(answer, 0), theirs.get(answer, 0)
            assert p > 0 and q > 0  # every answer is possible: no ratio is infinite
            worst = max(worst, p / q, q / p)
    return worst


@pytest.mark.parametrize("quantile", [Fraction(1, 2), Fraction(9, 10), Fraction(1, 3)])
@pytest.mark.parametrize("upper", [5, 8])
@pytest.mark.parametrize("values", [[1, 3, 3, 4, 6], [2], [1, 1, 1, 8, 8, 8, 8]])
def test_one_user_changes_each_output_probability_by_at_most_e_to_the_epsilon(quantile, upper, values):
    epsilon = Fraction(1, 2)
    worst = _worst_ratio(values, quantile=quantile, upper=upper, epsilon=epsilon)
    assert worst <= mpmath.exp(mpmath.mpf(epsilon.numerator) / epsilon.denominator) * (1 + mpmath.mpf(10) ** -40)


def test_the_accounting_is_tight_and_the_enumeration_catches_too_little_noise():
    """The check above can fail: the worst ratio reaches e^ε (the D comparisons' ε/D add up on
    one path), so with half the noise (twice the rate) some neighbour's ratio exceeds e^ε."""
    epsilon, options = Fraction(1, 2), {"quantile": Fraction(1, 2), "upper": 8}
    bound = mpmath.exp(mpmath.mpf(epsilon.numerator) / epsilon.denominator)
    assert _worst_ratio([1, 3, 3, 4, 6], epsilon=epsilon, **options) >= bound * (1 - mpmath.mpf(10) ** -30)
    assert _worst_ratio([1, 3, 3, 4, 6], epsilon=epsilon, rate_factor=2, **options) > bound


def test_the_sampler_draws_the_enumerated_distribution():
    values, options = [1, 3, 3, 4, 6], {"quantile": Fraction(1, 2), "upper": 8, "epsilon": Fraction(3)}
    exact = _distribution(values, **options)
    runs = 1500
    drawn = Tally(private_quantile(values=values, generator=NoiseGenerator.from_seed(seed), **options) for seed in range(runs))
    for answer in range(1, 9):
        p = float(exact.get(answer, 0))
        assert abs(drawn[answer] / runs - p) <= 5 * math.sqrt(p * (1 - p) / runs) + 1 / runs, (answer, drawn, p)


def _true_quantile(values: list[int], quantile: Fraction, upper: int) -> int:
    """The smallest c with #{x ≤ c} ≥ q·N (values capped at upper)."""
    ordered = sorted(min(x, upper) for x in values)
    return ordered[math.ceil(quantile * len(ordered)) - 1]


def test_answers_are_near_the_true_quantiles_on_large_synthetic_data():
    """4 000 users with a known generating process; ε = 1 (1/3 per bound). The answers' ranks
    among the users' own numbers (computed here, apart from the library) lie within 90 % ± 4
    points (five seeds measured: 89.3 % to 93.8 %)."""
    rng = random.Random(5)
    keys = [f"k{j}" for j in range(12)]
    events, truth = [], {"max_keys": [], "max_per_key": [], "max_value": []}
    for user in range(4000):
        chosen = rng.sample(keys, min(12, 1 + int(rng.expovariate(0.5))))
        steps = {key: sorted(rng.sample(range(1, 201), min(200, 1 + int(rng.expovariate(0.08))))) for key in chosen}
        values = {(key, step): 1 + int(rng.expovariate(0.3)) for key in chosen for step in steps[key]}
        events += [KeyedEvent(key=key, step=step, value=value, user=f"u{user}") for (key, step), value in values.items()]
        truth["max_keys"].append(len(chosen))
        truth["max_per_key"].append(max(len(s) for s in steps.values()))
        truth["max_value"].append(max(values.values()))
    events.sort(key=lambda event: event.step)
    suggestion = suggest_bounds(
        events=events, epsilon=1.0, key_range=12, step_range=200, value_range=1000, generator=NoiseGenerator.from_seed(9)
    )
    ranges = {"max_keys": 12, "max_per_key": 200, "max_value": 1000}
    for name, numbers in truth.items():
        answer = getattr(suggestion, name)
        share_at = sum(1 for x in numbers if x <= answer) / len(numbers)
        share_below = sum(1 for x in numbers if x < answer) / len(numbers)
        assert share_below <= 0.94 and share_at >= 0.86, (name, answer, _true_quantile(numbers, Fraction(9, 10), ranges[name]))
    assert suggestion.max_per_key > 10  # not a trivial answer: the true 90 % quantile is 40


def test_library_refusals():
    event = KeyedEvent(key="a", step=1, value=1, user="u")
    with pytest.raises(InvalidInputError, match="event 2: the user id is empty"):
        suggest_bounds(events=[event, KeyedEvent(key="a", step=1, value=1, user=" ")], epsilon=0.3, key_range=1, step_range=4)
    with pytest.raises(InvalidInputError, match="--quantile must be in"):
        suggest_bounds(events=[event], epsilon=0.3, key_range=1, step_range=4, quantile=1)
    with pytest.raises(InvalidInputError, match="goes backwards"):
        suggest_bounds(events=[KeyedEvent("a", 2, 1, "u"), event], epsilon=0.3, key_range=1, step_range=4)
    with pytest.raises(BudgetError):
        suggest_bounds(events=[event], epsilon=0.3, key_range=1, step_range=4, budget="no such budget")


# ------------------------------------------------------------------------------ the command


def _write(tmp_path, rows):
    (tmp_path / "keys.txt").write_text("de\nfr\n")
    (tmp_path / "ev.csv").write_text("uid,country,day,n\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))


def _bounds(tmp_path, *extra):
    arguments = ["bounds", str(tmp_path / "ev.csv"), "--user-column", "uid", "--key-column", "country"]
    return run_cli(*arguments, "--keys", str(tmp_path / "keys.txt"), "--step-column", "day", "--horizon", "30", *extra)


ROWS = [("u1", "de", 1, 2), ("u2", "fr", 1, 1), ("u1", "fr", 2, 7), ("u3", "de", 3, 1), ("u1", "de", 4, 1)]


def test_the_command_prints_the_flags_and_charges_the_budget_once(tmp_path):
    _write(tmp_path, ROWS)
    Budget.create("bounds-test", epsilon=1.0)
    seeded = _bounds(tmp_path, "--column", "n", "--epsilon", "0.25", "--seed", "4", "--budget", "bounds-test")
    assert seeded.returncode == 0, seeded.stderr
    assert seeded.stdout.startswith("--max-keys ") and len(seeded.stdout.splitlines()) == 1
    assert "warning: seeded noise" in seeded.stderr
    spends = Budget.open("bounds-test").spends()
    assert len(spends) == 1 and spends[0].epsilon == Fraction(0.25)
    again = _bounds(tmp_path, "--column", "n", "--epsilon", "0.25", "--seed", "4", "--json")
    document = json.loads(again.stdout)
    flags = ["--max-keys", "--max-per-key", "--max-value"]
    answers = [str(document[name]) for name in ("max_keys", "max_per_key", "max_value")]
    assert seeded.stdout.split() == [
        part for pair in zip(flags, answers, strict=True) for part in pair
    ]  # same seed, same answers
    assert document["ranges"] == {"max_keys": 2, "max_per_key": 30, "max_value": 1000} and document["seeded"] is True
    assert len(Budget.open("bounds-test").spends()) == 1  # the run without --budget charged nothing


def test_a_failing_run_charges_nothing_and_says_one_line(tmp_path):
    Budget.create("bounds-fail", epsilon=1.0)
    _write(tmp_path, [*ROWS, ("", "de", 5, 1)])
    empty = _bounds(tmp_path, "--epsilon", "0.3", "--budget", "bounds-fail")
    one_error_line(empty.returncode, empty.stdout, empty.stderr, "line 7: --user-column 'uid': the user id is empty")
    assert Budget.open("bounds-fail").spends() == []
    dropped = _bounds(tmp_path, "--epsilon", "0.3", "--budget", "bounds-fail", "--invalid", "zero")
    assert dropped.returncode == 0 and len(Budget.open("bounds-fail").spends()) == 1, dropped.stderr
    too_much = _bounds(tmp_path, "--epsilon", "0.8", "--budget", "bounds-fail", "--invalid", "zero")
    one_error_line(too_much.returncode, too_much.stdout, too_much.stderr, "bounds-fail", "refused")
    assert len(Budget.open("bounds-fail").spends()) == 1


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--quantile", "1.5"], "--quantile must be in (0, 1)"),
        (["--quantile", "abc"], "--quantile must be a number"),
        (["--quantile", "0.1234567"], "--quantile must have at most 6 decimals"),
        (["--column", "amount"], "--column 'amount': no such column"),
        (["--invalid", "stop"], "--invalid must be one of refuse, zero, clamp"),
        (["--epsilon", "-1"], "epsilon"),
        (["--value-range", "0"], "--value-range"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, extra, needle):
    _write(tmp_path, [*ROWS, ("u9", "de", 6, 41)])
    result = _bounds(tmp_path, *(["--epsilon", "0.3"] if "--epsilon" not in extra else []), *extra)
    one_error_line(result.returncode, result.stdout, result.stderr, needle)
    assert "41" not in result.stderr


def test_key_column_needs_keys(tmp_path):
    _write(tmp_path, ROWS)
    result = run_cli("bounds", str(tmp_path / "ev.csv"), "--user-column", "uid", "--key-column", "country",
                     "--step-column", "day", "--horizon", "30", "--epsilon", "0.3")  # fmt: skip
    one_error_line(result.returncode, result.stdout, result.stderr, "--key-column and --keys go together")


def test_one_stream_of_event_rows(tmp_path):
    """Without --key-column the rows are one stream: one key, so --max-keys is 1 without a look."""
    _write(tmp_path, ROWS)
    result = run_cli("bounds", str(tmp_path / "ev.csv"), "--user-column", "uid", "--step-column", "day",
                     "--through", "4", "--epsilon", "0.3", "--seed", "1", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["max_keys"] == 1 and document["ranges"] == {"max_keys": 1, "max_per_key": 4, "max_value": 1000}
