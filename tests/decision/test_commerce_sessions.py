"""POST/GET /agp/commerce-sessions: a spending window inside the delegation's spend limit."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from core.models import LedgerEvent
from decision.models import CommerceSession
from tests.decision.factories import make_delegation, make_task

pytestmark = pytest.mark.django_db


def body(task, delegation, **overrides):
    data = {"task_id": task.task_id, "agent_id": "agent-1", "delegation_id": delegation.delegation_id,
            "merchant": "books.example", "currency": "USD", "amount_limit": 200}
    data.update(overrides)
    return data


def test_it_opens_a_session_within_the_spend_limit(api):
    task = make_task()
    delegation = make_delegation(spend_amount=Decimal("500"))

    response = api.post("/agp/commerce-sessions", body(task, delegation, session_id="cs-1"), format="json")

    assert response.status_code == 201
    data = response.json()
    assert (data["type"], data["status"], data["amount_limit"], data["spent_amount"], data["reserved_amount"]) == (
        "CommerceSession", "open", 200, 0, 0)
    assert data["expires_at"] == delegation.expires_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    row = CommerceSession.objects.get(session_id="cs-1")
    assert (row.amount_limit, row.spent_amount, row.reserved_amount, row.delegation_id) == (
        Decimal("200"), 0, 0, delegation.delegation_id)
    assert LedgerEvent.objects.get(resource_id="cs-1").event_type == "commerce_session.created"


def test_it_accepts_a_limit_equal_to_the_spend_limit(api):
    task, delegation = make_task(), make_delegation(spend_amount=Decimal("500"))

    response = api.post("/agp/commerce-sessions", body(task, delegation, amount_limit=Decimal("500.00")), format="json")

    assert response.status_code == 201
    assert CommerceSession.objects.get().amount_limit == Decimal("500")


@pytest.mark.parametrize(("delegation_kwargs", "overrides", "fragment"), [
    ({"spend_amount": Decimal("500")}, {"amount_limit": Decimal("500.01")}, "exceeds the delegation's spend limit"),
    ({"spend_currency": "EUR"}, {}, "differs from the delegation's spend limit currency"),
    ({"spend_currency": None, "spend_amount": None}, {}, "grants no spending authority"),
    ({"delegate_agent": "agent-2"}, {}, "was granted to 'agent-2'"),
    ({"root_principal": "org:other"}, {}, "acts for 'org:other'"),
    ({"status": "revoked"}, {}, "is revoked"),
    ({"expires_in": timedelta(seconds=-1)}, {}, "has expired"),
])
def test_it_refuses_a_session_outside_the_delegation(api, delegation_kwargs, overrides, fragment):
    task, delegation = make_task(), make_delegation(**delegation_kwargs)

    response = api.post("/agp/commerce-sessions", body(task, delegation, **overrides), format="json")

    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "AGP_DELEGATION_SCOPE_VIOLATION"
    assert any(fragment in violation for violation in error["details"]["violations"])
    assert not CommerceSession.objects.exists()
    assert not LedgerEvent.objects.exists()


def test_it_refuses_a_session_under_a_revoked_ancestor(api):
    root = make_delegation(delegate_agent="orchestrator", status="revoked")
    child = make_delegation(parent=root, delegator_agent="orchestrator")

    response = api.post("/agp/commerce-sessions", body(make_task(), child), format="json")

    assert response.status_code == 409
    assert response.json()["error"]["details"]["violations"] == [
        f"delegation {root.delegation_id} is revoked"]
    assert not CommerceSession.objects.exists()


def test_it_refuses_a_session_under_a_delegation_whose_agent_was_revoked(api):
    from registry.models import Revocation

    root = make_delegation(delegate_agent="orchestrator")
    child = make_delegation(parent=root, delegator_agent="orchestrator")
    Revocation.objects.create(revocation_id="rev-agent", target_type="agent", target_id="orchestrator",
                              revoked_by="admin", reason="compromised", revoked_at=timezone.now(),
                              created_at=timezone.now())

    response = api.post("/agp/commerce-sessions", body(make_task(), child), format="json")

    assert response.status_code == 409
    assert response.json()["error"]["details"]["violations"] == [
        f"an agent of delegation {root.delegation_id} is revoked"]
    assert not CommerceSession.objects.exists()


def test_it_refuses_a_session_outliving_its_delegation(api):
    task, delegation = make_task(), make_delegation(expires_in=timedelta(hours=1))
    later = (timezone.now() + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")

    response = api.post("/agp/commerce-sessions", body(task, delegation, expires_at=later), format="json")

    assert response.status_code == 409
    assert not CommerceSession.objects.exists()


@pytest.mark.parametrize(("overrides", "field"), [
    ({"delegation_id": "no-such-delegation"}, "delegation_id"),
    ({"task_id": "no-such-task"}, "task_id"),
    ({"amount_limit": 0}, "amount_limit"),
    ({"amount_limit": -5}, "amount_limit"),
    ({"currency": "usd"}, "currency"),
    ({"spent_amount": 0}, "spent_amount"),
    ({"reserved_amount": 0}, "reserved_amount"),
    ({"status": "closed"}, "status"),
    ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
])
def test_it_refuses_bad_fields(api, overrides, field):
    task, delegation = make_task(), make_delegation()

    response = api.post("/agp/commerce-sessions", body(task, delegation, **overrides), format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["details"]["fields"]
    assert not CommerceSession.objects.exists()


def test_it_lists_sessions_by_agent_and_status(api):
    task, delegation = make_task(), make_delegation()
    created = api.post("/agp/commerce-sessions", body(task, delegation), format="json").json()

    response = api.get("/agp/commerce-sessions?agent_id=agent-1&status=open")

    assert response.status_code == 200
    assert response.json()["items"] == [created]
    assert api.get("/agp/commerce-sessions?agent_id=agent-2").json()["items"] == []
