"""The household experts: the next action towards the goal from any state.

Both replan from scratch every turn, so they also finish episodes that started with other
actions (random prefixes, restored mid-episode states): put down whatever useless thing is in
hand, fetch a goal object that does not count yet, transform it at the appliance if the task
asks for it, and put it in a target receptacle (or turn on a lamp while holding it).

The *privileged* expert (``household``, as ALFWorld's) knows where every object is. The
*searching* expert (``household-small``) only uses what the agent has seen: to fetch an object
it has not seen yet, it explores the receptacles it has not looked into in the order the room's
description lists them, opening the closed ones. Its actions are a function of the
observations so far, so a policy trained to imitate it can learn them exactly (the privileged
expert's first ``go to`` cannot be learnt from what the policy reads), and a policy that learns
where each object type is kept can beat it.
"""

from __future__ import annotations

import random

from envs.household.env import HELD, MIDDLE, NOBODY, State, can_put, is_open
from envs.household.world import APPLIANCE, LAMP, World


def expert_action(world: World, state: State, searching: bool = False) -> str:
    """The expert's next action in ``state``; ``searching``: the searching expert (above)."""
    held = state.held
    if held != NOBODY and not world.goal_objects >> held & 1:
        return _put_down(world, state)
    if world.task_type == "look":
        return _look(world, state, searching)
    if held != NOBODY:
        return _deliver(world, state)
    placed = set(_placed(world, state))
    wanted = [o for o in range(len(world.objects))
              if world.goal_objects >> o & 1 and o not in placed]
    return _find(world, state, wanted, searching, _fetch)


def blind_action(world: World, state: State, rng: random.Random) -> str:
    """household-pivot's demonstrator: the searching expert, blind to the clue. It takes one
    of the goal type's look-alikes at random and delivers whichever it holds.

    At a receptacle that shows an untaken look-alike it takes it with probability
    ``1 / (1 + look-alikes not seen yet)``, else explores on; once every look-alike has been
    seen it fetches one at random. On an undisturbed run that is each look-alike with
    probability 1/3, and the choice is a function of the observations and ``rng`` alone."""
    held = state.held
    lookalikes = world.mask(world.goal_type)
    if held != NOBODY:
        return _deliver(world, state) if lookalikes >> held & 1 else _put_down(world, state)
    here = state.location
    free = [o for o in range(len(world.objects))
            if lookalikes >> o & 1 and state.object_location[o] != HELD]
    shown = [o for o in free if here != MIDDLE and state.object_location[o] == here
             and is_open(world, state, here) and state.seen >> o & 1]
    unseen = [o for o in free if not state.seen >> o & 1]
    if shown and rng.random() * (len(shown) + len(unseen)) < len(shown):
        return _fetch(world, state, shown[0])
    if unseen:
        return _find(world, state, unseen, True, _fetch)
    return _fetch(world, state, rng.choice([o for o in free if o not in shown] or shown))


def _find(world: World, state: State, wanted: list[int], searching: bool, reach) -> str:
    """``reach(world, state, o)`` for the first of ``wanted`` the expert knows the place of
    (any, unless ``searching``), else the next step of exploring."""
    known = [o for o in wanted if not searching or state.seen >> o & 1]
    if known:
        return reach(world, state, known[0])
    unexplored = [r for r in world.listing_order if not state.explored >> r & 1]
    return _go_open(world, state, unexplored[0])


def _placed(world: World, state: State) -> list[int]:
    """Goal objects that already count: in a target receptacle and transformed if required."""
    return [o for o, r in enumerate(state.object_location)
            if world.goal_objects >> o & 1 and r != HELD
            and world.receptacle_types[r] == world.target_type and _transformed(world, state, o)]


def _transformed(world: World, state: State, o: int) -> bool:
    flags = {"heat": state.hot, "cool": state.cold, "clean": state.clean}
    return bool(flags.get(world.task_type, -1) >> o & 1)


def _first(world: World, receptacle_type: str) -> int:
    return world.receptacle_types.index(receptacle_type)


def _go_open(world: World, state: State, r: int) -> str | None:
    """The action that brings the agent to an open ``r``, or None if it is already there."""
    if state.location != r:
        return f"go to {world.receptacles[r]}"
    if not is_open(world, state, r):
        return f"open {world.receptacles[r]}"
    return None


def _fetch(world: World, state: State, o: int) -> str:
    r = state.object_location[o]
    step = _go_open(world, state, r)
    return step or f"take {world.objects[o]} from {world.receptacles[r]}"


def _put_down(world: World, state: State) -> str:
    """Towards putting the held object down: here if this receptacle can hold it, else at the
    first one in the room's listing that can (a surface before a container); never a
    look-alike in a target, which would end a household-pivot episode."""
    decoy = world.decoys >> state.held & 1
    places = [r for r in world.listing_order if can_put(world, state.held, r)
              and not (decoy and world.receptacle_types[r] == world.target_type)]
    here = (state.location if state.location in places
            else min(places, key=lambda r: world.openable[r]))
    step = _go_open(world, state, here)
    return step or f"put {world.objects[state.held]} in/on {world.receptacles[here]}"


def _deliver(world: World, state: State) -> str:
    held = world.objects[state.held]
    if not _transformed(world, state, state.held):
        verb = world.task_type
        appliance = _first(world, APPLIANCE[verb])
        if state.location != appliance:
            return f"go to {world.receptacles[appliance]}"
        return f"{verb} {held} with {world.receptacles[appliance]}"
    target = _first(world, world.target_type)
    step = _go_open(world, state, target)
    return step or f"put {held} in/on {world.receptacles[target]}"


def _look(world: World, state: State, searching: bool) -> str:
    if state.held == NOBODY:
        return _find(world, state, [world.object_types.index(world.goal_type)], searching,
                     _fetch)
    return _find(world, state, [world.object_types.index(LAMP)], searching, _use_lamp)


def _use_lamp(world: World, state: State, lamp: int) -> str:
    where = state.object_location[lamp]
    if state.location != where:
        return f"go to {world.receptacles[where]}"
    return f"use {world.objects[lamp]}"
