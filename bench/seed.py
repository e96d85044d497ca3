"""Seed the benchmark database through the services (run by ``python -m bench``, not alone).

Creates, each write through the same service function the API calls (so every record is
validated, signed where the API signs it, and has its ledger event):

- a delegation tree of depth 6 under ``org:bench`` (links at depths 0..5 on the main
  branch, each with side branches), whose depth-5 agent is the one the envelope scenarios
  act as and under which scenario (f) creates links at depth 6;
- ``--tasks`` tasks spread over 50 agents and the main agent;
- 20 policy sets with real Rego (the sample policy of ``bench/policy_eval.py`` under
  different package names), evaluated once each;
- for the envelope scenarios: a capability and a noop skill for the depth-5 agent, an
  evaluation that allows with approval required, a finalised ``approve`` decision and an
  approval by someone else: a world in which ``POST /agp/action-envelopes`` passes all eleven
  checks;
- for (i), one call per governed action: a task of the depth-5 agent governed by a policy set
  that allows the envelope's action (the REST one call), and, when an upstream MCP server is
  given (``--mcp URL``), an agent ``agent-gw`` with its delegation, capability, ``mcp`` skill
  (pinned from that server), a governed task and an agent client's token (the gateway).

Prints one JSON object with the ids the load generator needs.
"""

import hashlib
import json
import sys
import time
from datetime import timedelta


AGENT_CLIENT, AGENT_SECRET = "bench-agent", "bench-agent-secret"
KEYED_AGENT_CLIENT = "bench-agent-keyed"

ONE_CALL_RULESET = """package agp.bench.one_call

import rego.v1

default allow := false

allow if {
    input.task.action_class in {"read", "write"}
    input.action.operation in {"update", "lookup_customer"}
}
"""


def _gateway_world(*, actor: str, root: str, expires, policy_set_id: str, mcp_url: str) -> dict:
    """An agent that calls ``crm-mcp.lookup_customer`` on the upstream server through the gateway."""
    from auth_tokens.services import client_create, token_issue
    from registry.services import capability_create, delegation_create, skill_create, task_create

    agent = "agent-gw"
    link = delegation_create(actor=actor, root_principal=root, delegator_agent=root, delegate_agent=agent,
                             authority_scope=["crm-mcp:*"], expires_at=expires)
    capability_create(actor=actor, agent_id=agent, delegation_id=link.delegation_id, tool_id="crm-mcp",
                      operations=["lookup_customer"])
    skill_create(actor=actor, agent_id=agent, name="crm over MCP", tool_id="crm-mcp", version="1", connector="mcp",
                 endpoint_url=mcp_url)
    task = task_create(actor=actor, root_principal=root, agent_id=agent, title="answer customers",
                       risk_level="low", action_class="read", policy_set_id=policy_set_id)
    client, _ = client_create(client_id="bench-agent-gw", kind="agent", agent_id=agent, tenants=[root], actor=actor)
    return {"task_id": task.task_id, "token": token_issue(client=client, scopes=client.scopes)["access_token"],
            "tool": "crm-mcp.lookup_customer", "upstream_tool": "lookup_customer", "upstream": mcp_url}


def main() -> None:
    import django

    django.setup()
    from django.utils import timezone

    from agp_client.keys import ClientKey
    from auth_tokens.services import client_create
    from bench.policy_eval import SAMPLE_INPUT, SAMPLE_POLICY
    from decision.services import approval_create, decision_create, decision_status_set, policy_evaluation_create
    from registry.services import capability_create, delegation_create, policy_set_create, skill_create, task_create

    n_tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    mcp_url = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--mcp" else None
    actor = "bench-seed"
    root = "org:bench"
    started = time.perf_counter()
    expires = timezone.now() + timedelta(days=30)

    # Delegation tree: main branch root -> L0 -> ... -> L5 (depths 0..5), 3 side links per level.
    chain_agents = [f"agent-L{depth}" for depth in range(6)]
    delegations = []
    delegator = root
    for depth, agent in enumerate(chain_agents):
        scope = ["crm:*", "payments:*"] if depth < 3 else ["crm:*"]
        link = delegation_create(actor=actor, root_principal=root, delegator_agent=delegator, delegate_agent=agent,
                                 authority_scope=scope, expires_at=expires if depth == 0 else None,
                                 constraints={"max_hops_remaining": 12} if depth == 0 else None)
        delegations.append(link.delegation_id)
        for side in range(3):
            delegation_create(actor=actor, root_principal=root, delegator_agent=delegator,
                              delegate_agent=f"agent-L{depth}-side{side}", authority_scope=["crm:read"],
                              expires_at=expires if depth == 0 else None)
        delegator = agent
    main_agent = chain_agents[-1]

    agents = [f"agent-{i:02d}" for i in range(50)]
    classes = ["read", "write", "communicate", "transact"]
    risks = ["low", "medium", "high"]
    task_ids = []
    for i in range(n_tasks):
        task = task_create(actor=actor, root_principal=root, agent_id=agents[i % 50], title=f"bench task {i}",
                           risk_level=risks[i % 3], action_class=classes[i % 4])
        task_ids.append(task.task_id)

    policy_sets = []
    for i in range(20):
        ruleset = SAMPLE_POLICY.replace("package agp.bench.payments", f"package agp.bench.set{i}")
        policy_set = policy_set_create(actor=actor, name=f"bench policies {i}", version=f"1.{i}.0", ruleset=ruleset,
                                       ruleset_hash="sha256:" + hashlib.sha256(ruleset.encode()).hexdigest(),
                                       publisher="bench", jurisdictions=["EU"])
        policy_sets.append(policy_set.policy_set_id)
        policy_evaluation_create(actor=actor, policy_set_id=policy_set.policy_set_id, task_id=task_ids[i],
                                 agent_id=agents[i % 50], input=SAMPLE_INPUT)

    # The envelope world: the depth-5 agent writes to the CRM under its depth-5 link.
    task = task_create(actor=actor, root_principal=root, agent_id=main_agent, title="update CRM records",
                       risk_level="medium", action_class="write")
    capability = capability_create(actor=actor, agent_id=main_agent, delegation_id=delegations[-1], tool_id="crm",
                                   operations=["update"],
                                   allowed_parameter_ranges={"limit": {"min": 1, "max": 100}})
    skill_create(actor=actor, agent_id=main_agent, name="crm connector", tool_id="crm", version="1")
    # An evaluation clears an envelope only for the action it was made for (docs/reference/governance.md).
    action = {"tool_id": "crm", "operation": "update", "parameters": {"limit": 10}}
    evaluation = policy_evaluation_create(
        actor=actor, policy_set_id=policy_sets[0], task_id=task.task_id, agent_id=main_agent,
        input=dict(SAMPLE_INPUT, action_class="write"), action=action)
    assert evaluation.allowed and evaluation.require_approval, evaluation.result
    decision = decision_create(actor=actor, task_id=task.task_id, agent_id=main_agent, outcome="approve",
                               rationale="within policy", policy_evaluation_ref=evaluation.evaluation_id)
    decision_status_set(actor=actor, decision_id=decision.decision_id, status="finalised")
    # The clients real callers use (docs/reference/identity.md): the agent's own, whose token
    # (a), (b) and (c) send, so the tenant scoping is measured; and a person's, who approved.
    client_create(client_id=AGENT_CLIENT, secret=AGENT_SECRET, kind="agent", agent_id=main_agent, tenants=[root],
                  actor=actor)
    # The same agent with a key, issued only DPoP-bound tokens: (a) with DPoP beside bearer.
    key = ClientKey.generate()
    client_create(client_id=KEYED_AGENT_CLIENT, kind="agent", agent_id=main_agent, tenants=[root], actor=actor,
                  jwks=key.public_jwks(), require_dpop=True)
    reviewer, _ = client_create(client_id="bench-reviewer", kind="human", subject="reviewer@bench.example",
                                tenants=[root], actor=actor)
    approval_create(actor=reviewer.client_id, decision_ref=decision.decision_id, approver=reviewer.subject,
                    approver_kind="human", verdict="approved", expires_at=expires, conditions=["log every call"])

    # (i) The same action, decided by the task's policy set in one call.
    one_call_set = policy_set_create(actor=actor, name="one call", version="1", ruleset=ONE_CALL_RULESET)
    one_call_task = task_create(actor=actor, root_principal=root, agent_id=main_agent, title="one call",
                                risk_level="medium", action_class="write", policy_set_id=one_call_set.policy_set_id)
    gateway = _gateway_world(actor=actor, root=root, expires=expires, policy_set_id=one_call_set.policy_set_id,
                             mcp_url=mcp_url) if mcp_url else None

    json.dump({
        "root_principal": root, "one_call_task_id": one_call_task.task_id, "gateway": gateway,
        "chain_agents": chain_agents, "delegations": delegations,
        "task_ids": task_ids[:200], "policy_sets": policy_sets,
        "envelope": {"task_id": task.task_id, "agent_id": main_agent, "tool_id": action["tool_id"],
                     "operation": action["operation"], "capability_token_ref": capability.capability_id,
                     "decision_ref": decision.decision_id, "policy_decision_ref": evaluation.evaluation_id,
                     "parameters": action["parameters"]},
        "keyed_agent": {"client_id": KEYED_AGENT_CLIENT, "private_jwk": key.private_jwk()},
        "seconds": round(time.perf_counter() - started, 1),
    }, sys.stdout)


if __name__ == "__main__":
    main()
