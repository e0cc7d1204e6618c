"""Golden releases: seeded runs of ``pure-dp-mf count`` (single counters at several horizons,
metrics, bounds, vectors, monotone post-processing and output formats; keyed counts at event and
user level) release exactly the values recorded in ``tests/golden/releases.json``
(``tests/golden/record.py`` made them). A refactor must not change a released value."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))
import record  # noqa: E402

RELEASES = json.loads((GOLDEN / "releases.json").read_text())


@pytest.mark.parametrize("case", sorted(record.CASES))
def test_seeded_releases_are_the_recorded_ones(case):
    assert record.run(case, GOLDEN / "inputs") == RELEASES[case]
