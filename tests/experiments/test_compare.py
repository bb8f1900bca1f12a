"""The committed experiments still run: each in its smoke mode (a step or two, nothing kept)."""

from __future__ import annotations

import shutil

import pytest

from experiments import compare


@pytest.mark.slow
def test_the_comparison_runs_and_reports_what_finished(capsys, tmp_path):
    # the script is the same for every arm; the budget-matched one also runs the ProVer arm it
    # takes its group sizes from
    compare.main(["--smoke", "--runs", str(tmp_path), "--seeds", "0",
                  "--arms", "grpo-budget-matched"])
    table = capsys.readouterr().out
    assert "| prover | 1 |" in table and "| grpo-budget-matched | 1 |" in table
    records = tmp_path / "records"
    assert (records / "sft" / "model" / "model.safetensors").exists()
    for run in ("sft", "prover-seed0", "grpo-budget-matched-seed0"):  # the records are enough
        shutil.rmtree(tmp_path / run)
    compare.main(["--smoke", "--runs", str(tmp_path), "--seeds", "0",
                  "--arms", "grpo-budget-matched"])
    assert capsys.readouterr().out == table and not (tmp_path / "prover-seed0").exists()
    (records / "grpo-budget-matched-seed0" / "metrics.jsonl").unlink()  # as if never run
    compare.main(["--smoke", "--report", "--runs", str(tmp_path), "--seeds", "0", "1"])
    table = capsys.readouterr().out
    assert "| prover | 1 |" in table and "grpo-budget-matched" not in table


def test_the_credit_placement_experiment_runs(capsys):
    from experiments import credit_placement

    credit_placement.main(["--smoke"])
    table = capsys.readouterr().out
    for method in ("prover", "prover-random-judge", "vict", "gigpo"):
        assert f"| {method} |" in table
