"""Representations of operations and receipts (docs/reference/execution.md, docs/reference/ledger.md, docs/reference/api.md).

``operation_representation`` is the one Operation body of the service: the 202 of
``POST /agp/action-envelopes`` (respond-async), ``GET /agp/operations/{id}`` and the body
of the callback all render through it, so the three never drift apart.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agp_project.http.schema import ErrorObjectSerializer
from agp_project.http.serializers import IdField, SignatureSerializer, StrictSerializer
from agp_project.http.viewsets import absolute_url, operation_path

from .choices import OperationStatus, ReceiptStatus
from .documents import receipt_document
from .models import Operation


def envelope_path(action_id: str) -> str:
    return f"/agp/action-envelopes/{action_id}"


class OperationStatusSerializer(StrictSerializer):
    """``PATCH /agp/operations/{id}``: ``{"status": "cancelled"}`` and nothing else."""

    type_name = "Operation"

    status = serializers.ChoiceField(choices=[OperationStatus.CANCELLED])


class OperationSerializer(serializers.Serializer):
    """The asynchronous Operation (spec "Operation"); read-only.

    Context: ``request`` (the API) or nothing (a worker rendering a callback body).
    """

    operation_id = serializers.CharField(read_only=True)
    status = serializers.ChoiceField(choices=OperationStatus.choices, read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)
    status_url = serializers.SerializerMethodField()
    result_url = serializers.SerializerMethodField()
    callback_url = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()

    @extend_schema_field(OpenApiTypes.URI)
    def get_status_url(self, operation: Operation) -> str:
        return absolute_url(self.context.get("request"), operation_path(operation.operation_id))

    @extend_schema_field(OpenApiTypes.URI)
    def get_result_url(self, operation: Operation) -> str:
        # envelope_id holds the action_id (to_field): no query.
        return absolute_url(self.context.get("request"), envelope_path(operation.envelope_id))

    @extend_schema_field({"type": ["string", "null"], "format": "uri"})
    def get_callback_url(self, operation: Operation) -> str | None:
        return operation.callback_url or None

    @extend_schema_field(ErrorObjectSerializer(allow_null=True))
    def get_error(self, operation: Operation) -> dict | None:
        # The error (docs/reference/api.md) object ({"code", "message", "retryable", "details"}) of a failed operation.
        return operation.error or None


def operation_representation(operation: Operation, *, request=None) -> dict:
    """The Operation body: what the 202, the GET and the callback all show."""
    return dict(OperationSerializer(operation, context={"request": request}).data)


class ReceiptSerializer(StrictSerializer):
    """The signed outcome of an operation; written by a client only to complete an ``external`` operation."""

    type_name = "Receipt"

    receipt_id = IdField(required=False)
    action_id = IdField()
    operation_id = IdField()
    status = serializers.ChoiceField(choices=ReceiptStatus.choices)
    result = serializers.DictField(required=False, default=dict)
    result_hash = serializers.CharField(read_only=True)
    started_at = serializers.DateTimeField(required=False)
    completed_at = serializers.DateTimeField(required=False)
    executor = serializers.CharField(required=False, max_length=256, allow_blank=False)
    posted_by = serializers.CharField(read_only=True,
                                      help_text="The API client that posted this receipt (an external executor), or "
                                                "agp-worker for a connector's outcome. Absent on receipts issued "
                                                "before it was recorded (their signature does not cover it).")
    governance = serializers.JSONField(read_only=True, help_text=(
        "Why the action was allowed: decision, policy evaluation, policy set and ruleset, the action's hash, "
        "approvals, impact assessment, delegation path (root first), commerce session and payment. Absent on "
        "receipts issued before it was recorded (their signature does not cover it)."))
    created_at = serializers.DateTimeField(read_only=True)
    signature = SignatureSerializer(read_only=True)

    def to_representation(self, instance):
        return receipt_document(instance)
