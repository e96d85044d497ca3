"""The client library against a live gunicorn server (authentication on, 2 s tokens)."""

import json
import threading
import time
import uuid
from datetime import timedelta

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import agp_client
from agp_client import AGPClient, AuthenticationError, NotFoundError, ScopeError, ValidationError
from agp_project.signing import Signer

from .conftest import CLIENT_ID, CLIENT_SECRET
from .server import FaultProxy

pytestmark = pytest.mark.usefixtures("live_db")


def make_client(url: str, **kwargs) -> AGPClient:
    kwargs.setdefault("backoff", 0.1)
    return AGPClient(url, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, **kwargs)


def assert_attempts(posts, *, first) -> None:
    """Attempts of one client call as the proxy saw them: the faulted first one, the final
    201, all with one Idempotency-Key. Between them there may be a 401: on a loaded machine
    a 2 s token can expire on the server between the client's check and the request's
    arrival, and the client then fetches a new token and sends again."""
    statuses = [r.upstream_status for r in posts]
    assert statuses[0] == first and statuses[-1] == 201 and set(statuses[1:-1]) <= {401}, statuses
    assert len(posts) <= 3
    keys = {r.headers["idempotency-key"] for r in posts}
    assert len(keys) == 1 and len(next(iter(keys))) == 36


def events_for(client: AGPClient, resource_id: str) -> list[dict]:
    return list(client.ledger_events.list(resource_id=resource_id))


def test_it_refreshes_a_two_second_token_transparently_across_a_five_second_run(live_agp):
    run = uuid.uuid4().hex[:8]
    with make_client(live_agp.url) as client:
        first_token = client.auth.token()
        calls = posts = 0
        started = time.monotonic()
        while time.monotonic() - started < 5.0:
            page = client.ledger_events.page(limit=5)
            assert isinstance(page["items"], list)
            event = client.ledger_events.create(event_type="client.tick", resource_type="Tick",
                                                resource_id=f"tick-{run}", payload={"n": posts})
            assert event["actor"] == CLIENT_ID
            calls, posts = calls + 2, posts + 1
            time.sleep(0.1)
        # However slow the machine, the calls spanned more than two token lifetimes.
        assert posts >= 3
        assert client.auth.fetches >= 2  # about one per 1.5 s: refreshed before expiry
        assert [e["payload"]["n"] for e in events_for(client, f"tick-{run}")] == list(range(posts))[::-1]
    # The first token really expired on the server: the client's refreshes were needed.
    expired = requests.get(f"{live_agp.url}/agp/ledger-events", headers={"Authorization": f"Bearer {first_token}"},
                           timeout=10)
    assert expired.status_code == 401
    assert expired.json()["error"]["code"] == "AGP_UNAUTHENTICATED"


def test_it_fetches_a_new_token_once_when_the_server_answers_401(live_agp):
    # A negative refresh skew: the client keeps its token an hour past its expiry, as one
    # whose clock lags the server's would; only the server's 401 tells it otherwise.
    with make_client(live_agp.url, token_refresh_skew=-3600) as client:
        client.ledger_events.page(limit=1)
        stale = client.auth.token()
        time.sleep(3.1)  # past the 2 s lifetime on the server's clock (exp has 1 s resolution)
        assert client.ledger_events.page(limit=1)["items"] is not None
        assert client.auth.fetches == 2
        assert client.auth.token() != stale


def test_it_does_not_execute_a_post_twice_when_the_response_is_dropped(live_agp):
    resource_id = f"once-{uuid.uuid4().hex[:8]}"
    proxy = FaultProxy(upstream_port=int(live_agp.url.rsplit(":", 1)[1]), mode="drop_response",
                       match=b"POST /agp/ledger-events")
    try:
        with make_client(proxy.url) as client:
            event = client.ledger_events.create(event_type="client.once", resource_type="Once",
                                                resource_id=resource_id)
            posts = [r for r in proxy.seen if r.method == "POST" and r.path == "/agp/ledger-events"]
            # The first attempt was executed by the server (201) but its answer was dropped; the
            # retry carried the same key and got the stored response back.
            assert_attempts(posts, first=201)
            assert event["resource_id"] == resource_id
            stored = events_for(client, resource_id)
            assert len(stored) == 1
            assert stored[0]["sequence"] == event["sequence"]
    finally:
        proxy.close()


def test_it_would_execute_twice_without_an_idempotency_key(live_agp):
    # The control experiment: the same dropped response, retried by hand without a key.
    resource_id = f"twice-{uuid.uuid4().hex[:8]}"
    proxy = FaultProxy(upstream_port=int(live_agp.url.rsplit(":", 1)[1]), mode="drop_response",
                       match=b"POST /agp/ledger-events")
    try:
        with make_client(live_agp.url) as client:
            headers = {"Authorization": f"Bearer {client.auth.token()}"}
            body = {"event_type": "client.twice", "resource_type": "Twice", "resource_id": resource_id}
            with pytest.raises(requests.ConnectionError):
                requests.post(f"{proxy.url}/agp/ledger-events", json=body, headers=headers, timeout=10)
            assert requests.post(f"{proxy.url}/agp/ledger-events", json=body, headers=headers,
                                 timeout=10).status_code == 201
            assert len(events_for(client, resource_id)) == 2
    finally:
        proxy.close()


@pytest.mark.parametrize("status,code", [(503, "AGP_UNAVAILABLE"), (429, "AGP_RATE_LIMITED")])
def test_it_retries_after_the_servers_retry_after(live_agp, status, code):
    body = json.dumps({"error": {"code": code, "message": "busy", "retryable": True, "details": {}}}).encode()
    canned = (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
              f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    resource_id = f"busy-{uuid.uuid4().hex[:8]}"
    proxy = FaultProxy(upstream_port=int(live_agp.url.rsplit(":", 1)[1]), mode="status",
                       match=b"POST /agp/ledger-events", canned=canned)
    try:
        with make_client(proxy.url) as client:
            started = time.monotonic()
            client.ledger_events.create(event_type="client.busy", resource_type="Busy", resource_id=resource_id)
            assert time.monotonic() - started >= 1.0
            posts = [r for r in proxy.seen if r.method == "POST" and r.path == "/agp/ledger-events"]
            assert_attempts(posts, first=None)
            assert len(events_for(client, resource_id)) == 1
    finally:
        proxy.close()


def test_it_shares_one_token_fetch_between_threads(live_agp):
    with make_client(live_agp.url) as client:
        barrier = threading.Barrier(8)
        results, failures = [], []

        def call():
            barrier.wait()
            try:
                results.append(client.ledger_events.page(limit=1))
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                failures.append(exc)

        threads = [threading.Thread(target=call) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(results) == 8
        assert client.auth.fetches == 1


def test_it_raises_typed_errors_carrying_the_agp_body(live_agp):
    with make_client(live_agp.url) as client:
        with pytest.raises(NotFoundError) as missing:
            client.ledger_events.get(987654321)
        assert (missing.value.status, missing.value.code, missing.value.retryable) == (404, "AGP_NOT_FOUND", False)
        assert missing.value.body["error"]["code"] == "AGP_NOT_FOUND"

        with pytest.raises(ValidationError) as invalid:
            client.ledger_events.create(event_type="client.x", resource_type="X", resource_id="x", extra=1)
        assert invalid.value.status == 400
        assert invalid.value.fields == {"extra": ["Unknown field."]}
        with pytest.raises(ValidationError) as forged:
            client.ledger_events.create(event_type="delegation.created", resource_type="X", resource_id="x")
        assert set(forged.value.fields) == {"event_type"}

        with pytest.raises(ValidationError):
            list(client.ledger_events.list(no_such_filter="x"))
        assert events_for(client, "x") == []

    with make_client(live_agp.url, scope="agp.execution.read") as reader:
        assert reader.auth.token() and reader.auth.granted_scope == "agp.execution.read"
        with pytest.raises(ScopeError) as refused:
            reader.ledger_events.create(event_type="client.x", resource_type="X", resource_id="scoped")
        assert refused.value.status == 403
        assert refused.value.required_scopes == ["agp.execution.write"]
        assert events_for(reader, "scoped") == []

    with AGPClient(live_agp.url, client_id=CLIENT_ID, client_secret="wrong", backoff=0.1) as wrong:
        with pytest.raises(AuthenticationError) as denied:
            wrong.ledger_events.page()
        assert (denied.value.status, denied.value.code) == (401, "invalid_client")

    with AGPClient(live_agp.url) as anonymous:  # no credentials: no token sent
        with pytest.raises(AuthenticationError) as unauthenticated:
            anonymous.ledger_events.page()
        assert unauthenticated.value.code == "AGP_UNAUTHENTICATED"


def test_it_pages_through_a_collection_and_verifies_the_ledger(live_agp):
    resource_id = f"paged-{uuid.uuid4().hex[:8]}"
    with make_client(live_agp.url) as client:
        created = [client.ledger_events.create(event_type="client.page", resource_type="Paged",
                                               resource_id=resource_id)["sequence"] for _ in range(5)]
        listed = [e["sequence"] for e in client.ledger_events.list(resource_id=resource_id, page_size=2)]
        assert listed == created[::-1]
        # limit: at most that many in all, as the API's own limit names the page's size.
        assert [e["sequence"] for e in client.ledger_events.list(resource_id=resource_id, limit=3)] == created[:1:-1]
        assert len(list(client.ledger_events.list(resource_id=resource_id, limit=3, page_size=2))) == 3

        assert client.ledger_events.get(created[0])["resource_id"] == resource_id
        verification = client.ledger_events.verify()
        assert verification["verified"] is True
        assert verification["events"] >= 5


def test_it_verifies_signatures_with_the_servers_published_key(live_agp):
    # Sign with the key the live server generated and publishes at /.well-known/jwks.json.
    signer = Signer(live_agp.signing_key, "agp")
    resource = {"type": "Receipt", "receipt_id": "rcpt-1", "status": "succeeded", "amount": 12.5,
                "notes": "naïve – ünïcode", "nested": {"b": [1, 2.0, None], "a": True}}
    resource["signature"] = signer.sign(resource)
    with AGPClient(live_agp.url) as client:
        assert client.jwks()["keys"][0]["kid"] == signer.kid
        assert client.verify_signature(resource) is True
        assert client.verify_signature({**resource, "status": "failed"}) is False
        assert client.verify_signature({**resource, "signature": {**resource["signature"], "kid": "other"}}) is False


def test_it_closes_a_task(live_agp):
    with make_client(live_agp.url) as client:
        task = client.tasks.create(root_principal="acme", agent_id="agent-1", risk_level="low", action_class="read")
        closed = client.tasks.close(task["task_id"])
        assert (closed["task_id"], closed["status"]) == (task["task_id"], "closed")
        assert client.tasks.get(task["task_id"])["status"] == "closed"
        assert [e["event_type"] for e in events_for(client, task["task_id"])] == ["task.closed", "task.created"]
        with pytest.raises(agp_client.InvalidTransitionError) as again:
            client.tasks.close(task["task_id"])
        assert (again.value.status, again.value.code) == (409, "AGP_INVALID_TRANSITION")


# --- verify_signatures=True: every signed resource received is verified (docs/reference/governance.md) ----------------------
def canned_json(body: dict) -> bytes:
    data = agp_client.numbers.dumps(body).encode()
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            f"Connection: close\r\n\r\n").encode() + data


def later(**delta) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + timedelta(**delta).total_seconds()))


def governed_records(client: AGPClient) -> dict:
    """A delegation chain, a task, a decision, its impact assessment and approval, made through ``client``."""
    run = uuid.uuid4().hex[:8]
    principal, orchestrator, agent = f"acme-{run}", f"orchestrator-{run}", f"agent-{run}"
    root = client.delegations.create(root_principal=principal, delegator_agent=principal,
                                     delegate_agent=orchestrator, authority_scope=["payments:*"],
                                     expires_at=later(days=1))
    link = client.delegations.create(root_principal=principal, delegator_agent=orchestrator, delegate_agent=agent,
                                     authority_scope=["payments:refund"])
    task = client.tasks.create(root_principal=principal, agent_id=agent, risk_level="high", action_class="transact")
    decision = client.decisions.create(task_id=task["task_id"], agent_id=agent, outcome="approve", rationale="r")
    assessment = client.impact_assessments.create(
        task_id=task["task_id"], decision_ref=decision["decision_id"], agent_id="assessor", recommendation="proceed",
        time_horizons=[{"horizon": "immediate", "severity": "minor"}])
    approval = client.approvals.create(decision_ref=decision["decision_id"], approver="human:carol",
                                       verdict="approved", expires_at=later(hours=1))
    return {"principal": principal, "root": root, "link": link, "assessment": assessment, "approval": approval}


def test_a_verifying_client_checks_every_signed_resource_it_receives_delegation_links_included(live_agp):
    with make_client(live_agp.url, verify_signatures=True) as client:
        # Every create answered a signed resource, which was verified before it returned.
        records = governed_records(client)
        link = records["link"]
        assert len(link["signature_chain"]) == 2
        assert client.delegations.get(link["delegation_id"]) == link
        assert [item["delegation_id"] for item in client.delegations.list(root_principal=records["principal"])] == [
            link["delegation_id"], records["root"]["delegation_id"]]
        assert client.impact_assessments.get(records["assessment"]["assessment_id"]) == records["assessment"]
        assert client.approvals.get(records["approval"]["approval_id"]) == records["approval"]
        for name in ("root", "link", "assessment", "approval"):
            assert client.verify_signature(records[name]) is True, name
        assert client.verify_signature({**link, "authority_scope": ["payments:*"]}) is False


def test_a_verifying_client_raises_on_a_tampered_link_and_on_a_foreign_key(live_agp):
    with make_client(live_agp.url) as client:
        link = governed_records(client)["link"]
    widened = {**link, "authority_scope": ["payments:*"]}
    path = f"/agp/delegations/{link['delegation_id']}"
    proxy = FaultProxy(upstream_port=int(live_agp.url.rsplit(":", 1)[1]), mode="status",
                       match=f"GET {path} ".encode(), canned=canned_json(widened), faults=2)
    try:
        with make_client(proxy.url, verify_signatures=True) as verifying:
            with pytest.raises(agp_client.SignatureError) as refused:
                verifying.delegations.get(link["delegation_id"])
        problem = "its content is not what was signed (a field was changed: payload_hash does not match)"
        assert refused.value.problems == [f"delegation {link['delegation_id']}: {problem}"]
        assert str(refused.value) == f"GET {path}: a signed record does not verify: {refused.value.problems[0]}"
        assert refused.value.body == widened and refused.value.status == 200
        # Without the option the same answer is returned as received; checking it says what is wrong.
        with make_client(proxy.url) as trusting:
            received = trusting.delegations.get(link["delegation_id"])
            assert received == widened
            assert agp_client.signature_problem(received, trusting.jwks()) == problem
    finally:
        proxy.close()

    # Signed, but by a key the service does not publish: refused after one refresh of the JWKS.
    stranger = Signer(Ed25519PrivateKey.generate(), "agp")
    forged = {"type": "Approval", "approval_id": "apr-forged", "verdict": "approved"}
    forged["signature"] = stranger.sign(forged)
    proxy = FaultProxy(upstream_port=int(live_agp.url.rsplit(":", 1)[1]), mode="status",
                       match=b"GET /agp/approvals/apr-forged ", canned=canned_json(forged))
    try:
        with make_client(proxy.url, verify_signatures=True) as verifying:
            with pytest.raises(agp_client.SignatureError) as foreign:
                verifying.approvals.get("apr-forged")
        assert foreign.value.problems == [
            f"approval apr-forged: it is signed with key {stranger.kid!r}, which the JWKS does not hold"]
        assert [r.path for r in proxy.seen if r.path.startswith("/.well-known/")] == ["/.well-known/jwks.json"] * 2
    finally:
        proxy.close()
