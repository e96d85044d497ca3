"""ORM factories for the Decision API tests (registry rows are made directly, not via its services)."""

import hashlib
import itertools
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from decision.models import Approval, Decision, Escalation, ImpactAssessment, PolicyEvaluation
from registry.models import Delegation, PolicySet, Task

_counter = itertools.count(1)

ALLOW_ALL = """package agp.allow_all

import rego.v1

default allow := true
"""

# A realistic payments policy: amount thresholds drive allow, approval and denial.
PAYMENTS = """package agp.payments

import rego.v1

default allow := false

allow if {
    input.action_class in {"read", "transact"}
    input.amount <= input.limits.auto_approve_max
}

allow if {
    input.action_class == "transact"
    input.amount <= input.limits.hard_max
}

require_approval if input.amount > input.limits.auto_approve_max

deny contains sprintf("amount %v exceeds hard maximum %v", [input.amount, input.limits.hard_max]) if {
    input.amount > input.limits.hard_max
}

deny contains "merchant is blocked" if input.merchant in {"evil-corp", "shady-llc"}
"""


def _n() -> int:
    return next(_counter)


def ruleset_hash(ruleset: str) -> str:
    return "sha256:" + hashlib.sha256(ruleset.encode("utf-8")).hexdigest()


def make_task(*, risk_level="low", action_class="read", status="open", root_principal="org:acme",
              agent_id="agent-1", task_id=None) -> Task:
    return Task.objects.create(task_id=task_id or f"task-{_n()}", root_principal=root_principal, agent_id=agent_id,
                               title="a task", risk_level=risk_level, action_class=action_class, status=status,
                               created_at=timezone.now())


def make_policy_set(*, ruleset=ALLOW_ALL, status="active", policy_set_id=None, **extra) -> PolicySet:
    return PolicySet.objects.create(policy_set_id=policy_set_id or f"ps-{_n()}", name="policies", version="1",
                                    ruleset=ruleset, ruleset_hash=ruleset_hash(ruleset), status=status,
                                    created_at=timezone.now(), **extra)


def make_delegation(*, delegate_agent="agent-1", delegator_agent="org:acme", root_principal="org:acme",
                    spend_currency="USD", spend_amount=Decimal("500"), status="active", expires_in=timedelta(days=1),
                    parent=None, delegation_id=None) -> Delegation:
    now = timezone.now()
    delegation = Delegation.objects.create(
        delegation_id=delegation_id or f"dlg-{_n()}", parent=parent, root_principal=root_principal,
        delegator_agent=delegator_agent, delegate_agent=delegate_agent, authority_scope=["payments:*"],
        spend_currency=spend_currency, spend_amount=spend_amount, max_hops_remaining=2,
        depth=(parent.depth + 1) if parent else 0, accepted_at=now, expires_at=now + expires_in, status=status,
        created_at=now)
    delegation.path = (parent.path if parent else "") + f"{delegation.pk:012d}/"
    delegation.save(update_fields=["path"])
    return delegation


def make_evaluation(*, task, policy_set=None, agent_id="agent-1", allowed=True, require_approval=False,
                    evaluation_id=None) -> PolicyEvaluation:
    policy_set = policy_set or make_policy_set()
    now = timezone.now()
    return PolicyEvaluation.objects.create(
        evaluation_id=evaluation_id or f"pev-{_n()}", policy_set=policy_set, task=task, agent_id=agent_id,
        input={}, input_hash="sha256:" + "0" * 64, ruleset_hash=policy_set.ruleset_hash,
        result={"allow": allowed, "require_approval": require_approval, "reasons": []}, allowed=allowed,
        require_approval=require_approval, warnings=[], evaluated_at=now, created_at=now)


def make_decision(*, task, outcome="approve", status="draft", agent_id="agent-1", evaluation=None,
                  decision_id=None) -> Decision:
    return Decision.objects.create(decision_id=decision_id or f"dec-{_n()}", task=task, agent_id=agent_id,
                                   outcome=outcome, status=status, policy_evaluation=evaluation,
                                   created_at=timezone.now())


def make_assessment(*, decision, recommendation="proceed", assessed_at=None, assessment_id=None) -> ImpactAssessment:
    now = timezone.now()
    return ImpactAssessment.objects.create(
        assessment_id=assessment_id or f"ia-{_n()}", task=decision.task, decision=decision, agent_id="assessor-1",
        time_horizons=[{"horizon": "immediate", "consequences": [], "severity": "minor", "reversible": True}],
        recommendation=recommendation, assessed_at=assessed_at or now, created_at=now)


def make_approval(*, decision, verdict="approved", expires_at=None, approver="human-1", created_at=None) -> Approval:
    now = timezone.now()
    return Approval.objects.create(approval_id=f"apr-{_n()}", decision=decision, approver=approver, verdict=verdict,
                                   expires_at=expires_at or now + timedelta(hours=1), created_at=created_at or now)


def make_escalation(*, task=None, decision=None, action_id="", status="open", outcome="") -> Escalation:
    return Escalation.objects.create(escalation_id=f"esc-{_n()}", task=task, decision=decision, action_id=action_id,
                                     raised_by="watcher", reason="looks wrong", status=status, outcome=outcome,
                                     created_at=timezone.now())
