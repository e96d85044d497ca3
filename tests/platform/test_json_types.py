"""Request fields take the JSON type they document: nothing is converted on the way in (docs/reference/api.md).

DRF on its own turns ``123`` into ``"123"`` for a string field, ``"1"`` into ``1`` for an
integer and ``"yes"`` or ``0`` into booleans; the service would then store and sign what the
client never sent. Each case sends a valid body with one member of the wrong type: a 400
naming it, and nothing written.
"""

import copy
from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import LedgerEvent
from tests.decision.factories import make_decision
from tests.execution.factories import RULESET, make_full_world
from tests.reliability.hostile import assert_envelope

pytestmark = pytest.mark.django_db


def later() -> str:
    return (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def valid_bodies(world):
    draft = make_decision(task=world.task, agent_id=world.agent_id)
    principal, agent = world.root_principal, world.agent_id
    horizon = {"horizon": "immediate", "consequences": ["a refund is sent"], "severity": "minor", "reversible": True}
    return {
        "/agp/tasks": {"root_principal": principal, "agent_id": agent, "title": "Refund", "risk_level": "low",
                       "action_class": "read"},
        "/agp/delegations": {"root_principal": principal, "delegator_agent": principal, "delegate_agent": "agent-new",
                             "authority_scope": ["crm:update"], "expires_at": later(),
                             "constraints": {"spend_limit": {"currency": "USD", "amount": 10},
                                             "max_hops_remaining": 1}},
        "/agp/freezes": {"target_type": "agent", "target_id": "agent-other", "reason": "looking into it"},
        "/agp/impact-assessments": {"task_id": world.task.task_id, "decision_ref": draft.decision_id,
                                    "agent_id": "assessor", "time_horizons": [horizon], "recommendation": "proceed",
                                    "pareto_assessment": {"improves_without_harm": True, "harmed_parties": ["none"],
                                                          "mitigation_available": True}},
        "/agp/policy-sets": {"name": "refunds", "version": "1", "ruleset": RULESET,
                             "tests": [{"name": "reads", "input": {"action_class": "read"},
                                        "expect": {"allow": True}}]},
    }


def with_member(body, path, value):
    """A copy of ``body`` with the member at dotted ``path`` (list indices as digits) set to ``value``."""
    body = copy.deepcopy(body)
    *parents, last = path.split(".")
    target = body
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[int(last) if last.isdigit() else last] = value
    return body


WRONG_TYPES = [
    ("/agp/tasks", "root_principal", 123, "root_principal"),
    ("/agp/tasks", "title", 7, "title"),
    ("/agp/tasks", "risk_level", 1, "risk_level"),
    ("/agp/delegations", "authority_scope", [1], "authority_scope"),
    ("/agp/delegations", "constraints.max_hops_remaining", "1", "constraints.max_hops_remaining"),
    ("/agp/delegations", "constraints.max_hops_remaining", True, "constraints.max_hops_remaining"),
    ("/agp/delegations", "expires_at", "2099-01-01", "expires_at"),
    ("/agp/delegations", "expires_at", "2099-01-01T00:00:00", "expires_at"),
    ("/agp/delegations", "expires_at", 4070908800, "expires_at"),
    ("/agp/freezes", "target_id", 42, "target_id"),
    ("/agp/freezes", "reason", 1, "reason"),
    ("/agp/impact-assessments", "time_horizons.0.reversible", "yes", "time_horizons.0.reversible"),
    ("/agp/impact-assessments", "time_horizons.0.reversible", 0, "time_horizons.0.reversible"),
    ("/agp/impact-assessments", "time_horizons.0.consequences", [1], "time_horizons.0.consequences"),
    ("/agp/impact-assessments", "pareto_assessment.mitigation_available", "1",
     "pareto_assessment.mitigation_available"),
    ("/agp/impact-assessments", "pareto_assessment.harmed_parties", [5], "pareto_assessment.harmed_parties"),
    ("/agp/policy-sets", "tests.0.expect.allow", "true", "tests.0.expect.allow"),
    ("/agp/policy-sets", "tests.0.name", 5, "tests.0.name"),
]


def field_names(details, prefix=""):
    """The dotted names of ``details.fields``, nested serializer errors flattened."""
    names = []
    for key, value in details.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            names += field_names(value, f"{name}.")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            names += [n for index, item in enumerate(value) if item for n in field_names(item, f"{name}.{index}.")]
        else:
            names.append(name)
    return names


def test_every_valid_body_is_accepted(api):
    for path, body in valid_bodies(make_full_world()).items():
        response = api.post(path, body, format="json")
        assert response.status_code == 201, (path, response.content)


@pytest.mark.parametrize(("path", "member", "value", "field"), WRONG_TYPES)
def test_a_member_of_the_wrong_json_type_is_a_400_naming_it(api, path, member, value, field):
    body = with_member(valid_bodies(make_full_world())[path], member, value)
    events = LedgerEvent.objects.count()

    response = api.post(path, body, format="json")

    error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
    assert field in field_names(error["details"]["fields"]), error
    assert LedgerEvent.objects.count() == events


@pytest.mark.parametrize("expires_at", ["2099-01-01T00:00:00Z", "2099-01-01T02:00:00.5+02:00", "2099-01-01 00:00Z"])
def test_a_date_time_with_its_zone_is_taken_in_utc(api, expires_at):
    body = with_member(valid_bodies(make_full_world())["/agp/delegations"], "expires_at", expires_at)

    response = api.post("/agp/delegations", body, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["expires_at"].startswith("2099-01-01T00:00:00")
