"""The tools an agent sees and calls through the MCP gateway (gateway/tools.py), in process."""

import pytest

from agp_project import errors
from execution.models import Operation
from execution.one_call import INLINE, action_govern
from gateway.tools import agent_tool, agent_tools
from registry.models import Revocation, Skill
from tests.execution.factories import check_inputs, governed_by_policy, make_world

pytestmark = pytest.mark.django_db

DEFINITION = {"name": "update", "title": "Update a record", "description": "Update one CRM record.",
              "inputSchema": {"type": "object"}, "outputSchema": None, "annotations": None}


def mcp_world():
    """A world whose agent's skill is an MCP server that pinned its one tool, governed by policy."""
    world = governed_by_policy(make_world(connector="mcp", endpoint_url="http://crm.example/mcp"))
    Skill.objects.filter(agent_id=world.agent_id).update(
        tool_pins=[{"name": "update", "definition_hash": "sha256:" + "0" * 64, "definition": DEFINITION}])
    return world


def test_a_call_finds_its_tool_and_the_checks_take_what_was_read_in_a_pinned_number_of_queries(query_counts):
    world = mcp_world()

    # The gateway's database work for a call: its tool (skills, capabilities), then the
    # one call, whose checks read neither the skills nor the capability again.
    with query_counts.pinned("gateway call: its tool, governed inline"):
        tool, read = agent_tool(agent_id=world.agent_id, tenant=world.root_principal, name="crm.update")
        inputs = check_inputs(world, decision_ref="", policy_decision_ref="", capability_token_ref=tool.capability_id)
        governed = action_govern(inputs=inputs, actor="agent-client", mode=INLINE, executor="gateway@test",
                                 minted=True, tool=read)

    assert (tool.tool_id, tool.operation, tool.endpoint_url) == ("crm", "update", "http://crm.example/mcp")
    assert read.capability.capability_id == tool.capability_id
    assert Operation.objects.get(operation_id=governed.claim.operation_id).status == "running"
    assert governed.envelope.capability_token_ref == tool.capability_id


def test_a_revoked_capability_is_not_listed_but_a_call_of_it_is_refused_by_the_checks():
    world = mcp_world()
    tool, read = agent_tool(agent_id=world.agent_id, tenant=world.root_principal, name="crm.update")
    # A revocation the capability's own row does not show (its status is still active).
    Revocation.objects.create(revocation_id="rev-1", target_type="capability", target_id=tool.capability_id,
                              reason="compromised", revoked_by="ops", revoked_at=world.task.created_at,
                              created_at=world.task.created_at)

    assert agent_tools(agent_id=world.agent_id, tenant=world.root_principal) == []
    again, read = agent_tool(agent_id=world.agent_id, tenant=world.root_principal, name="crm.update")
    inputs = check_inputs(world, decision_ref="", policy_decision_ref="", capability_token_ref=again.capability_id)
    with pytest.raises(errors.AGPError) as refused:
        action_govern(inputs=inputs, actor="agent-client", mode=INLINE, executor="gateway@test", minted=True,
                      tool=read)
    failed = {item["check"] for item in refused.value.details["failed_checks"]}
    assert "capability" in failed
    assert not Operation.objects.exists()


def test_a_name_of_no_tool_of_the_agent_finds_nothing():
    world = mcp_world()

    assert agent_tool(agent_id=world.agent_id, tenant=world.root_principal, name="crm.delete") is None
    assert agent_tool(agent_id=world.agent_id, tenant=world.root_principal, name="crm") is None
    assert agent_tool(agent_id="someone-else", tenant=world.root_principal, name="crm.update") is None
