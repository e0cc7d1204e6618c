"""Every output says what its interval covers: the noise on the bounded count (the input as
counted, after the contribution bounds, m and the invalid policy), never "the true count":
``--help``, the metadata of each output (sidecar, JSON Lines header, the DataFrame's attrs), the
stderr summary and the ``--plot`` legend."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import run_cli, run_main

from pure_dp_mf.engines.dataframe import private_running_counts
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.keyed import INTERVAL_WORDS

pytestmark = pytest.mark.filterwarnings("ignore:seeded noise")


def test_the_words_say_bounded_and_noise():
    assert "bounded count" in INTERVAL_WORDS and "noise" in INTERVAL_WORDS and "raw data" in INTERVAL_WORDS


@pytest.mark.parametrize("command", ["count", "plan", "releases"])
def test_help_says_the_bounded_count(command):
    result = run_cli(command, "--help", env={"COLUMNS": "400"})
    assert result.returncode == 0, result.stderr
    assert "bounded count" in result.stdout and "true count" not in result.stdout


def test_one_stream_metadata_and_summary(tmp_path):
    (tmp_path / "in.txt").write_text("1\n0\n1\n")
    output = tmp_path / "out.csv"
    code, out, err = run_main("count", str(tmp_path / "in.txt"), "--epsilon", "1", "--horizon", "8", "--seed", "1",
                              "--format", "csv", "--output", str(output))  # fmt: skip
    assert code == 0, err
    sidecar = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert sidecar["interval_meaning"] == INTERVAL_WORDS
    assert "intervals cover the noise on the bounded count" in err
    code, out, err = run_main("count", str(tmp_path / "in.txt"), "--epsilon", "1", "--horizon", "8", "--seed", "1",
                              "--format", "jsonl")  # fmt: skip
    assert code == 0 and json.loads(out.splitlines()[0])["header"]["interval_meaning"] == INTERVAL_WORDS, err


def test_keyed_metadata_summary_and_dataframe(tmp_path):
    (tmp_path / "keys.txt").write_text("a\nb\n")
    (tmp_path / "ev.csv").write_text("k,day,uid\na,1,u1\nb,2,u2\na,2,u1\n")
    output = tmp_path / "out.csv"
    code, out, err = run_main("count", str(tmp_path / "ev.csv"), "--key-column", "k", "--keys", str(tmp_path / "keys.txt"),
                              "--step-column", "day", "--epsilon", "1", "--horizon", "4", "--seed", "2",
                              "--privacy-unit", "user", "--user-column", "uid", "--max-keys", "1", "--max-per-key", "1",
                              "--output", str(output))  # fmt: skip
    assert code == 0, err
    assert json.loads((tmp_path / "out.csv.meta.json").read_text())["interval_meaning"] == INTERVAL_WORDS
    summary = next(line for line in err.splitlines() if line.startswith("keyed counts: "))
    assert json.loads(summary.removeprefix("keyed counts: "))["interval_meaning"] == INTERVAL_WORDS
    frame = pd.DataFrame({"k": ["a", "b"], "day": [1, 2]})
    released = private_running_counts(frame, keys=["a", "b"], epsilon=1.0, horizon=4, key_column="k", step_column="day",
                                      generator=NoiseGenerator.from_seed(3))  # fmt: skip
    assert released.attrs["interval_meaning"] == INTERVAL_WORDS


def test_the_plot_legend_says_the_bounded_count(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from pure_dp_mf.reports import plot

    labels = []
    monkeypatch.setattr(plot, "plot_output_file", lambda **options: labels.append(options["band_label"]))
    (tmp_path / "in.txt").write_text("1\n0\n1\n")
    code, out, err = run_main("count", str(tmp_path / "in.txt"), "--epsilon", "1", "--horizon", "8", "--seed", "1",
                              "--format", "csv", "--output", str(tmp_path / "out.csv"), "--plot", str(tmp_path / "p.png"))  # fmt: skip
    assert code == 0, err
    assert labels == ["0.95 interval per step (noise on the bounded count)"]
