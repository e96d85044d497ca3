"""The mcp connector (execution/connectors.py, agp_project/mcp_client.py) against a real MCP server.

No database: a connector gets a ``Call`` and returns the tool result or raises. The server
records every ``tools/list`` and ``tools/call``, so each test can say what reached it.
"""

import contextlib
import ipaddress
import socket
from decimal import Decimal

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agp_project import mcp_client
from agp_project.canonical import content_hash
from agp_project.mcp_client import PinnedTransport, tools_list
from agp_project.net import GuardedURL, UnsafeURL
from execution.connectors import Call, ExecutionFailed, connector_for
from registry.tool_pins import tool_pins_from_listing
from tests.mcp_server import CHANGED_DESCRIPTION, REBOUND_HOST, mcp_servers  # noqa: F401


@pytest.fixture
def local_mcp(settings):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    settings.AGP_CONNECTOR_TIMEOUT_SECONDS = 5
    settings.AGP_CONNECTOR_ATTEMPTS = 3
    settings.AGP_CONNECTOR_RETRY_BASE_SECONDS = 0
    return settings


def pinned(server):
    """The pins registration would store for this server as it is now."""
    return tool_pins_from_listing(tools_list(server.url, timeout=5))


def call(server, operation, parameters, tool_pins, url=None):
    return Call(operation_id="op_1", action_id="act_1", connector="mcp", endpoint_url=url or server.url,
                parameters=parameters, envelope={}, operation=operation, tool_pins=tool_pins)


def failure(excinfo) -> dict:
    return excinfo.value.as_body()["error"]


def test_it_calls_the_pinned_tool_with_the_envelopes_parameters_and_returns_its_result(local_mcp, mcp_servers):
    server = mcp_servers.start()
    pins = pinned(server)

    result = connector_for("mcp").execute(call(server, "lookup_customer", {"customer_id": "c-42"}, pins))

    text = "customer c-42: Ada Lovelace"
    assert result == {"content": [{"type": "text", "text": text}], "isError": False,
                      "structuredContent": {"result": text}}
    assert server.calls() == [{"tool": "lookup_customer", "arguments": {"customer_id": "c-42"}}]


def test_a_changed_definition_fails_closed_and_the_tool_is_not_called(local_mcp, mcp_servers):
    server = mcp_servers.start()
    pins = pinned(server)
    server.restart(description=CHANGED_DESCRIPTION)

    with pytest.raises(ExecutionFailed) as caught:
        connector_for("mcp").execute(call(server, "lookup_customer", {"customer_id": "c-42"}, pins))

    error = failure(caught)
    assert error["code"] == "AGP_TOOL_CHANGED" and error["retryable"] is False
    pin = next(p["definition_hash"] for p in pins if p["name"] == "lookup_customer")
    now = next(p["definition_hash"] for p in pinned(server) if p["name"] == "lookup_customer")
    assert error["details"] == {"connector": "mcp", "tool": "lookup_customer", "pinned": pin, "current": now}
    assert server.calls() == []


def test_a_tool_that_turns_destructive_is_a_changed_tool_and_is_not_called(local_mcp, mcp_servers):
    server = mcp_servers.start()
    pins = pinned(server)
    server.restart(destructive=True)  # the same name, description and schema; only the annotations differ

    with pytest.raises(ExecutionFailed) as caught:
        connector_for("mcp").execute(call(server, "lookup_customer", {"customer_id": "c-42"}, pins))

    assert failure(caught)["code"] == "AGP_TOOL_CHANGED"
    assert server.calls() == []


def test_a_pin_made_before_annotations_were_pinned_fails_closed_without_asking_the_server(local_mcp, mcp_servers):
    server = mcp_servers.start()
    legacy = [{"name": pin["name"], "definition_hash": pin["definition_hash"]} for pin in pinned(server)]
    listed_before = len(server.events())

    with pytest.raises(ExecutionFailed) as caught:
        connector_for("mcp").execute(call(server, "lookup_customer", {"customer_id": "c-42"}, legacy))

    assert failure(caught)["code"] == "AGP_TOOL_CHANGED"
    assert "register a new version of the skill (supersedes)" in failure(caught)["message"]
    assert len(server.events()) == listed_before


def test_a_tool_the_server_no_longer_lists_counts_as_changed(local_mcp, mcp_servers):
    server = mcp_servers.start()
    pins = [{"name": "delete_customer", "definition_hash": "sha256:" + "1" * 64, "definition": {}}]

    with pytest.raises(ExecutionFailed) as caught:
        connector_for("mcp").execute(call(server, "delete_customer", {}, pins))

    assert failure(caught)["code"] == "AGP_TOOL_CHANGED"
    assert failure(caught)["details"]["current"] is None
    assert "no longer lists tool 'delete_customer'" in failure(caught)["message"]
    assert server.calls() == []


def test_a_tool_error_fails_with_the_tools_text(local_mcp, mcp_servers):
    server = mcp_servers.start()

    with pytest.raises(ExecutionFailed) as caught:
        connector_for("mcp").execute(call(server, "issue_refund", {"amount": 500}, pinned(server)))

    error = failure(caught)
    assert error["code"] == "AGP_EXECUTION_FAILED"
    assert "refund refused: amount 500 is over the limit of 100" in error["details"]["text"]
    assert error["details"]["text"] in error["message"]
    assert error["details"]["result"]["isError"] is True
    assert server.calls() == [{"tool": "issue_refund", "arguments": {"amount": 500}}]


def test_exact_numbers_reach_the_tool_as_json_numbers_or_the_tool_is_not_called(local_mcp, mcp_servers):
    # Parameters are read with exact numbers (docs/decisions/exact-json.md): a Decimal.
    server = mcp_servers.start()
    pins = pinned(server)

    result = connector_for("mcp").execute(call(server, "wait", {"seconds": Decimal("0.25")}, pins))

    assert result["structuredContent"] == {"result": "waited 0.25"}
    [sent] = server.calls()
    assert sent == {"tool": "wait", "arguments": {"seconds": 0.25}}
    assert isinstance(sent["arguments"]["seconds"], float)  # a JSON number on the wire, not the string "0.25"

    # A number no binary double holds cannot be sent exactly: nothing is called.
    with pytest.raises(ExecutionFailed) as caught:
        connector_for("mcp").execute(call(server, "wait", {"seconds": Decimal("0.1000000000000000001")}, pins))

    assert "0.1000000000000000001 cannot be sent exactly" in failure(caught)["message"]
    assert len(server.calls()) == 1


def test_a_call_that_was_sent_is_never_repeated(local_mcp, mcp_servers):
    local_mcp.AGP_CONNECTOR_TIMEOUT_SECONDS = 1
    server = mcp_servers.start()
    pins = pinned(server)

    with pytest.raises(ExecutionFailed) as caught:
        connector_for("mcp").execute(call(server, "wait", {"seconds": 5}, pins))

    error = failure(caught)
    assert error["details"]["call_sent"] is True
    assert "may have run" in error["message"]
    assert server.calls() == [{"tool": "wait", "arguments": {"seconds": 5}}]  # once, with 3 attempts allowed


def test_it_retries_what_failed_before_the_call_then_gives_up(local_mcp, mcp_servers):
    server = mcp_servers.start()
    pins = pinned(server)
    server.stop()

    with pytest.raises(ExecutionFailed) as caught:
        connector_for("mcp").execute(call(server, "lookup_customer", {"customer_id": "c-1"}, pins))

    error = failure(caught)
    assert error["code"] == "AGP_EXECUTION_FAILED"
    assert (error["details"]["attempts"], error["details"]["call_sent"]) == (3, False)
    assert error["details"]["reason"].startswith("cannot connect")


def test_it_refuses_an_endpoint_inside_the_network_at_execution(settings, mcp_servers):
    server = mcp_servers.start()
    settings.AGP_ALLOW_PRIVATE_URLS = True
    pins = pinned(server)
    events = len(server.events())
    settings.AGP_ALLOW_PRIVATE_URLS = False

    with pytest.raises(ExecutionFailed) as caught:
        connector_for("mcp").execute(call(server, "lookup_customer", {"customer_id": "c-1"}, pins))

    assert "loopback" in failure(caught)["details"]["reason"]
    assert len(server.events()) == events  # not even a listing


def test_it_fails_an_operation_the_skill_did_not_pin(local_mcp, mcp_servers):
    server = mcp_servers.start()

    with pytest.raises(ExecutionFailed, match="pinned no tool 'wait'"):
        connector_for("mcp").execute(call(server, "wait", {"seconds": 0}, [
            p for p in pinned(server) if p["name"] != "wait"]))

    assert server.calls() == []


def test_a_result_that_cannot_be_stored_is_recorded_without_its_content(local_mcp, mcp_servers):
    server = mcp_servers.start()

    result = connector_for("mcp").execute(call(server, "lookup_customer", {"customer_id": "c\u0000"},
                                                pinned(server)))

    assert result == {"content": None, "isError": False, "unrecorded": "the tool result holds a NUL character"}
    assert content_hash(result).startswith("sha256:")


# --- the transport: SSRF rules for httpx2 ----------------------------------------------------
def sdk_listing(url, transport):
    async def listing():
        async with httpx2.AsyncClient(transport=transport) as http:
            async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
                return [tool.name for tool in (await client.list_tools()).tools]

    return anyio.run(listing)


def test_it_connects_to_the_address_the_guard_vetted_without_asking_dns_again(mcp_servers):
    server = mcp_servers.start()
    # A name that resolves nowhere (RFC 6761 .invalid): only the vetted address can be reached.
    url = f"http://{REBOUND_HOST}:{server.port}/mcp"
    guarded = GuardedURL(url, REBOUND_HOST, server.port, (ipaddress.ip_address("127.0.0.1"),))

    assert sdk_listing(url, PinnedTransport(guarded)) == ["lookup_customer", "issue_refund", "wait"]


def test_a_rebound_name_still_reaches_only_the_vetted_address(mcp_servers):
    server = mcp_servers.start()
    # "localhost" would resolve to the server now; the guard vetted another address earlier.
    url = f"http://localhost:{server.port}/mcp"
    guarded = GuardedURL(url, "localhost", server.port, (ipaddress.ip_address("127.0.0.2"),))

    with pytest.raises(Exception) as caught:  # noqa: B017 - the SDK wraps it in exception groups
        sdk_listing(url, PinnedTransport(guarded))

    assert "ConnectError" in repr(caught.value)
    assert server.events() == []


def test_an_address_that_refuses_the_connection_gives_way_to_the_next_vetted_one(mcp_servers):
    server = mcp_servers.start()
    url = f"http://{REBOUND_HOST}:{server.port}/mcp"
    guarded = GuardedURL(url, REBOUND_HOST, server.port,
                         (ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")))

    assert sdk_listing(url, PinnedTransport(guarded)) == ["lookup_customer", "issue_refund", "wait"]


def test_an_address_that_never_answers_the_connection_gives_way_within_the_deadline(mcp_servers, monkeypatch):
    # The first vetted address drops the connection attempts (a listener whose backlog is
    # full): it gets its share of the connect time, and the second still answers before the
    # request's own deadline of one second.
    server = mcp_servers.start()
    hole = socket.create_server(("127.0.0.2", server.port), backlog=0)
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.2", server.port))
        fillers.append(filler)
    url = f"http://{REBOUND_HOST}:{server.port}/mcp"
    guarded = GuardedURL(url, REBOUND_HOST, server.port,
                         (ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")))
    monkeypatch.setattr(mcp_client, "url_guard", lambda target, field=None: guarded)
    try:
        tools = tools_list(url, timeout=1)
    finally:
        for held in (hole, *fillers):
            held.close()

    assert [tool["name"] for tool in tools] == ["lookup_customer", "issue_refund", "wait"]


def test_the_transport_refuses_a_request_for_another_host():
    guarded = GuardedURL("http://tools.example/mcp", "tools.example", 80, (ipaddress.ip_address("93.184.215.14"),))

    async def send():
        return await PinnedTransport(guarded).handle_async_request(httpx2.Request("POST", "http://metadata.internal/"))

    with pytest.raises(UnsafeURL, match="left the guarded host 'tools.example'"):
        anyio.run(send)
