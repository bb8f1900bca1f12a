"""The rollout engine: fresh starts and prefixes, slot waves, determinism, scripted policy."""

from __future__ import annotations

import random

import pytest

import envs
from envs.pool import EnvPool
from prover_jax.rollout import Action, Episode, ScriptedPolicy, run, start
from tests.prover_jax.chain_env import Chain, ChainPolicy


@pytest.fixture(scope="module")
def household_pool():
    with EnvPool("household", 6, num_workers=2) as pool:
        yield pool


def test_run_matches_a_sequential_rollout_and_prefixes_replay(household_pool):
    tasks = [envs.Task("household", "train", i) for i in range(9)]  # more than the 6 slots
    episodes = run(household_pool, ScriptedPolicy(0.3), [start(t) for t in tasks],
                   random.Random(0))
    env = envs.make("household")
    for episode, task in zip(episodes, tasks):
        assert env.reset(task) == episode.observations[0]
        for t, action in enumerate(episode.actions):
            step = env.step(action.text)
            assert (step.obs, step.info["valid"]) == (episode.observations[t + 1],
                                                       episode.valid[t])
            assert env.snapshot() == episode.states[t + 1]
        assert episode.done and step.reward == episode.reward
    # A prefix continued with the same actions' policy reaches a finished episode that starts
    # with the prefix; with the pure expert it finishes exactly as a fresh expert run would.
    again = run(household_pool, ScriptedPolicy(0.3), [start(t) for t in tasks], random.Random(0))
    assert again == episodes
    expert = run(household_pool, ScriptedPolicy(0.0), [start(tasks[0])], random.Random(1))[0]
    resumed = run(household_pool, ScriptedPolicy(0.0), [expert.prefix(3)], random.Random(2))[0]
    assert resumed == expert


def test_an_episode_with_its_own_stream_plays_the_same_alone(household_pool):
    tasks = [envs.Task("household", "train", i) for i in range(9)]  # waves over 6 slots
    policy = ScriptedPolicy(0.3)
    waves = run(household_pool, policy, [start(t) for t in tasks],
                [random.Random(i) for i in range(9)])
    assert run(household_pool, policy, [start(tasks[8])], [random.Random(8)]) == waves[8:]
    assert run(household_pool, policy, [start(tasks[8])], [random.Random(0)]) != waves[8:]
    with pytest.raises(ValueError, match="2 random streams for 1 items"):
        run(household_pool, policy, [start(tasks[0])], [random.Random(0)] * 2)


def test_max_actions_and_prefix_bounds(household_pool):
    task = envs.Task("household", "train", 0)
    partial = run(household_pool, ScriptedPolicy(0.0), [start(task)], random.Random(0),
                  max_actions=2)[0]
    assert partial.num_turns == 2 and not partial.done
    more = run(household_pool, ScriptedPolicy(0.0), [partial], random.Random(0), max_actions=1)[0]
    assert more.num_turns == 3 and more.prefix(2) == partial
    with pytest.raises(ValueError, match="outside"):
        partial.prefix(5)
    with pytest.raises(ValueError, match="epsilon"):
        ScriptedPolicy(1.5)


def test_chain_policy_success_rate():
    p = [0.9, 0.8, 0.9, 0.7, 0.9, 0.95]
    with EnvPool(Chain, 16, num_workers=1) as pool:
        episodes = run(pool, ChainPolicy(p), [start(envs.Task("chain", "train", 0))] * 400,
                       random.Random(0))
    rate = sum(e.reward for e in episodes) / len(episodes)
    exact = 0.9 * 0.8 * 0.9 * 0.7 * 0.9 * 0.95
    assert abs(rate - exact) < 4 * (exact * (1 - exact) / 400) ** 0.5
    assert all(isinstance(a, Action) for e in episodes for a in e.actions)
    assert Episode(envs.Task("chain", "train", 0)).num_turns == 0
