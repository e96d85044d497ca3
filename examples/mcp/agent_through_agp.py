"""An agent that calls its tools through AGP's MCP gateway, with the official MCP client.

    .venv/bin/python examples/mcp/agent_through_agp.py [--agp http://127.0.0.1:8000] [--mcp http://127.0.0.1:8765/mcp]
                                                       [--admin admin:change-me]

Needs AGP with authentication on and loopback endpoints allowed (the example server is on
127.0.0.1): ``AGP_ALLOW_PRIVATE_URLS=1 AGP_AUTH_SECRET=... AGP_CLIENT_ID=admin
AGP_CLIENT_SECRET=change-me scripts/serve``, and ``examples/mcp/crm_server.py`` running.
The operator sets the agent up once; the agent then only speaks MCP: its client lists its
governed tools and calls one; AGP decides by the task's policy set, calls the server's tool
and returns the result with its signed receipt. Each run uses fresh ids.
"""

import argparse
import json
import uuid

import anyio

from agp_client import AGPClient

RULESET = """package crm.agent

import rego.v1

default allow := false

allow if input.action.operation == "lookup_customer"
"""

parser = argparse.ArgumentParser()
parser.add_argument("--agp", default="http://127.0.0.1:8000")
parser.add_argument("--mcp", default="http://127.0.0.1:8765/mcp")
parser.add_argument("--admin", default="admin:change-me", help="the operator's client_id:client_secret")
options = parser.parse_args()
run = uuid.uuid4().hex[:8]
tenant, agent_id = f"acme-{run}", f"support-agent-{run}"

# Once, by the operator: the agent's client, what it may do, its tool (pinned), the policy.
with AGPClient(options.agp, *options.admin.split(":", 1)) as operator:
    agent = operator.clients.create(kind="agent", agent_id=agent_id, tenants=[tenant])
    delegation = operator.delegations.create(root_principal=tenant, delegator_agent=tenant, delegate_agent=agent_id,
                                             authority_scope=["crm:lookup_customer"], expires_at="2099-01-01T00:00:00Z")
    operator.capabilities.create(agent_id=agent_id, delegation_id=delegation["delegation_id"], tool_id="crm",
                                 operations=["lookup_customer"])
    operator.skills.create(agent_id=agent_id, name="CRM over MCP", version="1", tool_id="crm", connector="mcp",
                           endpoint_url=options.mcp)
    policy_set = operator.policy_sets.create(name=f"crm-{run}", version="1", ruleset=RULESET, root_principal=tenant)

with AGPClient(options.agp, agent["client_id"], agent["client_secret"]) as agp:
    task = agp.tasks.create(root_principal=tenant, title="Answer a customer", risk_level="low",
                            action_class="read", policy_set_id=policy_set["policy_set_id"])

    async def main() -> None:
        # The official SDK's Client, pointed at AGP's /mcp with the agent's token and its task.
        async with agp.mcp_session(task_id=task["task_id"]) as session:
            tools = await session.list_tools()
            print("tools:", [tool.name for tool in tools.tools])
            result = await session.call_tool("crm.lookup_customer", {"customer_id": "c-42"})
            print("result:", result.content[0].text)
            receipt = result.meta["agp/receipt"]
            print("receipt:", receipt["receipt_id"], receipt["result_hash"])
            print("signature valid:", agp.verify_signature(receipt))
            print("decided by:", json.dumps(agp.decisions.get(receipt["governance"]["decision_id"])["decided_by"]))

    anyio.run(main)
