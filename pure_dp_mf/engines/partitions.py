"""Daily partitions: a resumed keyed run's input checked against the steps its state has released.

A keyed run with a state (``count --key-column … --state``, ``private_running_counts(state=…)``)
releases the public schedule 1 … ``through``; a run resumed after step k releases k + 1 … through
only. Its input may be

* **a partition**: the events of the steps it releases only (one day's file per run);
* **a cumulative file**: every event since step 1, the released steps' exactly as they were
  released (a re-run of the same command is one too);
* with no step left to release (``through`` ≤ k), **a re-run**: any released steps' events,
  each exactly as released.

Anything else is an input inconsistency that would otherwise be silent (a released step's events
are never counted again): a corrected file for a released step, or an earlier run's file given
as today's, which would release today as a step without events, for good. What happens to the
events of released steps is a policy fixed before any data is read (``RELEASED_EVENTS``):

* ``"refuse"`` (the default): a released step whose events in the input differ from those it
  was released from is refused, and so is an input whose events all belong to released steps,
  exactly as released but not to every released step that had events, while the run has new
  steps to release (an earlier day's file given again). One ``InvalidInputError`` naming the step
  or the schedule (never a value), raised before anything is released: the input is read in step
  order and the released steps come first.
* ``"set-aside"``: the events of released steps are set aside, never counted, and counted for the
  operator: those of a step given exactly as released apart from those of a step given otherwise.

Which steps are released never depends on the data: the schedule is public and the released
count is the state's. A refusal releases nothing and changes no state (docs/privacy.md,
"Released steps and daily partitions").

How a step's input is compared: the state records, with every step it commits, the digest of
the step's events as counted (``step_input_digest``), a keyed MAC of the multiset of (key,
value, user), whatever the order of the lines; a resumed run computes the same digest of each
released step it reads and compares. The events are never stored; a step's distinct events are
held until the step ends, as ``run_keyed`` holds the step's events.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pure_dp_mf.engines.keyed import KeyedEvent
from pure_dp_mf.engines.spec import RELEASED_EVENTS, check_released_events  # noqa: F401  (the policy, checked by the spec)
from pure_dp_mf.errors import InvalidInputError

_INPUT_DOMAIN = b"pure_dp_mf step input digest v1\x00"


def input_mac_key(key: bytes) -> bytes:
    """The MAC key of the step input digest, derived from the run's generator key in a domain of
    its own (not the noise's, not the ledger's)."""
    return hashlib.sha256(_INPUT_DOMAIN + key).digest()


def _order(item: tuple[tuple[str, int, str | None], int]) -> tuple[str, int, str]:
    (key, value, user), _ = item
    return key, value, "" if user is None else user


def step_input_digest(mac_key: bytes, *, step: int, events: dict[tuple[str, int, str | None], int]) -> str:
    """The digest of one step's input events: HMAC-SHA256 under ``mac_key`` (``input_mac_key``)
    of the 1-based step (8 bytes) followed by the JSON list of [key, value, user or null, count]
    of the step's distinct events (key, value, user) in sorted order (ASCII JSON); 64 hex digits.
    ``events`` maps each distinct event of the step to its count: the order of the lines does not
    matter.

    Sound: the message is an injective encoding of (step, multiset of events) (JSON of a list of
    strings, integers and nulls is), so two different multisets of one step have equal digests
    only through a collision of HMAC-SHA256 under a secret key derived from the run's generator
    key (a PRF: about 2⁻²⁵⁶ per pair of inputs); equal multisets have equal digests. Without the
    key a digest says nothing of the events."""
    try:
        ordered = sorted(events.items())  # (key, value, user) tuples compared in C: users all text or all None
    except TypeError:  # users both None and text (not from one reader): None sorts as ""
        ordered = sorted(events.items(), key=_order)
    listed = [[key, value, user, count] for (key, value, user), count in ordered]
    message = int(step).to_bytes(8, "little") + json.dumps(listed).encode("ascii")
    return hmac.new(mac_key, message, hashlib.sha256).hexdigest()


@dataclass
class ReleasedEventsTally:
    """Per run: the events of released steps given exactly as released (``rerun``), those set
    aside (``set_aside``), and the events of new steps handed on to be counted (``passed``)."""

    rerun: int = 0
    set_aside: int = 0
    passed: int = 0


class StepInputs:
    """The events of a keyed run checked against its state's released steps (module docstring),
    and the digest of each new step's events for the state to record with the step.

    ``events`` wraps the run's events (1-based steps, in step order, listed keys in the schedule
    only: what ``run_keyed`` counts); ``digest(t)`` is the digest of the 0-based step t's events,
    asked by ``KeyedCounters.release`` when it commits step t (every event of step t has been
    read by then: ``run_keyed`` releases a step when it reads a later one or the input ends).
    ``names`` are the user-facing names of the state and the policy (the CLI's flags or the
    DataFrame function's arguments)."""

    def __init__(
        self, counters: Any, *, through: int, policy: str, names: tuple[str, str] = ("--state", "--released-events")
    ) -> None:
        self.policy = check_released_events(policy, flag=names[1])
        self.names = names
        self.counters, self.through = counters, through
        self.released = counters.released  # k: fixed by the state before any data is read
        self.tally = ReleasedEventsTally()
        self.cut_before = counters.dropped["over_bounds"]  # the bounds' cuts so far (a resumed state's included)
        self.mac_key = input_mac_key(counters.generator.key)
        journal = counters.journal
        self.hashing = journal is not None  # without a state nothing is recorded, nothing compared
        self.recorded: dict[int, str] = {} if journal is None else journal.step_inputs(min(self.released, through))
        self.finished: dict[int, str] = {}  # 0-based new step → digest of its events
        self.rerun_steps: set[int] = set()
        self.state = "" if journal is None else f"{names[0]} {journal.path}: "

    def digest(self, step: int) -> str:
        """The digest of the 0-based step ``step``'s events (of no event when it had none)."""
        found = self.finished.pop(step, None)
        return found if found is not None else self.digest_of_nothing(step + 1)

    def events(self, events: Iterable[KeyedEvent]) -> Iterator[KeyedEvent]:
        """The events of the steps this run releases, after the events of released steps are
        checked (refused or set aside) as the policy says."""
        seen: dict[tuple[str, int, str | None], int] = {}  # the current step's distinct events, counted
        current, count, new_steps = None, 0, False
        for event in events:
            if event.step != current:
                if current is not None:
                    self._finish(current, seen, count)
                current, seen, count = event.step, {}, 0
                new_steps = new_steps or current > self.released
            if self.hashing:
                distinct = (event.key, event.value, event.user)
                seen[distinct] = seen.get(distinct, 0) + 1
            count += 1
            if current > self.released:
                self.tally.passed += 1
                yield event
        if current is not None:
            self._finish(current, seen, count)
        if not new_steps:
            self._check_not_an_earlier_input()

    def _finish(self, step: int, seen: dict, count: int) -> None:
        """Every event of the 1-based ``step`` has been read (``seen``: its distinct events and
        their counts, ``count`` events): record a new step's digest, or check a released one
        against its record."""
        if not self.hashing:
            return
        digest = step_input_digest(self.mac_key, step=step, events=seen)
        if step > self.released:
            self.finished[step - 1] = digest
            return
        if self.recorded.get(step - 1) == digest:
            self.tally.rerun += count
            self.rerun_steps.add(step)
            return
        if self.policy == "refuse":
            unrecorded = "" if step - 1 in self.recorded else " (its input was not recorded)"
            raise InvalidInputError(
                f"{self.state}the input's events of step {step}, released by an earlier run, differ from those it was "
                f"released from{unrecorded}: a released step is never released or counted again; refused, nothing "
                f"released. Give a run the events of the steps it releases (or every event, as released); "
                f"{self.names[1]} set-aside sets such events aside"
            )
        self.tally.set_aside += count

    def _check_not_an_earlier_input(self) -> None:
        """With "refuse": an input all of whose events are of released steps, exactly as released
        but not of every released step that had events, while new steps are to be released, is
        an earlier run's input given again (a cumulative file holds every released step)."""
        if self.policy != "refuse" or not self.rerun_steps or self.through <= self.released:
            return
        for step in range(1, min(self.released, self.through) + 1):
            if step not in self.rerun_steps and self.recorded.get(step - 1) != self.digest_of_nothing(step):
                raise InvalidInputError(
                    f"{self.state}every event of the input is of steps released by an earlier run (as released there, "
                    f"but not of all of them) and none of the steps {self.released + 1} … {self.through} this run "
                    "releases: an earlier run's input given again? Refused, nothing released. A run takes the events of "
                    f"the steps it releases, or every event from step 1 (a cumulative file); {self.names[1]} set-aside "
                    "sets the events of released steps aside"
                )

    def digest_of_nothing(self, step: int) -> str:
        """The digest of a 1-based step without events."""
        return step_input_digest(self.mac_key, step=step, events={})
