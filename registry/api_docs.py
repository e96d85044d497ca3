"""What the OpenAPI document tells a user about the registry's collections (agp_project/http/schema.py)."""

from agp_project.http.schema import ResourceDocs

DELEGATIONS = ResourceDocs(
    singular="delegation", plural="delegations",
    about="A delegation is one signed link of a chain of authority: a root principal (a person or an "
          "organisation) lets an agent act within an `authority_scope` of `tool:operation` names, under a spend "
          "limit, a number of further hops and an expiry; that agent may pass a narrower part of it on.",
    create_summary="Delegate authority to an agent",
    create="When `delegator_agent` is the `root_principal`, this starts a chain. Otherwise the server finds the "
           "parent itself: the delegator's newest usable delegation from the same root principal whose scope "
           "covers the request. The new link can only narrow it: its scope must be covered (`payments:*` covers "
           "`payments:refund`), its spend limit may not exceed the parent's (left out, it inherits it), its hops "
           "are at most the parent's minus one, and it may not outlive the parent. The answer carries "
           "`parent_delegation_id` and the `signature_chain` from the root down to this link.",
    create_example={"root_principal": "acme-corp", "delegator_agent": "acme-corp", "delegate_agent": "billing-agent",
                    "authority_scope": ["payments:refund", "crm:read"],
                    "constraints": {"spend_limit": {"currency": "EUR", "amount": 500}, "max_hops_remaining": 2},
                    "expires_at": "2030-01-31T00:00:00Z"})

POLICY_SETS = ResourceDocs(
    singular="policy set", plural="policy sets",
    about="A policy set is a versioned Rego ruleset (OPA 1.0 syntax). Evaluations read its `allow`, "
          "`require_approval` and `deny` rules; `ruleset_hash` pins the exact text that was in force.",
    create_summary="Register a policy set",
    create="The ruleset is parsed and compiled before anything is stored: a syntax error, OPA 0.x syntax or a "
           "package without an `allow` rule is a 400 whose `details.ruleset` gives the engine's message with line "
           "and column. `tests` (each an `input` and the `expect`ed `allow`, `require_approval`, `deny`) run "
           "first too: any failure is a 422 `AGP_POLICY_TEST_FAILED` listing every failed test, and nothing is "
           "stored; otherwise they are kept, signed with the set, with their `test_summary`. `shadow_of` makes "
           "the new set a shadow: evaluated after every evaluation of that set (on a worker, the evaluation "
           "does not wait), never deciding anything. A "
           "`ruleset_hash` you send must be the `sha256:` of the ruleset's bytes. The set starts `active`.",
    create_example={"name": "refund limits", "version": "1.2.0", "publisher": "acme risk office",
                    "ruleset": "package acme.refunds\n\nimport rego.v1\n\ndefault allow := false\n\n"
                               "allow if input.amount <= 100\n\n"
                               "deny contains \"refunds above 1000 are never automatic\" if input.amount > 1000\n",
                    "tests": [{"name": "small refund", "input": {"amount": 40}, "expect": {"allow": True}},
                              {"name": "large refund", "input": {"amount": 5000},
                               "expect": {"allow": False, "deny": ["refunds above 1000 are never automatic"]}}]},
    patch_summary="Deprecate or revoke a policy set",
    patch="Status only moves forward: `active` to `deprecated` (evaluations still run, with a warning), then "
          "`deprecated` to `revoked` (no new evaluation, and envelopes citing its evaluations are refused). Any "
          "other move is a 409 naming the allowed ones.",
    patch_example={"status": "deprecated"})

TASKS = ResourceDocs(
    singular="task", plural="tasks",
    about="A task is the unit of work an agent performs for a root principal, with a `risk_level` and an "
          "`action_class` (read, write, communicate, transact, delete, admin). Everything governed refers to it.",
    create_summary="Open a task",
    create="The task starts `open`. High or critical tasks whose class is transact, delete or admin need an "
           "impact assessment before their decisions can be finalised.",
    create_example={"root_principal": "acme-corp", "agent_id": "billing-agent", "title": "Refund order 4711",
                    "risk_level": "medium", "action_class": "transact"},
    patch_summary="Close a task",
    patch="`{\"status\": \"closed\"}` closes an open task: no envelope for it passes the task check afterwards. "
          "Closing is final.",
    patch_example={"status": "closed"})

CAPABILITIES = ResourceDocs(
    singular="capability", plural="capabilities",
    about="A capability lets one agent call some operations of one tool, within an active delegation it holds, "
          "optionally limited to parameter ranges (`{\"min\", \"max\"}` or `{\"enum\"}` per parameter).",
    create_summary="Grant a capability",
    create="The delegation must be usable, held by `agent_id`, cover every `tool_id:operation` asked for, and "
           "not expire before the capability; otherwise the answer is a 409 saying which.",
    create_example={"agent_id": "billing-agent", "delegation_id": "dlg_01J9Z3Q5F2", "tool_id": "payments",
                    "operations": ["refund"],
                    "allowed_parameter_ranges": {"amount": {"min": 0, "max": 250}, "currency": {"enum": ["EUR"]}},
                    "expires_at": "2030-01-31T00:00:00Z"})

LIABILITY_BINDINGS = ResourceDocs(
    singular="liability binding", plural="liability bindings",
    about="A liability binding names who answers for an agent's actions under a root principal, and up to what "
          "amount; spending actions check that one is active.",
    create_summary="Bind liability for an agent",
    create="The binding starts `active`; a revocation of the agent or of the binding ends it.",
    create_example={"root_principal": "acme-corp", "agent_id": "billing-agent", "liable_party": "Acme Corp Ltd",
                    "coverage": {"currency": "EUR", "amount": 10000}, "expires_at": "2030-12-31T00:00:00Z"})

SKILLS = ResourceDocs(
    singular="skill", plural="skills",
    about="A skill says how an agent's tool is executed: `noop` (records only), `http` (a signed POST to "
          "`endpoint_url`), `external` (your own executor reports the receipt) or `mcp` (a tool call on an MCP "
          "server whose tools were pinned at registration, in `tool_pins`).",
    create_summary="Register a skill",
    create="An `http` or `mcp` skill needs an `endpoint_url` that passes the server's address checks. For `mcp`, "
           "the server is asked for its tools now and each tool's definition is pinned; a changed definition later "
           "stops execution until a new version of the skill (`supersedes`) pins it again.",
    create_example={"agent_id": "billing-agent", "name": "Payments API", "version": "3", "tool_id": "payments",
                    "connector": "http", "endpoint_url": "https://payments.example.com/agp/execute"})

REVOCATIONS = ResourceDocs(
    singular="revocation", plural="revocations",
    about="A revocation ends a delegation (and every link below it), a capability, a skill, a liability binding "
          "or everything an agent holds, at once and for good.",
    create_summary="Revoke authority",
    create="Takes effect in the same transaction: envelopes that depend on the target fail their checks from now "
           "on, including operations not yet executed. Needs the `agp.revocation.write` scope. A target already "
           "revoked is a 409.",
    create_example={"target_type": "delegation", "target_id": "dlg_01J9Z3Q5F2",
                    "reason": "agent credentials leaked", "revoked_by": "security-officer@acme.example"})

FREEZES = ResourceDocs(
    singular="freeze", plural="freezes",
    about="A freeze is an emergency stop: while active, envelopes of the frozen agent, root principal or tool "
          "(or of everything) fail their checks, the agent's evaluations and delegations are refused with a 409 "
          "`AGP_FROZEN`, and its operations not yet passed to a connector are cancelled. Unlike a revocation it "
          "can be lifted.",
    create_summary="Freeze an agent, a root principal, a tool or everything",
    create="Takes effect at once; a worker cancels the matching pending operations (and those waiting for an "
           "external executor) within seconds, releasing their reservations and delivering their callbacks. "
           "`target_id` is absent for `all`. Needs the `agp.revocation.write` scope.",
    create_example={"target_type": "agent", "target_id": "billing-agent",
                    "reason": "refunds to unknown accounts since 09:12", "frozen_by": "oncall@acme.example"},
    patch_summary="Lift a freeze",
    patch="`{\"status\": \"lifted\", \"lifted_by\": ...}` ends the freeze; work it cancelled stays cancelled. "
          "Lifting is once only: anything else is a 409.",
    patch_example={"status": "lifted", "lifted_by": "oncall@acme.example"})
