"""Figures of released counts (reports/plot.py): PNGs that decode, panels per key, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image
import pytest

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.reports.plot import MAX_PANELS, plot_output_file, plot_release


def _decoded(path: Path):
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    height, width = pixels.shape[:2]
    assert 300 <= height <= 3000 and 500 <= width <= 3000
    return pixels


def test_plot_release_with_dates_and_true_counts(tmp_path):
    steps = list(range(1, 32))
    counts = [2 * t + (-1) ** t * 3 for t in steps]
    pixels = _decoded(
        plot_release(
            output=tmp_path / "release.png",
            steps=steps,
            counts=counts,
            lower=[max(c - 9, 0) for c in counts],
            upper=[c + 9 for c in counts],
            dates=[f"2025-01-{t:02d}" for t in steps],
            true_counts=[2 * t for t in steps],
            title="sign-ups, ε = 1",
            band_label="95 % interval",
        )
    )
    assert pixels.std() > 0  # not a blank image


def test_plot_release_refuses_mismatched_lengths(tmp_path):
    with pytest.raises(InvalidInputError, match="lower has 2 values, steps has 3"):
        plot_release(
            output=tmp_path / "x.png", steps=[1, 2, 3], counts=[1, 2, 3], lower=[0, 0], upper=[4, 5, 6], title="", band_label=""
        )
    assert not (tmp_path / "x.png").exists()


def _write(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def test_single_stream_output_file_with_a_sidecar(tmp_path):
    source = _write(
        tmp_path / "out.csv", "step,date,count,std,lower,upper", [f"{t},2025-02-{t:02d},{t},3.5,0,{t + 7}" for t in range(1, 21)]
    )
    (tmp_path / "out.csv.meta.json").write_text(json.dumps({"epsilon": 1.0, "privacy_unit": "step", "mechanism": "lifted k64"}))
    _decoded(plot_output_file(source=source, image=tmp_path / "out.png", band_label="95 % interval"))


def test_keyed_output_file_one_panel_per_key(tmp_path):
    keys = ["de", "fr", "it", "es"]
    rows = [f"{key},{t},{t + j},2.0,{t},{t + 2 * j + 4}" for t in range(1, 11) for j, key in enumerate(keys)]
    source = _write(tmp_path / "keyed.csv", "key,step,count,std,lower,upper", rows)
    _decoded(plot_output_file(source=source, image=tmp_path / "keyed.png", band_label="interval"))


def test_keyed_output_file_with_too_many_keys_is_refused(tmp_path):
    rows = [f"k{j},1,1,1.0,0,3" for j in range(MAX_PANELS + 1)]
    source = _write(tmp_path / "many.csv", "key,step,count,std,lower,upper", rows)
    with pytest.raises(InvalidInputError, match=f"holds {MAX_PANELS + 1} keys.*at most {MAX_PANELS} keys"):
        plot_output_file(source=source, image=tmp_path / "many.png", band_label="interval")
    assert not (tmp_path / "many.png").exists()


def test_missing_column_and_bad_cells(tmp_path):
    source = _write(tmp_path / "bad.csv", "step,count,lower,upper", ["1,1,0,3"])
    with pytest.raises(InvalidInputError, match="no column 'std'"):
        plot_output_file(source=source, image=tmp_path / "bad.png", band_label="interval")
    source = _write(tmp_path / "cell.csv", "step,count,std,lower,upper", ["1,1,1.0,0,3", "2,two,1.0,0,3"])
    with pytest.raises(InvalidInputError, match="line 3: column count holds 'two'"):
        plot_output_file(source=source, image=tmp_path / "cell.png", band_label="interval")
    with pytest.raises(InvalidInputError, match="cannot read"):
        plot_output_file(source=tmp_path / "absent.csv", image=tmp_path / "absent.png", band_label="interval")
