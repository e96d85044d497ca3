"""Typed exceptions carrying the AGP error body (docs/reference/api.md).

Every error the service answers becomes one of these, chosen by ``error.code``;
``isinstance`` checks can use the families (``ConflictError`` covers every 409 code,
``PrerequisiteFailedError`` every fail-closed 422, ``ValidationError`` every malformed
request). The token endpoint's RFC 6749 errors map onto the same classes, with the OAuth
error string as ``code``.
"""

from __future__ import annotations

from typing import Any


class AGPError(Exception):
    """Base of every error raised by the client.

    ``status`` is the HTTP status (None when no response arrived), ``code`` the AGP error
    code (``AGP_...``) or the OAuth error, ``retryable`` what the server said about retrying,
    ``details`` the error's details object, ``body`` the whole decoded response body (or the
    raw text when it was not JSON), ``headers`` the response headers.
    """

    default_code: str | None = None

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 retryable: bool = False, details: dict[str, Any] | None = None, body: Any = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code or self.default_code
        self.retryable = retryable
        self.details = details or {}
        self.body = body
        self.headers = dict(headers or {})

    def __str__(self) -> str:
        prefix = " ".join(str(part) for part in (self.status, self.code) if part)
        return f"{prefix}: {self.message}" if prefix else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r})"


class ValidationError(AGPError):
    """400: malformed JSON, schema violation, unknown or read-only field (``details.fields``)."""

    default_code = "AGP_INVALID_REQUEST"

    @property
    def fields(self) -> dict[str, Any]:
        return self.details.get("fields", {})


class PayloadTooLargeError(ValidationError):
    default_code = "AGP_PAYLOAD_TOO_LARGE"


class UnsupportedMediaTypeError(ValidationError):
    default_code = "AGP_UNSUPPORTED_MEDIA_TYPE"


class AuthenticationError(AGPError):
    """401: missing, malformed, expired or badly signed token, or refused client credentials."""

    default_code = "AGP_UNAUTHENTICATED"


class ScopeError(AGPError):
    """403: the token lacks the scope the operation needs (``required_scopes``)."""

    default_code = "AGP_INSUFFICIENT_SCOPE"

    @property
    def required_scopes(self) -> list[str]:
        return list(self.details.get("required_scopes", []))


class ForbiddenError(AGPError):
    """403: the client holds the scope, but who it is may not do this (``field``, ``reason``):
    name another agent, approve as someone else, act on a record it is not bound to."""

    default_code = "AGP_FORBIDDEN"

    @property
    def field(self) -> str | None:
        return self.details.get("field")

    @property
    def reason(self) -> str | None:
        return self.details.get("reason")


class NotFoundError(AGPError):
    default_code = "AGP_NOT_FOUND"


class MethodNotAllowedError(AGPError):
    default_code = "AGP_METHOD_NOT_ALLOWED"


class ConflictError(AGPError):
    """409: a duplicate id, or one of the more specific conflicts below."""

    default_code = "AGP_CONFLICT"


class DelegationScopeViolationError(ConflictError):
    default_code = "AGP_DELEGATION_SCOPE_VIOLATION"


class DelegationHopLimitError(ConflictError):
    default_code = "AGP_DELEGATION_HOP_LIMIT"


class InvalidTransitionError(ConflictError):
    """409: a lifecycle move that is not allowed (``details``: ``from``, ``to``, ``allowed``)."""

    default_code = "AGP_INVALID_TRANSITION"


class FrozenError(ConflictError):
    """409: an active freeze stops the agent, its root principal or the tool (``freezes``)."""

    default_code = "AGP_FROZEN"

    @property
    def freezes(self) -> list[dict[str, Any]]:
        return list(self.details.get("freezes", []))


class IdempotencyInProgressError(ConflictError):
    default_code = "AGP_IDEMPOTENCY_IN_PROGRESS"


class PrerequisiteFailedError(AGPError):
    """422: a fail-closed governance check failed (``failed_checks``)."""

    default_code = "AGP_PREREQUISITE_FAILED"

    @property
    def failed_checks(self) -> list[dict[str, Any]]:
        return list(self.details.get("failed_checks", []))

    @property
    def decision_id(self) -> str | None:
        """The decision that waits for people (approvals, an impact assessment) when the task's
        policy set decided so; the same call clears once they have acted. None otherwise."""
        return self.details.get("decision_id")


class ImpactAssessmentRequiredError(PrerequisiteFailedError):
    default_code = "AGP_IMPACT_ASSESSMENT_REQUIRED"


class PolicyTestFailedError(AGPError):
    """A policy set's own tests fail (``.failures``: each ``{name, expected, actual}``); nothing was stored."""

    default_code = "AGP_POLICY_TEST_FAILED"

    @property
    def failures(self) -> list[dict[str, Any]]:
        return list(self.details.get("failures") or [])


class IdempotencyKeyMismatchError(AGPError):
    """422: the Idempotency-Key was used before with a different body."""

    default_code = "AGP_IDEMPOTENCY_KEY_MISMATCH"


class RateLimitedError(AGPError):
    """429: slow down; ``retry_after`` is the server's Retry-After in seconds, when given."""

    default_code = "AGP_RATE_LIMITED"

    @property
    def retry_after(self) -> float | None:
        from .transport import parse_retry_after

        return parse_retry_after(self.headers.get("Retry-After"))


class ServerError(AGPError):
    """500 and other 5xx answers without a more specific code."""

    default_code = "AGP_INTERNAL_ERROR"


class UnavailableError(ServerError):
    """503: the database or broker is down; nothing was written."""

    default_code = "AGP_UNAVAILABLE"


class ExecutionFailedError(AGPError):
    """The tool did not carry the action out (found as a failed Operation's ``error``)."""

    default_code = "AGP_EXECUTION_FAILED"


class ToolChangedError(ExecutionFailedError):
    """An MCP tool's definition changed since its skill pinned it: the tool was not called."""

    default_code = "AGP_TOOL_CHANGED"


class TransportError(AGPError):
    """No usable response: connection refused or dropped, or timed out, after every retry."""


class OperationTimeoutError(AGPError):
    """``operations.wait`` gave up before the operation ended (``operation`` is the last state seen)."""

    def __init__(self, message: str, *, operation: dict[str, Any] | None = None):
        super().__init__(message)
        self.operation = operation


class SignatureError(AGPError):
    """A signed resource the service returned does not verify against its JWKS (raised by an
    ``AGPClient(..., verify_signatures=True)``): it was changed after signing, or signed by a key
    the service does not publish. Do not act on it.

    ``problems`` lists every record of the response that failed (``"<label>: <why>"``);
    ``body`` is the whole decoded response, ``status`` its (2xx) HTTP status.
    """

    def __init__(self, message: str, *, problems: list[str], status: int | None = None, body: Any = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message, status=status, body=body, headers=headers)
        self.problems = list(problems)

    def __str__(self) -> str:
        return self.message


BY_CODE: dict[str, type[AGPError]] = {
    cls.default_code: cls
    for cls in (ValidationError, PayloadTooLargeError, UnsupportedMediaTypeError, AuthenticationError, ScopeError,
                ForbiddenError, NotFoundError,
 MethodNotAllowedError, ConflictError, DelegationScopeViolationError,
                DelegationHopLimitError, InvalidTransitionError, FrozenError, IdempotencyInProgressError,
                PrerequisiteFailedError, ImpactAssessmentRequiredError, PolicyTestFailedError,
                IdempotencyKeyMismatchError, RateLimitedError, ServerError, UnavailableError, ExecutionFailedError,
                ToolChangedError)
}

BY_STATUS: dict[int, type[AGPError]] = {
    400: ValidationError, 401: AuthenticationError, 403: ScopeError, 404: NotFoundError,
    405: MethodNotAllowedError, 409: ConflictError, 413: PayloadTooLargeError, 415: UnsupportedMediaTypeError,
    422: PrerequisiteFailedError, 429: RateLimitedError, 503: UnavailableError,
}

OAUTH_ERRORS: dict[str, type[AGPError]] = {
    "invalid_client": AuthenticationError,
    "unauthorized_client": AuthenticationError,
    "invalid_scope": ScopeError,
    "slow_down": RateLimitedError,
    "invalid_request": ValidationError,
    "unsupported_grant_type": ValidationError,
}


def error_class(status: int, code: str | None) -> type[AGPError]:
    if code in BY_CODE:
        return BY_CODE[code]
    if code in OAUTH_ERRORS:
        return OAUTH_ERRORS[code]
    if status in BY_STATUS:
        return BY_STATUS[status]
    return ServerError if status >= 500 else AGPError


def error_from_operation(operation: dict[str, Any]) -> AGPError:
    """The typed exception for a failed Operation's ``error`` member (status None: no HTTP answer failed)."""
    error = operation.get("error") if isinstance(operation.get("error"), dict) else {}
    code = error.get("code")
    return error_class(0, code)(
        str(error.get("message") or f"Operation {operation.get('operation_id')} failed."), code=code,
        retryable=bool(error.get("retryable", False)),
        details=error.get("details") if isinstance(error.get("details"), dict) else {}, body=operation)


def error_from_body(status: int, body: Any, headers: dict[str, str]) -> AGPError:
    """The exception for an error response: the AGP envelope, the OAuth shape, or anything else."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        code = error.get("code")
        return error_class(status, code)(
            str(error.get("message") or f"HTTP {status}"), status=status, code=code,
            retryable=bool(error.get("retryable", False)),
            details=error.get("details") if isinstance(error.get("details"), dict) else {},
            body=body, headers=headers)
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        code = body["error"]
        return error_class(status, code)(
            str(body.get("error_description") or code), status=status, code=code,
            retryable=status == 429, body=body, headers=headers)
    text = body if isinstance(body, str) else ""
    return error_class(status, None)(
        f"HTTP {status}" + (f": {text[:200]}" if text else ""), status=status,
        retryable=status in (429, 502, 503, 504), body=body, headers=headers)
