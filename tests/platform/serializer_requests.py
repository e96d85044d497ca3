"""Request bodies, valid and not, for each kind of serializer the API parses (the shared-fields
and field-copy tests parse them both ways and compare)."""

from decision.serializers import (
    ApprovalSerializer,
    DecisionSerializer,
    EvidenceBundleSerializer,
    ImpactAssessmentSerializer,
    PolicyEvaluationSerializer,
)
from execution.serializers_envelopes import ActionEnvelopeSerializer
from registry.serializers import CapabilitySerializer, DelegationChainSerializer, PolicySetSerializer, TaskSerializer

ENVELOPE = {"type": "ActionEnvelope", "action_id": "act-1", "task_id": "t-1", "agent_id": "a", "tool_id": "crm",
            "operation": "update", "capability_token_ref": "cap-1", "decision_ref": "dec-1",
            "policy_decision_ref": "pe-1", "created_at": "2026-01-02T03:04:05Z", "parameters": {"limit": 10}}

REQUESTS = {
    PolicyEvaluationSerializer: [
        {"policy_set_id": "ps-1", "task_id": "t-1", "agent_id": "a", "input": {"x": [1]}},
        {"type": "PolicyEvaluation", "policy_set_id": "ps 1", "task_id": "", "agent_id": "a" * 200,
         "input": [], "result": {}, "warnings": [], "unknown": True},
        {"policy_set_id": "ps-1", "task_id": "t-1", "agent_id": "a", "created_at": "0999-01-01T00:00:00Z"},
        {}, [], "text",
    ],
    ActionEnvelopeSerializer: [
        ENVELOPE,
        {**ENVELOPE, "parameters": {"amount": 5, "currency": "USD"}, "idempotency_key": "k-1"},
        {**ENVELOPE, "type": "Other", "action_id": "act 1", "parameters": [], "extra": 1},
        {**ENVELOPE, "created_at": "yesterday", "parameters": {"amount": 1e30}},
    ],
    DecisionSerializer: [
        {"task_id": "t-1", "agent_id": "a", "outcome": "approve", "evidence_refs": ["e-1"]},
        {"task_id": "t-1", "agent_id": "a", "outcome": "approve", "evidence_refs": ["e-1", "e 2"] + ["e"] * 200},
        {"task_id": "t-1", "agent_id": "a", "outcome": "nope", "status": "finalised", "rationale": 5},
        {"task_id": "t-1", "agent_id": "a", "outcome": "approve", "signature": None, "decision_hash": "x"},
    ],
    TaskSerializer: [
        {"task_id": "t-1", "root_principal": "p", "agent_id": "a", "risk_level": "low", "action_class": "read"},
        {"root_principal": "p" * 300, "agent_id": "", "risk_level": "huge", "action_class": None, "title": []},
    ],
    DelegationChainSerializer: [
        {"root_principal": "p", "delegator_agent": "p", "delegate_agent": "a", "authority_scope": ["crm:*"],
         "constraints": {"spend_limit": {"currency": "USD", "amount": "10.5"}, "max_hops": 2}},
        {"root_principal": "p", "delegator_agent": "p", "delegate_agent": "a", "authority_scope": [],
         "constraints": {"spend_limit": {"currency": "usd", "amount": -1}, "extra": 1}},
    ],
    CapabilitySerializer: [
        {"agent_id": "a", "delegation_id": "d-1", "tool_id": "tool:x", "operations": ["run"],
         "allowed_parameter_ranges": {"n": {"min": 1, "max": 2}}},
        {"agent_id": "a", "delegation_id": "d-1", "tool_id": "tool:x", "operations": ["run", "run"],
         "allowed_parameter_ranges": {"n": {"min": 2, "max": 1}}},
        {"agent_id": "a", "delegation_id": "d-1", "tool_id": "bad tool", "operations": [], "status": "active"},
    ],
    PolicySetSerializer: [
        {"name": "p", "version": "1", "rules": "package x\n\ndefault allow := true\n"},
        {"name": "", "version": 1, "rules": None, "status": "active", "jurisdictions": ["EU", 3]},
    ],
    EvidenceBundleSerializer: [
        {"task_id": "t-1", "items": [{"uri": "https://x/y", "sha256": "0" * 64, "kind": "doc"}]},
        {"task_id": "t-1", "items": [{"uri": "nope", "sha256": "z", "kind": "doc", "extra": 1}, {}]},
        {"task_id": "t-1", "items": []},
    ],
    ImpactAssessmentSerializer: [
        {}, {"task_id": "t-1", "agent_id": "a"},
        {"task_id": "t-1", "decision_ref": "dec-1", "agent_id": "a", "recommendation": "proceed",
         "time_horizons": [{"horizon": "immediate", "severity": "minor", "consequences": ["c"]},
                           {"horizon": "long_term", "severity": "major", "reversible": True}],
         "stakeholders_affected": [{"stakeholder_class": "customers", "impact_direction": "mixed",
                                    "magnitude": "moderate"}],
         "pareto_assessment": {"improves_without_harm": True, "harmed_parties": ["p"]},
         "ethical_framework_applied": {"secondary": ["utilitarian"], "policy_ref": "ps-1"}},
        {"task_id": "t-1", "decision_ref": "dec-1", "agent_id": "a", "recommendation": "maybe",
         "time_horizons": [], "stakeholders_affected": [{"stakeholder_class": "x", "extra": 1}],
         "pareto_assessment": {"harmed_parties": "p"}, "ethical_framework_applied": {"primary": "none"}},
    ],
    ApprovalSerializer: [{}, {"task_id": "t-1", "decision_ref": "dec-1", "approver": "x", "outcome": "maybe"}],
}
