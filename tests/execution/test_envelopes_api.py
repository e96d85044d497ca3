"""POST /agp/action-envelopes (docs/reference/execution.md): Prefer, the two success shapes, strict parsing, 409, 503."""

from decimal import Decimal

import pytest
from django.db import connection
from rest_framework.test import APIClient

from agp_project.canonical import content_hash
from agp_project.http.prefer import parse_prefer
from agp_project.signing import verify_resource
from core.models import LedgerEvent, OutboxMessage
from decision.models import CommerceSession
from execution.models import ActionEnvelope, Operation, Payment
from registry.models import Task
from tests.execution.factories import make_full_world, make_world

pytestmark = pytest.mark.django_db

URL = "/agp/action-envelopes"
READ_ONLY = ["parameters_hash", "allowed_parameter_ranges", "approval_ref", "commerce_session_ref", "payment_ref",
             "governance_attestations", "signature"]


@pytest.fixture
def jwks(api):
    return api.get("/.well-known/jwks.json").json()


def _nothing_stored(world=None):
    assert ActionEnvelope.objects.count() == 0
    assert Operation.objects.count() == 0
    assert Payment.objects.count() == 0
    assert OutboxMessage.objects.count() == 0
    if world is not None and world.session is not None:
        session = CommerceSession.objects.get(pk=world.session.pk)
        assert (session.reserved_amount, session.spent_amount) == (Decimal("0"), Decimal("0"))


def _events(event_type, resource_id):
    return list(LedgerEvent.objects.filter(event_type=event_type, resource_id=resource_id))


# --- Prefer parsing (RFC 7240) ------------------------------------------------------------------------------
@pytest.mark.parametrize("header, expected", [
    ("", {}),
    ("respond-async", {"respond-async": None}),
    ("Respond-Async, wait=10", {"respond-async": None, "wait": "10"}),
    ("return=representation; foo=\"a,b;c\", respond-async", {"return": "representation", "respond-async": None}),
    ("RETURN=Minimal, return=representation", {"return": "minimal"}),
    (" , handling=strict ,, respond-async ; x", {"handling": "strict", "respond-async": None}),
    ('return="representation"', {"return": "representation"}),
])
def test_it_parses_prefer_headers(header, expected):
    assert parse_prefer(header) == expected


# --- validate only ------------------------------------------------------------------------------------------
def test_it_validates_only_without_prefer_and_returns_the_signed_envelope(api, jwks):
    world = make_full_world()
    body = world.envelope_request()

    response = api.post(URL, body, format="json")

    assert response.status_code == 200, response.json()
    assert response["Vary"] == "Prefer"
    assert not response.has_header("Preference-Applied")
    envelope = response.json()
    assert envelope["type"] == "ActionEnvelope"
    assert envelope["action_id"] == body["action_id"]
    assert envelope["parameters_hash"] == content_hash(body["parameters"])
    assert envelope["allowed_parameter_ranges"] == world.capability.allowed_parameter_ranges
    assert envelope["approval_ref"] == world.approval.approval_id
    assert envelope["commerce_session_ref"] == world.session.session_id
    assert envelope["payment_ref"] is None
    assert envelope["created_at"] == body["created_at"]
    [attestation] = envelope["governance_attestations"]
    assert attestation["agent_role"] == "executive" and attestation["verdict"] == "cleared"
    assert attestation["agent_id"] == envelope["signature"]["issuer"]
    assert attestation["conditions"] == ["log every call"]
    assert verify_resource(attestation, jwks)
    assert verify_resource(envelope, jwks)
    assert not verify_resource({**envelope, "tool_id": "other"}, jwks)
    _nothing_stored(world)
    [event] = _events("envelope.validated", body["action_id"])
    assert event.payload["verdict"] == "cleared"
    assert event.payload["signature_payload_hash"] == envelope["signature"]["payload_hash"]


def test_it_applies_return_representation_and_ignores_unsupported_preferences(api):
    world = make_world()
    response = api.post(URL, world.envelope_request(), format="json", HTTP_PREFER="return=representation")
    assert response.status_code == 200
    assert response["Preference-Applied"] == "return=representation"

    response = api.post(URL, world.envelope_request(), format="json", HTTP_PREFER="handling=strict, wait=3")
    assert response.status_code == 200
    assert not response.has_header("Preference-Applied")
    assert response["Vary"] == "Prefer"
    _nothing_stored()


def test_it_fills_action_id_and_created_at_when_omitted(api):
    world = make_world()
    response = api.post(URL, world.envelope_request(action_id=None, created_at=None), format="json")
    assert response.status_code == 200
    assert response.json()["action_id"].startswith("act_")
    assert response.json()["created_at"].endswith("Z")


# --- respond-async ------------------------------------------------------------------------------------------
def test_it_accepts_with_respond_async_and_answers_202_with_the_operation(api, jwks):
    world = make_full_world()
    body = world.envelope_request(callback_url="https://93.184.215.14/agp")

    response = api.post(URL, body, format="json", HTTP_PREFER="wait=5, Respond-Async; foo=bar")

    assert response.status_code == 202, response.json()
    operation = response.json()
    assert operation["status"] == "pending"
    assert operation["error"] is None
    assert operation["callback_url"] == "https://93.184.215.14/agp"
    status_url = f"http://testserver/agp/operations/{operation['operation_id']}"
    assert operation["status_url"] == status_url
    assert operation["result_url"] == f"http://testserver/agp/action-envelopes/{body['action_id']}"
    assert response["Location"] == status_url
    assert response["Operation-Location"] == status_url
    assert response["Preference-Applied"] == "respond-async"
    assert response["Retry-After"] == "1"
    assert response["Vary"] == "Prefer"

    envelope = ActionEnvelope.objects.get(action_id=body["action_id"])
    stored_inputs = dict(envelope.inputs)
    assert stored_inputs.pop("parameters") == body["parameters"]
    assert stored_inputs["created_at"] == body["created_at"]
    assert stored_inputs["callback_url"] == body["callback_url"]
    assert [item["check"] for item in envelope.checks if item["passed"]] == [item["check"] for item in envelope.checks]
    assert len(envelope.checks) == 11
    assert envelope.submitted_by == "anonymous"
    row = Operation.objects.get(operation_id=operation["operation_id"])
    assert row.status == "pending" and row.envelope_id == body["action_id"]
    [message] = OutboxMessage.objects.all()
    assert (message.task_name, message.args) == ("agp.execute_operation", [operation["operation_id"]])
    payment = Payment.objects.get(envelope_id=body["action_id"])
    assert (payment.status, payment.amount, payment.session_id) == ("reserved", Decimal("50"), world.session.session_id)
    assert envelope.payment_ref == payment.payment_id
    world.refresh()
    assert (world.session.reserved_amount, world.session.spent_amount) == (Decimal("50"), Decimal("0"))
    for event_type, resource_id in (("envelope.accepted", body["action_id"]),
                                    ("operation.created", operation["operation_id"]),
                                    ("payment.reserved", payment.payment_id)):
        assert len(_events(event_type, resource_id)) == 1

    # The stored envelope behind result_url is the signed one.
    stored = api.get(operation["result_url"].removeprefix("http://testserver")).json()
    assert stored["payment_ref"] == payment.payment_id
    assert verify_resource(stored, jwks)


def test_it_accepts_a_read_without_any_payment(api):
    world = make_world()
    body = world.envelope_request()
    response = api.post(URL, body, format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 202
    envelope = ActionEnvelope.objects.get(action_id=body["action_id"])
    assert envelope.payment_ref == "" and envelope.commerce_session_ref == ""
    assert Payment.objects.count() == 0
    assert api.get(f"{URL}/{body['action_id']}").json()["payment_ref"] is None


def test_it_refuses_a_second_execution_of_the_same_action(api):
    world = make_full_world()
    body = world.envelope_request()
    assert api.post(URL, body, format="json", HTTP_PREFER="respond-async").status_code == 202

    again = api.post(URL, body, format="json", HTTP_PREFER="respond-async")
    validate = api.post(URL, body, format="json")

    for response in (again, validate):
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "AGP_CONFLICT"
        assert response["Vary"] == "Prefer"
    assert Operation.objects.count() == 1 and Payment.objects.count() == 1
    world.refresh()
    assert world.session.reserved_amount == Decimal("50")


def test_it_refuses_a_duplicate_before_any_check_and_records_nothing_for_it(api):
    world = make_full_world()
    body = world.envelope_request()
    assert api.post(URL, body, format="json", HTTP_PREFER="respond-async").status_code == 202
    events = LedgerEvent.objects.count()

    # The same action_id with a body whose checks would fail (no such task): 409, not 422.
    failing = dict(body, task_id="task-missing")
    for prefer in ({}, {"HTTP_PREFER": "respond-async"}):
        response = api.post(URL, failing, format="json", **prefer)
        assert response.status_code == 409, response.content
        error = response.json()["error"]
        assert error["code"] == "AGP_CONFLICT" and body["action_id"] in error["message"]
    assert LedgerEvent.objects.count() == events
    assert _events("envelope.rejected", body["action_id"]) == []
    assert ActionEnvelope.objects.filter(action_id=body["action_id"]).count() == 1


def test_a_validation_reads_the_checks_state_and_writes_only_its_event(api, django_assert_num_queries, query_counts):
    from tests.execution.test_check_queries import READ

    world = make_world()
    body = world.envelope_request()
    # The checks (the first query looks for an envelope with this action_id), then the
    # envelope.validated event, in the test's transaction: one statement on PostgreSQL,
    # three elsewhere.
    appended = 1 if connection.vendor == "postgresql" else 3
    with django_assert_num_queries(query_counts.expected(READ) + 1 + appended):
        response = api.post(URL, body, format="json")
    assert response.status_code == 200, response.content
    assert [e.event_type for e in LedgerEvent.objects.filter(resource_id=body["action_id"])] == [
        "envelope.validated"]
    assert not ActionEnvelope.objects.filter(action_id=body["action_id"]).exists()


# --- strict parsing -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", READ_ONLY)
def test_it_refuses_response_only_fields_in_a_request(api, field):
    world = make_world()
    body = world.envelope_request(**{field: {} if field in ("allowed_parameter_ranges", "signature") else
                                     [] if field == "governance_attestations" else "x"})
    response = api.post(URL, body, format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "AGP_INVALID_REQUEST"
    assert list(response.json()["error"]["details"]["fields"]) == [field]
    _nothing_stored()


@pytest.mark.parametrize("change, field", [
    ({"paramters": {}}, "paramters"),
    ({"type": "Decision"}, "type"),
    ({"task_id": None}, "task_id"),
    ({"parameters": [1, 2]}, "parameters"),
    ({"parameters": {"n": 2 ** 60}}, "parameters"),
    ({"created_at": "yesterday"}, "created_at"),
    ({"callback_url": "ftp://example.com/x"}, "callback_url"),
    ({"callback_url": "http://127.0.0.1:8080/hook"}, "callback_url"),
    ({"callback_url": "http://169.254.169.254/latest/meta-data"}, "callback_url"),
    ({"callback_url": "http://[::1]/hook"}, "callback_url"),
    ({"action_id": "bad id!"}, "action_id"),
])
def test_it_refuses_malformed_requests(api, change, field):
    world = make_world()
    response = api.post(URL, world.envelope_request(**change), format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["details"]["fields"]
    assert response["Vary"] == "Prefer"
    assert not LedgerEvent.objects.filter(event_type__startswith="envelope.").exists()


# --- rejection is recorded, even inside the idempotency transaction ----------------------------------------
def test_it_commits_the_rejection_event_and_replays_the_422_for_the_same_key(authed_api):
    world = make_full_world()
    body = world.envelope_request()
    Task.objects.filter(pk=world.task.pk).update(status="closed")

    first = authed_api.post(URL, body, format="json", HTTP_PREFER="respond-async", HTTP_IDEMPOTENCY_KEY="k-1")
    second = authed_api.post(URL, body, format="json", HTTP_PREFER="respond-async", HTTP_IDEMPOTENCY_KEY="k-1")

    assert first.status_code == second.status_code == 422
    assert second["Idempotent-Replayed"] == "true"
    assert second.content == first.content
    [event] = _events("envelope.rejected", body["action_id"])
    assert event.actor == "test-client"
    assert event.payload["failed_checks"] == first.json()["error"]["details"]["failed_checks"]
    _nothing_stored(world)



def test_it_refuses_an_envelope_for_a_task_closed_through_the_api(authed_api):
    world = make_full_world()
    body = world.envelope_request()
    closed = authed_api.patch(f"/agp/tasks/{world.task.task_id}", {"status": "closed"}, format="json")
    assert closed.status_code == 200 and closed.json()["status"] == "closed"

    response = authed_api.post(URL, body, format="json", HTTP_PREFER="respond-async")

    assert response.status_code == 422
    assert {"check": "task", "reason": f"task {world.task.task_id!r} is closed, not open"} in \
        response.json()["error"]["details"]["failed_checks"]
    _nothing_stored(world)


# --- the broker -------------------------------------------------------------------------------------------
# transaction=True: the error handler marks the (test's) transaction for rollback on a 5xx.
@pytest.mark.django_db(transaction=True)
def test_it_answers_503_and_stores_nothing_when_the_broker_is_unreachable(api, broker_at):
    world = make_full_world()
    body = world.envelope_request()
    broker_at("redis://127.0.0.1:1/3")

    response = api.post(URL, body, format="json", HTTP_PREFER="respond-async")

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "AGP_UNAVAILABLE"
    assert response.json()["error"]["retryable"] is True
    assert response["Retry-After"] == "5"
    _nothing_stored(world)
    assert not LedgerEvent.objects.filter(resource_id=body["action_id"]).exists()


def test_it_accepts_when_the_redis_broker_answers(api, broker_at, redis_url):
    world = make_world()
    broker_at(redis_url)
    response = api.post(URL, world.envelope_request(), format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 202
    assert Operation.objects.count() == 1


def test_it_validates_without_asking_the_broker(api, broker_at):
    world = make_world()
    broker_at("redis://127.0.0.1:1/3")
    assert api.post(URL, world.envelope_request(), format="json").status_code == 200


# --- scopes and reads ---------------------------------------------------------------------------------------
def test_it_needs_the_execution_write_scope_to_submit(make_token):
    world = make_world()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.execution.read'])}")
    response = client.post(URL, world.envelope_request(), format="json")
    assert response.status_code == 403
    assert response.json()["error"]["details"]["required_scopes"] == ["agp.execution.write"]
    assert not LedgerEvent.objects.filter(event_type__startswith="envelope.").exists()


def test_it_lists_and_reads_accepted_envelopes(api):
    world, other = make_world(), make_world()
    bodies = [world.envelope_request(), world.envelope_request(), other.envelope_request()]
    for body in bodies:
        assert api.post(URL, body, format="json", HTTP_PREFER="respond-async").status_code == 202

    listed = api.get(URL, {"task_id": world.task.task_id})
    assert listed.status_code == 200
    assert [item["action_id"] for item in listed.json()["items"]] == [bodies[1]["action_id"], bodies[0]["action_id"]]
    assert api.get(f"{URL}/no-such-action").status_code == 404
    assert api.get(URL, {"colour": "red"}).status_code == 400
