"""``CountSpec``: one count's options, checked once when made (engines/spec.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pure_dp_mf import validation
from pure_dp_mf.engines import spec as specs
from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.spec import CountSpec, Publication
from pure_dp_mf.errors import InvalidInputError


@pytest.fixture
def validations(monkeypatch):
    """How many times ε is validated (``check_epsilon`` given a value that is not yet an ``Epsilon``)."""
    calls = []
    original = validation.check_epsilon

    def counted(value, **options):
        if type(value) is not validation.Epsilon:
            calls.append(value)
        return original(value, **options)

    import sys

    for name, module in list(sys.modules.items()):
        if name.startswith("pure_dp_mf") and getattr(module, "check_epsilon", None) is original:
            monkeypatch.setattr(module, "check_epsilon", counted)
    return calls


def test_epsilon_is_validated_once_per_counter_built(validations):
    """Building a counter validates ε once: the spec checks it, the planner's ranking, the
    mechanisms and the engine take the checked ``Epsilon`` as it is."""
    from pure_dp_mf.engines.counter import Counter
    from pure_dp_mf.engines.keyed import KeyedCounters

    Counter(epsilon=0.7, horizon=365, generator=NoiseGenerator.from_seed(1)).close()
    assert validations == [0.7]
    validations.clear()
    KeyedCounters(keys=["a", "b"], epsilon=0.3, horizon=100, generator=NoiseGenerator.from_seed(2)).close()
    assert validations == [0.3]
    validations.clear()
    with Counter.from_spec(CountSpec(epsilon=2.0, horizon=64, publication=Publication(seed=3))):
        pass
    assert validations == [2.0]


def test_a_spec_is_frozen_and_checked_again_when_replaced():
    spec = CountSpec(epsilon=1.0, horizon=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.epsilon = 2.0  # type: ignore[misc]
    assert type(spec.epsilon) is validation.Epsilon and spec.privacy_unit == "step"
    with pytest.raises(InvalidInputError, match="--horizon"):
        spec.replace(horizon=0)
    assert CountSpec(epsilon=1.0, keys=("a",)).privacy_unit == "event"  # event rows: one event by default


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"epsilon": 0}, "--epsilon"),
        ({"epsilon": 1, "beta": 1.5}, "--beta must be a number in (0, 1)"),
        ({"epsilon": 1, "band": "wide"}, "--band must be one of step, simultaneous"),
        ({"epsilon": 1, "invalid": "skip"}, "--invalid must be one of"),
        ({"epsilon": 1, "metric": "rmse"}, "--metric must be one of"),
        ({"epsilon": 1, "released_events": "skip"}, "--released-events must be one of"),
        ({"epsilon": 1, "privacy_unit": "person"}, "--privacy-unit must be one of"),
        ({"epsilon": 1, "base": "a.npz", "certificate": "a.json"}, "give a base or a certificate, not both"),
        ({"epsilon": 1, "base": "a.npz", "mechanism": "binary"}, "is a tree"),
        ({"epsilon": 1, "max_keys": 2}, "--max-keys is for --privacy-unit user or user-step"),
        ({"epsilon": 1, "keys": ("a", "b"), "privacy_unit": "step"}, "it is for one stream"),
        ({"epsilon": 1, "keys": ("a", "b"), "privacy_unit": "user-step"}, "needs --max-keys K"),
        ({"epsilon": 1, "keys": ("a",), "privacy_unit": "user", "max_keys": 1}, "needs --max-keys and --max-per-key"),
        ({"epsilon": 1, "keys": ("a", "b"), "privacy_unit": "user", "max_per_key": 2}, "needs --max-keys and --max-per-key"),
        ({"epsilon": 1, "keys": ("a", "a")}, "holds 'a' twice"),
        ({"epsilon": 1, "monotone": True, "dimension": 2}, "monotone post-processing is for dimension 1"),
        ({"epsilon": 1, "through": 5}, "--through is for event rows"),
        ({"epsilon": 1, "dimension": specs.MAX_DIMENSION + 1}, "--dimension"),
    ],
)
def test_a_bad_option_is_one_error_naming_its_flag(options, message):
    with pytest.raises(InvalidInputError) as refused:
        CountSpec(**options)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("publication", "message"),
    [
        ({"seed": 1, "key_file": Path("k")}, "--key-file and --seed"),
        ({"key_file": Path("k"), "state": Path("s")}, "--key-file and --state"),
        ({"generator": NoiseGenerator.from_seed(1), "seed": 1}, "not two of them"),
        ({"generator": "secure"}, "generator must be a NoiseGenerator"),
        ({"seed": True}, "--seed must be an integer"),
    ],
)
def test_a_publication_has_one_source_of_noise(publication, message):
    with pytest.raises(InvalidInputError, match=message):
        Publication(**publication)


def test_one_stream_at_user_level_needs_no_max_keys():
    """One stream (or one key): a user contributes to one key, so K = 1 without --max-keys."""
    assert CountSpec(epsilon=1.0, rows=True, privacy_unit="user", max_per_key=3).max_keys == 1
    assert CountSpec(epsilon=1.0, keys=("a",), privacy_unit="user", max_per_key=3).max_keys == 1


def test_the_keyword_options_make_the_same_spec():
    """``CountSpec.of``: the library's keywords (calendar and publication flattened) give the spec
    built field by field; an unknown keyword is refused by name."""
    made = CountSpec.of(epsilon=1.0, horizon=31, keys=["a", "b"], start="2025-01-01", step_size="1d", seed=4, budget="b")
    assert made == CountSpec(
        epsilon=1.0,
        horizon=31,
        keys=("a", "b"),
        calendar=Calendar.parse(start="2025-01-01"),
        publication=Publication(seed=4, budget="b"),
    )
    with pytest.raises(InvalidInputError, match="unknown option 'epsilons'"):
        CountSpec.of(epsilons=1.0)
    with pytest.raises(InvalidInputError, match="step_size needs start"):
        CountSpec.of(epsilon=1.0, step_size="1d")


def test_features_name_what_a_spec_asks_for():
    spec = CountSpec(
        epsilon=1.0,
        keys=("a",),
        calendar=Calendar.parse(start="2025-01-01"),
        band="simultaneous",
        through=9,
        publication=Publication(state=Path("s.db"), budget="b"),
    )
    assert spec.features() == ["dates", "unit-event", "state", "budget", "anytime", "simultaneous"]
    assert CountSpec(epsilon=1.0, horizon=5, rows=True).features() == ["one-stream", "unit-event"]
    assert CountSpec(epsilon=1.0, horizon=4, mechanism="binary", dimension=2).features() == ["unit-step", "dimension", "tree"]


@pytest.mark.parametrize(("feature", "route"), sorted(pair for pair in specs.REFUSED if pair[1] == "spark-stream"))
def test_spark_streaming_refuses_from_the_table_before_it_reads_anything(feature, route, tmp_path):
    """Every refusal of the Spark stream comes from the table, before the query is built (no Spark
    session needed: the spec is checked first)."""
    from pure_dp_mf.engines.spark import private_running_counts_stream

    options = {
        "state": {"publication": Publication(generator=NoiseGenerator.from_seed(1), state=tmp_path / "s")},
        "budget": {"publication": Publication(generator=NoiseGenerator.from_seed(1), budget="b")},
        "extend": {"extend": True},
        "monotone": {"monotone": True},
        "dimension": {"dimension": 2},
        "certificate": {"certificate": Path("c.json")},
        "tree": {"mechanism": "binary"},
    }
    if feature not in options:
        pytest.skip(f"{feature}: not an option of a run (the release log is read by `pure-dp-mf releases`)")
    spec = CountSpec(epsilon=1.0, horizon=8, keys=("a",), **options[feature])
    with pytest.raises(InvalidInputError) as refused:
        private_running_counts_stream(None, clock=None, spec=spec)
    assert str(refused.value) == specs.REFUSED[(feature, route)]


def test_route_names_are_checked():
    with pytest.raises(ValueError, match="unknown route"):
        CountSpec(epsilon=1.0).check_route("cli")
