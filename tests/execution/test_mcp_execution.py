"""Governed tool calls on an MCP server, in process (docs/reference/governance.md): check 3 and the runner.

The same runner runs inside the Celery worker (tests/execution/test_mcp_worker.py, the one
end-to-end path); here each step is driven directly. The MCP server is real (tests/mcp_server.py).
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agp_project.canonical import content_hash
from core.models import LedgerEvent
from execution.models import ActionEnvelope, Operation, Receipt
from execution.runner import operation_claim, operation_execute
from registry.models import Capability, Skill
from tests.execution.factories import make_mcp_world, make_world
from tests.execution.worker import ledger_event_types, submit_async
from tests.mcp_server import CHANGED_DESCRIPTION, mcp_servers  # noqa: F401

pytestmark = pytest.mark.django_db

URL = "/agp/action-envelopes"
LOOKUP = {"customer_id": "c-42"}


@pytest.fixture
def local_mcp(settings):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    settings.AGP_CONNECTOR_TIMEOUT_SECONDS = 5
    settings.AGP_CONNECTOR_RETRY_BASE_SECONDS = 0
    return settings


def pinned_world(*, operation: str, pins: list[str], operations: list[str] | None = None):
    """A world whose skill is an mcp skill with these pins (no server: validation does not call it)."""
    world = make_world(operation=operation)
    Skill.objects.filter(pk=world.skill.pk).update(
        connector="mcp", endpoint_url="http://127.0.0.1:9/mcp",
        tool_pins=[{"name": name, "definition_hash": "sha256:" + "2" * 64} for name in pins])
    if operations is not None:
        Capability.objects.filter(pk=world.capability.pk).update(operations=operations)
    return world


def failed_checks(response) -> list[dict]:
    assert response.status_code == 422, response.content
    return response.json()["error"]["details"]["failed_checks"]


# --- check 3 -------------------------------------------------------------------------------
def test_an_operation_that_is_a_pinned_tool_passes_check_3(api):
    world = pinned_world(operation="lookup_customer", pins=["issue_refund", "lookup_customer"])

    response = api.post(URL, world.bound_request(parameters=LOOKUP), format="json")

    assert response.status_code == 200, response.content
    assert response.json()["operation"] == "lookup_customer"
    assert not ActionEnvelope.objects.exists()  # validated only


def test_an_operation_the_mcp_skill_did_not_pin_fails_check_3(api):
    world = pinned_world(operation="delete_customer", pins=["lookup_customer"])

    checks = failed_checks(api.post(URL, world.bound_request(parameters={}), format="json"))

    assert checks == [{"check": "capability", "reason": (
        f"skill {world.skill.skill_id!r}: operation(s) 'delete_customer' are not tools the mcp skill pinned "
        f"(pinned: lookup_customer)")}]
    assert not ActionEnvelope.objects.exists()


def test_the_wildcard_as_the_envelopes_operation_names_no_tool_and_fails_check_3(api):
    # Capability and delegation grant every operation; the call itself must still be a pinned tool.
    world = pinned_world(operation="*", pins=["lookup_customer"], operations=["*"])

    checks = failed_checks(api.post(URL, world.bound_request(parameters={}), format="json"))

    assert checks == [{"check": "capability", "reason": (
        f"skill {world.skill.skill_id!r}: operation(s) '*' are not tools the mcp skill pinned "
        f"(pinned: lookup_customer)")}]
    assert not ActionEnvelope.objects.exists()


def test_a_capability_granting_an_unpinned_operation_fails_check_3_even_for_a_pinned_one(api):
    world = pinned_world(operation="lookup_customer", pins=["lookup_customer"],
                         operations=["lookup_customer", "export_all"])

    checks = failed_checks(api.post(URL, world.bound_request(parameters=LOOKUP), format="json"))

    assert [c["check"] for c in checks] == ["capability"]
    assert "'export_all' are not tools the mcp skill pinned" in checks[0]["reason"]


def test_a_wildcard_capability_covers_only_the_pinned_tools(api):
    world = pinned_world(operation="lookup_customer", pins=["lookup_customer"], operations=["*"])
    assert api.post(URL, world.bound_request(parameters=LOOKUP), format="json").status_code == 200

    other = world.envelope_request(operation="wipe_all", parameters={})
    checks = failed_checks(api.post(URL, other, format="json"))
    assert any("'wipe_all' are not tools the mcp skill pinned" in c["reason"] for c in checks)


# --- the runner ------------------------------------------------------------------------------
def test_it_executes_a_pinned_tool_and_the_receipt_hashes_the_tool_result(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    world = make_mcp_world(server.url)
    operation_id = submit_async(api, world.bound_request(parameters=LOOKUP))["operation_id"]

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "succeeded"

    text = "customer c-42: Ada Lovelace"
    result = {"content": [{"type": "text", "text": text}], "isError": False, "structuredContent": {"result": text}}
    receipt = Receipt.objects.get(operation_id=operation_id)
    assert (receipt.status, receipt.result, receipt.result_hash) == ("succeeded", result, content_hash(result))
    operation = Operation.objects.get(operation_id=operation_id)
    assert (operation.status, operation.connector) == ("succeeded", "mcp")
    assert server.calls() == [{"tool": "lookup_customer", "arguments": LOOKUP}]
    running = LedgerEvent.objects.get(resource_id=operation_id, event_type="operation.running")
    assert (running.payload["connector"], running.payload["skill_id"]) == ("mcp", world.skill.skill_id)


def test_an_exact_number_in_the_parameters_reaches_the_tool_as_the_number_sent(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    world = make_mcp_world(server.url, operation="wait", allowed_parameter_ranges={})
    operation_id = submit_async(api, world.bound_request(parameters={"seconds": Decimal("0.25")}))["operation_id"]

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "succeeded"

    assert server.calls() == [{"tool": "wait", "arguments": {"seconds": 0.25}}]
    assert Receipt.objects.get(operation_id=operation_id).result["structuredContent"] == {"result": "waited 0.25"}


def test_a_changed_tool_fails_the_operation_closed(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    world = make_mcp_world(server.url)
    operation_id = submit_async(api, world.bound_request(parameters=LOOKUP))["operation_id"]
    server.restart(description=CHANGED_DESCRIPTION)

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "failed"

    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.error["code"] == "AGP_TOOL_CHANGED"
    assert operation.error["details"]["pinned"] == next(
        p["definition_hash"] for p in world.skill.tool_pins if p["name"] == "lookup_customer")
    assert Receipt.objects.get(operation_id=operation_id).status == "failed"
    assert ActionEnvelope.objects.get(action_id=operation.envelope_id).status == "failed"
    assert server.calls() == []

    # A reviewer accepts the change: a new skill version re-pins the server's tools, and the tool runs again.
    repinned = api.post("/agp/skills", {"agent_id": world.agent_id, "name": "CRM over MCP", "version": "3",
                                        "tool_id": world.tool_id, "connector": "mcp", "endpoint_url": server.url,
                                        "supersedes": world.skill.skill_id}, format="json")
    assert repinned.status_code == 201, repinned.content
    assert pin_of(repinned.json()["tool_pins"], "lookup_customer") != pin_of(world.skill.tool_pins, "lookup_customer")
    again = submit_async(api, world.bound_request(parameters=LOOKUP))["operation_id"]

    assert operation_execute(operation_id=again, executor="worker-a") == "succeeded"

    assert server.calls() == [{"tool": "lookup_customer", "arguments": LOOKUP}]
    running = LedgerEvent.objects.get(resource_id=again, event_type="operation.running")
    assert running.payload["skill_id"] == repinned.json()["skill_id"]


def pin_of(tool_pins, name):
    return next(pin["definition_hash"] for pin in tool_pins if pin["name"] == name)


def test_a_tool_error_fails_the_operation_with_the_tools_message(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    world = make_mcp_world(server.url, operation="issue_refund")
    operation_id = submit_async(api, world.bound_request(parameters={"amount": 500}))["operation_id"]

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "failed"

    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.error["code"] == "AGP_EXECUTION_FAILED"
    assert "refund refused: amount 500 is over the limit of 100" in operation.error["details"]["text"]
    assert Receipt.objects.get(operation_id=operation_id).status == "failed"
    assert server.calls() == [{"tool": "issue_refund", "arguments": {"amount": 500}}]


def test_a_taken_over_mcp_operation_fails_instead_of_calling_the_tool_again(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    world = make_mcp_world(server.url)
    operation_id = submit_async(api, world.bound_request(parameters=LOOKUP))["operation_id"]
    # A worker claimed it and died somewhere in its call: did the call reach the tool?
    operation_claim(operation_id=operation_id, executor="worker-dead")
    Operation.objects.filter(operation_id=operation_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    assert operation_execute(operation_id=operation_id, executor="worker-alive") == "failed"

    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.error["code"] == "AGP_EXECUTION_FAILED"
    assert "worker-dead" in operation.error["message"] and "may have run" in operation.error["message"]
    assert operation.error["details"] == {"connector": "mcp", "previous_executor": "worker-dead", "call_sent": None}
    assert Receipt.objects.get(operation_id=operation_id).executor == "worker-alive"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.running", "operation.failed"]
    assert server.calls() == []
