"""Governance binds the exact action and the exact agent (docs/reference/governance.md), through the API.

Policy evaluations are made with ``POST /agp/policy-evaluations`` for a stated ``action``;
an envelope may cite one only for that very action (check 5, compared by ``action_hash``),
and only the envelope's own agent's task, decision and evaluation count (checks 1, 4, 5):
an approval or an impact assessment counts only through its own decision. Every refusal
names the record and, for another agent's record, both agents; nothing is stored or run.
"""

from decimal import Decimal

import pytest

from core.models import LedgerEvent
from decision.models import CommerceSession
from execution.models import ActionEnvelope, Operation, Payment, Receipt
from execution.runner import operation_execute
from tests.execution.factories import make_full_world, make_world
from tests.execution.receiver import receiver  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

URL = "/agp/action-envelopes"

# Rulesets that read the action the evaluation is made for (input.action, docs/reference/governance.md).
MAIL_RULESET = """package mail

import rego.v1

default allow := false

allow if {
    input.action.tool_id == "mail"
    input.action.operation == "send"
    endswith(input.action.parameters.to, "@umbrella.example")
}

deny contains "e-mail to an external recipient" if not endswith(input.action.parameters.to, "@umbrella.example")
"""

PAYMENTS_RULESET = """package payments

import rego.v1

default allow := false

allow if input.action.parameters.amount <= 1000

deny contains "amount over 1000" if input.action.parameters.amount > 1000
"""


def action_of(body: dict) -> dict:
    return {"tool_id": body["tool_id"], "operation": body["operation"], "parameters": body["parameters"]}


def register(api, ruleset: str, **fields) -> dict:
    response = api.post("/agp/policy-sets", {"name": "binding", "version": "1", "ruleset": ruleset, **fields},
                        format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def evaluate(api, world, *, action: dict | None, policy_set_id: str | None = None, agent_id: str | None = None,
             input: dict | None = None) -> dict:
    """A policy evaluation made through the API for ``action`` (None: the request names none)."""
    body = {"policy_set_id": policy_set_id or world.policy_set.policy_set_id, "task_id": world.task.task_id,
            "agent_id": agent_id or world.agent_id, "input": input or {"action_class": world.task.action_class}}
    if action is not None:
        body["action"] = action
    response = api.post("/agp/policy-evaluations", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def decide(api, world, evaluation: dict) -> dict:
    """An approving decision of the world's agent citing ``evaluation``, finalised through the API."""
    created = api.post("/agp/decisions", {"task_id": world.task.task_id, "agent_id": world.agent_id,
                                          "outcome": "approve", "rationale": "within policy",
                                          "policy_evaluation_ref": evaluation["evaluation_id"]}, format="json")
    assert created.status_code == 201, created.json()
    finalised = api.patch(f"/agp/decisions/{created.json()['decision_id']}", {"status": "finalised"}, format="json")
    assert finalised.status_code == 200, finalised.json()
    return finalised.json()


def refused(response) -> dict[str, str]:
    """The failed checks of a 422 ``AGP_PREREQUISITE_FAILED``, check -> reason, in order."""
    assert response.status_code == 422, response.json()
    error = response.json()["error"]
    assert error["code"] == "AGP_PREREQUISITE_FAILED"
    return {item["check"]: item["reason"] for item in error["details"]["failed_checks"]}


def assert_nothing_accepted(action_id: str) -> None:
    assert not ActionEnvelope.objects.filter(action_id=action_id).exists()
    assert not Operation.objects.filter(envelope_id=action_id).exists()
    assert not Payment.objects.filter(envelope_id=action_id).exists()
    assert LedgerEvent.objects.filter(event_type="envelope.rejected", resource_id=action_id).exists()


def run(operation_id: str) -> str:
    return operation_execute(operation_id=operation_id, executor="worker-test/pid-1")


# --- check 5: the evaluation's action is the envelope's -----------------------------------------------------
@pytest.mark.parametrize(("evaluated", "differs"), [
    ({"parameters": {"limit": 11}}, "parameters"),
    ({"tool_id": "mail"}, "tool_id"),
    ({"operation": "delete"}, "operation"),
    ({"tool_id": "mail", "operation": "delete", "parameters": {}}, "tool_id, operation, parameters"),
], ids=["other parameters", "another tool", "another operation", "another everything"])
def test_an_evaluation_cited_for_another_action_fails_check_five(api, evaluated, differs):
    world = make_world()
    body = world.envelope_request()
    evaluation = evaluate(api, world, action={**action_of(body), **evaluated})
    assert evaluation["result"]["allow"] is True  # allowed: but for another action
    decision = decide(api, world, evaluation)  # made on that evaluation: only check 5 is left to refuse

    for prefer in ({}, {"HTTP_PREFER": "respond-async"}):
        cited = {**body, "action_id": f"{body['action_id']}-{len(prefer)}", "decision_ref": decision["decision_id"],
                 "policy_decision_ref": evaluation["evaluation_id"]}
        failed = refused(api.post(URL, cited, format="json", **prefer))

        assert failed == {"policy_evaluation": f"policy evaluation {evaluation['evaluation_id']!r} was evaluated "
                                               f"for another action ({differs} not the envelope's)"}
        assert_nothing_accepted(cited["action_id"])


def test_an_evaluation_made_for_no_action_clears_none(api):
    world = make_world()
    evaluation = evaluate(api, world, action=None)
    assert evaluation["action"] is None and evaluation["action_hash"] is None

    body = world.envelope_request(policy_decision_ref=evaluation["evaluation_id"],
                                  decision_ref=decide(api, world, evaluation)["decision_id"])
    failed = refused(api.post(URL, body, format="json", HTTP_PREFER="respond-async"))

    assert failed == {"policy_evaluation": f"policy evaluation {evaluation['evaluation_id']!r} was evaluated for "
                                           f"another action: it names no action, so it clears none"}
    assert_nothing_accepted(body["action_id"])


def test_an_evaluation_made_for_exactly_the_envelope_s_action_clears_it(api):
    world = make_world()
    body = world.envelope_request()
    evaluation = evaluate(api, world, action=action_of(body))
    decision = decide(api, world, evaluation)

    response = api.post(URL, {**body, "policy_decision_ref": evaluation["evaluation_id"],
                              "decision_ref": decision["decision_id"]}, format="json", HTTP_PREFER="respond-async")

    assert response.status_code == 202, response.json()
    envelope = ActionEnvelope.objects.get(action_id=body["action_id"])
    assert envelope.policy_decision_ref == evaluation["evaluation_id"]
    assert all(item["passed"] for item in envelope.checks)


# --- the e-mail example ---------------------------------------------------------------------------------
def test_an_evaluation_for_an_internal_recipient_does_not_send_to_an_external_one_but_its_twin_runs(
        api, settings, receiver):
    settings.AGP_ALLOW_PRIVATE_URLS = True  # the mail tool listens on 127.0.0.1
    internal = {"to": "alice@umbrella.example", "subject": "Q3 figures"}
    external = {"to": "leak@evil.example", "subject": "Q3 figures"}
    world = make_world(action_class="communicate", tool_id="mail", operation="send", parameters=internal,
                       allowed_parameter_ranges={}, connector="http", endpoint_url=receiver.url("/mail"))
    policy_set = register(api, MAIL_RULESET, tests=[
        {"name": "internal", "input": {"action": {"tool_id": "mail", "operation": "send", "parameters": internal}},
         "expect": {"allow": True}},
        {"name": "external", "input": {"action": {"tool_id": "mail", "operation": "send", "parameters": external}},
         "expect": {"allow": False, "deny": ["e-mail to an external recipient"]}}])
    to_alice = evaluate(api, world, policy_set_id=policy_set["policy_set_id"],
                        action={"tool_id": "mail", "operation": "send", "parameters": internal})
    to_leak = evaluate(api, world, policy_set_id=policy_set["policy_set_id"],
                       action={"tool_id": "mail", "operation": "send", "parameters": external})
    assert (to_alice["result"]["allow"], to_leak["result"]["allow"]) == (True, False)
    decision = decide(api, world, to_alice)

    # The attack: the allowed evaluation cited by an envelope sending to leak@evil.example.
    leak = world.envelope_request(parameters=external, decision_ref=decision["decision_id"],
                                  policy_decision_ref=to_alice["evaluation_id"])
    assert refused(api.post(URL, leak, format="json", HTTP_PREFER="respond-async")) == {
        "policy_evaluation": f"policy evaluation {to_alice['evaluation_id']!r} was evaluated for another action "
                             f"(parameters not the envelope's)"}
    assert_nothing_accepted(leak["action_id"])
    # Citing the evaluation really made for it: the policy's own denial (and the decision, made
    # on the evaluation for alice, is not about this action).
    honest = {**leak, "action_id": leak["action_id"] + "-2", "policy_decision_ref": to_leak["evaluation_id"]}
    failed = refused(api.post(URL, honest, format="json", HTTP_PREFER="respond-async"))
    assert failed["policy_evaluation"] == (f"policy evaluation {to_leak['evaluation_id']!r} did not allow the action "
                                           f"(e-mail to an external recipient)")
    assert failed["decision"].endswith("it is about another action")
    assert_nothing_accepted(honest["action_id"])

    # The allowed twin runs, and its receipt says which evaluation of which action cleared it.
    twin = world.envelope_request(parameters=internal, decision_ref=decision["decision_id"],
                                  policy_decision_ref=to_alice["evaluation_id"])
    accepted = api.post(URL, twin, format="json", HTTP_PREFER="respond-async")
    assert accepted.status_code == 202, accepted.json()
    assert run(accepted.json()["operation_id"]) == "succeeded"

    [sent] = receiver.requests  # the tool was called once, for alice, and never for leak@evil.example
    assert sent.json()["parameters"] == internal
    receipt = Receipt.objects.get(action_id=twin["action_id"])
    assert receipt.status == "succeeded"
    assert (receipt.governance["evaluation_id"], receipt.governance["action_hash"]) == (
        to_alice["evaluation_id"], to_alice["action_hash"])


# --- the amount example ---------------------------------------------------------------------------------
def test_an_evaluation_of_amount_ten_does_not_clear_a_transact_of_five_thousand(api):
    world = make_world(action_class="transact", tool_id="payments", operation="pay",
                       allowed_parameter_ranges={"amount": {"min": 0, "max": 10000}, "currency": {"enum": ["USD"]}},
                       amount_limit=Decimal("10000"), spend_limit=Decimal("10000"), root_spend_limit=Decimal("10000"),
                       parameters={"amount": 10, "currency": "USD"})
    policy_set = register(api, PAYMENTS_RULESET)
    ten = evaluate(api, world, policy_set_id=policy_set["policy_set_id"],
                   action={"tool_id": "payments", "operation": "pay", "parameters": {"amount": 10, "currency": "USD"}})
    large = {"amount": 5000, "currency": "USD"}
    five_thousand = evaluate(api, world, policy_set_id=policy_set["policy_set_id"],
                             action={"tool_id": "payments", "operation": "pay", "parameters": large})
    assert ten["result"]["allow"] is True
    assert five_thousand["result"] == {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": ["amount over 1000"]}
    decision = decide(api, world, ten)

    spend = world.envelope_request(parameters=large, policy_decision_ref=ten["evaluation_id"],
                                   decision_ref=decision["decision_id"])
    assert refused(api.post(URL, spend, format="json", HTTP_PREFER="respond-async")) == {
        "policy_evaluation": f"policy evaluation {ten['evaluation_id']!r} was evaluated for another action "
                             f"(parameters not the envelope's)"}
    assert_nothing_accepted(spend["action_id"])
    session = CommerceSession.objects.get(pk=world.session.pk)
    assert (session.reserved_amount, session.spent_amount) == (Decimal("0"), Decimal("0"))

    # The amount it was made for goes through, and exactly that is spent.
    small = world.envelope_request(parameters={"amount": 10, "currency": "USD"},
                                   policy_decision_ref=ten["evaluation_id"], decision_ref=decision["decision_id"])
    accepted = api.post(URL, small, format="json", HTTP_PREFER="respond-async")
    assert accepted.status_code == 202, accepted.json()
    assert run(accepted.json()["operation_id"]) == "succeeded"
    session.refresh_from_db()
    assert (session.reserved_amount, session.spent_amount) == (Decimal("0"), Decimal("10"))


# --- checks 1, 4, 5: the envelope's agent is the agent of everything it cites -----------------------------
def test_an_agent_citing_another_agent_s_task_decision_and_approval_fails_every_check_that_names_them(api):
    """The cross-agent attack: agent B, delegated by the same principal, acts on agent A's
    critical task citing A's finalised decision, A's evaluation, and so A's impact assessment
    and the human approval granted on A's decision."""
    a = make_full_world()
    b = make_full_world(root_principal=a.root_principal)
    body = b.envelope_request(task_id=a.task.task_id, decision_ref=a.decision.decision_id,
                              policy_decision_ref=a.evaluation.evaluation_id)

    failed = refused(api.post(URL, body, format="json", HTTP_PREFER="respond-async"))

    owner, intruder = repr(a.agent_id), repr(b.agent_id)
    assert failed == {
        "task": f"task {a.task.task_id!r} belongs to agent {owner}, not to the envelope's agent {intruder}",
        "decision": f"decision {a.decision.decision_id!r} belongs to agent {owner}, not to the envelope's agent "
                    f"{intruder}",
        "policy_evaluation": f"policy evaluation {a.evaluation.evaluation_id!r} belongs to agent {owner}, not to "
                             f"the envelope's agent {intruder}",
        "commerce": failed["commerce"],
    }
    # B's commerce session is for its own task: on A's task it has none (listed too).
    assert "no open, unexpired commerce session" in failed["commerce"]
    assert_nothing_accepted(body["action_id"])
    for world in (a, b):
        session = CommerceSession.objects.get(pk=world.session.pk)
        assert session.reserved_amount == Decimal("0")


@pytest.mark.parametrize(("borrowed", "expected"), [
    ("decision", {"decision": ["is for another task", "belongs to agent"],
                  # A's assessment is of A's decision and A's task: it does not count for B's.
                  "impact_assessment": ["needs an impact assessment"]}),
    # B's own decision was made on B's evaluation: beside A's, it is about another action.
    ("evaluation", {"decision": ["about another action"], "policy_evaluation": ["is for another task",
                                                                               "belongs to agent"]}),
    ("decision and evaluation", {"decision": ["belongs to agent"], "impact_assessment": ["needs an impact"],
                                 "policy_evaluation": ["belongs to agent"]}),
])
def test_an_agent_citing_another_agent_s_records_on_its_own_task_fails_naming_both_agents(api, borrowed, expected):
    a = make_full_world()
    b = make_full_world(root_principal=a.root_principal)
    overrides = {}
    if "decision" in borrowed:
        overrides["decision_ref"] = a.decision.decision_id  # and with it A's approval and assessment
    if "evaluation" in borrowed:
        overrides["policy_decision_ref"] = a.evaluation.evaluation_id
    body = b.envelope_request(**overrides)

    failed = refused(api.post(URL, body, format="json", HTTP_PREFER="respond-async"))

    assert list(failed) == [check for check in ("decision", "policy_evaluation", "impact_assessment")
                            if check in expected]
    for check, phrases in expected.items():
        assert all(phrase in failed[check] for phrase in phrases), failed[check]
        if "belongs to agent" in phrases:
            assert f"belongs to agent {a.agent_id!r}, not to the envelope's agent {b.agent_id!r}" in failed[check]
    assert_nothing_accepted(body["action_id"])


# --- check 4: the decision is about the action of the evaluation it was made on ---------------------------
def test_a_decision_and_its_approval_made_for_one_action_do_not_clear_another(api):
    # A critical refund of 50: evaluated, decided, assessed and approved by a human. The same
    # decision cited beside a new evaluation for 100 would carry that approval to an action
    # nobody approved.
    world = make_full_world()
    body = world.envelope_request(parameters={"amount": 100, "currency": "USD"})
    hundred = evaluate(api, world, action=action_of(body), input={"action_class": "transact", "amount": 100})
    assert hundred["result"]["allow"] is True

    failed = refused(api.post(URL, {**body, "policy_decision_ref": hundred["evaluation_id"]}, format="json",
                              HTTP_PREFER="respond-async"))

    assert failed == {"decision": f"decision {world.decision.decision_id!r} was made on policy evaluation "
                                  f"{world.evaluation.evaluation_id!r}, not the envelope's "
                                  f"{hundred['evaluation_id']!r}: it is about another action"}
    assert_nothing_accepted(body["action_id"])
    assert CommerceSession.objects.get(pk=world.session.pk).reserved_amount == Decimal("0")


def test_a_decision_made_on_no_evaluation_clears_no_action(api):
    world = make_world()
    created = api.post("/agp/decisions", {"task_id": world.task.task_id, "agent_id": world.agent_id,
                                          "outcome": "approve", "rationale": "looks fine"}, format="json")
    assert created.status_code == 201, created.json()
    decision_id = created.json()["decision_id"]
    assert api.patch(f"/agp/decisions/{decision_id}", {"status": "finalised"}, format="json").status_code == 200
    body = world.envelope_request(decision_ref=decision_id)

    failed = refused(api.post(URL, body, format="json"))

    assert failed == {"decision": f"decision {decision_id!r} names no policy evaluation, so it was made for no "
                                  f"action"}
