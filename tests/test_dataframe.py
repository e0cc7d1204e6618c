"""DataFrames on the local engine (engines/dataframe.py): the same releases as ``run_keyed`` fed
the same events, the public calendar (zero steps at missing dates, events outside the schedule
dropped unseen), the invalid-input policies, argument errors, polars."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import pure_dp_mf
from pure_dp_mf.engines import keyed
from pure_dp_mf.engines.dataframe import private_running_counts
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, run_keyed
from pure_dp_mf.errors import InvalidInputError

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")

KEYS = ["de", "fr", "it"]
HORIZON = 8
COLUMNS = ["key", "step", "count", "std", "lower", "upper"]


def _events() -> pd.DataFrame:
    """Events out of step order, with an unlisted key and steps outside the schedule."""
    rng = np.random.default_rng(3)
    size = 60
    return pd.DataFrame(
        {
            "country": rng.choice(["de", "fr", "it", "xx"], size=size),
            "day": rng.integers(0, HORIZON + 3, size=size),
            "n": rng.integers(0, 3, size=size),
            "uid": rng.choice(["u1", "u2", "u3", "u4"], size=size),
        }
    )


def _keyed_rows(frame: pd.DataFrame, *, seed: int, user: bool = False, through: int = HORIZON, **options) -> pd.DataFrame:
    """The releases of ``KeyedCounters`` + ``run_keyed`` for the frame's events (sorted by step)."""
    counters = KeyedCounters(
        keys=KEYS, epsilon=1.0, horizon=HORIZON, max_value=2, generator=NoiseGenerator.from_seed(seed), **options
    )
    ordered = frame.sort_values("day", kind="stable")
    events = [
        KeyedEvent(key=str(k), step=int(s), value=int(v), user=str(u) if user else None)
        for k, s, v, u in zip(ordered["country"], ordered["day"], ordered["n"], ordered["uid"], strict=True)
    ]
    rows = []
    for step, counts, std, lower, upper in run_keyed(counters, events, through=through):
        rows += [(key, step, int(counts[j]), std, int(lower[j]), int(upper[j])) for j, key in enumerate(KEYS)]
    counters.close()
    return pd.DataFrame(rows, columns=COLUMNS)


UNITS = [
    ("event", {}),
    ("user", {"max_keys": 1, "max_per_key": 2}),
    pytest.param(
        "user-step",
        {"max_keys": 2},
        marks=pytest.mark.skipif("user-step" not in keyed.PRIVACY_UNITS, reason="no user-step unit in KeyedCounters"),
    ),
]


@pytest.mark.parametrize("unit, bounds", UNITS)
def test_equals_the_keyed_engine(unit, bounds):
    frame = _events()
    user = unit != "event"
    released = private_running_counts(
        frame,
        keys=KEYS,
        epsilon=1.0,
        horizon=HORIZON,
        key_column="country",
        step_column="day",
        value_column="n",
        user_column="uid" if user else None,
        privacy_unit=unit,
        max_value=2,
        generator=NoiseGenerator.from_seed(11),
        **bounds,
    )
    expected = _keyed_rows(frame, seed=11, user=user, privacy_unit=unit, **bounds)
    assert list(released.columns) == COLUMNS
    assert len(released) == HORIZON * len(KEYS)
    assert released["key"].tolist() == KEYS * HORIZON  # step, then key-list order
    assert released["step"].tolist() == np.repeat(np.arange(1, HORIZON + 1), len(KEYS)).tolist()
    for column in ("count", "lower", "upper"):
        assert released[column].dtype == np.int64
        assert released[column].tolist() == expected[column].tolist()
    assert released["std"].tolist() == expected["std"].tolist()


def test_text_columns_and_a_shorter_schedule():
    """The columns as text (as read from a CSV without types) and ``through`` < horizon."""
    frame = _events()
    text = frame.astype(str)
    text.loc[0, "n"] = " 1.0 "  # an integer written as a float, with spaces
    numeric = frame.copy()
    numeric.loc[0, "n"] = 1
    released = private_running_counts(
        text,
        keys=KEYS,
        epsilon=1.0,
        horizon=HORIZON,
        through=5,
        key_column="country",
        step_column="day",
        value_column="n",
        max_value=2,
        generator=NoiseGenerator.from_seed(4),
    )
    expected = _keyed_rows(numeric, seed=4, through=5)
    assert released["count"].tolist() == expected["count"].tolist()
    assert released["step"].max() == 5


def test_the_package_exports_it_lazily():
    assert pure_dp_mf.private_running_counts is private_running_counts
    assert "private_running_counts" in pure_dp_mf.__all__
    code = "import sys, pure_dp_mf; assert 'pandas' not in sys.modules and 'numpy' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def _daily(dates: list[str], counts: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"date": dates, "signups": counts})


def test_dates_missing_days_are_zero_steps_and_the_schedule_is_public():
    dates = ["2025-01-01", "2025-01-02", "2025-01-04", "2025-01-06"]
    counts = [3, 1, 4, 2]
    options = dict(keys=["signups"], key_column=None, value_column="signups", epsilon=1.0, horizon=10, max_value=5)
    by_date = private_running_counts(
        _daily(dates, counts), step_column="date", start="2025-01-01", through=7, generator=NoiseGenerator.from_seed(2), **options
    )
    by_step = private_running_counts(
        pd.DataFrame({"step": [1, 2, 4, 6], "signups": counts}), through=7, generator=NoiseGenerator.from_seed(2), **options
    )
    assert list(by_date.columns) == ["key", "step", "date", "count", "std", "lower", "upper"]
    assert len(by_date) == 7 and by_date["step"].tolist() == list(range(1, 8))
    assert by_date["date"].tolist() == [f"2025-01-0{day}" for day in range(1, 8)]
    assert by_date.drop(columns="date").equals(by_step)
    # events before the start or after the last released step change nothing
    outside = _daily(["2024-12-31", *dates, "2025-01-08", "2025-02-01"], [5, *counts, 5, 5])
    again = private_running_counts(
        outside, step_column="date", start="2025-01-01", through="2025-01-07", generator=NoiseGenerator.from_seed(2), **options
    )
    assert again.equals(by_date)
    # timestamps within a day fall on that day; datetime64 columns work as text does
    stamps = pd.DataFrame({"date": pd.to_datetime([f"{d} 13:30" for d in dates]), "signups": counts})
    timed = private_running_counts(
        stamps,
        step_column="date",
        start="2025-01-01",
        step_size="1d",
        through=7,
        generator=NoiseGenerator.from_seed(2),
        **options,
    )
    assert timed.equals(by_date)


def test_hourly_calendar_period_column():
    frame = pd.DataFrame({"key": ["a", "a", "b"], "at": ["2025-03-01T00:10", "2025-03-01T02:59", "2025-03-01T01:00"]})
    released = private_running_counts(
        frame, keys=["a", "b"], step_column="at", start="2025-03-01", step_size="1h", through=3, epsilon=1.0
    )
    assert released["date"].tolist() == [f"2025-03-01T0{h}:00:00" for h in (0, 0, 1, 1, 2, 2)]


def _dirty() -> pd.DataFrame:
    """Valid events plus invalid ones of listed keys in the schedule (rows 2, 4, 5), invalid ones
    of an unlisted key and of a step outside the schedule (never looked at)."""
    return pd.DataFrame(
        {
            "country": ["de", "fr", "de", "it", "fr", "it", "xx", "de"],
            "day": ["1", "2", "2", "3", "1.5", "4", "zz", "99"],
            "n": ["1", "2", "7", "0", "1", "x", "1", "bad"],
        }
    )


POLICY_OPTIONS = dict(keys=KEYS, epsilon=1.0, horizon=HORIZON, key_column="country", step_column="day", value_column="n")


def test_refuse_names_the_column_and_row_never_the_value():
    with pytest.raises(InvalidInputError, match=r"value_column 'n': the cell at row 2 is outside \[0, 2\].*3 event\(s\)"):
        private_running_counts(_dirty(), max_value=2, generator=NoiseGenerator.from_seed(1), **POLICY_OPTIONS)
    shifted = _dirty().iloc[3:]
    with pytest.raises(InvalidInputError, match=r"step_column 'day': the cell at row 1 is not an integer"):
        private_running_counts(shifted, max_value=2, **POLICY_OPTIONS)
    dates = pd.DataFrame({"key": ["a", "a"], "step": ["2025-01-01", "Jan 2"]})
    with pytest.raises(InvalidInputError, match=r"step_column 'step': the cell at row 1 is not an ISO date"):
        private_running_counts(dates, keys=["a"], epsilon=1.0, start="2025-01-01", through=3)


@pytest.mark.parametrize("policy", ["zero", "clamp"])
def test_zero_drops_and_clamp_clamps(policy):
    released = private_running_counts(
        _dirty(), max_value=2, invalid=policy, generator=NoiseGenerator.from_seed(5), **POLICY_OPTIONS
    )
    clean = _dirty().iloc[[0, 1, 3] + ([2] if policy == "clamp" else [])].copy()
    clean.loc[clean.index == 2, "n"] = "2"
    clean = clean.astype({"day": int, "n": int}).assign(uid="")
    expected = _keyed_rows(clean, seed=5)
    assert released["count"].tolist() == expected["count"].tolist()


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(key_column="country"), "key_column 'country': no such column"),
        (dict(step_column="day"), "step_column 'day': no such column"),
        (dict(value_column="n"), "value_column 'n': no such column"),
        (dict(user_column="uid", privacy_unit="user", max_keys=1, max_per_key=1), "user_column 'uid': no such column"),
        (dict(privacy_unit="user", max_keys=1, max_per_key=1), "needs user_column"),
        (dict(user_column="key"), "user_column is for privacy_unit"),
        (dict(invalid="stop"), "the DataFrame function takes refuse, zero or clamp"),
        (dict(step_size="1d"), "step_size needs start"),
        (dict(privacy_unit="person"), "privacy.unit"),
        (dict(horizon=None), "through"),
        (dict(key_column=None), "key_column=None is for one key"),
    ],
)
def test_bad_arguments(options, message):
    frame = pd.DataFrame({"key": ["a"], "step": [1]})
    arguments = dict(keys=["a", "b"], epsilon=1.0, horizon=4) | options
    with pytest.raises(InvalidInputError, match=message):
        private_running_counts(frame, **arguments)


def test_integer_keys_are_compared_as_text_and_duplicate_columns_refused():
    frame = pd.DataFrame({"key": [1, 2, 2, 3], "step": [1, 1, 2, 2]})
    released = private_running_counts(frame, keys=["1", "2"], epsilon=1.0, horizon=2, generator=NoiseGenerator.from_seed(8))
    same = private_running_counts(
        frame.astype({"key": str}), keys=["1", "2"], epsilon=1.0, horizon=2, generator=NoiseGenerator.from_seed(8)
    )
    assert released.equals(same) and released["key"].tolist() == ["1", "2", "1", "2"]
    twice = pd.DataFrame([["a", 1, 1]], columns=["key", "step", "step"])
    with pytest.raises(InvalidInputError, match="step_column 'step': the frame has several columns"):
        private_running_counts(twice, keys=["a"], epsilon=1.0, horizon=2)


def test_not_a_dataframe():
    with pytest.raises(InvalidInputError, match="pandas or polars DataFrame"):
        private_running_counts([("a", 1)], keys=["a"], epsilon=1.0, horizon=4)


def test_polars():
    polars = pytest.importorskip("polars")
    frame = _events()
    released = private_running_counts(
        polars.from_pandas(frame),
        keys=KEYS,
        epsilon=1.0,
        horizon=HORIZON,
        key_column="country",
        step_column="day",
        value_column="n",
        max_value=2,
        generator=NoiseGenerator.from_seed(9),
    )
    assert isinstance(released, pd.DataFrame)
    assert released["count"].tolist() == _keyed_rows(frame, seed=9)["count"].tolist()


@pytest.mark.parametrize("missing", ["", "  ", None, np.nan])
def test_an_event_without_its_user_is_refused_by_row_or_dropped(missing):
    """An empty or missing user id (NaN, None: never the user "nan") is refused with its row and
    no value under "refuse", and dropped under "zero" and "clamp" (``keyed.check_user``)."""
    frame = _events()
    frame["uid"] = frame["uid"].astype(object)
    listed = np.flatnonzero(frame["country"].isin(KEYS).to_numpy() & frame["day"].between(1, HORIZON).to_numpy())
    position = int(listed[3])
    frame.loc[position, "uid"] = missing
    options = dict(
        keys=KEYS, epsilon=1.0, horizon=HORIZON, key_column="country", step_column="day", value_column="n",
        user_column="uid", privacy_unit="user", max_keys=1, max_per_key=2, max_value=2,
    )  # fmt: skip
    with pytest.raises(InvalidInputError, match=rf"^user_column 'uid' at row {position}: the user id is empty") as refused:
        private_running_counts(frame, generator=NoiseGenerator.from_seed(11), **options)
    assert "nan" not in str(refused.value) and "None" not in str(refused.value)
    for policy in ("zero", "clamp"):
        released = private_running_counts(frame, generator=NoiseGenerator.from_seed(11), invalid=policy, **options)
        expected = _keyed_rows(frame.drop(index=position), seed=11, user=True, privacy_unit="user", max_keys=1, max_per_key=2)
        assert released["count"].tolist() == expected["count"].tolist()
