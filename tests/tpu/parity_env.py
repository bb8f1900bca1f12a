"""A one-action environment whose reward a random model earns about half the time: the reply
wins when its text has an even number of characters. Groups of a random model's episodes are
mixed, so an update depends on exactly which tokens were sampled (what the multi-process
trainer test needs). Its verifier has one commit atom, so VICT runs on it too.

Importing this module registers it as ``parity``.
"""

from __future__ import annotations

import envs
from envs.base import Env, Step
from envs.verifier import Atom, Kind, Mutation, Role, Status, Verifier

NAME = "parity"


def even(reply: str | None) -> bool:
    return reply is not None and len(reply) % 2 == 0


class ParityVerifier(Verifier):
    """One hard commit atom, "even": SAT once the reply is even, UNSAT once it is odd. A
snapshot is ``(reply,)``, None before the reply."""

    atoms = (Atom("even", Kind.COMMIT, Role.HARD, "parity", ("reply",)),)

    def evidence(self, state):
        return {"reply": state[0]}

    def evaluate(self, evidence):
        reply = evidence["reply"]
        if reply is None:
            return (Status.UNK,)
        return (Status.SAT if even(reply) else Status.UNSAT,)

    def aggregate(self, statuses):
        return float(statuses[0] == Status.SAT)

    def commits(self, action):
        return frozenset({0})

    def mutations(self, state):
        reply = state[0]
        return [] if reply is None else [Mutation("one more character", (reply + "x",),
                                                  ("parity",))]

    def score(self, state):
        return float(even(state[0]))


class Parity(Env):
    name = NAME
    max_turns = 1

    def __init__(self):
        self._reply: str | None = None

    def split_size(self, split):
        return 8

    def reset(self, task):
        self.check_task(task)
        self._reply = None
        return "Reply with an even number of characters."

    def step(self, action):
        self.check_action(action)
        self._reply = action
        return Step("done", True, float(even(action)), {"valid": True, "truncated": False})

    def snapshot(self):
        return (self._reply,)

    def restore(self, state):
        (self._reply,) = state

    def verifier(self, task=None):
        return ParityVerifier()

    def instruction(self):
        return "Answer in one reply."

    def expert_action(self):
        return "ok"

    def random_action(self, rng):
        return "x" * rng.randint(1, 4)


envs.register(NAME, Parity)
