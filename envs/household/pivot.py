"""household-pivot: a household-small room where one early choice decides the episode.

The task is one of pick, clean, heat and cool over a goal type that has three look-alikes
(``mug 1``, ``mug 2``, ``mug 3``), each starting in a receptacle of its own type. Only one of
them counts, and the first observation says which, once: after the task comes the clue "The mug
you need is the one in the drawer 1." Later observations repeat the task but not the clue (with
the option ``clue="always"`` they repeat it too: the choice then needs no memory, only reading
what is in front of the agent; with ``clue="marked"`` the clue says the goal object has a
sticker, and every listing that shows it says so: the choice then needs neither memory nor a
comparison, only what the agent sees where it stands). Giving a look-alike the task's
transformation or putting it in the target ends the episode at once with reward 0
(`env.handled_decoys`); taking one and putting it back elsewhere is harmless. Every
observation lists the admissible actions, so an agent that picks from the list never wastes an
action on a command the game rejects, and its failures come from its choices; 24 actions at
most.

The pivotal decision is which look-alike to take. Its demonstrator (`sampled_expert_action`)
is the searching expert blind to the clue: it takes each look-alike with probability 1/3, so a
model trained on its demonstrations succeeds about a third of the time, and a group of 8
usually holds 1-3 successes, the groups a credit method can learn from. Its
``expert_action`` follows the clue (the ceiling); with the option ``demonstrator="clue"`` it is
also the demonstrator, for a supervised control: whether a model learns to read the clue from
demonstrations that do. Three oracles read the hidden state, for
positive controls and a learning metric only: `oracle_pivot`, the turn that took the goal
object; `oracle_progress`, how far the state is along the shortest way to the goal; and
`oracle_choice`, whether a state is a choice among look-alikes and which choice is right.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Hashable, Sequence

from envs.base import Task, register
from envs.household.env import (
    MIDDLE,
    NOBODY,
    PIVOT,
    HouseholdSmall,
    State,
    goal_reached,
    handled_decoys,
    initial_state,
    is_open,
    transition,
    world_of,
)
from envs.household.expert import blind_action, expert_action
from envs.household.world import World

DEMONSTRATORS = ("blind", "clue")
# the clue in the first observation only, in every one, or as a mark on the goal object
CLUES = ("once", "always", "marked")
MARK = "with a red sticker"


class HouseholdPivot(HouseholdSmall):
    """Look-alike goal objects told apart by a clue shown once (module docstring): 3,553
    training and 400 held-out tasks."""

    name = PIVOT
    max_turns = 24
    list_actions = True
    oracles = frozenset({"pivot", "progress", "choice"})

    def __init__(self, train_tasks: int = 3553, eval_tasks: int = 400,
                 demonstrator: str = "blind", clue: str = "once"):
        if demonstrator not in DEMONSTRATORS:
            raise ValueError(f"household-pivot: demonstrator must be one of {DEMONSTRATORS}, "
                             f"got {demonstrator!r}")
        if clue not in CLUES:
            raise ValueError(f"household-pivot: clue must be one of {CLUES}, got {clue!r}")
        super().__init__(train_tasks, eval_tasks)
        self.demonstrator, self.clue = demonstrator, clue

    def world_of(self, task: Task) -> World:
        """The task's world; with ``clue="marked"`` its clue is the goal object's `MARK`, and
        every listing that shows the goal object says it."""
        return marked_world(task) if self.clue == "marked" else world_of(task)

    def reminder(self, world: World) -> str:
        """The task, and with ``clue="always"`` the clue after it."""
        task = super().reminder(world)
        return f"{task}\n{world.clue}" if self.clue == "always" else task

    def verifier(self, task=None):
        from envs.household.verifier import PivotVerifier

        return PivotVerifier(world_of(task) if task else self.world)

    def sampled_expert_action(self, rng: random.Random) -> str:
        """The demonstrator's next action: the clue-blind one's (`expert.blind_action`), or
        with ``demonstrator="clue"`` the expert's."""
        if self.demonstrator == "clue":
            return self.expert_action()
        state, world = self._running()
        return blind_action(world, state, rng)

    def oracle_pivot(self, states: Sequence[Hashable]) -> tuple[int, int] | None:
        """The turn of the last take of the goal object in an episode with snapshots
        ``states`` (``s_0 .. s_T``), as a one-turn segment; None if it never took it."""
        world = world_of(states[0].task)
        taken = [t for t in range(len(states) - 1)
                 if states[t + 1].takes[world.goal_object] > states[t].takes[world.goal_object]]
        return (taken[-1], taken[-1]) if taken else None

    def oracle_choice(self, state: Hashable) -> tuple[str, bool] | None:
        """At a first choice among look-alikes (the agent at a receptacle that shows one, its
        hands empty, none taken yet): taking the first one shown, and whether it is the goal
        object; else None."""
        world = world_of(state.task)
        lookalikes = world.mask(world.goal_type)
        here = state.location
        if (state.held != NOBODY or here == MIDDLE or not is_open(world, state, here)
                or any(state.takes[o] for o in range(len(world.objects)) if lookalikes >> o & 1)):
            return None
        shown = [o for o in range(len(world.objects))
                 if lookalikes >> o & 1 and state.object_location[o] == here]
        if not shown:
            return None
        return (f"take {world.objects[shown[0]]} from {world.receptacles[here]}",
                shown[0] == world.goal_object)

    def oracle_progress(self, state: Hashable) -> float:
        """1 - (actions the clue-following expert needs from ``state``) / (those it needs from
        the task's start), clipped to [0, 1]: 1 once the goal holds, 0 once a look-alike was
        handled."""
        world = world_of(state.task)
        if handled_decoys(world, state):
            return 0.0
        start = _remaining_from_start(state.task)
        return min(1.0, max(0.0, 1.0 - remaining_actions(world, state) / start))


def remaining_actions(world: World, state: State, limit: int = 100) -> int:
    """How many actions the expert that knows where every object is needs from ``state`` to
    the goal (``limit`` if it does not get there within it)."""
    for n in range(limit):
        if goal_reached(world, state):
            return n
        state, _, valid = transition(world, state, expert_action(world, state))
        if not valid:
            raise AssertionError(f"the expert's action was rejected in {state}")
    return limit


@functools.lru_cache(maxsize=256)
def marked_world(task: Task) -> World:
    """The world of ``task`` whose clue is the goal object's `MARK` (``clue="marked"``)."""
    world = world_of(task)
    return dataclasses.replace(world, mark=MARK,
                               clue=f"The {world.goal_type} you need is the one {MARK}.")


@functools.lru_cache(maxsize=256)
def _remaining_from_start(task: Task) -> int:
    world = world_of(task)
    return remaining_actions(world, initial_state(task, world))


register(HouseholdPivot.name, HouseholdPivot)
