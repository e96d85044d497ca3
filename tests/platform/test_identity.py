"""Who is asking comes from the credential: an agent client speaks only for its agent.

Every write route whose body names the acting agent refuses another agent (403
AGP_FORBIDDEN naming the field) and fills the field in when it is left out. The routes are
checked against the OpenAPI document, so a new route whose body names an agent must declare it.
"""

import pytest

from agp_project.http.viewsets import AGPViewSet
from decision.models import Decision
from tests.auth_tokens.routes import discover
from tests.execution.factories import make_full_world, make_world
from tests.identity import agent_api, client_api

pytestmark = pytest.mark.django_db

# Body fields that name the acting agent, and the write routes whose bodies name an agent
# without it acting (a backtest's agent_id filters the evaluations replayed; a client is bound to one).
AGENT_FIELDS = {"agent_id", "delegator_agent"}
NOT_ACTING = {("POST", "/agp/backtests"), ("POST", "/agp/clients")}


def bodies(world) -> dict[str, dict]:
    """A valid body for each write route that names the agent, as the world's agent would send it."""
    agent, task = world.agent_id, world.task.task_id
    return {
        "/agp/tasks": {"root_principal": world.root_principal, "agent_id": agent, "risk_level": "low",
                       "action_class": "read"},
        "/agp/delegations": {"root_principal": world.root_principal, "delegator_agent": agent,
                             "delegate_agent": "helper", "authority_scope": [f"{world.tool_id}:{world.operation}"]},
        "/agp/capabilities": {"agent_id": agent, "delegation_id": world.delegation.delegation_id,
                              "tool_id": world.tool_id, "operations": [world.operation]},
        "/agp/skills": {"agent_id": agent, "name": "crm", "tool_id": world.tool_id},
        "/agp/liability-bindings": {"root_principal": world.root_principal, "agent_id": agent, "liable_party": "x"},
        "/agp/contexts": {"task_id": task, "agent_id": agent, "data": {}},
        "/agp/policy-evaluations": {"policy_set_id": world.policy_set.policy_set_id, "task_id": task,
                                    "agent_id": agent, "input": {}},
        "/agp/decisions": {"task_id": task, "agent_id": agent, "outcome": "approve"},
        "/agp/impact-assessments": {"task_id": task, "decision_ref": world.decision.decision_id, "agent_id": agent,
                                    "time_horizons": [{"horizon": "immediate", "consequences": ["x"],
                                                       "severity": "minor", "reversible": True}],
                                    "recommendation": "proceed"},
        "/agp/commerce-sessions": {"task_id": task, "agent_id": agent, "delegation_id": world.delegation.delegation_id,
                                   "currency": "USD", "amount_limit": 10},
        "/agp/action-envelopes": world.envelope_request(),
    }


def test_every_write_route_whose_body_names_an_agent_binds_it_to_the_agent_client(api, auth_settings):
    schema = api.get("/agp/openapi.json").json()
    for op in discover()[0]:
        if op.method != "POST" or (op.method, op.path) in NOT_ACTING:
            continue
        body = schema["paths"][op.path]["post"].get("requestBody")
        if body is None:
            continue
        ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        named = AGENT_FIELDS & set(schema["components"]["schemas"][ref]["properties"])
        view = op.view.cls
        assert issubclass(view, AGPViewSet)
        assert named <= set(view.agent_fields), f"{op.path}: {sorted(named)} must be declared in agent_fields"


@pytest.mark.parametrize("path", [
    "/agp/tasks", "/agp/delegations", "/agp/capabilities", "/agp/skills", "/agp/liability-bindings", "/agp/contexts",
    "/agp/policy-evaluations", "/agp/decisions", "/agp/impact-assessments", "/agp/commerce-sessions",
    "/agp/action-envelopes"])
def test_an_agent_client_naming_another_agent_is_refused_and_nothing_is_written(auth_settings, path):
    world = make_full_world()
    body = bodies(world)[path]
    field = "delegator_agent" if path == "/agp/delegations" else "agent_id"
    before = _counts()
    response = agent_api(world.agent_id, world.root_principal).post(path, {**body, field: "someone-else"},
                                                                      format="json")
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "AGP_FORBIDDEN" and error["retryable"] is False
    assert error["details"] == {"field": field, "reason": f"this client acts only for agent {world.agent_id!r}"}
    assert _counts() == before


def test_an_agent_field_left_out_is_filled_in_from_the_credential(auth_settings):
    world = make_world()
    response = agent_api(world.agent_id, world.root_principal).post(
        "/agp/decisions", {"task_id": world.task.task_id, "outcome": "approve"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["agent_id"] == world.agent_id
    assert Decision.objects.get(decision_id=response.json()["decision_id"]).created_by.startswith("agent_")


def test_an_agent_client_cannot_finalise_another_agents_decision_or_write_policy(auth_settings):
    world = make_world()
    other = agent_api("other-agent", world.root_principal)
    draft = Decision.objects.create(decision_id="dec-draft", task=world.task, agent_id=world.agent_id,
                                    outcome="approve", created_at=world.task.created_at)
    response = other.patch(f"/agp/decisions/{draft.decision_id}", {"status": "finalised"}, format="json")
    assert (response.status_code, response.json()["error"]["details"]["field"]) == (403, "agent_id")
    response = other.post("/agp/policy-sets", {"name": "mine", "version": "1", "ruleset": "package p\nallow := true\n"},
                          format="json")
    assert (response.status_code, response.json()["error"]["code"]) == (403, "AGP_FORBIDDEN")
    assert Decision.objects.get(decision_id="dec-draft").status == "draft"


def test_an_agent_client_revokes_a_delegation_its_agent_granted_and_nothing_else(auth_settings):
    world = make_world()
    orchestrator = agent_api(world.orchestrator_id, world.root_principal)
    assert orchestrator.post("/agp/revocations", {"target_type": "capability",
                                                  "target_id": world.capability.capability_id},
                             format="json").json()["error"]["code"] == "AGP_INSUFFICIENT_SCOPE"
    granted = orchestrator.post("/agp/revocations", {"target_type": "delegation",
                                                     "target_id": world.delegation.delegation_id}, format="json")
    assert granted.status_code == 201, granted.content
    assert granted.json()["created_by"].startswith("agent_")


def test_who_is_asking_is_the_credentials_client_not_the_bodys(auth_settings):
    world = make_world()
    api, client = client_api("agent", [world.root_principal], agent_id=world.agent_id)
    response = api.post("/agp/tasks", {"root_principal": world.root_principal, "risk_level": "low",
                                       "action_class": "read", "created_by": "someone"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"] == {"created_by": ["This field is read-only."]}
    response = api.post("/agp/tasks", {"root_principal": world.root_principal, "risk_level": "low",
                                       "action_class": "read"}, format="json")
    assert (response.json()["created_by"], response.json()["agent_id"]) == (client.client_id, world.agent_id)


def _counts() -> dict[str, int]:
    from django.apps import apps

    return {model.__name__: model.objects.count() for app in ("registry", "decision", "execution")
            for model in apps.get_app_config(app).get_models()}
