"""Core search and marginals against brute force on random atom sets and dependency DAGs."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from envs.verifier import Status
from vict_jax.core import CoreConfig, attribute

SAT, UNSAT, UNK, VIOL = Status.SAT, Status.UNSAT, Status.UNK, Status.VIOL


@st.composite
def instances(draw):
    """Random parents (a DAG in topological order), statuses and a monotone aggregator."""
    m = draw(st.integers(1, 6))
    parents = [sorted(draw(st.sets(st.integers(0, j - 1), max_size=2))) if j else []
               for j in range(m)]
    statuses = draw(st.lists(st.sampled_from([SAT, SAT, UNSAT, UNK, VIOL]), min_size=m,
                             max_size=m))
    weights = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=m, max_size=m))
    conjunctive = draw(st.booleans())

    def aggregate(z):
        if conjunctive:
            return float(all(z[j] == SAT for j in range(m) if weights[j] > 0))
        return sum(w for w, s in zip(weights, z) if s == SAT) / (sum(weights) or 1.0)

    advantage = draw(st.sampled_from([-1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0]))
    return parents, statuses, aggregate, advantage


def closure_down(parents, atoms):
    out = set(atoms)
    while True:
        more = {j for j, ps in enumerate(parents) if set(ps) & out} - out
        if not more:
            return out
        out |= more


def ancestors(parents, atoms):
    out = set()
    while True:
        more = {p for j in set(atoms) | out for p in parents[j]} - out
        if not more:
            return out
        out |= more


def closure_up(parents, statuses, atoms):
    """The atoms and every unsatisfied ancestor, also one reached through satisfied atoms."""
    return set(atoms) | {a for a in ancestors(parents, atoms) if statuses[a] in (UNSAT, VIOL)}


def game(parents, statuses, aggregate, q):
    base = aggregate(statuses)

    def value(atoms):
        z = list(statuses)
        if q > 0:
            for j in closure_down(parents, atoms):
                z[j] = UNSAT
            return base - aggregate(z)
        for j in closure_up(parents, statuses, atoms):
            z[j] = SAT
        return aggregate(z) - base
    return value


def shapley_by_permutations(value, players):
    phi = dict.fromkeys(players, 0.0)
    orders = list(itertools.permutations(players))
    for order in orders:
        for k, j in enumerate(order):
            phi[j] += (value(order[: k + 1]) - value(order[:k])) / len(orders)
    return phi


@settings(max_examples=200)
@given(instances())
def test_core_and_shapley_match_brute_force(instance):
    parents, statuses, aggregate, advantage = instance
    found = attribute(aggregate, statuses, parents, advantage)
    if advantage == 0.0:
        assert found.reason == "near-tie" and not found.marginals
        return
    q = 1 if advantage > 0 else -1
    rho = 0.5 * abs(advantage)
    value = game(parents, statuses, aggregate, q)
    wanted = (SAT,) if q > 0 else (UNSAT, VIOL)
    candidates = [j for j, s in enumerate(statuses) if s in wanted]
    reachable = any(value(s) >= rho for n in range(len(candidates) + 1)
                    for s in itertools.combinations(candidates, n))
    if found.reason == "core-search-failed":
        assert not reachable
        return
    assert reachable and found.reason is None
    generators = found.generators
    assert value(generators) >= rho
    for g in generators:  # locally minimal after the deletion pass
        assert value([x for x in generators if x != g]) < rho
    closure = closure_down if q > 0 else (lambda p, a: closure_up(p, statuses, a))
    assert found.core == frozenset(closure(parents, generators))
    core = sorted(found.core)
    phi = shapley_by_permutations(value, core)
    for j in core:
        assert found.marginals[j] == pytest.approx(q * phi[j], abs=1e-9)
    assert sum(found.marginals[j] for j in core) == pytest.approx(q * value(core), abs=1e-9)
    if q < 0:
        repaired = list(statuses)
        for j in core:
            repaired[j] = SAT
        prerequisites = {a for a in ancestors(parents, core) if statuses[a] == SAT} - set(core)
        assert found.prerequisites == frozenset(prerequisites)
        support = shapley_by_permutations(game(parents, repaired, aggregate, +1),
                                          sorted(prerequisites | set(core)))
        for j in prerequisites:
            assert found.marginals[j] == pytest.approx(support[j], abs=1e-9)
    assert set(found.marginals) == found.core | found.prerequisites


def test_conjunctive_chain_shapley_and_leave_one_out():
    # acquired -> heated -> placed, all satisfied: removing any one unsatisfies the goal, so
    # each atom's Shapley value is 1/3, while leave-one-out is 0 for all (SPEC §4.4).
    parents = [[], [0], [1]]
    chain = attribute(lambda z: float(all(s == SAT for s in z)), [SAT] * 3, parents, 1.0)
    assert chain.generators == (0,) and chain.core == {0, 1, 2}
    assert chain.marginals == pytest.approx({0: 1 / 3, 1: 1 / 3, 2: 1 / 3})
    loo = attribute(lambda z: float(all(s == SAT for s in z)), [SAT] * 3, parents, 1.0,
                    config=CoreConfig(marginal="loo"))
    assert loo.marginals == {0: 0.0, 1: 0.0, 2: 0.0}


def test_budget_and_uncertainty_band():
    # Score = fraction of 4 independent satisfied atoms; ρ = 0.5 · 1.0 needs two removals.
    def fraction(z):
        return sum(s == SAT for s in z) / 4

    parents = [[], [], [], []]
    assert attribute(fraction, [SAT] * 4, parents, 1.0).generators == (0, 1)
    tight = attribute(fraction, [SAT] * 4, parents, 1.0, config=CoreConfig(budget=1))
    assert tight.reason == "budget" and tight.budget_hit and not tight.marginals
    band = attribute(fraction, [SAT] * 4, parents, 1.0, config=CoreConfig(eta=0.05))
    assert band.reason == "uncertainty-band"
    assert attribute(fraction, [SAT] * 4, parents, 1e-7).reason == "near-tie"


def test_unrevealed_prerequisite_blocks_repair():
    # The goal object was never seen (UNK): repairing the placement cannot reach the goal.
    found = attribute(lambda z: float(all(s == SAT for s in z)), [UNK, UNSAT, UNSAT],
                      [[], [0], [1]], -1.0)
    assert found.reason == "core-search-failed"


def test_a_failure_behind_many_unsatisfied_prerequisites_still_finds_its_core():
    # ten unsatisfied atoms in a chain, a conjunction: repairing the last one repairs them all,
    # so the greedy search must not spend its 8 additions on the prerequisites that come first
    parents = [()] + [(j,) for j in range(9)]
    statuses = [UNSAT] * 10

    def conjunction(z):
        return float(all(s == SAT for s in z))

    found = attribute(conjunction, statuses, parents, -1.0, config=CoreConfig(budget=8))
    assert found.reason is None and found.generators == (9,)
    assert found.core == frozenset(range(10))


def _conjunction(z):
    return float(all(s == SAT for s in z))


def test_a_success_core_is_the_largest_closure_within_the_exact_budget():
    # tau's shape: every record's lookup depends on the authentication, every field on its
    # record's lookup. All satisfied, every candidate's removal fails the conjunction: all tie,
    # and the authentication's closure (13 atoms) is too large for exact marginals, so the
    # search takes the first lookup's (4 atoms) instead of abstaining for budget
    parents = [()] + [(0,)] * 3 + [(1 + k // 3,) for k in range(9)]
    found = attribute(_conjunction, [SAT] * 13, parents, 1.0, config=CoreConfig(max_exact=8))
    assert found.reason is None and not found.budget_hit
    assert found.generators == (1,) and found.core == {1, 4, 5, 6}
    assert found.marginals == pytest.approx(dict.fromkeys((1, 4, 5, 6), 0.25))
    assert attribute(_conjunction, [SAT] * 13, parents, 1.0).generators == (0,)


def test_a_core_beyond_the_exact_budget_abstains_for_budget_only_when_reachable():
    # a failed chain of ten: only the whole chain's repair reaches ρ
    parents = [()] + [(j,) for j in range(9)]
    tight = attribute(_conjunction, [UNSAT] * 10, parents, -1.0, config=CoreConfig(max_exact=5))
    assert tight.reason == "budget" and tight.budget_hit and not tight.marginals
    blocked = attribute(_conjunction, [UNK] + [UNSAT] * 9, parents, -1.0,
                        config=CoreConfig(max_exact=5))
    assert blocked.reason == "core-search-failed" and not blocked.budget_hit
