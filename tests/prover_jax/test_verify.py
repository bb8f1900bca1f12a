"""ProVer's host side: eligibility, selection, Δ against closed form, kernel inputs, diagnostics."""

from __future__ import annotations

import dataclasses
import random

import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.pool import EnvPool
from prover_jax import judges
from prover_jax.credit import prover
from prover_jax.judges.base import Judge, Proposal, segment_error
from prover_jax.rollout import Action, Episode, ScriptedPolicy, run, start
from prover_jax.verify import VerifyConfig, is_eligible, prover_step, select, view
from tests.prover_jax.chain_env import Chain, ChainPolicy, success_probability

P = [0.9, 0.6, 0.9, 0.7, 0.8, 0.95]
TASK = envs.Task("chain", "train", 0)


class FixedJudge(Judge):
    """Proposes one segment; validates it like every judge."""

    def __init__(self, start_turn, end_turn):
        self.segment = (start_turn, end_turn)

    def propose(self, success, failures, rng):
        error = segment_error(success, *self.segment)
        if error:
            return Proposal(None, None, "", error, rounds=1)
        return Proposal(*self.segment, "fixed", None, rounds=1, prompt_tokens=10,
                        completion_tokens=5)


def _episode(rewards_turns):
    return [Episode(TASK, ("o",) * (n + 1), (Action("a"),) * n, (True,) * n, ("s",) * (n + 1),
                    reward, True) for reward, n in rewards_turns]


def test_eligibility_and_selection():
    config = VerifyConfig()
    assert is_eligible([1, 0, 0, 0, 0, 0, 0, 0], config)
    assert is_eligible([1, 1, 1, 0, 0, 0, 0, 0], config)
    assert not is_eligible([1, 1, 1, 1, 0, 0, 0, 0], config)  # mean 0.5 is excluded
    assert not is_eligible([0] * 8, config)
    assert not is_eligible([0.4, 0.2, 0, 0], config)  # graded, no success
    group = _episode([(0.0, 3), (1.0, 5), (1.0, 4), (1.0, 4), (0.0, 2)])
    assert select(group, config) == 2  # fewest turns among successes; ties: lowest row
    with pytest.raises(ValueError, match="0 <= min_success_rate"):
        VerifyConfig(min_success_rate=0.6)


def test_delta_matches_closed_form_within_binomial_error():
    k = 300
    with EnvPool(Chain, 32, num_workers=1) as pool:
        wins = run(pool, ChainPolicy([1.0] * 6), [start(TASK)], random.Random(0))
        losses = run(pool, ChainPolicy([0.0] * 6), [start(TASK)] * 3, random.Random(0))
        result = prover_step(pool, ChainPolicy(P), FixedJudge(1, 2), [wins + losses],
                             random.Random(1), VerifyConfig(continuations=k), num_rows=8)
    (m,) = result.measurements
    pre, post = success_probability(P, 1), success_probability(P, 3)
    assert abs(m.value_pre - pre) <= 4 * np.sqrt(pre * (1 - pre) / k)
    assert abs(m.value_post - post) <= 4 * np.sqrt(post * (1 - post) / k)
    assert result.seg_start.tolist() == [1] + [0] * 7 and result.seg_end[0] == 2
    assert result.delta[0] == pytest.approx(m.delta) and (result.delta[1:] == 0).all()
    d = result.diagnostics
    assert d["eligible_groups"] == d["valid_proposals"] == 1
    assert d["accepted"] == float(m.delta > 0)
    assert sum(v for key, v in d.items() if key.startswith("delta_hist")) == 1
    # every continuation takes at least one step; the group's own rollouts took 6 + 3·1 steps
    assert d["extra_env_steps"] >= 2 * k and d["extra_env_steps_fraction"] == pytest.approx(
        d["extra_env_steps"] / 9)
    assert d["judge_prompt_tokens"] == 10 and d["judge_rounds"] == 1


def test_invalid_proposals_give_no_credit():
    with EnvPool(Chain, 4, num_workers=1) as pool:
        wins = run(pool, ChainPolicy([1.0] * 6), [start(TASK)], random.Random(0))
        losses = run(pool, ChainPolicy([0.0] * 6), [start(TASK)] * 3, random.Random(0))
        for segment in [(4, 5), (2, 1), (0, 4), (-1, 0)]:  # terminal, reversed, too long, <0
            result = prover_step(pool, ChainPolicy(P), FixedJudge(*segment), [wins + losses],
                                 random.Random(1))
            assert not result.measurements and (result.delta == 0).all()
            assert result.proposals[0].error
            assert result.diagnostics["valid_proposals"] == 0
            assert result.diagnostics["extra_env_steps"] == 0


def test_view_is_policy_visible_text():
    env = envs.make("household")
    with EnvPool("household", 2, num_workers=1) as pool:
        (episode,) = run(pool, ScriptedPolicy(0.0), [start(envs.Task("household", "train", 2))],
                         random.Random(0))
    trajectory = view(episode, 7)
    assert trajectory.id == 7 and trajectory.task == env.reset(episode.task)
    assert [t.action for t in trajectory.turns] == [a.text for a in episode.actions]
    assert [t.observation for t in trajectory.turns] == list(episode.observations[:-1])


@pytest.mark.parametrize("judge", ["random", "contrastive"])
def test_offline_judges_end_to_end_on_household(judge):
    tasks = [envs.Task("household", "train", i) for i in range(4)]
    with EnvPool("household", 16, num_workers=2) as pool:
        # Mostly random play: few successes, so some groups are eligible (mean reward < 0.5).
        groups = [run(pool, ScriptedPolicy(0.9), [start(t)] * 8, random.Random(g))
                  for g, t in enumerate(tasks)]
        streams = [random.Random(100 + g) for g in range(4)]  # one per group
        result = prover_step(pool, ScriptedPolicy(0.9), judges.make(judge), groups, streams,
                             VerifyConfig(continuations=4), num_rows=32)
        eligible = [is_eligible([e.reward for e in g], VerifyConfig()) for g in groups]
        # a group with its own stream is judged and continued the same without the others
        last = max(g for g, e in enumerate(eligible) if e)
        alone = prover_step(pool, ScriptedPolicy(0.9), judges.make(judge), [groups[last]],
                            [random.Random(100 + last)], VerifyConfig(continuations=4))
    untimed = lambda proposals: [dataclasses.replace(p, wall_s=0.0) for p in proposals]  # noqa: E731
    assert untimed(alone.proposals) == untimed(result.proposals[last:last + 1])
    assert [dataclasses.replace(m, group=last) for m in alone.measurements] == [
        m for m in result.measurements if m.group == last]
    assert any(eligible) and [p is not None for p in result.proposals] == eligible
    if judge == "contrastive":
        assert len(result.measurements) == sum(eligible)
    lengths = np.array([e.num_turns for g in groups for e in g])
    turn_valid = np.arange(64)[None] < lengths[:, None]
    rewards = np.array([e.reward for g in groups for e in g], np.float32)
    base = np.zeros((32, 64), np.float32)
    out = np.asarray(prover(jnp.asarray(base), jnp.asarray(turn_valid), result.seg_start,
                            result.seg_end, result.delta))
    for m in result.measurements:
        row = 8 * m.group + m.row
        assert rewards[row] == 1.0
        bonus = out[row, m.start_turn: m.end_turn + 1]
        assert np.allclose(bonus, max(m.delta, 0.0))


class WaitingJudge(Judge):
    """A judge that waits on a model: each answer names the draw of its own generator."""

    concurrent = True

    def __init__(self, barrier=None, unreachable_after: int | None = None):
        self.barrier, self.unreachable_after, self.calls = barrier, unreachable_after, 0

    def propose(self, success, failures, rng):
        self.calls += 1
        if self.barrier is not None:
            self.barrier.wait(timeout=30)  # breaks unless all the asks are in flight at once
        if self.unreachable_after is not None and self.calls > self.unreachable_after:
            return Proposal(None, None, "", "connection refused", unreachable=True)
        return Proposal(0, 0, f"{rng.random():.12f}", None)


ASKS = [(view(Episode(envs.Task("chain", "train", i), observations=("start",)), i), [])
        for i in range(6)]


def test_a_judge_that_waits_on_a_model_is_asked_for_every_group_at_once():
    import threading

    from prover_jax.verify import judge_all

    answers = judge_all(WaitingJudge(threading.Barrier(6)), ASKS, random.Random(0))
    expected = judge_all(WaitingJudge(), ASKS, random.Random(0), concurrency=1)
    assert [a.rationale for a in answers] == [a.rationale for a in expected]
    assert len({a.rationale for a in answers}) == 6  # every ask has its own generator


def test_an_unreachable_judge_is_down_for_the_rest_of_the_step():
    from prover_jax.verify import JUDGE_DOWN, judge_all

    judge = WaitingJudge(unreachable_after=1)
    answers = judge_all(judge, ASKS, random.Random(0), concurrency=1)
    assert judge.calls == 2  # one answer, then the first unreachable one; no more calls
    assert answers[0].valid and answers[1].unreachable
    assert [a.error for a in answers[2:]] == [JUDGE_DOWN] * 4
