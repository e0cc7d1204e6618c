"""Public calendars (``engines.calendar``), privacy units of event rows (``engines.keyed``) and the
``count`` command on the example sign-ups: dates give exactly the integer-step release, every unit
bounds what it promises (checked against brute-force recomputations), and every interval holds
its count."""

from __future__ import annotations

import io
import json
import random
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_main  # noqa: E402

from pure_dp_mf.engines.calendar import Calendar, parse_step_size, parse_time
from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, run_keyed
from pure_dp_mf.errors import InvalidInputError

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")
EXAMPLES = ROOT / "examples"
DAILY, ROWS, COUNTRIES = EXAMPLES / "signups_daily.csv", EXAMPLES / "signups.csv", EXAMPLES / "countries.txt"
START = date(2025, 1, 1)
DAYS = 731
COLUMNS = ["step", "date", "count", "std", "lower", "upper"]


cli = run_main


def one_error_line(result: tuple[int, str, str], *needles: str) -> str:
    code, out, err = result
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning:")]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and out == "", (out, err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------ the calendar


def by_walking(start: datetime, size: timedelta, moment: datetime) -> int:
    """The step of ``moment``, found by walking period by period from step 1 (no division)."""
    low, step = start, 1
    while moment >= low + size:
        low, step = low + size, step + 1
    while moment < low:
        low, step = low - size, step - 1
    return step


@pytest.mark.parametrize(
    "start, size, value, expected",
    [
        ("2025-01-01", "1d", "2025-01-01", 1),
        ("2025-01-01", "1d", "2025-01-31", 31),
        ("2025-01-01", "1d", "2025-03-01", 60),
        ("2025-01-01", "1d", "2025-01-31T23:59:59.999999", 31),
        ("2025-01-01", "1d", "2025-02-01 00:00:00", 32),
        ("2025-01-01", "1d", "2024-12-31", 0),
        ("2025-01-01", "1d", "2024-12-30T23:59:59", -1),
        ("2025-01-01", "1w", "2025-01-08", 2),
        ("2025-01-01", "1w", "2025-01-07T23:59", 1),
        ("2025-01-01T06:00", "12h", "2025-01-01T17:59:59", 1),
        ("2025-01-01T06:00", "12h", "2025-01-01T18:00", 2),
        ("2025-01-01T06:00", "12h", "2025-01-01", 0),
        ("2025-01-01", "15min", "2025-01-01T01:00", 5),
        ("2025-01-01", "30s", "2025-01-01T00:00:29.5", 1),
        ("2025-01-01T00:00+01:00", "1d", "2024-12-31T23:00Z", 1),  # the same instant
        ("2025-01-01T00:00+01:00", "1d", "2024-12-31T22:59:59z", 0),
        ("2025-01-01T00:00+01:00", "1d", "2025-01-01T23:30:00+01:00", 1),
        ("2025-01-01T00:00+01:00", "1d", "2025-01-01T23:30:00Z", 2),  # 00:30 the next day at +01:00
        ("2025-01-01T00:00Z", "1h", "2025-01-01T05:30:00-03:00", 9),  # 08:30 UTC
        ("2025-01-01T00:00:00+00:00", "1d", "2025-01-02 00:00:00+00:00", 2),
    ],
)
def test_step_of_dates_timestamps_zulu_and_offsets(start, size, value, expected):
    calendar = Calendar.parse(start=start, step_size=size)
    assert calendar.step_of(value) == expected
    assert by_walking(calendar.start, calendar.step_size, parse_time(value, what="x")) == expected


@pytest.mark.parametrize(
    "start, size",
    [
        ("2025-01-01", "1d"),
        ("2024-02-27T13:45:07", "1d"),
        ("2025-03-30", "1h"),  # wall-clock time: no DST jumps on naive times
        ("2025-01-01", "7s"),
        ("2025-01-01T23:00", "15min"),
        ("2024-12-30", "1w"),
        ("2025-01-01T00:00+05:30", "3d"),
        ("2025-01-01T00:00-08:00", "12h"),
    ],
)
def test_bucketing_is_exact_at_every_period_boundary(start, size):
    calendar = Calendar.parse(start=start, step_size=size)
    s, d, tick = calendar.start, calendar.step_size, timedelta(microseconds=1)
    moments = []
    for k in range(-4, 40):
        boundary = s + k * d
        moments += [boundary - tick, boundary, boundary + tick, boundary + d / 2]
    generator = random.Random(f"{start} {size}")
    span = int(50 * d / tick)
    moments += [s + timedelta(microseconds=generator.randrange(-5 * span // 50, span)) for _ in range(300)]
    for moment in moments:
        expected = by_walking(s, d, moment)
        assert calendar.step_of(moment) == expected, moment
        assert calendar.step_of(moment.isoformat()) == expected, moment
        if moment.tzinfo is not None:  # the same instant written with another offset
            assert calendar.step_of(moment.astimezone(timezone(timedelta(hours=-11))).isoformat()) == expected
            assert calendar.step_of(moment.astimezone(UTC).isoformat().replace("+00:00", "Z")) == expected
    for k in range(-4, 40):  # each boundary opens step k + 1 and the tick before it closes step k
        assert calendar.step_of(s + k * d) == k + 1 and calendar.step_of(s + k * d - tick) == k


@pytest.mark.parametrize("start", ["2025-01-01", "2025-01-01T06:30", "2025-01-01T00:00+02:00", "2025-01-01T00:00Z"])
@pytest.mark.parametrize("size", ["1d", "2d", "1w", "12h", "90min", "45s"])
def test_period_round_trip(start, size):
    calendar = Calendar.parse(start=start, step_size=size)
    for step in range(-10, 120):
        text = calendar.period(step)
        assert calendar.step_of(text) == step, (step, text)
        moment = calendar.start + (step - 1) * calendar.step_size
        assert parse_time(text, what="x") == moment
        plain_days = calendar.start.tzinfo is None and size in ("1d", "2d", "1w") and start == "2025-01-01"
        assert text == (moment.date().isoformat() if plain_days else moment.isoformat()), (step, text)
    if start == "2025-01-01" and size == "1d":
        assert [calendar.period(t) for t in (0, 1, 2, 60, 731)] == [
            "2024-12-31",
            "2025-01-01",
            "2025-01-02",
            "2025-03-01",
            "2027-01-01",
        ]


def test_step_sizes_and_times_parse_or_are_refused_naming_the_flag():
    assert parse_step_size("1d") == timedelta(days=1) and parse_step_size(" 15 min ") == timedelta(minutes=15)
    assert parse_step_size("1w") == timedelta(days=7) and parse_step_size("30s") == timedelta(seconds=30)
    assert Calendar.parse(start="2025-01-01").step_size == timedelta(days=1)  # the default
    assert Calendar.parse(start=date(2025, 1, 1)).start == datetime(2025, 1, 1)
    for bad in ["0d", "-1d", "1.5d", "1D", "1m", "1day", "d", "", "1 d d"]:
        with pytest.raises(InvalidInputError, match="--step-size"):
            parse_step_size(bad)
    with pytest.raises(InvalidInputError, match="--start: 'yesterday' is not an ISO date"):
        Calendar.parse(start="yesterday")
    calendar = Calendar.parse(start="2025-01-01")
    with pytest.raises(InvalidInputError, match="--step-column: the date and --start must both"):
        calendar.step_of("2025-01-01T00:00Z")
    with pytest.raises(InvalidInputError, match="not an ISO date"):
        calendar.step_of("01/02/2025")
    with pytest.raises(InvalidInputError, match="--start must both"):
        Calendar.parse(start="2025-01-01T00:00Z").step_of("2025-01-01")


@pytest.mark.parametrize("size", ["1000000000d", "99999999999999999999s", "999999999w"])
def test_a_huge_step_size_is_refused_not_a_crash(size):
    with pytest.raises(InvalidInputError, match="--step-size"):
        parse_step_size(size)


def test_bad_step_size_and_time_zones_are_one_error_line_naming_the_flag(tmp_path):
    events = tmp_path / "e.csv"
    events.write_text("date\n2025-01-01T08:00Z\n")
    base = ["count", str(events), "--step-column", "date", "--epsilon", "1", "--horizon", "8", "--seed", "1"]
    for size in ["0d", "1.5d", "1D", "-2h", "1 month"]:
        one_error_line(cli(*base, "--start", "2025-01-01T00:00Z", "--step-size", size), "--step-size")
    one_error_line(cli(*base, "--start", "2025-01-01"), "--step-column", "--start", "time zone")
    naive = tmp_path / "n.csv"
    naive.write_text("date\n2025-01-01T08:00\n")
    one_error_line(cli(*base[:1], str(naive), *base[2:], "--start", "2025-01-01T00:00+01:00"), "--step-column", "--start")
    one_error_line(cli(*base, "--start", "2025-01-01T00:00Z", "--through", "2025-01-03"), "--through", "--start")
    one_error_line(cli(*base, "--start", "tomorrow"), "--start", "tomorrow")
    one_error_line(cli(*base, "--start", "2025-01-02T00:00Z", "--through", "2025-01-01T00:00Z"), "--through", "before --start")
    assert cli(*base, "--start", "2025-01-01T00:00Z", "--step-size", "2h")[0] == 0


def test_a_calendar_past_year_9999_is_refused_before_any_release(tmp_path):
    events = tmp_path / "e.csv"
    events.write_text("date\n9999-12-31\n")
    base = ["count", str(events), "--step-column", "date", "--epsilon", "1", "--horizon", "4", "--seed", "1"]
    one_error_line(cli(*base, "--start", "9999-12-31"))


# ------------------------------------------------------------------ the examples through the CLI

SINGLE = ["--step-column", "date", "--start", "2025-01-01", "--horizon", str(DAYS), "--epsilon", "1", "--format", "csv"]
UNITS = {
    "step": [str(DAILY), "--column", "signups", "--max-value", "50", "--privacy-unit", "step"],
    "event": [str(ROWS), "--privacy-unit", "event"],
    "user-step": [str(ROWS), "--privacy-unit", "user-step", "--user-column", "user_id"],
    "user": [str(ROWS), "--privacy-unit", "user", "--user-column", "user_id", "--max-keys", "1", "--max-per-key", "5"],
}
USER_C2 = [str(ROWS), "--privacy-unit", "user", "--user-column", "user_id", "--max-keys", "1", "--max-per-key", "2"]
SEED = "17"


def run_to_csv(folder: Path, name: str, arguments: list[str], *, common=SINGLE, seed=SEED) -> pd.DataFrame:
    output = folder / f"{name}.csv"
    code, out, err = cli("count", *arguments, *common, "--output", str(output), "--seed", seed)
    assert code == 0, err
    assert out == ""  # the rows went to --output
    return pd.read_csv(output)


def with_empty_input(arguments: list[str], folder: Path, header: str) -> list[str]:
    """The same command on a file of the same columns and no rows: its counts are the noise."""
    empty = folder / f"empty-{header.replace(',', '-')}.csv"
    empty.write_text(header + "\n")
    return [str(empty), *arguments[1:]]


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """Every 731-day run once: each unit, the same on an input without rows, and the daily totals
    as integer steps."""
    folder = tmp_path_factory.mktemp("examples")
    runs = {}
    for unit, arguments in UNITS.items():
        runs[unit] = run_to_csv(folder, unit, arguments)
        header = "date,signups" if unit == "step" else "date,user_id,country"
        runs[unit + "/zero"] = run_to_csv(folder, unit + "-zero", with_empty_input(arguments, folder, header))
    runs["user-c2"] = run_to_csv(folder, "user-c2", USER_C2)
    runs["user-c2/zero"] = run_to_csv(folder, "user-c2-zero", with_empty_input(USER_C2, folder, "date,user_id,country"))
    daily = pd.read_csv(DAILY)
    steps = (pd.to_datetime(daily["date"]) - pd.Timestamp(START)).dt.days + 1
    integer = folder / "daily-steps.csv"
    pd.DataFrame({"day": steps, "signups": daily["signups"]}).to_csv(integer, index=False)
    common = ["--step-column", "day", "--horizon", str(DAYS), "--epsilon", "1", "--format", "csv"]
    runs["integer"] = run_to_csv(folder, "integer", [str(integer), *UNITS["step"][1:]], common=common)
    runs["folder"] = folder
    return runs


def calendar_dates() -> list[str]:
    return [(START + timedelta(days=t)).isoformat() for t in range(DAYS)]


def running(per_day: pd.Series) -> np.ndarray:
    """The true running count of a per-date series, every day of the calendar (a missing day is 0)."""
    days = per_day.reindex(calendar_dates(), fill_value=0)
    assert len(days) == DAYS and days.sum() == per_day.sum()  # no date outside the calendar
    return days.to_numpy().cumsum()


@pytest.mark.parametrize("unit", list(UNITS))
def test_each_unit_gives_731_dated_rows_and_says_its_unit(examples, unit):
    frame = examples[unit]
    assert list(frame.columns) == COLUMNS  # one stream: no key column
    assert len(frame) == DAYS and frame["step"].tolist() == list(range(1, DAYS + 1))
    assert frame["date"].tolist() == calendar_dates()
    assert frame["date"].iloc[0] == "2025-01-01" and frame["date"].iloc[-1] == "2027-01-01"
    assert frame["date"].tolist() == [Calendar.parse(start="2025-01-01").period(t) for t in range(1, DAYS + 1)]
    meta = json.loads((examples["folder"] / f"{unit}.csv.meta.json").read_text())
    assert meta["privacy_unit"] == unit
    words = {"step": "one step", "event": "one event", "user-step": "within one step", "user": "over the whole stream"}
    assert words[unit] in meta["privacy_unit_meaning"]
    assert meta["calendar"] == {"start": "2025-01-01T00:00:00", "step_size_seconds": 86400.0}
    assert meta["horizon"] == DAYS and meta["through"] == DAYS and meta["seeded"] is True
    assert "keys" not in meta
    if unit == "user":
        assert "K = 1" in meta["privacy_unit_meaning"] and "C = 5" in meta["privacy_unit_meaning"]
    zero = examples[unit + "/zero"]
    assert zero["std"].tolist() == frame["std"].tolist()  # the std is public: it never depends on the data


def test_the_step_and_the_event_unit_run_the_same_mechanism_scaled_by_m(examples):
    step_meta = json.loads((examples["folder"] / "step.csv.meta.json").read_text())
    event_meta = json.loads((examples["folder"] / "event.csv.meta.json").read_text())
    assert step_meta["mechanism"] == event_meta["mechanism"]
    assert step_meta["max_value"] == 50 and event_meta["max_value"] == 1
    ratio = examples["step"]["std"].to_numpy() / examples["event"]["std"].to_numpy()
    assert np.allclose(ratio, 50, rtol=2e-5), (ratio.min(), ratio.max())
    assert step_meta["sensitivity"] == pytest.approx(50 * event_meta["sensitivity"], rel=1e-12)
    # user-step with K = m = 1 protects more than an event at the same noise
    assert examples["user-step"]["std"].tolist() == examples["event"]["std"].tolist()
    assert (examples["user"]["std"] > examples["event"]["std"]).all()


def test_daily_totals_by_date_are_exactly_the_integer_step_release(examples):
    dates, integer = examples["step"], examples["integer"]
    assert list(integer.columns) == ["step", "count", "std", "lower", "upper"]  # no calendar: no date column
    for column in ["step", "count", "std", "lower", "upper"]:
        assert dates[column].tolist() == integer[column].tolist(), column
    daily = pd.read_csv(DAILY)
    assert len(daily) < DAYS and daily["signups"].max() <= 50  # days without a row; no day above m
    truth = running(daily.set_index("date")["signups"])
    noise = dates["count"].to_numpy() - truth
    assert noise.tolist() == examples["step/zero"]["count"].tolist()
    assert np.abs(noise).max() > 0  # the release is noisy


def test_sign_up_rows_released_per_unit_are_the_bounded_running_counts_plus_noise(examples):
    rows = pd.read_csv(ROWS)
    per_event = rows.groupby("date").size()
    per_user_day = rows.drop_duplicates(["date", "user_id"]).groupby("date").size()  # m = 1 per user and day
    days = rows.drop_duplicates(["user_id", "date"])  # in date order, as the file
    per_user = days.groupby("user_id").head(5).groupby("date").size()  # each user's first 5 days, once a day
    per_user_c2 = days.groupby("user_id").head(2).groupby("date").size()  # … first 2 days
    assert per_user_day.sum() < per_event.sum() and per_user_c2.sum() < per_user_day.sum()  # the bounds bite here
    assert per_user.sum() == per_user_day.sum()  # no user signs up on more than 5 days (examples/README.md)
    units = [("event", per_event), ("user-step", per_user_day), ("user", per_user), ("user-c2", per_user_c2)]
    for unit, per_day in units:
        released = examples[unit]["count"].to_numpy()
        noise = examples[unit + "/zero"]["count"].to_numpy()
        assert (released - noise).tolist() == running(per_day).tolist(), unit
    daily = pd.read_csv(DAILY).set_index("date")["signups"]
    assert running(per_event).tolist() == running(daily).tolist()  # the rows and the totals agree


def test_user_step_keeps_each_users_first_k_keys_clipped_to_m_in_every_step():
    generator = np.random.default_rng(5)
    keys, users, horizon, m, k = ["a", "b", "c", "d"], [f"u{i}" for i in range(6)], 24, 3, 2
    events = []
    for step in range(1, horizon + 1):
        for _ in range(int(generator.integers(0, 14))):
            key, user = keys[int(generator.integers(4))], users[int(generator.integers(6))]
            events.append(KeyedEvent(key=key, step=step, value=int(generator.integers(0, m + 1)), user=user))
    generator.shuffle(events)  # the order within a step must not matter
    events.sort(key=lambda event: event.step)
    options = dict(keys=keys, epsilon=1.0, horizon=horizon, max_value=m, privacy_unit="user-step", max_keys=k)
    released = np.array(
        [counts for _, counts, *_ in run_keyed(KeyedCounters(**options, generator=NoiseGenerator.from_seed(8)), events)]
    )
    noise = np.array([counts for _, counts, *_ in run_keyed(KeyedCounters(**options, generator=NoiseGenerator.from_seed(8)), [])])
    bounded = np.zeros((horizon, len(keys)), dtype=np.int64)
    raw = np.zeros_like(bounded)
    for step in range(1, horizon + 1):
        for user in users:
            mine = [event for event in events if event.step == step and event.user == user]
            for key in sorted({event.key for event in mine})[:k]:  # the user's first K keys (in key order)
                bounded[step - 1, keys.index(key)] += min(m, sum(event.value for event in mine if event.key == key))
            for event in mine:
                raw[step - 1, keys.index(event.key)] += event.value
    assert (released - noise).tolist() == bounded.cumsum(axis=0).tolist()
    assert (bounded != raw).any()  # the bounds bite
    event = KeyedCounters(keys=keys, epsilon=1.0, horizon=horizon, max_value=1, generator=NoiseGenerator.from_seed(8))
    user_step = KeyedCounters(**options, generator=NoiseGenerator.from_seed(8))
    assert user_step.sensitivity == k * m * event.sensitivity  # the noise of K keys of m each
    assert user_step.summary()["max_keys"] == k and "K = 2" in user_step.summary()["privacy_unit_meaning"]


def test_the_step_unit_clips_each_steps_total_to_m():
    generator = np.random.default_rng(9)
    horizon, m = 30, 5
    events = sorted(
        (KeyedEvent(key="count", step=int(t), value=int(generator.integers(0, m + 1))) for t in generator.integers(1, 31, 90)),
        key=lambda event: event.step,
    )
    options = dict(keys=["count"], epsilon=1.0, horizon=horizon, max_value=m, privacy_unit="step")
    released = [int(c[0]) for _, c, *_ in run_keyed(KeyedCounters(**options, generator=NoiseGenerator.from_seed(2)), events)]
    noise = [int(c[0]) for _, c, *_ in run_keyed(KeyedCounters(**options, generator=NoiseGenerator.from_seed(2)), [])]
    totals = [sum(event.value for event in events if event.step == t) for t in range(1, horizon + 1)]
    assert max(totals) > m  # the clip bites
    assert [r - n for r, n in zip(released, noise, strict=True)] == np.cumsum([min(total, m) for total in totals]).tolist()
    with pytest.raises(InvalidInputError, match="--privacy-unit step"):
        KeyedCounters(**{**options, "keys": ["a", "b"]}, generator=NoiseGenerator.from_seed(2))


# ------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "arguments, needles",
    [
        (
            [str(ROWS), "--key-column", "country", "--keys", str(COUNTRIES), "--step-column", "date", "--start", "2025-01-01"]
            + ["--privacy-unit", "step"],
            ["--privacy-unit step", "one stream"],
        ),
        ([str(ROWS), "--step-column", "date", "--start", "2025-01-01", "--privacy-unit", "user"], ["--user-column"]),
        ([str(ROWS), "--step-column", "date", "--start", "2025-01-01", "--privacy-unit", "user-step"], ["--user-column"]),
        (
            [str(ROWS), "--key-column", "country", "--keys", str(COUNTRIES), "--step-column", "date", "--start", "2025-01-01"]
            + ["--privacy-unit", "user", "--user-column", "user_id"],
            ["--max-keys", "--max-per-key"],
        ),
        (
            [str(ROWS), "--key-column", "country", "--keys", str(COUNTRIES), "--step-column", "date", "--start", "2025-01-01"]
            + ["--privacy-unit", "user-step", "--user-column", "user_id"],
            ["--max-keys"],
        ),
        ([str(ROWS), "--step-column", "date", "--start", "2025-01-01", "--user-column", "user_id"], ["--user-column"]),
        ([str(ROWS), "--step-column", "date", "--start", "2025-01-01", "--max-keys", "2"], ["--max-keys"]),
        (["--start", "2025-01-01"], ["--start", "--step-column"]),
        (["--step-size", "1d"], ["--step-size", "--step-column"]),
        ([str(ROWS), "--step-column", "date", "--step-size", "1d"], ["--step-size", "--start"]),
        ([str(ROWS), "--step-column", "date"], ["line 2", "--step-column 'date'", "--start"]),
        ([str(ROWS), "--step-column", "date", "--start", "2025-01-01", "--through", "2024-12-31"], ["--through", "before"]),
        ([str(ROWS), "--step-column", "date", "--start", "2025-01-01", "--through", "2027-01-02"], ["through", "731"]),
        ([str(ROWS), "--step-column", "date", "--start", "2025-01-01", "--through", "March"], ["--through", "March"]),
        (["--privacy-unit", "event"], ["--privacy-unit event", "--step-column"]),
    ],
)
def test_units_and_calendars_refused_in_one_error_line(arguments, needles, tmp_path):
    output = tmp_path / "out.csv"
    result = cli(
        "count", *arguments, "--epsilon", "1", "--horizon", str(DAYS), "--seed", "1", "--output", str(output), stdin="1\n"
    )
    one_error_line(result, *needles)
    assert not output.exists() or output.stat().st_size == 0  # nothing released


def test_through_a_date_is_the_public_schedule_up_to_that_day(tmp_path):
    through_date = run_to_csv(tmp_path, "by-date", [*UNITS["event"], "--through", "2025-03-01"])
    assert len(through_date) == 60 and through_date["step"].tolist() == list(range(1, 61))
    assert through_date["date"].iloc[-1] == "2025-03-01"
    assert through_date["date"].tolist() == calendar_dates()[:60]
    by_step = run_to_csv(tmp_path, "by-step", [*UNITS["event"], "--through", "60"])
    assert by_step.equals(through_date)
    noon = run_to_csv(tmp_path, "noon", [*UNITS["event"], "--through", "2025-03-01T12:00"])  # within day 60
    assert noon.equals(through_date)
    rows = pd.read_csv(ROWS)
    truth = rows[rows["date"] <= "2025-03-01"].groupby("date").size().reindex(calendar_dates()[:60], fill_value=0).cumsum()
    noise = run_to_csv(tmp_path, "zero", [*with_empty_input(UNITS["event"], tmp_path, "date,user_id,country"), "--through", "60"])
    assert (through_date["count"] - noise["count"]).tolist() == truth.tolist()  # rows after the schedule are dropped


def test_keyed_counts_by_date_give_every_key_at_every_day(tmp_path):
    countries = COUNTRIES.read_text().split()
    arguments = [str(ROWS), "--key-column", "country", "--keys", str(COUNTRIES), "--through", "2025-01-20"]
    frame = run_to_csv(tmp_path, "keyed", arguments)
    through = 20
    assert list(frame.columns) == ["key", *COLUMNS]
    assert len(countries) == 50 and len(frame) == 50 * through
    assert list(zip(frame["step"], frame["key"], strict=True)) == [(t, key) for t in range(1, through + 1) for key in countries]
    assert frame["date"].tolist() == [day for day in calendar_dates()[:through] for _ in countries]
    meta = json.loads((tmp_path / "keyed.csv.meta.json").read_text())
    assert meta["privacy_unit"] == "event" and meta["keys"] == 50 and meta["through"] == through
    empty = with_empty_input(arguments, tmp_path, "date,user_id,country")
    noise = run_to_csv(tmp_path, "keyed-zero", empty)
    rows = pd.read_csv(ROWS)
    rows = rows[rows["date"] <= "2025-01-20"]
    per_day = rows.groupby(["date", "country"]).size().unstack(fill_value=0)
    truth = per_day.reindex(index=calendar_dates()[:through], columns=countries, fill_value=0).cumsum()
    assert (frame["count"] - noise["count"]).tolist() == truth.to_numpy().ravel().tolist()
    other = run_to_csv(tmp_path, "keyed-other-seed", arguments, seed="18")
    assert (other["count"] != frame["count"]).any()  # the seed is the noise


# ------------------------------------------------------------------------------- intervals


def check_intervals(counts, lower, upper, *, steps=None, max_value=None) -> None:
    """lower ≤ count ≤ upper; a cut at 0 (and at m·t with ``max_value``) never passes the count."""
    counts, lower, upper = (np.asarray(column, dtype=np.int64) for column in (counts, lower, upper))
    assert (lower <= counts).all() and (counts <= upper).all(), np.flatnonzero((lower > counts) | (counts > upper))
    assert (lower >= np.minimum(counts, 0)).all()
    if max_value is not None:
        assert (upper <= np.maximum(counts, max_value * np.asarray(steps))).all()


@pytest.mark.parametrize("monotone", [False, True])
@pytest.mark.parametrize("max_value", [1, 4])
def test_single_stream_intervals_hold_their_counts_for_many_seeds(monotone, max_value):
    horizon = 32
    below = above = 0
    for seed in range(25):
        values = np.random.default_rng(seed).integers(0, max_value + 1, horizon)
        counter = Counter(
            epsilon=0.5, horizon=horizon, max_value=max_value, monotone=monotone, generator=NoiseGenerator.from_seed(seed)
        )
        releases = counter.update_many(values.tolist()[:10]) + counter.update_many(values.tolist()[10:])
        steps = [r.step for r in releases]
        assert steps == list(range(1, horizon + 1))
        counts = [r.count for r in releases]
        check_intervals(counts, [r.lower for r in releases], [r.upper for r in releases], steps=steps, max_value=max_value)
        below += sum(c < 0 for c in counts)
        above += sum(c > max_value * t for c, t in zip(counts, steps, strict=True))
        if monotone:  # the shown counts are the isotonic fit: non-negative, non-decreasing
            assert counts[0] >= 0 and all(a <= b for a, b in zip(counts, counts[1:]))
    assert monotone or (below > 0 and above > 0)  # counts outside [0, m·t] were met: the cut was tested


@pytest.mark.parametrize("unit", ["event", "step", "user-step", "user"])
def test_event_row_and_keyed_intervals_hold_their_counts_for_many_seeds(unit):
    horizon = 24
    keys = ["k"] if unit == "step" else ["a", "b", "c"]
    bounds = {"user-step": {"max_keys": 2}, "user": {"max_keys": 2, "max_per_key": 3}}.get(unit, {})
    outside = 0
    for seed in range(20):
        generator = np.random.default_rng(seed)
        steps = np.sort(generator.integers(1, horizon + 1, 40))
        events = [
            KeyedEvent(key=keys[int(generator.integers(len(keys)))], step=int(t), value=1, user=f"u{generator.integers(5)}")
            for t in steps
        ]
        counters = KeyedCounters(
            keys=keys, epsilon=0.5, horizon=horizon, privacy_unit=unit, generator=NoiseGenerator.from_seed(seed), **bounds
        )
        for step, counts, std, lower, upper in run_keyed(counters, events):
            assert std > 0 and counts.shape == lower.shape == upper.shape == (len(keys),)
            check_intervals(counts, lower, upper)
            outside += int((counts < 0).sum())
    assert outside > 0


def read_rows(text: str, output_format: str) -> pd.DataFrame:
    if output_format == "csv":
        return pd.read_csv(io.StringIO(text))
    records = [json.loads(line) for line in text.splitlines()]
    assert "header" in records[0]
    return pd.DataFrame(records[1:])


@pytest.mark.parametrize("output_format", ["csv", "jsonl"])
def test_intervals_of_every_output_path_hold_their_counts(tmp_path, output_format):
    generator = np.random.default_rng(1)
    (tmp_path / "keys.txt").write_text("de\nfr\nit\n")
    lines = [
        f"{day},{['de', 'fr', 'it', 'xx'][generator.integers(4)]},{generator.integers(0, 3)}"
        for day in sorted(generator.integers(1, 21, 30))
    ]
    (tmp_path / "events.csv").write_text("day,country,value\n" + "\n".join(lines) + "\n")
    values = "".join(f"{v}\n" for v in generator.integers(0, 3, 20))
    common = ["--epsilon", "0.5", "--horizon", "20", "--max-value", "2", "--format", output_format]
    rows = tmp_path / "events.csv"
    paths = {
        "stream": [],
        "event rows": [str(rows), "--step-column", "day", "--column", "value"],
        "keyed": [str(rows), "--step-column", "day", "--column", "value", "--key-column", "country"]
        + ["--keys", str(tmp_path / "keys.txt")],
    }
    negative = 0
    for path, arguments in paths.items():
        for seed in range(6):
            code, out, err = cli("count", *arguments, *common, "--seed", str(seed), stdin=values)
            assert code == 0, (path, err)
            frame = read_rows(out, output_format)
            expected = 60 if path == "keyed" else 20
            assert len(frame) == expected and ("key" in frame.columns) == (path == "keyed"), (path, frame.columns)
            cap = 2 if path == "stream" else None  # one count per line: a step adds at most m
            check_intervals(frame["count"], frame["lower"], frame["upper"], steps=frame["step"], max_value=cap)
            negative += int((frame["count"] < 0).sum())
    assert negative > 0


def test_error_bars_bounds_hold_the_shown_count_against_a_direct_recomputation():
    from pure_dp_mf.release.error_bars import ErrorBars

    generator = random.Random(4)
    for trial in range(300):
        size, m, first = generator.randint(1, 6), generator.randint(1, 5), generator.randint(0, 50)
        huge = trial % 3 == 0  # exact Python integers past int64
        scale = 2**70 if huge else 40
        counts = [generator.randint(-scale, scale) for _ in range(size)]
        shown = [c + generator.randint(-scale, scale) if trial % 2 else c for c in counts]
        half = np.array([generator.uniform(0, 30) for _ in range(size)])
        bars = ErrorBars(std=half / 2, half_width=half, beta=0.05)
        array = (lambda v: np.array(v, dtype=object)) if huge else (lambda v: np.array(v, dtype=np.int64))
        lower, upper = bars.bounds(array(counts), first_step=first, max_value=m, shown=array(shown))
        for i, (c, s) in enumerate(zip(counts, shown, strict=True)):
            h, t = int(np.floor(half[i])), first + 1 + i
            assert int(lower[i]) == min(max(c - h, 0), s) and int(upper[i]) == max(min(c + h, m * t), s), (trial, i)
            assert int(lower[i]) <= s <= int(upper[i])
