"""OpenAPI description of the shared HTTP conventions (CONTRACT C1, C2), for drf-spectacular.

Nothing here runs at request time: ``AGPViewSet.list`` paginates and filters by itself.
A viewset sets ``pagination_class = KeysetPaginationSchema`` and
``filter_backends = [ExactFilterSchema]`` so that the schema shows what ``list`` really
answers (``{"items": [...], "next_cursor"}``) and the query parameters it accepts;
``ErrorEnvelopeSerializer`` describes every non-2xx body.
"""

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
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


# What the shared machinery may answer on any operation, whatever the view documents
# (middleware, authentication, scope check, strict parsing, idempotency, outages).
SHARED_ERRORS = {
    "400": "AGP_INVALID_REQUEST: malformed body or query, unknown or read-only field (`details.fields`).",
    "401": "AGP_UNAUTHENTICATED: missing, expired or invalid bearer token.",
    "403": "AGP_INSUFFICIENT_SCOPE (`details.required_scopes`).",
    "503": "AGP_UNAVAILABLE: the database or the broker is unreachable; nothing was written.",
}
PATH_ERRORS = {"404": "AGP_NOT_FOUND: no such id."}
WRITE_ERRORS = {
    "409": "AGP_CONFLICT: the id already exists, or a request with this Idempotency-Key is in flight.",
    "413": "AGP_PAYLOAD_TOO_LARGE: the body is over the size limit.",
    "415": "AGP_UNSUPPORTED_MEDIA_TYPE: the body is not a JSON object.",
}


# What a resource viewset documents on every operation (``documented`` below); a view adds
# its own statuses (409, 422, ...) and the shared machinery the rest (``AGPAutoSchema``).
COMMON_ERRORS = {
    400: "AGP_INVALID_REQUEST: malformed body, unknown or read-only field, bad enum, or a reference to a "
         "record that does not exist (`details.fields`).",
    401: "AGP_UNAUTHENTICATED.",
    403: "AGP_INSUFFICIENT_SCOPE (`details.required_scopes`).",
    503: "AGP_UNAVAILABLE: the database is unreachable; nothing was written.",
}
NOT_FOUND = "AGP_NOT_FOUND: no such id."
DUPLICATE = "AGP_CONFLICT: the id already exists."


def error_responses(extra: dict[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """``COMMON_ERRORS`` plus ``extra`` (status -> description), each with the error envelope."""
    described = {**COMMON_ERRORS, **(extra or {})}
    return {code: OpenApiResponse(ErrorEnvelopeSerializer, description=text)
            for code, text in sorted(described.items())}


def documented(serializer, *, create: dict[int, str] | None = None, patch=None,
               patch_errors: dict[int, str] | None = None):
    """``extend_schema_view`` for a list/retrieve/create (and optionally PATCH) resource viewset:
    request and response bodies and every error status. ``create`` and ``patch_errors`` add or
    override statuses (a create's 409 defaults to ``DUPLICATE``)."""
    views = {
        "list": extend_schema(responses={200: serializer, **error_responses()}),
        "retrieve": extend_schema(responses={200: serializer, **error_responses({404: NOT_FOUND})}),
        "create": extend_schema(request=serializer, responses={
            201: serializer, **error_responses({409: DUPLICATE, **(create or {})})}),
    }
    if patch is not None:
        views["partial_update"] = extend_schema(request=patch, responses={
            200: serializer, **error_responses({404: NOT_FOUND, **(patch_errors or {})})})
    return extend_schema_view(**views)


class AGPAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema with the conventions every AGP view shares.

    - An ``AGPViewSet`` list is keyset-paginated and filtered (``{"items", "next_cursor"}``)
      even when the view did not set the schema-only pagination and filter classes above.
    - Every operation documents the error statuses the shared machinery can answer (the
      envelope of ``ErrorEnvelopeSerializer``); a view's own description of a status wins.
    """

    def _is_agp_list(self) -> bool:
        from .viewsets import AGPViewSet

        return isinstance(self.view, AGPViewSet) and getattr(self.view, "action", None) == "list"

    def _get_paginator(self):
        paginator = super()._get_paginator()
        if paginator is None and self._is_agp_list():
            return KeysetPaginationSchema()
        return paginator

    def get_filter_backends(self):
        backends = super().get_filter_backends()
        if not backends and self._is_agp_list():
            return [ExactFilterSchema]
        return backends

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if direction != "response":
            return schema
        # A pattern on a writable field limits what a client may send; records the server
        # writes itself (its own ledger events, say) need not match it. Ids always do.
        from .serializers import IdField

        properties = schema.get("properties", {})
        for name, field in force_instance(serializer).fields.items():
            if isinstance(field, serializers.RegexField) and not isinstance(field, IdField) and name in properties:
                properties[name].pop("pattern", None)
        return schema

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        shared = dict(SHARED_ERRORS)
        if "{" in self.path:
            shared.update(PATH_ERRORS)
        if self.method in ("POST", "PATCH", "PUT"):
            shared.update(WRITE_ERRORS)
        for code, text in sorted(shared.items()):
            if code not in responses:
                responses[code] = self._get_response_for_code(
                    OpenApiResponse(ErrorEnvelopeSerializer, description=text), code, direction=direction)
        return responses
