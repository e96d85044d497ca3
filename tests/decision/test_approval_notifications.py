"""A signed notice when a decision starts waiting for people (decision/notifications.py).

The first part makes decisions wait over REST and in one call and drives delivery in process
against a receiver listening in the test process; the last test lets a real worker deliver,
retrying after a failure (PostgreSQL and Redis).
"""

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from core.models import LedgerEvent, OutboxMessage
from core.webhooks import webhook_signature_verify
from decision.choices import APPROVAL_NOTICE_TASK
from decision.models import ApprovalNotificationAttempt, ApprovalWebhook, Decision
from decision.notifications import approval_notice_deliver, approval_notices_recover
from tests.execution.factories import governed_by_policy, make_world, one_call_request
from tests.execution.receiver import receiver  # noqa: F401
from tests.execution.worker import module_worker, test_broker, wait_for, worker_db  # noqa: F401

SECRET = "notice-secret-for-tests"


def attempts(decision_id):
    return list(ApprovalNotificationAttempt.objects.filter(decision_id=decision_id).order_by("attempt")
                .values_list("attempt", "status", "response_status"))


def notices():
    return list(OutboxMessage.objects.filter(task_name=APPROVAL_NOTICE_TASK).values_list("args", flat=True))


def waiting_decision(api, world, **fields):
    """A draft ``approve`` decision recorded over REST on an evaluation that asked for approval."""
    evaluation = api.post("/agp/policy-evaluations", {
        "policy_set_id": world.policy_set.policy_set_id, "task_id": world.task.task_id, "agent_id": world.agent_id,
        "input": {"action_class": "read", "require_approval": True}}, format="json")
    assert evaluation.status_code == 201, evaluation.content
    response = api.post("/agp/decisions", {"task_id": world.task.task_id, "agent_id": world.agent_id,
                                           "outcome": "approve", "rationale": "needs people",
                                           "policy_evaluation_ref": evaluation.json()["evaluation_id"], **fields},
                        format="json")
    assert response.status_code == 201, response.content
    return response.json()["decision_id"]


@pytest.fixture
def hooked(db, settings, receiver):
    """A world whose tenant's approval webhook is the local receiver."""
    settings.AGP_ALLOW_PRIVATE_URLS = True
    settings.AGP_CALLBACK_MAX_ATTEMPTS = 3
    settings.AGP_CALLBACK_RETRY_BASE_SECONDS = 2
    settings.AGP_CALLBACK_SECRET = SECRET
    settings.AGP_BASE_URL = "https://agp.example"
    world = make_world()
    ApprovalWebhook.objects.create(root_principal=world.root_principal, url=receiver.url("/approvals"))
    return world


def test_it_makes_a_notice_due_when_a_rest_decision_starts_waiting(api, hooked):
    decision_id = waiting_decision(api, hooked)

    assert notices() == [[decision_id]]


def test_it_makes_a_notice_due_when_a_call_in_one_request_waits_for_people(api, hooked):
    world = governed_by_policy(hooked)

    response = api.post("/agp/action-envelopes", one_call_request(world, parameters={"limit": 60}), format="json")

    assert response.status_code == 422, response.content
    assert notices() == [[response.json()["error"]["details"]["decision_id"]]]


def test_it_makes_none_when_nothing_waits_or_the_tenant_has_no_active_webhook(api, hooked):
    world = governed_by_policy(hooked)
    assert api.post("/agp/action-envelopes", one_call_request(world), format="json").status_code == 200  # cleared
    ApprovalWebhook.objects.update(is_active=False)
    waiting_decision(api, make_world(root_principal=world.root_principal))

    assert notices() == []


def test_a_receiver_gets_the_signed_notice_with_the_inbox_link_and_a_retry_after_a_failure(api, hooked, receiver):
    receiver.answer((503,), (200,))
    decision_id = waiting_decision(api, hooked)

    first = approval_notice_deliver(decision_id=decision_id)
    second = approval_notice_deliver(decision_id=decision_id)

    assert (first.outcome, first.retry_in) == ("retry", 2)
    assert (second.outcome, second.attempt) == ("delivered", 2)
    assert attempts(decision_id) == [(1, "failed", 503), (2, "delivered", 200)]
    for request in receiver.requests:
        assert request.path == "/approvals"
        assert webhook_signature_verify(header=request.headers["AGP-Signature"], body=request.body, secret=SECRET)
        assert request.headers["AGP-Event"] == "approval.waiting"
    event = receiver.requests[-1].json()
    assert event["inbox_url"] == f"https://agp.example/admin/approvals/{decision_id}/"
    assert (event["type"], event["decision_id"], event["task_id"], event["approvals_required"]) == (
        "approval.waiting", decision_id, hooked.task.task_id, 1)
    assert event["why"] == ["the policy evaluation requires approval"]
    assert LedgerEvent.objects.filter(resource_id=decision_id).latest("sequence").event_type == \
        "approval_notice.delivered"
    # Delivered: a repeated message sends nothing more.
    assert approval_notice_deliver(decision_id=decision_id).outcome == "skipped"
    assert len(receiver.requests) == 2


def test_it_gives_up_after_the_last_attempt_and_records_it(api, hooked, receiver):
    receiver.answer((500,))
    decision_id = waiting_decision(api, hooked)

    outcomes = [approval_notice_deliver(decision_id=decision_id).outcome for _ in range(4)]

    assert outcomes == ["retry", "retry", "abandoned", "skipped"]
    assert [status for _, status, _ in attempts(decision_id)] == ["failed"] * 3
    assert LedgerEvent.objects.filter(resource_id=decision_id, event_type="approval_notice.abandoned").exists()


def test_it_does_not_retry_a_webhook_the_ssrf_guard_refuses(api, hooked, settings):
    settings.AGP_ALLOW_PRIVATE_URLS = False
    decision_id = waiting_decision(api, hooked)

    outcome = approval_notice_deliver(decision_id=decision_id)

    assert outcome.outcome == "abandoned"
    [(attempt, status, response_status)] = attempts(decision_id)
    assert (attempt, status, response_status) == (1, "failed", None)


def test_recovery_sends_again_a_notice_whose_retry_message_was_lost(api, hooked, receiver):
    receiver.answer((500,), (200,))
    decision_id = waiting_decision(api, hooked)
    approval_notice_deliver(decision_id=decision_id)  # attempt 1 fails; its retry message is then lost
    OutboxMessage.objects.all().delete()
    now = timezone.now()

    too_early = approval_notices_recover(now=now)
    ApprovalNotificationAttempt.objects.update(attempted_at=now - timedelta(minutes=5))
    recovered = approval_notices_recover(now=now)
    nudged_already = approval_notices_recover(now=now)
    approval_notice_deliver(decision_id=decision_id)

    assert (too_early, recovered, nudged_already) == (0, 1, 0)
    assert notices() == [[decision_id]]
    assert attempts(decision_id) == [(1, "failed", 500), (2, "delivered", 200)]
    OutboxMessage.objects.all().delete()
    assert approval_notices_recover(now=now + timedelta(hours=1)) == 0  # delivered: settled


@pytest.mark.postgres
def test_a_worker_delivers_the_notice_after_the_receiver_failed_once(api, worker_db, module_worker, settings,
                                                                       receiver):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    receiver.answer((500,), (200,))
    world = make_world()
    ApprovalWebhook.objects.create(root_principal=world.root_principal, url=receiver.url("/people"))

    decision_id = waiting_decision(api, world)

    wait_for(lambda: len(receiver.requests) == 2, timeout=30, message="two notice attempts", worker=module_worker)
    wait_for(lambda: attempts(decision_id) == [(1, "failed", 500), (2, "delivered", 200)],
             message="two attempt records", worker=module_worker)
    for request in receiver.requests:
        assert webhook_signature_verify(header=request.headers["AGP-Signature"], body=request.body,
                                        secret=django_settings.AGP_CALLBACK_SECRET)
    assert receiver.requests[0].body == receiver.requests[1].body
    assert Decision.objects.get(decision_id=decision_id).status == "draft"  # a notice decides nothing
