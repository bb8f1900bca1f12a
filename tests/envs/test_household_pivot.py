"""household-pivot: look-alikes told apart by a clue shown once, an irreversible wrong choice,
a clue-blind demonstrator that chooses at random, and the oracles of the positive controls."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import random

import pytest

import envs
from envs.household import env as hh
from envs.household.expert import blind_action
from envs.household.world import APPLIANCE, LOOKALIKES, PIVOT_TASK_TYPES
from envs.verifier import Status
from vict_jax.trace import proof_graph

NAME = "household-pivot"


@pytest.fixture(scope="module")
def env():
    return envs.make(NAME)


def _lookalikes(world) -> list[int]:
    return [o for o, t in enumerate(world.object_types) if t == world.goal_type]


def test_three_lookalikes_in_their_own_places_and_a_clue_naming_one(env):
    kinds = collections.Counter()
    for task in env.tasks("train")[:200] + env.tasks("eval")[:50]:
        world = hh.world_of(task)
        kinds[world.task_type] += 1
        lookalikes = _lookalikes(world)
        places = [world.receptacle_types[world.start[o]] for o in lookalikes]
        assert len(lookalikes) == LOOKALIKES and len(set(places)) == LOOKALIKES
        assert not set(places) & {world.target_type, APPLIANCE.get(world.task_type),
                                  "fridge", "garbagecan"}
        assert world.goal_object in lookalikes
        assert world.goal_objects == 1 << world.goal_object
        assert world.decoys == sum(1 << o for o in lookalikes if o != world.goal_object)
        assert world.clue.endswith(f" the {world.receptacles[world.start[world.goal_object]]}.")
    assert set(kinds) == set(PIVOT_TASK_TYPES)


@pytest.mark.parametrize("shown", ["once", "always"])
def test_the_clue_is_shown_as_asked_and_every_observation_lists_the_admissible_actions(shown):
    """By default the clue is in the first observation alone; with ``clue="always"`` every
    observation repeats it after the task."""
    env = envs.make(NAME, clue=shown)
    rng = random.Random(0)
    task = env.tasks("train")[3]
    first = env.reset(task)
    clue = env.world.clue
    assert clue in first and f"Admissible actions: {', '.join(env.admissible())}." in first
    while True:
        step = env.step(env.sampled_expert_action(rng))
        assert (f"Your task is to: {env.world.goal_text}\n{clue}" in step.obs) == (
            shown == "always")
        assert (clue in step.obs) == (shown == "always") and "Your task is to:" in step.obs
        if step.done:
            assert "Admissible actions" not in step.obs
            break
        assert step.obs.endswith(f"Admissible actions: {', '.join(env.admissible())}.")
    with pytest.raises(ValueError, match="clue must be one of"):
        envs.make(NAME, clue="twice")


def test_a_marked_clue_shows_the_goal_object_marked_wherever_it_is_listed():
    """``clue="marked"``: the clue says the goal object has a sticker, and every listing that
    shows it says so; no look-alike is marked, actions name objects as before, and the game
    is the unmarked variant's."""
    marked, plain = envs.make(NAME, clue="marked"), envs.make(NAME)
    shown = collections.Counter()
    for task in marked.tasks("train")[:20]:
        first, plain_first = marked.reset(task), plain.reset(task)
        world = marked.world
        goal = f"a {world.objects[world.goal_object]}"
        assert f"The {world.goal_type} you need is the one with a red sticker." in first
        assert world.clue not in plain_first and plain.world.clue not in first
        assert first.replace(world.clue, plain.world.clue) == plain_first
        rng, plain_rng = random.Random(task.index), random.Random(task.index)
        done = False
        while not done:
            action = marked.sampled_expert_action(rng)
            assert action == plain.sampled_expert_action(plain_rng)
            step, plain_step = marked.step(action), plain.step(action)
            assert step.obs.replace(f"{goal} with a red sticker", goal) == plain_step.obs
            assert marked.snapshot() == plain.snapshot()
            shown["goal"] += f"{goal} with a red sticker" in step.obs
            shown["decoy"] += any(f"a {world.objects[o]}" in step.obs
                                  for o in _lookalikes(world) if o != world.goal_object)
            assert step.obs.count("with a red sticker") == step.obs.count(f"{goal} with")
            assert step.done or "sticker" not in " ".join(marked.admissible())
            done = step.done
    assert shown["goal"] and shown["decoy"]


def _walk_to_take(world, o):
    """The actions that take look-alike ``o`` from where it starts."""
    r = world.start[o]
    actions = [f"go to {world.receptacles[r]}"]
    if world.openable[r]:
        actions.append(f"open {world.receptacles[r]}")
    return actions + [f"take {world.objects[o]} from {world.receptacles[r]}"]


def _finish(env):
    """Plays the clue-following expert to the end; the last step."""
    while True:
        step = env.step(env.expert_action())
        if step.done:
            return step


def _first_task(env, task_type):
    return next(t for t in env.tasks("train") if hh.world_of(t).task_type == task_type)


@pytest.mark.parametrize("task_type", ["pick", "heat"])
def test_handling_a_lookalike_ends_the_episode_and_setting_one_aside_does_not(env, task_type):
    task = _first_task(env, task_type)
    world = hh.world_of(task)
    decoy = next(o for o in _lookalikes(world) if o != world.goal_object)
    env.reset(task)
    for action in _walk_to_take(world, decoy):
        assert env.step(action).info["valid"]
    here = world.receptacles[world.start[decoy]]
    assert not env.step(f"put {world.objects[decoy]} in/on {here}").done  # set aside
    assert _finish(env).reward == 1.0  # the goal is still open

    env.reset(task)
    for action in _walk_to_take(world, decoy):
        env.step(action)
    if task_type == "heat":
        appliance = world.receptacle_types.index(APPLIANCE["heat"])
        env.step(f"go to {world.receptacles[appliance]}")
        handle = f"heat {world.objects[decoy]} with {world.receptacles[appliance]}"
    else:
        target = world.receptacle_types.index(world.target_type)
        for action in ([f"go to {world.receptacles[target]}"]
                       + [f"open {world.receptacles[target]}"] * world.openable[target]):
            env.step(action)
        handle = f"put {world.objects[decoy]} in/on {world.receptacles[target]}"
    step = env.step(handle)
    assert step.info["valid"] and step.done and step.reward == 0.0
    assert not step.info["won"] and not step.info["truncated"]
    assert hh.handled_decoys(world, env.snapshot()) == 1 << decoy


def test_the_clue_following_expert_solves_every_task_within_the_limit(env):
    for task in env.tasks("eval")[:100]:
        env.reset(task)
        step = _finish(env)
        assert step.reward == 1.0 and env.snapshot().turn <= env.max_turns - 4


def test_the_blind_demonstrator_takes_each_lookalike_a_third_of_the_time(env):
    """Over 150 episodes of each of four tasks, the look-alike delivered is uniform (each in
    [0.22, 0.45]); its success is the goal object's share."""
    chosen = collections.Counter()
    for task in env.tasks("train")[:4]:
        world = hh.world_of(task)
        order = sorted(_lookalikes(world), key=lambda o: world.listing_order.index(world.start[o]))
        for seed in range(150):
            env.reset(task)
            rng = random.Random(seed)
            while True:
                action = env.sampled_expert_action(rng)
                step = env.step(action)
                assert step.info["valid"], action
                if step.done:
                    break
            held = [o for o in order if env.snapshot().takes[o]]
            assert len(held) == 1  # it never takes a second one
            chosen[order.index(held[0])] += 1
            assert step.reward == float(held[0] == world.goal_object)
    for rank in range(LOOKALIKES):
        assert 0.22 <= chosen[rank] / 600 <= 0.45, chosen


def test_the_clue_demonstrator_takes_only_the_goal_object_and_always_succeeds():
    """``demonstrator="clue"`` (a supervised control's demonstrations) is the clue-following
    expert whatever the random stream; an unknown demonstrator is refused by name."""
    clue = envs.make(NAME, demonstrator="clue")
    for task in clue.tasks("train")[:20]:
        world = hh.world_of(task)
        clue.reset(task)
        rng = random.Random(0)
        while True:
            assert clue.sampled_expert_action(rng) == clue.expert_action()
            step = clue.step(clue.expert_action())
            if step.done:
                break
        assert step.reward == 1.0
        assert [o for o in _lookalikes(world) if clue.snapshot().takes[o]] == [world.goal_object]
    with pytest.raises(ValueError, match="demonstrator must be one of"):
        envs.make(NAME, demonstrator="oracle")


def test_the_blind_demonstrator_reads_the_observations_not_the_clue(env):
    """Its action is the same when the goal object is another look-alike: it cannot use the
    clue."""
    task = env.tasks("train")[5]
    world = hh.world_of(task)
    others = [o for o in _lookalikes(world) if o != world.goal_object]
    rng = random.Random(0)
    env.reset(task)
    while True:
        state = env.snapshot()
        seed = rng.getrandbits(32)
        action = blind_action(world, state, random.Random(seed))
        for o in others:
            other = dataclasses.replace(world, goal_object=o)
            assert blind_action(other, state, random.Random(seed)) == action
        if env.step(action).done:
            break


def test_the_oracles_read_the_pivot_and_the_progress(env):
    for task in env.tasks("train")[:30]:
        env.reset(task)
        world = env.world
        states = [env.snapshot()]
        actions = []
        while True:
            actions.append(env.expert_action())
            step = env.step(actions[-1])
            states.append(env.snapshot())
            if step.done:
                break
        first, last = env.oracle_pivot(states)
        assert first == last and actions[first].startswith(
            f"take {world.objects[world.goal_object]} from")
        progress = [env.oracle_progress(s) for s in states]
        assert progress[0] == 0.0 and progress[-1] == 1.0
        assert all(b >= a for a, b in itertools.pairwise(progress))
        assert progress[first + 1] > progress[first]  # the take is progress
    decoy = next(o for o in _lookalikes(world) if o != world.goal_object)
    handled = states[-1]._replace(hot=1 << decoy, cold=1 << decoy, clean=1 << decoy,
                                  object_location=tuple(
                                      world.receptacle_types.index(world.target_type)
                                      if o == decoy else r
                                      for o, r in enumerate(states[-1].object_location)))
    assert env.oracle_progress(handled) == 0.0
    assert env.oracle_pivot(states[:1]) is None
    assert envs.make("household-small").oracles == frozenset()
    with pytest.raises(NotImplementedError, match="no pivot oracle"):
        envs.make("household-small").oracle_pivot(states)


def test_the_verifier_sees_a_handled_lookalike_as_a_violation(env):
    task = _first_task(env, "pick")
    world = hh.world_of(task)
    decoy = next(o for o in _lookalikes(world) if o != world.goal_object)
    target = world.receptacle_types.index(world.target_type)
    actions = _walk_to_take(world, decoy) + [f"go to {world.receptacles[target]}"] + (
        [f"open {world.receptacles[target]}"] * world.openable[target]) + [
        f"put {world.objects[decoy]} in/on {world.receptacles[target]}"]
    env.reset(task)
    states = [env.snapshot()]
    for action in actions:
        env.step(action)
        states.append(env.snapshot())
    verifier = env.verifier()
    untouched = next(j for j, a in enumerate(verifier.atoms) if a.family == "wrong_object")
    assert verifier.statuses(states[-2])[untouched] == Status.SAT
    assert verifier.statuses(states[-1])[untouched] == Status.VIOL
    assert verifier.aggregate(verifier.statuses(states[-1])) == 0.0 == verifier.score(states[-1])
    trace = proof_graph(verifier, states, actions, [True] * len(actions))
    edges = [(e.turn, e.relation) for e in trace.edges if e.atom == untouched]
    assert {turn for turn, _ in edges} == {len(actions) - 1} and (
        len(actions) - 1, "violation") in edges
    # the goal object's atoms: taking the look-alike acquired nothing
    acquired = next(j for j, a in enumerate(verifier.atoms) if a.family == "acquired")
    assert verifier.statuses(states[-1])[acquired] == Status.UNSAT
