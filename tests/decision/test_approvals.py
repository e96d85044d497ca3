"""POST/GET /agp/approvals: immutable, expiring, signed; and the approval_valid_for selector."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agp_project.signing import get_signer, verify_resource
from core.models import LedgerEvent
from decision.models import Approval
from decision.selectors import approval_valid_for
from tests.decision.factories import make_approval, make_decision, make_task

pytestmark = pytest.mark.django_db


def in_an_hour():
    return (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def body(decision, **overrides):
    data = {"decision_ref": decision.decision_id, "approver": "human:carol", "verdict": "approved",
            "conditions": ["amount under 500"], "expires_at": in_an_hour()}
    data.update(overrides)
    return data


def test_it_records_a_signed_approval(api):
    decision = make_decision(task=make_task())
    request = body(decision, approval_id="apr-1")

    response = api.post("/agp/approvals", request, format="json")

    assert response.status_code == 201
    data = response.json()
    assert response["Location"].endswith("/agp/approvals/apr-1")
    assert {k: data[k] for k in ("type", "approval_id", "decision_ref", "approver", "verdict", "conditions",
                                 "expires_at")} == {"type": "Approval", **request}
    assert verify_resource(data, {"keys": [get_signer().jwk()]})
    row = Approval.objects.get(approval_id="apr-1")
    assert (row.decision_id, row.verdict, row.signature) == (decision.decision_id, "approved", data["signature"])
    event = LedgerEvent.objects.get(resource_id="apr-1")
    assert (event.event_type, event.payload["verdict"]) == ("approval.created", "approved")


@pytest.mark.parametrize("method", ["patch", "put", "delete"])
def test_it_never_changes_an_approval(api, method):
    decision = make_decision(task=make_task())
    created = api.post("/agp/approvals", body(decision, approval_id="apr-im"), format="json").json()

    response = getattr(api, method)("/agp/approvals/apr-im", {"verdict": "rejected"}, format="json")

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "AGP_METHOD_NOT_ALLOWED"
    assert api.get("/agp/approvals/apr-im").json() == created
    assert Approval.objects.get().verdict == "approved"


@pytest.mark.parametrize(("overrides", "field"), [
    ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
    ({"expires_at": None}, "expires_at"),
    ({"verdict": "maybe"}, "verdict"),
    ({"decision_ref": "no-such-decision"}, "decision_ref"),
    ({"signature": {}}, "signature"),
])
def test_it_refuses_bad_approvals(api, overrides, field):
    decision = make_decision(task=make_task())

    response = api.post("/agp/approvals", body(decision, **overrides), format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["details"]["fields"]
    assert not Approval.objects.exists()


def test_it_needs_an_expiry(api):
    decision = make_decision(task=make_task())
    request = body(decision)
    del request["expires_at"]

    response = api.post("/agp/approvals", request, format="json")

    assert response.status_code == 400
    assert "expires_at" in response.json()["error"]["details"]["fields"]
    assert not Approval.objects.exists()


def test_it_refuses_an_agent_approving_its_own_decision(api):
    decision = make_decision(task=make_task(), agent_id="agent-7")

    response = api.post("/agp/approvals", body(decision, approver="agent-7"), format="json")

    assert response.status_code == 422
    assert response.json()["error"]["details"]["failed_checks"][0]["check"] == "approver_independent"
    assert not Approval.objects.exists()


def test_it_needs_the_approval_write_scope(make_token):
    decision = make_decision(task=make_task())
    decision_writer, approver = APIClient(), APIClient()
    decision_writer.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.decision.write'])}")
    approver.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.approval.write'])}")

    refused = decision_writer.post("/agp/approvals", body(decision), format="json")
    accepted = approver.post("/agp/approvals", body(decision), format="json")

    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["required_scopes"] == ["agp.approval.write"]
    assert accepted.status_code == 201
    assert Approval.objects.count() == 1


def test_it_lists_approvals_of_a_decision(api):
    decision, other = make_decision(task=make_task()), make_decision(task=make_task())
    for target in (decision, other):
        api.post("/agp/approvals", body(target), format="json")

    response = api.get(f"/agp/approvals?decision_ref={decision.decision_id}")

    assert response.status_code == 200
    assert [item["decision_ref"] for item in response.json()["items"]] == [decision.decision_id]


# --- approval_valid_for ---------------------------------------------------------------------
def test_approval_valid_for_finds_the_newest_unexpired_approval():
    decision = make_decision(task=make_task())
    now = timezone.now()
    make_approval(decision=decision, expires_at=now + timedelta(minutes=5), created_at=now - timedelta(seconds=2))
    newest = make_approval(decision=decision, expires_at=now + timedelta(minutes=10), created_at=now)

    assert approval_valid_for(decision=decision, now=now) == newest
    assert approval_valid_for(decision=decision.decision_id, now=now) == newest


def test_approval_valid_for_ignores_expired_approvals():
    decision = make_decision(task=make_task())
    now = timezone.now()
    make_approval(decision=decision, expires_at=now + timedelta(minutes=5))

    assert approval_valid_for(decision=decision, now=now + timedelta(minutes=5)) is None


def test_approval_valid_for_treats_a_later_rejection_as_withdrawal():
    decision = make_decision(task=make_task())
    now = timezone.now()
    make_approval(decision=decision, expires_at=now + timedelta(hours=1), created_at=now - timedelta(seconds=2))
    make_approval(decision=decision, verdict="rejected", expires_at=now + timedelta(minutes=5), created_at=now)

    assert approval_valid_for(decision=decision, now=now) is None
    # A rejection does not stop counting when it expires: the approval it withdrew stays withdrawn.
    assert approval_valid_for(decision=decision, now=now + timedelta(minutes=6)) is None


def test_approval_valid_for_accepts_an_approval_given_after_a_rejection():
    decision = make_decision(task=make_task())
    now = timezone.now()
    make_approval(decision=decision, verdict="rejected", created_at=now - timedelta(seconds=2))
    again = make_approval(decision=decision, expires_at=now + timedelta(hours=1), created_at=now)

    assert approval_valid_for(decision=decision, now=now) == again


def test_approval_valid_for_is_none_without_approvals():
    assert approval_valid_for(decision=make_decision(task=make_task()), now=timezone.now()) is None


def test_it_refuses_an_approval_dated_in_the_future(api):
    decision = make_decision(task=make_task())

    response = api.post("/agp/approvals", body(decision, created_at=in_an_hour()), format="json")

    assert response.status_code == 400
    assert "created_at" in response.json()["error"]["details"]["fields"]
    assert not Approval.objects.exists()
