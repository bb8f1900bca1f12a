"""tpu/colab.ipynb runs top to bottom on CPU (a tiny model, 2 steps), so it cannot rot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "tpu" / "colab.ipynb"


@pytest.mark.slow
def test_notebook_trains_evaluates_and_plots(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    settings = {"STEPS": "2", "GROUPS": "1", "GROUP_SIZE": "2", "EVAL_TASKS": "2", "TINY": "1",
                "RUN_DIR": str(tmp_path / "run")}
    for name, value in settings.items():
        monkeypatch.setenv(f"PROVER_NOTEBOOK_{name}", value)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(NOTEBOOK.parents[1]), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("XLA_FLAGS", "")  # one CPU device, as on a laptop
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code"
               for o in cell.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "2 steps; last reward" in text and "| success |" in text.replace("`", "")
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2  # the run's plots
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 2
