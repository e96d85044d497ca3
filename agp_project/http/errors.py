"""Where every error becomes the envelope (docs/reference/api.md): one mapping for the whole service."""

import logging
import sys

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.http import Http404, JsonResponse
from kombu.exceptions import OperationalError as BrokerOperationalError
from rest_framework import exceptions as drf

from agp_project import errors
from agp_project.db import failed_at_commit
from agp_project.exactjson import ExactJSONEncoder

logger = logging.getLogger(__name__)

OUTCOME_UNKNOWN = ("The database connection failed while the request was being committed: it may or may not have "
                   "been written. Retry with the same Idempotency-Key (a written request answers as it did), or "
                   "read the resource before sending it again without one.")


def _flatten(detail):
    """DRF's ErrorDetail tree as plain JSON (lists of messages, nested objects)."""
    if isinstance(detail, dict):
        return {str(key): _flatten(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_flatten(item) for item in detail]
    return str(detail)


def to_agp_error(exc: Exception) -> errors.AGPError | None:
    """Map any exception the service can meet to an AGPError; None means unhandled."""
    if isinstance(exc, errors.AGPError):
        return exc
    if isinstance(exc, drf.ValidationError):
        detail = exc.detail
        if isinstance(detail, dict):
            fields = _flatten(detail)
            non_field = fields.pop("non_field_errors", None)
            details = {"fields": fields}
            if non_field:
                details["errors"] = non_field
            message = "The request has invalid fields." if fields else "; ".join(non_field or ["Invalid request."])
            return errors.InvalidRequest(message, details=details)
        return errors.InvalidRequest("; ".join(_flatten(detail)) if isinstance(detail, list) else str(detail),
                                     details={"errors": _flatten(detail) if isinstance(detail, list) else [str(detail)]})
    if isinstance(exc, drf.ParseError):
        return errors.InvalidRequest(f"Malformed request body: {exc.detail}")
    if isinstance(exc, drf.UnsupportedMediaType):
        return errors.UnsupportedMediaType(str(exc.detail))
    if isinstance(exc, drf.MethodNotAllowed):
        return errors.MethodNotAllowed(str(exc.detail))
    if isinstance(exc, (drf.NotFound, Http404)):
        return errors.NotFound()
    if isinstance(exc, (drf.NotAuthenticated, drf.AuthenticationFailed)):
        return errors.Unauthenticated(str(exc.detail))
    if isinstance(exc, (drf.PermissionDenied, PermissionDenied)):
        return _forbidden(exc)
    if isinstance(exc, drf.Throttled):
        wait = int(exc.wait or 1)
        return errors.RateLimited(headers={"Retry-After": str(max(wait, 1))})
    if isinstance(exc, drf.NotAcceptable):
        return errors.InvalidRequest("Responses are application/json only.")
    if isinstance(exc, RequestDataTooBig):
        return errors.PayloadTooLarge()
    if isinstance(exc, (OperationalError, InterfaceError)) and failed_at_commit(exc):
        # The commit may have reached the database before the connection broke: saying that
        # nothing was written could make the client submit the same thing again.
        logger.warning("database error at commit, outcome unknown: %s", exc)
        return errors.Unavailable(OUTCOME_UNKNOWN, details={"outcome": "unknown"})
    if isinstance(exc, (OperationalError, InterfaceError, BrokerOperationalError)):
        logger.warning("backing service unavailable: %s", exc)
        return errors.Unavailable()
    if isinstance(exc, drf.APIException):
        if exc.status_code >= 500:
            return errors.InternalError()
        err = errors.AGPError(str(exc.detail))
        err.status_code = exc.status_code
        return err
    return None


def _forbidden(exc) -> errors.AGPError:
    return errors.InsufficientScope([], message=str(getattr(exc, "detail", "") or "Forbidden."))


def error_response(err: errors.AGPError) -> JsonResponse:
    response = JsonResponse(err.as_body(), status=err.status_code, encoder=ExactJSONEncoder,
                            json_dumps_params={"ensure_ascii": False})
    for name, value in err.headers.items():
        response[name] = value
    return response


def exception_handler(exc, context):
    """DRF's exception handler: every exception raised in a view becomes the envelope.

    The failed request's writes are rolled back: views run their writes inside
    ``transaction.atomic`` blocks that the exception has already left, and any enclosing
    request-level transaction is marked for rollback here.
    """
    err = to_agp_error(exc)
    if err is None:
        logger.exception("unhandled exception in %s", context.get("view").__class__.__name__, exc_info=exc)
        err = errors.InternalError()
    if isinstance(exc, DatabaseError) or err.status_code >= 500:
        if connection.in_atomic_block:
            transaction.set_rollback(True)
    return error_response(err)


def handler404(request, exception=None):
    return error_response(errors.NotFound(f"No such path: {request.path}"))


def handler500(request):
    """Exceptions outside DRF views (middleware, plain views) end here.

    Django calls this inside its ``except`` block, so the exception is still current: a
    database or broker outage raised by a middleware (the idempotency record, the token's
    client lookup) is a 503 like anywhere else, not a 500.
    """
    exc = sys.exc_info()[1]
    return error_response((to_agp_error(exc) if exc is not None else None) or errors.InternalError())


def handler400(request, exception=None):
    return error_response(errors.InvalidRequest("Bad request."))


def handler403(request, exception=None):
    return error_response(_forbidden(exception or PermissionDenied()))
