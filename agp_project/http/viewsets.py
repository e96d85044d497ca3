"""The base viewset every API resource shares: create, retrieve and keyset-paginated list."""

import base64
import binascii
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Model
from rest_framework import status, viewsets
from rest_framework.filters import BaseFilterBackend
from rest_framework.pagination import BasePagination
from rest_framework.response import Response

from agp_project import errors
from agp_project.tenancy import NO_TENANT, tenant_condition
from agp_project.http.public_url import absolute_url  # noqa: F401 - re-exported: views import it from here

__all__ = ["NO_TENANT", "AGPViewSet", "Cited", "CreateMixin", "caller_tenants", "query_params", "request_sees",
           "tenant_condition", "tenant_of_write"]

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




def caller_tenants(request) -> frozenset[str] | None:
    """The tenants (root principals) whose records the caller may see; None: every tenant.

    A principal without the attribute sees nothing: scoping fails closed.
    """
    return getattr(request.user, "tenants", frozenset())


def request_sees(request, root_principal: str | None) -> bool:
    """Whether a record of ``root_principal`` (None: of no tenant) is the caller's to see."""
    tenants = caller_tenants(request)
    return tenants is None or root_principal in tenants


def tenant_of_write(request, requested: str | None, *, field: str = "root_principal") -> str | None:
    """The tenant a new record of the caller belongs to: ``requested`` when it is one of the
    caller's tenants (else 403), or the caller's one tenant when it names none; None for a
    caller of every tenant that names none."""
    tenants = caller_tenants(request)
    if requested is not None:
        if tenants is not None and requested not in tenants:
            raise errors.Forbidden(f"{requested!r} is not one of this client's tenants", field=field)
        return requested
    if tenants is None:
        return None
    if len(tenants) == 1:
        return next(iter(tenants))
    raise errors.invalid_fields({field: ["This client acts in several tenants: name one."]})


@dataclass(frozen=True)
class Cited:
    """A request field that cites another record by id. For a caller bound to tenants, a
    record of another tenant is as missing as one that does not exist (the same 400)."""

    model: type[Model]
    id_field: str
    tenant_field: str
    noun: str
    shared_when_null: bool = False

    def missing(self, tenants: frozenset[str], values: list[str]) -> list[str]:
        """Those of ``values`` that name no record of ``tenants``."""
        found = set(self.model.objects.filter(tenant_condition(tenants, self.tenant_field,
                                                               shared_when_null=self.shared_when_null),
                                              **{f"{self.id_field}__in": values})
                    .values_list(self.id_field, flat=True))
        return [value for value in values if value not in found]


class AGPViewSet(viewsets.GenericViewSet):
    """Declarative resource viewset.

    Subclasses set ``serializer_class`` (one strict serializer for request and response),
    ``queryset`` (or ``get_queryset`` from a selector), ``lookup_field`` (the public id),
    ``collection`` (the URL segment), ``filter_fields`` (query parameter to ORM lookup),
    ``scope_group``, and ``tenant_field``: the path from a record to its tenant's root
    principal. ``get_queryset`` keeps only the caller's tenants' records, so every list,
    read and lookup through it is scoped; a viewset that declares no ``tenant_field`` fails
    (ImproperlyConfigured) instead of serving every tenant. With ``CreateMixin`` they
    implement ``perform_create(validated, actor)`` by calling a service; writes happen in
    services, inside their own transactions.
    """

    collection: str = ""
    filter_fields: dict[str, str] = {}
    scope_group: str = ""
    tenant_field: str | None = None
    # Records of no tenant are visible to every caller (shared policy sets).
    shared_when_no_tenant = False
    # Body fields that name the acting agent: an agent client may name only its own agent,
    # and one left out is filled in from its credential.
    agent_fields: tuple[str, ...] = ()
    # Request fields that cite records (``Cited``), checked against the caller's tenants.
    cited: dict[str, Cited] = {}
    lookup_value_regex = r"[A-Za-z0-9._:-]{1,128}"
    # Read by the OpenAPI generator only: ``list`` below pages and filters by itself.
    pagination_class = KeysetPaginationSchema
    filter_backends = [ExactFilterSchema]

    # --- helpers ------------------------------------------------------------------------
    @property
    def actor(self) -> str:
        principal = self.request.user
        return principal.client_id if principal is not None else "anonymous"

    @property
    def tenants(self) -> frozenset[str] | None:
        return caller_tenants(self.request)

    def scoped(self, queryset):
        """``queryset`` limited to the caller's tenants (see the class docstring)."""
        if self.tenant_field is None:
            raise ImproperlyConfigured(f"{type(self).__name__} declares no tenant_field: its records would be "
                                       "served to every tenant.")
        if self.tenant_field == NO_TENANT:
            return queryset
        return queryset.filter(tenant_condition(self.tenants, self.tenant_field,
                                                shared_when_null=self.shared_when_no_tenant))

    def get_queryset(self):
        return self.scoped(super().get_queryset())

    def not_found(self, value) -> errors.NotFound:
        return errors.NotFound(f"No {self.collection[:-1] if self.collection else 'resource'} with id {value!r}.")

    def get_object(self) -> Model:
        value = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        obj = self.get_queryset().filter(**{self.lookup_field: value}).first()
        if obj is None:
            raise self.not_found(value)
        return obj

    def require_visible(self, value) -> None:
        """404 unless the record ``value`` names is the caller's to see (before a write on it).

        Nothing to read for a caller of every tenant: the service finds a missing record itself.
        """
        if self.tenants is not None and not self.get_queryset().filter(**{self.lookup_field: value}).exists():
            raise self.not_found(value)

    def check_citations(self, validated: dict) -> None:
        """400, as for a missing record, for each cited record outside the caller's tenants."""
        tenants = self.tenants
        if tenants is None:
            return
        problems = {}
        for name, cited in self.cited.items():
            value = validated.get(name)
            values = [value] if isinstance(value, str) else [v for v in (value or []) if isinstance(v, str)]
            missing = cited.missing(tenants, values) if values else []
            if missing:
                problems[name] = [f"No {cited.noun} with id {value!r}." for value in missing]
        if problems:
            raise errors.invalid_fields(problems)

    def require_own(self, value) -> None:
        """Before a change to the record ``value`` names: 404 unless the caller may see it; 403
        when it is a record every tenant shares (an operator's to change), or, for an agent
        client, when it names another agent in one of ``agent_fields``."""
        principal = self.request.user
        is_agent = getattr(principal, "kind", None) == "agent"
        if self.tenants is None and not is_agent:
            return
        fields = [name for name in (self.tenant_field, *self.agent_fields) if name]
        row = self.get_queryset().filter(**{self.lookup_field: value}).values(*fields).first()
        if row is None:
            raise self.not_found(value)
        if self.tenants is not None and self.tenant_field and row[self.tenant_field] is None:
            raise errors.Forbidden("a record every tenant shares is changed by an operator only")
        for name in self.agent_fields if is_agent else ():
            if row[name] != principal.agent_id:
                raise errors.Forbidden(f"this client acts only for agent {principal.agent_id!r}", field=name)

    def bind_acting_agent(self, data):

        """``data`` with each of ``agent_fields`` checked against an agent client's agent:
        another agent is a 403 naming the field; a field left out is filled in."""
        principal = self.request.user
        if getattr(principal, "kind", None) != "agent" or not isinstance(data, dict):
            return data
        data = dict(data)
        for name in self.agent_fields:
            if name not in data:
                data[name] = principal.agent_id
            elif data[name] != principal.agent_id:
                raise errors.Forbidden(f"this client acts only for agent {principal.agent_id!r}", field=name)
        return data

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
        validated = self.parse(self.bind_acting_agent(request.data))
        self.check_citations(validated)
        instance = self.perform_create(validated, self.actor)
        return Response(self.render(instance), status=status.HTTP_201_CREATED,
                        headers={"Location": self.resource_url(instance)})
