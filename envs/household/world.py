"""Household worlds and goals, generated from a task seed (ALFWorld's vocabulary and phrasing).

A world is one room: numbered receptacles (``cabinet 3``, ``fridge 1``) and numbered objects
(``egg 2``) that start inside or on them. The room type (kitchen, bathroom, bedroom, living
room), which receptacle and object types appear, how many of each and where the objects start
all vary with the seed, so no two splits share a layout. A goal is one of ALFWorld's six task
types over an object type and a receptacle type, phrased with one of ALFWorld's templates.

The task-type mix follows ALFWorld's training set (pick 22%, look 9%, clean 18%, heat 13%,
cool 15%, pick two 23%).

``generate(seed, small=True)`` makes the rooms of ``household-small``: the same task types,
goals, phrasing and rules, but at most one receptacle of each type, 3-5 object types with one
or two of each, and only the receptacles that matter (where an object starts, the target, the
appliance) plus two distractors. An observation then lists about 7 receptacles instead of 20,
which is what a model of a few million parameters trained on two CPU cores can learn to act in;
household-small's searching expert (`expert`) needs a median of 9 actions (at most 18).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Literal

TaskType = Literal["pick", "look", "clean", "heat", "cool", "pick2"]
TASK_TYPES: tuple[TaskType, ...] = ("pick", "look", "clean", "heat", "cool", "pick2")
TASK_WEIGHTS = (790, 308, 650, 459, 533, 813)

# The receptacle type whose use performs each transformation.
APPLIANCE = {"heat": "microwave", "cool": "fridge", "clean": "sinkbasin"}
LAMP = "desklamp"

# Receptacle type -> (openable, {room: (min count, max count)}).
RECEPTACLES: dict[str, tuple[bool, dict[str, tuple[int, int]]]] = {
    "armchair": (False, {"bedroom": (0, 1), "livingroom": (0, 2)}),
    "bathtubbasin": (False, {"bathroom": (0, 1)}),
    "bed": (False, {"bedroom": (1, 1)}),
    "cabinet": (True, {"kitchen": (2, 10), "bathroom": (1, 4), "livingroom": (0, 4)}),
    "coffeemachine": (False, {"kitchen": (0, 1)}),
    "coffeetable": (False, {"livingroom": (1, 2)}),
    "countertop": (False, {"kitchen": (1, 3), "bathroom": (1, 1)}),
    "desk": (False, {"bedroom": (0, 2)}),
    "diningtable": (False, {"kitchen": (0, 2), "livingroom": (0, 1)}),
    "drawer": (True, {"kitchen": (1, 8), "bathroom": (0, 4), "bedroom": (2, 8),
                      "livingroom": (0, 4)}),
    "dresser": (False, {"bedroom": (0, 1), "livingroom": (0, 1)}),
    "fridge": (True, {"kitchen": (1, 1)}),
    "garbagecan": (False, {"kitchen": (1, 1), "bathroom": (1, 1), "bedroom": (1, 1),
                           "livingroom": (1, 1)}),
    "handtowelholder": (False, {"bathroom": (0, 2)}),
    "laundryhamper": (False, {"bedroom": (0, 1)}),
    "microwave": (True, {"kitchen": (1, 1)}),
    "safe": (True, {"bedroom": (0, 1)}),
    "shelf": (False, {"kitchen": (0, 3), "bathroom": (0, 3), "bedroom": (0, 6),
                      "livingroom": (0, 4)}),
    "sidetable": (False, {"bedroom": (1, 2), "livingroom": (1, 3)}),
    "sinkbasin": (False, {"kitchen": (1, 1), "bathroom": (1, 2)}),
    "sofa": (False, {"livingroom": (1, 1)}),
    "stoveburner": (False, {"kitchen": (2, 4)}),
    "toaster": (False, {"kitchen": (0, 1)}),
    "toilet": (False, {"bathroom": (1, 1)}),
    "toiletpaperhanger": (False, {"bathroom": (1, 1)}),
    "towelholder": (False, {"bathroom": (0, 1)}),
    "tvstand": (False, {"livingroom": (0, 1)}),
}

_SURFACES = ("countertop", "diningtable", "shelf", "sidetable", "desk", "dresser",
             "coffeetable", "tvstand", "armchair", "sofa", "bed")
_CONTAINERS = ("cabinet", "drawer", "safe")
_FOOD_PLACES = ("countertop", "diningtable", "fridge", "microwave", "sinkbasin", "garbagecan",
                "cabinet", "shelf")
_DISH_PLACES = ("countertop", "diningtable", "cabinet", "drawer", "sinkbasin", "shelf",
                "stoveburner", "fridge", "microwave", "coffeemachine")

# Object type -> (rooms, receptacle types it can start in, properties).
# Properties: h heatable, c coolable, w washable (clean), l can be looked at under a lamp.
OBJECTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "alarmclock": (("bedroom",), _SURFACES, "l"),
    "apple": (("kitchen",), _FOOD_PLACES, "hcw"),
    "book": (("bedroom", "livingroom"), _SURFACES + _CONTAINERS, "l"),
    "bowl": (("kitchen", "bedroom"), _DISH_PLACES + _SURFACES, "cwl"),
    "box": (("livingroom",), _SURFACES, "l"),
    "bread": (("kitchen",), _FOOD_PLACES, "hc"),
    "butterknife": (("kitchen",), _DISH_PLACES, "w"),
    "candle": (("bathroom",), ("countertop", "shelf", "cabinet", "toilet"), ""),
    "cd": (("bedroom",), _SURFACES + _CONTAINERS, "l"),
    "cellphone": (("bedroom", "livingroom"), _SURFACES + _CONTAINERS, "l"),
    "cloth": (("bathroom",), ("countertop", "cabinet", "drawer", "bathtubbasin", "sinkbasin"),
              "w"),
    "creditcard": (("bedroom", "livingroom"), _SURFACES + _CONTAINERS, "l"),
    "cup": (("kitchen",), _DISH_PLACES, "hcw"),
    "dishsponge": (("kitchen", "bathroom"), ("countertop", "sinkbasin", "cabinet", "drawer",
                                             "shelf"), "w"),
    "egg": (("kitchen",), _FOOD_PLACES, "hcw"),
    "fork": (("kitchen",), _DISH_PLACES, "w"),
    "handtowel": (("bathroom",), ("handtowelholder", "countertop", "cabinet"), ""),
    "kettle": (("kitchen",), ("stoveburner", "countertop", "cabinet", "shelf"), "w"),
    "keychain": (("bedroom", "livingroom"), _SURFACES + _CONTAINERS, "l"),
    "knife": (("kitchen",), _DISH_PLACES, "w"),
    "ladle": (("kitchen",), _DISH_PLACES, "w"),
    "laptop": (("bedroom", "livingroom"), _SURFACES, ""),
    "lettuce": (("kitchen",), _FOOD_PLACES, "cw"),
    "mug": (("kitchen", "bedroom"), _DISH_PLACES + _SURFACES, "hcwl"),
    "newspaper": (("livingroom",), _SURFACES, "l"),
    "pan": (("kitchen",), ("stoveburner", "countertop", "cabinet", "sinkbasin", "fridge"), "cw"),
    "pen": (("bedroom", "livingroom"), _SURFACES + _CONTAINERS, "l"),
    "pencil": (("bedroom",), _SURFACES + _CONTAINERS, "l"),
    "peppershaker": (("kitchen",), ("countertop", "cabinet", "drawer", "shelf", "diningtable"),
                     ""),
    "pillow": (("bedroom", "livingroom"), ("bed", "sofa", "armchair"), "l"),
    "plate": (("kitchen", "livingroom"), _DISH_PLACES + _SURFACES, "hcw"),
    "pot": (("kitchen",), ("stoveburner", "countertop", "cabinet", "sinkbasin", "fridge"), "cw"),
    "potato": (("kitchen",), _FOOD_PLACES, "hcw"),
    "remotecontrol": (("livingroom",), _SURFACES + _CONTAINERS, "l"),
    "saltshaker": (("kitchen",), ("countertop", "cabinet", "drawer", "shelf", "diningtable"), ""),
    "soapbar": (("bathroom",), ("countertop", "sinkbasin", "bathtubbasin", "toilet", "cabinet"),
                "w"),
    "soapbottle": (("kitchen", "bathroom"), ("countertop", "cabinet", "shelf", "toilet"), ""),
    "spatula": (("kitchen",), _DISH_PLACES, "w"),
    "spoon": (("kitchen",), _DISH_PLACES, "w"),
    "spraybottle": (("bathroom",), ("countertop", "cabinet", "toilet", "shelf", "garbagecan"), ""),
    "statue": (("livingroom",), _SURFACES, "l"),
    "tissuebox": (("livingroom", "bathroom"), _SURFACES + ("toilet", "countertop"), ""),
    "toiletpaper": (("bathroom",), ("toiletpaperhanger", "countertop", "toilet", "cabinet",
                                    "shelf"), ""),
    "tomato": (("kitchen",), _FOOD_PLACES, "hcw"),
    "towel": (("bathroom",), ("towelholder", "countertop", "bathtubbasin", "cabinet"), ""),
    "vase": (("livingroom",), _SURFACES, "l"),
    "watch": (("livingroom", "bedroom"), _SURFACES + _CONTAINERS, "l"),
    "winebottle": (("kitchen",), ("countertop", "fridge", "cabinet", "diningtable", "shelf"),
                   "c"),
}
_ANY = frozenset(OBJECTS)

# Receptacle type -> the object types that may be put in or on it (ALFWorld's ``canContain``).
CAN_HOLD: dict[str, frozenset[str]] = {
    "armchair": frozenset({"book", "box", "cellphone", "cloth", "creditcard", "keychain",
        "laptop", "newspaper", "pillow", "remotecontrol"}),
    "bathtubbasin": frozenset({"cloth", "dishsponge", "handtowel", "soapbar"}),
    "bed": frozenset({"book", "cellphone", "laptop", "newspaper", "pillow"}),
    "cabinet": _ANY - {"alarmclock", "apple", "bread", "butterknife", "cellphone", "creditcard",
        "egg", "fork", "keychain", "knife", "laptop", "lettuce", "pen", "pencil", "pillow",
        "potato", "remotecontrol", "spatula", "spoon", "statue", "tomato", "towel", "watch"},
    "coffeemachine": frozenset({"mug"}),
    "coffeetable": _ANY - {"pillow", "towel"},
    "countertop": _ANY - {"pillow", "towel"},
    "desk": _ANY - {"apple", "bread", "butterknife", "dishsponge", "egg", "fork", "handtowel",
        "kettle", "knife", "ladle", "lettuce", "pan", "peppershaker", "pillow", "pot", "potato",
        "saltshaker", "soapbar", "spatula", "spoon", "tomato", "towel"},
    "diningtable": _ANY - {"pillow", "towel"},
    "drawer": _ANY - {"alarmclock", "apple", "bowl", "box", "bread", "cup", "egg", "kettle",
        "laptop", "lettuce", "mug", "pan", "pillow", "plate", "pot", "potato", "statue",
        "tomato", "towel", "vase", "winebottle"},
    "dresser": _ANY - {"apple", "bread", "butterknife", "dishsponge", "egg", "fork",
        "handtowel", "kettle", "knife", "ladle", "lettuce", "pan", "peppershaker", "pillow",
        "pot", "potato", "saltshaker", "soapbar", "soapbottle", "spatula", "spoon", "tomato",
        "towel"},
    "fridge": frozenset({"apple", "bowl", "bread", "cup", "egg", "lettuce", "mug", "pan",
        "plate", "pot", "potato", "tomato", "winebottle"}),
    "garbagecan": frozenset({"apple", "bread", "cd", "cloth", "dishsponge", "egg", "handtowel",
        "lettuce", "newspaper", "pen", "pencil", "potato", "soapbar", "soapbottle",
        "spraybottle", "tissuebox", "toiletpaper", "tomato", "winebottle"}),
    "handtowelholder": frozenset({"handtowel"}),
    "laundryhamper": frozenset({"cloth"}),
    "microwave": frozenset({"apple", "bowl", "bread", "cup", "egg", "mug", "plate", "potato",
        "tomato"}),
    "safe": frozenset({"cd", "cellphone", "creditcard", "keychain", "statue", "vase", "watch"}),
    "shelf": _ANY - {"apple", "bread", "butterknife", "egg", "fork", "knife", "ladle", "laptop",
        "lettuce", "pan", "pillow", "potato", "spatula", "spoon", "tomato", "towel"},
    "sidetable": _ANY - {"pillow", "towel"},
    "sinkbasin": frozenset({"apple", "bowl", "butterknife", "cloth", "cup", "dishsponge", "egg",
        "fork", "handtowel", "kettle", "knife", "ladle", "lettuce", "mug", "pan", "plate",
        "pot", "potato", "soapbar", "spatula", "spoon", "tomato"}),
    "sofa": frozenset({"book", "box", "cellphone", "cloth", "creditcard", "keychain", "laptop",
        "newspaper", "pillow", "remotecontrol"}),
    "stoveburner": frozenset({"kettle", "pan", "pot"}),
    "toaster": frozenset(),
    "toilet": frozenset({"candle", "cloth", "dishsponge", "handtowel", "newspaper", "soapbar",
        "soapbottle", "spraybottle", "tissuebox", "toiletpaper"}),
    "toiletpaperhanger": frozenset({"toiletpaper"}),
    "towelholder": frozenset({"towel"}),
    "tvstand": frozenset({"tissuebox"}),
}

# Object type -> the receptacle types it may start in: those of `OBJECTS` that can hold it.
STARTS: dict[str, tuple[str, ...]] = {
    t: tuple(p for p in places if t in CAN_HOLD[p]) for t, (_, places, _) in OBJECTS.items()}

_LAMP_PLACES = ("desk", "sidetable", "dresser")
ROOMS = ("kitchen", "bathroom", "bedroom", "livingroom")
_PROPERTY = {"heat": "h", "cool": "c", "clean": "w", "look": "l"}


def can_transform(verb: str, object_type: str) -> bool:
    """Whether ``heat``/``cool``/``clean`` (`verb`) applies to objects of `object_type`."""
    return _PROPERTY[verb] in OBJECTS[object_type][2]

# ALFWorld's phrasings of each task type ({o} object type, {r} receptacle type).
TEMPLATES: dict[TaskType, tuple[str, ...]] = {
    "pick": ("put a {o} in {r}.", "put some {o} on {r}."),
    "look": ("look at {o} under the desklamp.", "examine the {o} with the desklamp."),
    "clean": ("put a clean {o} in {r}.", "clean some {o} and put it in {r}."),
    "heat": ("put a hot {o} in {r}.", "heat some {o} and put it in {r}."),
    "cool": ("put a cool {o} in {r}.", "cool some {o} and put it in {r}."),
    "pick2": ("put two {o} in {r}.", "find two {o} and put them in {r}."),
}


@dataclasses.dataclass(frozen=True)
class World:
    """The static part of one task: the room's receptacles and objects, and the goal.

    Receptacles and objects are indexed ``0..R-1`` and ``0..N-1``; ``start`` is the receptacle
    each object starts in. Lamps are objects that cannot be picked up.
    """

    room: str
    receptacles: tuple[str, ...]
    receptacle_types: tuple[str, ...]
    openable: tuple[bool, ...]
    objects: tuple[str, ...]
    object_types: tuple[str, ...]
    start: tuple[int, ...]
    task_type: TaskType
    goal_type: str  # the object type the goal is about
    target_type: str  # the receptacle type to put it in ("" for look tasks)
    goal_text: str
    goal_object: int = -1  # the one object that satisfies the goal (household-pivot), or -1
    clue: str = ""  # the line after the task that tells the goal object from its look-alikes
    mark: str = ""  # what every listing says after the goal object's name (household-pivot)

    @functools.cached_property
    def goal_objects(self) -> int:
        """Bitmask of the objects that can satisfy the goal: every one of the goal type, or
        ``goal_object`` alone where the task names one."""
        return 1 << self.goal_object if self.goal_object >= 0 else self.mask(self.goal_type)

    @functools.cached_property
    def decoys(self) -> int:
        """Bitmask of the goal type's look-alikes that cannot satisfy the goal."""
        return self.mask(self.goal_type) & ~self.goal_objects

    @functools.cached_property
    def index(self) -> dict[str, tuple[str, int]]:
        """Name -> ("r", receptacle index) or ("o", object index)."""
        names = {name: ("r", i) for i, name in enumerate(self.receptacles)}
        names.update({name: ("o", i) for i, name in enumerate(self.objects)})
        return names

    def shown_name(self, obj: int) -> str:
        """How a listing names object ``obj``: its name, and for the goal object its `mark`."""
        name = self.objects[obj]
        return f"{name} {self.mark}" if self.mark and obj == self.goal_object else name

    def mask(self, object_type: str) -> int:
        """Bitmask of the objects of ``object_type``."""
        return sum(1 << i for i, t in enumerate(self.object_types) if t == object_type)

    def receptacle_mask(self, receptacle_type: str) -> int:
        """Bitmask of the receptacles of ``receptacle_type``."""
        return sum(1 << i for i, t in enumerate(self.receptacle_types) if t == receptacle_type)

    @functools.cached_property
    def listing_order(self) -> tuple[int, ...]:
        """The receptacles in the order the room's description lists them: by type, and
        within a type from the highest number down (ALFWorld's order)."""
        def key(r: int) -> tuple[str, int]:
            return self.receptacle_types[r], -int(self.receptacles[r].rsplit(" ", 1)[1])

        return tuple(sorted(range(len(self.receptacles)), key=key))

    @functools.cached_property
    def lamps(self) -> int:
        """Bitmask of the lamp objects."""
        return self.mask(LAMP)


def generate(seed: int, small: bool = False, pivot: bool = False) -> World:
    """The world and goal of one seed; retries layouts until the goal is achievable.
    ``small``: a ``household-small`` room (see the module docstring); ``pivot``: a
    ``household-pivot`` room (`with_lookalikes`), small and of a single-object place task."""
    rng = random.Random(seed)
    if pivot:
        task_type = rng.choices(PIVOT_TASK_TYPES, [TASK_WEIGHTS[TASK_TYPES.index(t)]
                                                   for t in PIVOT_TASK_TYPES])[0]
    else:
        task_type = rng.choices(TASK_TYPES, TASK_WEIGHTS)[0]
    while True:
        world = _try_generate(rng, task_type, small or pivot)
        if world is not None and pivot:
            world = with_lookalikes(rng, world)
        if world is not None:
            return world


PIVOT_TASK_TYPES: tuple[TaskType, ...] = ("pick", "clean", "heat", "cool")
LOOKALIKES = 3


def with_lookalikes(rng: random.Random, world: World) -> World | None:
    """``world`` with exactly `LOOKALIKES` objects of the goal type, each starting in a
    receptacle of its own type, one of them the goal object; the clue names where that one
    starts. None when the room has too few places for them.

    The look-alikes never start in the target, the task's appliance, the fridge (a goal object
    there starts cool) or the garbage can, so that handling one (`env.handled_decoys`) is
    always something the agent did. Receptacle types the look-alikes need and the small room
    lacks are added to it.
    """
    goal = world.goal_type
    excluded = {world.target_type, APPLIANCE.get(world.task_type, ""), APPLIANCE["cool"],
                "garbagecan"}
    allowed = sorted({t for t in STARTS[goal] if t not in excluded
                      and RECEPTACLES[t][1].get(world.room, (0, 0))[1] > 0})
    if len(allowed) < LOOKALIKES:
        return None
    places = rng.sample(allowed, LOOKALIKES)
    receptacle_types = list(world.receptacle_types)
    receptacle_types += [t for t in places if t not in receptacle_types]
    names, types = _number(receptacle_types)
    objects = [(t, r) for t, r in zip(world.object_types, world.start) if t != goal]
    objects += [(goal, types.index(t)) for t in places]
    order = list(range(len(objects)))
    rng.shuffle(order)
    right = order.index(len(objects) - 1 - rng.randrange(LOOKALIKES))
    objects = [objects[i] for i in order]
    object_names, object_types = _number([t for t, _ in objects])
    where = objects[right][1]
    preposition = "in" if RECEPTACLES[types[where]][0] else "on"
    return dataclasses.replace(
        world, receptacles=names, receptacle_types=types,
        openable=tuple(RECEPTACLES[t][0] for t in types), objects=object_names,
        object_types=object_types, start=tuple(r for _, r in objects), goal_object=right,
        clue=f"The {goal} you need is the one {preposition} the {names[where]}.")


def _try_generate(rng: random.Random, task_type: TaskType, small: bool = False) -> World | None:
    room = rng.choice(_rooms_for(task_type))
    receptacle_types = _sample_receptacles(rng, room, small)
    objects = _sample_objects(rng, room, receptacle_types, task_type, small)
    if objects is None:
        return None
    goal = _sample_goal(rng, task_type, room, receptacle_types, objects)
    if goal is None:
        return None
    goal_type, target_type = goal
    if small:
        receptacle_types = _relevant(rng, receptacle_types, objects, task_type, target_type)
    names, types = _number(receptacle_types)
    object_names, object_types = _number([t for t, _ in objects])
    starts = []
    for _, where in objects:
        candidates = [i for i, t in enumerate(types) if t == where]
        starts.append(rng.choice(candidates))
    template = rng.choice(TEMPLATES[task_type])
    return World(
        room=room,
        receptacles=names,
        receptacle_types=types,
        openable=tuple(RECEPTACLES[t][0] for t in types),
        objects=object_names,
        object_types=object_types,
        start=tuple(starts),
        task_type=task_type,
        goal_type=goal_type,
        target_type=target_type,
        goal_text=template.format(o=goal_type, r=target_type),
    )


def _rooms_for(task_type: TaskType) -> tuple[str, ...]:
    if task_type in ("heat", "cool"):
        return ("kitchen",)
    if task_type == "clean":
        return ("kitchen", "bathroom")
    if task_type == "look":
        return ("bedroom", "livingroom")
    return ROOMS


def _sample_receptacles(rng: random.Random, room: str, small: bool = False) -> list[str]:
    chosen = []
    for receptacle_type, (_, rooms) in RECEPTACLES.items():
        low, high = rooms.get(room, (0, 0))
        count = rng.randint(low, high)
        chosen += [receptacle_type] * (min(count, 1) if small else count)
    if room in ("bedroom", "livingroom") and not any(t in _LAMP_PLACES for t in chosen):
        chosen.append("sidetable")
    return chosen


def _sample_objects(rng, room, receptacle_types, task_type, small=False
                    ) -> list[tuple[str, str]] | None:
    """(object type, receptacle type it starts in) for every object of the room."""
    present = set(receptacle_types)
    candidates = [t for t, (rooms, _, _) in OBJECTS.items()
                  if room in rooms and present.intersection(STARTS[t])]
    kinds = rng.sample(candidates, min(len(candidates),
                                       rng.randint(3, 5) if small else rng.randint(8, 14)))
    copies, weights = ((1, 2), (2, 1)) if small else ((1, 2, 3), (5, 3, 1))
    objects = []
    for object_type in kinds:
        places = [p for p in STARTS[object_type] if p in present]
        for _ in range(rng.choices(copies, weights)[0]):
            objects.append((object_type, rng.choice(places)))
    if room in ("bedroom", "livingroom"):
        lamp_places = [p for p in _LAMP_PLACES if p in present]
        objects.append((LAMP, rng.choice(lamp_places)))
    rng.shuffle(objects)
    return objects if objects else None


def _sample_goal(rng, task_type, room, receptacle_types, objects) -> tuple[str, str] | None:
    """(goal object type, target receptacle type), or None when this layout has none."""
    counts: dict[str, int] = {}
    for object_type, _ in objects:
        counts[object_type] = counts.get(object_type, 0) + 1
    needed = 2 if task_type == "pick2" else 1
    prop = _PROPERTY.get(task_type, "")
    goal_types = sorted(t for t, n in counts.items()
                        if t != LAMP and n >= needed and prop in OBJECTS[t][2])
    if task_type in APPLIANCE and APPLIANCE[task_type] not in receptacle_types:
        return None
    if not goal_types:
        return None
    goal_type = rng.choice(goal_types)
    if task_type == "look":
        return goal_type, ""
    starts = {where for t, where in objects if t == goal_type}
    excluded = starts | {APPLIANCE.get(task_type, ""), "garbagecan" if rng.random() < 0.8 else ""}
    targets = sorted(t for t in set(receptacle_types) - excluded if goal_type in CAN_HOLD[t])
    if not targets:
        return None
    return goal_type, rng.choice(targets)


def _relevant(rng, receptacle_types, objects, task_type, target_type) -> list[str]:
    """The receptacle types a small room keeps: where objects start, the target, the
    appliance, and two distractors, in their original order."""
    needed = {where for _, where in objects} | {target_type, APPLIANCE.get(task_type, "")}
    others = sorted(set(receptacle_types) - needed)
    needed |= set(rng.sample(others, min(2, len(others))))
    return [t for t in receptacle_types if t in needed]


def _number(types: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Names ``type k`` numbered from 1 within each type, in order of appearance."""
    seen: dict[str, int] = {}
    names = []
    for t in types:
        seen[t] = seen.get(t, 0) + 1
        names.append(f"{t} {seen[t]}")
    return tuple(names), tuple(types)
