"""Credit methods' host sides through the registry, on scripted household rollouts: each
produces exactly the inputs its kernel declares, placed on the rows of their episodes."""

from __future__ import annotations

import collections
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
from prover_jax.run_settings import trainable_methods
from prover_jax.spo_rollouts import spo_trees

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


def host_side(name: str, options: HostOptions | None = None):
    method = credit.get(name)
    return method.host(options or HostOptions(), method.config_type())


def test_the_trainer_runs_every_registered_method():
    assert set(trainable_methods()) == set(credit.names())
    assert "spo-tree+vict" in credit.names() and "budget-matched-grpo" in credit.names()


@pytest.mark.parametrize("name", ["prover", "gigpo", "spo-chain", "vict", "prover+vict",
                                  "gigpo+vict"])
def test_host_sides_feed_their_kernels(step, name):
    batch, ctx = step
    method = credit.get(name)
    inputs, logs, records = host_side(name, HostOptions(continuations=2))(ctx)
    assert set(inputs) == set(method.inputs)
    if "prover" in name:  # each group's success was judged and its segment verified
        assert logs["prover/eligible_groups"] == logs["prover/valid_proposals"] == GROUPS
        proposals = records["prover_proposals"]
        assert [p["group"] for p in proposals] == list(range(GROUPS))
        for p in proposals:  # each names the row, segment and measured delta the kernel got
            row = p["row"]
            assert (p["start_turn"], p["end_turn"]) == (inputs["seg_start"][row],
                                                        inputs["seg_end"][row])
            assert p["delta"] == pytest.approx(inputs["delta"][row])
            assert len(p["actions"]) == p["end_turn"] - p["start_turn"] + 1
    result = credit.compute(name, batch, inputs)  # the registry checks every shape
    if name == "vict":  # a proof record for exactly the turns VICT moved off the GRPO base
        base = np.asarray(credit.compute("grpo", batch).per_turn)
        moved = np.abs(np.asarray(result.per_turn) - base) > 1e-7
        totals = collections.defaultdict(float)  # a turn's corrections may cancel
        for r in records["vict_proofs"]:
            totals[r["group"] * GROUP_SIZE + r["rollout"], r["turn"]] += r["correction"]
        proved = {turn for turn, total in totals.items() if abs(total) > 1e-6}
        assert proved and proved == set(zip(*map(list, np.nonzero(moved))))
        turns = sum(e.num_turns for g in ctx.groups for e in g)
        assert logs["vict/sparsity"] == pytest.approx(len(proved) / turns)
        assert logs["vict/trigger_rate"] == pytest.approx(
            len({row for row, _ in proved}) / (GROUPS * GROUP_SIZE))
    assert np.isfinite(np.asarray(result.tokens)).all()
    assert all(isinstance(v, float) for v in logs.values())
    padding = np.asarray(batch.group_ids) < 0
    for value in inputs.values():
        if value.shape[0] == batch.num_rows:
            # nothing lands on the padding row: zeros, or -1 for ids
            assert np.isin(np.asarray(value)[padding], (0, -1)).all()


def test_gigpo_anchors_join_equal_observations_within_a_group(step):
    _, ctx = step
    anchors = host_side("gigpo")(ctx).inputs["anchor_ids"]
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
        host_side("criticsearch")
    with pytest.raises(ValueError, match="base_url"):
        host_side("prover+vict", HostOptions(judge="agentic"))


def test_spo_chain_values_only_successful_rows(step):
    _, ctx = step
    inputs, logs, _ = host_side("spo-chain", HostOptions(continuations=2))(ctx)
    successful = np.zeros(ctx.num_rows, bool)
    for row, _, _, episode in ctx.rows():
        successful[row] = episode.reward >= 1.0
    np.testing.assert_array_equal(inputs["spo_applies"], successful)
    assert logs["spo/applied"] == successful.sum()
    assert not inputs["boundary_values"][~successful].any()


def test_spo_tree_trains_each_branch_once_under_its_cap():
    env = envs.make("household")
    tasks = env.tasks("train")[:GROUPS]
    with EnvPool("household", 16, num_workers=1) as pool:
        trees = spo_trees(pool, ScriptedPolicy(0.5), tasks, random.Random(0), branch_actions=4,
                          max_actions=10)
        groups = [list(tree.episodes) for tree in trees]
        batch = pack([[turn_structure(e) for e in g] for g in groups])
        ctx = HostContext(env, groups, pool, None, random.Random(0), *batch.turn_valid.shape,
                          trees=trees)
        inputs, logs, _ = host_side("spo-tree")(ctx)
    assert all(e.num_turns <= 10 for g in groups for e in g)  # 4 + 4 + at most 2
    assert logs["spo/tree_leaves"] == np.mean([len(g) for g in groups])
    method, settings = credit.get("spo-tree"), credit.get("spo-tree").config_type()
    unsure = np.where(np.asarray(batch.loss_mask), np.log(0.5), 0.0).astype(np.float32)
    dropped = np.asarray(method.dropped_tokens(batch, inputs, settings, unsure))
    trained = np.asarray(batch.loss_mask) & ~dropped
    trained_turns = [0] * GROUPS
    for row, g, _, episode in ctx.rows():  # tokens of a turn sit at its turn id
        kept = {int(t) for t in np.asarray(batch.turn_ids)[row][trained[row]]}
        owned = {t for t in range(episode.num_turns) if inputs["turn_nodes"][row, t] >= 0}
        assert kept == owned
        trained_turns[g] += len(kept)
    for g, leaves in enumerate(groups):  # the first branches' 4 + 4 turns are trained once
        assert trained_turns[g] <= sum(e.num_turns for e in leaves) - 4 * (len(leaves) - 2)
    sure = np.where(np.asarray(batch.loss_mask), 0.0, 0.0).astype(np.float32)  # p = 1
    assert np.asarray(method.dropped_tokens(batch, inputs, settings, sure))[
        np.asarray(batch.loss_mask)].all()
    assert np.isfinite(np.asarray(credit.compute("spo-tree", batch, inputs, settings).tokens)).all()
