"""VICT credit on scripted tau-bench groups: cores within the exact budget, and fields that
several ground-truth calls write in turn."""

from __future__ import annotations

import envs
from envs.verifier import Status
from tests.vict_jax.test_pipeline import _expert_actions, _played, _tau_credit, _without


def _credited(env_name: str, index: int, variant):
    """The test task's expert and ``variant(expert)`` played twice each (two successes, two
    failures) and credited: (expert actions, variant actions, the group, VICT's corrections)."""
    env = envs.make(env_name)
    task = envs.Task(env_name, "test", index)
    expert = _expert_actions(env, task)
    other = variant(expert)
    rollouts = [_played(env, task, expert), _played(env, task, other)] * 2
    assert [r.reward for r in rollouts] == [1.0, 0.0, 1.0, 0.0]
    return expert, other, *_tau_credit(env, task, rollouts)


def _turn(actions, tool):
    """The index of the call of ``tool`` (not the message asking to confirm it)."""
    return next(t for t, a in enumerate(actions) if a.startswith("<tool_call>") and tool in a)


def test_tau_successes_get_a_core_within_the_exact_budget():
    # three orders changed: the authentication's closure is the whole task (> max_exact atoms),
    # so a success whose tie-break picked it abstained for budget
    _, _, group, vict = _credited(
        "tau-retail", 23, lambda expert: _without(expert, ("modify_pending_order_items",)))
    success = group.attributions[0]
    assert success.reason is None and not success.budget_hit
    assert len(success.core) <= 14 and success.marginals
    assert (vict[0] >= 0).all() and (vict[0] > 0).any()


def test_tau_a_correct_write_is_not_blamed_for_a_later_calls_share_of_a_field():
    # the flight change pays with a gift card, then the bag update pays with it again: both
    # append to the reservation's payment history and lower the card's balance
    expert, no_bags, group, vict = _credited(
        "tau-airline", 23, lambda expert: _without(expert, ("update_reservation_baggages",)))
    atoms = group.verifier.atoms
    flights = _turn(no_bags, "update_reservation_flights")
    final = dict(zip((a.id for a in atoms), group.traces[1].final))
    assert Status.VIOL not in final.values()  # the history and the balance are only unfinished
    blamed = {atoms[e.atom].id for e in group.traces[1].edges
              if e.turn == flights and group.marginals[1, e.atom] < 0}
    assert not blamed, blamed
    assert vict[1, flights] > 0  # its own share of the fields is a satisfied prerequisite
    core = {atoms[j].id for j in group.attributions[1].core}
    assert "db:reservations/HXDUBJ:total_baggages" in core
    assert (vict[0, [flights, _turn(expert, "update_reservation_baggages")]] > 0).all()


def test_tau_a_correct_booking_is_not_blamed_for_a_missing_later_booking():
    # three bookings for one user: the same tool on the same record, told apart by arguments
    def bookings_of(actions):
        return [t for t, a in enumerate(actions)
                if a.startswith("<tool_call>") and "book_reservation" in a]

    def without_the_third(expert):  # no third request, no third call
        third = bookings_of(expert)[2]
        return expert[:third - 1] + expert[third + 1:]

    expert, two, group, vict = _credited("tau-airline", 9, without_the_third)
    bookings = bookings_of(expert)
    assert len(bookings) == 3
    atoms = group.verifier.atoms
    core = {atoms[j].id for j in group.attributions[1].core}
    assert "db:reservations/HATHAV:*" in core  # the third booking's reservation
    assert (vict[1, bookings[:2]] >= 0).all(), vict[1, :len(two)]
    committed = {atoms[e.atom].id for e in group.traces[1].edges
                 if e.turn == bookings[1] and e.relation == "commit"}
    assert "db:reservations/HATHAU:*" in committed and "db:reservations/HATHAV:*" not in committed
