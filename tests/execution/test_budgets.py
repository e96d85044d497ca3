"""Atomic budgets (docs/reference/execution.md): reserve on acceptance, commit or release later, never overspend."""

from decimal import Decimal

import pytest
from django.utils import timezone

from agp_project import errors
from core.ledger_verification import ledger_verify
from core.models import LedgerEvent
from decision.models import CommerceSession
from execution.budgets import payment_commit, payment_release
from execution.checks import envelope_recheck
from execution.models import ActionEnvelope, Operation, Payment
from execution.services import envelope_accept, envelope_inputs
from tests.concurrency import run_together, waits_behind
from tests.execution.factories import make_delegation, make_full_world

URL = "/agp/action-envelopes"


def _accept(api, world, **overrides):
    body = world.bound_request(**overrides)
    response = api.post(URL, body, format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 202, response.json()
    return body["action_id"]


def _session(world) -> CommerceSession:
    return CommerceSession.objects.get(pk=world.session.pk)


def _amounts(world):
    session = _session(world)
    return session.reserved_amount, session.spent_amount


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_queues_reservations_on_the_trees_root_leaving_its_reference_checks_free(api):
    """As registry's tree lock (tests/registry/test_tree_locks.py): a reservation waits for
    another writer of its delegation tree, and not for a foreign-key check on the root link."""
    world = make_full_world()
    root = world.root_delegation.pk

    waited, _ = waits_behind("SELECT id FROM registry_delegation WHERE id = %s FOR KEY SHARE", [root],
                             lambda: _accept(api, world))
    assert not waited
    waited, _ = waits_behind("SELECT id FROM registry_delegation WHERE id = %s FOR NO KEY UPDATE", [root],
                             lambda: _accept(api, world))
    assert waited
    assert _amounts(world) == (Decimal("100"), Decimal("0"))


@pytest.mark.django_db
def test_it_commits_a_reservation_once(api):
    world = make_full_world()
    action_id = _accept(api, world)

    first = payment_commit(action_id=action_id)
    second = payment_commit(action_id=action_id)

    assert first.status == second.status == "committed"
    assert _amounts(world) == (Decimal("0"), Decimal("50"))
    assert Payment.objects.get(envelope_id=action_id).status == "committed"
    assert LedgerEvent.objects.filter(event_type="payment.committed").count() == 1
    with pytest.raises(errors.InvalidTransition):
        payment_release(action_id=action_id)
    assert _amounts(world) == (Decimal("0"), Decimal("50"))


@pytest.mark.django_db
def test_it_releases_a_reservation_once(api):
    world = make_full_world()
    action_id = _accept(api, world)

    payment_release(action_id=action_id)
    payment_release(action_id=action_id)

    assert _amounts(world) == (Decimal("0"), Decimal("0"))
    assert Payment.objects.get(envelope_id=action_id).status == "released"
    assert LedgerEvent.objects.filter(event_type="payment.released").count() == 1
    with pytest.raises(errors.InvalidTransition):
        payment_commit(action_id=action_id)
    assert ledger_verify().verified


@pytest.mark.django_db
def test_it_has_nothing_to_move_for_an_action_without_payment():
    assert payment_commit(action_id="no-such-action") is None
    assert payment_release(action_id="no-such-action") is None


@pytest.mark.django_db
def test_it_counts_the_envelopes_own_reservation_as_its_own_at_execution_time(api):
    world = make_full_world(amount_limit=Decimal("50"))
    action_id = _accept(api, world)
    assert _amounts(world) == (Decimal("50"), Decimal("0"))

    report = envelope_recheck(envelope=ActionEnvelope.objects.get(action_id=action_id))
    assert report.passed, report.failed

    # Anyone else finds the session full.
    body = world.bound_request(parameters={"amount": 1, "currency": "USD"})
    response = api.post(URL, body, format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 422
    assert [item["check"] for item in response.json()["error"]["details"]["failed_checks"]] == ["commerce"]

    # After commit the spent amount is its own too.
    payment_commit(action_id=action_id)
    assert envelope_recheck(envelope=ActionEnvelope.objects.get(action_id=action_id)).passed


@pytest.mark.django_db
def test_it_rechecks_against_the_session_it_reserved_on(api):
    world = make_full_world()
    action_id = _accept(api, world)
    CommerceSession.objects.filter(pk=world.session.pk).update(status="closed")
    report = envelope_recheck(envelope=ActionEnvelope.objects.get(action_id=action_id))
    assert [item["check"] for item in report.failed] == ["commerce"]
    assert world.session.session_id in report.failed[0]["reason"]


@pytest.mark.django_db
def test_it_refuses_amounts_beyond_what_is_left(api):
    world = make_full_world()
    for _ in range(2):
        _accept(api, world, parameters={"amount": 100, "currency": "USD"})
    body = world.bound_request(parameters={"amount": 1, "currency": "USD"})
    response = api.post(URL, body, format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 422
    assert _amounts(world) == (Decimal("200"), Decimal("0"))
    assert Payment.objects.count() == 2


# --- concurrency (PostgreSQL, real threads, real transactions) ---------------------------------------------
def _race(inputs_list, actor="racer"):
    """Submit every envelope from its own thread at once; return the outcomes."""

    def accept(inputs):
        try:
            envelope_accept(inputs=inputs, actor=actor)
            return "accepted"
        except errors.PrerequisiteFailed as exc:
            return [item["check"] for item in exc.details["failed_checks"]]
        except errors.Conflict:
            return "conflict"

    outcomes = run_together([lambda inputs=inputs: accept(inputs) for inputs in inputs_list], timeout=60)
    # Anything else a submission raised is reported by the assertions, as its repr.
    return [repr(outcome) if isinstance(outcome, Exception) else outcome for outcome in outcomes]


def _inputs(world, **overrides):
    body = world.envelope_request(**overrides)
    body.pop("type")
    body["created_at"] = timezone.now()
    return envelope_inputs(validated=body)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_never_overspends_a_session_under_concurrent_submissions():
    world = make_full_world()  # session limit 200, amount 50 each: room for exactly 4
    outcomes = _race([_inputs(world) for _ in range(10)])

    assert outcomes.count("accepted") == 4, outcomes
    assert all(outcome == ["commerce"] for outcome in outcomes if outcome != "accepted"), outcomes
    assert _amounts(world) == (Decimal("200"), Decimal("0"))
    assert Payment.objects.count() == Operation.objects.count() == 4
    assert ledger_verify().verified


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_never_exceeds_the_delegation_spend_limit_across_sessions():
    # Two agents under one orchestrator link whose spend limit is 120: each agent's own
    # session has room for 200, but together they may reserve at most 120 (two of 50).
    world = make_full_world(root_spend_limit=Decimal("120"), spend_limit=Decimal("120"))
    second = make_delegation(root_principal=world.root_principal, delegator=world.orchestrator_id,
                             delegate=f"{world.agent_id}-2", scope=["crm:update"], parent=world.root_delegation,
                             spend=("USD", Decimal("120")))
    twin = make_full_world(root_principal=world.root_principal, agent_id=f"{world.agent_id}-2",
                           root_spend_limit=Decimal("120"), spend_limit=Decimal("120"))
    # Re-home the twin's capability and session under the shared root.
    twin.capability.delegation = second
    twin.capability.save(update_fields=["delegation"])
    CommerceSession.objects.filter(pk=twin.session.pk).update(delegation=second)

    inputs = [_inputs(world) for _ in range(4)] + [_inputs(twin) for _ in range(4)]
    outcomes = _race(inputs)

    assert outcomes.count("accepted") == 2, outcomes
    totals = CommerceSession.objects.filter(delegation__path__startswith=world.root_delegation.path)
    assert sum(s.reserved_amount + s.spent_amount for s in totals) == Decimal("100")
    assert ledger_verify().verified


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_accepts_one_action_id_once_under_concurrent_submissions():
    world = make_full_world()
    inputs = _inputs(world)
    outcomes = _race([inputs] * 6)

    assert outcomes.count("accepted") == 1, outcomes
    assert outcomes.count("conflict") == 5, outcomes
    assert Payment.objects.count() == Operation.objects.count() == 1
    assert _amounts(world) == (Decimal("50"), Decimal("0"))


@pytest.mark.django_db
def test_amounts_that_add_up_exactly_to_the_limit_fit_on_every_database(api):
    # In binary doubles (SQLite's arithmetic) 0.1 + 0.2 is 0.30000000000000004, past 0.3.
    world = make_full_world(amount_limit=Decimal("0.3"))
    tenth = _accept(api, world, parameters={"amount": Decimal("0.1"), "currency": "USD"})
    fifth = _accept(api, world, parameters={"amount": Decimal("0.2"), "currency": "USD"})
    assert _amounts(world) == (Decimal("0.3"), Decimal("0"))

    payment_commit(action_id=tenth)
    payment_commit(action_id=fifth)

    assert _amounts(world) == (Decimal("0"), Decimal("0.3"))
    assert [payment.status for payment in Payment.objects.filter(envelope_id__in=[tenth, fifth])] == ["committed"] * 2
