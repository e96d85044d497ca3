"""Governed tool calls on a real MCP server, executed by a real Celery worker (docs/reference/governance.md).

The MCP server is the official SDK's (tests/mcp_server.py, a subprocess on a loopback
port) and records every call it receives; the worker is ``celery worker`` in a subprocess
on PostgreSQL and Redis (tests/execution/worker.py). Registration goes through the API.

The one end-to-end path; a tool's error, a changed tool and its re-pinning are the runner's,
tested in process in tests/execution/test_mcp_execution.py.
"""

import hashlib

import pytest
import rfc8785

from agp_project.signing import verify_resource
from execution.models import Operation
from tests.execution.factories import make_world
from tests.execution.worker import (  # noqa: F401
    module_worker,
    poll_until_ended,
    submit_async,
    test_broker,
    worker_db,
)
from tests.mcp_server import mcp_servers  # noqa: F401

pytestmark = pytest.mark.postgres

LOOKUP = {"customer_id": "c-42"}


@pytest.fixture
def local_mcp(settings):
    """Registration runs in this process: its server on 127.0.0.1 needs private URLs allowed
    (the worker has them allowed too, tests/execution/worker.py FAST_ENV)."""
    settings.AGP_ALLOW_PRIVATE_URLS = True
    return settings


def register_mcp_skill(api, world, server, *, supersedes):
    response = api.post("/agp/skills", {"agent_id": world.agent_id, "name": "CRM over MCP", "version": "2",
                                        "tool_id": world.tool_id, "connector": "mcp", "endpoint_url": server.url,
                                        "supersedes": supersedes}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def jcs_hash(value) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def run(api, world, worker, parameters):
    operation_id = submit_async(api, world.bound_request(parameters=parameters))["operation_id"]
    return poll_until_ended(api, operation_id, worker)


def test_a_governed_call_runs_the_pinned_tool_and_its_receipt_hashes_the_tool_result(
        api, local_mcp, module_worker, worker_db, mcp_servers):
    server = mcp_servers.start()
    world = make_world(operation="lookup_customer")
    skill = register_mcp_skill(api, world, server, supersedes=world.skill.skill_id)
    assert [pin["name"] for pin in skill["tool_pins"]] == ["issue_refund", "lookup_customer", "wait"]

    final = run(api, world, module_worker, LOOKUP)

    assert final["status"] == "succeeded", final
    [receipt] = api.get("/agp/receipts", {"operation_id": final["operation_id"]}).json()["items"]
    text = "customer c-42: Ada Lovelace"
    tool_result = {"content": [{"type": "text", "text": text}], "isError": False,
                   "structuredContent": {"result": text}}
    assert receipt["result"] == tool_result
    assert receipt["result_hash"] == jcs_hash(tool_result)
    assert verify_resource(receipt, api.get("/.well-known/jwks.json").json())
    assert server.calls() == [{"tool": "lookup_customer", "arguments": LOOKUP}]
    assert Operation.objects.get(operation_id=final["operation_id"]).connector == "mcp"
