"""The environment protocol, checked on every registered environment.

Snapshots replay bit for bit (also after pickling, in a fresh instance), bad actions never
raise, the expert finishes episodes it did not start, and every verifier reproduces its
environment's reward on expert, random and mutated terminal states.
"""

from __future__ import annotations

import pickle
import random

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import envs
from envs.verifier import check_atoms, reconstruction_error

NAMES = envs.names(served=False)  # tests/envs/test_agentgym.py runs AgentGym's clients
# ALFWorld's engine translates each new game's PDDL for most of a second, and its planner (the
# expert) takes up to seconds in household-sized rooms; alfworld-small runs the same code in
# small rooms, so the tests that play many episodes with the expert leave alfworld out
QUICK = [name for name in NAMES if name != "alfworld"]
VERIFIED = QUICK  # every environment has a VICT verifier
EXPERT_TASKS = {"alfworld-small": 4}
GARBAGE = ["", "   ", "asdf", "go to", "take", "put nothing in/on nowhere 9", "search[",
           "click[]", "<answer>", "ünïcødé ☃ " * 3, "x" * 10_000, "\n\n\t"]


def _play(env: envs.Env, rng: random.Random, n: int, expert_rate: float = 0.0) -> list:
    """Up to ``n`` random (or expert) actions; returns (action, step) pairs."""
    out = []
    for _ in range(n):
        action = env.expert_action() if rng.random() < expert_rate else env.random_action(rng)
        step = env.step(action)
        out.append((action, step))
        if step.done:
            break
    return out


def _task(env: envs.Env, split_draw: int, index_draw: int) -> envs.Task:
    split = env.splits[split_draw % len(env.splits)]
    return envs.Task(env.name, split, index_draw % env.num_tasks(split))


@pytest.mark.parametrize("name", QUICK)
@settings(max_examples=15)
@given(split=st.integers(0, 3), index=st.integers(0, 10**6), seed=st.integers(0, 2**32),
       prefix=st.integers(0, 12), expert_rate=st.sampled_from([0.0, 0.5]))
def test_snapshot_restore_replays(name, split, index, seed, prefix, expert_rate):
    env = envs.make(name)
    env.reset(_task(env, split, index))
    rng = random.Random(seed)
    before = _play(env, rng, prefix, expert_rate)
    if before and before[-1][1].done:
        return
    state = env.snapshot()
    revived = pickle.loads(pickle.dumps(state))
    assert revived == state and hash(revived) == hash(state)
    fresh = envs.make(name)
    fresh.restore(revived)
    assert fresh.expert_action() == env.expert_action()
    assert fresh.random_action(random.Random(seed)) == env.random_action(random.Random(seed))
    after = _play(env, rng, 15, expert_rate)
    assert [fresh.step(action) for action, _ in after] == [step for _, step in after]
    env.restore(state)  # the same instance, after it moved on
    assert [env.step(action) for action, _ in after] == [step for _, step in after]


@pytest.mark.parametrize("name", [n for n in NAMES if not n.startswith("tau-")])
def test_bad_actions_get_feedback_not_exceptions(name):
    """(In tau environments any text is a valid message to the user; see test_tau.py.)"""
    env = envs.make(name)
    env.reset(env.tasks(env.splits[0])[0])
    for action in GARBAGE:
        state = env.snapshot()
        step = env.step(action)
        assert isinstance(step.obs, str) and step.obs
        assert step.info["valid"] is False, action[:40]
        assert step.reward == 0.0
        if step.done:
            break
        env.restore(state)


@pytest.mark.parametrize("name", NAMES)
def test_misuse_raises_clear_errors(name):
    env = envs.make(name)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")
    with pytest.raises(ValueError, match="out of range"):
        env.reset(envs.Task(name, env.splits[0], 10**9))
    with pytest.raises(ValueError, match="belongs to"):
        env.reset(envs.Task("no-such-env", env.splits[0], 0))
    with pytest.raises(ValueError, match="unknown split"):
        env.num_tasks("no-such-split")
    env.reset(env.tasks(env.splits[0])[0])
    while not env.step(env.expert_action()).done:
        pass
    with pytest.raises(RuntimeError, match="over"):
        env.step("look")


@pytest.mark.parametrize("name", QUICK)
def test_expert_finishes_episodes_started_at_random(name):
    env, rng = envs.make(name), random.Random(0)
    solved = total = 0
    for split in env.splits:
        for task in env.tasks(split)[:EXPERT_TASKS.get(name, 15)]:
            env.reset(task)
            steps = _play(env, rng, 3)
            if steps and steps[-1][1].done:
                continue
            while True:
                step = env.step(env.expert_action())
                if step.done:
                    break
            solved += step.reward == 1.0
            total += 1
    assert solved >= 0.99 * total


@pytest.mark.parametrize("name", VERIFIED)
def test_verifier_reconstructs_reward(name):
    """|F(z̄) - V| = 0 on expert, random and mutated terminal states; atoms are ordered."""
    env, rng = envs.make(name), random.Random(1)
    mutated_scores = []
    for split in env.splits:
        for task in env.tasks(split)[:EXPERT_TASKS.get(name, 12)]:
            for expert_rate in (1.0, 0.0, 0.7):
                env.reset(task)
                steps = _play(env, rng, env.max_turns, expert_rate)
                state = env.snapshot()
                verifier = env.verifier()
                check_atoms(verifier.atoms)
                if steps[-1][1].done:
                    assert verifier.score(state) == steps[-1][1].reward
                assert reconstruction_error(verifier, state) == 0.0
                for mutation in verifier.mutations(state):
                    assert reconstruction_error(verifier, mutation.state) == 0.0, mutation.name
                    mutated_scores.append(verifier.score(mutation.state) < verifier.score(state))
    assert any(mutated_scores), "no mutation ever lowered a score"


def test_replay_continues_a_prefix_and_restarts_otherwise():
    assert envs.replay_suffix(("a",), ("a", "b", "c")) == ("b", "c")
    assert envs.replay_suffix((), ("a",)) == ("a",)
    assert envs.replay_suffix(("a", "x"), ("a", "b")) is None
    assert envs.replay_suffix(("a", "b"), ("a",)) is None
