"""The MCP gateway at /mcp (gateway/), end to end: a live gunicorn server with authentication on,
a real upstream MCP server from the official SDK (tests/mcp_server.py, which records every
call it receives), and the official SDK's client against /mcp with an agent client's token.

Everything is set up through the API, as a user would, so the module runs on SQLite (the
server works on a file copy of the test database) and on PostgreSQL alike.
"""

import uuid
from datetime import UTC, datetime, timedelta

import anyio
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from agp_client import AGPClient, verify_signature
from agp_client.keys import ClientKey
from tests.agp_client.server import LiveServer, database_url
from tests.mcp_server import McpServerProcess, free_port

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("live_db")]

OPERATOR, OPERATOR_SECRET = "operator", "operator-secret-0123456789"
RULESET = """package crm.gateway

import rego.v1

default allow := false

allow if input.action.operation == "lookup_customer"

allow if {
    input.action.operation == "issue_refund"
    input.action.parameters.amount <= 100
}

require_approval if {
    input.action.operation == "issue_refund"
    input.action.parameters.amount > 20
}
"""
TOMORROW = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def live_db(transactional_db):
    from core.models import LedgerHead

    LedgerHead.objects.get_or_create(pk=1)


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory):
    """AGP with authentication on and loopback endpoints allowed, and one upstream MCP server."""
    workdir = tmp_path_factory.mktemp("gateway")
    with django_db_blocker.unblock():
        db_url = database_url(workdir)
    upstream = McpServerProcess(workdir=workdir, port=free_port(), description=(
        "Look up a customer by id and return the customer's name.")).start()
    server = LiveServer.start(workdir, db_url=db_url, threads=4, workers=1, env={
        "AGP_ALLOW_PRIVATE_URLS": "1", "AGP_AUTH_SECRET": "gateway-test-secret-0123456789abcdef",
        "AGP_CLIENT_ID": OPERATOR, "AGP_CLIENT_SECRET": OPERATOR_SECRET, "AGP_CONNECTOR_TIMEOUT_SECONDS": "5"})
    yield server, upstream
    server.stop()
    upstream.stop()


class World:
    """A tenant whose agent may look customers up and refund through the upstream server, with a
    task governed by RULESET; the agent's and a person's API clients."""

    def __init__(self, server, upstream):
        run = uuid.uuid4().hex[:8]
        self.base = server.url
        self.tenant, self.agent = f"acme-{run}", f"agent-{run}"
        self.operator = AGPClient(server.url, OPERATOR, OPERATOR_SECRET)
        made = self.operator.clients.create(kind="agent", agent_id=self.agent, tenants=[self.tenant])
        self.agent_api = AGPClient(server.url, made["client_id"], made["client_secret"])
        person = self.operator.clients.create(kind="human", subject=f"ada-{run}@example.com", tenants=[self.tenant])
        self.person_api = AGPClient(server.url, person["client_id"], person["client_secret"])
        delegation = self.operator.delegations.create(
            root_principal=self.tenant, delegator_agent=self.tenant, delegate_agent=self.agent,
            authority_scope=["crm:*"], expires_at=TOMORROW)
        self.capability = self.operator.capabilities.create(
            agent_id=self.agent, delegation_id=delegation["delegation_id"], tool_id="crm",
            operations=["lookup_customer", "issue_refund"])
        self.skill = self.operator.skills.create(agent_id=self.agent, name="CRM", version="1", tool_id="crm",
                                                 connector="mcp", endpoint_url=upstream.url)
        policy_set = self.operator.policy_sets.create(name=f"crm-{run}", version="1", ruleset=RULESET,
                                                      root_principal=self.tenant)
        self.task = self.agent_api.tasks.create(root_principal=self.tenant, title="Answer a customer",
                                                risk_level="low", action_class="write",
                                                policy_set_id=policy_set["policy_set_id"])

    def token(self, api: AGPClient) -> str:
        return api.auth.token()

    def call(self, name: str, arguments: dict, *, token: str | None = None):
        """One tools/call with the official client, the task in the connection's header."""
        headers = {"Authorization": f"Bearer {token or self.token(self.agent_api)}",
                   "AGP-Task-Id": self.task["task_id"]}

        async def go():
            async with httpx2.AsyncClient(headers=headers) as http:
                async with Client(streamable_http_client(f"{self.base}/mcp", http_client=http)) as client:
                    return await client.call_tool(name, arguments)

        return anyio.run(go)


@pytest.fixture
def world(stack):
    server, upstream = stack
    return World(server, upstream)


def calls_of(upstream, arguments):
    return [call for call in upstream.calls() if call["arguments"] == arguments]


def test_it_lists_the_agents_governed_tools_as_pinned(world):
    async def listing():
        async with world.agent_api.mcp_session(task_id=world.task["task_id"]) as session:
            return (await session.list_tools()).tools

    tools = {tool.name: tool for tool in anyio.run(listing)}

    assert sorted(tools) == ["crm.issue_refund", "crm.lookup_customer"]  # "wait" is no capability's
    pinned = next(pin for pin in world.skill["tool_pins"] if pin["name"] == "lookup_customer")["definition"]
    assert tools["crm.lookup_customer"].description == pinned["description"]
    assert tools["crm.lookup_customer"].annotations.read_only_hint is True


def test_an_agent_with_a_dpop_bound_token_connects_with_a_proof_per_request(world):
    key = ClientKey.generate()
    made = world.operator.clients.create(kind="agent", agent_id=world.agent, tenants=[world.tenant],
                                         jwks=key.public_jwks(), require_dpop=True)
    bound = AGPClient(world.base, made["client_id"], private_key=key)

    async def listing():
        async with bound.mcp_session(task_id=world.task["task_id"]) as session:
            return (await session.list_tools()).tools

    assert sorted(tool.name for tool in anyio.run(listing)) == ["crm.issue_refund", "crm.lookup_customer"]
    assert bound.auth.token_type == "DPoP"
    response = httpx2.post(f"{world.base}/mcp", headers={"Authorization": f"Bearer {bound.auth.token()}",
                                                         "Accept": "application/json, text/event-stream"},
                           json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith('DPoP error=')


def test_a_cleared_call_reaches_the_tool_once_and_returns_its_signed_receipt_which_is_in_the_ledger(world, stack):
    _, upstream = stack
    arguments = {"customer_id": f"c-{uuid.uuid4().hex[:6]}"}

    result = world.call("crm.lookup_customer", arguments)

    assert result.is_error is False, result
    assert result.content[0].text == f"customer {arguments['customer_id']}: Ada Lovelace"
    receipt = result.meta["agp/receipt"]
    assert receipt["status"] == "succeeded"
    assert verify_signature(receipt, world.operator.jwks())
    assert len(calls_of(upstream, arguments)) == 1
    events = {event["event_type"]: event for event in world.operator.ledger_events.list(
        action_id=receipt["action_id"])}
    assert events["receipt.issued"]["payload"]["result_hash"] == receipt["result_hash"]
    decision = world.operator.decisions.get(receipt["governance"]["decision_id"])
    assert (decision["decided_by"], decision["status"]) == ("policy", "finalised")


def test_a_refused_call_never_reaches_the_tool_and_carries_the_error_object(world, stack):
    _, upstream = stack
    arguments = {"amount": 500}

    result = world.call("crm.issue_refund", arguments)

    assert result.is_error is True
    error = result.meta["agp/error"]
    assert error["code"] == "AGP_PREREQUISITE_FAILED"
    assert {"decision", "policy_evaluation"} <= {item["check"] for item in error["details"]["failed_checks"]}
    assert "policy_evaluation" in result.content[0].text
    assert calls_of(upstream, arguments) == []


def test_a_call_needing_approval_waits_and_the_same_call_clears_after_a_person_approves(world, stack):
    _, upstream = stack
    arguments = {"amount": 42}

    waiting = world.call("crm.issue_refund", arguments)

    assert waiting.is_error is True
    decision_id = waiting.meta["agp/error"]["details"]["decision_id"]
    assert world.operator.decisions.get(decision_id)["status"] == "draft"
    assert calls_of(upstream, arguments) == []
    world.person_api.approvals.create(decision_ref=decision_id, verdict="approved", expires_at=TOMORROW)

    cleared = world.call("crm.issue_refund", arguments)

    assert cleared.is_error is False, cleared
    assert cleared.meta["agp/receipt"]["governance"]["decision_id"] == decision_id
    assert len(calls_of(upstream, arguments)) == 1


def test_a_frozen_agents_call_is_refused(world, stack):
    _, upstream = stack
    world.operator.freezes.create(target_type="agent", target_id=world.agent, reason="incident")
    arguments = {"customer_id": "c-frozen"}

    result = world.call("crm.lookup_customer", arguments)

    assert result.is_error is True
    assert "freeze" in {item["check"] for item in result.meta["agp/error"]["details"]["failed_checks"]}
    assert calls_of(upstream, arguments) == []


def test_a_revoked_capabilitys_tools_are_neither_listed_nor_called(world, stack):
    _, upstream = stack
    world.operator.revocations.create(target_type="capability", target_id=world.capability["capability_id"],
                                      reason="compromised")
    arguments = {"customer_id": "c-revoked"}

    async def listing():
        async with world.agent_api.mcp_session(task_id=world.task["task_id"]) as session:
            return (await session.list_tools()).tools

    assert anyio.run(listing) == []
    with pytest.raises(BaseExceptionGroup) as raised:  # the SDK's client raises it out of its task group
        world.call("crm.lookup_customer", arguments)
    assert raised.group_contains(MCPError, match="Unknown tool: crm.lookup_customer")
    assert calls_of(upstream, arguments) == []


@pytest.mark.parametrize("who", ["operator", "person", "nobody"])
def test_only_agent_clients_may_connect(world, who):
    token = {"operator": lambda: world.token(world.operator), "person": lambda: world.token(world.person_api),
             "nobody": lambda: None}[who]()
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    response = httpx2.post(f"{world.base}/mcp", headers={**headers, "Accept": "application/json, text/event-stream"},
                           json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})

    assert response.status_code == (401 if who == "nobody" else 403)
    assert response.json()["error"]["code"] == ("AGP_UNAUTHENTICATED" if who == "nobody" else "AGP_FORBIDDEN")


def test_a_changed_tool_definition_is_refused_and_not_called(world, stack):
    _, upstream = stack
    upstream.restart(destructive=True)  # the same tool now says it destroys things
    try:
        arguments = {"customer_id": "c-changed"}

        result = world.call("crm.lookup_customer", arguments)

        assert result.is_error is True
        assert result.meta["agp/error"]["code"] == "AGP_TOOL_CHANGED"
        assert result.meta["agp/receipt"]["status"] == "failed"
        assert calls_of(upstream, arguments) == []
    finally:
        upstream.restart(destructive=False)
