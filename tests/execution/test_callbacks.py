"""Signed callbacks when an operation ends (docs/reference/execution.md): signature, attempts, retries, SSRF.

The first part drives ``callback_deliver`` in process (retries, backoff, a receiver that is
down); the second is the one end-to-end delivery by a real worker to a receiver listening in
the test process (PostgreSQL and Redis). A receiver that hangs while the worker goes on
executing: tests/reliability/test_dead_receiver.py.
"""

import re
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.db import transaction
from django.utils import timezone

from core.ledger import ledger_append
from core.models import OutboxMessage
from execution.callbacks import callback_deliver, callback_signature, callback_signature_verify, callbacks_recover
from execution.models import CallbackAttempt, Operation
from execution.runner import operation_execute
from tests.execution.factories import make_world
from tests.execution.receiver import receiver  # noqa: F401
from tests.execution.worker import (  # noqa: F401
    ledger_event_types,
    module_worker,
    poll_until_ended,
    submit_async,
    test_broker,
    wait_for,
    worker_db,
)

SECRET = "callback-secret-for-tests"


def attempts(operation_id):
    return list(CallbackAttempt.objects.filter(operation_id=operation_id).order_by("attempt")
                .values_list("attempt", "status", "response_status"))


# --- the signature -------------------------------------------------------------------------

def test_it_signs_the_timestamp_and_the_body():
    header = callback_signature(body=b'{"a":1}', timestamp=1700000000, secret=SECRET)

    assert re.fullmatch(r"t=1700000000,v1=[0-9a-f]{64}", header)
    assert callback_signature_verify(header=header, body=b'{"a":1}', secret=SECRET, now=1700000010)


@pytest.mark.parametrize("body, secret, now, header_edit", [
    (b'{"a":2}', SECRET, 1700000010, None),  # body changed
    (b'{"a":1}', "another-secret", 1700000010, None),  # wrong key
    (b'{"a":1}', SECRET, 1700000000 + 301, None),  # too old: a replay
    (b'{"a":1}', SECRET, 1700000010, lambda h: h.replace("t=1700000000", "t=1700000005")),  # timestamp moved
    (b'{"a":1}', SECRET, 1700000010, lambda h: h.split(",")[0]),  # no v1
    (b'{"a":1}', SECRET, 1700000010, lambda h: "garbage"),
])
def test_it_rejects_anything_but_the_signed_body_at_its_time(body, secret, now, header_edit):
    header = callback_signature(body=b'{"a":1}', timestamp=1700000000, secret=SECRET)
    if header_edit:
        header = header_edit(header)
    assert not callback_signature_verify(header=header, body=body, secret=secret, now=now)


def test_it_accepts_any_of_several_v1_signatures_during_a_key_rotation():
    new = callback_signature(body=b"{}", timestamp=1700000000, secret=SECRET)
    old = callback_signature(body=b"{}", timestamp=1700000000, secret="old-secret").split(",")[1]
    assert callback_signature_verify(header=f"{new},{old}", body=b"{}", secret=SECRET, now=1700000000)
    assert callback_signature_verify(header=f"{new},{old}", body=b"{}", secret="old-secret", now=1700000000)


# --- delivery in process ---------------------------------------------------------------------

@pytest.fixture
def ended(api, db, settings, receiver):
    """An operation that ended with ``callback_url`` pointing at the local receiver."""
    settings.AGP_ALLOW_PRIVATE_URLS = True
    settings.AGP_CALLBACK_MAX_ATTEMPTS = 3
    settings.AGP_CALLBACK_RETRY_BASE_SECONDS = 2
    settings.AGP_CALLBACK_SECRET = SECRET
    settings.AGP_BASE_URL = "http://testserver"
    world = make_world()
    operation_id = submit_async(api, world.envelope_request(callback_url=receiver.url("/hook")))["operation_id"]
    assert operation_execute(operation_id=operation_id, executor="worker-a") == "succeeded"
    return operation_id


def test_it_posts_the_operation_with_a_valid_signature(api, ended, receiver):
    outcome = callback_deliver(operation_id=ended)

    assert (outcome.outcome, outcome.attempt) == ("delivered", 1)
    [request] = receiver.requests
    assert request.path == "/hook"
    assert request.json() == api.get(f"/agp/operations/{ended}").json()
    assert request.json()["status"] == "succeeded"
    assert callback_signature_verify(header=request.headers["AGP-Signature"], body=request.body, secret=SECRET)
    assert request.headers["AGP-Operation-Id"] == ended
    assert attempts(ended) == [(1, "delivered", 200)]
    assert ledger_event_types(ended)[-1] == "callback.delivered"
    # Delivered: a repeated message sends nothing more.
    assert callback_deliver(operation_id=ended).outcome == "skipped"
    assert len(receiver.requests) == 1


def test_it_sends_paths_when_no_base_url_is_configured(ended, receiver, settings):
    # A worker has no request to take a host from; deployments that use callbacks set
    # AGP_BASE_URL (docs/decisions/execution-worker.md).
    settings.AGP_BASE_URL = ""

    callback_deliver(operation_id=ended)

    body = receiver.requests[0].json()
    assert body["status_url"] == f"/agp/operations/{ended}"
    assert body["result_url"].startswith("/agp/action-envelopes/act_")


def test_it_retries_with_exponential_backoff_and_records_every_attempt(ended, receiver):
    receiver.answer((500,), (503,), (204,))

    first = callback_deliver(operation_id=ended)
    second = callback_deliver(operation_id=ended)
    third = callback_deliver(operation_id=ended)

    assert (first.outcome, first.retry_in) == ("retry", 2)
    assert (second.outcome, second.retry_in) == ("retry", 4)
    assert (third.outcome, third.retry_in) == ("delivered", None)
    assert attempts(ended) == [(1, "failed", 500), (2, "failed", 503), (3, "delivered", 204)]
    assert CallbackAttempt.objects.get(operation_id=ended, attempt=1).error == "HTTP 500"
    # The same body each time, signed at each sending.
    assert len(receiver.requests) == 3 and all(r.body == receiver.requests[0].body for r in receiver.requests)
    assert all(callback_signature_verify(header=r.headers["AGP-Signature"], body=r.body, secret=SECRET)
               for r in receiver.requests)
    assert ledger_event_types(ended)[-1] == "callback.delivered"


def test_the_task_schedules_the_next_attempt_after_the_backoff(ended, receiver, monkeypatch):
    from execution.tasks import deliver_callback

    class Scheduled(Exception):
        """Raised in place of sending the next attempt, with the countdown it was given."""

    scheduled = []

    def retry(**options):
        scheduled.append(options["countdown"])
        return Scheduled()

    monkeypatch.setattr(deliver_callback, "retry", retry)
    receiver.answer((500,), (200,))

    with pytest.raises(Scheduled):
        deliver_callback.run(ended)
    assert scheduled == [2]  # a new message with a countdown, not a wait in the worker's slot
    assert deliver_callback.run(ended) == "delivered"
    assert scheduled == [2]


def test_it_gives_up_after_the_last_attempt(ended, receiver):
    receiver.answer((500,))

    outcomes = [callback_deliver(operation_id=ended).outcome for _ in range(4)]

    assert outcomes == ["retry", "retry", "abandoned", "skipped"]
    assert [a[1] for a in attempts(ended)] == ["failed", "failed", "failed"]
    assert ledger_event_types(ended)[-1] == "callback.abandoned"
    assert len(receiver.requests) == 3


def test_it_refuses_a_loopback_callback_without_the_setting_and_records_it(ended, receiver, settings):
    settings.AGP_ALLOW_PRIVATE_URLS = False

    outcome = callback_deliver(operation_id=ended)

    assert outcome.outcome == "abandoned"  # a refused URL stays refused: no retries
    assert receiver.requests == []
    [attempt] = CallbackAttempt.objects.filter(operation_id=ended)
    assert (attempt.status, attempt.response_status) == ("failed", None)
    assert "127.0.0.1 is a loopback address" in attempt.error
    assert attempt.url == receiver.url("/hook")
    assert ledger_event_types(ended)[-1] == "callback.abandoned"


def test_it_records_a_receiver_that_is_down(ended, receiver):
    receiver.server.shutdown()
    receiver.server.server_close()

    outcome = callback_deliver(operation_id=ended)

    assert outcome.outcome == "retry"
    [attempt] = CallbackAttempt.objects.filter(operation_id=ended)
    assert attempt.status == "failed" and "ConnectionError" in attempt.error
    assert "callback.delivered" not in ledger_event_types(ended)
    assert Operation.objects.get(operation_id=ended).status == "succeeded"  # the operation's end stands


def test_it_sends_nothing_for_an_operation_without_callback_or_not_ended(api, db):
    plain = submit_async(api, make_world().envelope_request())["operation_id"]
    pending = submit_async(api, make_world().envelope_request(callback_url="https://93.184.216.34/h"))["operation_id"]
    operation_execute(operation_id=plain, executor="worker-a")

    assert callback_deliver(operation_id=plain).outcome == "skipped"
    assert callback_deliver(operation_id=pending).outcome == "skipped"
    assert callback_deliver(operation_id="op_missing").outcome == "skipped"
    assert not CallbackAttempt.objects.exists()


# --- delivery by a real worker ---------------------------------------------------------------

@pytest.fixture
def live(api, worker_db, module_worker, settings):
    # Submission checks callback URLs too: the receiver is on 127.0.0.1, as in the worker.
    settings.AGP_ALLOW_PRIVATE_URLS = True
    return module_worker


@pytest.mark.postgres
def test_it_delivers_the_ended_operation_to_a_local_receiver(api, live, receiver):
    world = make_world()
    operation_id = submit_async(api, world.envelope_request(callback_url=receiver.url("/done")))["operation_id"]

    final = poll_until_ended(api, operation_id, live)
    wait_for(lambda: receiver.requests, message="the callback", worker=live)

    [request] = receiver.requests
    assert request.json() == final
    assert request.json()["status"] == "succeeded"
    assert callback_signature_verify(header=request.headers["AGP-Signature"], body=request.body,
                                     secret=django_settings.AGP_CALLBACK_SECRET)
    wait_for(lambda: attempts(operation_id) == [(1, "delivered", 200)], message="the attempt record", worker=live)


# --- recovery of lost retry messages ------------------------------------------------------------

def test_it_sends_again_a_delivery_whose_retry_message_was_lost(api, db, settings):
    settings.AGP_CALLBACK_RETRY_BASE_SECONDS = 10
    settings.AGP_CALLBACK_MAX_ATTEMPTS = 3
    now = timezone.now()

    def ended_operation(*, ended_ago, attempts=(), settled=None):
        operation_id = submit_async(api, make_world().envelope_request(
            callback_url="https://93.184.216.34/hook"))["operation_id"]
        operation_execute(operation_id=operation_id, executor="worker-a")
        Operation.objects.filter(operation_id=operation_id).update(completed_at=now - ended_ago)
        # The message the ending enqueued was published then (and lost since).
        OutboxMessage.objects.filter(task_name="agp.deliver_callback").update(status="published",
                                                                              created_at=now - ended_ago)
        for number, (status, ago) in enumerate(attempts, start=1):
            CallbackAttempt.objects.create(operation_id=operation_id, attempt=number, url="https://93.184.216.34/hook",
                                           status=status, attempted_at=now - ago)
        if settled:
            with transaction.atomic():
                ledger_append(event_type=settled, resource_type="Operation", resource_id=operation_id,
                              actor="test", payload={})
        return operation_id

    never_tried = ended_operation(ended_ago=timedelta(minutes=2))
    retry_lost = ended_operation(ended_ago=timedelta(minutes=3), attempts=[("failed", timedelta(minutes=2))])
    retry_not_due = ended_operation(ended_ago=timedelta(minutes=3), attempts=[("failed", timedelta(seconds=5))])
    just_ended = ended_operation(ended_ago=timedelta(seconds=1))
    delivered = ended_operation(ended_ago=timedelta(minutes=3), attempts=[("delivered", timedelta(minutes=2))],
                                settled="callback.delivered")
    abandoned = ended_operation(ended_ago=timedelta(minutes=3), attempts=[("failed", timedelta(minutes=2))],
                                settled="callback.abandoned")
    exhausted = ended_operation(ended_ago=timedelta(minutes=5), attempts=[("failed", timedelta(minutes=4))] * 3)
    long_ago = ended_operation(ended_ago=timedelta(days=2))

    def nudged():
        return sorted(args[0] for args in OutboxMessage.objects.filter(task_name="agp.deliver_callback",
                                                                       status="pending").values_list("args", flat=True))

    assert callbacks_recover(now=now) == 2
    assert nudged() == sorted([never_tried, retry_lost])
    assert callbacks_recover(now=now) == 0  # its message is on its way: not twice
    for untouched in (retry_not_due, just_ended, delivered, abandoned, exhausted, long_ago):
        assert untouched not in nudged()
