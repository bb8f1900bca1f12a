"""tpu/colab.ipynb runs top to bottom on CPU (the committed SFT agent, 1 step of ProVer and 1 of
VICT with tiny episodes), from this checkout and installing nothing, so it cannot rot."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tpu" / "colab.ipynb"
SFT_MODEL = ROOT / "experiments" / "results" / "runs" / "sft" / "model"
DIAGNOSTICS = {"prover": ("credit/prover/accepted", "credit/prover/mean_delta"),
               "vict": ("credit/vict/trigger_rate", "credit/vict/sparsity")}


def test_notebook_installs_from_the_repository():
    """The first code cell sets REPO_URL; the next clones it and pip-installs the clone, since
    prover-jax is not published on a package index (none is named)."""
    cells = ["".join(cell["source"]) for cell in json.loads(NOTEBOOK.read_text())["cells"]
             if cell["cell_type"] == "code"]
    assert cells[0].lstrip("# ").startswith("SET THIS") and 'REPO_URL = "' in cells[0]
    assert '"git", "clone"' in cells[1] and 'f"{SOURCE}[tpu]" if TPU else str(SOURCE)' in cells[1]
    text = "".join(cells).lower()
    assert not any(host in text for host in ("pypi", "pythonhosted", "storage.googleapis"))


def test_notebook_quotes_the_sft_agents_recorded_success():
    """The start's greedy success, as the demo's record measured it on the same 30 held-out
    tasks before its first update, in the notebook and in the TPU guide."""
    from prover_jax.plot import read_metrics

    before = read_metrics(ROOT / "experiments" / "results" / "runs" / "demo")[0]
    assert before["step"] == -1 and before["eval/greedy/episodes"] == 30
    quoted = f"{before['eval/greedy/success']:.3f}"
    intro = "".join(json.loads(NOTEBOOK.read_text())["cells"][0]["source"])
    assert f"greedy success of {quoted} on 30 held-out tasks" in " ".join(intro.split())
    guide = " ".join((ROOT / "docs" / "tpu.md").read_text().split())
    assert f"`experiments/results/runs/sft/model`, {quoted} greedy held-out success" in guide


@pytest.mark.slow
def test_notebook_trains_prover_and_vict_from_the_sft_agent(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    run_dir = tmp_path / "run"
    settings = {"STEPS": "1", "GROUPS": "1", "GROUP_SIZE": "2", "EVAL_TASKS": "2", "TINY": "1",
                "RUN_DIR": str(run_dir), "SOURCE": str(ROOT)}
    for name, value in settings.items():
        monkeypatch.setenv(f"PROVER_NOTEBOOK_{name}", value)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(  # importable as is: no pip install
        [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("XLA_FLAGS", "")  # one CPU device, as on a laptop
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code"
               for o in cell.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"prover-jax from {ROOT}" in text and not (tmp_path / "prover-jax").exists()
    assert "SFT agent" in text and "| success |" in text  # the start, and before/after
    for credit, names in DIAGNOSTICS.items():
        config = json.loads((run_dir / credit / "config.json").read_text())
        assert (config["credit"], config["init"]) == (credit, str(SFT_MODEL))
        rows = [json.loads(line)
                for line in (run_dir / credit / "metrics.jsonl").read_text().splitlines()]
        assert len(rows) == 1 and "eval/greedy/success" in rows[0]
        assert all(name in rows[0] for name in names), sorted(rows[0])
        assert f"{credit}: 1 steps" in text
    assert text.count("step 1/1: reward") == 2 and "mean Δ" in text and "actions corrected" in text
    # The methods' comparison, then each run's training, eval, credit and time plots.
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1 + 2 * 4
