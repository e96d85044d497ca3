"""Does a stored record still carry a valid signature of this service? (the auditor's pages)

Each signed record is rendered as the API renders it (its app's document function, which the
services sign) and its signature checked against the
service's own public key, exactly as a client checks it against ``/.well-known/jwks.json``:
a changed field, a signature by another key or a missing signature all show. Records the
service does not sign (tasks, decisions, operations, ...) are vouched for by the ledger.
"""

from dataclasses import dataclass

from agp_project.canonical import content_hash
from agp_project.signing import get_signer, verify_resource
from decision.documents import approval_document, impact_assessment_document
from decision.models import Approval, ImpactAssessment
from execution.documents import envelope_document, receipt_document
from execution.models import ActionEnvelope, Receipt
from registry.documents import delegation_document, delegation_link_payload, policy_set_document
from registry.models import Delegation, PolicySet

VERIFIED, INVALID, UNSIGNED = "verified", "invalid", "unsigned"


@dataclass(frozen=True)
class SignatureStatus:
    state: str  # VERIFIED, INVALID or UNSIGNED
    detail: str

    @property
    def label(self) -> str:
        return {VERIFIED: "signature verified", INVALID: "signature INVALID", UNSIGNED: "not signed"}[self.state]


def _own_keys() -> dict:
    return {"keys": [get_signer().jwk()]}


def _checked(document: dict, what: str) -> SignatureStatus:
    if not document.get("signature"):
        return SignatureStatus(INVALID, f"the {what} has no signature")
    if verify_resource(document, _own_keys()):
        return SignatureStatus(VERIFIED, f"Ed25519, key {document['signature'].get('kid', '?')[:12]}…")
    return SignatureStatus(INVALID, f"the {what} does not match its signature, or another key signed it")


def _delegation(link: Delegation) -> SignatureStatus:
    representation = delegation_document(link)
    signature = representation.get("signature")
    if not signature:
        return SignatureStatus(INVALID, "the link has no signature")
    # A link's signature covers the link with its parent's chain, not its later status.
    payload = delegation_link_payload(representation)
    if content_hash(payload) != signature.get("payload_hash"):
        return SignatureStatus(INVALID, "the link does not match its signature")
    return _checked({**payload, "signature": signature}, "link")


def _envelope(envelope: ActionEnvelope) -> SignatureStatus:
    status = _checked(envelope_document(envelope), "envelope")
    attestations = envelope.governance_attestations or []
    broken = sum(1 for item in attestations if not (isinstance(item, dict) and verify_resource(item, _own_keys())))
    if status.state == VERIFIED and broken:
        return SignatureStatus(INVALID, f"{broken} of its {len(attestations)} attestations do not verify")
    if status.state == VERIFIED and attestations:
        return SignatureStatus(VERIFIED, f"{status.detail}; {len(attestations)} attestation(s) verified")
    return status


def signature_status(record) -> SignatureStatus:
    """The signature status of any record an auditor's page shows."""
    if isinstance(record, ActionEnvelope):
        return _envelope(record)
    if isinstance(record, Receipt):
        return _checked(receipt_document(record), "receipt")
    if isinstance(record, Approval):
        return _checked(approval_document(record), "approval")
    if isinstance(record, ImpactAssessment):
        return _checked(impact_assessment_document(record), "assessment")
    if isinstance(record, PolicySet):
        return _checked(policy_set_document(record), "policy set")
    if isinstance(record, Delegation):
        return _delegation(record)
    return SignatureStatus(UNSIGNED, "not signed; its changes are in the hash-chained ledger")
