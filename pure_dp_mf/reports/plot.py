"""Figures of released counts: the private running count as a line, its interval as a band.

``plot_release`` draws one series (steps or dates on the x-axis; optionally the true counts, for
synthetic data only); ``plot_output_file`` draws a CSV output of ``pure-dp-mf count`` (one
stream, or one panel per key of a keyed output, at most ``MAX_PANELS`` keys). Drawing is
post-processing of the released values and of the public error bars: it costs no privacy, as
long as no true count is drawn beside them (``true_counts`` is for synthetic data). PNG files are
written atomically with matplotlib's Agg backend, in the style of ``reports/figures.py``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pure_dp_mf.atomic import check_writable_file
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.reports.figures import pyplot, save_png

MAX_PANELS = 12  # keys drawn by ``plot_output_file``, one panel each
REQUIRED = ("step", "count", "std", "lower", "upper")
MAX_ROWS = 10_000_000
LINE = "\x00line"  # each row read keeps its line number under this name (no CSV column has it)


def _series(name: str, values: Sequence[Any], size: int | None) -> list[float]:
    """``values`` as finite floats, of length ``size`` when given."""
    try:
        numbers = [float(v) for v in values]
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be numbers") from None
    if size is not None and len(numbers) != size:
        raise InvalidInputError(f"{name} has {len(numbers)} values, steps has {size}")
    if not all(math.isfinite(v) for v in numbers):
        raise InvalidInputError(f"{name} holds NaN or infinity")
    return numbers


def _dates(dates: Sequence[Any], size: int) -> list[datetime]:
    """ISO dates or timestamps (or ``datetime``/``date`` objects) as datetimes."""
    from pure_dp_mf.engines.calendar import parse_time

    moments = [parse_time(value, what="dates") for value in dates]
    if len(moments) != size:
        raise InvalidInputError(f"dates has {len(moments)} values, steps has {size}")
    return moments


def _draw(axis, *, steps, counts, lower, upper, dates, true_counts, band_label: str, legend: bool = True) -> None:
    """One series on ``axis``: the band, the released line, the true counts (dashed)."""
    size = len(steps)
    if size == 0:
        raise InvalidInputError("nothing to plot: no steps")
    x: list[Any] = _dates(dates, size) if dates is not None else _series("steps", steps, None)
    counts, lower, upper = (
        _series(name, values, size) for name, values in (("counts", counts), ("lower", lower), ("upper", upper))
    )
    axis.fill_between(x, lower, upper, alpha=0.25, color="C0", linewidth=0, label=band_label)
    axis.plot(x, counts, color="C0", linewidth=1.0, label="released count")
    if true_counts is not None:
        axis.plot(x, _series("true_counts", true_counts, size), color="black", linestyle="--", linewidth=0.8, label="true count")
    if dates is not None:
        import matplotlib.dates as mdates

        locator = mdates.AutoDateLocator()
        axis.xaxis.set_major_locator(locator)
        axis.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    axis.set_xlabel("date" if dates is not None else "step")
    axis.set_ylabel("running count")
    axis.grid(True, alpha=0.3)
    if legend:
        axis.legend(fontsize=8, loc="upper left")


def plot_release(
    *,
    output: Path,
    steps: Sequence[Any],
    counts: Sequence[Any],
    lower: Sequence[Any],
    upper: Sequence[Any],
    dates: Sequence[Any] | None = None,
    true_counts: Sequence[Any] | None = None,
    title: str,
    band_label: str,
) -> Path:
    """Write a PNG of one released series to ``output``: the counts as a line, [lower, upper] as
    a shaded band labelled ``band_label``, dates on the x-axis when given (ISO strings or
    datetimes), the true counts dashed when given. Plotting released values is post-processing
    (the release stays ε-DP as ``KeyedCounters`` or ``ContinualCounter`` made it: docs/privacy.md,
    "Keyed streams"); drawing ``true_counts`` is not private and is for synthetic data only."""
    output = check_writable_file(output, name="image")
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(10, 4.8))
    try:
        _draw(
            axis,
            steps=steps,
            counts=counts,
            lower=lower,
            upper=upper,
            dates=dates,
            true_counts=true_counts,
            band_label=band_label,
        )
    except BaseException:
        plt.close(figure)
        raise
    axis.set_title(title, fontsize=10)
    return save_png(figure, output)


def _read_output(source: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The column names and rows of a CSV output of ``count``, with the required columns checked."""
    try:
        with open(source, encoding="utf-8-sig", newline="") as stream:
            reader = csv.DictReader(stream)
            names = list(reader.fieldnames or [])
            if not names:
                raise InvalidInputError(f"{source} is empty: expected a CSV output of count (--format csv)")
            if names[0].lstrip().startswith("{"):
                raise InvalidInputError(f"{source} is JSON Lines: plot a CSV output of count (--format csv)")
            missing = [name for name in REQUIRED if name not in names]
            if missing:
                raise InvalidInputError(
                    f"{source} has no column {', '.join(map(repr, missing))} (a CSV output of count has "
                    f"{','.join(REQUIRED)}, optionally date and key; it has {','.join(names)})"
                )
            rows = []
            for line, row in enumerate(reader, start=2):
                row[LINE] = str(line)
                rows.append(row)
                if len(rows) > MAX_ROWS:
                    raise InvalidInputError(f"{source} has more than {MAX_ROWS} rows")
    except OSError as error:
        raise InvalidInputError(f"cannot read {source}: {error.strerror or error}") from None
    except (UnicodeDecodeError, csv.Error) as error:
        raise InvalidInputError(f"{source} is not a UTF-8 CSV file: {error}") from None
    if not rows:
        raise InvalidInputError(f"{source} has no rows")
    return names, rows


def _column(source: Path, rows: list[dict[str, str]], name: str) -> list[float]:
    """A numeric column; a bad cell is an error naming its line."""
    values = []
    for row in rows:
        line = row[LINE]
        try:
            value = float(row[name] or "")
        except (TypeError, ValueError):
            raise InvalidInputError(f"{source}, line {line}: column {name} holds {str(row[name])[:40]!r}, not a number") from None
        if not math.isfinite(value):
            raise InvalidInputError(f"{source}, line {line}: column {name} holds {row[name]!r}")
        values.append(value)
    return values


def _title(source: Path) -> str:
    """The file's name and, from its ``.meta.json`` sidecar when present, the mechanism, ε and unit."""
    parts = [source.name]
    sidecar = source.with_name(source.name + ".meta.json")
    try:
        summary = json.loads(sidecar.read_text(encoding="utf-8")) if sidecar.is_file() else {}
    except (OSError, ValueError):
        summary = {}
    if isinstance(summary, dict):
        if isinstance(summary.get("epsilon"), (int, float)):
            parts.append(f"ε = {summary['epsilon']:g}")
        if isinstance(summary.get("privacy_unit"), str):
            parts.append(f"per {summary['privacy_unit']}")
        if isinstance(summary.get("mechanism"), str):
            parts.append(summary["mechanism"])
    return ", ".join(parts)


def plot_output_file(*, source: Path, image: Path, band_label: str) -> Path:
    """Write a PNG of a CSV output of ``pure-dp-mf count`` (columns step,count,std,lower,upper,
    optionally date, and key for a keyed output: then one panel per key, in the file's order, at
    most ``MAX_PANELS``; more is an ``InvalidInputError``). A missing column is an
    ``InvalidInputError`` naming it. Drawing released values is post-processing: the release
    keeps the guarantee it was made with (docs/privacy.md, "Keyed streams")."""
    source = Path(source)
    image = check_writable_file(image, name="image")
    names, rows = _read_output(source)
    groups: dict[str, list[dict[str, str]]] = {}
    if "key" in names:
        for row in rows:
            groups.setdefault(row["key"], []).append(row)
        if len(groups) > MAX_PANELS:
            raise InvalidInputError(
                f"{source} holds {len(groups)} keys: one panel per key is drawn for at most {MAX_PANELS} keys; "
                f"keep at most {MAX_PANELS} keys' rows in the file to plot"
            )
    else:
        groups[""] = rows
    plt = pyplot()
    columns = min(3, len(groups))
    lines = math.ceil(len(groups) / columns)
    figure, axes = plt.subplots(
        lines, columns, figsize=(10 if columns == 1 else 5.2 * columns, 4.8 if lines == 1 else 3.4 * lines)
    )
    panels = list(axes.ravel()) if hasattr(axes, "ravel") else [axes]
    try:
        for number, (axis, (key, group)) in enumerate(zip(panels, groups.items(), strict=False)):
            values = {name: _column(source, group, name) for name in ("step", "count", "lower", "upper")}
            dates = [row["date"] for row in group] if "date" in names else None
            _draw(
                axis,
                steps=values["step"],
                counts=values["count"],
                lower=values["lower"],
                upper=values["upper"],
                dates=dates,
                true_counts=None,
                band_label=band_label,
                legend=number == 0,
            )
            if key:
                axis.set_title(key, fontsize=10)
        for axis in panels[len(groups) :]:
            axis.set_visible(False)
    except BaseException:
        plt.close(figure)
        raise
    figure.suptitle(_title(source), fontsize=11)
    return save_png(figure, image)
