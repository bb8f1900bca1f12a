"""A run directory's plots: drawn from metrics.jsonl, a figure per credit method, constant
series left out."""

from __future__ import annotations

import json

import pytest

from prover_jax.plot import main, panel_of, plot_run, read_metrics


def test_plots_are_drawn_from_the_metrics(tmp_path):
    rows = [{"step": s, "reward/mean": s / 4, "success/rate": s / 8, "learner/kl": 0.0,
             "learner/entropy": 2.0 - s / 10, "credit/prover/acceptance_rate": s / 3,
             "credit/vict/sparsity": 0.25, "time/rollout_s": 1.0 + s} for s in range(4)]
    redone = {**rows[2], "reward/mean": -1.0}  # a step logged twice: the later line counts
    lines = [json.dumps(r) for r in [*rows, redone]]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert read_metrics(tmp_path) == [rows[0], rows[1], redone, rows[3]]
    written = plot_run(tmp_path)
    # one figure per credit method; VICT's only diagnostic is constant, so it has none
    assert [p.name for p in written] == ["training.png", "time.png", "credit-prover.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_a_folder_without_metrics_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path)])
    assert exit_.value.code == 2 and "no metrics" in capsys.readouterr().err


def test_a_histogram_and_a_count_by_reason_each_share_a_panel():
    assert panel_of("delta_hist[0,0.25)") == ("delta_hist", "[0,0.25)")
    assert panel_of("abstain/near-tie") == ("abstain", "near-tie")
    assert panel_of("abstained") == ("abstained", "")
