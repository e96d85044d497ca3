"""The client library with a private key against a live server: private_key_jwt, DPoP when the
client requires it, and delegations and approvals signed for its user in one call."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from agp_client import AGPClient
from agp_client.keys import ClientKey

from .conftest import CLIENT_ID, CLIENT_SECRET

pytestmark = pytest.mark.usefixtures("live_db")


def operator(url: str) -> AGPClient:
    return AGPClient(url, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, backoff=0.1)


def later() -> str:
    return (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def keyed(ops: AGPClient, url: str, **fields) -> tuple[AGPClient, ClientKey]:
    key = ClientKey.generate()
    made = ops.clients.create(jwks=key.public_jwks(), **fields)
    return AGPClient(url, client_id=made["client_id"], private_key=key, backoff=0.1), key


def test_an_agent_requiring_dpop_authenticates_with_its_key_and_signs_its_delegations(live_agp):
    run = uuid.uuid4().hex[:8]
    tenant, orchestrator = f"principal-{run}", f"orchestrator-{run}"
    with operator(live_agp.url) as ops:
        root = ops.delegations.create(root_principal=tenant, delegator_agent=tenant, delegate_agent=orchestrator,
                                      authority_scope=["payments:*"], expires_at=later())
        agent, key = keyed(ops, live_agp.url, kind="agent", agent_id=orchestrator, tenants=[tenant],
                           require_dpop=True)
        with agent:
            link = agent.delegations.create(root_principal=tenant, delegate_agent=f"agent-{run}",
                                            authority_scope=["payments:refund"])
            assert agent.auth.token_type == "DPoP"  # asked for a plain token, told to bind it, and did
            # Reads with the bound token across its 2 s lifetime: a fresh proof each time.
            for _ in range(3):
                assert agent.delegations.get(link["delegation_id"])["delegator_agent"] == orchestrator
            assert agent.auth.fetches >= 1
    assert link["signature_chain"][:-1] == [*root["signature_chain"], link["signature_chain"][-2]]
    assert link["signature_chain"][-2].count(".") == 2  # the delegator's own JWS


def test_a_person_with_a_key_signs_an_approval_in_one_call(live_agp):
    run = uuid.uuid4().hex[:8]
    tenant, agent_id = f"principal-{run}", f"agent-{run}"
    with operator(live_agp.url) as ops:
        ops.delegations.create(root_principal=tenant, delegator_agent=tenant, delegate_agent=agent_id,
                               authority_scope=["payments:*"], expires_at=later())
        task = ops.tasks.create(root_principal=tenant, agent_id=agent_id, title="Refund", risk_level="low",
                                action_class="transact")
        decision = ops.decisions.create(task_id=task["task_id"], agent_id=agent_id, outcome="approve",
                                        rationale="within policy")
        person, _ = keyed(ops, live_agp.url, kind="human", subject=f"carol-{run}@example.com", tenants=[tenant])
        with person:
            approval = person.approvals.create(decision_ref=decision["decision_id"], verdict="approved",
                                               expires_at=later())
            assert person.auth.token_type == "bearer"  # not required to bind, so it did not
    assert approval["approver"] == f"carol-{run}@example.com"
    assert approval["approver_signature"].count(".") == 2
