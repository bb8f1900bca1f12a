"""A verifier whose state *is* the status vector: for exercising VICT without an environment.

State: a tuple of ints (one ``Status`` per atom). Atom j reads variable ``z{j}`` (none for
terminal atoms, which therefore never get a write edge); ``commit j`` commits atom j.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from envs.verifier import Atom, Kind, Mutation, Role, Status, Verifier, check_atoms


def conjunction(statuses: Sequence[Status]) -> float:
    return float(all(s == Status.SAT for s in statuses))


class SyntheticVerifier(Verifier):
    def __init__(self, parents: Sequence[Sequence[int]],
                 aggregate: Callable[[Sequence[Status]], float] = conjunction,
                 kinds: Sequence[Kind] | None = None, families: Sequence[str] | None = None):
        kinds = kinds or [Kind.STATE] * len(parents)
        families = families or [f"f{j}" for j in range(len(parents))]
        self.atoms = tuple(
            Atom(f"a{j}", kind, Role.HARD, family,
                 () if kind == Kind.TERMINAL else (f"z{j}",), tuple(p))
            for j, (p, kind, family) in enumerate(zip(parents, kinds, families)))
        check_atoms(self.atoms)
        self._aggregate = aggregate

    def evidence(self, state):
        return {f"z{j}": s for j, s in enumerate(state)}

    def evaluate(self, evidence):
        return tuple(Status(evidence[f"z{j}"]) for j in range(len(self.atoms)))

    def aggregate(self, statuses):
        return self._aggregate(statuses)

    def commits(self, action):
        verb, _, j = action.partition(" ")
        return frozenset({int(j)}) if verb == "commit" else frozenset()

    def mutations(self, state):
        return [Mutation("first atom unsatisfied", (Status.UNSAT, *state[1:]), ("f0",))]

    def score(self, state):
        return self._aggregate(self.evaluate(self.evidence(state)))
