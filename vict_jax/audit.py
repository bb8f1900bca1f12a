"""Conformance audit of a verifier interface (SPEC §4.2).

Reconstruction: ``|F(z̄(τ)) - V(τ)| <= η`` on terminal states of rollouts. Mutation
conformance: the same on verifier-relevant mutations of them. A verifier whose reconstruction
fails, or whose failing mutations do not name atom families, is rejected for the task (VICT
emits nothing for it); when every failure is a mutation naming families, those families are
masked and the rest of the interface stays in use.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Hashable, Sequence

from envs.base import Env, Task
from envs.verifier import Verifier, check_atoms
from vict_jax.pipeline import play


@dataclasses.dataclass(frozen=True)
class Audit:
    """Outcome of an audit; percentages are of the audited examples."""

    reconstruction_pct: float
    mutation_pct: float
    examples: int
    mutations: int
    accepted: bool  # False: the aggregator failed; VICT is off for these tasks
    masked_families: frozenset[str]
    failures: tuple[str, ...]  # a description of each failure, for the log


def audit(verifier: Verifier, states: Sequence[Hashable],
          rewards: Sequence[float] | None = None, eta: float = 0.0) -> Audit:
    """Audits ``verifier`` on terminal ``states`` (V = ``rewards``, or ``verifier.score``)."""
    check_atoms(verifier.atoms)
    failures, masked = [], set()
    accepted = True
    reconstructed = mutated = mutation_ok = 0
    for i, state in enumerate(states):
        target = verifier.score(state) if rewards is None else rewards[i]
        error = abs(verifier.aggregate(verifier.statuses(state)) - target)
        if error <= eta:
            reconstructed += 1
        else:
            accepted = False
            failures.append(f"rollout {i}: |F - V| = {error:g}")
        for mutation in verifier.mutations(state):
            mutated += 1
            error = abs(verifier.aggregate(verifier.statuses(mutation.state))
                        - verifier.score(mutation.state))
            if error <= eta:
                mutation_ok += 1
                continue
            failures.append(f"rollout {i}, mutation {mutation.name!r}: |F - V| = {error:g}")
            if mutation.families:
                masked.update(mutation.families)
            else:
                accepted = False
    return Audit(
        reconstruction_pct=100.0 * reconstructed / max(len(states), 1),
        mutation_pct=100.0 * mutation_ok / max(mutated, 1),
        examples=len(states), mutations=mutated, accepted=accepted,
        masked_families=frozenset(masked), failures=tuple(failures))


def audit_environment(env: Env, tasks: Sequence[Task], random_rates=(0.0, 0.3, 1.0),
                      seed: int = 0, eta: float = 0.0) -> Audit:
    """Audits an environment's verifiers on expert, perturbed and random rollouts.

    Each task runs one episode per entry of ``random_rates``: every action is random with that
    probability and the expert's otherwise, so successes, near-misses and failures (episodes
    that hit the turn limit) are all audited.
    """
    rng = random.Random(seed)
    results = []
    for task in tasks:
        rollouts = [play(env, task, rate, rng) for rate in random_rates]
        results.append(audit(env.verifier(task), [r.states[-1] for r in rollouts],
                             [r.reward for r in rollouts], eta))
    return merge(results)


def merge(audits: Sequence[Audit]) -> Audit:
    """One audit summarising several (e.g. every task of a task family)."""
    examples = sum(a.examples for a in audits)
    mutations = sum(a.mutations for a in audits)
    return Audit(
        reconstruction_pct=sum(a.reconstruction_pct * a.examples for a in audits)
        / max(examples, 1),
        mutation_pct=sum(a.mutation_pct * a.mutations for a in audits) / max(mutations, 1),
        examples=examples, mutations=mutations,
        accepted=all(a.accepted for a in audits),
        masked_families=frozenset().union(*(a.masked_families for a in audits)),
        failures=tuple(f for a in audits for f in a.failures))
