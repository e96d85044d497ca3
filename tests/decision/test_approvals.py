"""POST/GET /agp/approvals: immutable, expiring, signed, and made by the people they name."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agp_project.signing import get_signer, verify_resource
from core.models import LedgerEvent
from decision.models import Approval
from tests.decision.factories import make_decision, make_task
from tests.identity import client_api, person_api

pytestmark = pytest.mark.django_db


def in_an_hour():
    return (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def body(decision, **overrides):
    """An approval of ``decision``; an override of None leaves the field out."""
    data = {"decision_ref": decision.decision_id, "approver": "human:carol", "verdict": "approved",
            "conditions": ["amount under 500"], "expires_at": in_an_hour()}
    data.update(overrides)
    return {name: value for name, value in data.items() if value is not None}


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


@pytest.mark.parametrize("approver", ["agent-7", "AGENT-7"])
def test_it_refuses_an_agent_approving_its_own_decision(api, approver):
    decision = make_decision(task=make_task(), agent_id="agent-7")

    response = api.post("/agp/approvals", body(decision, approver=approver), format="json")

    assert response.status_code == 422
    assert response.json()["error"]["details"]["failed_checks"][0]["check"] == "approver_independent"
    assert not Approval.objects.exists()


def test_a_persons_approval_is_made_as_their_subject(auth_settings):
    decision = make_decision(task=make_task())
    carol = person_api("carol@example.com", [decision.task.root_principal])

    refused = carol.post("/agp/approvals", body(decision, approver="cro@example.com"), format="json")
    response = carol.post("/agp/approvals", body(decision, approver=None), format="json")

    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["field"] == "approver"
    assert response.status_code == 201, response.content
    row = Approval.objects.get()
    assert (row.approver, row.approver_kind) == ("carol@example.com", "human")
    assert response.json()["approver_client"] == row.approver_client == row.created_by


def test_a_person_cannot_approve_a_decision_they_recorded(auth_settings):
    task = make_task()
    alice, alice_client = client_api("human", [task.root_principal], subject="alice@example.com",
                                     scopes=["agp.decision.write", "agp.approval.write"])
    decision = alice.post("/agp/decisions", {"task_id": task.task_id, "agent_id": "agent-1", "outcome": "approve"},
                          format="json").json()
    # Nor with a second client of the same person.
    again = person_api("Alice@Example.com", [task.root_principal])
    for api in (alice, again):
        response = api.post("/agp/approvals", {**body(make_decision(task=task), approver=None),
                                               "decision_ref": decision["decision_id"]}, format="json")

        assert response.status_code == 422, response.content
        assert "asked for this action" in response.json()["error"]["details"]["failed_checks"][0]["reason"]
    assert not Approval.objects.filter(decision_id=decision["decision_id"]).exists()


def test_an_operators_approval_is_recorded_as_an_operators(make_token, authed_api):
    decision = make_decision(task=make_task())
    response = authed_api.post("/agp/approvals", body(decision, approver="Chief Risk Officer"), format="json")
    assert response.status_code == 201
    assert Approval.objects.get().approver_kind == "operator"  # check 7 counts only people's approvals
    missing = authed_api.post("/agp/approvals", body(decision, approver=None), format="json")
    assert missing.json()["error"]["details"]["fields"] == {
        "approver": ["Required: only a person's client approves as itself."]}



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


def test_it_refuses_an_approval_dated_in_the_future(api):
    decision = make_decision(task=make_task())

    response = api.post("/agp/approvals", body(decision, created_at=in_an_hour()), format="json")

    assert response.status_code == 400
    assert "created_at" in response.json()["error"]["details"]["fields"]
    assert not Approval.objects.exists()
