"""OpenAPI description of the shared HTTP conventions (CONTRACT C1, C2), for drf-spectacular.

Nothing here runs at request time: ``AGPViewSet.list`` paginates and filters by itself.
A viewset sets ``pagination_class = KeysetPaginationSchema`` and
``filter_backends = [ExactFilterSchema]`` so that the schema shows what ``list`` really
answers (``{"items": [...], "next_cursor"}``) and the query parameters it accepts;
``ErrorEnvelopeSerializer`` describes every non-2xx body.
"""

from rest_framework import serializers
from rest_framework.filters import BaseFilterBackend
from rest_framework.pagination import BasePagination

from .viewsets import DEFAULT_LIMIT, MAX_LIMIT


class KeysetPaginationSchema(BasePagination):
    """Schema of the keyset pagination ``AGPViewSet.list`` implements."""

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["items", "next_cursor"],
            "properties": {
                "items": schema,
                "next_cursor": {"type": ["string", "null"],
                                "description": "Pass as `cursor` for the next page; null on the last page."},
            },
        }

    def get_schema_operation_parameters(self, view):
        return [
            {"name": "limit", "in": "query", "required": False,
             "description": f"Page size, 1..{MAX_LIMIT} (default {DEFAULT_LIMIT}).",
             "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}},
            {"name": "cursor", "in": "query", "required": False,
             "description": "The `next_cursor` of the previous page.", "schema": {"type": "string"}},
        ]


class ExactFilterSchema(BaseFilterBackend):
    """Schema of the exact-match filters named in the view's ``filter_fields``."""

    def filter_queryset(self, request, queryset, view):
        return queryset

    def get_schema_operation_parameters(self, view):
        return [{"name": name, "in": "query", "required": False, "description": f"Exact match on `{name}`.",
                 "schema": {"type": "string"}} for name in getattr(view, "filter_fields", {})]


class ErrorObjectSerializer(serializers.Serializer):
    """The C2 error object (``details.fields`` for 400, ``details.failed_checks`` for 422, ...)."""

    code = serializers.CharField()
    message = serializers.CharField()
    retryable = serializers.BooleanField()
    details = serializers.DictField()


class ErrorEnvelopeSerializer(serializers.Serializer):
    """Every non-2xx body: ``{"error": {...}}``."""

    error = ErrorObjectSerializer()
