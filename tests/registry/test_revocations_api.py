"""POST/GET /agp/revocations: immediate, irreversible, cascading (docs/reference/ledger.md)."""

import pytest

from core.models import LedgerEvent
from registry import selectors
from registry.models import Capability, Delegation, LiabilityBinding, Revocation, Skill
from tests.registry import factories as f

pytestmark = pytest.mark.django_db


def revoke(api, target_type, target_id, **extra):
    return api.post("/agp/revocations", {"target_type": target_type, "target_id": target_id, **extra},
                    format="json")


def assert_error(response, status, code):
    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    return response.json()["error"]


def test_it_revokes_the_middle_of_a_chain_of_depth_six_and_every_descendant_at_once(api):
    links = f.chain(6)
    middle = links[2]
    cap_below = f.capability(links[4], tool_id="crm", operations=["read"])
    cap_above = f.capability(links[1], tool_id="crm", operations=["read"])

    response = revoke(api, "delegation", middle.delegation_id, reason="compromised", revoked_by="secops")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert response["Location"] == f"http://testserver/agp/revocations/{body['revocation_id']}"
    assert (body["type"], body["target_type"], body["target_id"]) == ("Revocation", "delegation",
                                                                       middle.delegation_id)
    assert (body["reason"], body["revoked_by"]) == ("compromised", "secops")
    assert body["revoked_at"]
    statuses = dict(Delegation.objects.values_list("delegation_id", "status"))
    assert [statuses[link.delegation_id] for link in links] == ["active", "active"] + ["revoked"] * 4
    assert Capability.objects.get(pk=cap_below.pk).status == "revoked"
    assert Capability.objects.get(pk=cap_above.pk).status == "active"
    # Every descendant is unusable for new delegations at once.
    for link in links[2:]:
        assert selectors.delegation_chain_problem(delegation=link) is not None
        assert_error(api.post("/agp/delegations", {
            "root_principal": link.root_principal, "delegator_agent": link.delegate_agent,
            "delegate_agent": f.unique("agent"), "authority_scope": ["crm:read"]}, format="json"),
            409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert selectors.delegation_chain_problem(delegation=links[1]) is None
    assert Delegation.objects.count() == 6
    revoked_events = LedgerEvent.objects.filter(event_type="delegation.revoked")
    assert sorted(revoked_events.values_list("resource_id", flat=True)) == sorted(
        link.delegation_id for link in links[2:])
    assert revoked_events.get(resource_id=middle.delegation_id).payload == {
        "revocation_id": body["revocation_id"], "cascade": False}
    assert revoked_events.get(resource_id=links[5].delegation_id).payload["cascade"] is True
    assert LedgerEvent.objects.filter(event_type="capability.revoked", resource_id=cap_below.capability_id).exists()
    assert LedgerEvent.objects.filter(event_type="revocation.created", resource_id=body["revocation_id"]).exists()


def test_it_invalidates_descendants_at_read_time_even_without_the_cascade(api):
    links = f.chain(4)
    # Simulate a stored status that lags behind (no cascade): only the middle row says revoked.
    Delegation.objects.filter(pk=links[1].pk).update(status="revoked")
    assert selectors.delegation_chain_problem(delegation=links[3]) is not None
    assert selectors.delegation_usable_with_chain(agent_id=links[3].delegate_agent,
                                                  root_principal=links[0].root_principal) is None
    assert selectors.delegation_chain_problem(delegation=links[0]) is None


def test_it_revokes_an_agent_and_everything_it_holds_or_granted(api):
    root = f.root_delegation(scope=["*"], hops=5)
    to_agent = f.child_delegation(root, delegate="agent-x")
    below = f.child_delegation(to_agent)
    other = f.child_delegation(root)
    capability = f.capability(to_agent)
    skill = f.skill(agent_id="agent-x")
    binding = f.liability_binding(agent_id="agent-x")
    other_skill = f.skill()

    response = revoke(api, "agent", "agent-x")

    assert response.status_code == 201, response.json()
    assert Delegation.objects.get(pk=to_agent.pk).status == "revoked"
    assert Delegation.objects.get(pk=below.pk).status == "revoked"
    assert Delegation.objects.get(pk=root.pk).status == "active"
    assert Delegation.objects.get(pk=other.pk).status == "active"
    assert Capability.objects.get(pk=capability.pk).status == "revoked"
    assert Skill.objects.get(pk=skill.pk).status == "revoked"
    assert LiabilityBinding.objects.get(pk=binding.pk).status == "revoked"
    assert Skill.objects.get(pk=other_skill.pk).status == "active"
    assert Revocation.objects.get(revocation_id=response.json()["revocation_id"]).target_id == "agent-x"
    for event_type, resource_id in [("delegation.revoked", to_agent.delegation_id),
                                    ("delegation.revoked", below.delegation_id),
                                    ("capability.revoked", capability.capability_id),
                                    ("skill.revoked", skill.skill_id),
                                    ("liability_binding.revoked", binding.binding_id)]:
        assert LedgerEvent.objects.filter(event_type=event_type, resource_id=resource_id).exists()
    # Nothing new for a revoked agent.
    assert_error(api.post("/agp/skills", {"agent_id": "agent-x", "name": "n", "tool_id": "crm"}, format="json"),
                 409, "AGP_CONFLICT")


def test_it_revokes_the_root_principal_as_an_agent_and_with_it_its_trees(api):
    links = f.chain(3)
    assert revoke(api, "agent", links[0].root_principal).status_code == 201
    assert set(Delegation.objects.values_list("status", flat=True)) == {"revoked"}


@pytest.mark.parametrize("target_type", ["capability", "skill", "liability_binding"])
def test_it_revokes_a_single_record(api, target_type):
    root = f.root_delegation()
    record, id_field, model = {
        "capability": (lambda: f.capability(root), "capability_id", Capability),
        "skill": (lambda: f.skill(), "skill_id", Skill),
        "liability_binding": (lambda: f.liability_binding(), "binding_id", LiabilityBinding),
    }[target_type]
    record = record()
    target_id = getattr(record, id_field)

    response = revoke(api, target_type, target_id)

    assert response.status_code == 201, response.json()
    assert model.objects.get(pk=record.pk).status == "revoked"
    assert Delegation.objects.get(pk=root.pk).status == "active"
    assert LedgerEvent.objects.get(event_type=f"{target_type}.revoked", resource_id=target_id).payload[
        "cascade"] is False


@pytest.mark.parametrize("target_type", ["delegation", "capability", "skill", "liability_binding"])
def test_it_refuses_a_target_that_does_not_exist(api, target_type):
    error = assert_error(revoke(api, target_type, "missing-1"), 400, "AGP_INVALID_REQUEST")
    assert "target_id" in error["details"]["fields"]
    assert not Revocation.objects.exists()


def test_it_accepts_an_agent_that_has_no_records_yet(api):
    assert revoke(api, "agent", "agent-unknown").status_code == 201
    assert selectors.agent_is_revoked(agent_id="agent-unknown")


@pytest.mark.parametrize("target_type", ["delegation", "agent", "skill"])
def test_it_refuses_to_revoke_twice(api, target_type):
    target_id = {"delegation": lambda: f.root_delegation().delegation_id, "agent": lambda: "agent-twice",
                 "skill": lambda: f.skill().skill_id}[target_type]()
    first = revoke(api, target_type, target_id)
    second = revoke(api, target_type, target_id)
    error = assert_error(second, 409, "AGP_CONFLICT")
    assert error["details"] == {"target_type": target_type, "target_id": target_id,
                                "revocation_id": first.json()["revocation_id"]}
    assert Revocation.objects.count() == 1
    assert LedgerEvent.objects.filter(event_type="revocation.created").count() == 1


def test_it_refuses_to_revoke_a_link_already_revoked_by_a_cascade(api):
    links = f.chain(3)
    revoke(api, "delegation", links[0].delegation_id)
    error = assert_error(revoke(api, "delegation", links[2].delegation_id), 409, "AGP_CONFLICT")
    assert error["details"]["revocation_id"] is None
    assert Revocation.objects.count() == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"target_type": "task", "target_id": "t"}, "target_type"),
    ({"target_type": "agent"}, "target_id"),
    ({"target_type": "agent", "target_id": "a", "revoked_at": "2026-01-01T00:00:00Z"}, "revoked_at"),
    ({"target_type": "agent", "target_id": "a", "cascade": False}, "cascade"),
])
def test_it_refuses_invalid_revocations(api, body, field):
    error = assert_error(api.post("/agp/revocations", body, format="json"), 400, "AGP_INVALID_REQUEST")
    assert field in error["details"]["fields"]
    assert not Revocation.objects.exists()


def test_it_defaults_revoked_by_to_the_client_and_needs_the_revocation_scope(api, make_token):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.registry.write'])}")
    error = assert_error(revoke(api, "agent", "a-1"), 403, "AGP_INSUFFICIENT_SCOPE")
    assert error["details"]["required_scopes"] == ["agp.revocation.write"]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.revocation.write'], client_id='ops')}")
    response = revoke(api, "agent", "a-1")
    assert response.status_code == 201
    assert response.json()["revoked_by"] == "ops"
    assert Revocation.objects.get().revoked_by == "ops"
    assert LedgerEvent.objects.get(event_type="revocation.created").actor == "ops"


def test_it_lists_and_retrieves_revocations(api):
    first = f.revoke("agent", "a-1")
    f.revoke("agent", "a-2")
    listed = api.get("/agp/revocations", {"target_type": "agent", "target_id": "a-1"})
    assert listed.status_code == 200
    assert [i["revocation_id"] for i in listed.json()["items"]] == [first.revocation_id]
    assert api.get(f"/agp/revocations/{first.revocation_id}").json()["target_id"] == "a-1"
    assert_error(api.get("/agp/revocations/none"), 404, "AGP_NOT_FOUND")
