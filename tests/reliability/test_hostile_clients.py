"""Hostile clients against the running stack: gunicorn (as scripts/serve runs it: gthread,
gunicorn.conf.py), PostgreSQL, and where an operation must run, a real Celery worker.

One test (or one parametrised family) per finding of the red-team run (docs/security.md,
"Hostile clients"): a runaway ruleset, another client's receipt or cancellation, a forged
ledger row, lax money, malformed JSON, the token audience, the Host header, admin login
brute force, ambiguous tool ids, chunked bodies, gunicorn's own limits, a back-dated
impact assessment. The worker-kill measurement is in tests/execution/test_worker_recovery.py.
Another client's receipt for an external operation is refused by the view, with no worker needed:
tests/execution/test_operations_api.py (test_only_the_bound_executor_may_post_an_external_receipt).
"""

import json
import socket
import threading
import time
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlsplit

import pytest
import requests
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

import agp_client
from agp_client import numbers
from agp_project.canonical import content_hash
from core.models import LedgerEvent
from decision.models import CommerceSession, Decision
from execution.models import ActionEnvelope, Operation, Payment
from registry.documents import delegation_link_payload
from registry.models import Capability, Skill, Task
from tests.auth_tokens.helpers import claims, sign
from tests.decision.factories import make_assessment, make_decision, make_task
from tests.execution.factories import make_policy_set, make_world
from tests.execution.receiver import receiver  # noqa: F401
from tests.execution.worker import TERMINAL, test_broker, wait_for, worker_db, worker_factory  # noqa: F401
from tests.mcp_server import mcp_servers  # noqa: F401
from tests.reliability.hostile import TIME_LIMIT_MS, assert_envelope

pytestmark = pytest.mark.postgres

# Minutes of CPU and almost no memory, but only for an input that asks: it compiles (and so
# registers) as quickly as any ruleset, and only the clock stops its evaluation.
SPINNING = """package agp.spin
import rego.v1
default allow := false
allow if not input.spin
allow if {
    input.spin
    some i in numbers.range(1, 20000)
    some j in numbers.range(1, 20000)
    i * j == -1
}
"""
# A 50-million-element array: gigabytes, unless the memory limit stops it first. It would not
# register now (compiling evaluates it once); the set is stored as one registered before.
HOARDING = """package agp.hoard
import rego.v1
allow if count([x | some x in numbers.range(1, 50000000)]) > 0
"""
READ_ONLY = ["agp.execution.read", "agp.decision.read", "agp.registry.read"]


# --- policy evaluation: time and memory limits --------------------------------------------------------

def test_a_runaway_ruleset_is_stopped_within_its_limit_while_a_get_on_the_same_worker_answers(stack, as_client):
    world = make_world()
    api = as_client()
    registered = api.post(f"{stack.url}/agp/policy-sets", timeout=30, json={
        "name": "spin", "version": "1", "ruleset": SPINNING,
        "tests": [{"name": "quiet", "input": {}, "expect": {"allow": True}}]})
    assert registered.status_code == 201, registered.text
    task_url = f"{stack.url}/agp/tasks/{world.task.task_id}"
    # One ordinary evaluation first: the engine process is up, so its start is not what is timed.
    warm = api.post(f"{stack.url}/agp/policy-evaluations", timeout=30, json={
        "policy_set_id": world.policy_set.policy_set_id, "task_id": world.task.task_id, "agent_id": world.agent_id,
        "input": {"action_class": "read"}})
    assert warm.status_code == 201, warm.text
    outcome = {}

    def evaluate():
        started = time.monotonic()
        outcome["response"] = api.post(f"{stack.url}/agp/policy-evaluations", timeout=30, json={
            "policy_set_id": registered.json()["policy_set_id"], "task_id": world.task.task_id,
            "agent_id": world.agent_id, "input": {"spin": True}})
        outcome["seconds"] = time.monotonic() - started

    runaway = threading.Thread(target=evaluate)
    runaway.start()
    latencies = []
    with requests.Session() as reader:
        reader.headers["Authorization"] = api.headers["Authorization"]
        while runaway.is_alive():
            started = time.monotonic()
            assert reader.get(task_url, timeout=30).status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.05)
    runaway.join()

    response = outcome["response"]
    assert response.status_code == 201, response.text
    assert response.json()["result"] == {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": [
        f"policy evaluation stopped: it exceeded the time limit of {TIME_LIMIT_MS} ms (AGP_POLICY_TIMEOUT_MS)"]}
    assert TIME_LIMIT_MS / 1000 <= outcome["seconds"] < TIME_LIMIT_MS / 1000 + 2
    assert len(latencies) >= 5 and max(latencies) < 0.5, latencies
    print(f"runaway stopped after {outcome['seconds']:.2f} s; {len(latencies)} GETs meanwhile, "
          f"slowest {max(latencies) * 1000:.0f} ms")


def test_a_what_if_under_another_policy_set_needs_the_policy_scope_and_runs_under_the_limits(stack, as_client):
    world = make_world()
    hoarding = make_policy_set(ruleset=HOARDING)
    submitter = as_client("what-if-submitter")
    accepted = submitter.post(f"{stack.url}/agp/action-envelopes", json=world.bound_request(), timeout=30,
                              headers={"Prefer": "respond-async"})
    assert accepted.status_code == 202, accepted.text
    action_id = ActionEnvelope.objects.get(async_operation__operation_id=accepted.json()["operation_id"]).action_id
    reader = as_client("what-if-reader", READ_ONLY)
    author = as_client("what-if-author", [*READ_ONLY, "agp.policy.write"])
    replay = f"{stack.url}/agp/replay/{action_id}"

    own_set = reader.get(replay, params={"policy_set_id": world.policy_set.policy_set_id}, timeout=30)
    assert own_set.status_code == 200, own_set.text  # the set the action's evaluation used: a reader may
    refused = reader.get(replay, params={"policy_set_id": hoarding.policy_set_id}, timeout=30)
    error = assert_envelope(refused, 403, "AGP_INSUFFICIENT_SCOPE")
    assert error["details"]["required_scopes"] == ["agp.policy.write"]

    started = time.monotonic()
    answered = author.get(replay, params={"policy_set_id": hoarding.policy_set_id}, timeout=30)
    assert answered.status_code == 200, answered.text
    assert answered.json()["what_if"]["result"] == {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": [
        "policy evaluation stopped: it exceeded the memory limit of 256 MB (AGP_POLICY_MEMORY_MB)"]}
    assert time.monotonic() - started < TIME_LIMIT_MS / 1000 + 2


# --- MCP registration: a server that never answers takes no more than its share ------------------------

def test_twice_as_many_registrations_as_threads_against_a_silent_mcp_server_leave_reads_answering(
        stack, as_client, mcp_servers):
    silent = mcp_servers.start(list_hangs=True)  # answers the handshake, never the tool listing
    api = as_client()
    world = make_world()
    threads = 4  # the stack's web tier: one gunicorn process with four threads
    answers: list[requests.Response] = []

    def register():
        answers.append(api.post(f"{stack.url}/agp/skills", timeout=30, json={
            "agent_id": world.agent_id, "name": "silent", "tool_id": "crm", "connector": "mcp",
            "endpoint_url": silent.url}))

    burst = [threading.Thread(target=register) for _ in range(2 * threads)]
    for thread in burst:
        thread.start()
    latencies = []
    with requests.Session() as reader:
        reader.headers["Authorization"] = api.headers["Authorization"]
        while any(thread.is_alive() for thread in burst):
            started = time.monotonic()
            assert reader.get(f"{stack.url}/agp/tasks/{world.task.task_id}", timeout=30).status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.05)
    for thread in burst:
        thread.join()

    assert len(latencies) >= 5 and max(latencies) < 1, latencies
    # The per-process cap (AGP_MCP_REGISTRATIONS_PER_PROCESS, 2) lists two; the rest are told when to retry.
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [400, 400] + [503] * (2 * threads - 2), [answer.text for answer in answers]
    for answer in answers:
        if answer.status_code == 503:
            assert_envelope(answer, 503, "AGP_UNAVAILABLE")
            assert answer.headers["Retry-After"] == "3"
        else:
            error = assert_envelope(answer, 400, "AGP_INVALID_REQUEST")
            assert error["details"]["fields"]["endpoint_url"] == [
                "The MCP server could not be pinned: no answer within the time limit of 3 s."]
    assert not Skill.objects.filter(agent_id=world.agent_id, name="silent").exists()
    print(f"{len(latencies)} reads during the burst, slowest {max(latencies) * 1000:.0f} ms")


# --- external operations: cancellation ----------------------------------------------------

def test_cancelling_an_operation_needs_its_submitter_or_an_operator(stack, as_client):
    # No worker runs in this test: the operations stay pending.
    submitter = as_client("cancel-submitter")
    other = as_client("cancel-other", ["agp.execution.read", "agp.execution.write"])
    operator = as_client("cancel-operator", ["agp.execution.write", "agp.revocation.write"])

    def pending() -> str:
        accepted = submitter.post(f"{stack.url}/agp/action-envelopes", json=make_world().bound_request(), timeout=30,
                                  headers={"Prefer": "respond-async"})
        assert accepted.status_code == 202, accepted.text
        return accepted.json()["operation_id"]

    first, second = pending(), pending()
    cancel = {"status": "cancelled"}
    refused = other.patch(f"{stack.url}/agp/operations/{first}", json=cancel, timeout=30)
    assert assert_envelope(refused, 403, "AGP_INSUFFICIENT_SCOPE")["details"]["required_scopes"] == [
        "agp.revocation.write"]
    assert Operation.objects.get(operation_id=first).status == "pending"
    assert submitter.patch(f"{stack.url}/agp/operations/{first}", json=cancel, timeout=30).status_code == 200
    assert operator.patch(f"{stack.url}/agp/operations/{second}", json=cancel, timeout=30).status_code == 200
    assert set(Operation.objects.filter(operation_id__in=[first, second]).values_list("status", flat=True)) == {
        "cancelled"}


# --- the ledger: only the chain from 1 to the head ---------------------------------------------------

def test_a_forged_row_below_sequence_one_is_a_break_and_is_not_listed(stack, as_client):
    api = as_client()
    for index in range(3):
        assert api.post(f"{stack.url}/agp/ledger-events", timeout=30, json={
            "event_type": "client.note", "resource_type": "Note", "resource_id": f"n-{index}"}).status_code == 201
    assert api.get(f"{stack.url}/agp/ledger-events/verify", timeout=30).json()["verified"] is True
    with connection.cursor() as cursor:  # what only someone with write access to the table can do
        for sequence in (0, -5):
            cursor.execute(
                "INSERT INTO core_ledgerevent (sequence, event_id, event_type, resource_type, resource_id, actor, "
                "payload, payload_hash, prev_hash, hash, recorded_at) SELECT %s, %s, event_type, resource_type, "
                "resource_id, actor, payload, payload_hash, prev_hash, hash, recorded_at FROM core_ledgerevent "
                "WHERE sequence = 1", [sequence, f"forged-{sequence}"])

    verdict = api.get(f"{stack.url}/agp/ledger-events/verify", timeout=30).json()
    assert (verdict["verified"], verdict["first_broken_sequence"]) == (False, -5)
    listed = api.get(f"{stack.url}/agp/ledger-events", params={"limit": 200}, timeout=30).json()["items"]
    assert sorted(item["sequence"] for item in listed) == [1, 2, 3]
    assert_envelope(api.get(f"{stack.url}/agp/ledger-events/0", timeout=30), 404, "AGP_NOT_FOUND")


# --- malformed input: a 400 in the envelope, nothing written --------------------------------------------

def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _task_body(**extra) -> str:
    base = {"root_principal": "org:x", "agent_id": "a-1", "title": "t", "risk_level": "low", "action_class": "read"}
    return json.dumps({**base, **extra})


MALFORMED = {
    # name: (path, body bytes, the field details.fields names, or None for a syntax error)
    "duplicate-key": ("/agp/tasks", _raw(_task_body()[:-1] + ', "title": "other"}'), "title"),
    "nan": ("/agp/ledger-events", b'{"event_type":"client.x","resource_type":"X","resource_id":"x",'
                                  b'"payload":{"v":NaN}}', None),
    "infinity": ("/agp/ledger-events", b'{"event_type":"client.x","resource_type":"X","resource_id":"x",'
                                       b'"payload":{"v":-Infinity}}', None),
    "underscore-number": ("/agp/ledger-events", b'{"event_type":"client.x","resource_type":"X","resource_id":"x",'
                                                b'"payload":{"v":1_000}}', None),
    "number-too-long": ("/agp/ledger-events", b'{"event_type":"client.x","resource_type":"X","resource_id":"x",'
                                              b'"payload":{"v":1e999999999}}', None),
    "nul-in-value": ("/agp/ledger-events", b'{"event_type":"client.x","resource_type":"X","resource_id":"x",'
                                           b'"payload":{"note":"a\\u0000b"}}', "payload.note"),
    "lone-surrogate-in-value": ("/agp/ledger-events", b'{"event_type":"client.x","resource_type":"X",'
                                                      b'"resource_id":"x","payload":{"note":"\\ud800"}}',
                                "payload.note"),
    "lone-surrogate-in-key": ("/agp/tasks", _raw(_task_body()[:-1] + ', "\\udfff": 1}'), "\\udfff"),
    "not-utf-8": ("/agp/tasks", b'{"title": "\xff\xfe"}', None),
    "amount-as-string": ("/agp/delegations", json.dumps({
        "root_principal": "org:m", "delegator_agent": "org:m", "delegate_agent": "a-1", "authority_scope": ["*"],
        "constraints": {"spend_limit": {"currency": "USD", "amount": "1e-2"}}}).encode(), "constraints"),
    "amount-with-more-decimals-than-usd": ("/agp/liability-bindings", json.dumps({
        "root_principal": "org:m", "agent_id": "a-1", "liable_party": "org:m",
        "coverage": {"currency": "USD", "amount": 0}}).replace('"amount": 0', '"amount": 10.005').encode(),
        "coverage"),
    "fraction-of-a-yen": ("/agp/liability-bindings", json.dumps({
        "root_principal": "org:m", "agent_id": "a-1", "liable_party": "org:m",
        "coverage": {"currency": "JPY", "amount": 0}}).replace('"amount": 0', '"amount": 1.5').encode(), "coverage"),
    "unknown-currency": ("/agp/liability-bindings", json.dumps({
        "root_principal": "org:m", "agent_id": "a-1", "liable_party": "org:m",
        "coverage": {"currency": "XAU", "amount": 1}}).encode(), "coverage"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_each_malformed_input_is_a_400_in_the_error_envelope_and_writes_nothing(stack, as_client, case):
    path, body, field = MALFORMED[case]
    api = as_client()
    before = (LedgerEvent.objects.count(), Task.objects.count())

    response = api.post(f"{stack.url}{path}", data=body, headers={"Content-Type": "application/json"}, timeout=30)

    error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
    if field is not None:
        assert field in error["details"]["fields"], error
    assert (LedgerEvent.objects.count(), Task.objects.count()) == before


def test_a_transact_amount_sent_as_a_string_is_a_400_not_a_reservation(stack, as_client):
    world = make_world(action_class="transact")
    body = world.bound_request(parameters={"amount": "1e-2", "currency": "USD"})

    response = as_client().post(f"{stack.url}/agp/action-envelopes", json=body, timeout=30,
                                headers={"Prefer": "respond-async"})

    error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
    assert error["details"]["fields"]["parameters"]["amount"] == [
        "Must be a JSON number, not a string or another type."]
    assert not ActionEnvelope.objects.filter(action_id=body["action_id"]).exists()
    assert CommerceSession.objects.get(pk=world.session.pk).reserved_amount == 0


@pytest.mark.parametrize("client_id", ["admin\x00", "ad\x00min", "\x00"])
def test_a_nul_in_the_client_id_at_the_token_endpoint_is_an_rfc6749_400(stack, worker_db, client_id):  # noqa: F811
    response = requests.post(f"{stack.url}/oauth/token", timeout=30, data={
        "grant_type": "client_credentials", "client_id": client_id, "client_secret": "whatever"})

    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"


# --- money: exact from the request to the signature to the tool ------------------------------------------

def test_money_stays_exact_in_responses_signatures_reservations_and_what_the_tool_receives(
        stack, as_client, worker_factory, receiver):  # noqa: F811
    api = as_client()
    jwks = requests.get(f"{stack.url}/.well-known/jwks.json", timeout=10).json()
    # 17 significant digits: no binary double holds it (as a float it would read ...4568).
    exact = "1234567890123.4567"
    created = api.post(f"{stack.url}/agp/delegations", timeout=30, headers={"Content-Type": "application/json"},
                       data=('{"root_principal": "org:exact", "delegator_agent": "org:exact", "delegate_agent": '
                             '"agent-exact", "authority_scope": ["*"], "expires_at": "2099-01-01T00:00:00Z", '
                             '"constraints": {"spend_limit": {"currency": "CLF", "amount": ' + exact + '}}}').encode())
    assert created.status_code == 201, created.text
    assert f'"amount":{exact}' in created.text
    link = numbers.loads(created.content)
    assert link["constraints"]["spend_limit"]["amount"] == Decimal(exact)
    assert agp_client.verify_signature({**delegation_link_payload(link), "signature": link["signature"]}, jwks)

    worker_factory.start()
    amount = Decimal("12345678901.2345")
    world = make_world(action_class="transact", currency="CLF", connector="http", endpoint_url=receiver.url("/tool"),
                       spend_limit=Decimal("99999999999"), root_spend_limit=Decimal("99999999999"),
                       amount_limit=Decimal("99999999999"), allowed_parameter_ranges={})
    world.binding.coverage_amount = Decimal("99999999999")
    world.binding.save(update_fields=["coverage_amount"])
    body = world.bound_request(parameters={"amount": amount, "currency": "CLF"})
    accepted = api.post(f"{stack.url}/agp/action-envelopes", timeout=30,
                        headers={"Prefer": "respond-async", "Content-Type": "application/json"},
                        data=numbers.dumps(body).encode())
    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation_id"]
    wait_for(lambda: Operation.objects.filter(operation_id=operation_id, status__in=TERMINAL).exists(),
             message="the operation to end")

    envelope = ActionEnvelope.objects.get(async_operation__operation_id=operation_id)
    assert Operation.objects.get(operation_id=operation_id).status == "succeeded"
    assert Payment.objects.get(envelope_id=envelope.action_id).amount == amount
    assert envelope.parameters_hash == content_hash({"amount": amount, "currency": "CLF"})
    [call] = receiver.requests
    assert b'"amount":12345678901.2345' in call.body
    assert numbers.loads(call.body)["parameters"]["amount"] == amount


# --- tokens, hosts, admin ------------------------------------------------------------------------------

def test_a_token_without_the_audience_or_for_another_is_a_401(stack, as_client):
    as_client()  # the client row the tokens name
    for token in (sign(claims(sub="hostile-admin", aud=None)), sign(claims(sub="hostile-admin", aud="billing"))):
        response = requests.get(f"{stack.url}/agp/tasks", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert_envelope(response, 401, "AGP_UNAUTHENTICATED")
    good = sign(claims(sub="hostile-admin"))
    assert requests.get(f"{stack.url}/agp/tasks", headers={"Authorization": f"Bearer {good}"},
                        timeout=30).status_code == 200


def test_without_a_base_url_only_localhost_names_are_answered(stack, as_client):
    api = as_client()
    body = json.loads(_task_body())
    hostile = api.post(f"{stack.url}/agp/tasks", json=body, headers={"Host": "evil.example"}, timeout=30)
    assert_envelope(hostile, 400, "AGP_INVALID_REQUEST")
    assert "Location" not in hostile.headers and not Task.objects.exists()

    port = urlsplit(stack.url).port
    created = api.post(f"{stack.url}/agp/tasks", json=body, headers={"Host": f"localhost:{port}"}, timeout=30)
    assert created.status_code == 201, created.text
    assert created.headers["Location"].startswith(f"http://localhost:{port}/agp/tasks/")


def test_admin_logins_are_locked_out_after_five_failures(stack, worker_db):  # noqa: F811
    User.objects.create_user("auditor", password="the-right-password", is_staff=True)
    login = f"{stack.url}/admin/login/"

    def attempt(session: requests.Session, password: str) -> requests.Response:
        session.get(login, timeout=30)
        return session.post(login, timeout=30, allow_redirects=False, headers={"Referer": login}, data={
            "username": "auditor", "password": password, "csrfmiddlewaretoken": session.cookies["csrftoken"],
            "next": "/admin/"})

    with requests.Session() as browser:
        for _ in range(4):
            assert attempt(browser, "guess").status_code == 200  # the form again, with an error
        assert attempt(browser, "guess").status_code == 429  # the fifth failure locks out
        locked = attempt(browser, "the-right-password")
    assert locked.status_code == 429
    with requests.Session() as fresh_browser:  # same address: still locked out
        assert attempt(fresh_browser, "the-right-password").status_code == 429


# --- registry: tool ids that scopes cannot confuse --------------------------------------------------------

@pytest.mark.parametrize("tool_id", ["pay:admin", "pay*", "*"])
def test_a_tool_id_with_a_colon_or_a_star_is_a_400(stack, as_client, tool_id):
    api = as_client()
    world = make_world()
    capability = api.post(f"{stack.url}/agp/capabilities", timeout=30, json={
        "agent_id": world.agent_id, "delegation_id": world.delegation.delegation_id, "tool_id": tool_id,
        "operations": ["update"]})
    skill = api.post(f"{stack.url}/agp/skills", timeout=30, json={
        "agent_id": world.agent_id, "name": "pay", "tool_id": tool_id})

    for response in (capability, skill):
        assert "tool_id" in assert_envelope(response, 400, "AGP_INVALID_REQUEST")["details"]["fields"]
    assert not Capability.objects.filter(tool_id=tool_id).exists()
    assert not Skill.objects.filter(tool_id=tool_id).exists()


# --- the HTTP layer: chunked bodies and gunicorn's own limits ----------------------------------------------

def test_a_chunked_body_is_a_411_in_the_envelope_not_an_empty_request(stack, as_client):
    api = as_client()
    chunks = iter([_task_body().encode()])  # a generator body: requests sends it chunked

    response = api.post(f"{stack.url}/agp/tasks", data=chunks, headers={"Content-Type": "application/json"},
                        timeout=30)

    assert_envelope(response, 411, "AGP_INVALID_REQUEST")
    assert not Task.objects.exists()


def _raw_request(url: str, request: bytes) -> bytes:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize(("case", "status"), [("request-line", 414), ("header-size", 431), ("header-count", 431),
                                              ("malformed-header", 400)])
def test_gunicorns_own_limits_answer_before_the_service_with_its_html_and_close(stack, case, status):
    """What a client sees past gunicorn.conf.py's limits, or with a request gunicorn cannot parse:
    gunicorn's status, its plain HTML page (not the JSON envelope: the request never reached
    the service) and Connection: close."""
    path, headers = "/agp/tasks", ""
    if case == "request-line":
        path = "/agp/tasks?cursor=" + "a" * 5000
    elif case == "header-size":
        headers = "X-Big: " + "b" * 9000 + "\r\n"
    elif case == "malformed-header":
        headers = "A header without its colon\r\n"
    else:
        headers = "".join(f"X-H{n}: v\r\n" for n in range(101))
    answer = _raw_request(stack.url, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode())

    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith(f"HTTP/1.1 {status} ")
    assert "Content-Type: text/html" in lines and "Connection: close" in lines
    assert body.startswith(b"<html>")


def test_agp_client_raises_a_typed_error_for_gunicorns_answers(stack, as_client):
    as_client()
    with agp_client.AGPClient(stack.url, max_retries=0) as client:
        with pytest.raises(agp_client.AGPError) as raised:
            client.request("GET", "/agp/tasks", params={"cursor": "a" * 5000}, authenticated=False)
    assert raised.value.status == 414


# --- impact assessments: a veto stands ----------------------------------------------------------------------

def test_a_back_dated_proceed_does_not_lift_a_do_not_proceed_assessment(stack, as_client):
    api = as_client()
    task = make_task(risk_level="high", action_class="admin")
    decision = make_decision(task=task, outcome="approve")
    veto = make_assessment(decision=decision, recommendation="do_not_proceed")
    back_dated = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    proceed = api.post(f"{stack.url}/agp/impact-assessments", timeout=30, json={
        "task_id": task.task_id, "decision_ref": decision.decision_id, "agent_id": "assessor-2",
        "recommendation": "proceed", "assessed_at": back_dated,
        "time_horizons": [{"horizon": "immediate", "consequences": ["none"], "severity": "minor",
                           "reversible": True}]})
    assert proceed.status_code == 201, proceed.text

    response = api.patch(f"{stack.url}/agp/decisions/{decision.decision_id}", json={"status": "finalised"},
                         timeout=30)

    error = assert_envelope(response, 422, "AGP_PREREQUISITE_FAILED")
    assert veto.assessment_id in error["details"]["failed_checks"][0]["reason"]
    assert Decision.objects.get(pk=decision.pk).status == "draft"
