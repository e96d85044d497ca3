"""POST/GET /agp/delegations (docs/reference/api.md, docs/reference/governance.md)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agp_project.canonical import content_hash
from agp_project.signing import get_signer, verify_resource
from core.models import LedgerEvent
from registry.documents import delegation_link_payload
from registry.models import Delegation
from tests.registry import factories as f

pytestmark = pytest.mark.django_db


def iso(dt):
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def post(api, body, **headers):
    return api.post("/agp/delegations", body, format="json", **headers)


def child_body(parent, **overrides):
    body = {"root_principal": parent.root_principal, "delegator_agent": parent.delegate_agent,
            "delegate_agent": f.unique("agent"), "authority_scope": list(parent.authority_scope)}
    body.update(overrides)
    return body


def assert_error(response, status, code):
    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    return response.json()["error"]


def test_it_creates_a_root_delegation_with_defaults(api, settings):
    settings.AGP_DEFAULT_MAX_HOPS = 4
    expires = f.later(days=2)
    response = post(api, {"type": "DelegationChain", "delegation_id": "dlg-root-1", "root_principal": "alice",
                          "delegator_agent": "alice", "delegate_agent": "agent-a",
                          "authority_scope": ["payments:*"], "constraints": {}, "expires_at": iso(expires)})

    assert response.status_code == 201, response.json()
    body = response.json()
    assert response["Location"] == "http://testserver/agp/delegations/dlg-root-1"
    assert body["type"] == "DelegationChain"
    assert body["parent_delegation_id"] is None
    assert body["constraints"] == {"max_hops_remaining": 4}
    assert body["expires_at"] == iso(expires)
    assert body["status"] == "active"
    assert len(body["signature_chain"]) == 1
    assert body["signature_chain"][0] == body["signature"]["value"]
    row = Delegation.objects.get(delegation_id="dlg-root-1")
    assert (row.parent_id, row.depth, row.max_hops_remaining, row.spend_amount) == (None, 0, 4, None)
    assert row.path == f"{row.pk:012d}/"
    event = LedgerEvent.objects.get(event_type="delegation.created", resource_id="dlg-root-1")
    assert event.resource_type == "DelegationChain"
    assert event.payload["parent_delegation_id"] is None


def test_it_finds_the_parent_and_populates_inherited_constraints(api):
    root = f.root_delegation(scope=["payments:*", "crm:read"], hops=3,
                             spend={"currency": "EUR", "amount": Decimal("500")})
    response = post(api, child_body(root, authority_scope=["payments:refund"]))

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["parent_delegation_id"] == root.delegation_id
    assert body["constraints"] == {"spend_limit": {"currency": "EUR", "amount": 500}, "max_hops_remaining": 2}
    assert body["expires_at"] == iso(root.expires_at)
    assert body["signature_chain"][:-1] == root.signature_chain
    row = Delegation.objects.get(delegation_id=body["delegation_id"])
    assert row.parent_id == root.delegation_id
    assert row.path == f"{root.path}{row.pk:012d}/"
    assert row.depth == 1
    assert LedgerEvent.objects.filter(event_type="delegation.created", resource_id=row.delegation_id).exists()


def test_it_accepts_attenuated_constraints(api):
    root = f.root_delegation(scope=["*"], hops=5, spend={"currency": "USD", "amount": Decimal("100")})
    expires = root.expires_at - timedelta(hours=1)
    response = post(api, child_body(root, authority_scope=["crm:read"], expires_at=iso(expires), constraints={
        "spend_limit": {"currency": "USD", "amount": 12.5}, "max_hops_remaining": 1}))

    assert response.status_code == 201, response.json()
    assert response.json()["constraints"] == {"spend_limit": {"currency": "USD", "amount": 12.5},
                                              "max_hops_remaining": 1}
    row = Delegation.objects.get(delegation_id=response.json()["delegation_id"])
    assert (row.spend_currency, row.spend_amount, row.max_hops_remaining, row.expires_at) == (
        "USD", Decimal("12.5"), 1, expires)


def test_it_chooses_the_newest_usable_covering_parent(api):
    old = f.root_delegation(principal="bob", delegate="agent-b", scope=["crm:*"])
    newer_narrow = f.root_delegation(principal="bob", delegate="agent-b", scope=["payments:*"])
    response = post(api, child_body(old, authority_scope=["crm:update"]))
    assert response.json()["parent_delegation_id"] == old.delegation_id

    newest = f.root_delegation(principal="bob", delegate="agent-b", scope=["crm:*"])
    response = post(api, child_body(old, authority_scope=["crm:update"]))
    assert response.json()["parent_delegation_id"] == newest.delegation_id
    f.revoke("delegation", newest.delegation_id)
    response = post(api, child_body(old, authority_scope=["crm:update"]))
    assert response.json()["parent_delegation_id"] == old.delegation_id
    assert newer_narrow.delegation_id not in {d.parent_id for d in Delegation.objects.all()}


def test_it_skips_an_expired_parent(api):
    root = f.root_delegation(scope=["crm:*"])
    Delegation.objects.filter(pk=root.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    error = assert_error(post(api, child_body(root)), 409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert error["details"]["delegator_agent"] == root.delegate_agent
    assert Delegation.objects.count() == 1


def test_it_signs_every_link_over_the_parents_chain(api):
    root = f.root_delegation()
    child = post(api, child_body(root)).json()
    grandchild = post(api, child_body(Delegation.objects.get(delegation_id=child["delegation_id"]))).json()
    jwks = {"keys": [get_signer().jwk()]}

    for link in (child, grandchild):
        payload = delegation_link_payload(link)
        assert content_hash(payload) == link["signature"]["payload_hash"]
        assert verify_resource({**payload, "signature": link["signature"]}, jwks)
        assert link["signature_chain"][-1] == link["signature"]["value"]
    assert grandchild["signature_chain"][:2] == child["signature_chain"]
    tampered = {**delegation_link_payload(grandchild), "authority_scope": ["root:*"]}
    assert not verify_resource({**tampered, "signature": grandchild["signature"]}, jwks)


@pytest.mark.parametrize(("body_change", "field"), [
    ({"delegate_agent": "SAME"}, "delegate_agent"),
    ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ({"colour": "blue"}, "colour"),
    ({"parent_delegation_id": "x"}, "parent_delegation_id"),
    ({"signature_chain": []}, "signature_chain"),
    ({"status": "active"}, "status"),
    ({"constraints": {"max_hops": 1}}, "constraints"),
    ({"constraints": {"spend_limit": {"currency": "EUR", "amount": 1, "per": "day"}}}, "constraints"),
    ({"constraints": {"max_hops_remaining": -1}}, "constraints"),
    ({"authority_scope": []}, "authority_scope"),
    ({"authority_scope": ["crm read"]}, "authority_scope"),
    ({"authority_scope": ["crm:read", "crm:read"]}, "authority_scope"),
    ({"type": "PolicySet"}, "type"),
    ({"delegation_id": "bad id!"}, "delegation_id"),
])
def test_it_refuses_invalid_requests_with_400(api, body_change, field):
    root = f.root_delegation()
    body = child_body(root, **body_change)
    if body.get("delegate_agent") == "SAME":
        body["delegate_agent"] = body["delegator_agent"]
    error = assert_error(post(api, body), 400, "AGP_INVALID_REQUEST")
    assert field in error["details"]["fields"]
    assert Delegation.objects.count() == 1
    assert LedgerEvent.objects.filter(event_type="delegation.created").count() == 1


def test_it_requires_expires_at_on_a_root_delegation(api):
    error = assert_error(post(api, {"root_principal": "carol", "delegator_agent": "carol", "delegate_agent": "a1",
                                    "authority_scope": ["*"]}), 400, "AGP_INVALID_REQUEST")
    assert "expires_at" in error["details"]["fields"]
    assert not Delegation.objects.exists()


def test_it_refuses_a_scope_the_parent_does_not_cover(api):
    root = f.root_delegation(scope=["crm:read", "payments:*"])
    error = assert_error(post(api, child_body(root, authority_scope=["crm:read", "crm:update"])),
                         409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert error["details"]["authority_scope"] == ["crm:read", "crm:update"]
    assert Delegation.objects.count() == 1


def test_it_refuses_a_delegator_without_any_delegation(api):
    body = {"root_principal": "dave", "delegator_agent": "stranger", "delegate_agent": "x",
            "authority_scope": ["*"], "expires_at": iso(f.later())}
    assert_error(post(api, body), 409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert not Delegation.objects.exists()


def test_it_refuses_a_cycle(api):
    links = f.chain(3)
    error = assert_error(post(api, child_body(links[-1], delegate_agent=links[0].delegate_agent)),
                         409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert error["details"]["cycle"] is True
    assert_error(post(api, child_body(links[-1], delegate_agent=links[0].root_principal)),
                 409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert Delegation.objects.count() == 3


def test_it_refuses_a_child_of_a_parent_with_no_hops_left(api):
    root = f.root_delegation(hops=0)
    error = assert_error(post(api, child_body(root)), 409, "AGP_DELEGATION_HOP_LIMIT")
    assert error["details"]["parent_max_hops_remaining"] == 0
    assert Delegation.objects.count() == 1


def test_it_refuses_more_hops_than_the_parent_leaves(api):
    root = f.root_delegation(hops=2)
    error = assert_error(post(api, child_body(root, constraints={"max_hops_remaining": 2})),
                         409, "AGP_DELEGATION_HOP_LIMIT")
    assert (error["details"]["max_allowed"], error["details"]["requested"]) == (1, 2)
    assert Delegation.objects.count() == 1


@pytest.mark.parametrize("spend", [
    {"currency": "EUR", "amount": 100.01},
    {"currency": "USD", "amount": 1},
])
def test_it_refuses_spend_beyond_the_parent(api, spend):
    root = f.root_delegation(spend={"currency": "EUR", "amount": Decimal("100")})
    error = assert_error(post(api, child_body(root, constraints={"spend_limit": spend})),
                         409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert error["details"]["constraint"] == "spend_limit"
    assert Delegation.objects.count() == 1


def test_it_refuses_spend_under_a_parent_without_spending_authority(api):
    root = f.root_delegation()
    assert_error(post(api, child_body(root, constraints={"spend_limit": {"currency": "EUR", "amount": 1}})),
                 409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert Delegation.objects.count() == 1


def test_it_refuses_an_expiry_later_than_the_parents(api):
    root = f.root_delegation(expires_at=f.later(days=1))
    error = assert_error(post(api, child_body(root, expires_at=iso(f.later(days=2)))),
                         409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert error["details"]["constraint"] == "expires_at"
    assert Delegation.objects.count() == 1


def test_it_refuses_a_delegation_to_a_revoked_agent(api):
    root = f.root_delegation()
    f.revoke("agent", "mallory")
    error = assert_error(post(api, child_body(root, delegate_agent="mallory")), 409, "AGP_CONFLICT")
    assert error["details"]["revoked_agents"] == ["mallory"]
    assert Delegation.objects.count() == 1


def test_it_refuses_a_duplicate_id(api):
    root = f.root_delegation(delegation_id="dlg-dup")
    error = assert_error(post(api, child_body(root, delegation_id="dlg-dup")), 409, "AGP_CONFLICT")
    assert error["details"] == {"field": "delegation_id", "value": "dlg-dup"}
    assert Delegation.objects.count() == 1


def test_it_replays_a_create_with_the_same_idempotency_key(api):
    root = f.root_delegation()
    body = child_body(root)
    first = post(api, body, HTTP_IDEMPOTENCY_KEY="k-1")
    second = post(api, body, HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, second.status_code) == (201, 201)
    assert second["Idempotent-Replayed"] == "true"
    assert second.content == first.content
    assert Delegation.objects.count() == 2
    assert LedgerEvent.objects.filter(event_type="delegation.created").count() == 2


def test_it_retrieves_and_lists_with_filters(api):
    root = f.root_delegation(principal="erin")
    child = f.child_delegation(root)
    f.root_delegation(principal="frank")

    got = api.get(f"/agp/delegations/{child.delegation_id}")
    assert got.status_code == 200
    assert got.json()["parent_delegation_id"] == root.delegation_id

    listed = api.get("/agp/delegations", {"root_principal": "erin"})
    assert listed.status_code == 200
    assert [i["delegation_id"] for i in listed.json()["items"]] == [child.delegation_id, root.delegation_id]
    by_parent = api.get("/agp/delegations", {"parent_delegation_id": root.delegation_id}).json()["items"]
    assert [i["delegation_id"] for i in by_parent] == [child.delegation_id]
    by_delegate = api.get("/agp/delegations", {"delegate_agent": child.delegate_agent, "status": "active"})
    assert [i["delegation_id"] for i in by_delegate.json()["items"]] == [child.delegation_id]
    page = api.get("/agp/delegations", {"limit": 1}).json()
    assert len(page["items"]) == 1 and page["next_cursor"]
    assert_error(api.get("/agp/delegations", {"agent": "x"}), 400, "AGP_INVALID_REQUEST")
    assert_error(api.get("/agp/delegations/nope"), 404, "AGP_NOT_FOUND")


def test_it_does_not_allow_other_methods(api):
    root = f.root_delegation()
    assert_error(api.delete(f"/agp/delegations/{root.delegation_id}"), 405, "AGP_METHOD_NOT_ALLOWED")
    assert_error(api.patch(f"/agp/delegations/{root.delegation_id}", {}, format="json"),
                 405, "AGP_METHOD_NOT_ALLOWED")
    assert Delegation.objects.filter(pk=root.pk, status="active").exists()


def test_it_needs_the_registry_write_scope_to_create(api, make_token):
    root = f.root_delegation()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.registry.read'])}")
    error = assert_error(post(api, child_body(root)), 403, "AGP_INSUFFICIENT_SCOPE")
    assert error["details"]["required_scopes"] == ["agp.registry.write"]
    assert api.get(f"/agp/delegations/{root.delegation_id}").status_code == 200
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.registry.write'])}")
    assert post(api, child_body(root)).status_code == 201
    assert Delegation.objects.count() == 2
