"""``GET /agp/action-envelopes/{action_id}/evidence``: one action's whole story, verifiable offline (docs/reference/ledger.md).

The bundle holds every record that governed the action, as the API renders it (so each
record's own signature verifies as it does on its own endpoint), every ledger event of
the action and of the records that governed it (its policy evaluation, decision,
approvals and impact assessments) with its inclusion proof, the signed checkpoint those proofs lead to, the
JWKS, and the keys of the delegators and approvers who signed its links and approvals (``authors``); the service signs the whole bundle last. ``python -m agp_client verify-evidence``
checks all of it with no network (docs/decisions/ledger.md says how, step by step).

Every event is proved against one checkpoint. When the newest checkpoint does not cover
the action's newest event yet (the worker signs one every ``AGP_CHECKPOINT_SECONDS``),
the request signs one first, as the worker would: a bundle is always complete.
"""

import json
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from agp_project import errors
from agp_project.exactjson import ExactJSONDecoder
from agp_project.http.renderers import ExactJSONRenderer
from agp_project.signing import get_signer
from agp_project.timeutil import iso
from auth_tokens.models import Client
from core.ledger import ledger_settle
from core.models import Checkpoint, LedgerEvent
from core.selectors import checkpoint_document, checkpoint_newest, ledger_inclusion_proofs
from core.services import checkpoint_create
from core.tree import LedgerBroken
from decision.models import Approval, CommerceSession, Decision, ImpactAssessment, PolicyEvaluation
from decision.serializers import (
    ApprovalSerializer,
    CommerceSessionSerializer,
    DecisionSerializer,
    ImpactAssessmentSerializer,
    PolicyEvaluationSerializer,
)
from registry.models import Capability, Delegation, Task
from registry.selectors import delegation_chain
from registry.serializers import CapabilitySerializer, DelegationChainSerializer, PolicySetSerializer, TaskSerializer

from .models import ActionEnvelope, Operation, Payment, Receipt
from .serializers import LedgerEventSerializer
from .serializers_envelopes import envelope_document
from .serializers_operations import ReceiptSerializer, operation_representation

EVIDENCE_TYPE = "ActionEvidence"


def action_ledger_events(*, action_id: str, governance: dict[str, set[str]] | None = None) -> QuerySet[LedgerEvent]:
    """Every ledger event about the action's records, in sequence order: its envelope (validated,
    rejected, accepted, executed ...), its operation (callback deliveries included), its payment
    and its receipt: the events whose ``action_id`` is the action's (docs/reference/governance.md); and those
    of the ``governance`` records (``governance_ids``) that governed it."""
    trail = Q(action_id=action_id)
    for resource_type, ids in (governance or {}).items():
        if ids:
            trail |= Q(resource_type=resource_type, resource_id__in=ids)
    return LedgerEvent.objects.filter(trail).order_by("sequence")


# The records that governed an action, by the key of the bundle's records that holds them
# and the id member of each: their ledger events belong in its evidence too.
GOVERNANCE_RECORDS = (("policy_evaluation", "PolicyEvaluation", "evaluation_id"),
                      ("decision", "Decision", "decision_id"),
                      ("approvals", "Approval", "approval_id"),
                      ("impact_assessments", "ImpactAssessment", "assessment_id"))


def governance_ids(records: dict[str, Any]) -> dict[str, set[str]]:
    """The ids of the records that governed the action (its evaluation, decision, approvals and
    assessments), by resource type."""
    ids: dict[str, set[str]] = {}
    for key, resource_type, id_member in GOVERNANCE_RECORDS:
        found = records.get(key)
        rows = found if isinstance(found, list) else [found] if found else []
        ids[resource_type] = {row[id_member] for row in rows}
    return ids


def _related(instance, name: str):
    """A reverse one-to-one that may not exist (no operation yet, no payment, no receipt yet)."""
    try:
        return getattr(instance, name)
    except (Operation.DoesNotExist, Payment.DoesNotExist, Receipt.DoesNotExist):
        return None


def payment_document(payment: Payment) -> dict[str, Any]:
    """A payment as the bundle shows it (payments have no endpoint of their own)."""
    return {"type": "Payment", "payment_id": payment.payment_id, "action_id": payment.envelope_id,
            "session_id": payment.session_id, "currency": payment.currency, "amount": payment.amount,
            "status": payment.status, "created_at": iso(payment.created_at), "updated_at": iso(payment.updated_at)}


def _checkpoint_covering(sequence: int) -> Checkpoint:
    """The newest checkpoint, once it covers ``sequence``: signed now if it does not yet."""
    newest = checkpoint_newest()
    if newest is not None and newest.tree_size >= sequence:
        return newest
    try:
        checkpoint_create()
    except LedgerBroken as exc:
        raise errors.InternalError(f"No checkpoint can vouch for this action's events: {exc}.",
                                   details={"first_broken_sequence": exc.sequence}) from None
    return checkpoint_newest()


def _authors(*, chain: list[Delegation], approvals: list[Approval]) -> dict[str, Any]:
    """The clients that signed a link or an approval of the bundle, with the public keys that
    verified their signatures (docs/reference/identity.md, "Keys"); one query, none when no
    record is signed."""
    keys: dict[str, dict[str, dict]] = {}
    for client_id, key in [*((link.created_by, link.delegator_key) for link in chain),
                           *((approval.approver_client, approval.approver_key) for approval in approvals)]:
        if key:
            keys.setdefault(client_id, {})[key.get("kid")] = key
    if not keys:
        return {}
    rows = Client.objects.filter(client_id__in=keys).values("client_id", "kind", "agent_id", "subject")
    return {row["client_id"]: {"kind": row["kind"], "agent_id": row["agent_id"] or None,
                               "subject": row["subject"] or None, "keys": list(keys[row["client_id"]].values())}
            for row in rows}


def _records(envelope: ActionEnvelope, request) -> tuple[dict[str, Any], dict[str, Any]]:
    operation = _related(envelope, "async_operation")
    receipt = _related(operation, "receipt") if operation is not None else None
    payment = _related(envelope, "payment")
    evaluation = (PolicyEvaluation.objects.select_related("policy_set")
                  .filter(evaluation_id=envelope.policy_decision_ref).first())
    delegation = Delegation.objects.filter(delegation_id=envelope.delegation_ref).first()
    session = (CommerceSession.objects.filter(session_id=envelope.commerce_session_ref).first()
               if envelope.commerce_session_ref else None)

    approvals = list(Approval.objects.filter(decision_id=envelope.decision_ref).order_by("pk"))
    chain = delegation_chain(delegation=delegation) if delegation else []

    def render(serializer_class, instance):
        return None if instance is None else serializer_class(instance).data

    return {
        "envelope": envelope_document(envelope),
        "task": render(TaskSerializer, Task.objects.filter(task_id=envelope.task_id).first()),
        "decision": render(DecisionSerializer, Decision.objects.filter(decision_id=envelope.decision_ref).first()),
        "policy_evaluation": render(PolicyEvaluationSerializer, evaluation),
        "policy_set": render(PolicySetSerializer, evaluation.policy_set if evaluation else None),
        "impact_assessments": ImpactAssessmentSerializer(
            ImpactAssessment.objects.filter(decision_id=envelope.decision_ref).order_by("pk"), many=True).data,
        "approvals": ApprovalSerializer(approvals, many=True).data,
        "delegation_chain": DelegationChainSerializer(chain, many=True).data,
        "capability": render(CapabilitySerializer,
                             Capability.objects.filter(capability_id=envelope.capability_token_ref).first()),
        "commerce_session": render(CommerceSessionSerializer, session),
        "payment": None if payment is None else payment_document(payment),
        "operation": None if operation is None else operation_representation(operation, request=request),
        "receipt": render(ReceiptSerializer, receipt),
    }, _authors(chain=list(chain), approvals=approvals)


def action_evidence(*, action_id: str, request=None) -> dict[str, Any]:
    """The signed evidence bundle of an accepted action (404 for an action never accepted).

    A fixed number of queries, plus a checkpoint when the newest does not cover the action's events.
    """
    envelope = (ActionEnvelope.objects.select_related("async_operation__receipt", "payment")
                .filter(action_id=action_id).first())
    if envelope is None:
        raise errors.NotFound(f"No accepted action envelope with id {action_id!r}.")
    # Its events may still wait for the sequencer (docs/reference/ledger.md): a bundle holds
    # all of them, so it waits for what was committed before it was asked (bounded).
    ledger_settle()
    records, authors = _records(envelope, request)
    # Only the events about the action's own records, as the verifier checks them: a row of the
    # trail's index about anything else (a client event indexed by what its payload named)
    # would make the bundle fail verification. The events of the records that governed it
    # (evaluation, decision, approvals, assessments) are part of its story: one query for all.
    own = {action_id} | {record[key] for record, key in ((records["operation"], "operation_id"),
                                                         (records["receipt"], "receipt_id"),
                                                         (records["payment"], "payment_id")) if record}
    governance = governance_ids(records)
    events = [event for event in action_ledger_events(action_id=action_id, governance=governance)
              if event.resource_id in own or event.resource_id in governance.get(event.resource_type, ())]
    checkpoint = _checkpoint_covering(events[-1].sequence)
    proofs = ledger_inclusion_proofs(sequences=[event.sequence for event in events], tree_size=checkpoint.tree_size)
    signer = get_signer()
    bundle = {
        "type": EVIDENCE_TYPE,
        "action_id": action_id,
        "generated_at": iso(timezone.now()),
        "records": records,
        "ledger_events": [{"event": LedgerEventSerializer(event).data, "proof": proofs[event.sequence]}
                          for event in events],
        "checkpoint": checkpoint_document(checkpoint),
        "jwks": {"keys": [signer.jwk()]},
        # The keys of the delegators and approvers who signed a record of the bundle.
        "authors": authors,
    }
    # Signed as the client will read it: the JSON the response carries, numbers exact (a
    # Decimal stays the Decimal each record was signed with; docs/decisions/exact-json.md).
    plain = json.loads(ExactJSONRenderer().render(bundle), cls=ExactJSONDecoder)
    plain["signature"] = signer.sign(plain)
    return plain
