"""A tenant whose agent's call waits for people, and the people of the approvals inbox.

``make_inbox_world()`` has authentication on (the caller's ``auth_settings``): the agent's own
client makes the call in one request (``/agp/action-envelopes`` without a decision), the policy
asks for two people when the limit is over 70 and one above 50; persons are admin users linked
to human clients (``approver_create``, as ``manage.py create_approver`` makes them).
"""

from dataclasses import dataclass
from typing import Any

from rest_framework.test import APIClient

from auth_tokens.approvers import approver_create
from tests.execution.factories import World, governed_by_policy, make_world, one_call_request
from tests.identity import agent_api

PASSWORD = "inbox-person-password"
INBOX_RULESET = """package agp.inbox

import rego.v1

default allow := false

allow if input.task.action_class in {"read", "write", "transact"}

require_approval if input.action.parameters.limit > 50

approvals_required := 2 if input.action.parameters.limit > 70
"""


@dataclass
class InboxWorld:
    world: World
    agent: APIClient

    def call(self, limit: int, **overrides) -> dict[str, Any]:
        return one_call_request(self.world, parameters={"limit": limit}, **overrides)

    def ask(self, limit: int, prefer: str = "", **overrides):
        """The agent's call in one request (``prefer``: ``respond-async`` to have it executed); the response."""
        headers = {"HTTP_PREFER": prefer} if prefer else {}
        return self.agent.post("/agp/action-envelopes", self.call(limit, **overrides), format="json", **headers)

    def waiting(self, limit: int) -> str:
        """Make a call that waits for people; the id of the decision that waits."""
        response = self.ask(limit)
        assert response.status_code == 422, response.content
        return response.json()["error"]["details"]["decision_id"]


def make_inbox_world(**overrides) -> InboxWorld:
    world = governed_by_policy(make_world(allowed_parameter_ranges={}, **overrides), ruleset=INBOX_RULESET)
    return InboxWorld(world=world, agent=agent_api(world.agent_id, world.root_principal))


def make_person(username: str, tenants: list[str]):
    """An admin user who approves as ``<username>@people.example`` in ``tenants``: (user, client)."""
    return approver_create(username=username, password=PASSWORD, subject=f"{username}@people.example",
                           tenants=tenants, actor="test")
