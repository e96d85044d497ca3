"""POST/PATCH/GET /agp/escalations: open -> resolved with an outcome, final once resolved."""

import threading

import pytest
from django.db import connection

from core.models import LedgerEvent
from decision.models import Escalation
from decision.selectors import escalation_blocking, escalations_blocking
from tests.decision.factories import make_decision, make_escalation, make_task

pytestmark = pytest.mark.django_db

OUTCOMES = ["upheld", "dismissed", "partially_upheld"]


def resolve(api, escalation_id, outcome="upheld", **extra):
    return api.patch(f"/agp/escalations/{escalation_id}", {
        "status": "resolved", "outcome": outcome, "resolved_by": "ombudsman", **extra}, format="json")


def test_it_opens_an_escalation_on_a_decision_and_its_task(api):
    task = make_task()
    decision = make_decision(task=task)

    response = api.post("/agp/escalations", {"escalation_id": "esc-1", "decision_ref": decision.decision_id,
                                             "action_id": "act-9", "raised_by": "watcher", "reason": "too risky"},
                        format="json")

    assert response.status_code == 201
    assert response.json() == {
        "type": "Escalation", "escalation_id": "esc-1", "task_id": task.task_id,
        "decision_ref": decision.decision_id, "action_id": "act-9", "raised_by": "watcher", "reason": "too risky",
        "status": "open", "outcome": None, "resolved_by": None, "resolution_notes": None, "resolved_at": None,
        "root_principal": task.root_principal, "created_at": response.json()["created_at"], "created_by": "anonymous"}
    row = Escalation.objects.get(escalation_id="esc-1")
    assert (row.status, row.task_id, row.decision_id, row.action_id) == ("open", task.task_id,
                                                                          decision.decision_id, "act-9")
    assert LedgerEvent.objects.get(resource_id="esc-1").event_type == "escalation.created"


@pytest.mark.parametrize(("body", "field"), [
    ({"raised_by": "w", "reason": "r"}, "task_id"),
    ({"task_id": "no-task", "raised_by": "w", "reason": "r"}, "task_id"),
    ({"decision_ref": "no-decision", "raised_by": "w", "reason": "r"}, "decision_ref"),
    ({"action_id": "a", "reason": "r"}, "raised_by"),
    ({"action_id": "a", "raised_by": "w", "reason": "r", "status": "resolved"}, "status"),
    ({"action_id": "a", "raised_by": "w", "reason": "r", "outcome": "upheld"}, "outcome"),
])
def test_it_refuses_bad_escalations(api, body, field):
    response = api.post("/agp/escalations", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["details"]["fields"]
    assert not Escalation.objects.exists()


def test_it_refuses_a_decision_of_another_task(api):
    task, other = make_task(), make_task()
    decision = make_decision(task=other)

    response = api.post("/agp/escalations", {"task_id": task.task_id, "decision_ref": decision.decision_id,
                                             "raised_by": "w", "reason": "r"}, format="json")

    assert response.status_code == 400
    assert "decision_ref" in response.json()["error"]["details"]["fields"]
    assert not Escalation.objects.exists()


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_it_resolves_with_each_outcome(api, outcome):
    escalation = make_escalation(task=make_task())

    response = resolve(api, escalation.escalation_id, outcome, resolution_notes="reviewed the logs")

    assert response.status_code == 200
    data = response.json()
    assert (data["status"], data["outcome"], data["resolved_by"], data["resolution_notes"]) == (
        "resolved", outcome, "ombudsman", "reviewed the logs")
    assert data["resolved_at"].endswith("Z")
    escalation.refresh_from_db()
    assert (escalation.status, escalation.outcome, escalation.resolved_by) == ("resolved", outcome, "ombudsman")
    event = LedgerEvent.objects.get(resource_id=escalation.escalation_id, event_type="escalation.resolved")
    assert event.payload == {"outcome": outcome, "resolved_by": "ombudsman", "task_id": event.task_id, "action_id": None}


@pytest.mark.parametrize("first", OUTCOMES)
@pytest.mark.parametrize("move", [
    {"status": "resolved", "outcome": "upheld", "resolved_by": "someone-else"},
    {"status": "resolved", "outcome": "dismissed", "resolved_by": "someone-else"},
    {"status": "resolved", "outcome": "partially_upheld", "resolved_by": "someone-else"},
    {"status": "open"},
])
def test_it_refuses_every_move_after_resolution(api, first, move):
    escalation = make_escalation(task=make_task())
    assert resolve(api, escalation.escalation_id, first).status_code == 200
    before = api.get(f"/agp/escalations/{escalation.escalation_id}").json()

    response = api.patch(f"/agp/escalations/{escalation.escalation_id}", move, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "AGP_INVALID_TRANSITION"
    assert response.json()["error"]["details"] == {"from": "resolved", "to": move["status"], "allowed": []}
    assert api.get(f"/agp/escalations/{escalation.escalation_id}").json() == before
    assert LedgerEvent.objects.filter(resource_id=escalation.escalation_id,
                                      event_type="escalation.resolved").count() == 1


def test_it_refuses_reopening_an_open_escalation(api):
    escalation = make_escalation(task=make_task())

    response = api.patch(f"/agp/escalations/{escalation.escalation_id}", {"status": "open"}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["details"] == {"from": "open", "to": "open", "allowed": ["resolved"]}
    assert Escalation.objects.get().status == "open"


@pytest.mark.parametrize(("patch", "fields"), [
    ({"status": "resolved", "resolved_by": "x"}, {"outcome"}),
    ({"status": "resolved", "outcome": "upheld"}, {"resolved_by"}),
    ({"status": "resolved", "outcome": "overruled", "resolved_by": "x"}, {"outcome"}),
    ({"status": "closed"}, {"status"}),
    ({"status": "resolved", "outcome": "upheld", "resolved_by": "x", "reason": "edit"}, {"reason"}),
])
def test_it_refuses_malformed_resolutions(api, patch, fields):
    escalation = make_escalation(task=make_task())

    response = api.patch(f"/agp/escalations/{escalation.escalation_id}", patch, format="json")

    assert response.status_code == 400
    assert set(response.json()["error"]["details"]["fields"]) == fields
    assert Escalation.objects.get().status == "open"


def test_it_answers_404_for_an_unknown_escalation(api):
    assert resolve(api, "no-such-escalation").status_code == 404


# --- escalation_blocking ----------------------------------------------------------------------
@pytest.mark.parametrize(("status", "outcome", "blocks"), [
    ("open", "", True),
    ("resolved", "upheld", True),
    ("resolved", "dismissed", False),
    ("resolved", "partially_upheld", False),
])
def test_escalation_blocking_follows_the_outcome(status, outcome, blocks):
    task = make_task()
    decision = make_decision(task=task)
    make_escalation(decision=decision, task=task, status=status, outcome=outcome)

    assert escalation_blocking(task_id=task.task_id, decision_id=None, action_id=None) is blocks
    assert escalation_blocking(task_id=None, decision_id=decision.decision_id, action_id=None) is blocks


def test_escalation_blocking_matches_task_decision_or_action():
    task, other_task = make_task(), make_task()
    decision = make_decision(task=task)
    by_action = make_escalation(action_id="act-1")

    assert escalation_blocking(task_id=task.task_id, decision_id=decision.decision_id, action_id="act-2") is False
    assert escalation_blocking(task_id=task.task_id, decision_id=decision.decision_id, action_id="act-1") is True
    assert list(escalations_blocking(task_id=other_task.task_id, action_id="act-1")) == [by_action]
    assert escalation_blocking(task_id=None, decision_id=None, action_id=None) is False


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_resolutions_cannot_both_succeed():
    from rest_framework.test import APIClient

    escalation = make_escalation(task=make_task())
    barrier = threading.Barrier(2)
    statuses = []

    def run(outcome):
        try:
            barrier.wait()
            statuses.append(resolve(APIClient(), escalation.escalation_id, outcome).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(outcome,)) for outcome in ("upheld", "dismissed")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [200, 409]
    assert LedgerEvent.objects.filter(event_type="escalation.resolved").count() == 1
