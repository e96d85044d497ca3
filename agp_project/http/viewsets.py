"""The base viewset every API resource shares: create, retrieve and keyset-paginated list."""

import base64
import binascii

from django.conf import settings
from django.db.models import Model
from rest_framework import status, viewsets
from rest_framework.filters import BaseFilterBackend
from rest_framework.pagination import BasePagination
from rest_framework.response import Response

from agp_project import errors

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
PAGING_PARAMS = ("limit", "cursor")


def query_params(request, allowed) -> dict[str, str]:
    """The request's query parameters, each known and given once; anything else is a 400
    naming it (a repeated one is ambiguous: one reader takes the first, another the last)."""
    params = request.query_params
    unknown = {name: ["Unknown query parameter."] for name in sorted(set(params) - set(allowed))}
    repeated = {name: ["Given more than once."] for name in sorted(params)
                if name not in unknown and len(params.getlist(name)) > 1}
    if unknown or repeated:
        raise errors.invalid_fields({**unknown, **repeated},
                                    "Unknown query parameters." if unknown else "Repeated query parameters.")
    return {name: params[name] for name in params}


def encode_cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, _, value = text.partition(":")
        if version != "v1":
            raise ValueError
        return int(value)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise errors.invalid_fields({"cursor": ["Invalid cursor."]}) from None


def parse_limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise errors.invalid_fields({"limit": [f"Must be an integer from 1 to {MAX_LIMIT}."]})
    return limit


def absolute_url(request, path: str) -> str:
    """``AGP_BASE_URL`` + path, else the request's own scheme and host.

    A worker has no request (``None``): without ``AGP_BASE_URL`` it gets the path only,
    which is why deployments that use callbacks set ``AGP_BASE_URL``.
    """
    base = settings.AGP_BASE_URL
    if base:
        return f"{base}{path}"
    return request.build_absolute_uri(path) if request is not None else path


def operation_path(operation_id: str) -> str:
    """Where an asynchronous Operation is read, whichever app runs it (envelopes, backtests)."""
    return f"/agp/operations/{operation_id}"
class KeysetPaginationSchema(BasePagination):
    """What ``AGPViewSet.list`` answers and accepts, for the OpenAPI document (it paginates itself)."""

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
    """The exact-match filters named in the view's ``filter_fields``, for the OpenAPI document."""

    def filter_queryset(self, request, queryset, view):
        return queryset

    def get_schema_operation_parameters(self, view):
        return [{"name": name, "in": "query", "required": False, "description": f"Exact match on `{name}`.",
                 "schema": {"type": "string"}} for name in getattr(view, "filter_fields", {})]


class AGPViewSet(viewsets.GenericViewSet):
    """Declarative resource viewset.

    Subclasses set ``serializer_class`` (one strict serializer for request and response),
    ``queryset`` (or ``get_queryset`` from a selector), ``lookup_field`` (the public id),
    ``collection`` (the URL segment), ``filter_fields`` (query parameter to ORM lookup),
    and ``scope_group``. With ``CreateMixin`` they implement ``perform_create(validated,
    actor)`` by calling a service; writes happen in services, inside their own transactions.
    """

    collection: str = ""
    filter_fields: dict[str, str] = {}
    scope_group: str = ""
    lookup_value_regex = r"[A-Za-z0-9._:-]{1,128}"
    # Read by the OpenAPI generator only: ``list`` below pages and filters by itself.
    pagination_class = KeysetPaginationSchema
    filter_backends = [ExactFilterSchema]

    # --- helpers ------------------------------------------------------------------------
    @property
    def actor(self) -> str:
        principal = self.request.user
        return principal.client_id if principal is not None else "anonymous"

    def get_object(self) -> Model:
        value = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        obj = self.get_queryset().filter(**{self.lookup_field: value}).first()
        if obj is None:
            raise errors.NotFound(f"No {self.collection[:-1] if self.collection else 'resource'} with id {value!r}.")
        return obj

    def resource_url(self, instance) -> str:
        return absolute_url(self.request, f"/agp/{self.collection}/{getattr(instance, self.lookup_field)}")

    def render(self, instance) -> dict:
        return self.get_serializer(instance).data

    def parse(self, data=None, *, serializer_class=None, partial=False) -> dict:
        serializer_class = serializer_class or self.get_serializer_class()
        serializer = serializer_class(data=self.request.data if data is None else data, partial=partial,
                                      context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    def filter_queryset_from_params(self, queryset):
        params = query_params(self.request, (*PAGING_PARAMS, *self.filter_fields))
        lookups = {self.filter_fields[name]: params[name] for name in params if name in self.filter_fields}
        return queryset.filter(**lookups)

    # --- actions ------------------------------------------------------------------------
    def list(self, request, *args, **kwargs):
        limit = parse_limit(request.query_params.get("limit"))
        queryset = self.filter_queryset_from_params(self.get_queryset()).order_by("-pk")
        cursor = request.query_params.get("cursor")
        if cursor is not None:
            queryset = queryset.filter(pk__lt=decode_cursor(cursor))
        rows = list(queryset[: limit + 1])
        next_cursor = encode_cursor(rows[limit - 1].pk) if len(rows) > limit else None
        items = self.get_serializer(rows[:limit], many=True).data
        return Response({"items": items, "next_cursor": next_cursor})

    def retrieve(self, request, *args, **kwargs):
        return Response(self.render(self.get_object()))



class CreateMixin:
    """``POST /agp/<collection>``: parse strictly, call ``perform_create`` (a service), 201."""

    def create(self, request, *args, **kwargs):
        instance = self.perform_create(self.parse(), self.actor)
        return Response(self.render(instance), status=status.HTTP_201_CREATED,
                        headers={"Location": self.resource_url(instance)})
