"""The household environment: ALFWorld's text game over a generated room.

Actions follow ALFWorld's grammar (``go to X``, ``open X``, ``close X``, ``take O from R``,
``put O in/on R``, ``heat/cool/clean O with R``, ``use L``, ``examine X``, ``inventory``,
``look``, ``help``), its rules (a put only where the receptacle can hold the object, a
transformation only of an object that has the property, a goal object that starts in the
fridge already cool) and observations its wording. An action that is malformed or impossible
in the current state gets "Nothing happens." and ``valid=False``. The episode ends when the
goal holds (reward 1, as ALFWorld checks the goal after every action) or after 50 actions
(reward 0).

The episode state is a :class:`State` named tuple of ints and tuples: a snapshot is the tuple
itself, and restoring is an assignment. Object sets (seen, heated, ...) are bitmasks; ``takes``
counts how often the agent picked up each object, so the verifier can tell its last take (the
one whose effect survives) from earlier ones that were put down again.
"""

from __future__ import annotations

import functools
import random
from typing import NamedTuple

from envs.base import Env, Step, Task, register, task_seed
from envs.household import world as world_lib
from envs.household.world import APPLIANCE, World

NOTHING = "Nothing happens."
HELP = "\n".join([  # ALFWorld's list of commands, with household's `put` and no slicing
    "Available commands:",
    "  look:                             look around your current location",
    "  inventory:                        check your current inventory",
    "  go to (receptacle):               move to a receptacle",
    "  open (receptacle):                open a receptacle",
    "  close (receptacle):               close a receptacle",
    "  take (object) from (receptacle):  take an object from a receptacle",
    "  put (object) in/on (receptacle):  place an object in or on a receptacle",
    "  examine (something):              examine a receptacle or an object",
    "  use (object):                     use an object",
    "  heat (object) with (receptacle):  heat an object using a receptacle",
    "  clean (object) with (receptacle): clean an object using a receptacle",
    "  cool (object) with (receptacle):  cool an object using a receptacle",
    ""])
MIDDLE = -1  # the agent's location before it goes anywhere
HELD = -1  # an object's location while the agent carries it
NOBODY = -1


class State(NamedTuple):
    """Everything that changes during an episode (the world is fixed by ``task``)."""

    task: Task
    location: int
    held: int
    object_location: tuple[int, ...]
    opened: int  # receptacle bitmasks
    explored: int  # the receptacles whose contents the agent has seen
    hot: int  # object bitmasks from here on
    cold: int
    clean: int
    lit: int
    seen: int
    takes: tuple[int, ...]  # how many times the agent has picked up each object
    turn: int
    done: bool

    @property
    def taken(self) -> int:
        """Bitmask of the objects the agent has picked up at least once."""
        return sum(1 << o for o, n in enumerate(self.takes) if n)


@functools.lru_cache(maxsize=256)
def world_of(task: Task) -> World:
    """The generated world of ``task`` (cached: generation is deterministic)."""
    return world_lib.generate(task_seed(task), small=task.env == HouseholdSmall.name,
                              pivot=task.env == PIVOT)


def initial_state(task: Task, world: World) -> State:
    """The state before the first action. As in ALFWorld's problems, goal objects that start
    in a fridge are already cool."""
    cold = sum(1 << o for o, (kind, r) in enumerate(zip(world.object_types, world.start))
               if kind == world.goal_type and world.receptacle_types[r] == APPLIANCE["cool"])
    return State(task, MIDDLE, NOBODY, world.start, 0, 0, 0, cold, 0, 0, 0,
                 (0,) * len(world.objects), 0, False)


def listing(names: list[str]) -> str:
    """ALFWorld's enumeration: "a x 1", "a x 1, and a y 2", "a x 1, a y 2, and a z 3"."""
    if not names:
        return "nothing"
    if len(names) == 1:
        return f"a {names[0]}"
    return ", ".join(f"a {n}" for n in names[:-1]) + f", and a {names[-1]}"


def can_put(world: World, obj: int, receptacle: int) -> bool:
    """Whether object `obj` may be put in or on `receptacle` (`world_lib.CAN_HOLD`)."""
    return world.object_types[obj] in world_lib.CAN_HOLD[world.receptacle_types[receptacle]]


def contents(world: World, state: State, receptacle: int) -> list[int]:
    """Objects in or on ``receptacle``, in index order."""
    return [o for o, r in enumerate(state.object_location) if r == receptacle]


def is_open(world: World, state: State, receptacle: int) -> bool:
    """True if the receptacle's contents are reachable (not openable, or open)."""
    return not world.openable[receptacle] or bool(state.opened >> receptacle & 1)


def describe(world: World, state: State, receptacle: int) -> tuple[str, int]:
    """What the agent sees at ``receptacle``, and the bitmask of objects it reveals."""
    name = world.receptacles[receptacle]
    if not is_open(world, state, receptacle):
        return f"The {name} is closed.", 0
    inside = contents(world, state, receptacle)
    items = listing([world.shown_name(o) for o in inside])
    revealed = sum(1 << o for o in inside)
    if world.openable[receptacle]:
        return f"The {name} is open. In it, you see {items}.", revealed
    return f"On the {name}, you see {items}.", revealed


def welcome(world: World) -> str:
    """The first observation: the room's receptacles and the task."""
    room = listing([world.receptacles[r] for r in world.listing_order])
    return (
        "-= Welcome to TextWorld, ALFRED! =-\n\n"
        f"You are in the middle of a room. Looking quickly around you, you see {room}.\n\n"
        f"Your task is to: {world.goal_text}" + (f"\n{world.clue}" if world.clue else "")
    )


def goal_reached(world: World, state: State) -> bool:
    """ALFWorld's goal condition of the task type, evaluated on ``state``, over the objects
    that can satisfy it (`World.goal_objects`); never once a look-alike was handled."""
    goals = world.goal_objects
    if handled_decoys(world, state):
        return False
    if world.task_type == "look":
        if state.held == NOBODY or not goals >> state.held & 1:
            return False
        return any(state.lit >> l & 1 and state.object_location[l] == state.location
                   for l in range(len(world.objects)) if world.object_types[l] == world_lib.LAMP)
    flags = {"heat": state.hot, "cool": state.cold, "clean": state.clean}.get(world.task_type, -1)
    placed = 0
    for o, r in enumerate(state.object_location):
        if (goals >> o & 1 and r != HELD and flags >> o & 1
                and world.receptacle_types[r] == world.target_type):
            placed += 1
    return placed >= (2 if world.task_type == "pick2" else 1)


def handled_decoys(world: World, state: State) -> int:
    """Bitmask of the goal type's look-alikes (`World.decoys`) the agent has given the task's
    transformation or put in a target receptacle: either ends a household-pivot episode as a
    failure. 0 in worlds without look-alikes."""
    if not world.decoys:
        return 0
    flags = {"heat": state.hot, "cool": state.cold, "clean": state.clean}.get(world.task_type, 0)
    in_target = sum(1 << o for o, r in enumerate(state.object_location)
                    if r != HELD and world.receptacle_types[r] == world.target_type)
    return world.decoys & (flags | in_target)


def parse(world: World, action: str) -> tuple[str, int, int] | None:
    """``(verb, first index, second index)`` of a well-formed action, else None.

    Indices refer to receptacles or objects as the verb requires; -1 where unused.
    """
    text = " ".join(action.lower().split())
    verb, _, rest = text.partition(" ")
    index = world.index
    if text in ("inventory", "look", "help"):
        return text, -1, -1
    if verb == "go" and rest.startswith("to "):
        kind, r = index.get(rest[3:], ("", -1))
        return ("go", r, -1) if kind == "r" else None
    if verb in ("open", "close"):
        kind, r = index.get(rest, ("", -1))
        return (verb, r, -1) if kind == "r" else None
    if verb in ("examine", "use"):
        kind, i = index.get(rest, ("", -1))
        if verb == "use":
            return ("use", i, -1) if kind == "o" else None
        return ("examine_" + kind, i, -1) if kind else None
    separator = {"take": " from ", "heat": " with ", "cool": " with ", "clean": " with "}.get(verb)
    if verb == "put":
        for separator in (" in/on ", " in ", " on "):
            if separator in rest:
                break
    if separator is None or separator not in rest:
        return None
    first, _, second = rest.partition(separator)
    kind_o, o = index.get(first, ("", -1))
    kind_r, r = index.get(second, ("", -1))
    return (verb, o, r) if kind_o == "o" and kind_r == "r" else None


def transition(world: World, state: State, action: str) -> tuple[State, str, bool]:
    """The state after ``action``, its observation, and whether the action was valid."""
    parsed = parse(world, action)
    if parsed is None:
        return state, NOTHING, False
    verb, a, b = parsed
    handler = _HANDLERS[verb]
    result = handler(world, state, a, b)
    if result is None:
        return state, NOTHING, False
    new_state, text = result
    return new_state, text, True


def _go(world, state, r, _):
    if r == state.location:
        return None
    text, revealed = describe(world, state, r)
    return (_reveal(world, state._replace(location=r), r, revealed),
            f"You arrive at {world.receptacles[r]}. {text}")


def _reveal(world, state, r, revealed):
    """``state`` once the agent has looked at ``r`` and seen the objects ``revealed``."""
    explored = state.explored | (1 << r if is_open(world, state, r) else 0)
    return state._replace(seen=state.seen | revealed, explored=explored)


def _open(world, state, r, _):
    if r != state.location or not world.openable[r] or state.opened >> r & 1:
        return None
    state = state._replace(opened=state.opened | 1 << r)
    text, revealed = describe(world, state, r)
    return _reveal(world, state, r, revealed), f"You open the {world.receptacles[r]}. {text}"


def _close(world, state, r, _):
    if r != state.location or not world.openable[r] or not state.opened >> r & 1:
        return None
    return state._replace(opened=state.opened & ~(1 << r)), f"You close the {world.receptacles[r]}."


def _take(world, state, o, r):
    if (state.held != NOBODY or r != state.location or state.object_location[o] != r
            or not is_open(world, state, r) or world.object_types[o] == world_lib.LAMP):
        return None
    locations, takes = list(state.object_location), list(state.takes)
    locations[o] = HELD
    takes[o] += 1
    new = state._replace(held=o, object_location=tuple(locations), takes=tuple(takes))
    return new, f"You pick up the {world.objects[o]} from the {world.receptacles[r]}."


def _put(world, state, o, r):
    if (state.held != o or r != state.location or not is_open(world, state, r)
            or not can_put(world, o, r)):
        return None
    locations = list(state.object_location)
    locations[o] = r
    new = state._replace(held=NOBODY, object_location=tuple(locations))
    return new, f"You put the {world.objects[o]} in/on the {world.receptacles[r]}."


def _transform(verb):
    def apply(world, state, o, r):
        if (state.held != o or r != state.location
                or world.receptacle_types[r] != APPLIANCE[verb]
                or not world_lib.can_transform(verb, world.object_types[o])):
            return None
        bit = 1 << o
        if verb == "heat":
            state = state._replace(hot=state.hot | bit, cold=state.cold & ~bit)
        elif verb == "cool":
            state = state._replace(cold=state.cold | bit, hot=state.hot & ~bit)
        else:
            state = state._replace(clean=state.clean | bit)
        return state, f"You {verb} the {world.objects[o]} using the {world.receptacles[r]}."
    return apply


def _use(world, state, lamp, _):
    if world.object_types[lamp] != world_lib.LAMP or state.object_location[lamp] != state.location:
        return None
    return state._replace(lit=state.lit | 1 << lamp), f"You turn on the {world.objects[lamp]}."


def _examine_receptacle(world, state, r, _):
    if r != state.location:
        return None
    return state, describe(world, state, r)[0]


def _examine_object(world, state, o, _):
    here = state.object_location[o]
    if here != HELD and (here != state.location or not is_open(world, state, here)):
        return None
    return state, f"There's nothing special about {world.objects[o]}."


def _inventory(world, state, *_):
    if state.held == NOBODY:
        return state, "You are not carrying anything."
    return state, f"You are carrying: a {world.objects[state.held]}."


def _look(world, state, *_):
    if state.location == MIDDLE:
        return state, ("You are in the middle of a room. Looking quickly around you, "
                       "you see nothing.")
    here = world.receptacles[state.location]
    return state, f"You are facing the {here}. Next to it, you see nothing."


def _help(world, state, *_):
    return state, HELP


_HANDLERS = {
    "go": _go, "open": _open, "close": _close, "take": _take, "put": _put,
    "heat": _transform("heat"), "cool": _transform("cool"), "clean": _transform("clean"),
    "use": _use, "examine_r": _examine_receptacle, "examine_o": _examine_object,
    "inventory": _inventory, "look": _look, "help": _help,
}


def admissible(world: World, state: State) -> list[str]:
    """ALFWorld's admissible commands in ``state``."""
    names, here = world.objects, state.location
    actions = [f"go to {name}" for r, name in enumerate(world.receptacles) if r != here]
    if here != MIDDLE:
        name = world.receptacles[here]
        if world.openable[here]:
            actions.append(f"close {name}" if state.opened >> here & 1 else f"open {name}")
        actions.append(f"examine {name}")
        reachable = is_open(world, state, here)
        inside = contents(world, state, here) if reachable else []
        for o in inside:
            if world.object_types[o] == world_lib.LAMP:
                actions.append(f"use {names[o]}")
            elif state.held == NOBODY:
                actions.append(f"take {names[o]} from {name}")
        if state.held != NOBODY:
            held = names[state.held]
            if reachable and can_put(world, state.held, here):
                actions.append(f"put {held} in/on {name}")
            for verb, appliance in APPLIANCE.items():
                if (world.receptacle_types[here] == appliance
                        and world_lib.can_transform(verb, world.object_types[state.held])):
                    actions.append(f"{verb} {held} with {name}")
    if state.held != NOBODY:
        actions.append(f"examine {names[state.held]}")
    actions += ["inventory", "look", "help"]
    return actions


class Household(Env):
    """ALFWorld-style household tasks (3,553 train and 134 eval tasks, as ALFWorld)."""

    name = "household"
    max_turns = 50
    searching_expert = False  # the expert knows where every object is (`expert`)
    remind_task = False  # observations after the first do not repeat the task
    list_actions = False  # observations do not end with the admissible actions

    def __init__(self, train_tasks: int = 3553, eval_tasks: int = 134):
        self._sizes = {"train": train_tasks, "eval": eval_tasks}
        self._world: World | None = None
        self._state: State | None = None

    def split_size(self, split: str) -> int:
        return self._sizes[split]

    def reset(self, task: Task) -> str:
        self.check_task(task)
        self._world = self.world_of(task)
        self._state = initial_state(task, self._world)
        return self._listed(welcome(self._world))

    def step(self, action: str) -> Step:
        self.check_action(action)
        state, world = self._running()
        new, text, valid = transition(world, state, action)
        won = goal_reached(world, new)
        failed = bool(handled_decoys(world, new))
        truncated = not won and not failed and new.turn + 1 >= self.max_turns
        done = won or failed or truncated
        self._state = new._replace(turn=new.turn + 1, done=done)
        info = {"valid": valid, "won": won, "truncated": truncated}
        if self.remind_task:
            text = f"{text}\n{self.reminder(world)}"
        return Step(text if done else self._listed(text), done, 1.0 if won else 0.0, info)

    def world_of(self, task: Task) -> World:
        """The world an episode of ``task`` plays in, as this kind shows it (`world_of`)."""
        return world_of(task)

    def reminder(self, world: World) -> str:
        """What every observation after the first repeats where this kind reminds the agent
        (`remind_task`): the task."""
        return f"Your task is to: {world.goal_text}"

    def _listed(self, text: str) -> str:
        """``text``, followed by the admissible actions where this kind lists them."""
        if not self.list_actions:
            return text
        return f"{text}\nAdmissible actions: {', '.join(self.admissible())}."

    def snapshot(self) -> State:
        return self._running(finished_ok=True)[0]

    def restore(self, state: State) -> None:
        if not isinstance(state, State):
            raise TypeError(f"household: cannot restore a {type(state).__name__}")
        self._world = self.world_of(state.task)
        self._state = state

    def verifier(self, task: Task | None = None):
        from envs.household.verifier import HouseholdVerifier

        return HouseholdVerifier(world_of(task) if task else self._running(finished_ok=True)[1])

    def admissible(self) -> list[str]:
        state, world = self._running()
        return admissible(world, state)

    def instruction(self) -> str:
        return INSTRUCTION.replace("{max_turns}", str(self.max_turns))

    def expert_action(self) -> str:
        from envs.household.expert import expert_action

        state, world = self._running()
        return expert_action(world, state, self.searching_expert)

    def random_action(self, rng: random.Random) -> str:
        return rng.choice(self.admissible())

    @property
    def world(self) -> World:
        """The running episode's world (layout and goal)."""
        return self._running(finished_ok=True)[1]

    def _running(self, finished_ok: bool = False) -> tuple[State, World]:
        if self._state is None or self._world is None:
            raise RuntimeError("household: call reset(task) or restore(state) first")
        if self._state.done and not finished_ok:
            raise RuntimeError("household: the episode is over; reset or restore first")
        return self._state, self._world


INSTRUCTION = (
    "You are an agent in a household. Each turn you receive an observation of the room and "
    "answer with exactly one action. Actions: go to {receptacle}, open {receptacle}, close "
    "{receptacle}, take {object} from {receptacle}, put {object} in/on {receptacle}, heat "
    "{object} with {microwave}, cool {object} with {fridge}, clean {object} with {sinkbasin}, "
    "use {lamp}, examine {something}, inventory, look. Use the names exactly as the "
    "observations write them (for example \"cabinet 2\"). Complete the task in at most "
    "{max_turns} actions."
)


class HouseholdSmall(Household):
    """The same game in small rooms (`world.generate(small=True)`): one receptacle of each
    type, 3-5 object types; 20 actions at most. Every observation ends with the task (as
    verl-agent's ALFWorld prompt restates it every turn), and the expert searches (`expert`):
    a median of 10 actions."""

    name = "household-small"
    max_turns = 20
    searching_expert = True
    remind_task = True


PIVOT = "household-pivot"  # `envs.household.pivot`, whose worlds `world_of` generates here

register(Household.name, Household)
register(HouseholdSmall.name, HouseholdSmall)
