"""What the OpenAPI document tells a user about the decision records (agp_project/http/schema.py)."""

from agp_project.http.schema import ResourceDocs

CONTEXTS = ResourceDocs(
    singular="context", plural="contexts",
    about="A context records what an agent knew when it decided (any JSON object), tied to a task. The server "
          "stores its `content_hash` (SHA-256 of the canonical JSON) so decisions can cite exactly this content.",
    create_summary="Record a decision context",
    create="The task must exist. `content_hash` is computed by the server.",
    create_example={"task_id": "task_4711", "agent_id": "billing-agent",
                    "data": {"order_id": "4711", "customer_tier": "gold", "complaint": "parcel arrived broken"}})

EVIDENCE_BUNDLES = ResourceDocs(
    singular="evidence bundle", plural="evidence bundles",
    about="An evidence bundle lists documents behind a decision by URI, SHA-256 and kind; the server stores the "
          "bundle's own `bundle_hash`.",
    create_summary="Record an evidence bundle",
    create="The task must exist; each item needs a URI, the SHA-256 of the document and a kind.",
    create_example={"task_id": "task_4711", "items": [
        {"uri": "https://files.acme.example/claims/4711/photo.jpg",
         "sha256": "9f2c4d1b8a7e6f50312c4b5a69788f0e1d2c3b4a5968778695a4b3c2d1e0f9a8", "kind": "photo"}]})

POLICY_EVALUATIONS = ResourceDocs(
    singular="policy evaluation", plural="policy evaluations",
    about="A policy evaluation runs a policy set's Rego ruleset on an `input` for a task and agent, and keeps "
          "the result (`allow`, `require_approval`, deny `reasons`), the input's hash and the ruleset's hash. An "
          "action envelope cites one to show the action was allowed.",
    create_summary="Evaluate a policy set",
    create="The ruleset really runs, in the service, on `input` with the `action` you evaluate as `input.action`. "
           "An action envelope can cite the evaluation only for exactly that tool, operation and parameters. A "
           "ruleset that fails to evaluate gives `allow: false`, never an error that lets an action through. A "
           "deprecated set still evaluates, with a warning; a revoked one is refused with a 422. Needs the "
           "`agp.policy.write` scope.",
    create_example={"policy_set_id": "ps_refund_limits", "task_id": "task_4711", "agent_id": "billing-agent",
                    "action": {"tool_id": "payments", "operation": "refund",
                               "parameters": {"amount": 80, "currency": "EUR", "order_id": "4711"}},
                    "input": {"action_class": "transact", "customer_tier": "gold"}})

DECISIONS = ResourceDocs(
    singular="decision", plural="decisions",
    about="A decision is an agent's recorded choice for a task (`approve`, `deny` or `escalate`) with its "
          "rationale and the context, evidence and policy evaluation it rests on. It is created as a draft and "
          "can be finalised once; a finalised decision never changes.",
    create_summary="Record a decision",
    create="References (`context_ref`, `evidence_refs`, `policy_evaluation_ref`) must name existing records of "
           "the same task. The decision starts as `draft`.",
    create_example={"task_id": "task_4711", "agent_id": "billing-agent", "outcome": "approve",
                    "rationale": "Damage is documented and the amount is within the refund policy.",
                    "context_ref": "ctx_4711", "evidence_refs": ["evb_4711"],
                    "policy_evaluation_ref": "pev_4711"},
    patch_summary="Finalise a decision",
    patch="`{\"status\": \"finalised\"}` makes the decision final. For a high or critical task whose class is "
          "transact, delete or admin, an impact assessment of this decision must exist first (422 "
          "`AGP_IMPACT_ASSESSMENT_REQUIRED`), and an approval cannot be finalised over an assessment that "
          "recommends not to proceed.",
    patch_example={"status": "finalised"})

IMPACT_ASSESSMENTS = ResourceDocs(
    singular="impact assessment", plural="impact assessments",
    about="An impact assessment weighs a decision's consequences: over which time horizons, for which "
          "stakeholders, whether anyone is harmed, under which ethical framework, and what it recommends. The "
          "server signs it.",
    create_summary="Assess the impact of a decision",
    create="The decision must belong to the task and still be a draft. Fields you leave out get their defaults "
           "in the answer; the signature covers the whole record.",
    create_example={
        "task_id": "task_4711", "decision_ref": "dec_4711", "agent_id": "risk-agent",
        "time_horizons": [{"horizon": "immediate", "consequences": ["customer refunded"], "severity": "minor",
                           "reversible": True}],
        "stakeholders_affected": [{"stakeholder_class": "customer", "impact_direction": "positive",
                                   "magnitude": "minor"}],
        "recommendation": "proceed",
        "recommendation_rationale": "Low amount, reversible by chargeback, customer is made whole."})

APPROVALS = ResourceDocs(
    singular="approval", plural="approvals",
    about="An approval is a person's or another agent's verdict (`approved` or `rejected`) on a decision, with "
          "conditions and an expiry. It is signed and never changes.",
    create_summary="Approve or reject a decision",
    create="The approver may not be the decision's own agent (422). Envelopes that need an approval count only "
           "an unexpired `approved` verdict. Needs the `agp.approval.write` scope.",
    create_example={"decision_ref": "dec_4711", "approver": "jane.doe@acme.example", "verdict": "approved",
                    "conditions": ["refund to the original payment method"],
                    "expires_at": "2030-01-08T12:00:00Z"})

ESCALATIONS = ResourceDocs(
    singular="escalation", plural="escalations",
    about="An escalation asks a person to look at a task, a decision or an action. While one is open for a "
          "task, envelopes of that task are refused.",
    create_summary="Raise an escalation",
    create="Name what it is about with `task_id`, `decision_ref` or `action_id`. It starts `open`.",
    create_example={"task_id": "task_4711", "decision_ref": "dec_4711", "raised_by": "billing-agent",
                    "reason": "The customer disputes the refund amount."},
    patch_summary="Resolve an escalation",
    patch="`status: resolved` with an `outcome` (`upheld`, `dismissed`, `partially_upheld`), who resolved it and "
          "notes. Resolving is final: any further change is a 409.",
    patch_example={"status": "resolved", "outcome": "dismissed", "resolved_by": "jane.doe@acme.example",
                   "resolution_notes": "Amount confirmed against the invoice."})

COMMERCE_SESSIONS = ResourceDocs(
    singular="commerce session", plural="commerce sessions",
    about="A commerce session is a spending window for one task and agent under a delegation: spending actions "
          "reserve their amount on it when accepted and commit or release it when they end. `spent_amount` and "
          "`reserved_amount` are kept by the server.",
    create_summary="Open a commerce session",
    create="`amount_limit` may not exceed the delegation's spend limit, in its currency, and the session may not "
           "outlive it (409 naming the violations).",
    create_example={"task_id": "task_4711", "agent_id": "billing-agent", "delegation_id": "dlg_01J9Z3Q5F2",
                    "merchant": "acme-webshop", "currency": "EUR", "amount_limit": 250,
                    "expires_at": "2030-01-31T00:00:00Z"})

BACKTESTS = ResourceDocs(
    singular="backtest", plural="backtests",
    about="A backtest re-evaluates recorded policy evaluations of a window under a candidate policy set, with "
          "their recorded inputs and actions, and keeps what would have changed: counts, the first 1,000 "
          "changes, and the reasons of new denials. It writes nothing else.",
    create_summary="Backtest a candidate policy set",
    create="Answers 202 with the backtest's Operation (poll its `status_url`; PATCH it to cancel); the summary is "
           "at `result_url` once it ends. The window is `since`..`until` of `evaluated_at` (default: the last 30 "
           "days), optionally one baseline set's evaluations, one task's or one agent's. A revoked candidate is a "
           "422. Needs the `agp.policy.write` scope.",
    create_example={"policy_set_id": "ps_refund_limits_v2", "baseline_policy_set_id": "ps_refund_limits",
                    "since": "2026-11-01T00:00:00Z"})
