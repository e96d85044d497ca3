"""The Execution API's signed resources as JSON documents: what the API renders and what the
service signs, built once here (docs/reference/ledger.md, docs/reference/governance.md). Serializers render through these
functions; services sign what they return."""

from typing import Any

from agp_project.timeutil import iso

from .models import ActionEnvelope, Receipt


def envelope_document(envelope: ActionEnvelope, *, signed: bool = True) -> dict[str, Any]:
    """The ActionEnvelope as issued; without ``signature`` when ``signed`` is False (what is signed)."""
    document = {
        "type": "ActionEnvelope",
        "action_id": envelope.action_id,
        "task_id": envelope.task_id,
        "agent_id": envelope.agent_id,
        "tool_id": envelope.tool_id,
        "operation": envelope.operation,
        "parameters": envelope.parameters,
        "parameters_hash": envelope.parameters_hash,
        "allowed_parameter_ranges": envelope.allowed_parameter_ranges,
        "capability_token_ref": envelope.capability_token_ref,
        "decision_ref": envelope.decision_ref,
        "policy_decision_ref": envelope.policy_decision_ref,
        "approval_ref": envelope.approval_ref or None,
        "commerce_session_ref": envelope.commerce_session_ref or None,
        "payment_ref": envelope.payment_ref or None,
        "callback_url": envelope.callback_url or None,
        "created_at": iso(envelope.created_at),
        "governance_attestations": envelope.governance_attestations,
    }
    if signed:
        document["signature"] = envelope.signature
    return document


def receipt_document(receipt: Receipt) -> dict[str, Any]:
    """A receipt (Receipt), as rendered; its signature covers the why-record ``governance`` too,
    and ``posted_by`` (the client that posted it, or agp-worker). Each is absent from receipts
    issued before it was recorded, whose signatures do not cover it."""
    return {
        "type": "Receipt",
        "receipt_id": receipt.receipt_id,
        "action_id": receipt.action_id,
        "operation_id": receipt.operation_id,
        "status": str(receipt.status),
        "result": receipt.result,
        "result_hash": receipt.result_hash,
        "started_at": iso(receipt.started_at),
        "completed_at": iso(receipt.completed_at),
        "executor": receipt.executor,
        **({"posted_by": receipt.posted_by} if receipt.posted_by else {}),
        **({"governance": receipt.governance} if receipt.governance else {}),
        "created_at": iso(receipt.created_at),
        "signature": receipt.signature or None,
    }
