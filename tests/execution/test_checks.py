"""The eleven fail-closed checks (docs/reference/execution.md, docs/reference/governance.md): each one
alone and all at once (the commerce check's cases: test_commerce_checks.py; their query counts:
test_check_queries.py)."""

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agp_project.exactjson import decimal_text
from core.models import LedgerEvent, OutboxMessage
from decision.models import Approval, CommerceSession, Decision, Escalation, ImpactAssessment, PolicyEvaluation
from execution.checks import envelope_checks, parameters_violations
from execution.models import ActionEnvelope, Operation, Payment
from registry.models import Capability, Delegation, Freeze, PolicySet, Revocation, Skill, Task
from tests.execution.factories import THE_CHECKS, check_inputs, failed_checks, make_full_world, make_world

pytestmark = pytest.mark.django_db

URL = "/agp/action-envelopes"


def _iso(value):
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- removing exactly one prerequisite -------------------------------------------------------------------
def _close_task(world, body):
    Task.objects.filter(pk=world.task.pk).update(status="closed")


def _revoke_delegation(world, body):
    Delegation.objects.filter(pk=world.delegation.pk).update(status="revoked", revoked_at=timezone.now())


def _revoke_capability(world, body):
    Capability.objects.filter(pk=world.capability.pk).update(status="revoked")


def _deny_decision(world, body):
    Decision.objects.filter(pk=world.decision.pk).update(outcome="deny")


def _disallow_evaluation(world, body):
    PolicyEvaluation.objects.filter(pk=world.evaluation.pk).update(
        allowed=False, result={"allow": False, "require_approval": True, "approvals_required": 1, "reasons": ["amount over 1000"]})


def _delete_assessment(world, body):
    ImpactAssessment.objects.filter(pk=world.assessment.pk).delete()


def _delete_approval(world, body):
    Approval.objects.filter(pk=world.approval.pk).delete()


def _open_escalation(world, body):
    Escalation.objects.create(escalation_id="esc-open", task=world.task, reason="customer complaint",
                              created_at=timezone.now())


def _close_session(world, body):
    CommerceSession.objects.filter(pk=world.session.pk).update(status="closed")


def _future_created_at(world, body):
    body["created_at"] = _iso(timezone.now() + timedelta(minutes=5))


def _freeze_agent(world, body):
    Freeze.objects.create(freeze_id=f"frz-{world.agent_id}", target_type="agent", target_id=world.agent_id,
                          reason="misbehaving", frozen_by="ops", created_at=timezone.now())


REMOVALS = {
    "task": _close_task,
    "delegation": _revoke_delegation,
    "capability": _revoke_capability,
    "decision": _deny_decision,
    "policy_evaluation": _disallow_evaluation,
    "impact_assessment": _delete_assessment,
    "approval": _delete_approval,
    "escalation": _open_escalation,
    "commerce": _close_session,
    "created_at": _future_created_at,
    "freeze": _freeze_agent,
}


def _assert_nothing_stored(world, action_id):
    assert not ActionEnvelope.objects.filter(action_id=action_id).exists()
    assert Operation.objects.count() == 0
    assert Payment.objects.count() == 0
    assert OutboxMessage.objects.count() == 0
    session = CommerceSession.objects.get(pk=world.session.pk)
    assert (session.reserved_amount, session.spent_amount) == (Decimal("0"), Decimal("0"))


def test_it_accepts_the_complete_world(api):
    world = make_full_world()
    response = api.post(URL, world.envelope_request(), format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 202, response.json()
    assert Operation.objects.count() == 1


@pytest.mark.parametrize("prefer", ["respond-async", None])
@pytest.mark.parametrize("check", THE_CHECKS)
def test_it_rejects_naming_exactly_the_removed_prerequisite(api, check, prefer):
    world = make_full_world()
    body = world.envelope_request()
    REMOVALS[check](world, body)
    headers = {"HTTP_PREFER": prefer} if prefer else {}

    response = api.post(URL, body, format="json", **headers)

    assert response.status_code == 422, response.json()
    error = response.json()["error"]
    assert error["code"] == "AGP_PREREQUISITE_FAILED"
    assert error["retryable"] is False
    assert [item["check"] for item in error["details"]["failed_checks"]] == [check]
    assert error["details"]["failed_checks"][0]["reason"]
    _assert_nothing_stored(world, body["action_id"])
    event = LedgerEvent.objects.get(event_type="envelope.rejected", resource_id=body["action_id"])
    assert [item["check"] for item in event.payload["failed_checks"]] == [check]
    assert event.payload["mode"] == ("execute" if prefer else "validate")


def test_it_lists_every_failed_check_when_all_prerequisites_are_missing(api):
    world = make_full_world()
    body = world.envelope_request()
    for removal in REMOVALS.values():
        removal(world, body)

    response = api.post(URL, body, format="json", HTTP_PREFER="respond-async")

    assert response.status_code == 422
    failed = response.json()["error"]["details"]["failed_checks"]
    assert [item["check"] for item in failed] == THE_CHECKS
    assert all(item["reason"] for item in failed)
    _assert_nothing_stored(world, body["action_id"])


def test_it_lists_every_failed_check_for_references_that_do_not_exist(api):
    world = make_full_world()
    body = world.envelope_request(task_id="no-such-task", capability_token_ref="no-such-cap",
                                  decision_ref="no-such-decision", policy_decision_ref="no-such-evaluation",
                                  created_at=_iso(timezone.now() + timedelta(hours=1)))
    Escalation.objects.create(escalation_id="esc-on-action", action_id=body["action_id"], reason="stop",
                              created_at=timezone.now())

    response = api.post(URL, body, format="json", HTTP_PREFER="respond-async")

    assert response.status_code == 422
    failed = {item["check"]: item["reason"] for item in response.json()["error"]["details"]["failed_checks"]}
    # With no task there is no root principal, no rule-5 answer and no action class: fail closed.
    assert list(failed) == ["task", "delegation", "capability", "decision", "policy_evaluation",
                            "impact_assessment", "escalation", "commerce", "created_at"]
    assert "does not exist" in failed["task"]
    _assert_nothing_stored(world, body["action_id"])


# --- the finer rules of each check -------------------------------------------------------------------------
def test_it_passes_every_check_of_a_low_risk_read():
    world = make_world()
    report = envelope_checks(inputs=check_inputs(world))
    assert report.passed, report.failed
    assert report.commerce_session_ref is None and report.approval_ref == world.approval.approval_id
    assert report.delegation_ref == world.delegation.delegation_id


def test_it_fails_delegation_when_an_ancestor_expired():
    world = make_world()
    Delegation.objects.filter(pk=world.root_delegation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == ["delegation"]
    assert world.root_delegation.delegation_id in report.result("delegation")["reason"]


def test_it_fails_delegation_when_an_ancestor_is_revoked_without_cascade():
    world = make_world()
    Delegation.objects.filter(pk=world.root_delegation.pk).update(status="revoked")
    assert failed_checks(envelope_checks(inputs=check_inputs(world))) == ["delegation"]


def test_it_fails_delegation_and_capability_when_the_agent_is_revoked():
    world = make_world()
    now = timezone.now()
    Revocation.objects.create(revocation_id="rev-agent", target_type="agent", target_id=world.agent_id,
                              revoked_at=now, created_at=now)
    assert failed_checks(envelope_checks(inputs=check_inputs(world))) == ["delegation", "capability"]


@pytest.mark.parametrize("target, failed", [
    ("capability", ["capability"]),
    ("skill", ["capability"]),
    ("liability_binding", ["commerce"]),
    ("orchestrator", ["delegation"]),
])
def test_a_revocation_record_stops_a_record_whose_status_still_says_active(target, failed):
    world = make_full_world()
    target_type, target_id = {
        "capability": ("capability", world.capability.capability_id),
        "skill": ("skill", world.skill.skill_id),
        "liability_binding": ("liability_binding", world.binding.binding_id),
        # An agent in the middle of the chain: its links still say active.
        "orchestrator": ("agent", world.orchestrator_id),
    }[target]
    now = timezone.now()
    Revocation.objects.create(revocation_id="rev-1", target_type=target_type, target_id=target_id,
                              revoked_at=now, created_at=now)
    report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == failed


def test_it_takes_the_newest_skill_not_revoked():
    world = make_world()
    newer = Skill.objects.create(**{**{f.attname: getattr(world.skill, f.attname) for f in Skill._meta.concrete_fields
                                       if f.attname != "id"}, "skill_id": "skill-newer",
                                    "created_at": world.skill.created_at + timedelta(seconds=1)})
    now = timezone.now()
    Revocation.objects.create(revocation_id="rev-newer", target_type="skill", target_id=newer.skill_id,
                              revoked_at=now, created_at=now)
    report = envelope_checks(inputs=check_inputs(world))
    assert report.passed, report.failed
    assert report.skill_id == world.skill.skill_id


def test_an_approval_recorded_after_a_rejection_stands():
    world = make_full_world()
    Approval.objects.create(approval_id="apr-reject", decision=world.decision, approver="cfo", verdict="rejected",
                            created_at=timezone.now())
    Approval.objects.create(approval_id="apr-again", decision=world.decision, approver="cfo", verdict="approved",
                            created_at=timezone.now())
    report = envelope_checks(inputs=check_inputs(world))
    assert report.passed, report.failed
    assert report.approval_ref == "apr-again"


def test_it_uses_another_valid_delegation_but_then_fails_the_capability_issued_under_the_revoked_one():
    world = make_world()
    from tests.execution.factories import make_delegation
    make_delegation(root_principal=world.root_principal, delegator=world.orchestrator_id, delegate=world.agent_id,
                    scope=["crm:*"], parent=world.root_delegation)
    Delegation.objects.filter(pk=world.delegation.pk).update(status="revoked")
    report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == ["capability"]
    assert "was issued under delegation" in report.result("capability")["reason"]


@pytest.mark.parametrize("change, expected", [
    ({"expires_at": timezone.now() - timedelta(seconds=1)}, "expired"),
    ({"agent_id": "someone-else"}, "belongs to another agent"),
    ({"tool_id": "mail"}, "is for tool"),
    ({"operations": ["read"]}, "does not cover operation"),
])
def test_it_fails_capability_rules(change, expected):
    world = make_world()
    Capability.objects.filter(pk=world.capability.pk).update(**change)
    report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == ["capability"]
    assert expected in report.result("capability")["reason"]


def test_it_fails_capability_outside_the_delegation_scope():
    world = make_world()
    Delegation.objects.filter(pk=world.delegation.pk).update(authority_scope=["crm:read"])
    report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == ["capability"]
    assert "outside the authority scope" in report.result("capability")["reason"]


def test_it_accepts_a_wildcard_delegation_scope():
    world = make_world()
    Delegation.objects.filter(pk=world.delegation.pk).update(authority_scope=["crm:*"])
    assert envelope_checks(inputs=check_inputs(world)).passed


@pytest.mark.parametrize("parameters, expected", [
    ({"limit": 101}, "above the maximum"),
    ({"limit": 0}, "below the minimum"),
    ({"limit": "ten"}, "not a number"),
    ({"limit": True}, "not a number"),
])
def test_it_fails_parameters_outside_the_allowed_ranges(parameters, expected):
    world = make_world()
    report = envelope_checks(inputs=check_inputs(world, parameters=parameters))
    assert failed_checks(report) == ["capability"]
    assert expected in report.result("capability")["reason"]


def test_it_checks_enum_ranges_and_fails_closed_on_unknown_range_shapes():
    assert parameters_violations({"currency": "USD"}, {"currency": {"enum": ["USD", "EUR"]}}) == []
    assert parameters_violations({"currency": "GBP"}, {"currency": {"enum": ["USD"]}})
    assert parameters_violations({"flag": 1}, {"flag": {"enum": [True]}})
    assert parameters_violations({"x": 1}, {"x": {"between": [0, 2]}})
    assert parameters_violations({"other": 5}, {"x": {"min": 0}}) == []


@pytest.mark.parametrize("change", [{"status": "revoked"}, {"tool_id": "mail"}])
def test_it_fails_capability_without_an_active_skill_for_the_tool(change):
    world = make_world()
    Skill.objects.filter(pk=world.skill.pk).update(**change)
    report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == ["capability"]
    assert "no active skill" in report.result("capability")["reason"]


@pytest.mark.parametrize("change", [{"status": "draft"}, {"outcome": "escalate"}])
def test_it_fails_decision_rules(change):
    world = make_world()
    Decision.objects.filter(pk=world.decision.pk).update(**change)
    assert failed_checks(envelope_checks(inputs=check_inputs(world))) == ["decision"]


def test_it_fails_a_decision_of_another_task():
    world, other = make_world(), make_world()
    report = envelope_checks(inputs=check_inputs(world, decision_ref=other.decision.decision_id))
    assert "decision" in failed_checks(report)
    assert "another task" in report.result("decision")["reason"]


def test_it_fails_policy_evaluation_when_the_ruleset_changed_or_the_set_is_revoked():
    world = make_world()
    PolicySet.objects.filter(pk=world.policy_set.pk).update(ruleset_hash="sha256:" + "0" * 64, status="revoked")
    report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == ["policy_evaluation"]
    assert "revoked" in report.result("policy_evaluation")["reason"]
    assert "ruleset changed" in report.result("policy_evaluation")["reason"]


def test_it_fails_policy_evaluation_of_another_agent():
    world = make_world()
    PolicyEvaluation.objects.filter(pk=world.evaluation.pk).update(agent_id="someone-else")
    assert failed_checks(envelope_checks(inputs=check_inputs(world))) == ["policy_evaluation"]


def test_it_fails_impact_assessment_that_says_do_not_proceed():
    world = make_full_world()
    ImpactAssessment.objects.filter(pk=world.assessment.pk).update(recommendation="do_not_proceed")
    report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == ["impact_assessment"]


def test_it_requires_no_assessment_below_rule_five():
    world = make_world(action_class="transact", risk_level="medium")
    assert world.assessment is None
    assert envelope_checks(inputs=check_inputs(world)).passed


def test_it_requires_approval_when_the_evaluation_says_so_and_not_otherwise():
    world = make_world(require_approval=True, approval=False)
    assert failed_checks(envelope_checks(inputs=check_inputs(world))) == ["approval"]
    relaxed = make_world(require_approval=False, approval=False)
    report = envelope_checks(inputs=check_inputs(relaxed))
    assert report.passed and report.approval_ref is None


def test_it_fails_an_expired_approval_and_one_rejected_later():
    world = make_full_world()
    Approval.objects.filter(pk=world.approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert failed_checks(envelope_checks(inputs=check_inputs(world))) == ["approval"]
    other = make_full_world()
    Approval.objects.create(approval_id="apr-later-reject", decision=other.decision, approver="cfo",
                            verdict="rejected", created_at=timezone.now() + timedelta(seconds=1))
    report = envelope_checks(inputs=check_inputs(other))
    assert failed_checks(report) == ["approval"]
    assert "rejected by a later approval" in report.result("approval")["reason"]


def test_it_blocks_on_upheld_but_not_on_dismissed_escalations():
    world = make_world()
    now = timezone.now()
    Escalation.objects.create(escalation_id="esc-dismissed", decision=world.decision, status="resolved",
                              outcome="dismissed", resolved_at=now, created_at=now)
    assert envelope_checks(inputs=check_inputs(world)).passed
    Escalation.objects.create(escalation_id="esc-upheld", decision=world.decision, status="resolved",
                              outcome="upheld", resolved_at=now, created_at=now)
    report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == ["escalation"]
    assert "esc-upheld" in report.result("escalation")["reason"]


def test_it_allows_created_at_up_to_sixty_seconds_ahead():
    world = make_world()
    assert envelope_checks(inputs=check_inputs(world, created_at=_iso(timezone.now() + timedelta(seconds=55)))).passed


def test_an_all_freeze_fails_even_an_envelope_whose_task_does_not_exist():
    world = make_world()
    Freeze.objects.create(freeze_id="frz-all", target_type="all", reason="incident", frozen_by="ops",
                          created_at=timezone.now())
    report = envelope_checks(inputs=check_inputs(world, task_id="no-such-task"))
    assert "freeze" in failed_checks(report) and "task" in failed_checks(report)
    assert report.freezes == [{"freeze_id": "frz-all", "target_type": "all", "target_id": None}]


def test_it_prefers_the_capability_s_delegation_and_names_the_five_newest_blocking_escalations():
    world = make_full_world()
    from tests.execution.factories import make_delegation
    # Three candidates (the preferred one created first, so newest-first alone would not
    # pick it) and seven blocking escalations.
    for _ in range(2):
        make_delegation(root_principal=world.root_principal, delegator=world.orchestrator_id,
                        delegate=world.agent_id, scope=["crm:*"], parent=world.root_delegation)
    now = timezone.now()
    for i in range(7):
        Escalation.objects.create(escalation_id=f"esc-{i}", task=world.task, reason="stop", created_at=now,
                                  **({"status": "resolved", "outcome": "upheld", "resolved_at": now} if i % 2 else {}))

    report = envelope_checks(inputs=check_inputs(world))

    assert failed_checks(report) == ["escalation"]
    assert report.delegation_ref == world.delegation.delegation_id
    # The five recorded last, newest first, as escalations_blocking orders them.
    assert report.result("escalation")["reason"] == (
        "blocking escalation(s) on the task, decision or action: 'esc-6' (open), 'esc-5' (upheld), "
        "'esc-4' (open), 'esc-3' (upheld), 'esc-2' (open)")


def test_it_reports_money_datetimes_and_ranges_as_stored():
    world = make_full_world()
    CommerceSession.objects.filter(pk=world.session.pk).update(spent_amount=Decimal("120.5"),
                                                               reserved_amount=Decimal("40"))
    expires_at = timezone.now() - timedelta(seconds=1)
    Capability.objects.filter(pk=world.capability.pk).update(expires_at=expires_at)
    session = CommerceSession.objects.get(pk=world.session.pk)
    capability = Capability.objects.get(pk=world.capability.pk)

    report = envelope_checks(inputs=check_inputs(world))

    assert failed_checks(report) == ["capability", "commerce"]
    room = session.amount_limit - session.spent_amount - session.reserved_amount
    assert f"has {decimal_text(room)} USD left, less than 50" in report.result("commerce")["reason"]
    assert f"expired at {capability.expires_at.isoformat()}" in report.result("capability")["reason"]
    assert report.allowed_parameter_ranges == capability.allowed_parameter_ranges


def test_it_fails_closed_on_an_empty_reference():
    """An empty decision reference names no escalation target and no decision."""
    world = make_world()
    Escalation.objects.create(escalation_id="esc-on-task", task=world.task, reason="stop", created_at=timezone.now())
    report = envelope_checks(inputs=replace(check_inputs(world), decision_ref=""))
    assert failed_checks(report) == ["decision", "escalation"]
    assert "'esc-on-task' (open)" in report.result("escalation")["reason"]


# --- server order, never client-settable timestamps ------------------------------------------------------
def test_it_honours_a_rejection_recorded_after_the_approval_even_when_backdated():
    world = make_full_world()
    Approval.objects.create(approval_id="apr-backdated", decision=world.decision, approver="human-2",
                            verdict="rejected", expires_at=timezone.now() + timedelta(hours=1),
                            created_at=world.approval.created_at - timedelta(days=1))

    report = envelope_checks(inputs=check_inputs(world))

    assert failed_checks(report) == ["approval"]
    assert "rejected by a later approval" in report.result("approval")["reason"]


def test_it_takes_the_assessment_recorded_last_not_the_one_dated_latest():
    world = make_full_world()
    ImpactAssessment.objects.filter(pk=world.assessment.pk).update(
        assessed_at=timezone.now() + timedelta(days=30))
    ImpactAssessment.objects.create(
        assessment_id="ia-later", task=world.task, decision=world.decision, agent_id="assessor-2",
        time_horizons=[{"horizon": "immediate", "consequences": [], "severity": "severe", "reversible": False}],
        recommendation="do_not_proceed", assessed_at=timezone.now(), created_at=timezone.now())

    report = envelope_checks(inputs=check_inputs(world))

    assert failed_checks(report) == ["impact_assessment"]
    assert "'ia-later' recommends do_not_proceed" in report.result("impact_assessment")["reason"]


def test_it_picks_the_delegation_recorded_last_not_the_one_with_the_latest_accepted_at():
    world = make_world()
    from tests.execution.factories import make_delegation
    later = make_delegation(root_principal=world.root_principal, delegator=world.orchestrator_id,
                            delegate=world.agent_id, scope=["crm:*"], parent=world.root_delegation)
    Delegation.objects.filter(pk=later.pk).update(accepted_at=timezone.now() - timedelta(days=30))

    # No capability to prefer a delegation by: the newest usable one is taken.
    report = envelope_checks(inputs=check_inputs(world, capability_token_ref="cap-none"))

    assert report.delegation_ref == later.delegation_id
    assert report.result("delegation")["passed"] is True


def test_it_refuses_a_tool_registered_with_a_colon_before_such_ids_were_refused():
    # Rows written before the tool-id rule: "pay:*" would cover this tool too, so no scope
    # can be read as granting it. Written with the ORM (the API refuses such ids now).
    world = make_world(tool_id="pay:admin", operation="refund")

    report = envelope_checks(inputs=check_inputs(world))

    assert failed_checks(report) == ["capability"]
    assert "contains ':' or '*'" in report.result("capability")["reason"]
