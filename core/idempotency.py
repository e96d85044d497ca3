"""Idempotency-Key for every POST and PATCH under /agp/ (docs/reference/api.md).

One middleware gives every write the same behaviour:

- the key's scope is (client, method, path, key); its fingerprint is the SHA-256 of what
  decides the processing: the body in RFC 8785 canonical JSON (the raw bytes when the body
  is not JSON), the execution mode ``Prefer`` asks for, and the content type;
- the request runs in one transaction that also stores its response under the key, so a
  stored response exists exactly when the work it describes was committed, and there is
  no in-flight marker to commit first or to clean up after a crash;
- a repeat with the same fingerprint replays the stored status, body and headers byte for
  byte with ``Idempotent-Replayed: true``; with another fingerprint it is 422;
- a repeat of an answered request is replayed before anything runs. A duplicate sent while
  the first is still running runs too, in its own transaction, and waits for the first
  one's commit at the key's unique index (storing the response comes last) or earlier, at
  a row the first one locked; it then fails, its work is rolled back and the first one's
  answer replayed. When the first fails instead, the duplicate's work stands. Either way
  the work is committed once;
- 5xx answers are not stored (their transaction is rolled back and the key stays free),
  nor are the answers given before the operation could run: 401, 403, 413, 415 and 429.

The client comes from ``request.agp_client_id``, which the authentication middleware of
``auth_tokens`` sets before this one runs (None: not authenticated, nothing to protect).
"""

import hashlib
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpResponse
from django.utils import timezone

from agp_project import errors, exactjson
from agp_project.canonical import canonical_json
from agp_project.http.errors import error_response
from agp_project.http.prefer import execution_mode

from .models import IdempotencyRecord

HEADER = "HTTP_IDEMPOTENCY_KEY"
REPLAYED_HEADERS = ("Location", "Operation-Location", "Content-Type", "Preference-Applied", "Retry-After", "Vary")
# Answers given before the operation ran (not authenticated, scope refused, body too large
# or of another type, rate limited): the same key may be used again once the client fixed it.
NOT_STORED = frozenset({401, 403, 413, 415, 429})


class _Rollback(Exception):
    """Leaves the request's transaction, rolling it back; ``response`` is answered instead."""

    def __init__(self, response: HttpResponse):
        self.response = response


def fingerprint(body: bytes, *, mode: str = "", content_type: str = "") -> str:
    """SHA-256 of what decides the processing: the body (canonical when it is JSON), the
    execution mode asked for, and the content type."""
    try:
        data = canonical_json(exactjson.loads(body)) if body else b""
    except (ValueError, TypeError, OverflowError, RecursionError):
        data = body
    return hashlib.sha256(b"%s\n%s\n%s" % (mode.encode(), content_type.encode(), data)).hexdigest()


def valid_key(key: str) -> bool:
    return 1 <= len(key) <= 255 and all(32 <= ord(ch) <= 126 for ch in key)


def _replay(record: IdempotencyRecord) -> HttpResponse:
    response = HttpResponse(bytes(record.response_body), status=record.response_status)
    for name, value in record.response_headers.items():
        response[name] = value
    response["Idempotent-Replayed"] = "true"
    return response


class IdempotencyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        key = request.META.get(HEADER)
        if key is None or request.method not in ("POST", "PATCH") or not request.path.startswith("/agp/"):
            return self.get_response(request)
        if not valid_key(key):
            return error_response(errors.InvalidRequest(
                "Idempotency-Key must be 1-255 printable ASCII characters.",
                details={"fields": {"Idempotency-Key": ["Invalid key."]}}))
        client_id = getattr(request, "agp_client_id", None)
        if client_id is None:
            return self.get_response(request)  # the view answers 401: nothing to protect
        scope = {"client_id": client_id, "method": request.method, "path": request.path, "key": key}
        body_fingerprint = fingerprint(request.body, mode=execution_mode(request.headers.get("Prefer", "")),
                                       content_type=request.content_type or "")
        now = timezone.now()
        stored = self._stored(scope, body_fingerprint, now)
        if stored is not None:
            return stored  # answered before: nothing runs again (no outbound call, no check)
        try:
            with transaction.atomic():
                response = self.get_response(request)
                if response.status_code >= 500 or response.status_code in NOT_STORED:
                    raise _Rollback(response)
                headers = {name: response[name] for name in REPLAYED_HEADERS if response.has_header(name)}
                # Last, so the key's unique index is held for the commit only. A duplicate
                # that ran meanwhile waits here for the first one's commit.
                IdempotencyRecord.objects.create(
                    **scope, fingerprint=body_fingerprint, response_status=response.status_code,
                    response_body=bytes(response.content), response_headers=headers, created_at=now,
                    expires_at=now + timedelta(seconds=settings.AGP_IDEMPOTENCY_TTL_SECONDS))
                return response
        except _Rollback as rollback:
            # A failure may have met a key another request has answered: that answer stands.
            return self._stored(scope, body_fingerprint, now) or rollback.response
        except IntegrityError:
            # A concurrent request took the key: this one's work was rolled back with the insert.
            return self._stored(scope, body_fingerprint, now) or error_response(errors.IdempotencyInProgress())

    @staticmethod
    def _stored(scope, body_fingerprint, now) -> HttpResponse | None:
        """The answer stored for the key (replayed, or 422 for another request), else None."""
        record = IdempotencyRecord.objects.filter(**scope).first()
        if record is None:
            return None
        if record.expires_at <= now:
            record.delete()  # the key is free again (the purge task would delete it later)
            return None
        if record.fingerprint != body_fingerprint:
            return error_response(errors.IdempotencyKeyMismatch())
        return _replay(record)
