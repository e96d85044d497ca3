"""``GET /agp/operations/{id}`` and receipts: read them, and complete an ``external`` operation."""

from decimal import Decimal

import pytest

from agp_project.signing import verify_resource
from auth_tokens.scopes import OPERATION_SCOPES
from decision.models import CommerceSession
from execution.models import ActionEnvelope, Operation, Payment, Receipt
from execution.runner import operation_execute
from registry.models import Task
from tests.execution.factories import make_world
from tests.execution.worker import ledger_event_types, submit_async


def accept(api, world, **overrides):
    return submit_async(api, world.envelope_request(**overrides))


def run(operation_id):
    return operation_execute(operation_id=operation_id, executor="worker-test/pid-1")


def jwks(api):
    return api.get("/.well-known/jwks.json").json()


# --- GET /agp/operations/{id} ------------------------------------------------------------

def test_it_shows_the_operation_as_the_202_did(api, db, django_assert_num_queries):
    world = make_world()
    accepted = accept(api, world, callback_url="https://93.184.216.34/agp-hook")
    operation_id = accepted["operation_id"]
    action_id = Operation.objects.get(operation_id=operation_id).envelope_id

    with django_assert_num_queries(1):
        response = api.get(f"/agp/operations/{operation_id}")

    assert response.status_code == 200
    body = response.json()
    assert body == accepted
    assert set(body) == {"operation_id", "status", "created_at", "updated_at", "status_url", "result_url",
                         "callback_url", "error"}
    assert body["status"] == "pending"
    assert body["status_url"] == f"http://testserver/agp/operations/{operation_id}"
    assert body["result_url"] == f"http://testserver/agp/action-envelopes/{action_id}"
    assert body["callback_url"] == "https://93.184.216.34/agp-hook"
    assert body["error"] is None
    assert body["created_at"].endswith("Z")


def test_it_builds_links_from_the_configured_base_url(api, db, settings):
    settings.AGP_BASE_URL = "https://agp.example.com"
    operation_id = accept(api, make_world())["operation_id"]

    body = api.get(f"/agp/operations/{operation_id}").json()

    assert body["status_url"] == f"https://agp.example.com/agp/operations/{operation_id}"
    assert body["result_url"].startswith("https://agp.example.com/agp/action-envelopes/")
    assert body["callback_url"] is None


def test_it_follows_the_operation_to_its_end(api, db):
    operation_id = accept(api, make_world())["operation_id"]
    run(operation_id)

    body = api.get(f"/agp/operations/{operation_id}").json()

    assert body["status"] == "succeeded" and body["error"] is None
    assert body["updated_at"] > body["created_at"]


def test_it_shows_the_error_body_of_a_failed_operation(api, db):
    world = make_world()
    operation_id = accept(api, world)["operation_id"]
    Task.objects.filter(pk=world.task.pk).update(status="closed")
    run(operation_id)

    body = api.get(f"/agp/operations/{operation_id}").json()

    assert body["status"] == "failed"
    assert body["error"] == {
        "code": "AGP_PREREQUISITE_FAILED",
        "message": "A governance prerequisite no longer holds at execution time; nothing was executed.",
        "retryable": False,
        "details": {"failed_checks": [{"check": "task",
                                       "reason": f"task {world.task.task_id!r} is closed, not open"}]},
    }
    assert Operation.objects.get(operation_id=operation_id).status == "failed"


def test_it_answers_404_for_an_unknown_operation(api, db):
    response = api.get("/agp/operations/op_nope")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "AGP_NOT_FOUND"
    assert not Operation.objects.exists()


@pytest.mark.parametrize("scope", OPERATION_SCOPES)
def test_it_lets_any_execution_or_decision_scope_read_an_operation(api, db, make_token, scope):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token()}")
    operation_id = accept(api, make_world())["operation_id"]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=[scope])}")

    response = api.get(f"/agp/operations/{operation_id}")

    assert response.status_code == 200
    assert response.json()["operation_id"] == operation_id


def test_it_refuses_an_operation_to_a_token_of_another_group(api, db, make_token):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token()}")
    operation_id = accept(api, make_world())["operation_id"]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.registry.read'])}")

    response = api.get(f"/agp/operations/{operation_id}")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "AGP_INSUFFICIENT_SCOPE"
    assert response.json()["error"]["details"]["required_scopes"] == list(OPERATION_SCOPES)
    api.credentials()
    assert api.get(f"/agp/operations/{operation_id}").status_code == 401


def test_it_has_no_operation_collection_or_writes(api, db):
    operation_id = accept(api, make_world())["operation_id"]

    assert api.get("/agp/operations").status_code == 404
    response = api.post(f"/agp/operations/{operation_id}", {}, format="json")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "AGP_METHOD_NOT_ALLOWED"
    assert Operation.objects.get(operation_id=operation_id).status == "pending"



# --- PATCH /agp/operations/{id}: cancel a pending operation --------------------------------

def test_it_cancels_a_pending_operation_releasing_its_budget(api, db):
    world = make_world(action_class="transact")
    operation_id = accept(api, world)["operation_id"]
    action_id = Operation.objects.get(operation_id=operation_id).envelope_id
    assert CommerceSession.objects.get(pk=world.session.pk).reserved_amount == Decimal("50")

    response = api.patch(f"/agp/operations/{operation_id}", {"status": "cancelled"}, format="json")

    assert response.status_code == 200, response.json()
    assert (response.json()["operation_id"], response.json()["status"]) == (operation_id, "cancelled")
    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.status == "cancelled" and operation.completed_at is not None
    assert Payment.objects.get(envelope_id=action_id).status == "released"
    session = CommerceSession.objects.get(pk=world.session.pk)
    assert (session.reserved_amount, session.spent_amount) == (Decimal("0"), Decimal("0"))
    assert ActionEnvelope.objects.get(action_id=action_id).status == "failed"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.cancelled"]
    assert ledger_event_types(action_id)[-1] == "envelope.failed"
    # The worker's message arrives afterwards: it skips the operation, nothing executes.
    assert run(operation_id) == "done"
    assert not Receipt.objects.filter(operation_id=operation_id).exists()
    assert Operation.objects.get(operation_id=operation_id).status == "cancelled"


@pytest.mark.parametrize("ran", [True, False])
def test_it_refuses_to_cancel_an_operation_that_is_not_pending(api, db, ran):
    operation_id = accept(api, make_world(connector="external" if not ran else "noop"))["operation_id"]
    expected = "succeeded" if ran else "awaiting_receipt"
    assert run(operation_id) == expected
    before = Operation.objects.get(operation_id=operation_id).status

    response = api.patch(f"/agp/operations/{operation_id}", {"status": "cancelled"}, format="json")

    assert response.status_code == 409
    error = response.json()["error"]
    assert (error["code"], error["details"]["from"], error["details"]["to"]) == (
        "AGP_INVALID_TRANSITION", before, "cancelled")
    assert Operation.objects.get(operation_id=operation_id).status == before
    assert "operation.cancelled" not in ledger_event_types(operation_id)


@pytest.mark.parametrize("body", [{"status": "failed"}, {"status": "cancelled", "executor": "x"}, {}])
def test_it_refuses_an_operation_patch_other_than_cancelling(api, db, body):
    operation_id = accept(api, make_world())["operation_id"]
    response = api.patch(f"/agp/operations/{operation_id}", body, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "AGP_INVALID_REQUEST"
    assert Operation.objects.get(operation_id=operation_id).status == "pending"


def test_it_answers_404_when_cancelling_an_unknown_operation(api, db):
    response = api.patch("/agp/operations/op-none", {"status": "cancelled"}, format="json")
    assert response.status_code == 404 and response.json()["error"]["code"] == "AGP_NOT_FOUND"
    assert not Operation.objects.exists()


def test_it_needs_the_execution_write_scope_to_cancel(api, db, make_token):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token()}")
    operation_id = accept(api, make_world())["operation_id"]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.decision.write'])}")
    response = api.patch(f"/agp/operations/{operation_id}", {"status": "cancelled"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["details"]["required_scopes"] == ["agp.execution.write"]
    assert Operation.objects.get(operation_id=operation_id).status == "pending"


# --- GET /agp/receipts ------------------------------------------------------------------

def test_it_lists_and_shows_receipts_that_verify_against_the_jwks(api, db, django_assert_num_queries):
    done = [accept(api, make_world())["operation_id"] for _ in range(3)]
    for operation_id in done:
        run(operation_id)
    target = Receipt.objects.get(operation_id=done[1])

    with django_assert_num_queries(1):
        listing = api.get("/agp/receipts")
    assert listing.status_code == 200
    assert [item["operation_id"] for item in listing.json()["items"]] == done[::-1]  # newest first
    one = api.get(f"/agp/receipts/{target.receipt_id}")
    assert one.status_code == 200
    body = one.json()
    assert body == listing.json()["items"][1]
    assert set(body) == {"type", "receipt_id", "action_id", "operation_id", "status", "result", "result_hash",
                         "started_at", "completed_at", "executor", "posted_by", "governance", "created_at",
                         "signature"}
    assert (body["type"], body["status"], body["executor"], body["posted_by"]) == (
        "Receipt", "succeeded", "worker-test/pid-1", "agp-worker")
    assert body["signature"]["alg"] == "EdDSA"
    assert verify_resource(body, jwks(api))
    assert not verify_resource({**body, "result": {"ok": False}}, jwks(api))
    # The why-record is covered by the signature too.
    assert body["governance"]["decision_id"] == Receipt.objects.get(receipt_id=body["receipt_id"]).governance[
        "decision_id"] != ""
    assert not verify_resource({**body, "governance": {**body["governance"], "approvals": []}}, jwks(api))


def test_it_filters_receipts_by_action_operation_and_status(api, db):
    world = make_world()
    good = accept(api, world)["operation_id"]
    bad = accept(api, world)["operation_id"]
    run(good)
    world.skill.connector = "http"
    world.skill.endpoint_url = "http://127.0.0.1:9/"
    world.skill.save()
    run(bad)
    action_id = Operation.objects.get(operation_id=good).envelope_id

    def ids(**params):
        response = api.get("/agp/receipts", params)
        assert response.status_code == 200
        return [item["operation_id"] for item in response.json()["items"]]

    assert ids(action_id=action_id) == [good]
    assert ids(operation_id=bad) == [bad]
    assert ids(status="failed") == [bad]
    assert ids(status="succeeded") == [good]
    unknown = api.get("/agp/receipts", {"agent_id": world.agent_id})
    assert unknown.status_code == 400
    assert "agent_id" in unknown.json()["error"]["details"]["fields"]
    assert api.get("/agp/receipts/rcpt_nope").status_code == 404


# --- POST /agp/receipts (external executors) ---------------------------------------------

@pytest.fixture
def external(api, db):
    """A transact envelope for an ``external`` skill, claimed by a worker and waiting."""
    world = make_world(action_class="transact", connector="external")
    operation_id = accept(api, world)["operation_id"]
    assert run(operation_id) == "awaiting_receipt"
    operation = Operation.objects.get(operation_id=operation_id)
    return world, operation_id, operation.envelope_id


def test_it_completes_an_external_operation_with_the_executors_receipt(api, external):
    world, operation_id, action_id = external
    body = {"type": "Receipt", "receipt_id": "rcpt-ext-1", "action_id": action_id, "operation_id": operation_id,
            "status": "succeeded", "result": {"ticket": "CRM-42"}, "executor": "acme-robot-7"}

    response = api.post("/agp/receipts", body, format="json")

    assert response.status_code == 201, response.content
    assert response["Location"] == "http://testserver/agp/receipts/rcpt-ext-1"
    receipt = response.json()
    assert receipt["receipt_id"] == "rcpt-ext-1"
    assert (receipt["status"], receipt["executor"], receipt["result"]) == ("succeeded", "acme-robot-7",
                                                                           {"ticket": "CRM-42"})
    assert verify_resource(receipt, jwks(api))
    assert api.get(f"/agp/operations/{operation_id}").json()["status"] == "succeeded"
    assert Payment.objects.get(envelope_id=action_id).status == "committed"
    session = CommerceSession.objects.get(session_id=world.session.session_id)
    assert (session.spent_amount, session.reserved_amount) == (Decimal("50"), Decimal("0"))
    assert ActionEnvelope.objects.get(action_id=action_id).status == "executed"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.running", "operation.succeeded"]
    assert ledger_event_types("rcpt-ext-1") == ["receipt.issued"]

    again = api.post("/agp/receipts", {**body, "receipt_id": "rcpt-ext-2"}, format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "AGP_INVALID_TRANSITION"
    assert again.json()["error"]["details"]["from"] == "succeeded"
    assert Receipt.objects.filter(operation_id=operation_id).count() == 1


def test_it_fails_an_external_operation_on_a_failed_receipt(api, external):
    world, operation_id, action_id = external

    response = api.post("/agp/receipts", {"action_id": action_id, "operation_id": operation_id,
                                          "status": "failed", "result": {"reason": "card declined"}}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["executor"] == "anonymous"  # the client, when it does not name an executor
    operation = api.get(f"/agp/operations/{operation_id}").json()
    assert operation["status"] == "failed"
    assert operation["error"]["code"] == "AGP_EXECUTION_FAILED"
    assert operation["error"]["details"]["result"] == {"reason": "card declined"}
    assert Payment.objects.get(envelope_id=action_id).status == "released"
    session = CommerceSession.objects.get(session_id=world.session.session_id)
    assert (session.spent_amount, session.reserved_amount) == (Decimal("0"), Decimal("0"))


@pytest.mark.parametrize("change, field", [
    ({"operation_id": "op_unknown"}, "operation_id"),
    ({"action_id": "act_other"}, "action_id"),
    ({"result_hash": "sha256:00"}, "result_hash"),
    ({"signature": {}}, "signature"),
    ({"status": "running"}, "status"),
    ({"colour": "blue"}, "colour"),
    ({"started_at": "2026-01-02T00:00:00Z", "completed_at": "2026-01-01T00:00:00Z"}, "completed_at"),
])
def test_it_refuses_a_malformed_receipt(api, external, change, field):
    _, operation_id, action_id = external
    body = {"action_id": action_id, "operation_id": operation_id, "status": "succeeded", **change}

    response = api.post("/agp/receipts", body, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "AGP_INVALID_REQUEST"
    assert field in response.json()["error"]["details"]["fields"]
    assert Operation.objects.get(operation_id=operation_id).status == "running"
    assert not Receipt.objects.exists()


def test_it_refuses_a_receipt_for_an_operation_a_worker_runs(api, db):
    operation_id = accept(api, make_world())["operation_id"]
    action_id = Operation.objects.get(operation_id=operation_id).envelope_id

    response = api.post("/agp/receipts", {"action_id": action_id, "operation_id": operation_id,
                                          "status": "succeeded"}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "AGP_INVALID_TRANSITION"
    assert response.json()["error"]["details"] == {"from": "pending", "to": "succeeded", "allowed": []}
    assert Operation.objects.get(operation_id=operation_id).status == "pending"
    assert not Receipt.objects.exists()


def test_it_refuses_a_duplicate_receipt_id(api, external):
    _, operation_id, action_id = external
    other = accept(api, make_world())["operation_id"]
    run(other)
    taken = Receipt.objects.get(operation_id=other).receipt_id

    response = api.post("/agp/receipts", {"receipt_id": taken, "action_id": action_id,
                                          "operation_id": operation_id, "status": "succeeded"}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "AGP_CONFLICT"
    assert Operation.objects.get(operation_id=operation_id).status == "running"


def test_it_needs_the_execution_write_scope_to_post_a_receipt(api, db, make_token):
    world = make_world(action_class="transact", connector="external", executor_client_id="test-client")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(client_id='submitter')}")
    operation_id = accept(api, world)["operation_id"]
    assert run(operation_id) == "awaiting_receipt"
    action_id = Operation.objects.get(operation_id=operation_id).envelope_id
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.execution.read'])}")
    body = {"action_id": action_id, "operation_id": operation_id, "status": "succeeded"}

    refused = api.post("/agp/receipts", body, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["required_scopes"] == ["agp.execution.write"]
    assert Operation.objects.get(operation_id=operation_id).status == "running"

    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.execution.write'])}")
    accepted = api.post("/agp/receipts", body, format="json")
    assert accepted.status_code == 201
    assert accepted.json()["executor"] == "test-client"


def test_only_the_bound_executor_may_post_an_external_receipt(api, db, make_token):
    def as_client(client_id):
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(client_id=client_id)}")

    def awaiting_receipt(world):
        as_client("submitter")
        operation_id = accept(api, world)["operation_id"]
        assert run(operation_id) == "awaiting_receipt"
        return operation_id, Operation.objects.get(operation_id=operation_id).envelope_id

    # No executor named on the skill: the client that submitted the envelope.
    operation_id, action_id = awaiting_receipt(make_world(connector="external"))
    body = {"action_id": action_id, "operation_id": operation_id, "status": "succeeded",
            "result": {"made": "up"}, "executor": "the-real-tool"}
    as_client("intruder")
    forged = api.post("/agp/receipts", body, format="json")
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "AGP_FORBIDDEN"
    assert Operation.objects.get(operation_id=operation_id).status == "running"
    assert not Receipt.objects.filter(operation_id=operation_id).exists()
    as_client("submitter")
    genuine = api.post("/agp/receipts", {**body, "result": {"ticket": 7}}, format="json")
    assert genuine.status_code == 201, genuine.content
    assert (genuine.json()["posted_by"], genuine.json()["executor"]) == ("submitter", "the-real-tool")
    assert verify_resource(genuine.json(), jwks(api))
    assert Receipt.objects.get(operation_id=operation_id).posted_by == "submitter"

    # The skill names its executor: only that client, not even the submitter.
    operation_id, action_id = awaiting_receipt(make_world(connector="external", executor_client_id="robot"))
    body = {"action_id": action_id, "operation_id": operation_id, "status": "succeeded"}
    refused = api.post("/agp/receipts", body, format="json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "AGP_FORBIDDEN"
    as_client("robot")
    assert api.post("/agp/receipts", body, format="json").status_code == 201
    assert Receipt.objects.get(operation_id=operation_id).posted_by == "robot"
