"""The positive controls and the verifier's judge on household-pivot's rollouts: the oracle
judge proposes the environment's pivot, the verifier's judge a segment of VICT's witnesses, the
dense oracle credit feeds its kernel the true progress, and judges that read states are the
only ones given them."""

from __future__ import annotations

import random

import numpy as np
import pytest

import envs
from envs.pool import EnvPool
from prover_jax import credit, judges
from prover_jax.batch import pack
from prover_jax.credit.hosts import HostContext, HostOptions
from prover_jax.credit_report import turn_structure
from prover_jax.judges.base import Judge, no_credit
from prover_jax.rollout import ScriptedPolicy, run, start
from prover_jax.verify import VerifyConfig, prover_step, view
from vict_jax.judge import core_witness_turns

NAME = "household-pivot"
GROUPS, GROUP_SIZE = 6, 8


@pytest.fixture(scope="module")
def rollouts():
    """Groups of 8 of the clue-blind demonstrator, and the pool that ran them."""
    env = envs.make(NAME)
    with EnvPool(NAME, GROUPS * GROUP_SIZE, num_workers=2) as pool:
        starts = [start(t) for t in env.tasks("train")[:GROUPS] for _ in range(GROUP_SIZE)]
        episodes = run(pool, ScriptedPolicy(0.0), starts, random.Random(0))
        yield env, pool, [episodes[g * GROUP_SIZE:(g + 1) * GROUP_SIZE] for g in range(GROUPS)]


class Recording(Judge):
    """Keeps the views it is shown; proposes nothing."""

    def __init__(self, reads_states: bool):
        self.reads_states = reads_states
        self.seen = []

    def propose(self, success, failures, rng):
        self.seen += [success, *failures]
        return no_credit("recording")


def test_only_a_judge_that_reads_states_is_given_them(rollouts):
    env, pool, groups = rollouts
    for reads in (False, True):
        judge = Recording(reads)
        prover_step(pool, ScriptedPolicy(0.0), judge, groups, random.Random(0), env=env)
        assert judge.seen
        for trajectory in judge.seen:
            assert (trajectory.hidden is not None) is reads
            if reads:
                assert trajectory.hidden.env is env
                assert trajectory.hidden.task.env == NAME
                assert len(trajectory.hidden.states) == len(trajectory.turns) + 1
    with pytest.raises(ValueError, match="needs env"):
        prover_step(pool, ScriptedPolicy(0.0), Recording(True), groups, random.Random(0))


def test_the_oracle_judge_proposes_the_take_of_the_goal_object(rollouts):
    env, pool, groups = rollouts
    result = prover_step(pool, ScriptedPolicy(0.0), judges.make("oracle"), groups,
                         random.Random(0), VerifyConfig(continuations=4), env=env)
    judged = [(g, p) for g, p in enumerate(result.proposals) if p is not None]
    assert judged and all(p.valid for _, p in judged)
    for g, proposal in judged:
        success = groups[g][min((i for i, e in enumerate(groups[g]) if e.reward == 1),
                                key=lambda i: groups[g][i].num_turns)]
        assert (proposal.start_turn, proposal.end_turn) == env.oracle_pivot(success.states)
        goal = env.verifier(success.task).world.objects[
            env.verifier(success.task).world.goal_object]
        assert success.actions[proposal.start_turn].text.startswith(f"take {goal} from")
    # after the take the demonstrator always delivers; before it, it may choose another one
    assert all(m.value_post == 1.0 for m in result.measurements)
    assert np.mean([m.delta for m in result.measurements]) > 0


def test_the_oracle_judge_refuses_an_environment_without_a_pivot_oracle():
    with EnvPool("household-small", 2, num_workers=1) as pool:
        episodes = run(pool, ScriptedPolicy(0.0), [start(envs.Task("household-small", "train",
                                                                    0))] * 2, random.Random(0))
        with pytest.raises(ValueError, match="oracle judge needs an environment with a pivot"):
            prover_step(pool, ScriptedPolicy(0.0), judges.make("oracle"), [episodes],
                        random.Random(0), env=envs.make("household-small"))


def test_the_verifier_judge_spans_the_most_witnesses_of_the_success_core(rollouts):
    env, _, groups = rollouts
    judge = judges.make("verifier")
    holds_pivot = proposed = 0
    for group in groups:
        for i, episode in enumerate(group):
            if episode.reward != 1:
                continue
            trajectory = view(episode, i, env)
            proposal = judge.propose(trajectory, [], random.Random(0))
            witnesses, why = core_witness_turns(
                env.verifier(episode.task), episode.states, [a.text for a in episode.actions],
                episode.valid, episode.reward)
            assert why is None and witnesses
            assert proposal.valid, proposal.error
            inside = [t for t in witnesses if proposal.start_turn <= t <= proposal.end_turn]
            assert inside and proposal.end_turn < episode.num_turns - 1
            for l in range(episode.num_turns - 1):  # no valid window holds more witnesses
                for r in range(l, min(l + 4, episode.num_turns - 1)):
                    held = sum(l <= t <= r for t in witnesses if t < episode.num_turns - 1)
                    assert held <= len(inside)
            pivot, _ = env.oracle_pivot(episode.states)
            holds_pivot += proposal.start_turn <= pivot <= proposal.end_turn
            proposed += 1
    assert proposed >= GROUPS and holds_pivot == proposed


def test_the_dense_oracle_credit_adds_the_true_progress_to_each_turn(rollouts):
    env, pool, groups = rollouts
    batch = pack([[turn_structure(e) for e in g] for g in groups], row_multiple=8)
    rows, turns = batch.turn_valid.shape
    method = credit.get("oracle-progress")
    ctx = HostContext(env, groups, pool, None, random.Random(0), rows, turns)
    inputs, logs, _ = method.host(HostOptions(), method.config_type())(ctx)
    gain = inputs["progress_gain"]
    assert gain.shape == (rows, turns) and logs["oracle_progress/mean_abs_gain"] > 0
    for row, _, _, episode in ctx.rows():
        progress = [env.oracle_progress(s) for s in episode.states]
        np.testing.assert_allclose(gain[row, :episode.num_turns], np.diff(progress), atol=1e-6)
        if episode.reward == 1:
            assert gain[row].sum() == pytest.approx(1.0, abs=1e-5)
        assert not gain[row, episode.num_turns:].any()
    assert not gain[len(list(ctx.rows())):].any()
    out = credit.compute("oracle-progress", batch, inputs)
    outcome = np.asarray(credit.grpo(batch.rewards, batch.group_ids))
    expected = np.where(batch.turn_valid, outcome[:, None] + gain, 0.0)
    np.testing.assert_allclose(np.asarray(out.per_turn), expected, atol=1e-6)
    with EnvPool("household-small", 2, num_workers=1) as small_pool:
        small = HostContext(envs.make("household-small"), groups[:1], small_pool, None,
                            random.Random(0), rows, turns)
        with pytest.raises(ValueError, match="oracle-progress needs an environment"):
            method.host(HostOptions(), method.config_type())(small)


def test_a_run_refuses_a_positive_control_its_environment_has_no_oracle_for():
    from prover_jax.trainer import check_oracles

    small, pivot = envs.make("household-small"), envs.make(NAME)
    for credit_name in ("oracle-progress", "oracle-progress+vict"):
        with pytest.raises(ValueError, match="needs an environment with a progress oracle"):
            check_oracles(small, credit_name, HostOptions())
        check_oracles(pivot, credit_name, HostOptions())
    with pytest.raises(ValueError, match="oracle judge needs an environment with a pivot"):
        check_oracles(small, "prover+vict", HostOptions(judge="oracle"))
    for judge in ("oracle", "verifier", "contrastive"):
        check_oracles(pivot, "prover", HostOptions(judge=judge))
    check_oracles(small, "prover", HostOptions(judge="verifier"))
    check_oracles(small, "grpo", HostOptions(judge="oracle"))  # no judge in the run
    check_oracles(pivot, "grpo", HostOptions(), probe=True)
    with pytest.raises(ValueError, match="probe_tasks needs an environment with a choice"):
        check_oracles(small, "grpo", HostOptions(), probe=True)
