"""The SearchQA terminal check (normalised exact match), instrumented as VICT atoms.

One evidence atom per hop, then the answer:

    retrieved:hop0  ──►  retrieved:hop1  ──►  …  ──►  answer

``retrieved:hopk`` is SAT once some passage stating hop k's fact has been shown (its variable is
the set of hop k's supporting passages retrieved so far, so only the search that first shows
one of them writes it); it is UNSAT before. Each hop depends on the previous one because its
query needs the bridge entity that hop found. ``answer`` is SAT iff the committed answer
matches a gold answer after normalisation, UNSAT before any answer; every ``<answer>`` turn
commits it. A question without supporting passages (a user file without ``supporting_ids``)
has only the answer atom.

The aggregator is the answer atom alone, because Search-R1's reward is exact match alone: an
answer that happens to be right without evidence still scores 1. So ``F`` reproduces the reward
exactly (η = 0) on every state, and on every mutation below.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING

from envs.base import Task
from envs.searchqa.format import ANSWER, exact_match, normalize_answer, parse_action
from envs.searchqa.retrieval import Question
from envs.verifier import Atom, Kind, Mutation, Role, Status, Verifier, check_atoms

if TYPE_CHECKING:
    from envs.searchqa.env import State

SOURCE = "Search-R1 normalised exact match"


def hop_var(k: int) -> str:
    """The evidence variable of hop ``k``: its supporting passages retrieved so far."""
    return f"retrieved:hop{k}"


class SearchQAVerifier(Verifier):
    """Atoms, evidence, aggregator, commits and mutations of one SearchQA task."""

    def __init__(self, task: Task, question: Question):
        self.task = task
        self.question = question
        self.answer_atom = len(question.hops)
        self._golds = frozenset(normalize_answer(a) for a in question.answers)
        self.atoms = _atoms(question)
        check_atoms(self.atoms)

    def evidence(self, state: State) -> dict[str, Hashable]:
        """Φ: per hop the supporting passage ids shown so far; the normalised answer or None."""
        self._check(state)
        shown = frozenset(state.retrieved)
        evidence: dict[str, Hashable] = {
            hop_var(k): shown.intersection(hop.support) for k, hop in enumerate(self.question.hops)
        }
        evidence["answer"] = None if state.answer is None else normalize_answer(state.answer)
        return evidence

    def evaluate(self, evidence: Mapping[str, Hashable]) -> tuple[Status, ...]:
        """Hop atoms: SAT once a supporting passage was shown; answer: SAT iff it matches."""
        hops = tuple(Status.SAT if evidence[hop_var(k)] else Status.UNSAT
                     for k in range(len(self.question.hops)))
        return (*hops, Status.SAT if evidence["answer"] in self._golds else Status.UNSAT)

    def aggregate(self, statuses: Sequence[Status]) -> float:
        """1 when the answer atom is satisfied, else 0 (the reward is exact match alone)."""
        return float(statuses[self.answer_atom] == Status.SAT)

    def commits(self, action: str) -> frozenset[int]:
        """An ``<answer>`` turn (by Search-R1's first-complete-tag rule) commits the answer."""
        return frozenset({self.answer_atom}) if parse_action(action).kind == ANSWER else frozenset()

    def score(self, state: State) -> float:
        """The environment's reward: exact match of the committed answer, 0 without one."""
        self._check(state)
        return 0.0 if state.answer is None else exact_match(state.answer, self.question.answers)

    def mutations(self, state: State) -> list[Mutation]:
        """Terminal variants: a wrong answer, the gold answer, each hop's evidence removed."""
        self._check(state)
        end = state._replace(done=True)
        out = [Mutation("wrong answer", end._replace(answer=self.question.wrong_answer))]
        if self.score(state) < 1.0:
            out.append(Mutation("gold answer", end._replace(answer=self.question.answers[0])))
        for k, hop in enumerate(self.question.hops):
            kept = tuple(d for d in state.retrieved if d not in hop.support)
            if kept != state.retrieved:
                out.append(Mutation(f"missing evidence for hop {k}", end._replace(retrieved=kept)))
        return out

    def _check(self, state: State) -> None:
        if state.task != self.task:
            raise ValueError(f"searchqa verifier of {self.task} got a state of {state.task}")


def _atoms(question: Question) -> tuple[Atom, ...]:
    hops = tuple(
        Atom(hop_var(k), Kind.EVIDENCE, Role.PREREQUISITE, "retrieved", (hop_var(k),),
             (k - 1,) if k else (), irreversible=True,
             source=f"supporting passages {', '.join(hop.support)}",
             description=f"a passage stating {hop.need or f'hop {k}'} has been retrieved")
        for k, hop in enumerate(question.hops))
    answer = Atom("answer", Kind.COMMIT, Role.HARD, "answer", ("answer",),
                  tuple(range(len(hops))), irreversible=True, source=SOURCE,
                  description=f"the answer matches one of {list(question.answers)}")
    return (*hops, answer)
