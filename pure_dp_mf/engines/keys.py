"""The public keys and the public schedule of event rows: checked before any data is read.

Keys are public (a list fixed in advance: an event of another key is dropped unseen) and so is
the schedule of released steps (1 … ``through``): which (key, step) rows are released never
depends on the data (docs/privacy.md, "Keyed streams"). Every route (the command, ``KeyedCounters``,
the DataFrame function, Spark) checks them here.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from collections.abc import Iterable, Sequence

from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_size, parse_integer


def normalise_key(value: object) -> str:
    """The one spelling of a key, for every engine (the CLI's rows, the key list, the DataFrame
    function, Spark): its text without the white space around it, so that " FR" and "FR" are one
    key wherever they are read. A public function of the key alone (no data value decides it)."""
    return str(value).strip()


MAX_LOCAL_KEYS = 1_000_000
"""The most keys one local run (the CLI's --keys, the DataFrame function) releases: every key is
released at every step, and the run keeps a sum, a noise block and an output row per key."""

MAX_ANYTIME_THROUGH = 10**9
"""The last step an anytime keyed release (no horizon) may schedule: every key is released at
every step, so a schedule past it cannot finish."""


def keys_sha256(keys: Sequence[str]) -> str:
    """The sha256 of a checked key list (JSON): a publication's keys, in its spec and states."""
    return hashlib.sha256(json.dumps(list(keys)).encode()).hexdigest()


def check_keys(keys: Iterable[str], *, maximum: int | None = None) -> list[str]:
    """The public key list, each key normalised (``normalise_key``): non-empty, no duplicates, no
    empty key, at most ``maximum`` keys; a string is refused (it is one key, not a list of its
    characters)."""
    if isinstance(keys, (str, bytes)):
        raise InvalidInputError(f"keys must be a list of keys, not the string {keys!r} (write [{keys!r}] for one key)")
    try:
        iterator = iter(keys)
    except TypeError:
        raise InvalidInputError(f"keys must be a list of keys, got {type(keys).__name__}") from None
    listed: list[str] = []
    for key in iterator:  # refused at key ``maximum`` + 1: a longer list (or generator) is never kept whole
        if maximum is not None and len(listed) == maximum:
            raise InvalidInputError(f"the key list holds more than {maximum:,} keys, the most one local run releases")
        listed.append(normalise_key(key))
    keys = listed
    if not keys:
        raise InvalidInputError("the key list is empty")
    seen: set[str] = set()
    for key in keys:
        if not key:
            raise InvalidInputError("the key list holds an empty key")
        if key in seen:
            raise InvalidInputError(f"the key list holds {key!r} twice")
        seen.add(key)
    return keys


def public_schedule(horizon: int | None, through: object, *, calendar: Calendar | None = None) -> int:
    """The last step a keyed release covers: ``through`` (at most the horizon), by default the
    horizon; without a horizon ``through`` is required (the schedule is public, never the data's).
    ``through`` is a step (an integer, or its ASCII digits), or with a ``calendar`` a date or
    timestamp (the step whose period holds it); the calendar must reach the last step."""
    if through is None:
        if horizon is None:
            raise InvalidInputError("keyed counts without --horizon need --through N: the public schedule of steps to release")
        last = horizon
    else:
        if isinstance(through, str) and (calendar is None or through.strip().isdigit()):
            through = parse_integer(through, what="--through")
        elif calendar is not None and not (isinstance(through, numbers.Integral) and not isinstance(through, bool)):
            through = calendar.steps_through(through)
        last = check_size(through, name="--through", maximum=horizon if horizon is not None else MAX_ANYTIME_THROUGH)
    if calendar is not None:
        calendar.check_schedule(last)
    return last


SINGLE_KEY = "count"
"""The one key of a single stream given as event rows (not shown in its output)."""
