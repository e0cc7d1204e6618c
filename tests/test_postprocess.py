"""Monotone post-processing: the online fit against its definition in exact fractions, the
counter and ``count --monotone`` (outputs, intervals of the unprocessed release, crash and
resume, refusals)."""

from __future__ import annotations

import csv
import io
from fractions import Fraction

import numpy as np
import pytest
from conftest import run_cli

from pure_dp_mf import Counter
from pure_dp_mf.engines.continual import ContinualCounter, StateFileError
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.release.postprocess import MonotoneFit
from pure_dp_mf.resources import BASE_FOLDER

BASE = BASE_FOLDER / "k008_maxse.npz"


def reference(releases: list[int], *, max_value: int) -> list[int]:
    """v_t = max(v_{t−1}, clip(round(max_s mean(y_s..y_t)), 0, m·t)) over every s, in fractions."""
    outputs, last = [], 0
    for t in range(1, len(releases) + 1):
        f = max(Fraction(sum(releases[s:t]), t - s) for s in range(t))
        rounded = (2 * f.numerator + f.denominator) // (2 * f.denominator)
        last = max(last, min(max(rounded, 0), max_value * t))
        outputs.append(last)
    return outputs


@pytest.mark.parametrize("seed", range(6))
def test_the_online_fit_is_its_definition(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 4))
    truth = np.cumsum(rng.integers(0, m + 1, size=80))
    releases = (truth + rng.integers(-12, 13, size=80)).tolist()
    expected = reference(releases, max_value=m)
    fit, whole = MonotoneFit().extended(releases, first_step=0, max_value=m)
    assert whole.tolist() == expected
    # in pieces, through the record (as across a resume), and without touching the original
    pieces, first, outputs = MonotoneFit(), 0, []
    for size in (1, 7, 30, 42):
        before = pieces.to_record()
        after, out = pieces.extended(releases[first : first + size], first_step=first, max_value=m)
        assert pieces.to_record() == before
        pieces, first = MonotoneFit.from_record(after.to_record()), first + size
        outputs += out.tolist()
    assert outputs == expected and pieces == fit
    assert all(0 <= v <= m * t for t, v in enumerate(outputs, start=1))
    assert all(a <= b for a, b in zip(outputs, outputs[1:], strict=False))


def test_a_malformed_record_is_refused():
    with pytest.raises(InvalidInputError, match="malformed"):
        MonotoneFit.from_record({"sums": ["1"], "counts": [0], "last": "0"})


def test_counter_monotone_is_the_fit_of_the_same_releases():
    x = (np.random.default_rng(3).random(60) < 0.4).astype(int).tolist()
    plain = ContinualCounter(base=BASE, epsilon=0.5, horizon=60, generator=NoiseGenerator.from_seed(9))
    monotone = ContinualCounter(base=BASE, epsilon=0.5, horizon=60, generator=NoiseGenerator.from_seed(9), monotone=True)
    raw = plain.counts(x).tolist()
    shown = monotone.counts(x[:25]).tolist() + [monotone.update(v) for v in x[25:]]
    assert shown == reference(raw, max_value=1)
    assert monotone.last_raw.tolist() == raw[-1:]
    assert monotone.summary()["monotone"] is True


def test_library_counter_keeps_the_interval_of_the_unprocessed_release():
    x = [1, 0, 1, 1, 0, 1, 1, 1, 0, 0] * 4
    plain = Counter(epsilon=1.0, horizon=40, mechanism="lifted", generator=NoiseGenerator.from_seed(4)).update_many(x)
    shown = Counter(
        epsilon=1.0, horizon=40, mechanism="lifted", generator=NoiseGenerator.from_seed(4), monotone=True
    ).update_many(x)
    assert [r.count for r in shown] == reference([r.count for r in plain], max_value=1)
    # the unprocessed release's interval cut to [0, t] (a plain interval only passes the cut to hold
    # its own count), widened where needed to hold the processed count
    assert [r.std for r in shown] == [r.std for r in plain]
    cut = [(max(p.lower, 0), min(p.upper, p.step)) for p in plain]
    assert [(r.lower, r.upper) for r in shown] == [(min(lo, r.count), max(hi, r.count)) for r, (lo, hi) in zip(shown, cut)]


def test_monotone_is_refused_for_vectors_and_a_state_made_otherwise(tmp_path):
    with pytest.raises(InvalidInputError, match="dimension 1"):
        ContinualCounter(base=BASE, epsilon=1, horizon=5, dimension=2, monotone=True, generator=NoiseGenerator.from_seed(1))
    counter = ContinualCounter(base=BASE, epsilon=1, horizon=5, generator=NoiseGenerator.from_seed(1))
    counter.save_state(tmp_path / "s.json")
    counter.close()
    with pytest.raises(StateFileError, match="without monotone"):
        ContinualCounter.resume(tmp_path / "s.json", monotone=True)


def _count(tmp_path, values, *extra):
    (tmp_path / "in.txt").write_text("".join(f"{v}\n" for v in values))
    arguments = ["count", str(tmp_path / "in.txt"), "--epsilon", "0.5", "--horizon", "30", "--base", str(BASE)]
    return run_cli(*arguments, "--seed", "6", *extra)


def test_count_monotone_across_a_restart_and_in_csv(tmp_path):
    values = [1, 1, 0, 1, 0, 0, 1, 1, 1, 0] * 3
    raw = _count(tmp_path, values)
    assert raw.returncode == 0, raw.stderr
    expected = reference([int(v) for v in raw.stdout.split()], max_value=1)
    whole = _count(tmp_path, values, "--monotone")
    assert [int(v) for v in whole.stdout.split()] == expected
    state = ["--monotone", "--state", str(tmp_path / "s.json")]
    first = _count(tmp_path, values[:13], *state)
    second = _count(tmp_path, values, *state)  # resumes after line 13 of the same file
    assert first.returncode == second.returncode == 0, second.stderr
    assert [int(v) for v in (first.stdout + second.stdout).split()] == expected
    refused = _count(tmp_path, values, "--state", str(tmp_path / "s.json"))
    assert refused.returncode == 2 and "with monotone" in refused.stderr
    table = _count(tmp_path, values, "--monotone", "--format", "csv")
    unprocessed = _count(tmp_path, values, "--format", "csv")
    shown = list(csv.DictReader(io.StringIO(table.stdout)))
    bars = list(csv.DictReader(io.StringIO(unprocessed.stdout)))
    assert [int(row["count"]) for row in shown] == expected
    assert [row["std"] for row in shown] == [r["std"] for r in bars]
    cut = [(max(int(r["lower"]), 0), min(int(r["upper"]), int(r["step"]))) for r in bars]  # as above
    widened = [(min(lo, int(row["count"])), max(hi, int(row["count"]))) for row, (lo, hi) in zip(shown, cut)]
    assert [(int(row["lower"]), int(row["upper"])) for row in shown] == widened
    sidecar = _count(tmp_path, values, "--monotone", "--format", "csv", "--output", str(tmp_path / "m.csv"))
    assert sidecar.returncode == 0 and '"monotone": true' in (tmp_path / "m.csv.meta.json").read_text()
