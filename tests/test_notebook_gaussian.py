"""Execute notebooks/03_multi_epoch_gaussian.ipynb (small sizes): it runs cleanly, its correlated-noise
DP-SGD beats independent noise, and its stored outputs are those of a fresh execution up to the
numbers (``notebook_outputs``)."""

import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from notebook_outputs import assert_stored_outputs_match

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_multi_epoch_gaussian.ipynb"


def test_notebook_executes(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])
    )
    assert "test accuracy" in outputs and "optimal MF(k=2" in outputs
    accuracy = {name.strip(): float(value) for name, value in re.findall(r"^(.*?) test accuracy ([0-9.]+)$", outputs, re.M)}
    assert accuracy["optimal MF(k=2)"] >= 0.92, accuracy  # the increments of B·z: close to non-private
    assert accuracy["optimal MF(k=2)"] > accuracy["independent noise (DP-SGD)"], accuracy
    assert_stored_outputs_match(nbformat.read(NOTEBOOK, as_version=4), notebook)
