"""Check 7: only people's approvals count, never the requester's own, once per person, M of N.

With authentication on, an approval counts when a person's client recorded it, its approver is
not the acting agent, and it is not by the client or the person who recorded the decision or
its evaluation; approvals are counted by distinct subjects, and a rejection withdraws every
approval recorded before it.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from decision.models import Approval, Decision, PolicyEvaluation
from execution.checks import envelope_checks
from tests.execution.factories import check_inputs, make_full_world
from tests.identity import client_api

pytestmark = pytest.mark.django_db


def approve(world, approver: str, *, kind: str = "human", client: str | None = None,
            verdict: str = "approved") -> Approval:
    return Approval.objects.create(
        approval_id=f"apr-{Approval.objects.count()}", decision=world.decision, approver=approver, verdict=verdict,
        approver_kind=kind, approver_client=client or f"client-of-{approver}",
        expires_at=timezone.now() + timedelta(hours=1), created_at=timezone.now())


def world_needing(approvals: int):
    """A critical action whose policy asks for ``approvals`` people, with no approval yet."""
    world = make_full_world(approval=False)
    result = {**world.evaluation.result, "approvals_required": approvals}
    PolicyEvaluation.objects.filter(pk=world.evaluation.pk).update(result=result)
    return world


def reason(world) -> str:
    report = envelope_checks(inputs=check_inputs(world))
    outcome = report.result("approval")
    return ("passed: " if outcome["passed"] else "failed: ") + outcome["reason"]


def test_an_operators_approval_clears_nothing(auth_settings):
    world = world_needing(1)
    approve(world, "Chief Risk Officer", kind="operator", client="ops")
    assert reason(world).startswith("failed: approval is required")
    assert "recorded by operator client 'ops': only a person's approval counts" in reason(world)


def test_a_persons_approval_of_a_decision_they_recorded_clears_nothing(auth_settings):
    world = world_needing(1)
    _, author = client_api("human", [world.root_principal], subject="alice@example.com")
    Decision.objects.filter(pk=world.decision.pk).update(created_by=author.client_id)
    approve(world, "alice@example.com", client=author.client_id)
    approve(world, "ALICE@example.com", client="alice-laptop")  # the same person through another client
    assert "0 of 1 approvals" in reason(world)
    assert reason(world).count("who asked for the action") == 2


def test_the_acting_agent_approving_in_any_case_clears_nothing(auth_settings):
    world = world_needing(1)
    approve(world, world.agent_id.upper())
    assert "is by the acting agent" in reason(world)


def test_two_approvals_by_one_subject_count_once(auth_settings):
    world = world_needing(2)
    approve(world, "bob@example.com", client="bob-phone")
    approve(world, "Bob@Example.com", client="bob-laptop")
    assert reason(world).startswith("failed: approval is required (the task is critical and the policy evaluation "
                                    "requires 2 approvals): 1 of 2 approvals")
    approve(world, "carol@example.com")
    assert reason(world).startswith("passed: 2 of 2 approvals")
    report = envelope_checks(inputs=check_inputs(world))
    assert len(report.approval_ids) == 2 and report.approval_ref == report.approval_ids[0]


def test_a_rejection_withdraws_the_approvals_before_it_and_not_those_after(auth_settings):
    world = world_needing(1)
    approve(world, "bob@example.com")
    approve(world, "carol@example.com", verdict="rejected")
    assert "rejected by a later approval" in reason(world)
    approve(world, "dave@example.com")
    assert reason(world).startswith("passed: 1 of 1 approvals: 'apr-2' by 'dave@example.com'")


def test_with_authentication_off_any_approval_but_the_agents_own_counts():
    world = world_needing(1)
    approve(world, "Chief Risk Officer", kind="operator")
    assert reason(world).startswith("passed")
