"""Execute notebooks/03_multi_epoch_gaussian.ipynb (small sizes) and check that it runs cleanly."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_multi_epoch_gaussian.ipynb"


def test_notebook_executes(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])
    )
    assert "test accuracy" in outputs and "optimal MF(k=2" in outputs
