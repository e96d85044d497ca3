"""Register an MCP server's tools with AGP and make one governed tool call.

    .venv/bin/python examples/mcp/governed_call.py [--agp http://127.0.0.1:8000] [--mcp http://127.0.0.1:8765/mcp]
                                                   [--rug-pull]

Needs AGP running with ``AGP_ALLOW_PRIVATE_URLS=1`` (the example server is on 127.0.0.1)
and authentication off (``AGP_AUTH_SECRET`` unset), as ``scripts/serve`` starts it by
default. Each run uses fresh ids, so it can be run again.
"""

import argparse
import json
import uuid

from agp_client import AGPClient

RULESET = """package crm.policy

import rego.v1

default allow := false

allow if input.action.operation == "lookup_customer"
"""

# The action every call below makes: the policy evaluation is made for exactly this action,
# and an envelope may cite it only for this action.
LOOKUP = {"tool_id": "crm", "operation": "lookup_customer", "parameters": {"customer_id": "c-42"}}

parser = argparse.ArgumentParser()
parser.add_argument("--agp", default="http://127.0.0.1:8000")
parser.add_argument("--mcp", default="http://127.0.0.1:8765/mcp")
parser.add_argument("--rug-pull", action="store_true",
                    help="after the first call, wait while the server's tool is changed; then show the refusal "
                         "and the re-pin")
options = parser.parse_args()
run = uuid.uuid4().hex[:8]
principal, agent = f"acme-{run}", f"support-agent-{run}"

with AGPClient(options.agp) as agp:
    # Who may act: the principal delegates crm:lookup_customer to the agent, which holds a capability.
    delegation = agp.delegations.create(root_principal=principal, delegator_agent=principal, delegate_agent=agent,
                                        authority_scope=["crm:lookup_customer"],
                                        expires_at="2099-01-01T00:00:00Z")
    capability = agp.capabilities.create(agent_id=agent, delegation_id=delegation["delegation_id"], tool_id="crm",
                                         operations=["lookup_customer"])

    # The tool: an mcp skill. AGP lists the server's tools and pins each definition's hash.
    skill = agp.skills.create(agent_id=agent, name="CRM over MCP", version="1", tool_id="crm", connector="mcp",
                              endpoint_url=options.mcp)
    print("pinned:", json.dumps(skill["tool_pins"], indent=2))

    # Why it may act now: a task, a policy evaluation of the action and a finalised decision.
    task = agp.tasks.create(root_principal=principal, agent_id=agent, title="Answer a customer",
                            risk_level="low", action_class="read")
    policy_set = agp.policy_sets.create(name="crm", version="1", ruleset=RULESET)
    evaluation = agp.policy_evaluations.create(policy_set_id=policy_set["policy_set_id"], task_id=task["task_id"],
                                               agent_id=agent, input={}, action=LOOKUP)
    decision = agp.decisions.create(task_id=task["task_id"], agent_id=agent, outcome="approve",
                                    rationale="read-only lookup within policy",
                                    policy_evaluation_ref=evaluation["evaluation_id"])
    agp.decisions.finalise(decision["decision_id"])

    def governed_call(n: int) -> dict:
        """Submit one action envelope and wait for its operation; print the outcome."""
        action_id = f"act-{run}-{n}"
        operation = agp.action_envelopes.submit(
            action_id=action_id, task_id=task["task_id"], agent_id=agent, **LOOKUP,
            capability_token_ref=capability["capability_id"], decision_ref=decision["decision_id"],
            policy_decision_ref=evaluation["evaluation_id"])
        done = agp.operations.wait(operation, timeout=60)
        print(f"call {n}:", done["status"], done["error"]["code"] if done["error"] else "")
        if done["status"] == "succeeded":
            receipt = next(agp.receipts.list(action_id=action_id))
            print("  tool result:", json.dumps(receipt["result"]))
            print("  result_hash:", receipt["result_hash"], "signature valid:", agp.verify_signature(receipt))
        return done

    # The governed call: AGP re-reads the tool, compares it with its pin, and only then calls it.
    governed_call(1)

    if options.rug_pull:
        input("Restart the MCP server with another --description, then press Enter: ")
        changed = governed_call(2)  # failed, AGP_TOOL_CHANGED: the tool was not called
        print("  ", changed["error"]["message"] if changed["error"] else "")
        # After reviewing the change: a new version of the skill re-pins the server's tools.
        repinned = agp.skills.create(agent_id=agent, name="CRM over MCP", version="2", tool_id="crm",
                                     connector="mcp", endpoint_url=options.mcp, supersedes=skill["skill_id"])
        print("re-pinned:", repinned["skill_id"], "supersedes", repinned["supersedes"])
        governed_call(3)
