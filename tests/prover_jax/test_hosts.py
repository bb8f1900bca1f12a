"""Credit methods' host sides through the registry, on scripted household rollouts: each
produces exactly the inputs its kernel declares, placed on the rows of their episodes."""

from __future__ import annotations

import random

import numpy as np
import pytest

import envs
from envs.pool import EnvPool
from prover_jax import credit
from prover_jax.batch import pack
from prover_jax.credit.hosts import HostContext, HostOptions
from prover_jax.credit_report import turn_structure
from prover_jax.rollout import ScriptedPolicy, run, start
from prover_jax.train import trainable_methods

GROUPS, GROUP_SIZE = 2, 4


@pytest.fixture(scope="module")
def step():
    """One step's groups (the expert with 50% random actions), packed with a padding row."""
    env = envs.make("household")
    policy = ScriptedPolicy(0.5)
    with EnvPool("household", 8, num_workers=1) as pool:
        rng = random.Random(1)
        starts = [start(t) for t in env.tasks("train")[:GROUPS] for _ in range(GROUP_SIZE)]
        episodes = run(pool, policy, starts, rng, max_actions=10)
        groups = [episodes[g * GROUP_SIZE:(g + 1) * GROUP_SIZE] for g in range(GROUPS)]
        # one success in four: every group is eligible for ProVer and SPO
        assert all(sorted(e.reward for e in g) == [0, 0, 0, 1] for g in groups)
        batch = pack([[turn_structure(e) for e in g] for g in groups], row_multiple=3)
        rows, turns = batch.turn_valid.shape
        yield batch, HostContext(env, groups, pool, policy, rng, rows, turns)


def test_the_trainer_runs_every_group_method_and_says_why_not_the_others():
    assert set(trainable_methods()) == {
        "grpo", "rloo", "prover", "gigpo", "spo-chain", "criticsearch", "vict", "rloo+vict",
        "prover+vict", "gigpo+vict", "spo-chain+vict", "criticsearch+vict"}
    for name in ("spo-tree", "budget-matched-grpo", "spo-tree+vict"):
        assert not credit.registry.trainable(credit.get(name))


@pytest.mark.parametrize("name", ["prover", "gigpo", "spo-chain", "vict", "prover+vict",
                                  "gigpo+vict"])
def test_host_sides_feed_their_kernels(step, name):
    batch, ctx = step
    method = credit.get(name)
    inputs, logs = method.host(HostOptions(continuations=2))(ctx)
    assert set(inputs) == set(method.inputs)
    if "prover" in name:  # each group's success was judged and its segment verified
        assert (inputs["seg_end"] > 0).sum() == GROUPS and logs["prover/eligible_groups"] == 2
    result = credit.compute(name, batch, inputs)  # the registry checks every shape
    assert np.isfinite(np.asarray(result.tokens)).all()
    assert all(isinstance(v, float) for v in logs.values())
    padding = np.asarray(batch.group_ids) < 0
    for value in inputs.values():
        if value.shape[0] == batch.num_rows:
            # nothing lands on the padding row: zeros, or -1 for ids
            assert np.isin(np.asarray(value)[padding], (0, -1)).all()


def test_gigpo_anchors_join_equal_observations_within_a_group(step):
    _, ctx = step
    anchors = credit.get("gigpo").host(HostOptions())(ctx)[0]["anchor_ids"]
    seen = {}
    for row, g, _, episode in ctx.rows():
        for turn in range(episode.num_turns):
            key = (g, episode.observations[turn])
            assert seen.setdefault(key, anchors[row, turn]) == anchors[row, turn]
        assert (anchors[row, episode.num_turns:] == -1).all()
    assert len(set(seen.values())) == len(seen)  # different states, different anchors


def test_a_method_missing_what_it_needs_fails_at_start_up(monkeypatch):
    monkeypatch.delenv("PROVER_JUDGE_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="base_url"):
        credit.get("criticsearch").host(HostOptions())
    with pytest.raises(ValueError, match="base_url"):
        credit.get("prover+vict").host(HostOptions(judge="agentic"))


def test_spo_chain_values_only_successful_rows(step):
    _, ctx = step
    inputs, logs = credit.get("spo-chain").host(HostOptions(continuations=2))(ctx)
    successful = np.zeros(ctx.num_rows, bool)
    for row, _, _, episode in ctx.rows():
        successful[row] = episode.reward >= 1.0
    np.testing.assert_array_equal(inputs["spo_applies"], successful)
    assert logs["spo/applied"] == successful.sum()
    assert not inputs["boundary_values"][~successful].any()
