"""The one domain error type of the service (docs/reference/api.md).

Services raise these; ``agp_project.http.errors.exception_handler`` turns every one of
them, and every framework exception, into the error envelope.
"""

from typing import Any


class AGPError(Exception):
    status_code = 400
    code = "AGP_INVALID_REQUEST"
    retryable = False
    default_message = "The request is invalid."

    def __init__(self, message: str | None = None, *, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None):
        self.message = message or self.default_message
        self.details = details or {}
        self.headers = headers or {}
        super().__init__(self.message)

    def as_body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message,
                          "retryable": self.retryable, "details": self.details}}


class InvalidRequest(AGPError):
    """400 AGP_INVALID_REQUEST: the request itself is wrong (schema, fields, references)."""


def invalid_fields(fields: dict[str, Any], message: str = "The request has invalid fields.") -> InvalidRequest:
    """A 400 naming the offending fields in ``details.fields``."""
    return InvalidRequest(message, details={"fields": fields})


class Unauthenticated(AGPError):
    status_code = 401
    code = "AGP_UNAUTHENTICATED"
    default_message = "A valid bearer token is required."

    def __init__(self, message: str | None = None, **kwargs):
        kwargs.setdefault("headers", {"WWW-Authenticate": 'Bearer error="invalid_token"'})
        super().__init__(message, **kwargs)


class InsufficientScope(AGPError):
    status_code = 403
    code = "AGP_INSUFFICIENT_SCOPE"
    default_message = "The token lacks the scope this operation needs."

    def __init__(self, required_scopes: list[str], message: str | None = None):
        scope = " ".join(required_scopes)
        super().__init__(
            message or f"This operation needs one of the scopes: {scope}.",
            details={"required_scopes": required_scopes},
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'},
        )


class Forbidden(AGPError):
    """403 AGP_FORBIDDEN: the client holds the scope, but who it is may not do this — name
    another agent, approve as someone else, act on a record it is not bound to
    (docs/reference/identity.md). ``details.field`` names what it may not say, ``details.reason`` why."""

    status_code = 403
    code = "AGP_FORBIDDEN"
    default_message = "This client may not do this."

    def __init__(self, reason: str, *, field: str | None = None, message: str | None = None):
        super().__init__(message or f"Forbidden: {reason}.", details={"field": field, "reason": reason})


class NotFound(AGPError):
    status_code = 404
    code = "AGP_NOT_FOUND"
    default_message = "Not found."


class MethodNotAllowed(AGPError):
    status_code = 405
    code = "AGP_METHOD_NOT_ALLOWED"
    default_message = "Method not allowed."


class Conflict(AGPError):
    status_code = 409
    code = "AGP_CONFLICT"
    default_message = "The resource already exists."


def duplicate_id(resource: str, field: str, value: str) -> Conflict:
    """The one 409 for a client-chosen id that is taken: ``details`` names the field and its value."""
    return Conflict(f"A {resource} with {field} {value!r} already exists.", details={"field": field, "value": value})


class DelegationScopeViolation(Conflict):
    code = "AGP_DELEGATION_SCOPE_VIOLATION"
    default_message = "The delegation violates the scope of its parent."


class DelegationHopLimit(Conflict):
    code = "AGP_DELEGATION_HOP_LIMIT"
    default_message = "The delegation exceeds the hop limit of its parent."


class InvalidTransition(Conflict):
    code = "AGP_INVALID_TRANSITION"
    default_message = "This lifecycle move is not allowed."

    def __init__(self, *, from_state: str, to_state: str, allowed: list[str], message: str | None = None):
        super().__init__(
            message or f"Cannot move from {from_state!r} to {to_state!r}.",
            details={"from": from_state, "to": to_state, "allowed": allowed},
        )


class Frozen(Conflict):
    """409 AGP_FROZEN (docs/reference/governance.md): an active freeze stops the agent, its root principal or the tool."""

    code = "AGP_FROZEN"
    default_message = "The agent, principal or tool is frozen."


class IdempotencyInProgress(Conflict):
    code = "AGP_IDEMPOTENCY_IN_PROGRESS"
    retryable = True
    default_message = "A request with this Idempotency-Key is still being processed."


class LengthRequired(AGPError):
    """411: a body sent with chunked transfer coding instead of a Content-Length."""

    status_code = 411
    default_message = ("Send the request body with a Content-Length header: chunked transfer coding is not "
                       "accepted.")


class PayloadTooLarge(AGPError):
    status_code = 413
    code = "AGP_PAYLOAD_TOO_LARGE"
    default_message = "The request body is too large."


class UnsupportedMediaType(AGPError):
    status_code = 415
    code = "AGP_UNSUPPORTED_MEDIA_TYPE"
    default_message = "Request bodies must be application/json."


class PrerequisiteFailed(AGPError):
    status_code = 422
    code = "AGP_PREREQUISITE_FAILED"
    default_message = "A governance prerequisite failed."


class ImpactAssessmentRequired(AGPError):
    status_code = 422
    code = "AGP_IMPACT_ASSESSMENT_REQUIRED"
    default_message = "An impact assessment is required before this decision is finalised."


class PolicyTestFailed(AGPError):
    """422: a policy set's own tests fail; ``details.failures`` lists each (docs/reference/governance.md)."""

    status_code = 422
    code = "AGP_POLICY_TEST_FAILED"
    default_message = "The policy set's tests fail; nothing was stored."


class IdempotencyKeyMismatch(AGPError):
    status_code = 422
    code = "AGP_IDEMPOTENCY_KEY_MISMATCH"
    default_message = "This Idempotency-Key was used with a different request body."


class RateLimited(AGPError):
    status_code = 429
    code = "AGP_RATE_LIMITED"
    retryable = True
    default_message = "Too many requests."


class InternalError(AGPError):
    status_code = 500
    code = "AGP_INTERNAL_ERROR"
    retryable = True
    default_message = "An internal error occurred."


# Seconds a client is told to wait before retrying a 503 that names no better time: about
# what a restarted database or broker takes to answer again.
UNAVAILABLE_RETRY_AFTER = 5


class Unavailable(AGPError):
    """503 AGP_UNAVAILABLE. Every one says when to retry (``Retry-After``): a retryable answer
    without it leaves a client to guess, and clients that guess short hammer a service that
    is coming back."""

    status_code = 503
    code = "AGP_UNAVAILABLE"
    retryable = True
    default_message = "A backing service is unavailable; nothing was written."

    def __init__(self, message: str | None = None, *, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message, details=details,
                         headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER), **(headers or {})})
