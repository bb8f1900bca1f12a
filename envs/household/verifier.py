"""The household goal check, instrumented as VICT atoms.

For the place tasks (pick, clean, heat, cool) the atoms are:

    found:<object>  ──►  acquired  ──►  brought  ──►  transformed  ──►  placed
                                                                          ▲
                                                  found:<receptacle>  ────┘

(``brought`` and ``transformed`` for clean, heat and cool only). ``found:<object>``: some goal
object has been seen (an observation listed it); the action whose observation first listed one
writes it, and more sightings are not writes. ``acquired``: some goal object has been picked
up. ``brought``: a goal object has been brought to the task's appliance (sinkbasin, microwave,
fridge): the agent holds it there, or it already has the transformation, which only happens
there; the ``go to`` that carries it there (or the take, if it lay there) writes it, and
leaving without the transformation undoes it. ``transformed``: some goal object is
clean / hot / cold. ``found:<receptacle>``: a receptacle of the target type has been found,
i.e. the agent has seen its contents (reached it, and opened it if it is closed); the action
that first showed one (`envs.household.env.State.explored`) writes it. ``placed``: some goal
object sits in a target receptacle with the transformation; committed by putting a goal object
down anywhere. It is VIOL rather than UNSAT while the target holds a wrong placement instead: a
goal object without its transformation (premature placement) or another object the agent put
there (wrong object). The action that made it VIOL gets a violation edge if the violation is
still there at the end. Pick-two is the pick chain followed by the second-object atoms
``acquired_2`` (after ``acquired``) and ``placed_2`` (after ``placed`` and ``acquired_2``): two
distinct objects; ``acquired_2`` is UNK until a second goal object has been seen, so the action
that showed it gets a reveal edge. Look tasks are ``found`` ──► ``acquired`` and
``found:desklamp`` (a lamp has been seen) ──► ``lit`` (a lamp is on; UNK until a lamp was
seen), both ──► ``in_light`` (holding a goal object next to a lit lamp; committed by ``use``).

The evidence is per goal object: ``taken:<object>`` (how often it was picked up),
``placed:<object>`` (it lies in a target receptacle) and ``flag:<object>`` (it has the
transformation); ``acquired``, ``transformed`` and ``placed`` read those of every goal object.
A write edge goes to the last action that changed a variable (``vict_jax.trace``), so they make each
object's own last take, transformation and put the witnesses: with one bitmask over all goal
objects, the writes of the second object of a pick-two task would overwrite the first's, and an
"ever taken" mask would credit the first take of an object that was put down and taken again.
Once a goal object is delivered (placed with its transformation; in a look task, held at the
end), ``witness_vars`` narrows those atoms to its variables: a goal object taken on a detour and
left elsewhere shares none of ``acquired``'s credit.
The ``found`` atoms and ``brought`` read one flag each (``found``, ``target_found``,
``lamp_found``, ``brought``), so their witness is the action that set it.

These are the ALFWorld families of the VICT paper (Table 10): target object identity
(``found``), receptacle found (``receptacle_found``; for look tasks the lamp, ``lamp_found``),
object held (``acquired``), transformation, final placement, second-object requirement
(``acquired_2``, ``placed_2``), and the wrong-object or premature-placement violation
(``placed`` VIOL); ``brought`` (family ``appliance``) is the appliance reached on the path to the
transformation, the support path of the paper's Table 13. The aggregator is the conjunction of
all atoms, which is exactly ALFWorld's goal check (``envs.household.env.goal_reached``,
separate code) on every reachable state and on the mutations below: a goal object lies
transformed in a target receptacle only if it was seen, taken, brought to the appliance and
transformed there, and carried to a target receptacle whose contents the agent then saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from envs.household.env import (
    HELD,
    MIDDLE,
    NOBODY,
    State,
    goal_reached,
    handled_decoys,
    parse,
)
from envs.household.world import APPLIANCE, LAMP, World
from envs.verifier import (
    Atom,
    Kind,
    Mutation,
    Role,
    Status,
    Verifier,
    check_atoms,
    witnessed_without,
)

SAT, UNSAT, UNK, VIOL = Status.SAT, Status.UNSAT, Status.UNK, Status.VIOL
_FLAG = {"heat": "hot", "cool": "cold", "clean": "clean"}


def _bits(mask: int) -> int:
    return mask.bit_count()


class HouseholdVerifier(Verifier):
    """Atoms, evidence, aggregator, commits and mutations of one household task."""

    def __init__(self, world: World):
        self.world = world
        self.goal_mask = world.goal_objects
        self.target_mask = world.receptacle_mask(world.target_type) if world.target_type else 0
        self.started_in_target = sum(1 << o for o, r in enumerate(world.start)
                                     if self.target_mask >> r & 1)
        self.goals = tuple(o for o in range(len(world.objects)) if self.goal_mask >> o & 1)
        self.variables = {kind: tuple(f"{kind}:{world.objects[o]}" for o in self.goals)
                          for kind in ("taken", "placed", "flag")}
        self.atoms = self._atoms()
        check_atoms(self.atoms)

    def _atoms(self) -> tuple[Atom, ...]:
        w, variables = self.world, self.variables
        goal, target, task_type = w.goal_type, w.target_type, w.task_type
        source = "ALFWorld goal check"
        found = Atom(f"found:{goal}", Kind.EVIDENCE, Role.PREREQUISITE, "found", ("found",),
                     irreversible=True, source=source, description=f"a {goal} has been seen")
        acquired = Atom(f"acquired:{goal}", Kind.STATE, Role.PREREQUISITE, "acquired",
                        variables["taken"], (0,), irreversible=True, source=source,
                        description=f"a {goal} has been picked up")
        if task_type == "look":
            return (
                found, acquired,
                Atom(f"found:{LAMP}", Kind.EVIDENCE, Role.PREREQUISITE, "lamp_found",
                     ("lamp_found",), irreversible=True, source=source,
                     description=f"a {LAMP} has been seen"),
                Atom(f"lit:{LAMP}", Kind.STATE, Role.PREREQUISITE, "lit", ("lit",), (2,),
                     source=source, description=f"a {LAMP} is on"),
                Atom(f"in_light:{goal}", Kind.COMMIT, Role.HARD, "in_light",
                     ("held", "lamp_here"), (1, 3), source=source,
                     description=f"holding a {goal} next to a lit {LAMP}"),
            )
        chain = [found, acquired]
        if task_type in _FLAG:
            flag, appliance = _FLAG[task_type], APPLIANCE[task_type]
            chain += [
                Atom(f"brought:{goal}:{appliance}", Kind.STATE, Role.PREREQUISITE, "appliance",
                     ("brought",), (1,), source=source,
                     description=f"a {goal} has been brought to a {appliance} (held there, "
                                 f"or already {flag})"),
                Atom(f"{flag}:{goal}", Kind.STATE, Role.PREREQUISITE, "transformed",
                     variables["flag"], (2,), source=source,
                     description=f"a {goal} is {flag} ({task_type} with {appliance})"),
            ]
        target_found = len(chain)
        chain.append(Atom(f"found:{target}", Kind.EVIDENCE, Role.PREREQUISITE,
                          "receptacle_found", ("target_found",), irreversible=True,
                          source=source, description=f"a {target} has been found (its "
                                                     "contents seen)"))
        placed_vars = variables["placed"] + (variables["flag"] if task_type in _FLAG else ())
        chain.append(Atom(f"placed:{goal}:{target}", Kind.COMMIT, Role.HARD, "placed",
                          placed_vars, (target_found - 1, target_found), source=source,
                          description=f"a {flag_word(task_type)}{goal} is in a {target}"))
        if task_type == "pick2":
            chain += [
                Atom(f"acquired_2:{goal}", Kind.STATE, Role.PREREQUISITE, "acquired",
                     variables["taken"], (1,), irreversible=True, source=source,
                     description=f"two {goal}s have been picked up"),
                Atom(f"placed_2:{goal}:{target}", Kind.COMMIT, Role.HARD, "placed", placed_vars,
                     (3, 4), source=source, description=f"two {goal}s are in a {target}"),
            ]
        return tuple(chain)

    def evidence(self, state: State) -> dict[str, int]:
        """Φ: the per-goal-object variables and the flags the ``found`` atoms and ``brought``
        read (module docstring), the goal objects seen (a bitmask), the wrong placements, and
        what look tasks read."""
        w, goal = self.world, self.goal_mask
        in_target = 0
        for o, r in enumerate(state.object_location):
            if r != HELD and self.target_mask >> r & 1:
                in_target |= 1 << o
        flags = {"heat": state.hot, "cool": state.cold, "clean": state.clean}
        flag = flags.get(w.task_type, goal) & goal
        evidence = {
            "seen": state.seen & goal,
            "found": int(state.seen & goal != 0),
            "target_found": int(state.explored & self.target_mask != 0),
            # put there by the agent: a goal object without its transformation, or another one
            "misplaced": (in_target & state.taken & ~flag & ~self.started_in_target
                          if w.task_type != "look" else 0),
        }
        for o in self.goals:
            name = w.objects[o]
            evidence.update({f"taken:{name}": state.takes[o],
                             f"placed:{name}": in_target >> o & 1, f"flag:{name}": flag >> o & 1})
        if w.task_type in _FLAG:
            evidence["brought"] = int(flag != 0 or _at_appliance(w, state, goal))
        if w.task_type == "look":
            lamps = w.lamps
            here = sum(1 << l for l in range(len(w.objects))
                       if lamps >> l & 1 and state.object_location[l] == state.location)
            evidence.update(
                lamp_found=int(state.seen & lamps != 0),
                lit=state.lit & lamps,
                held=state.held if state.held != NOBODY and goal >> state.held & 1 else NOBODY,
                lamp_here=state.lit & here,
            )
        return evidence

    def evaluate(self, evidence: Mapping[str, int]) -> tuple[Status, ...]:
        task_type, variables = self.world.task_type, self.variables
        found = _sat(evidence["found"])
        taken = sum(evidence[v] > 0 for v in variables["taken"])
        acquired = _at_least(taken, 1)
        if task_type == "look":
            lit = UNK if not evidence["lamp_found"] else _sat(evidence["lit"])
            in_light = evidence["held"] != NOBODY and evidence["lamp_here"] != 0
            return found, acquired, _sat(evidence["lamp_found"]), lit, _sat(in_light)
        chain = [found, acquired]
        if task_type in _FLAG:
            flagged = sum(evidence[f] for f in variables["flag"])
            chain += [_sat(evidence["brought"]), _at_least(flagged, 1)]
        placed = sum(evidence[p] and evidence[f]
                     for p, f in zip(variables["placed"], variables["flag"]))
        misplaced = evidence["misplaced"] != 0
        chain += [_sat(evidence["target_found"]), _placed(placed, 1, misplaced)]
        if task_type == "pick2":
            acquired_2 = UNK if _bits(evidence["seen"]) < 2 and taken < 2 else _at_least(taken, 2)
            chain += [acquired_2, _placed(placed, 2, misplaced)]
        return tuple(chain)

    def aggregate(self, statuses: Sequence[Status]) -> float:
        """1 when every atom is satisfied, else 0 (ALFWorld's goal is a conjunction)."""
        return float(all(s == SAT for s in statuses))

    def witness_vars(self, final: Mapping[str, int]) -> dict[int, tuple[str, ...]]:
        """Once a goal object is delivered (placed in a target with the transformation, or held
        in a look task), the per-object atoms it satisfies are witnessed by its own take,
        transformation and put, not by those of a goal object handled on a detour."""
        names = [self.world.objects[o] for o in self.goals]
        if self.world.task_type == "look":
            delivered = {self.world.objects[final["held"]]} if final["held"] != NOBODY else set()
        else:
            delivered = {n for n in names if final[f"placed:{n}"] and final[f"flag:{n}"]}
        if not delivered:
            return {}
        return witnessed_without(self, final, {f"{kind}:{n}": 0 for n in names
                                               if n not in delivered
                                               for kind in ("taken", "placed", "flag")})

    def commits(self, action: str) -> frozenset[int]:
        """Putting a goal object down commits the placement atoms; ``use`` commits a look."""
        parsed = parse(self.world, action)
        if parsed is None:
            return frozenset()
        verb, first, _ = parsed
        if self.world.task_type == "look":
            committing = verb == "use"
        else:
            committing = verb == "put" and bool(self.goal_mask >> first & 1)
        if not committing:
            return frozenset()
        return frozenset(j for j, atom in enumerate(self.atoms) if atom.kind == Kind.COMMIT)

    def score(self, state: State) -> float:
        return float(goal_reached(self.world, state))

    def mutations(self, state: State) -> list[Mutation]:
        """Wrong receptacle, transformation removed (a premature placement), object swapped
        (a wrong object placed), second object dropped, target never found (no goal object
        seen); look tasks: lamp off, object swapped (the goal object put down). The target
        receptacle's and the lamp's ``found`` and ``brought`` have none of their own: an atom
        that depends on each (placed, lit, transformed) implies it, so a state that breaks only
        them is not reachable."""
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
        others = [o for o in range(len(w.objects)) if o != state.held
                  and not (self.goal_mask | w.lamps | self.started_in_target) >> o & 1]
        if placed and elsewhere:
            moved("wrong receptacle", "placed", {o: elsewhere[0] for o in placed})
        if w.task_type in _FLAG:
            flag = _FLAG[w.task_type]
            moved("transformation removed", "transformed", {},
                  **{flag: getattr(state, flag) & ~self.goal_mask})
        if placed and others:
            swap = {o: w.start[o] for o in placed}
            moved("object swapped", "placed", {**swap, others[0]: state.object_location[placed[0]]},
                  takes=tuple(n + (o == others[0]) for o, n in enumerate(state.takes)))
        if w.task_type == "pick2" and placed:
            moved("second object dropped", "placed", {placed[-1]: w.start[placed[-1]]})
        goals = self.goals
        moved("target never found", "found", {o: w.start[o] for o in goals},
              seen=state.seen & ~self.goal_mask,
              takes=tuple(0 if o in goals else n for o, n in enumerate(state.takes)),
              held=NOBODY if state.held in goals else state.held)
        if w.task_type == "look":
            moved("lamp off", "lit", {}, lit=0)
            if state.held != NOBODY:
                moved("object swapped", "in_light", {state.held: w.start[state.held]}, held=NOBODY)
        return out


class PivotVerifier(HouseholdVerifier):
    """household-pivot's goal check: the household atoms over the goal object alone (the one
    the clue names), then ``untouched:<goal type>``, SAT until a look-alike is given the task's
    transformation or put in a target and VIOL from then on (which also ends the episode). Its
    violation edge goes to the action that handled the look-alike."""

    def _atoms(self) -> tuple[Atom, ...]:
        w = self.world
        made = f"made {flag_word(w.task_type)}or " if w.task_type in _FLAG else ""
        return super()._atoms() + (
            Atom(f"untouched:{w.goal_type}", Kind.STATE, Role.HARD, "wrong_object",
                 ("decoys_handled",), irreversible=True, source="household-pivot rules",
                 description=f"no look-alike {w.goal_type} has been "
                             f"{made}put in a {w.target_type}"),)

    def evidence(self, state: State) -> dict[str, int]:
        """The household evidence and ``decoys_handled``: the look-alikes handled (a
        bitmask, `env.handled_decoys`)."""
        return {**super().evidence(state), "decoys_handled": handled_decoys(self.world, state)}

    def evaluate(self, evidence: Mapping[str, int]) -> tuple[Status, ...]:
        return super().evaluate(evidence) + (VIOL if evidence["decoys_handled"] else SAT,)

    def mutations(self, state: State) -> list[Mutation]:
        """The household mutations, and a look-alike put in the target."""
        w = self.world
        decoys = [o for o in range(len(w.objects)) if w.decoys >> o & 1 and o != state.held]
        targets = [r for r, t in enumerate(w.receptacle_types) if t == w.target_type]
        locations = list(state.object_location)
        locations[decoys[0]] = targets[0]
        return super().mutations(state) + [Mutation(
            "look-alike placed", state._replace(object_location=tuple(locations)),
            families=("wrong_object",))]


def flag_word(task_type: str) -> str:
    """"hot " / "cold " / "clean " for transformation tasks, else ""."""
    return f"{_FLAG[task_type]} " if task_type in _FLAG else ""


def _sat(holds: object) -> Status:
    return SAT if holds else UNSAT


def _at_least(count: int, n: int) -> Status:
    return SAT if count >= n else UNSAT


def _at_appliance(world: World, state: State, goal_mask: int) -> bool:
    """The agent holds a goal object at a receptacle of the task's appliance type."""
    return (state.held != NOBODY and bool(goal_mask >> state.held & 1)
            and state.location != MIDDLE
            and world.receptacle_types[state.location] == APPLIANCE[world.task_type])


def _placed(count: int, n: int, misplaced: bool) -> Status:
    """SAT with `n` goal objects placed; else VIOL if a wrong placement is there."""
    return SAT if count >= n else VIOL if misplaced else UNSAT
