"""Tasks, capabilities, skills and liability bindings (docs/reference/api.md)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import LedgerEvent
from registry.models import Capability, Delegation, LiabilityBinding, PolicySet, Skill, Task
from tests.registry import factories as f

pytestmark = pytest.mark.django_db


def iso(dt):
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def assert_error(response, status, code):
    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    return response.json()["error"]


# --- tasks --------------------------------------------------------------------------------
def test_it_creates_a_task(api):
    response = api.post("/agp/tasks", {"type": "Task", "task_id": "task-1", "root_principal": "alice",
                                       "agent_id": "agent-a", "title": "Refund order 42", "risk_level": "high",
                                       "action_class": "transact"}, format="json")
    assert response.status_code == 201, response.json()
    assert response["Location"] == "http://testserver/agp/tasks/task-1"
    body = response.json()
    assert {k: body[k] for k in ("type", "task_id", "risk_level", "action_class", "status")} == {
        "type": "Task", "task_id": "task-1", "risk_level": "high", "action_class": "transact", "status": "open"}
    assert body["created_at"].endswith("Z")
    task = Task.objects.get(task_id="task-1")
    assert (task.root_principal, task.agent_id, task.title, task.status) == ("alice", "agent-a",
                                                                            "Refund order 42", "open")
    assert LedgerEvent.objects.filter(event_type="task.created", resource_id="task-1").exists()


TASK = {"root_principal": "alice", "agent_id": "agent-a", "risk_level": "medium", "action_class": "write"}


def test_it_generates_a_task_id_and_defaults(api):
    response = api.post("/agp/tasks", TASK, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["task_id"].startswith("tsk_")
    assert (body["risk_level"], body["action_class"], body["status"], body["title"]) == ("medium", "write", "open", "")
    assert Task.objects.filter(task_id=body["task_id"]).exists()


@pytest.mark.parametrize(("change", "field"), [
    ({"risk_level": "extreme"}, "risk_level"),
    ({"action_class": "launch"}, "action_class"),
    ({"status": "pending"}, "status"),
    ({"agent_id": None}, "agent_id"),
    ({"owner": "x"}, "owner"),
    ({"created_at": "2999-01-01T00:00:00Z"}, "created_at"),
    # Never defaulted to low/read: that would skip rule 5, the approval and commerce checks.
    ({"risk_level": None}, "risk_level"),
    ({"action_class": None}, "action_class"),
])
def test_it_refuses_invalid_tasks(api, change, field):
    body = {**TASK, **change}
    body = {k: v for k, v in body.items() if v is not None}
    error = assert_error(api.post("/agp/tasks", body, format="json"), 400, "AGP_INVALID_REQUEST")
    assert field in error["details"]["fields"]
    assert not Task.objects.exists()


def test_it_names_the_identifier_rule_when_an_id_is_malformed(api):
    error = assert_error(api.post("/agp/tasks", {**TASK, "task_id": "task one!"}, format="json"),
                         400, "AGP_INVALID_REQUEST")
    assert error["details"]["fields"]["task_id"] == ["Must be 1-128 characters of [A-Za-z0-9._:-]."]
    assert not Task.objects.exists()


def test_it_refuses_a_duplicate_task_id(api):
    f.task(task_id="task-dup")
    assert_error(api.post("/agp/tasks", {**TASK, "task_id": "task-dup"},
                          format="json"), 409, "AGP_CONFLICT")
    assert Task.objects.count() == 1


def test_a_task_names_the_policy_set_that_governs_its_one_call_actions(api):
    shared, own = f.policy_set(), f.policy_set(root_principal="alice")
    for policy_set in (shared, own):
        response = api.post("/agp/tasks", {**TASK, "policy_set_id": policy_set.policy_set_id}, format="json")
        assert response.status_code == 201, response.json()
        assert response.json()["policy_set_id"] == policy_set.policy_set_id
        assert Task.objects.get(task_id=response.json()["task_id"]).policy_set_id == policy_set.policy_set_id
    assert api.post("/agp/tasks", TASK, format="json").json()["policy_set_id"] is None


def test_a_task_cannot_be_governed_by_another_tenants_a_revoked_or_a_shadow_policy_set(api):
    others = f.policy_set(root_principal="bob")
    revoked = f.policy_set()
    PolicySet.objects.filter(pk=revoked.pk).update(status="revoked")
    shadow = f.policy_set(shadow_of_id=f.policy_set().policy_set_id)
    for policy_set, reason in ((others, "No policy set with id"), (revoked, "is revoked"), (shadow, "is a shadow")):
        error = assert_error(api.post("/agp/tasks", {**TASK, "policy_set_id": policy_set.policy_set_id},
                                      format="json"), 400, "AGP_INVALID_REQUEST")
        assert reason in error["details"]["fields"]["policy_set_id"][0]
    assert not Task.objects.exists()


def test_it_lists_tasks_by_filter(api):
    high = f.task(root_principal="alice", risk_level="high")
    f.task(root_principal="alice")
    f.task(root_principal="bob")
    response = api.get("/agp/tasks", {"root_principal": "alice", "risk_level": "high"})
    assert response.status_code == 200
    assert [i["task_id"] for i in response.json()["items"]] == [high.task_id]
    assert len(api.get("/agp/tasks", {"agent_id": high.agent_id}).json()["items"]) == 1
    assert api.get(f"/agp/tasks/{high.task_id}").json()["risk_level"] == "high"
    assert_error(api.get("/agp/tasks", {"cursor": "garbage"}), 400, "AGP_INVALID_REQUEST")


# --- capabilities -------------------------------------------------------------------------
def capability_body(delegation, **overrides):
    body = {"agent_id": delegation.delegate_agent, "delegation_id": delegation.delegation_id, "tool_id": "crm",
            "operations": ["read", "update"]}
    body.update(overrides)
    return body


def test_it_creates_a_capability_within_the_delegation(api):
    delegation = f.root_delegation(scope=["crm:*"])
    ranges = {"amount": {"min": 0, "max": 100}, "region": {"enum": ["eu", "us"]}, "limit": {"max": 10}}
    response = api.post("/agp/capabilities", capability_body(
        delegation, type="Capability", capability_id="cap-1", allowed_parameter_ranges=ranges), format="json")

    assert response.status_code == 201, response.json()
    assert response["Location"] == "http://testserver/agp/capabilities/cap-1"
    body = response.json()
    assert body["allowed_parameter_ranges"] == ranges
    assert body["expires_at"] == iso(delegation.expires_at)
    assert (body["status"], body["delegation_id"], body["operations"]) == ("active", delegation.delegation_id,
                                                                          ["read", "update"])
    row = Capability.objects.get(capability_id="cap-1")
    assert (row.agent_id, row.tool_id, row.allowed_parameter_ranges) == (delegation.delegate_agent, "crm", ranges)
    assert LedgerEvent.objects.get(event_type="capability.created", resource_id="cap-1").payload["delegation_id"] \
        == delegation.delegation_id


@pytest.mark.parametrize("ranges", [
    {"amount": {"min": 10, "max": 1}},
    {"amount": {"minimum": 1}},
    {"amount": {"min": "1"}},
    {"amount": {"min": True}},
    {"amount": {}},
    {"amount": {"enum": []}},
    {"amount": {"enum": [1, 1]}},
    {"amount": {"enum": [{"a": 1}]}},
    {"amount": {"enum": [1], "min": 0}},
    {"amount": [0, 1]},
    {"bad name!": {"min": 0}},
    ["amount"],
])
def test_it_validates_parameter_ranges_strictly(api, ranges):
    delegation = f.root_delegation()
    error = assert_error(api.post("/agp/capabilities", capability_body(delegation, allowed_parameter_ranges=ranges),
                                  format="json"), 400, "AGP_INVALID_REQUEST")
    assert "allowed_parameter_ranges" in error["details"]["fields"]
    assert not Capability.objects.exists()


@pytest.mark.parametrize(("change", "field"), [
    ({"operations": []}, "operations"),
    ({"operations": ["read", "read"]}, "operations"),
    ({"operations": ["re:ad"]}, "operations"),
    ({"tool_id": "crm tool"}, "tool_id"),
    ({"status": "active"}, "status"),
    ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ({"delegation_id": "dlg-missing"}, "delegation_id"),
])
def test_it_refuses_invalid_capabilities_with_400(api, change, field):
    delegation = f.root_delegation()
    error = assert_error(api.post("/agp/capabilities", capability_body(delegation, **change), format="json"),
                         400, "AGP_INVALID_REQUEST")
    assert field in error["details"]["fields"]
    assert not Capability.objects.exists()


def test_it_refuses_a_capability_outside_the_delegation_scope(api):
    delegation = f.root_delegation(scope=["crm:read", "mail:*"])
    error = assert_error(api.post("/agp/capabilities", capability_body(delegation), format="json"),
                         409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert error["details"]["uncovered_scopes"] == ["crm:update"]
    assert not Capability.objects.exists()


def test_it_refuses_a_capability_for_another_agent(api):
    delegation = f.root_delegation()
    error = assert_error(api.post("/agp/capabilities", capability_body(delegation, agent_id="someone-else"),
                                  format="json"), 409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert error["details"]["agent_id"] == "someone-else"
    assert not Capability.objects.exists()


def test_it_refuses_a_capability_outliving_its_delegation(api):
    delegation = f.root_delegation(expires_at=f.later(days=1))
    assert_error(api.post("/agp/capabilities", capability_body(delegation, expires_at=iso(f.later(days=2))),
                          format="json"), 409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert not Capability.objects.exists()


@pytest.mark.parametrize("how", ["revoked_ancestor", "expired", "revoked_agent"])
def test_it_refuses_a_capability_from_an_unusable_delegation(api, how):
    links = f.chain(3)
    if how == "revoked_ancestor":
        f.revoke("delegation", links[1].delegation_id)
    elif how == "expired":
        Delegation.objects.filter(pk=links[0].pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    else:
        f.revoke("agent", links[1].delegator_agent)
    assert_error(api.post("/agp/capabilities", capability_body(links[2], operations=["read"]), format="json"),
                 409, "AGP_DELEGATION_SCOPE_VIOLATION")
    assert not Capability.objects.exists()


def test_it_lists_capabilities_by_agent_and_delegation(api):
    delegation = f.root_delegation()
    mine = f.capability(delegation)
    f.capability(f.root_delegation())
    response = api.get("/agp/capabilities", {"delegation_id": delegation.delegation_id, "status": "active"})
    assert [i["capability_id"] for i in response.json()["items"]] == [mine.capability_id]
    response = api.get("/agp/capabilities", {"agent_id": delegation.delegate_agent})
    assert [i["capability_id"] for i in response.json()["items"]] == [mine.capability_id]
    assert api.get(f"/agp/capabilities/{mine.capability_id}").json()["tool_id"] == "crm"


# --- skills -------------------------------------------------------------------------------
def test_it_creates_an_http_skill(api):
    response = api.post("/agp/skills", {"type": "Skill", "skill_id": "skl-1", "agent_id": "agent-a",
                                        "name": "CRM", "version": "1.2", "tool_id": "crm", "connector": "http",
                                        "endpoint_url": "https://tools.example/crm"}, format="json")
    assert response.status_code == 201, response.json()
    assert response["Location"] == "http://testserver/agp/skills/skl-1"
    assert (response.json()["status"], response.json()["connector"]) == ("active", "http")
    skill = Skill.objects.get(skill_id="skl-1")
    assert (skill.endpoint_url, skill.tool_id) == ("https://tools.example/crm", "crm")
    assert LedgerEvent.objects.filter(event_type="skill.created", resource_id="skl-1").exists()


def test_it_defaults_to_the_noop_connector(api):
    response = api.post("/agp/skills", {"agent_id": "a", "name": "n", "tool_id": "crm"}, format="json")
    assert response.status_code == 201
    assert (response.json()["connector"], response.json()["endpoint_url"]) == ("noop", "")
    assert Skill.objects.get().connector == "noop"


@pytest.mark.parametrize(("change", "field"), [
    ({"connector": "http"}, "endpoint_url"),
    ({"connector": "http", "endpoint_url": "ftp://tools.example/x"}, "endpoint_url"),
    ({"connector": "http", "endpoint_url": "not a url"}, "endpoint_url"),
    # SSRF at registration: cloud metadata, loopback, private, IPv4-mapped IPv6.
    ({"connector": "http", "endpoint_url": "http://169.254.169.254/latest/meta-data/"}, "endpoint_url"),
    ({"connector": "http", "endpoint_url": "http://localhost:8000/agp/tasks"}, "endpoint_url"),
    ({"connector": "http", "endpoint_url": "http://10.0.0.5/tool"}, "endpoint_url"),
    ({"connector": "http", "endpoint_url": "http://[::ffff:127.0.0.1]/tool"}, "endpoint_url"),
    ({"connector": "grpc"}, "connector"),
    ({"status": "revoked"}, "status"),
])
def test_it_refuses_invalid_skills(api, change, field):
    error = assert_error(api.post("/agp/skills", {"agent_id": "a", "name": "n", "tool_id": "crm", **change},
                                  format="json"), 400, "AGP_INVALID_REQUEST")
    assert field in error["details"]["fields"]
    assert not Skill.objects.exists()


def test_it_lists_skills_by_agent_and_tool(api):
    crm = f.skill(agent_id="agent-a", tool_id="crm")
    f.skill(agent_id="agent-a", tool_id="mail")
    response = api.get("/agp/skills", {"agent_id": "agent-a", "tool_id": "crm"})
    assert [i["skill_id"] for i in response.json()["items"]] == [crm.skill_id]


# --- liability bindings -------------------------------------------------------------------
def test_it_creates_a_liability_binding(api):
    expires = f.later(days=30)
    response = api.post("/agp/liability-bindings", {
        "type": "LiabilityBinding", "binding_id": "lb-1", "root_principal": "alice", "agent_id": "agent-a",
        "liable_party": "Acme Insurance", "coverage": {"currency": "EUR", "amount": 10000},
        "expires_at": iso(expires)}, format="json")
    assert response.status_code == 201, response.json()
    assert response["Location"] == "http://testserver/agp/liability-bindings/lb-1"
    body = response.json()
    assert body["coverage"] == {"currency": "EUR", "amount": 10000}
    assert (body["status"], body["expires_at"]) == ("active", iso(expires))
    binding = LiabilityBinding.objects.get(binding_id="lb-1")
    assert (binding.coverage_currency, int(binding.coverage_amount)) == ("EUR", 10000)
    assert LedgerEvent.objects.filter(event_type="liability_binding.created", resource_id="lb-1").exists()


def test_it_renders_a_binding_without_coverage_as_null(api):
    response = api.post("/agp/liability-bindings", {"root_principal": "alice", "agent_id": "a",
                                                    "liable_party": "Acme"}, format="json")
    assert response.status_code == 201
    assert response.json()["coverage"] is None
    assert response.json()["binding_id"].startswith("lib_")
    assert LiabilityBinding.objects.get().coverage is None


@pytest.mark.parametrize(("change", "field"), [
    ({"coverage": {"currency": "euro", "amount": 1}}, "coverage"),
    ({"coverage": {"currency": "EUR", "amount": -1}}, "coverage"),
    ({"coverage": {"currency": "EUR", "amount": 1, "deductible": 5}}, "coverage"),
    ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ({"liable_party": ""}, "liable_party"),
])
def test_it_refuses_invalid_bindings(api, change, field):
    body = {"root_principal": "alice", "agent_id": "a", "liable_party": "Acme", **change}
    error = assert_error(api.post("/agp/liability-bindings", body, format="json"), 400, "AGP_INVALID_REQUEST")
    assert field in error["details"]["fields"]
    assert not LiabilityBinding.objects.exists()


def test_it_refuses_a_binding_for_a_revoked_agent(api):
    f.revoke("agent", "agent-gone")
    assert_error(api.post("/agp/liability-bindings", {"root_principal": "alice", "agent_id": "agent-gone",
                                                      "liable_party": "Acme"}, format="json"), 409, "AGP_CONFLICT")
    assert not LiabilityBinding.objects.exists()


def test_it_lists_bindings_by_root_principal(api):
    mine = f.liability_binding(root_principal="alice")
    f.liability_binding(root_principal="bob")
    response = api.get("/agp/liability-bindings", {"root_principal": "alice"})
    assert response.status_code == 200
    assert [i["binding_id"] for i in response.json()["items"]] == [mine.binding_id]
    assert api.get(f"/agp/liability-bindings/{mine.binding_id}").json()["liable_party"] == "Acme Insurance"


def test_it_registers_a_private_endpoint_when_private_urls_are_allowed(api, settings):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    response = api.post("/agp/skills", {"agent_id": "a", "name": "n", "tool_id": "crm", "connector": "http",
                                        "endpoint_url": "http://127.0.0.1:9000/tool"}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["endpoint_url"] == "http://127.0.0.1:9000/tool"
    assert Skill.objects.get().endpoint_url == "http://127.0.0.1:9000/tool"


# --- closing a task -----------------------------------------------------------------------
def test_it_closes_an_open_task_and_ledgers_it(api):
    task = f.task(task_id="task-close")

    response = api.patch("/agp/tasks/task-close", {"status": "closed"}, format="json")

    assert response.status_code == 200, response.json()
    assert (response.json()["task_id"], response.json()["status"]) == ("task-close", "closed")
    assert Task.objects.get(pk=task.pk).status == "closed"
    event = LedgerEvent.objects.filter(resource_id="task-close").order_by("sequence").last()
    assert (event.event_type, event.resource_type, event.payload) == (
        "task.closed", "Task", {"from": "open", "to": "closed"})


@pytest.mark.parametrize("status", ["closed", "open"])
def test_it_refuses_to_move_a_closed_task(api, status):
    f.task(task_id="task-shut")
    assert api.patch("/agp/tasks/task-shut", {"status": "closed"}, format="json").status_code == 200
    events = LedgerEvent.objects.count()

    error = assert_error(api.patch("/agp/tasks/task-shut", {"status": status}, format="json"),
                         409, "AGP_INVALID_TRANSITION")

    assert (error["details"]["from"], error["details"]["to"], error["details"]["allowed"]) == ("closed", status, [])
    assert Task.objects.get(task_id="task-shut").status == "closed"
    assert LedgerEvent.objects.count() == events


def test_it_refuses_reopening_an_open_task_as_a_transition(api):
    f.task(task_id="task-open")
    error = assert_error(api.patch("/agp/tasks/task-open", {"status": "open"}, format="json"),
                         409, "AGP_INVALID_TRANSITION")
    assert error["details"]["allowed"] == ["closed"]
    assert Task.objects.get(task_id="task-open").status == "open"
    assert not LedgerEvent.objects.filter(event_type="task.closed").exists()


@pytest.mark.parametrize("body", [{"status": "done"}, {"status": "closed", "title": "x"}, {}])
def test_it_refuses_a_task_patch_with_anything_but_a_status(api, body):
    f.task(task_id="task-strict")
    assert_error(api.patch("/agp/tasks/task-strict", body, format="json"), 400, "AGP_INVALID_REQUEST")
    assert Task.objects.get(task_id="task-strict").status == "open"


def test_it_answers_404_when_closing_an_unknown_task(api):
    assert_error(api.patch("/agp/tasks/task-none", {"status": "closed"}, format="json"), 404, "AGP_NOT_FOUND")
    assert not LedgerEvent.objects.filter(event_type="task.closed").exists()


def test_it_refuses_assigning_a_task_status_directly():
    task = f.task()
    with pytest.raises(AttributeError):
        task.status = "closed"
    assert Task.objects.get(pk=task.pk).status == "open"
