"""The OpenAPI document's shared parts, through drf-spectacular's public extension points.

- ``documented(serializer, docs)``: ``extend_schema_view`` for a resource viewset: each
  operation's summary, its description for a user of the API, the request body's example,
  the request and response bodies and the error statuses the view itself answers.
- ``shared_responses`` (a postprocessing hook, ``SPECTACULAR_SETTINGS``): the error statuses the
  shared machinery may answer on every operation (authentication, scopes, strict parsing,
  size limit, Idempotency-Key, outages), in the error envelope, where a view did not
  describe them itself; and the ``Idempotency-Key`` header of every write.
- ``response_patterns`` (a postprocessing hook): a pattern on a writable field limits what a
  client may send; records the server writes itself need not match it in responses. Ids
  always do, so only the id pattern is kept in response schemas.

Pagination and filters come from ``AGPViewSet`` (``KeysetPaginationSchema``, ``ExactFilterSchema``).
"""

import inspect
from dataclasses import dataclass, field
from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers

from agp_project.ids import ID_PATTERN

from .viewsets import DEFAULT_LIMIT, MAX_LIMIT, ExactFilterSchema, KeysetPaginationSchema

__all__ = ["DUPLICATE", "ErrorEnvelopeSerializer", "ErrorObjectSerializer", "ExactFilterSchema",
           "KeysetPaginationSchema", "NOT_FOUND", "ResourceDocs", "documented", "error_responses", "example",
           "response_patterns", "shared_responses"]


class ErrorObjectSerializer(serializers.Serializer):
    """The error object: a stable ``code``, a readable ``message``, whether a retry may succeed, and
    ``details`` (``fields`` for an invalid request, ``failed_checks`` for a refused action, ...)."""

    code = serializers.CharField()
    message = serializers.CharField()
    retryable = serializers.BooleanField()
    details = serializers.DictField()


class ErrorEnvelopeSerializer(serializers.Serializer):
    """Every error answer of the API: ``{"error": {...}}``."""

    error = ErrorObjectSerializer()


ERROR_ENVELOPE_REF = "#/components/schemas/ErrorEnvelope"

# What the shared machinery may answer on any operation, whatever the view documents.
SHARED_ERRORS = {
    "400": "AGP_INVALID_REQUEST: malformed body or query, unknown or read-only field (`details.fields`).",
    "401": "AGP_UNAUTHENTICATED: missing, expired or invalid bearer token.",
    "403": "AGP_INSUFFICIENT_SCOPE (`details.required_scopes`).",
    "503": "AGP_UNAVAILABLE (retry after `Retry-After` seconds): the database or the broker is unreachable; "
           "nothing was written, unless `details.outcome` is `unknown` (the connection failed while committing).",
}
PATH_ERRORS = {"404": "AGP_NOT_FOUND: no such id."}
# What the body-size middleware answers on any request with a body, /oauth/token included.
BODY_ERRORS = {
    "411": "AGP_INVALID_REQUEST: the body was sent chunked; send it with a Content-Length.",
    "413": "AGP_PAYLOAD_TOO_LARGE: the body is over the size limit.",
}
WRITE_ERRORS = {
    "409": "AGP_CONFLICT: the id already exists. AGP_IDEMPOTENCY_IN_PROGRESS (retryable): a request with this "
           "Idempotency-Key collided with this one; send it again.",
    **BODY_ERRORS,
    "415": "AGP_UNSUPPORTED_MEDIA_TYPE: the body is not a JSON object.",
    "422": "AGP_IDEMPOTENCY_KEY_MISMATCH: this Idempotency-Key was used with another request.",
}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string", "maxLength": 255},
    "description": "Any 1-255 printable ASCII characters chosen by you, the same on every retry of this request: "
                   "the first request is processed and its answer stored for a day; a retry gets that answer "
                   "again (header `Idempotent-Replayed: true`) and nothing is done twice.",
}

COMMON_ERRORS = {
    400: "AGP_INVALID_REQUEST: malformed body, unknown or read-only field, bad enum, or a reference to a "
         "record that does not exist (`details.fields`).",
    401: "AGP_UNAUTHENTICATED.",
    403: "AGP_INSUFFICIENT_SCOPE (`details.required_scopes`).",
    503: "AGP_UNAVAILABLE (retry after `Retry-After` seconds): the database is unreachable; nothing was written, "
         "unless `details.outcome` is `unknown` (the connection failed while committing).",
}
NOT_FOUND = "AGP_NOT_FOUND: no such id."
DUPLICATE = "AGP_CONFLICT: the id already exists."

PAGING = (f"Newest first, {DEFAULT_LIMIT} to a page (`limit` up to {MAX_LIMIT}); while `next_cursor` is not "
          "null, pass it as `cursor` for the next page. Every other query parameter filters by exact match; an "
          "unknown one is a 400.")
CREATE_NOTE = ("Send your own id, or leave it out and the server makes one; the answer is 201 with the record and "
               "its `Location`. Send an `Idempotency-Key` to make retries safe.")


def error_responses(extra: dict[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """``COMMON_ERRORS`` plus ``extra`` (status -> description), each with the error envelope."""
    described = {**COMMON_ERRORS, **(extra or {})}
    return {code: OpenApiResponse(ErrorEnvelopeSerializer, description=text)
            for code, text in sorted(described.items())}


def example(value: dict[str, Any], name: str = "Example", summary: str = "") -> list[OpenApiExample]:
    """A request body example (validated against the request schema by tests/platform/test_openapi_docs.py)."""
    return [OpenApiExample(name, value=value, summary=summary or name, request_only=True)]


@dataclass(frozen=True)
class ResourceDocs:
    """What a user of the API reads about one collection.

    ``about``: what the resource is, for the list and read operations; ``create``: what a
    POST does and decides, with ``create_example``; ``patch`` (with its summary and example)
    for resources that change state.
    """

    singular: str
    plural: str
    about: str
    create_summary: str
    create: str
    create_example: dict[str, Any]
    patch_summary: str = ""
    patch: str = ""
    patch_example: dict[str, Any] = field(default_factory=dict)

    def article(self) -> str:
        return "an" if self.singular[0] in "aeiou" else "a"


def read_views(serializer, docs: ResourceDocs) -> dict[str, Any]:
    """The list and retrieve operations' ``extend_schema`` of a collection."""
    return {
        "list": extend_schema(summary=f"List {docs.plural}", description=f"{docs.about}\n\n{PAGING}",
                              responses={200: serializer, **error_responses()}),
        "retrieve": extend_schema(summary=f"Get {docs.article()} {docs.singular}",
                                  description=f"{docs.about}\n\nOne {docs.singular} by its id; 404 when there is "
                                              f"none.",
                                  responses={200: serializer, **error_responses({404: NOT_FOUND})}),
    }


def documented(serializer, docs: ResourceDocs, *, create: dict[int, str] | None = None, patch=None,
               patch_errors: dict[int, str] | None = None):
    """``extend_schema_view`` for a list/retrieve/create (and optionally PATCH) resource viewset:
    summaries, descriptions, the request example, request and response bodies and every error
    status. ``create`` and ``patch_errors`` add or override statuses (a create's 409 defaults to
    ``DUPLICATE``)."""
    views = read_views(serializer, docs)
    views["create"] = extend_schema(
        summary=docs.create_summary, description=f"{docs.create}\n\n{CREATE_NOTE}", request=serializer,
        examples=example(docs.create_example),
        responses={201: serializer, **error_responses({409: DUPLICATE, **(create or {})})})
    if patch is not None:
        views["partial_update"] = extend_schema(
            summary=docs.patch_summary, description=docs.patch, request=patch, examples=example(docs.patch_example),
            responses={200: serializer, **error_responses({404: NOT_FOUND, **(patch_errors or {})})})
    return extend_schema_view(**views)


# --- Postprocessing hooks (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]) -------------------

def error_envelope_response(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": ERROR_ENVELOPE_REF}}}}


def shared_responses(result, generator, request, public):
    """Every ``/agp/`` operation: the shared error statuses it does not describe itself; every write:
    the ``Idempotency-Key`` header."""
    for path, item in result.get("paths", {}).items():
        if not path.startswith("/agp/"):
            continue
        for method, operation in item.items():
            if method not in ("get", "post", "patch", "put", "delete"):
                continue
            shared = dict(SHARED_ERRORS)
            if "{" in path:
                shared.update(PATH_ERRORS)
            if method in ("post", "patch", "put"):
                shared.update(WRITE_ERRORS)
                parameters = operation.setdefault("parameters", [])
                if not any(p.get("name") == IDEMPOTENCY_KEY["name"] for p in parameters):
                    parameters.append(dict(IDEMPOTENCY_KEY))
            responses = operation.setdefault("responses", {})
            for code, text in shared.items():
                responses.setdefault(code, error_envelope_response(text))
            operation["responses"] = dict(sorted(responses.items()))
    return result


def response_patterns(result, generator, request, public):
    """Response schemas keep a ``pattern`` only on id fields (see the module docstring)."""
    for name, schema in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request"):
            continue
        for prop in schema.get("properties", {}).values():
            if "pattern" in prop and prop["pattern"] != ID_PATTERN.pattern:
                del prop["pattern"]
    return result


# Members a signed document carries only when they were recorded: records made before authors
# were recorded are signed without them (``agp_project.signing.authored``).
WHEN_SET_MEMBERS = ("created_by", "approver_client")


def members_when_set(result, generator, request, public):
    """Response schemas do not require ``WHEN_SET_MEMBERS``."""
    for name, schema in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") or "required" not in schema:
            continue
        schema["required"] = [member for member in schema["required"] if member not in WHEN_SET_MEMBERS]
        if not schema["required"]:
            del schema["required"]
    return result


def plain_component_descriptions(result, generator, request, public):

    """A component without a description of its own inherits its base serializer's docstring, which
    describes our code, not the API: such descriptions are dropped."""
    from .serializers import StrictSerializer

    boilerplate = inspect.getdoc(StrictSerializer)
    for schema in result.get("components", {}).get("schemas", {}).values():
        if schema.get("description") == boilerplate:
            del schema["description"]
    return result
