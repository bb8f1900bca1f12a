"""The side-by-side credit report over real rollouts and real host sides."""

from __future__ import annotations

import numpy as np

import envs
from prover_jax import credit_report


def test_the_report_shows_every_method_on_every_turn(capsys, monkeypatch):
    monkeypatch.delenv("PROVER_JUDGE_BASE_URL", raising=False)
    methods = credit_report.default_methods(envs.make("household"))
    assert "criticsearch" not in methods and {"grpo", "prover", "vict", "prover+vict"} <= set(
        methods)
    assert "oracle-progress" not in methods and "oracle-progress+vict" not in methods
    assert "oracle-progress+vict" in credit_report.default_methods(envs.make("household-pivot"))
    seen = {}

    def keep(ctx, batch, names, options):
        seen["ctx"], seen["table"] = ctx, original(ctx, batch, names, options)
        return seen["table"]

    original = credit_report.advantages
    monkeypatch.setattr(credit_report, "advantages", keep)
    credit_report.main(["--continuations", "2"])
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("turn  action"))
    assert header.split()[2:] == methods
    ctx, table = seen["ctx"], seen["table"]
    for row, g, _, episode in ctx.rows():
        rewards = [e.reward for e in ctx.groups[g]]
        # GRPO: the reward minus the group's mean, on every turn of the episode
        np.testing.assert_allclose(table["grpo"][row, : episode.num_turns],
                                   episode.reward - np.mean(rewards), atol=1e-6)
        assert f"group {g}  member" in out and episode.actions[0].text[:32] in out
