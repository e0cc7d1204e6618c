"""Keyed private running counts of a pandas (or polars) DataFrame, on the local engine.

``private_running_counts(events, keys=…, epsilon=…, horizon=…)`` takes a DataFrame of events and
returns a pandas DataFrame with one row (key, step, [date,] count, std, lower, upper) per public
key and step of the public schedule 1 … ``through``, in step order, keys in list order. It has the
signature and semantics of the Spark function (``engines/spark.py``) and runs the release of the
local engine: ``KeyedCounters`` fed by ``run_keyed`` (``engines/keyed.py``), nothing else. So the
privacy model and its proof are those of ``keyed.py`` (docs/privacy.md, "Keyed streams"): the
keys and the schedule are public, every listed key is released at every step of the schedule,
events of unlisted keys and of steps outside the schedule are dropped unseen, and the release is
ε-DP for the chosen privacy unit (an event, a step, a user's events within a step, or a user
under the contribution bounds K and C).

With ``start`` (and ``step_size``, default one day) the step column holds dates or timestamps,
bucketed by a public ``Calendar`` (``engines/calendar.py``); events before ``start`` or after
the last released step are dropped unseen, days without events are steps of input zero, and the
output has a ``date`` column, the start of each step's period.

Invalid events of listed keys in the schedule (a step or value that is not an integer, or a date
that does not parse; a value outside [0, m]) follow ``invalid``, checked on the whole frame with
pandas before any counter exists: "refuse" raises ``InvalidInputError`` naming the column, the
value and its row, and nothing is released; "zero" drops them; "clamp" clamps a value to [0, m]
(an event whose step or value does not parse is dropped).

A frame is a table, not a stream: its rows are ordered by step (stably) before the release, so
the release is that of ``count`` on the same rows sorted by step (``count`` reads a file as a
stream and refuses a step that goes backwards). With ``state`` the call resumes a state as
``count --state`` does and checks the events of released steps the same way
(``engines.partitions``).
"""

from __future__ import annotations

import math
import numbers
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.keyed import (
    INTERVAL_WORDS,
    MAX_LOCAL_KEYS,
    KeyedCounters,
    KeyedEvent,
    check_keys,
    empty_user_error,
    normalise_key,
    run_keyed,
)
from pure_dp_mf.engines.keyed_io import release_columns
from pure_dp_mf.engines.partitions import StepInputs
from pure_dp_mf.engines.spec import CountSpec, check_user_column, keyed_spec
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import MAX_DIGITS

INVALID_POLICIES = ("refuse", "zero", "clamp")
USER_UNITS = ("user-step", "user")  # the privacy units whose bounds need the user of every event
OTHER_UNITS = ("step", "event")
_INTEGER_TEXT = re.compile(r"-?[0-9]+(?:\.0*)?")
_CAP = 1 << 62  # integers beyond ±2^62 are capped: far outside any schedule and any [0, m]


def private_running_counts(
    events: Any,
    *,
    spec: CountSpec | None = None,
    key_column: str | None = "key",
    step_column: str = "step",
    value_column: str | None = None,
    user_column: str | None = None,
    **options: Any,
) -> Any:
    """The releases of every key at every step 1 … ``through`` of the public schedule (default
    the horizon; without a horizon ``through`` is required and the counters are anytime), as a
    pandas DataFrame with the columns key, step, [date,] count, std, lower, upper (module docstring).

    What is released is one ``CountSpec`` (``engines.spec``): ``spec``, or one made from
    ``options`` (``CountSpec.of``): ``keys`` and ``epsilon`` (required), ``horizon``,
    ``privacy_unit`` (default "event"), ``max_keys``, ``max_per_key``, ``max_value``,
    ``through``, ``extend``, ``base``, ``metric``, ``beta``, ``band``, ``invalid`` ("refuse",
    "zero" or "clamp"), ``released_events``, ``start``, ``step_size`` and the publication's
    ``generator``, ``seed``, ``key_file``, ``state`` and ``budget``. Features the DataFrame
    function does not run are refused from the spec's parity table (``spec.REFUSED``).

    Privacy: ε-DP for the privacy unit ("event", "step", "user-step" or "user"), exactly as
    ``KeyedCounters`` (docs/privacy.md, "Keyed streams"), which releases them; the std and the
    guaranteed (1 − β) interval [lower, upper] of each row are functions of the public mechanism.

    ``events``: a pandas DataFrame, or a polars one (converted with ``to_pandas``). Its columns:
    ``key_column`` (compared as text with the keys; None: every event is of the one listed key),
    ``step_column`` (1-based integer steps, or dates/timestamps with ``start``), ``value_column``
    (integers in [0, ``max_value``]; None: every event counts 1) and ``user_column`` (for the
    units "user-step" and "user"). ``through`` may be a date with ``start`` (the last step whose
    period begins by then). The noise: the ``generator`` given (default a secure one; a seeded
    one is not private and warns). A missing column, a bad argument or (with
    ``invalid="refuse"``) an invalid event is an ``InvalidInputError`` before anything is released.

    ``state``: a state file, as ``count --state`` keeps for event rows: created when missing, else
    resumed (the same keys and options; the generator is the state's, a given one must be it), and
    the call releases only the steps past the released ones, ``released`` + 1 … ``through``, and
    returns their rows (none when there is no new step). The events of released steps follow
    ``released_events`` ("refuse" or "set-aside", ``engines.partitions``): a step given other
    than as released, or a frame of released steps only while new steps are due, is refused
    before anything is released. ``budget``: the named budget (``engines.budget``) charged ε with
    the first released step, once per state (a resumed run is not charged again)."""
    frame = _as_pandas(events)
    if "keys" in options:
        options["keys"] = check_keys(options["keys"], maximum=MAX_LOCAL_KEYS)
    spec = keyed_spec(spec, options, route="dataframe")
    assert spec.keys is not None
    keys = list(spec.keys)
    if len(keys) > MAX_LOCAL_KEYS:
        raise InvalidInputError(f"the key list holds more than {MAX_LOCAL_KEYS:,} keys, the most one local run releases")
    columns = {"key_column": key_column, "step_column": step_column, "value_column": value_column, "user_column": user_column}
    _check_columns(frame, columns)
    if key_column is None and len(keys) != 1:
        raise InvalidInputError(f"key_column=None is for one key (a single stream), got {len(keys)} keys")
    check_user_column(str(spec.privacy_unit), user_column)
    calendar = spec.calendar
    through = spec.schedule()
    assert through is not None
    beta = spec.step_beta(intervals=len(keys) * through)
    table = _scheduled(frame, keys=keys, columns=columns, calendar=calendar, through=through)
    table = _apply_policy(
        table, frame=frame, columns=columns, invalid=spec.invalid, max_value=spec.max_value, dates=calendar is not None
    )
    counters = KeyedCounters.from_spec(spec)
    seeded = counters.generator.seeded
    if seeded:
        warnings.warn("seeded noise (NoiseGenerator.from_seed): not private, for tests and research only", stacklevel=2)
    try:
        first = counters.released
        inputs = StepInputs(counters, through=through, policy=spec.released_events, names=("state", "released_events"))
        counters.step_inputs = inputs
        released = _release(counters, inputs.events(_events(table)), first=first, beta=beta, through=through)
    finally:
        counters.close()
    result = _output(keys, released, first=first, calendar=calendar)
    result.attrs.update(  # what made the rows: a seeded run says so on its output
        {
            "seeded": seeded,
            "private": not seeded,
            "epsilon": counters.epsilon,
            "privacy_unit": counters.privacy_unit,
            "interval_meaning": INTERVAL_WORDS,
            "mechanism": counters.mechanism.name,
            "publication": None if counters._guard is None else counters._guard.name,
        }
    )
    return result


def _as_pandas(events: Any):
    """``events`` as a pandas DataFrame (a polars DataFrame through ``to_pandas``)."""
    import pandas as pd

    if isinstance(events, pd.DataFrame):
        return events
    module = type(events).__module__
    if module.startswith("polars") and hasattr(events, "to_pandas"):
        return events.to_pandas()
    if module.startswith("pyspark"):
        raise InvalidInputError("a Spark DataFrame: use pure_dp_mf.engines.spark.private_running_counts")
    raise InvalidInputError(f"events must be a pandas or polars DataFrame, got {type(events).__name__}")


def _check_columns(frame, columns: dict[str, str | None]) -> None:
    """Every named column exists (the error names the argument and lists the frame's columns)."""
    names = [str(name) for name in frame.columns]
    for argument, name in columns.items():
        if name is not None and name not in frame.columns:
            raise InvalidInputError(f"{argument} {name!r}: no such column ({', '.join(names)})")
        if name is not None and list(frame.columns).count(name) > 1:
            raise InvalidInputError(f"{argument} {name!r}: the frame has several columns of that name")
    if columns["step_column"] is None:
        raise InvalidInputError("step_column is required")


def _integers(series) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, parsed) of a column: integers, integral floats, or text of an integer in
    ASCII digits ("12", "-3", "12.0"; no exponent, no "_", no fraction). Unparsed entries are 0."""
    import pandas as pd

    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return np.zeros(len(series), dtype=np.int64), np.zeros(len(series), dtype=bool)
    if pd.api.types.is_integer_dtype(dtype):
        parsed = series.notna().to_numpy(dtype=bool)
        numbers_ = series.to_numpy(dtype=np.float64 if pd.api.types.is_unsigned_integer_dtype(dtype) else np.int64, na_value=0)
        return np.clip(numbers_, -_CAP, _CAP).astype(np.int64), parsed
    if pd.api.types.is_float_dtype(dtype):
        floats = series.to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            parsed = np.isfinite(floats) & (np.floor(floats) == floats)
        return np.where(parsed, np.clip(np.nan_to_num(floats), -_CAP, _CAP), 0).astype(np.int64), parsed
    return _map_uniques(series, _integer_of)


def _integer_of(value: Any) -> int | None:
    """One cell as an integer, or None (``_integers``)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        return int(number) if math.isfinite(number) and number.is_integer() else None
    text = str(value).strip()
    if len(text) > MAX_DIGITS or not _INTEGER_TEXT.fullmatch(text):
        return None
    return int(text.split(".")[0])


def _map_uniques(series, parse) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values capped at ±2^62, parsed) of ``parse`` applied once per distinct cell."""
    import pandas as pd

    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    parsed_uniques = [parse(value) for value in uniques]
    table = np.array([0 if v is None else max(-_CAP, min(_CAP, v)) for v in parsed_uniques] + [0], dtype=np.int64)
    ok = np.array([v is not None for v in parsed_uniques] + [False], dtype=bool)
    return table[codes], ok[codes]  # code −1 (a missing cell) reads the last entry: unparsed


def _calendar_steps(series, calendar: Calendar, *, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, parsed) of a column of dates or timestamps on the public calendar."""

    def step_of(value: Any) -> int | None:
        try:
            return calendar.step_of(value, what=what)
        except (InvalidInputError, TypeError, ValueError, OverflowError):
            return None

    return _map_uniques(series, step_of)


@dataclass
class _Table:
    """The events of listed keys in the schedule: their rows (positions in the frame), keys, steps
    and values with what parsed, and users."""

    rows: np.ndarray
    keys: np.ndarray
    steps: np.ndarray
    step_ok: np.ndarray
    values: np.ndarray
    value_ok: np.ndarray
    users: np.ndarray | None

    def take(self, mask: np.ndarray) -> _Table:
        users = None if self.users is None else self.users[mask]
        return _Table(
            self.rows[mask], self.keys[mask], self.steps[mask], self.step_ok[mask], self.values[mask], self.value_ok[mask], users
        )


def _scheduled(frame, *, keys: list[str], columns: dict, calendar: Calendar | None, through: int) -> _Table:
    """The events of listed keys whose step is in [1, through] or does not parse; the others are
    dropped before their values are looked at."""
    key_column, step_column, value_column, user_column = (
        columns[name] for name in ("key_column", "step_column", "value_column", "user_column")
    )
    if key_column is None:
        listed = np.ones(len(frame), dtype=bool)
        key_text = np.full(len(frame), keys[0], dtype=object)
    else:
        cells = frame[key_column]
        import pandas as pd

        codes, spellings = pd.factorize(cells.astype(str))  # each distinct spelling normalised once
        key_text = np.array([normalise_key(text) for text in spellings] + [""], dtype=object)[codes]
        listed = cells.notna().to_numpy(dtype=bool) & np.isin(key_text, np.asarray(keys, dtype=object))
    rows = np.flatnonzero(listed)
    step_cells = frame[step_column].iloc[rows]
    if calendar is None:
        steps, step_ok = _integers(step_cells)
    else:
        steps, step_ok = _calendar_steps(step_cells, calendar, what=f"step_column {step_column!r}")
    kept = ~step_ok | ((steps >= 1) & (steps <= through))
    rows, steps, step_ok = rows[kept], steps[kept], step_ok[kept]
    if value_column is None:
        values, value_ok = np.ones(len(rows), dtype=np.int64), np.ones(len(rows), dtype=bool)
    else:
        values, value_ok = _integers(frame[value_column].iloc[rows])
    users = None
    if user_column is not None:  # a missing user (None, NaN) is an empty one (``keyed.check_user``), never "nan"
        cells = frame[user_column].iloc[rows]
        users = np.where(cells.isna().to_numpy(dtype=bool), "", cells.astype(str).to_numpy(dtype=object)).astype(object)
    return _Table(rows, key_text[rows], steps, step_ok, values, value_ok, users)


def _apply_policy(table: _Table, *, frame, columns: dict, invalid: str, max_value: int, dates: bool) -> _Table:
    """The invalid events of the schedule: refused (before any counter exists), dropped or clamped."""
    outside = table.value_ok & ((table.values < 0) | (table.values > max_value))
    unparsed = ~table.step_ok | ~table.value_ok | _empty_users(table)  # an event without its user is dropped whole
    bad = unparsed | outside
    if invalid == "refuse":
        if bad.any():
            raise InvalidInputError(_refusal(table, frame=frame, columns=columns, bad=bad, max_value=max_value, dates=dates))
        return table
    if invalid == "clamp":
        table = table.take(~unparsed)
        table.values = np.clip(table.values, 0, max_value)
        return table
    return table.take(~bad)


def _empty_users(table: _Table) -> np.ndarray:
    """The events whose user is missing or empty once normalised (``keyed.check_user``'s rule)."""
    if table.users is None:
        return np.zeros(len(table.rows), dtype=bool)
    return np.array([not normalise_key(user) for user in table.users], dtype=bool)


def _refusal(table: _Table, *, frame, columns: dict, bad: np.ndarray, max_value: int, dates: bool) -> str:
    """The message of ``invalid="refuse"``: the first invalid event's column and row, never its value (for
    an empty user: its column and row, ``keyed.check_user``'s words)."""
    first = int(np.flatnonzero(bad)[0])
    position = int(table.rows[first])
    where = f"row {position}"  # the position only: neither the cell nor the frame's index label (data)
    step_or_value_bad = not table.step_ok[first] or not table.value_ok[first] or not 0 <= table.values[first] <= max_value
    if not step_or_value_bad:  # the user is empty
        error = empty_user_error(f"user_column {columns['user_column']!r} at {where}")
        return f"{error}; {int(bad.sum())} event(s) of listed keys in the schedule are invalid and nothing was released"
    argument = "step_column" if not table.step_ok[first] else "value_column"
    column = columns[argument]
    if argument == "step_column":
        what = "is not an ISO date or timestamp (in the time zone of start, or none)" if dates else "is not an integer"
    elif not table.value_ok[first]:
        what = "is not an integer"
    else:
        what = f"is outside [0, {max_value}] (max_value)"
    return (
        f"{argument} {column!r}: the cell at {where} {what}; {int(bad.sum())} event(s) of listed keys in the schedule are "
        f"invalid and nothing was released (invalid='refuse'; 'zero' drops them, 'clamp' clamps their values)"
    )


def _events(table: _Table) -> Iterator[KeyedEvent]:
    """The events in step order (stable: rows of one step keep their order)."""
    order = np.argsort(table.steps, kind="stable")
    users = table.users
    for i in order.tolist():
        user = None if users is None else str(users[i])
        yield KeyedEvent(key=str(table.keys[i]), step=int(table.steps[i]), value=int(table.values[i]), user=user)


def _release(
    counters: KeyedCounters, events: Iterator[KeyedEvent], *, first: int, beta: float, through: int
) -> dict[str, np.ndarray]:
    """``run_keyed`` over the events: counts, lower and upper of shape (steps, keys), std (steps,),
    of the steps first + 1 … through (those a state has not released)."""
    size, steps = len(counters.keys), max(through - first, 0)
    released: dict[str, np.ndarray] = {name: np.zeros((steps, size), dtype=np.int64) for name in ("count", "lower", "upper")}
    released["std"] = np.zeros(steps, dtype=np.float64)
    for step, counts, std, lower, upper in run_keyed(counters, events, beta=beta, through=through):
        released["count"][step - 1 - first] = counts
        released["std"][step - 1 - first] = std
        released["lower"][step - 1 - first] = lower
        released["upper"][step - 1 - first] = upper
    return released


def _output(keys: list[str], released: dict[str, np.ndarray], *, first: int, calendar: Calendar | None):
    """The rows (key, step, [date,] count, std, lower, upper) of steps first + 1, …, step then key-list
    order (``keyed_io.release_columns``; ``released`` holds steps × keys)."""
    import pandas as pd

    return pd.DataFrame(
        release_columns(
            keys=keys,
            counts=released["count"].T,
            std=released["std"],
            lower=released["lower"].T,
            upper=released["upper"].T,
            first=first,
            calendar=calendar,
        )
    )
