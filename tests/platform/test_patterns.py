"""Identifiers, scopes and tool names match their pattern as a whole: a trailing newline is refused.

``$`` also matches before a final newline, so ``^[a-z]+$`` searched in ``"abc\\n"`` matches; the
service stores and logs what it accepts, so a value with a newline must be a 400, not trimmed.
"""

import pytest

from tests.execution.factories import make_world

pytestmark = pytest.mark.django_db


def bodies(world) -> list[tuple[str, dict, str]]:
    return [
        ("/agp/tasks", {"task_id": "task-1\n", "root_principal": "acme", "agent_id": "a", "risk_level": "low",
                        "action_class": "read"}, "task_id"),
        ("/agp/delegations", {"root_principal": "acme", "delegator_agent": "acme", "delegate_agent": "a",
                              "authority_scope": ["crm:read\n"], "expires_at": "2099-01-01T00:00:00Z"},
         "authority_scope"),
        ("/agp/skills", {"agent_id": "a", "name": "crm", "tool_id": "crm\n"}, "tool_id"),
        ("/agp/capabilities", {"agent_id": world.agent_id, "delegation_id": world.delegation.delegation_id,
                               "tool_id": world.tool_id, "operations": ["update\n"]}, "operations"),
        ("/agp/ledger-events", {"event_type": "client.note\n", "resource_type": "Note", "resource_id": "n-1"},
         "event_type"),
        ("/agp/freezes", {"target_type": "tool", "target_id": "crm\n", "reason": "x"}, "target_id"),
    ]


def test_a_value_with_a_trailing_newline_is_refused_naming_its_field(api):
    world = make_world()
    for path, body, field in bodies(world):
        response = api.post(path, body, format="json")
        assert response.status_code == 400, (path, response.content)
        assert field in response.json()["error"]["details"]["fields"], (path, response.content)
