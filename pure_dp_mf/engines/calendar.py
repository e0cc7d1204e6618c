"""A public calendar: steps from the dates and timestamps people write.

A ``Calendar`` fixes, before any data is read, when step 1 begins (``start``) and how long a
step lasts (``step_size``: ``30s``, ``15min``, ``1h``, ``1d``, ``1w``, …). An event at time τ
belongs to step

    t(τ) = ⌊(τ − start) / step_size⌋ + 1,

computed exactly on integer microseconds (``timedelta // timedelta``). The schedule of released
steps is therefore public: a step without events is a zero step of the schedule, never skipped
and never shifted, and an event before ``start`` (t ≤ 0) or after the last released step falls
outside the schedule and is dropped unseen, like an event of an unlisted key.

Accepted values: ISO 8601 dates (``2025-01-31``: midnight) and timestamps (``2025-01-31T08:15``,
``2025-01-31 08:15:00+01:00``, ``…Z``). The start and the events must agree on time zones: both
naive (local wall-clock time, no zone) or both aware (then compared as instants).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from pure_dp_mf.errors import InvalidInputError

UNITS = {"s": 1, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_STEP_SECONDS = 36525 * 86400  # a century: calendars stay inside datetime's years 1 … 9999
_SIZE = re.compile(r"\s*([0-9]+)\s*(s|min|h|d|w)\s*", re.ASCII)  # ASCII digits only: "١d" is refused


def parse_step_size(text: str, *, flag: str = "--step-size") -> timedelta:
    """``1d``, ``12h``, ``15min``, ``30s``, ``1w`` as a timedelta (a positive whole number of a unit)."""
    match = _SIZE.fullmatch(str(text))
    if match is None or int(match.group(1)) == 0:
        raise InvalidInputError(f"{flag} must be a positive whole number of s, min, h, d or w (e.g. 1d, 1h), got {text!r}")
    seconds = int(match.group(1)) * UNITS[match.group(2)]
    if seconds > MAX_STEP_SECONDS:
        raise InvalidInputError(f"{flag} {text.strip()} is longer than a century")
    return timedelta(seconds=seconds)


def parse_time(text: object, *, what: str, data: bool = False) -> datetime:
    """An ISO 8601 date or timestamp (a ``datetime``/``date`` object passes through). ``data``: the
    text is private input, so a refusal names ``what`` only, never the text."""
    if isinstance(text, datetime):
        return text
    if isinstance(text, date):
        return datetime(text.year, text.month, text.day)
    value = str(text).strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        shown = "not" if data else f"{str(text)[:40]!r} is not"
        raise InvalidInputError(f"{what}: {shown} an ISO date or timestamp (e.g. 2025-01-31)") from None


@dataclass(frozen=True)
class Calendar:
    """Step t covers [start + (t − 1)·step_size, start + t·step_size) (module docstring)."""

    start: datetime
    step_size: timedelta

    @classmethod
    def of(cls, *, start: object, step_size: object, flags: tuple[str, str] = ("--start", "--step-size")) -> Calendar | None:
        """The calendar of a start and a step size (default one day), or None without a start
        (integer steps); a step size without a start is refused (``flags`` name the two options)."""
        if start is None:
            if step_size is not None:
                raise InvalidInputError(f"{flags[1]} needs {flags[0]}: the date or time at which step 1 begins")
            return None
        return cls.parse(start=start, step_size="1d" if step_size is None else step_size)

    @classmethod
    def parse(cls, *, start: object, step_size: object = "1d") -> Calendar:
        """The calendar of ``--start`` and ``--step-size`` (default one day)."""
        size = step_size if isinstance(step_size, timedelta) else parse_step_size(str(step_size))
        if size <= timedelta(0):
            raise InvalidInputError(f"--step-size must be positive, got {step_size!r}")
        return cls(start=parse_time(start, what="--start"), step_size=size)

    def step_of(self, value: object, *, what: str = "--step-column", data: bool = True) -> int:
        """The 1-based step of a date or timestamp (≤ 0 before the start). ``data``: the value is
        private input (a refusal names ``what`` only); a flag's value (``--through``) is shown."""
        moment = parse_time(value, what=what, data=data)
        if (moment.tzinfo is None) != (self.start.tzinfo is None):
            raise InvalidInputError(f"{what}: the date and --start must both have a time zone or both have none")
        return (moment - self.start) // self.step_size + 1

    def period(self, step: int) -> str:
        """The ISO start of step ``step``'s period (a date when the calendar is whole days)."""
        moment = self.start + (step - 1) * self.step_size
        whole_days = self.step_size % timedelta(days=1) == timedelta(0) and moment.time() == datetime.min.time()
        return moment.date().isoformat() if whole_days and moment.tzinfo is None else moment.isoformat()

    def check_schedule(self, steps: int) -> None:
        """Refuse, before anything runs, a schedule of ``steps`` steps whose periods leave the
        years 1 … 9999 that dates can be written in."""
        try:
            self.start + steps * self.step_size
        except OverflowError:
            raise InvalidInputError(
                f"--start {self.start.isoformat()} with {steps} steps of --step-size {self.step_size} passes the year 9999"
            ) from None

    def steps_through(self, value: object) -> int:
        """The last step whose period begins at or before ``value`` (for ``--through DATE``); a
        date before the start is refused."""
        step = self.step_of(value, what="--through", data=False)
        if step < 1:
            raise InvalidInputError(f"--through {str(value).strip()} is before --start")
        return step

    def record(self) -> dict:
        """JSON-ready, for outputs' metadata and states."""
        return {"start": self.start.isoformat(), "step_size_seconds": self.step_size.total_seconds()}
