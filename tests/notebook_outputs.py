"""The outputs stored in a notebook against a fresh execution of it.

Notebooks are committed with their outputs, so a reader sees what they print without running
them. A fresh execution must give the same outputs in everything that does not depend on float
rounding or on secure noise: the same cells with output, of the same kinds (stream name, MIME
types), and the same text once every number is masked (numbers may differ between machines and,
for secure noise, between runs; the words, the rows and the table shapes may not)."""

from __future__ import annotations

import re

import nbformat

_NUMBER = re.compile(r"[-+]?(\d[\d_ ]*)?\.?\d+(e[-+]?\d+)?", re.I)


def _masked(text: str) -> str:
    """Numbers as #, then runs of # and of spaces or rules as one (column widths follow the numbers)."""
    text = _NUMBER.sub("#", text)
    text = re.sub(r"#+", "#", text)
    text = re.sub(r"[ \t]+", " ", text)
    return re.sub(r"[─━═-]{2,}", "─", text)


def _shape(cell) -> list[tuple[str, str]]:
    """(kind, masked text) of each output of a code cell; images by MIME type only. Consecutive
    chunks of one stream are one text: the kernel splits a stream by timing, not by content."""
    shape: list[tuple[str, str]] = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            kind = f"stream:{output['name']}"
            if shape and shape[-1][0] == kind:
                shape[-1] = (kind, shape[-1][1] + output["text"])
            else:
                shape.append((kind, output["text"]))
        elif output["output_type"] in ("display_data", "execute_result"):
            data = output.get("data", {})
            shape.append((output["output_type"] + ":" + ",".join(sorted(data)), data.get("text/plain", "")))
        else:
            shape.append((output["output_type"], output.get("ename", "")))
    return [(kind, text if kind == "error" else _masked(text)) for kind, text in shape]


def assert_stored_outputs_match(stored: nbformat.NotebookNode, fresh: nbformat.NotebookNode) -> None:
    """Every code cell of ``stored`` ran, in order, without error, and shows what ``fresh`` shows
    (up to the numbers)."""
    stored_cells = [cell for cell in stored.cells if cell.cell_type == "code"]
    fresh_cells = [cell for cell in fresh.cells if cell.cell_type == "code"]
    assert [cell.source for cell in stored_cells] == [cell.source for cell in fresh_cells]
    assert [cell.execution_count for cell in stored_cells] == list(range(1, len(stored_cells) + 1)), (
        "the stored notebook was not executed top to bottom: re-execute it and commit its outputs"
    )
    for index, (old, new) in enumerate(zip(stored_cells, fresh_cells)):
        assert all(output["output_type"] != "error" for output in old.get("outputs", [])), index
        assert _shape(old) == _shape(new), (index, _shape(old), _shape(new))
