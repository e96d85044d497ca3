"""Idempotency-Key (docs/reference/api.md): one mechanism, every POST and PATCH under /agp/."""

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import requests
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import IdempotencyRecord, LedgerEvent
from core.services import idempotency_record_purge_expired
from core.tasks import purge_expired_idempotency_records
from execution.models import Operation
from tests.platform import urls as test_urls
from tests.platform.conftest import assert_envelope, test_database_url

EVENT = {"event_type": "client.note", "resource_type": "task", "resource_id": "tsk_1", "payload": {"n": 1}}


def post(api, body, key, path="/agp/ledger-events"):
    return api.generic("POST", path, json.dumps(body), content_type="application/json", HTTP_IDEMPOTENCY_KEY=key)


@pytest.mark.django_db
class TestReplay:
    def test_it_replays_the_stored_response_byte_for_byte(self, api):
        first = post(api, EVENT, "key-1")
        assert first.status_code == 201
        assert not first.has_header("Idempotent-Replayed")
        second = post(api, EVENT, "key-1")
        assert second.status_code == 201
        assert second.content == first.content
        assert second["Location"] == first["Location"]
        assert second["Content-Type"] == first["Content-Type"]
        assert second["Idempotent-Replayed"] == "true"
        assert LedgerEvent.objects.count() == 1
        record = IdempotencyRecord.objects.get()
        assert (record.response_status, record.key) == (201, "key-1")
        assert bytes(record.response_body) == first.content

    def test_it_treats_the_same_json_in_another_key_order_and_spacing_as_the_same_body(self, api):
        first = post(api, EVENT, "key-order")
        body = '{ "payload": {"n": 1.0}, "resource_id": "tsk_1", "resource_type": "task", "event_type": "client.note" }'
        second = api.generic("POST", "/agp/ledger-events", body, content_type="application/json",
                             HTTP_IDEMPOTENCY_KEY="key-order")
        assert second.status_code == 201
        assert second.content == first.content
        assert second["Idempotent-Replayed"] == "true"
        assert LedgerEvent.objects.count() == 1

    def test_it_replays_stored_client_errors_too(self, api):
        first = post(api, {**EVENT, "colour": "red"}, "key-400")
        assert first.status_code == 400
        second = post(api, {**EVENT, "colour": "red"}, "key-400")
        assert (second.status_code, second.content, second["Idempotent-Replayed"]) == (400, first.content, "true")
        assert LedgerEvent.objects.count() == 0

    def test_it_refuses_the_same_key_with_another_body(self, api):
        assert post(api, EVENT, "key-2").status_code == 201
        response = post(api, {**EVENT, "payload": {"n": 2}}, "key-2")
        assert_envelope(response, 422, "AGP_IDEMPOTENCY_KEY_MISMATCH", retryable=False)
        assert not response.has_header("Idempotent-Replayed")
        assert list(LedgerEvent.objects.values_list("payload", flat=True)) == [{"n": 1}]

    def test_it_processes_requests_without_a_key_every_time(self, api):
        assert api.post("/agp/ledger-events", EVENT, format="json").status_code == 201
        assert api.post("/agp/ledger-events", EVENT, format="json").status_code == 201
        assert LedgerEvent.objects.count() == 2
        assert IdempotencyRecord.objects.count() == 0

    def test_it_ignores_the_key_on_reads(self, api):
        response = api.get("/agp/ledger-events", HTTP_IDEMPOTENCY_KEY="key-get")
        assert response.status_code == 200
        assert IdempotencyRecord.objects.count() == 0

    def test_it_scopes_keys_to_the_path(self, api):
        assert post(api, EVENT, "key-path").status_code == 201
        response = post(api, EVENT, "key-path", path="/agp/nothing-here")
        assert_envelope(response, 404, "AGP_NOT_FOUND")
        assert not response.has_header("Idempotent-Replayed")
        assert IdempotencyRecord.objects.filter(key="key-path").count() == 2

    @pytest.mark.parametrize("key", ["", "k" * 256, "caf\u00e9", "tab\there", "new\nline"])
    def test_it_rejects_keys_that_are_not_1_to_255_printable_ascii(self, key):
        response = post(Client(), EVENT, key)
        error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
        assert error["details"] == {"fields": {"Idempotency-Key": ["Invalid key."]}}
        assert LedgerEvent.objects.count() == 0
        assert IdempotencyRecord.objects.count() == 0

    def test_it_accepts_a_255_character_key(self, api):
        assert post(api, EVENT, "k" * 255).status_code == 201
        assert IdempotencyRecord.objects.get().key == "k" * 255


@pytest.mark.django_db
class TestInFlightAndFailures:
    @pytest.mark.urls("tests.platform.urls")
    def test_it_does_not_store_a_5xx_and_undoes_its_writes(self):
        api = APIClient(raise_request_exception=False)
        test_urls.flaky_failing.set()
        try:
            failed = post(api, {"try": 1}, "key-flaky", path="/agp/test/flaky-append")
        finally:
            test_urls.flaky_failing.clear()
        assert_envelope(failed, 500, "AGP_INTERNAL_ERROR", retryable=True)
        assert LedgerEvent.objects.count() == 0
        assert IdempotencyRecord.objects.count() == 0

        retried = post(api, {"try": 1}, "key-flaky", path="/agp/test/flaky-append")
        assert retried.status_code == 201
        assert not retried.has_header("Idempotent-Replayed")
        assert LedgerEvent.objects.get().sequence == retried.json()["sequence"] == 1
        assert IdempotencyRecord.objects.get().response_status == 201

    def test_it_does_not_store_a_refusal_for_missing_scope(self, make_token):
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.execution.read'])}")
        assert_envelope(post(api, EVENT, "key-scope"), 403, "AGP_INSUFFICIENT_SCOPE")
        assert IdempotencyRecord.objects.count() == 0
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token()}")
        response = post(api, EVENT, "key-scope")
        assert response.status_code == 201
        assert not response.has_header("Idempotent-Replayed")
        assert LedgerEvent.objects.count() == 1

    def test_it_does_not_store_anything_for_an_unauthenticated_request(self, auth_settings):
        response = post(APIClient(), EVENT, "key-anon")
        assert_envelope(response, 401, "AGP_UNAUTHENTICATED")
        assert IdempotencyRecord.objects.count() == 0
        assert LedgerEvent.objects.count() == 0


@pytest.mark.django_db
class TestWhatTheKeyCovers:
    def test_a_validation_s_answer_is_not_replayed_for_an_execution_with_the_same_body(self, api):
        from tests.execution.factories import make_world

        world = make_world()
        body = json.dumps(world.envelope_request())
        validated = api.generic("POST", "/agp/action-envelopes", body, content_type="application/json",
                                HTTP_IDEMPOTENCY_KEY="key-mode")
        assert validated.status_code == 200
        executed = api.generic("POST", "/agp/action-envelopes", body, content_type="application/json",
                               HTTP_IDEMPOTENCY_KEY="key-mode", HTTP_PREFER="respond-async")
        assert_envelope(executed, 422, "AGP_IDEMPOTENCY_KEY_MISMATCH")
        assert not Operation.objects.exists()
        # Another preference that still asks for a validation only is the same request.
        again = api.generic("POST", "/agp/action-envelopes", body, content_type="application/json",
                            HTTP_IDEMPOTENCY_KEY="key-mode", HTTP_PREFER="return=representation")
        assert (again.status_code, again["Idempotent-Replayed"]) == (200, "true")

    def test_a_415_is_not_stored_and_the_corrected_request_runs(self, api):
        refused = api.generic("POST", "/agp/ledger-events", json.dumps(EVENT), content_type="text/plain",
                              HTTP_IDEMPOTENCY_KEY="key-type")
        assert_envelope(refused, 415, "AGP_UNSUPPORTED_MEDIA_TYPE")
        assert IdempotencyRecord.objects.count() == 0
        corrected = post(api, EVENT, "key-type")
        assert corrected.status_code == 201 and not corrected.has_header("Idempotent-Replayed")
        assert LedgerEvent.objects.count() == 1

    def test_a_413_is_not_stored_and_the_corrected_request_runs(self, api, settings):
        too_large = {**EVENT, "payload": {"blob": "x" * (settings.AGP_MAX_BODY_BYTES + 1)}}
        assert_envelope(post(api, too_large, "key-size"), 413, "AGP_PAYLOAD_TOO_LARGE")
        assert IdempotencyRecord.objects.count() == 0
        assert post(api, EVENT, "key-size").status_code == 201
        assert LedgerEvent.objects.count() == 1


@pytest.mark.django_db
class TestExpiryAndScope:
    def test_it_processes_a_key_again_once_its_record_expired(self, api, settings):
        first = post(api, EVENT, "key-old")
        IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        second = post(api, {**EVENT, "payload": {"n": 2}}, "key-old")
        assert second.status_code == 201
        assert not second.has_header("Idempotent-Replayed")
        assert second.content != first.content
        assert LedgerEvent.objects.count() == 2
        record = IdempotencyRecord.objects.get()
        assert record.expires_at > timezone.now() + timedelta(seconds=settings.AGP_IDEMPOTENCY_TTL_SECONDS - 60)
        assert bytes(record.response_body) == second.content

    def test_it_keeps_records_for_the_configured_time(self, api, settings):
        settings.AGP_IDEMPOTENCY_TTL_SECONDS = 120
        before = timezone.now()
        post(api, EVENT, "key-ttl")
        expires = IdempotencyRecord.objects.get().expires_at
        assert before + timedelta(seconds=120) <= expires <= timezone.now() + timedelta(seconds=120)

    def test_it_scopes_keys_to_the_client(self, make_token):
        alice, bob = APIClient(), APIClient()
        alice.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(client_id='alice')}")
        bob.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(client_id='bob')}")
        first, second = post(alice, EVENT, "shared-key"), post(bob, EVENT, "shared-key")
        assert (first.status_code, second.status_code) == (201, 201)
        assert not second.has_header("Idempotent-Replayed")
        assert sorted(LedgerEvent.objects.values_list("actor", flat=True)) == ["alice", "bob"]
        assert sorted(IdempotencyRecord.objects.values_list("client_id", flat=True)) == ["alice", "bob"]
        assert post(alice, EVENT, "shared-key")["Idempotent-Replayed"] == "true"
        assert LedgerEvent.objects.count() == 2

    def test_it_purges_expired_records_only(self, api):
        post(api, EVENT, "key-a")
        post(api, EVENT, "key-b")
        IdempotencyRecord.objects.filter(key="key-a").update(expires_at=timezone.now() - timedelta(seconds=1))
        assert idempotency_record_purge_expired(batch_size=1) == 1
        assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["key-b"]

    def test_the_periodic_task_purges_and_is_scheduled(self, api, settings):
        post(api, EVENT, "key-c")
        IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        assert purge_expired_idempotency_records.apply().get() == 1
        assert IdempotencyRecord.objects.count() == 0
        scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
        assert purge_expired_idempotency_records.name in scheduled


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.platform.urls")
@pytest.mark.parametrize("second_body", [{"n": 1}, {"n": 2}], ids=["same body", "another body"])
def test_a_duplicate_sent_while_the_first_runs_waits_for_it_and_gets_its_answer(second_body):
    """Two real concurrent requests with one key: both are inside the view at once. The
    second's work waits for the first one's commit and is rolled back; it answers with the
    first one's response (or 422 for another body), and one event is written."""
    test_urls.slow_entered.clear()
    test_urls.slow_release.clear()
    results = {}

    def request(name, body):
        try:
            results[name] = post(Client(), body, "key-slow", path="/agp/test/slow-append")
        finally:
            connection.close()

    first = threading.Thread(target=request, args=("first", {"n": 1}))
    first.start()
    assert test_urls.slow_entered.wait(timeout=10)
    test_urls.slow_entered.clear()
    second = threading.Thread(target=request, args=("second", second_body))
    second.start()
    assert test_urls.slow_entered.wait(timeout=10)  # both are inside the view now
    test_urls.slow_release.set()
    first.join(timeout=30)
    second.join(timeout=30)

    # Both views were released at once: either may commit first.
    originals = [r for r in results.values() if r.status_code == 201 and not r.has_header("Idempotent-Replayed")]
    [original] = originals
    [other] = [r for r in results.values() if r is not original]
    if second_body == {"n": 1}:
        assert (other.status_code, other.content, other["Idempotent-Replayed"]) == (201, original.content, "true")
    else:
        assert_envelope(other, 422, "AGP_IDEMPOTENCY_KEY_MISMATCH")
    assert LedgerEvent.objects.count() == 1
    assert bytes(IdempotencyRecord.objects.get().response_body) == original.content


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_fifty_parallel_requests_with_one_key_create_exactly_one_event(run_server):
    """50 clients race one key against a real gunicorn server on PostgreSQL."""
    server = run_server({"AGP_DATABASE_URL": test_database_url()}, workers=2, threads=10)
    barrier = threading.Barrier(50)
    body = json.dumps({**EVENT, "payload": {"race": True}})

    def send(_):
        with requests.Session() as session:
            barrier.wait(timeout=30)
            response = session.post(f"{server.url}/agp/ledger-events", data=body, timeout=60,
                                    headers={"Content-Type": "application/json", "Idempotency-Key": "race-key"})
            return response.status_code, response.headers.get("Idempotent-Replayed"), response.content

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(send, range(50)))

    originals = [r for r in results if r[0] == 201 and r[1] is None]
    replays = [r for r in results if r[0] == 201 and r[1] == "true"]
    busy = [r for r in results if r[0] == 409]
    assert len(originals) == 1, results
    assert len(originals) + len(replays) + len(busy) == 50, results
    assert all(content == originals[0][2] for _, _, content in replays)
    assert all(json.loads(content)["error"]["code"] == "AGP_IDEMPOTENCY_IN_PROGRESS" for _, _, content in busy)
    assert LedgerEvent.objects.count() == 1
    record = IdempotencyRecord.objects.get()
    assert (record.key, bytes(record.response_body)) == ("race-key", originals[0][2])
