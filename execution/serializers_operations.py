"""Representations of operations and receipts (CONTRACT C8, C9, C11).

``operation_representation`` is the one Operation body of the service: the 202 of
``POST /agp/action-envelopes`` (respond-async), ``GET /agp/operations/{id}`` and the body
of the callback all render through it, so the three never drift apart.
"""

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agp_project.http.serializers import IdField, StrictSerializer

from .choices import OperationStatus, ReceiptStatus
from .models import Operation


def operation_path(operation_id: str) -> str:
    return f"/agp/operations/{operation_id}"


def envelope_path(action_id: str) -> str:
    return f"/agp/action-envelopes/{action_id}"


def _absolute(path: str, *, request=None) -> str:
    """``AGP_BASE_URL`` + path, else the request's own scheme and host.

    A worker has no request: without ``AGP_BASE_URL`` the callback carries the path only,
    which is why deployments that use callbacks set ``AGP_BASE_URL``.
    """
    base = settings.AGP_BASE_URL
    if base:
        return f"{base}{path}"
    if request is not None:
        return request.build_absolute_uri(path)
    return path


class ErrorBodySerializer(serializers.Serializer):
    """The C2 error object, as it appears in an Operation's ``error``."""

    code = serializers.CharField()
    message = serializers.CharField()
    retryable = serializers.BooleanField()
    details = serializers.DictField()


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
        return _absolute(operation_path(operation.operation_id), request=self.context.get("request"))

    @extend_schema_field(OpenApiTypes.URI)
    def get_result_url(self, operation: Operation) -> str:
        # envelope_id holds the action_id (to_field): no query.
        return _absolute(envelope_path(operation.envelope_id), request=self.context.get("request"))

    @extend_schema_field({"type": ["string", "null"], "format": "uri"})
    def get_callback_url(self, operation: Operation) -> str | None:
        return operation.callback_url or None

    @extend_schema_field(ErrorBodySerializer(allow_null=True))
    def get_error(self, operation: Operation) -> dict | None:
        # The C2 error object ({"code", "message", "retryable", "details"}) of a failed operation.
        return operation.error or None


def operation_representation(operation: Operation, *, request=None) -> dict:
    """The Operation body: what the 202, the GET and the callback all show."""
    return dict(OperationSerializer(operation, context={"request": request}).data)


class ReceiptSerializer(StrictSerializer):
    """A Receipt (C9, C11): read everywhere; written only to complete an ``external`` operation."""

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
    created_at = serializers.DateTimeField(read_only=True)
    signature = serializers.DictField(read_only=True)
