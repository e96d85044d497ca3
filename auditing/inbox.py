"""What the approvals inbox reads (docs/reference/approvals.md): the person signed in, the
decisions of their tenants that wait for people, and whether this person may approve each.

A person is an admin user linked to an active ``human`` client; they approve as that client,
with its subject, in its tenants (docs/reference/identity.md). Approvals are counted exactly as
check 7 counts them (``execution.checks.rules.check_approval``): the page says "1 of 2" when the
envelope would say it.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from agp_project import exactjson
from agp_project.exactjson import decimal_text
from auth_tokens.kinds import ClientKind
from auth_tokens.models import Client
from auth_tokens.services import auth_enabled
from decision.choices import ApprovalVerdict, CommerceSessionStatus, DecisionOutcome, DecisionStatus
from decision.models import Approval, CommerceSession, Decision
from decision.selectors import Authors, approvals_required, authors_of
from execution.checks.report import EnvelopeInputs
from execution.checks.rules import check_approval
from registry.models import Delegation
from registry.selectors import delegation_usable_with_chain

# Decisions shown on the inbox page, newest first; each costs a fixed handful of queries.
INBOX_MAX = 25


@dataclass
class Person:
    """The signed-in user as an approver: their human client."""

    client_id: str
    subject: str
    tenants: frozenset[str]


@dataclass
class Waiting:
    """One decision that waits for people, as the inbox shows it."""

    decision: Decision
    action: dict[str, Any] | None
    reasons: list[str]
    required: int
    why: list[str]
    counted: list[Approval]
    approvals: list[Approval]  # every verdict on it, oldest first
    own: list[Approval]  # this person's, oldest first
    path: list[Delegation] = field(default_factory=list)  # root first
    budgets: list[str] = field(default_factory=list)
    refusal: str = ""  # why this person may not approve; empty: they may

    @property
    def progress(self) -> str:
        return f"{len(self.counted)} of {self.required}"

    @property
    def parameters_text(self) -> str:
        """The action's parameters as the agent sent them (JSON, exact numbers)."""
        return exactjson.dumps((self.action or {}).get("parameters") or {}, sort_keys=True)

    @property
    def cleared(self) -> bool:
        return len(self.counted) >= self.required


def person_of(user) -> Person | None:
    """The person ``user`` approves as: its active human client, or None."""
    if not user.is_authenticated:
        return None
    client = Client.objects.filter(user=user, kind=ClientKind.HUMAN, is_active=True).first()
    if client is None or not client.subject:
        return None
    return Person(client_id=client.client_id, subject=client.subject, tenants=frozenset(client.tenants))


def _asking_people(person: Person):
    """The ``approve`` decisions of ``person``'s tenants that ask for people, whatever their status."""
    return (Decision.objects.select_related("task", "policy_evaluation")
            .prefetch_related("approvals")
            .filter(task__root_principal__in=person.tenants, outcome=DecisionOutcome.APPROVE)
            .filter(Q(policy_evaluation__require_approval=True) | Q(task__risk_level="critical")))


def _refusal(*, person: Person, decision: Decision, authors: Authors, counted: list[Approval]) -> str:
    """Why ``person`` may not approve ``decision`` (the rules of check 7), or ""."""
    subject = person.subject.casefold()
    if subject == decision.agent_id.casefold():
        return "You are the agent that would act: nobody approves their own request."
    if person.client_id in authors.clients or subject in authors.subjects:
        return ("You asked for this action (you recorded its decision or policy evaluation): "
                "nobody approves their own request.")
    if any(row.approver.casefold() == subject for row in counted):
        return "You have already approved it: the other approvals must come from other people."
    return ""


def _budgets(sessions: list[CommerceSession], path: list[Delegation]) -> list[str]:
    lines = [f"{decimal_text(s.amount_limit - s.spent_amount - s.reserved_amount)} of "
             f"{decimal_text(s.amount_limit)} {s.currency} left on commerce session {s.session_id}"
             for s in sessions]
    if path and path[-1].spend_amount is not None:
        lines.append(f"the delegation allows spending up to {decimal_text(path[-1].spend_amount)} "
                     f"{path[-1].spend_currency}")
    return lines


def _waiting(decision: Decision, *, person: Person, now: datetime, authors: Authors) -> Waiting:
    task, evaluation = decision.task, decision.policy_evaluation
    required, why = approvals_required(task=task, evaluation=evaluation)
    every = sorted(decision.approvals.all(), key=lambda row: row.pk)
    live = [row for row in reversed(every)
            if row.verdict == ApprovalVerdict.REJECTED or (row.expires_at is None or row.expires_at > now)]
    action = evaluation.action if evaluation is not None else None
    inputs = EnvelopeInputs(action_id="", task_id=task.task_id, agent_id=decision.agent_id,
                            tool_id=(action or {}).get("tool_id", ""), operation=(action or {}).get("operation", ""),
                            capability_token_ref="", decision_ref=decision.decision_id,
                            policy_decision_ref=evaluation.evaluation_id if evaluation is not None else "",
                            created_at=now)
    _, counted = check_approval(approvals=live, task=task, evaluation=evaluation, inputs=inputs, authors=authors,
                                open_service=not auth_enabled())
    subject = person.subject.casefold()
    return Waiting(decision=decision, action=action, reasons=list((evaluation.result or {}).get("reasons") or [])
                   if evaluation is not None else [], required=required, why=why, counted=counted,
                   approvals=every, own=[row for row in every if row.approver.casefold() == subject],
                   refusal=_refusal(person=person, decision=decision, authors=authors, counted=counted))


def _with_context(item: Waiting, *, now: datetime) -> Waiting:
    """The delegation path the agent acts under and the budget left: two to three queries."""
    decision, action = item.decision, item.action
    scope = f"{action['tool_id']}:{action['operation']}" if action and action.get("tool_id") else None
    found = delegation_usable_with_chain(agent_id=decision.agent_id, root_principal=decision.task.root_principal,
                                         scope=scope, now=now)
    item.path = found[1] if found else []
    sessions = list(CommerceSession.objects.filter(task_id=decision.task_id, agent_id=decision.agent_id,
                                                   status=CommerceSessionStatus.OPEN).order_by("created_at")[:5])
    item.budgets = _budgets(sessions, item.path)
    return item


def _authors(decisions: list[Decision]) -> dict[str, Authors]:
    """Each decision's ``Authors``, read in one query for all of them."""
    clients = {record.created_by for decision in decisions for record in (decision, decision.policy_evaluation)
               if record is not None and record.created_by}
    names = {client_id: [name.casefold() for name in (subject, agent_id) if name]
             for client_id, subject, agent_id in
             Client.objects.filter(client_id__in=clients).values_list("client_id", "subject", "agent_id")}
    result = {}
    for decision in decisions:
        own = frozenset(record.created_by for record in (decision, decision.policy_evaluation)
                        if record is not None and record.created_by)
        result[decision.decision_id] = Authors(clients=own, subjects=frozenset(
            name for client_id in own for name in names.get(client_id, [])))
    return result


def inbox(*, person: Person, now: datetime | None = None) -> list[Waiting]:
    """The decisions of ``person``'s tenants that still wait for people, newest first."""
    now = now or timezone.now()
    # Some of the newest drafts may already have their approvals (the agent has not asked again): read more.
    drafts = _asking_people(person).filter(status=DecisionStatus.DRAFT).order_by("-created_at", "-pk")
    decisions = list(drafts[:INBOX_MAX * 4])
    authors = _authors(decisions)
    items = [_waiting(decision, person=person, now=now, authors=authors[decision.decision_id])
             for decision in decisions]
    return [_with_context(item, now=now) for item in items if not item.cleared][:INBOX_MAX]


def inbox_decision(*, person: Person, decision_id: str, now: datetime | None = None) -> Waiting | None:
    """One decision of ``person``'s tenants that asks for people (waiting or already cleared), or None."""
    now = now or timezone.now()
    decision = _asking_people(person).filter(decision_id=decision_id).first()
    if decision is None:
        return None
    item = _waiting(decision, person=person, now=now,
                    authors=authors_of(decision=decision, evaluation=decision.policy_evaluation))
    return _with_context(item, now=now)
