"""A plain Python function governed in one line: ``@agp.govern(...)``.

    .venv/bin/python examples/governed/refund.py [--agp http://127.0.0.1:8000] [--admin admin:change-me]

Needs AGP with authentication on (``AGP_AUTH_SECRET=... AGP_CLIENT_ID=admin
AGP_CLIENT_SECRET=change-me scripts/serve``, whose worker hands the action back). The
function runs in this process, only once AGP has cleared the call; its receipt records the
hash of what it returned. A call the policy refuses raises, and the function does not run.
"""

import argparse
import uuid

from agp_client import AGPClient, PrerequisiteFailedError

RULESET = """package refunds

import rego.v1

default allow := false

allow if input.action.parameters.amount <= 100
"""

parser = argparse.ArgumentParser()
parser.add_argument("--agp", default="http://127.0.0.1:8000")
parser.add_argument("--admin", default="admin:change-me", help="the operator's client_id:client_secret")
options = parser.parse_args()
run = uuid.uuid4().hex[:8]
tenant, agent_id = f"acme-{run}", f"refund-agent-{run}"

with AGPClient(options.agp, *options.admin.split(":", 1)) as operator:
    agent = operator.clients.create(kind="agent", agent_id=agent_id, tenants=[tenant])
    delegation = operator.delegations.create(root_principal=tenant, delegator_agent=tenant, delegate_agent=agent_id,
                                             authority_scope=["refunds:refund"], expires_at="2099-01-01T00:00:00Z")
    operator.capabilities.create(agent_id=agent_id, delegation_id=delegation["delegation_id"], tool_id="refunds",
                                 operations=["refund"])
    # external: the action is executed by the agent's own code, which posts the receipt.
    operator.skills.create(agent_id=agent_id, name="refunds", version="1", tool_id="refunds", connector="external")
    policy_set = operator.policy_sets.create(name=f"refunds-{run}", version="1", ruleset=RULESET,
                                             root_principal=tenant)

with AGPClient(options.agp, agent["client_id"], agent["client_secret"]) as agp:
    task = agp.tasks.create(root_principal=tenant, title="Refunds", risk_level="low", action_class="write",
                            policy_set_id=policy_set["policy_set_id"])

    @agp.govern(task_id=task["task_id"], tool_id="refunds")
    def refund(order_id: str, amount: int) -> dict:
        print(f"refunding {amount} on {order_id}")
        return {"order_id": order_id, "refunded": amount}

    print("returned:", refund("o-42", 25))
    try:
        refund("o-43", 500)
    except PrerequisiteFailedError as exc:
        print("refused:", ", ".join(item["check"] for item in exc.failed_checks))
