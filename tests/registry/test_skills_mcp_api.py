"""Registering mcp skills against a real MCP server from the official SDK (docs/reference/governance.md).

``POST /agp/skills`` with ``connector: "mcp"`` lists the server's tools and pins them;
``supersedes`` registers a new version that re-pins them. Every test asserts the status,
the body and what the database (skills, ledger) holds afterwards.
"""

import hashlib
import socket
import time

import anyio
import pytest
import rfc8785
from mcp import Client

from core.models import LedgerEvent
from registry.models import Skill
from tests.execution.receiver import receiver  # noqa: F401
from tests.mcp_server import CHANGED_DESCRIPTION, mcp_servers  # noqa: F401

pytestmark = pytest.mark.django_db

TOOLS = ["issue_refund", "lookup_customer", "wait"]


@pytest.fixture
def local_mcp(settings):
    """The test servers listen on 127.0.0.1: allowed only with AGP_ALLOW_PRIVATE_URLS."""
    settings.AGP_ALLOW_PRIVATE_URLS = True
    settings.AGP_CONNECTOR_TIMEOUT_SECONDS = 5
    return settings


def expected_pins(url: str) -> list[dict[str, str]]:
    """The pins, computed here from the SDK's own client and the RFC 8785 reference library."""
    async def listing():
        async with Client(url, cache=None) as client:
            return (await client.list_tools()).tools

    pins = []
    for tool in anyio.run(listing):
        listed = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        definition = {member: listed.get(member) for member in
                      ("name", "title", "description", "inputSchema", "outputSchema", "annotations")}
        pins.append({"name": tool.name, "definition": definition,
                     "definition_hash": "sha256:" + hashlib.sha256(rfc8785.dumps(definition)).hexdigest()})
    return sorted(pins, key=lambda pin: pin["name"])


def register(api, url, **fields):
    body = {"type": "Skill", "agent_id": "agent-a", "name": "CRM over MCP", "version": "1", "tool_id": "crm",
            "connector": "mcp", "endpoint_url": url, **fields}
    return api.post("/agp/skills", body, format="json")


def error_of(response, status, code="AGP_INVALID_REQUEST"):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"]["code"] == code
    return body["error"]


def skill_events(skill_id):
    return list(LedgerEvent.objects.filter(resource_id=skill_id).order_by("sequence"))


# --- registration pins the tools --------------------------------------------------------------
def test_it_pins_every_tool_the_mcp_server_lists(api, local_mcp, mcp_servers):
    server = mcp_servers.start()

    response = register(api, server.url, skill_id="skl-mcp-1")

    assert response.status_code == 201, response.content
    body = response.json()
    pins = expected_pins(server.url)
    assert [pin["name"] for pin in pins] == TOOLS
    assert body["tool_pins"] == pins
    assert (body["type"], body["connector"], body["endpoint_url"], body["status"], body["supersedes"]) == (
        "Skill", "mcp", server.url, "active", None)
    assert response["Location"] == "http://testserver/agp/skills/skl-mcp-1"
    assert api.get("/agp/skills/skl-mcp-1").json() == body
    skill = Skill.objects.get(skill_id="skl-mcp-1")
    assert (skill.connector, skill.tool_pins, skill.status) == ("mcp", pins, "active")
    [event] = skill_events("skl-mcp-1")
    assert event.event_type == "skill.created"
    assert event.payload["tool_pins"] == pins and event.payload["endpoint_url"] == server.url


def test_it_refuses_tool_pins_sent_by_the_client(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    error = error_of(register(api, server.url, tool_pins=[{"name": "lookup_customer",
                                                           "definition_hash": "sha256:" + "0" * 64}]), 400)
    assert error["details"]["fields"] == {"tool_pins": ["This field is read-only."]}
    assert not Skill.objects.exists()
    assert server.events() == []


def test_it_needs_an_endpoint_for_the_mcp_connector(api, local_mcp):
    error = error_of(api.post("/agp/skills", {"agent_id": "a", "name": "n", "tool_id": "crm", "connector": "mcp"},
                              format="json"), 400)
    assert error["details"]["fields"] == {"endpoint_url": ["Required for the mcp connector."]}
    assert not Skill.objects.exists()


# --- a server that cannot be pinned is a 400 naming the problem --------------------------------------
def test_it_refuses_an_mcp_server_that_does_not_answer(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    server.stop()  # the port is free again: nothing listens there

    error = error_of(register(api, server.url), 400)

    [reason] = error["details"]["fields"]["endpoint_url"]
    assert reason.startswith("The MCP server could not be pinned: cannot connect")
    assert "cannot connect" in error["message"]
    assert not Skill.objects.exists()
    assert not LedgerEvent.objects.filter(event_type="skill.created").exists()


def test_it_refuses_an_mcp_server_that_answers_too_slowly(api, local_mcp):
    local_mcp.AGP_CONNECTOR_TIMEOUT_SECONDS = 1
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"

        error = error_of(register(api, url), 400)

    assert error["details"]["fields"]["endpoint_url"] == [
        "The MCP server could not be pinned: no answer within the connector timeout (1 s)."]
    assert not Skill.objects.exists()


def test_it_refuses_a_server_that_never_lists_its_tools_within_the_registration_s_time_limit(
        api, local_mcp, mcp_servers):
    local_mcp.AGP_MCP_REGISTRATION_TIMEOUT_SECONDS = 1  # well under the connector timeout (5 s here)
    server = mcp_servers.start(list_hangs=True)

    started = time.monotonic()
    error = error_of(register(api, server.url), 400)

    assert time.monotonic() - started < 2
    assert error["details"]["fields"]["endpoint_url"] == [
        "The MCP server could not be pinned: no answer within the time limit of 1 s."]
    assert server.events() == [{"event": "list"}]  # it was reached; it just never answers
    assert not Skill.objects.exists()


def test_it_refuses_an_endpoint_that_is_not_an_mcp_server(api, local_mcp, receiver):
    receiver.answer((200, {"received": True}))

    error = error_of(register(api, receiver.url("/mcp")), 400)

    [reason] = error["details"]["fields"]["endpoint_url"]
    # A JSON-RPC parse error (-32700): the answer is JSON, but no MCP message.
    assert reason.startswith("The MCP server could not be pinned: the server answered MCP error -32700")
    assert receiver.requests, "the endpoint was asked"
    assert not Skill.objects.exists()


def test_it_refuses_an_mcp_server_on_a_loopback_address_unless_private_urls_are_allowed(api, settings, mcp_servers):
    server = mcp_servers.start()
    settings.AGP_ALLOW_PRIVATE_URLS = False

    error = error_of(register(api, server.url), 400)

    assert error["details"]["fields"]["endpoint_url"] == ["127.0.0.1 resolves to 127.0.0.1 is a loopback address"]
    assert not Skill.objects.exists()
    assert server.events() == []  # refused before any connection


# --- a new version re-pins -------------------------------------------------------------------------
def test_a_new_version_re_pins_the_tools_and_supersedes_the_old_one(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    assert register(api, server.url, skill_id="skl-v1").status_code == 201
    before = expected_pins(server.url)
    server.restart(description=CHANGED_DESCRIPTION)  # the owner changed a tool; a reviewer accepted it

    response = register(api, server.url, skill_id="skl-v2", version="2", supersedes="skl-v1")

    assert response.status_code == 201, response.content
    after = expected_pins(server.url)
    assert response.json()["tool_pins"] == after
    assert response.json()["supersedes"] == "skl-v1"
    changed = [pin["name"] for pin, old in zip(after, before, strict=True) if pin != old]
    assert changed == ["lookup_customer"]
    assert api.get("/agp/skills/skl-v1").json()["status"] == "superseded"
    assert Skill.objects.get(skill_id="skl-v1").tool_pins == before
    assert [s["skill_id"] for s in api.get("/agp/skills", {"supersedes": "skl-v1"}).json()["items"]] == ["skl-v2"]
    [created] = skill_events("skl-v2")
    assert (created.event_type, created.payload["supersedes"], created.payload["tool_pins"]) == (
        "skill.created", "skl-v1", after)
    assert [(e.event_type, e.payload) for e in skill_events("skl-v1")][1:] == [
        ("skill.superseded", {"superseded_by": "skl-v2", "tool_pins": before})]


def test_only_one_new_version_supersedes_a_skill(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    register(api, server.url, skill_id="skl-v1")
    assert register(api, server.url, skill_id="skl-v2", supersedes="skl-v1").status_code == 201

    error = error_of(register(api, server.url, skill_id="skl-v2b", supersedes="skl-v1"), 409, "AGP_CONFLICT")

    assert error["details"] == {"supersedes": "skl-v1", "status": "superseded"}
    assert not Skill.objects.filter(skill_id="skl-v2b").exists()
    assert [s.skill_id for s in Skill.objects.filter(status="active")] == ["skl-v2"]


def test_a_revoked_skill_cannot_be_superseded(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    register(api, server.url, skill_id="skl-v1")
    assert api.post("/agp/revocations", {"target_type": "skill", "target_id": "skl-v1", "reason": "rug pull"},
                    format="json").status_code == 201

    error = error_of(register(api, server.url, skill_id="skl-v2", supersedes="skl-v1"), 409, "AGP_CONFLICT")

    assert error["details"] == {"supersedes": "skl-v1", "status": "revoked"}
    assert not Skill.objects.filter(skill_id="skl-v2").exists()


@pytest.mark.parametrize(("supersedes", "fields", "message"), [
    ("skl-nope", {}, "No skill with id 'skl-nope'."),
    ("skl-v1", {"agent_id": "agent-b"}, "a new version keeps all three"),
    ("skl-v1", {"tool_id": "mail"}, "a new version keeps all three"),
])
def test_it_refuses_to_supersede_a_skill_of_another_agent_or_tool_before_asking_the_server(
        api, local_mcp, mcp_servers, supersedes, fields, message):
    server = mcp_servers.start()
    register(api, server.url, skill_id="skl-v1")
    asked = len(server.events())

    error = error_of(register(api, server.url, skill_id="skl-v2", supersedes=supersedes, **fields), 400)

    [reason] = error["details"]["fields"]["supersedes"]
    assert message in reason
    assert not Skill.objects.filter(skill_id="skl-v2").exists()
    assert Skill.objects.get(skill_id="skl-v1").status == "active"
    assert len(server.events()) == asked


def test_a_superseded_skill_cannot_be_revoked(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    register(api, server.url, skill_id="skl-v1")
    register(api, server.url, skill_id="skl-v2", supersedes="skl-v1")

    response = api.post("/agp/revocations", {"target_type": "skill", "target_id": "skl-v1"}, format="json")

    error = error_of(response, 409, "AGP_CONFLICT")
    assert "superseded" in error["message"]
    assert Skill.objects.get(skill_id="skl-v1").status == "superseded"


def test_a_replayed_registration_does_not_ask_the_server_again(api, local_mcp, mcp_servers):
    server = mcp_servers.start()
    body = {"agent_id": "agent-a", "name": "CRM", "tool_id": "crm", "connector": "mcp", "endpoint_url": server.url}
    first = api.post("/agp/skills", body, format="json", HTTP_IDEMPOTENCY_KEY="reg-1")
    asked = len(server.events())

    second = api.post("/agp/skills", body, format="json", HTTP_IDEMPOTENCY_KEY="reg-1")

    assert first.status_code == second.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    assert second.content == first.content
    assert Skill.objects.count() == 1
    assert len(server.events()) == asked == 1
