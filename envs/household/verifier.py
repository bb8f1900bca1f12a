"""The household goal check, instrumented as VICT atoms.

For the place tasks (pick, clean, heat, cool) the atoms are a chain:

    acquired  ──►  transformed (clean/heat/cool only)  ──►  placed

``acquired``: some goal object has been picked up; UNK until one has been *seen* (an
observation listed it), so the action that revealed it gets a reveal edge. Seeing is the
atom's evaluability condition, not one of its state variables: looking at more eggs is not a
write. ``transformed``:
some goal object is clean / hot / cold. ``placed``: some goal object sits in a target
receptacle with the transformation; committed by putting a goal object down anywhere.
Pick-two doubles the chain (``acquired_2`` and ``placed_2`` count two distinct objects). Look
tasks are ``acquired``, ``lit`` (a lamp is on; UNK until a lamp was seen) and ``in_light``
(holding a goal object next to a lit lamp; committed by ``use``).

The aggregator is the conjunction of all atoms, which is exactly ALFWorld's goal check
(``envs.household.env.goal_reached``, separate code) on every reachable state and on the
mutations below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from envs.household.env import HELD, NOBODY, State, goal_reached, parse
from envs.household.world import APPLIANCE, World
from envs.verifier import Atom, Kind, Mutation, Role, Status, Verifier, check_atoms

SAT, UNSAT, UNK = Status.SAT, Status.UNSAT, Status.UNK
_FLAG = {"heat": "hot", "cool": "cold", "clean": "clean"}


def _bits(mask: int) -> int:
    return mask.bit_count()


class HouseholdVerifier(Verifier):
    """Atoms, evidence, aggregator, commits and mutations of one household task."""

    def __init__(self, world: World):
        self.world = world
        self.goal_mask = world.mask(world.goal_type)
        self.target_mask = world.receptacle_mask(world.target_type) if world.target_type else 0
        self.atoms = self._atoms()
        check_atoms(self.atoms)

    def _atoms(self) -> tuple[Atom, ...]:
        w = self.world
        goal, target, task_type = w.goal_type, w.target_type, w.task_type
        source = "ALFWorld goal check"
        acquired = Atom(f"acquired:{goal}", Kind.STATE, Role.PREREQUISITE, "acquired",
                        ("taken",), (), irreversible=True, source=source,
                        description=f"a {goal} has been picked up")
        if task_type == "look":
            return (
                acquired,
                Atom("lit:desklamp", Kind.STATE, Role.PREREQUISITE, "lit", ("lit",),
                     (), source=source, description="a desklamp is on"),
                Atom(f"in_light:{goal}", Kind.COMMIT, Role.HARD, "in_light",
                     ("held", "lamp_here"), (0, 1), source=source,
                     description=f"holding a {goal} next to a lit desklamp"),
            )
        placed_vars = ("placed", "flag") if task_type in _FLAG else ("placed",)
        if task_type == "pick2":
            return (
                acquired,
                Atom(f"placed:{goal}:{target}", Kind.COMMIT, Role.HARD, "placed", placed_vars,
                     (0,), source=source, description=f"a {goal} is in a {target}"),
                Atom(f"acquired_2:{goal}", Kind.STATE, Role.PREREQUISITE, "acquired",
                     ("taken",), (0,), irreversible=True, source=source,
                     description=f"two {goal}s have been picked up"),
                Atom(f"placed_2:{goal}:{target}", Kind.COMMIT, Role.HARD, "placed", placed_vars,
                     (1, 2), source=source, description=f"two {goal}s are in a {target}"),
            )
        if task_type == "pick":
            placed_parents: tuple[int, ...] = (0,)
            chain = [acquired]
        else:
            flag = _FLAG[task_type]
            chain = [acquired, Atom(f"{flag}:{goal}", Kind.STATE, Role.PREREQUISITE,
                                    "transformed", ("flag",), (0,), source=source,
                                    description=f"a {goal} is {flag} "
                                                f"({task_type} with {APPLIANCE[task_type]})")]
            placed_parents = (1,)
        chain.append(Atom(f"placed:{goal}:{target}", Kind.COMMIT, Role.HARD, "placed",
                          placed_vars, placed_parents, source=source,
                          description=f"a {flag_word(task_type)}{goal} is in a {target}"))
        return tuple(chain)

    def evidence(self, state: State) -> dict[str, int]:
        """Φ: bitmasks over goal objects (and lamps), plus what look tasks read."""
        w, goal = self.world, self.goal_mask
        placed = 0
        for o, r in enumerate(state.object_location):
            if goal >> o & 1 and r != HELD and self.target_mask >> r & 1:
                placed |= 1 << o
        flags = {"heat": state.hot, "cool": state.cold, "clean": state.clean}
        evidence = {
            "seen": state.seen & goal,
            "taken": state.taken & goal,
            "placed": placed,
            "flag": flags.get(w.task_type, goal) & goal,
        }
        if w.task_type == "look":
            lamps = w.lamps
            here = sum(1 << l for l in range(len(w.objects))
                       if lamps >> l & 1 and state.object_location[l] == state.location)
            evidence.update(
                seen_lamp=state.seen & lamps,
                lit=state.lit & lamps,
                held=state.held if state.held != NOBODY and goal >> state.held & 1 else NOBODY,
                lamp_here=state.lit & here,
            )
        return evidence

    def evaluate(self, evidence: Mapping[str, int]) -> tuple[Status, ...]:
        task_type = self.world.task_type
        acquired = _acquired(evidence, 1)
        if task_type == "look":
            lit = UNK if not evidence["seen_lamp"] else SAT if evidence["lit"] else UNSAT
            in_light = evidence["held"] != NOBODY and evidence["lamp_here"] != 0
            return acquired, lit, SAT if in_light else UNSAT
        placed = _bits(evidence["placed"] & evidence["flag"])
        if task_type == "pick2":
            return (acquired, _at_least(placed, 1), _acquired(evidence, 2), _at_least(placed, 2))
        if task_type == "pick":
            return acquired, _at_least(placed, 1)
        return acquired, _at_least(_bits(evidence["flag"]), 1), _at_least(placed, 1)

    def aggregate(self, statuses: Sequence[Status]) -> float:
        """1 when every atom is satisfied, else 0 (ALFWorld's goal is a conjunction)."""
        return float(all(s == SAT for s in statuses))

    def commits(self, action: str) -> frozenset[int]:
        """Putting a goal object down commits the placement atoms; ``use`` commits a look."""
        parsed = parse(self.world, action)
        if parsed is None:
            return frozenset()
        verb, first, _ = parsed
        if self.world.task_type == "look":
            return frozenset({2}) if verb == "use" else frozenset()
        if verb != "put" or not self.goal_mask >> first & 1:
            return frozenset()
        return frozenset(j for j, atom in enumerate(self.atoms) if atom.kind == Kind.COMMIT)

    def score(self, state: State) -> float:
        return float(goal_reached(self.world, state))

    def mutations(self, state: State) -> list[Mutation]:
        """Wrong receptacle, transformation removed, object swapped, second object dropped."""
        w = self.world
        out = []

        def moved(name: str, family: str, moves: dict[int, int], **changes) -> None:
            locations = list(state.object_location)
            for o, r in moves.items():
                locations[o] = r
            out.append(Mutation(name, state._replace(object_location=tuple(locations), **changes),
                                families=(family,)))

        placed = [o for o, r in enumerate(state.object_location)
                  if self.goal_mask >> o & 1 and r != HELD and self.target_mask >> r & 1]
        elsewhere = [r for r, t in enumerate(w.receptacle_types) if t != w.target_type]
        others = [o for o in range(len(w.objects))
                  if not (self.goal_mask | w.lamps) >> o & 1 and o != state.held]
        if placed and elsewhere:
            moved("wrong receptacle", "placed", {o: elsewhere[0] for o in placed})
        if w.task_type in _FLAG:
            flag = _FLAG[w.task_type]
            moved("transformation removed", "transformed", {},
                  **{flag: getattr(state, flag) & ~self.goal_mask})
        if placed and others:
            swap = {o: w.start[o] for o in placed}
            moved("object swapped", "placed", {**swap, others[0]: state.object_location[placed[0]]})
        if w.task_type == "pick2" and placed:
            moved("second object dropped", "placed", {placed[-1]: w.start[placed[-1]]})
        if w.task_type == "look":
            moved("lamp off", "lit", {}, lit=0)
            if state.held != NOBODY:
                moved("object swapped", "in_light", {state.held: w.start[state.held]}, held=NOBODY)
        return out


def flag_word(task_type: str) -> str:
    """"hot " / "cold " / "clean " for transformation tasks, else ""."""
    return f"{_FLAG[task_type]} " if task_type in _FLAG else ""


def _at_least(count: int, n: int) -> Status:
    return SAT if count >= n else UNSAT


def _acquired(evidence: Mapping[str, int], n: int) -> Status:
    if _bits(evidence["seen"]) < n and _bits(evidence["taken"]) < n:
        return UNK
    return _at_least(_bits(evidence["taken"]), n)
