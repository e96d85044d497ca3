"""Delegators sign their links: an agent client with keys must, and the chain then verifies from their keys alone."""

import pytest

from agp_client.authors import delegator_signatures_problem
from agp_client.keys import ClientKey
from registry.models import Delegation
from tests.identity import client_api
from tests.registry import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(auth_settings):
    return f.root_delegation(scope=("payments:*",))


def keyed_agent(agent_id: str, tenant: str):
    key = ClientKey.generate()
    api, client = client_api("agent", [tenant], agent_id=agent_id, jwks=key.public_jwks())
    return api, client, key


def request_for(parent, delegate: str) -> dict:
    return {"root_principal": parent.root_principal, "delegator_agent": parent.delegate_agent,
            "delegate_agent": delegate, "authority_scope": ["payments:refund"]}


def signed(key: ClientKey, body: dict) -> dict:
    return {**body, "delegator_signature": key.sign_statement(body)}


def authors_of(*clients_and_keys) -> dict:
    return {client.client_id: {"kind": "agent", "agent_id": client.agent_id, "keys": [key.public_jwk()]}
            for client, key in clients_and_keys}


def assert_signature_refused(response, words: str):
    assert response.status_code == 400, response.content
    assert words in response.json()["error"]["details"]["fields"]["delegator_signature"][0]


def test_it_refuses_an_agents_unsigned_delegation_when_its_client_has_keys(root):
    api, _, _ = keyed_agent(root.delegate_agent, root.root_principal)
    assert_signature_refused(api.post("/agp/delegations", request_for(root, "agent:b"), format="json"), "Required")
    assert not Delegation.objects.filter(delegate_agent="agent:b").exists()


def test_it_refuses_a_signature_by_another_key(root):
    api, _, _ = keyed_agent(root.delegate_agent, root.root_principal)
    other = ClientKey.generate()
    body = signed(other, request_for(root, "agent:b"))
    assert_signature_refused(api.post("/agp/delegations", body, format="json"), "Does not verify")


def test_it_refuses_a_signature_over_another_request(root):
    api, _, key = keyed_agent(root.delegate_agent, root.root_principal)
    body = {**signed(key, request_for(root, "agent:b")), "delegate_agent": "agent:c"}
    assert_signature_refused(api.post("/agp/delegations", body, format="json"), "not the canonical JSON")


def test_it_refuses_a_detached_signature_which_the_chain_could_not_carry(root):
    from joserfc import jws

    api, _, key = keyed_agent(root.delegate_agent, root.root_principal)
    body = request_for(root, "agent:b")
    detached = jws.detach_content(key.sign_statement(body))
    response = api.post("/agp/delegations", {**body, "delegator_signature": detached}, format="json")
    assert_signature_refused(response, "must carry what it signs")


@pytest.mark.parametrize("garbage", ["", "x", "a.b.c", "é.é.é", "a" * 20000])
def test_it_answers_garbage_signatures_with_400(root, garbage):
    api, _, _ = keyed_agent(root.delegate_agent, root.root_principal)
    response = api.post("/agp/delegations", {**request_for(root, "agent:b"), "delegator_signature": garbage},
                        format="json")
    assert response.status_code == 400, response.content


def test_it_refuses_a_signature_from_a_client_without_keys(root):
    api, _ = client_api("agent", [root.root_principal], agent_id=root.delegate_agent)
    body = signed(ClientKey.generate(), request_for(root, "agent:b"))
    assert_signature_refused(api.post("/agp/delegations", body, format="json"), "no keys")


def test_a_chain_of_signed_links_verifies_from_the_delegators_keys_alone(root):
    api_a, client_a, key_a = keyed_agent(root.delegate_agent, root.root_principal)
    first = api_a.post("/agp/delegations", signed(key_a, request_for(root, "agent:b")), format="json")
    assert first.status_code == 201, first.content
    link_b = Delegation.objects.get(delegation_id=first.json()["delegation_id"])
    api_b, client_b, key_b = keyed_agent("agent:b", root.root_principal)
    second = api_b.post("/agp/delegations", signed(key_b, request_for(link_b, "agent:c")), format="json")
    assert second.status_code == 201, second.content

    links = [api_a.get(f"/agp/delegations/{d.delegation_id}").json()
             for d in (root, link_b, Delegation.objects.get(delegate_agent="agent:c"))]
    chain = links[-1]["signature_chain"]
    assert len(chain) == 5 and chain[1].count(".") == 2 and chain[3].count(".") == 2  # root, A's, svc, B's, svc
    assert chain[-1] == links[-1]["signature"]["value"]
    authors = authors_of((client_a, key_a), (client_b, key_b))
    assert delegator_signatures_problem(links, authors) is None
    assert link_b.delegator_key == key_a.public_jwk()


def test_an_altered_link_or_a_key_of_another_agent_fails_the_chain(root):
    api_a, client_a, key_a = keyed_agent(root.delegate_agent, root.root_principal)
    created = api_a.post("/agp/delegations", signed(key_a, request_for(root, "agent:b")), format="json").json()
    links = [api_a.get(f"/agp/delegations/{root.delegation_id}").json(), created]
    authors = authors_of((client_a, key_a))
    altered = [links[0], {**created, "authority_scope": ["payments:*"]}]
    assert delegator_signatures_problem(altered, authors) == (
        f"delegation link {created['delegation_id']}", "the request its delegator signed is not this link")
    other = {client_a.client_id: {"kind": "agent", "agent_id": client_a.agent_id,
                                  "keys": [ClientKey.generate(kid=key_a.kid).public_jwk()]}}
    assert "does not verify" in delegator_signatures_problem(links, other)[1]
