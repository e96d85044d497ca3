from rest_framework import serializers

from agp_project.http.serializers import IdField, PatternField, SignatureSerializer, StrictSerializer
from core.selectors import checkpoint_document


class LedgerEventSerializer(StrictSerializer):
    type_name = "LedgerEvent"

    sequence = serializers.IntegerField(read_only=True)
    event_id = IdField(required=False)
    event_type = PatternField(r"^client\.[A-Za-z0-9._-]{1,56}$", max_length=64, error_messages={
        "invalid": "Client events must have an event_type starting with 'client.' (letters, digits, . _ -)."})
    resource_type = serializers.CharField(max_length=64)
    resource_id = IdField()
    actor = serializers.CharField(read_only=True)
    payload = serializers.DictField(required=False, default=dict)
    payload_hash = serializers.CharField(read_only=True)
    prev_hash = serializers.CharField(read_only=True)
    hash = serializers.CharField(read_only=True)
    recorded_at = serializers.DateTimeField(read_only=True)
    task_id = serializers.CharField(read_only=True, allow_null=True,
                                    help_text="The task whose trail the event is part of (null: none).")
    action_id = serializers.CharField(read_only=True, allow_null=True,
                                      help_text="The action whose trail the event is part of (null: none).")
    root_principal = serializers.CharField(read_only=True, allow_null=True, help_text=(
        "The tenant whose records the event is about (null: none; such events are shown only to callers of "
        "every tenant)."))



class LedgerVerificationSerializer(serializers.Serializer):
    verified = serializers.BooleanField()
    events = serializers.IntegerField()
    head_hash = serializers.CharField()
    first_broken_sequence = serializers.IntegerField(allow_null=True)


class TreeVerificationSerializer(serializers.Serializer):
    verified = serializers.BooleanField()
    tree_size = serializers.IntegerField(help_text="The newest checkpoint's size (0: no checkpoint yet).")
    root_hash = serializers.CharField(allow_null=True)
    first_broken_sequence = serializers.IntegerField(allow_null=True)
    problem = serializers.CharField(allow_null=True)


class LedgerAndTreeVerificationSerializer(LedgerVerificationSerializer):
    tree = TreeVerificationSerializer(help_text="The Merkle tree recomputed from the events against the newest "
                                                "checkpoint; `verified` above holds only when this does too.")


class CheckpointSerializer(serializers.Serializer):
    """A signed checkpoint of the ledger's Merkle tree (rendered by ``core.selectors.checkpoint_document``)."""

    tree_size = serializers.IntegerField()
    root_hash = serializers.CharField(help_text="RFC 9162 root hash of the first tree_size events, lowercase hex.")
    issued_at = serializers.CharField()
    signature = SignatureSerializer()

    def to_representation(self, instance):
        return checkpoint_document(instance)


class InclusionProofSerializer(serializers.Serializer):
    sequence = serializers.IntegerField()
    leaf_index = serializers.IntegerField()
    tree_size = serializers.IntegerField()
    leaf_hash = serializers.CharField()
    audit_path = serializers.ListField(child=serializers.CharField())


class ConsistencyProofSerializer(serializers.Serializer):
    first = serializers.IntegerField()
    second = serializers.IntegerField()
    proof = serializers.ListField(child=serializers.CharField())


class EvidenceEventSerializer(serializers.Serializer):
    event = LedgerEventSerializer()
    proof = InclusionProofSerializer()


class ActionEvidenceSerializer(serializers.Serializer):
    """``GET /agp/action-envelopes/{action_id}/evidence`` (schema only: ``execution.evidence`` renders it)."""

    type = serializers.CharField(help_text="`ActionEvidence`.")
    action_id = serializers.CharField()
    generated_at = serializers.CharField()
    records = serializers.DictField(help_text=(
        "The records as their own endpoints render them: envelope, task, decision, policy_evaluation, policy_set, "
        "impact_assessments, approvals, delegation_chain (root first), capability, commerce_session, payment, "
        "operation, receipt (null where the action has none)."))
    ledger_events = EvidenceEventSerializer(many=True, help_text="Every ledger event of the action with its "
                                                                 "inclusion proof in the checkpoint's tree.")
    checkpoint = CheckpointSerializer()
    jwks = serializers.DictField(help_text="The service's public keys, as /.well-known/jwks.json serves them.")
    signature = SignatureSerializer(help_text="The service's signature over the whole bundle without it.")
