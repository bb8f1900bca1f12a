"""The committed experiments still run: each in its smoke mode (a step or two, nothing kept)."""

from __future__ import annotations

import pytest

from experiments import compare


@pytest.mark.slow
def test_the_comparison_runs(capsys):
    # one arm: the script is the same for every arm, and this one runs both host sides
    compare.main(["--smoke", "--seeds", "0", "--arms", "prover+vict"])
    assert "| prover+vict | 1 |" in capsys.readouterr().out


def test_the_credit_placement_experiment_runs(capsys):
    from experiments import credit_placement

    credit_placement.main(["--smoke"])
    table = capsys.readouterr().out
    for method in ("prover", "prover-random-judge", "vict", "gigpo"):
        assert f"| {method} |" in table
