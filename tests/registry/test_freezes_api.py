"""``/agp/freezes`` (docs/reference/governance.md): create, read, lift forward only; signed and ledgered;
and what a freeze refuses in the registry and the decision API (409 ``AGP_FROZEN``)."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agp_project.signing import verify_resource
from core.models import LedgerEvent, OutboxMessage
from decision.models import PolicyEvaluation
from registry.models import Delegation, Freeze
from tests.execution.factories import make_world
from tests.execution.worker import ledger_event_types

pytestmark = pytest.mark.django_db

URL = "/agp/freezes"


def jwks(api):
    return api.get("/.well-known/jwks.json").json()


def create(api, **body):
    body.setdefault("reason", "acting outside its mandate")
    return api.post(URL, body, format="json")


# --- create and read ---------------------------------------------------------------------------

def test_it_freezes_an_agent_signed_ledgered_and_making_the_enforcement_task_due(api):
    response = create(api, target_type="agent", target_id="agent-7", frozen_by="ops-on-call")

    assert response.status_code == 201, response.content
    body = response.json()
    assert response["Location"] == f"http://testserver/agp/freezes/{body['freeze_id']}"
    assert body["type"] == "Freeze" and body["freeze_id"].startswith("frz_")
    assert {k: body[k] for k in ("target_type", "target_id", "reason", "frozen_by", "status", "lifted_at",
                                 "lifted_by")} == {
        "target_type": "agent", "target_id": "agent-7", "reason": "acting outside its mandate",
        "frozen_by": "ops-on-call", "status": "active", "lifted_at": None, "lifted_by": None}
    assert verify_resource(body, jwks(api))
    assert not verify_resource({**body, "target_id": "agent-8"}, jwks(api))
    assert api.get(f"{URL}/{body['freeze_id']}").json() == body

    freeze = Freeze.objects.get(freeze_id=body["freeze_id"])
    assert (freeze.target_type, freeze.target_id, freeze.status) == ("agent", "agent-7", "active")
    event = LedgerEvent.objects.get(resource_id=freeze.freeze_id)
    assert (event.event_type, event.resource_type, event.actor) == ("freeze.created", "Freeze", "anonymous")
    assert event.payload == {"target_type": "agent", "target_id": "agent-7", "reason": "acting outside its mandate",
                             "frozen_by": "ops-on-call", "payload_hash": body["signature"]["payload_hash"]}
    [message] = OutboxMessage.objects.all()
    assert (message.task_name, message.args) == ("agp.enforce_freeze", [freeze.freeze_id])


def test_it_freezes_everything_with_no_target_id_and_defaults_frozen_by_to_the_client(authed_api):
    response = create(authed_api, target_type="all", freeze_id="frz-incident-42")

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["freeze_id"], body["target_type"], body["target_id"]) == ("frz-incident-42", "all", None)
    assert body["frozen_by"] == "test-client"
    assert Freeze.objects.get(freeze_id="frz-incident-42").target_id == ""


@pytest.mark.parametrize("body,field,message", [
    ({"target_type": "all", "target_id": "x"}, "target_id", "Must be absent when target_type is 'all'."),
    ({"target_type": "agent"}, "target_id", "Required when target_type is 'agent'."),
    ({"target_type": "root_principal", "target_id": ""}, "target_id", "This field may not be blank."),
    ({"target_type": "tool", "target_id": "crm tool"}, "target_id",
     "A tool id is 1-128 characters of letters, digits and . _ / - (no ':' or '*', which scopes use)."),
    ({"target_type": "skill", "target_id": "x"}, "target_type", '"skill" is not a valid choice.'),
    ({"target_type": "agent", "target_id": "a", "status": "lifted"}, "status", "This field is read-only."),
    ({"target_type": "agent", "target_id": "a", "lifted_by": "me"}, "lifted_by", "This field is read-only."),
    ({"target_type": "agent", "target_id": "a", "until": "tomorrow"}, "until", "Unknown field."),
])
def test_it_refuses_a_malformed_freeze_naming_the_field(api, body, field, message):
    response = create(api, **body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "AGP_INVALID_REQUEST"
    assert error["details"]["fields"][field] == [message]
    assert not Freeze.objects.exists() and not LedgerEvent.objects.exists()


def test_it_requires_a_reason(api):
    response = api.post(URL, {"target_type": "agent", "target_id": "a"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"] == {"reason": ["This field is required."]}


def test_it_refuses_a_duplicate_freeze_id(api):
    assert create(api, target_type="all", freeze_id="frz-1").status_code == 201
    response = create(api, target_type="agent", target_id="a", freeze_id="frz-1")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "AGP_CONFLICT"
    assert Freeze.objects.count() == 1


def test_it_lists_freezes_newest_first_with_filters(api):
    for target in ("a-1", "a-2"):
        assert create(api, target_type="agent", target_id=target).status_code == 201
    tool = create(api, target_type="tool", target_id="payments").json()

    listing = api.get(URL).json()
    assert [item["target_id"] for item in listing["items"]] == ["payments", "a-2", "a-1"]
    assert [item["freeze_id"] for item in api.get(URL, {"target_type": "tool"}).json()["items"]] == [
        tool["freeze_id"]]
    assert api.get(URL, {"status": "lifted"}).json()["items"] == []
    assert api.get(URL, {"colour": "red"}).status_code == 400


# --- lifting ------------------------------------------------------------------------------------

def test_it_lifts_a_freeze_once_re_signed_and_ledgered(api):
    freeze = create(api, target_type="agent", target_id="agent-7").json()

    response = api.patch(f"{URL}/{freeze['freeze_id']}", {"status": "lifted", "lifted_by": "ops-lead"},
                         format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["lifted_by"]) == ("lifted", "ops-lead")
    assert body["lifted_at"].endswith("Z")
    assert body["signature"]["payload_hash"] != freeze["signature"]["payload_hash"]
    assert verify_resource(body, jwks(api))
    assert ledger_event_types(freeze["freeze_id"]) == ["freeze.created", "freeze.lifted"]
    lifted = LedgerEvent.objects.get(event_type="freeze.lifted")
    assert lifted.payload == {"from": "active", "to": "lifted", "lifted_by": "ops-lead",
                              "payload_hash": body["signature"]["payload_hash"]}

    again = api.patch(f"{URL}/{freeze['freeze_id']}", {"status": "lifted"}, format="json")

    assert again.status_code == 409
    assert again.json()["error"] == {
        "code": "AGP_INVALID_TRANSITION", "message": "Cannot move from 'lifted' to 'lifted'.", "retryable": False,
        "details": {"from": "lifted", "to": "lifted", "allowed": []}}
    assert ledger_event_types(freeze["freeze_id"]) == ["freeze.created", "freeze.lifted"]
    assert api.get(f"{URL}/{freeze['freeze_id']}").json() == body


def test_it_moves_a_freeze_forward_only(api):
    freeze = create(api, target_type="all").json()
    url = f"{URL}/{freeze['freeze_id']}"

    back = api.patch(url, {"status": "active"}, format="json")
    assert back.status_code == 409
    assert back.json()["error"]["details"] == {"from": "active", "to": "active", "allowed": ["lifted"]}
    assert api.patch(url, {"status": "melted"}, format="json").status_code == 400
    assert api.patch(url, {"status": "lifted", "reason": "x"}, format="json").status_code == 400
    assert api.patch(f"{URL}/no-such-freeze", {"status": "lifted"}, format="json").status_code == 404
    assert Freeze.objects.get(freeze_id=freeze["freeze_id"]).status == "active"


def test_lifting_defaults_lifted_by_to_the_client(authed_api):
    freeze = create(authed_api, target_type="all").json()
    body = authed_api.patch(f"{URL}/{freeze['freeze_id']}", {"status": "lifted"}, format="json").json()
    assert body["lifted_by"] == "test-client"


def test_it_needs_the_revocation_scope_to_freeze_and_to_lift(make_token, api):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.registry.write', 'agp.registry.read'])}")
    assert create(api, target_type="all").status_code == 403
    freeze = Freeze.objects.create(freeze_id="frz-x", target_type="all", reason="r", frozen_by="ops",
                                   created_at=timezone.now())
    assert api.patch(f"{URL}/{freeze.freeze_id}", {"status": "lifted"}, format="json").status_code == 403
    assert api.get(f"{URL}/{freeze.freeze_id}").status_code == 200


# --- what a freeze refuses: 409 AGP_FROZEN -------------------------------------------------------

def _evaluation_body(world, **overrides):
    return {"policy_set_id": world.policy_set.policy_set_id, "task_id": world.task.task_id,
            "agent_id": world.agent_id, "input": {"action_class": "read"}, **overrides}


def test_a_frozen_agent_s_policy_evaluations_are_refused_and_lifting_restores_them(api):
    world = make_world()
    freeze = create(api, target_type="agent", target_id=world.agent_id, freeze_id="frz-agent").json()

    refused = api.post("/agp/policy-evaluations", _evaluation_body(world), format="json")

    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "AGP_FROZEN" and error["retryable"] is False
    assert error["details"] == {"freezes": [{"freeze_id": "frz-agent", "target_type": "agent",
                                             "target_id": world.agent_id}]}
    assert "frz-agent" in error["message"]
    assert PolicyEvaluation.objects.count() == 1  # the world's own
    # Another agent on the same task is not frozen.
    assert api.post("/agp/policy-evaluations", _evaluation_body(world, agent_id="agent-other"),
                    format="json").status_code == 201

    api.patch(f"{URL}/{freeze['freeze_id']}", {"status": "lifted"}, format="json")
    assert api.post("/agp/policy-evaluations", _evaluation_body(world), format="json").status_code == 201


def test_a_frozen_root_principal_refuses_evaluations_for_its_tasks_but_a_tool_freeze_does_not(api):
    world = make_world()
    create(api, target_type="tool", target_id=world.tool_id)
    assert api.post("/agp/policy-evaluations", _evaluation_body(world), format="json").status_code == 201

    create(api, target_type="root_principal", target_id=world.root_principal)
    refused = api.post("/agp/policy-evaluations", _evaluation_body(world), format="json")
    assert refused.status_code == 409
    assert [f["target_type"] for f in refused.json()["error"]["details"]["freezes"]] == ["root_principal"]


def test_an_all_freeze_refuses_every_agent_s_evaluations(api):
    world = make_world()
    create(api, target_type="all")
    assert api.post("/agp/policy-evaluations", _evaluation_body(world, agent_id="anyone"),
                    format="json").json()["error"]["code"] == "AGP_FROZEN"


def test_a_frozen_agent_cannot_delegate_and_a_lifted_freeze_lets_it(api):
    world = make_world()
    body = {"root_principal": world.root_principal, "delegator_agent": world.agent_id,
            "delegate_agent": "sub-agent", "authority_scope": [f"{world.tool_id}:{world.operation}"]}
    freeze = create(api, target_type="agent", target_id=world.agent_id).json()
    before = Delegation.objects.count()

    refused = api.post("/agp/delegations", body, format="json")

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "AGP_FROZEN"
    assert Delegation.objects.count() == before
    api.patch(f"{URL}/{freeze['freeze_id']}", {"status": "lifted"}, format="json")
    assert api.post("/agp/delegations", body, format="json").status_code == 201


def test_a_frozen_root_principal_cannot_grant_root_delegations(api):
    create(api, target_type="root_principal", target_id="acme")
    response = api.post("/agp/delegations", {
        "root_principal": "acme", "delegator_agent": "acme", "delegate_agent": "orchestrator",
        "authority_scope": ["crm:*"], "expires_at": (timezone.now() + timedelta(days=1)).isoformat()},
        format="json")
    assert response.status_code == 409 and response.json()["error"]["code"] == "AGP_FROZEN"


# --- manage.py freeze / unfreeze -----------------------------------------------------------------

def test_operators_freeze_and_unfreeze_from_the_command_line(api):
    out = StringIO()
    call_command("freeze", "agent", "agent-7", "--reason", "runaway loop", "--id", "frz-cli", stdout=out)

    printed = json.loads(out.getvalue())
    assert (printed["freeze_id"], printed["status"], printed["target_id"]) == ("frz-cli", "active", "agent-7")
    assert printed["frozen_by"].startswith("cli")
    assert verify_resource(printed, jwks(api))
    assert LedgerEvent.objects.get(event_type="freeze.created").actor.startswith("cli")

    out = StringIO()
    call_command("unfreeze", "frz-cli", "--lifted-by", "ops-lead", stdout=out)
    printed = json.loads(out.getvalue())
    assert (printed["status"], printed["lifted_by"]) == ("lifted", "ops-lead")
    with pytest.raises(CommandError, match="Cannot move from 'lifted' to 'lifted'"):
        call_command("unfreeze", "frz-cli", stdout=StringIO())
    with pytest.raises(CommandError, match="target_id"):
        call_command("freeze", "all", "everyone", "--reason", "x", stdout=StringIO())
    with pytest.raises(CommandError, match="No freeze"):
        call_command("unfreeze", "frz-none", stdout=StringIO())
    assert ledger_event_types("frz-cli") == ["freeze.created", "freeze.lifted"]
