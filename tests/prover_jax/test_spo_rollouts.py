"""SPO host parts: chain boundary values against closed form, tree growth and packing."""

from __future__ import annotations

import json
import random

import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.pool import EnvPool
from prover_jax.credit import spo_tree
from prover_jax.rollout import ScriptedPolicy, run, start
from prover_jax.spo_rollouts import (
    budget_matched_schedule,
    budget_schedule_of_run,
    spo_chain_values,
    spo_tree_inputs,
    spo_trees,
)
from prover_jax.verify import VerifyConfig
from tests.prover_jax.chain_env import Chain, ChainPolicy, success_probability

P = [0.9, 0.6, 0.9, 0.7, 0.8, 0.95]
TASK = envs.Task("chain", "train", 0)


def _chain_group(pool):
    always, never = ChainPolicy([1.0] * 6), ChainPolicy([0.0] * 6)
    wins = run(pool, always, [start(TASK)], random.Random(0))
    losses = run(pool, never, [start(TASK)] * 3, random.Random(0))
    return wins + losses


def test_spo_chain_boundary_values_match_closed_form():
    k = 400
    with EnvPool(Chain, 32, num_workers=1) as pool:
        group = _chain_group(pool)
        values, applies = spo_chain_values(pool, ChainPolicy(P), [group], random.Random(1),
                                           num_turns=8, num_rows=6,
                                           config=VerifyConfig(continuations=k))
    assert applies.tolist() == [True, False, False, False, False, False]
    # 6 turns in three segments of 2: V_1 is measured before turn 2, V_2 before turn 4.
    for column, position in ((0, 2), (1, 4)):
        exact = success_probability(P, position)
        assert abs(values[0, column] - exact) <= 4 * np.sqrt(exact * (1 - exact) / k)
    assert (values[1:] == 0).all()


def test_spo_trees_are_2_2_2_and_pack_without_duplicated_prefixes():
    tasks = [envs.Task("household", "train", i) for i in range(2)]
    with EnvPool("household", 16, num_workers=2) as pool:
        trees = spo_trees(pool, ScriptedPolicy(0.9), tasks, random.Random(0), branch_actions=4)
        early = spo_trees(pool, ScriptedPolicy(0.0), tasks, random.Random(0), branch_actions=4)
    for tree in early:  # the expert finishes within 8 actions: those nodes stop branching
        assert len(tree.parents) < 15 and all(e.done for e in tree.episodes)
        assert len(tree.episodes) == (tree.leaf_rows >= 0).sum()
        assert spo_tree_inputs([tree], 8, 64)["tree_ids"].tolist().count(0) == len(tree.episodes)
    for tree in trees:
        assert tree.parents.tolist() == [-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
        assert len(tree.episodes) == 8 and all(e.done for e in tree.episodes)
        # Leaves below one internal node share its prefix exactly.
        assert tree.episodes[0].prefix(8) == tree.episodes[1].prefix(8)
        assert tree.episodes[0].prefix(4) == tree.episodes[3].prefix(4)
    inputs = spo_tree_inputs(trees, num_rows=16, num_turns=64)
    for g, tree in enumerate(trees):
        rows = inputs["turn_nodes"][8 * g: 8 * g + 8]
        trained = (rows >= 0).sum()
        # Every branch's turns appear once: 2·4 + 4·4 + the 8 leaves' own tails.
        tails = sum(e.num_turns - 8 for e in tree.episodes)
        assert trained == 2 * 4 + 4 * 4 + tails
        assert set(rows[0, :4].tolist()) == {1} and set(rows[0, 4:8].tolist()) == {3}
        assert (rows[1, :8] == -1).all()  # the prefix is trained in row 0
    turn_valid = np.zeros((16, 64), bool)
    for row, episode in enumerate(e for t in trees for e in t.episodes):
        turn_valid[row, : episode.num_turns] = True
    advantages = spo_tree(jnp.zeros(16), jnp.asarray(turn_valid), inputs["tree_ids"],
                          inputs["turn_nodes"], inputs["tree_parents"],
                          inputs["tree_leaf_rewards"])
    assert np.isfinite(np.asarray(advantages)).all()


def test_budget_matched_schedule():
    assert budget_matched_schedule([0.1, 0.1, 0.5, 0.5, 0.5], group_size=8, phase_steps=2) == [
        (0, 9), (2, 12)]  # 8 × 1.1 = 8.8 → 9; 8 × 1.5 = 12; the last phase repeats 12
    with pytest.raises(ValueError):
        budget_matched_schedule([0.1], group_size=0, phase_steps=1)


def test_a_budget_schedule_from_a_prover_runs_metrics(tmp_path):
    key = "credit/prover/extra_env_steps_fraction"
    rows = [{"step": s, key: f} for s, f in enumerate([0.1, 0.1, 0.5, 0.5, 0.5])]
    before = {"step": -1, "eval/greedy/success": 0.2}  # an evaluation before training
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n"
                                                    for r in (before, *rows)))
    assert budget_schedule_of_run(tmp_path, 8, phase_steps=2) == budget_matched_schedule(
        [0.1, 0.1, 0.5, 0.5, 0.5], 8, 2)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "reward/mean": 0.5}) + "\n")
    with pytest.raises(ValueError, match="no credit/prover/extra_env_steps_fraction"):
        budget_schedule_of_run(tmp_path, 8)
