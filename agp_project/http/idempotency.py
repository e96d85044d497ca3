"""Idempotency-Key for every POST and PATCH under /agp/ (CONTRACT C4).

One middleware gives every write the same behaviour:

- the key's scope is (client, method, path, key); its fingerprint is the SHA-256 of the
  body in RFC 8785 canonical JSON (of the raw bytes when the body is not JSON);
- the first request commits an in-flight marker, then runs the view and stores the
  response *in the same transaction* as the view's writes, so a stored response exists
  exactly when the work it describes was committed;
- a repeat with the same fingerprint replays the stored status, body and Location byte
  for byte with ``Idempotent-Replayed: true``; with another fingerprint it is 422; while
  the first is still in flight it is 409 (retryable);
- 5xx responses are not stored: their transaction is rolled back and the key released;
  neither are 401, 403 and 429, which answer before the operation runs.
"""

import hashlib
import json
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpResponse
from django.utils import timezone

from agp_project import errors
from agp_project.canonical import canonical_json
from agp_project.http.errors import error_response
from core.models import IdempotencyRecord

HEADER = "HTTP_IDEMPOTENCY_KEY"
REPLAYED_HEADERS = ("Location", "Operation-Location", "Content-Type", "Preference-Applied", "Retry-After", "Vary")
# Answers given before the operation ran (scope refused, rate limited) are not stored
# either: the same key may be retried once the client has the scope or the window passed.
NOT_STORED = frozenset({401, 403, 429})


class _Abort(Exception):
    """Raised inside the request transaction to roll it back and release the key (5xx, 401, 403, 429)."""

    def __init__(self, response):
        self.response = response


def fingerprint(body: bytes) -> str:
    try:
        data = canonical_json(json.loads(body)) if body else b""
    except (ValueError, TypeError, OverflowError, RecursionError):
        data = body
    return hashlib.sha256(data).hexdigest()


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

        from auth_tokens.authentication import client_id_for_request

        client_id = client_id_for_request(request)
        if client_id is None:
            # Not authenticated: the view answers 401 and there is nothing to protect.
            return self.get_response(request)
        now = timezone.now()
        scope = {"client_id": client_id, "method": request.method, "path": request.path, "key": key}
        body_fingerprint = fingerprint(request.body)
        record = self._claim(scope, body_fingerprint, now)
        if record is None:
            record = self._existing(scope, body_fingerprint, now)
            if isinstance(record, HttpResponse):
                return record
        return self._process(request, record)

    @staticmethod
    def _claim(scope, body_fingerprint, now) -> IdempotencyRecord | None:
        """Commit the in-flight marker; None when the key is already taken.

        The savepoint keeps a duplicate-key error from breaking an enclosing transaction.
        """
        try:
            with transaction.atomic():
                return IdempotencyRecord.objects.create(
                    **scope, fingerprint=body_fingerprint, locked_at=now,
                    expires_at=now + timedelta(seconds=settings.AGP_IDEMPOTENCY_TTL_SECONDS))
        except IntegrityError:
            return None

    def _existing(self, scope, body_fingerprint, now):
        existing = IdempotencyRecord.objects.filter(**scope).first()
        if existing is None:  # released between our insert and this read: try once more
            return self._claim(scope, body_fingerprint, now) or error_response(errors.IdempotencyInProgress())
        if existing.expires_at <= now:
            existing.delete()
            return self._existing(scope, body_fingerprint, now)
        if existing.fingerprint != body_fingerprint:
            return error_response(errors.IdempotencyKeyMismatch())
        if existing.state == IdempotencyRecord.DONE:
            return _replay(existing)
        stale_before = now - timedelta(seconds=settings.AGP_IDEMPOTENCY_LOCK_SECONDS)
        # Take over a marker left by a request whose process died; the conditional update
        # lets exactly one of several retries win it.
        taken = IdempotencyRecord.objects.filter(
            pk=existing.pk, state=IdempotencyRecord.IN_FLIGHT, locked_at__lt=stale_before).update(locked_at=now)
        if taken != 1:
            return error_response(errors.IdempotencyInProgress())
        existing.locked_at = now
        return existing

    def _process(self, request, record):
        try:
            with transaction.atomic():
                response = self.get_response(request)
                if response.status_code >= 500 or response.status_code in NOT_STORED:
                    raise _Abort(response)
                headers = {name: response[name] for name in REPLAYED_HEADERS if response.has_header(name)}
                updated = IdempotencyRecord.objects.filter(pk=record.pk, locked_at=record.locked_at).update(
                    state=IdempotencyRecord.DONE, response_status=response.status_code,
                    response_body=bytes(response.content), response_headers=headers)
                if updated != 1:
                    # Another request took the key over while this one ran too long: its
                    # outcome stands, this one's writes are undone.
                    raise _Abort(error_response(errors.IdempotencyInProgress()))
                return response
        except _Abort as abort:
            IdempotencyRecord.objects.filter(pk=record.pk, locked_at=record.locked_at,
                                             state=IdempotencyRecord.IN_FLIGHT).delete()
            return abort.response
        except BaseException:
            IdempotencyRecord.objects.filter(pk=record.pk, locked_at=record.locked_at,
                                             state=IdempotencyRecord.IN_FLIGHT).delete()
            raise
