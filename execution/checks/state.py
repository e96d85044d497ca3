"""Everything an envelope's checks read, loaded in a fixed number of ORM queries.

``envelope_state_load`` is the only place the checks touch the database; the rules
(``execution.checks.rules``) are pure functions of what it returns. The queries, pinned by
tests/execution/test_checks.py:

- the task (with whether an active freeze of the agent, its root principal or the tool
  exists), the capability (with whether it or its agent is revoked), the agent's skill
  for the tool, the decision, the policy evaluation with its set, the newest approval
  standing for the decision, the escalations that block, and at submission whether an
  envelope with this ``action_id`` was already accepted;
- the matching freezes themselves, in one query, only when one exists (or when there is
  no task to ask): an envelope that nothing freezes pays nothing for the check;
- the standing impact assessment (a ``do_not_proceed`` one if any, else the newest), when
  rule 5 asks for one;
- the agent's delegation candidates for the task's root principal, then every link of
  their chains in one query;
- for ``transact``: the commerce session, the liability binding, the spending under each
  link of the chain, and at execution the envelope's own payment.

Every lookup is by a unique key or an indexed filter with a limit, so the count does not
grow with the tables.
"""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Case, Exists, F, IntegerField, OuterRef, Q, Value, When

from decision.models import Approval, CommerceSession, Decision, Escalation, ImpactAssessment, PolicyEvaluation
from decision.selectors import (
    MONEY,
    approvals_standing,
    commerce_spending_under,
    escalations_blocking,
    impact_assessment_required,
    impact_assessment_standing,
)
from registry.choices import ActionClass, ActiveStatus, RevocationTarget
from registry.models import Capability, Delegation, Freeze, LiabilityBinding, Revocation, Skill, Task, path_pks
from registry.selectors import delegation_links, freezes_matching

from ..models import ActionEnvelope, Payment
from .report import EnvelopeInputs

# Candidates examined for check 2; an agent with more active delegations under one root
# principal than this, all broken but an older one, is refused (fail closed).
MAX_DELEGATION_CANDIDATES = 20
# Blocking escalations named in check 8's reason.
MAX_ESCALATIONS = 5
# Matching freezes named in check 11's reason.
MAX_FREEZES = 5


@dataclass
class EnvelopeState:
    """The records an envelope cites or needs, as found now (None: not found)."""

    task: Task | None
    capability: Capability | None  # annotated: revoked_record, agent_revoked
    skill: Skill | None
    decision: Decision | None
    evaluation: PolicyEvaluation | None  # with its policy_set
    approval: Approval | None  # annotated: rejected_later
    escalations: list[Escalation]
    freezes: list[Freeze] = field(default_factory=list)  # active, matching (C13)
    assessment: ImpactAssessment | None = None
    # The agent's delegation candidates (newest first) and every link of their chains by pk.
    candidates: list[Delegation] = field(default_factory=list)
    links: dict[int, Delegation] = field(default_factory=dict)
    # transact only
    session: CommerceSession | None = None  # with its delegation
    binding: LiabilityBinding | None = None
    payment: Payment | None = None
    spending: list[Decimal] | None = None  # under each link of the candidates' first chain, root first
    spending_paths: list[str] = field(default_factory=list)
    already_accepted: bool = False


def _unexpired(now: datetime) -> Q:
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now)


def _revoked(target_type: str, ref: Any) -> Exists:
    return Exists(Revocation.objects.filter(target_type=target_type, target_id=ref))


def _is_currency(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 3


def chain_paths(path: str) -> list[str]:
    """The materialised paths of a link's chain, root first, as its own path spells them."""
    segments = [segment + "/" for segment in path.split("/") if segment]
    return ["".join(segments[:depth + 1]) for depth in range(len(segments))]


def envelope_state_load(*, inputs: EnvelopeInputs, now: datetime, held_on: str | None = None,
                        new: bool = False, amount: Decimal | None = None) -> EnvelopeState:
    """The state the ten checks judge ``inputs`` against, at ``now``.

    ``held_on``: the commerce session the envelope already holds a reservation on (the
    re-check at execution, replay): that session is read, with the envelope's payment.
    ``new``: a submission; when an envelope with its ``action_id`` was already accepted,
    nothing else is read. ``amount``: the usable ``transact`` amount, to rank the sessions.
    """
    if new and ActionEnvelope.objects.filter(action_id=inputs.action_id).exists():
        return EnvelopeState(task=None, capability=None, skill=None, decision=None, evaluation=None,
                             approval=None, escalations=[], already_accepted=True)
    task = (Task.objects.filter(task_id=inputs.task_id)
            .annotate(frozen=Exists(freezes_matching(agent_id=inputs.agent_id, root_principal=OuterRef("root_principal"),
                                                     tool_id=inputs.tool_id)))
            .first())
    state = EnvelopeState(
        task=task,
        capability=(Capability.objects.filter(capability_id=inputs.capability_token_ref)
                    .annotate(revoked_record=_revoked(RevocationTarget.CAPABILITY, OuterRef("capability_id")),
                              agent_revoked=_revoked(RevocationTarget.AGENT, OuterRef("agent_id"))).first()),
        skill=(Skill.objects.filter(agent_id=inputs.agent_id, tool_id=inputs.tool_id, status=ActiveStatus.ACTIVE)
               .exclude(_revoked(RevocationTarget.SKILL, OuterRef("skill_id")))
               .exclude(_revoked(RevocationTarget.AGENT, OuterRef("agent_id")))
               .order_by("-created_at", "-pk").first()),
        decision=Decision.objects.filter(decision_id=inputs.decision_ref).first(),
        evaluation=(PolicyEvaluation.objects.select_related("policy_set")
                    .filter(evaluation_id=inputs.policy_decision_ref).first()),
        approval=approvals_standing(decision=inputs.decision_ref, now=now).first(),
        escalations=list(escalations_blocking(task_id=inputs.task_id, decision_id=inputs.decision_ref,
                                              action_id=inputs.action_id)[:MAX_ESCALATIONS]),
    )
    if task is None or task.frozen:
        state.freezes = list(freezes_matching(agent_id=inputs.agent_id, tool_id=inputs.tool_id,
                                              root_principal=task.root_principal if task else None)[:MAX_FREEZES])
    if task is None:
        return state
    if impact_assessment_required(task=task):
        state.assessment = impact_assessment_standing(task=task, decision=inputs.decision_ref)
    _load_delegations(state, inputs=inputs, now=now)
    if task.action_class == ActionClass.TRANSACT:
        _load_commerce(state, inputs=inputs, now=now, held_on=held_on, amount=amount)
    return state


def _load_delegations(state: EnvelopeState, *, inputs: EnvelopeInputs, now: datetime) -> None:
    """Check 2's candidates: the agent's active, unexpired delegations for the root principal,
    newest by server order (as C5 parent discovery), not by the client-settable accepted_at;
    the one the capability was issued under first. Then every link of their chains."""
    issued_under = state.capability.delegation_id if state.capability is not None else None
    state.candidates = list(
        Delegation.objects.filter(delegate_agent=inputs.agent_id, root_principal=state.task.root_principal,
                                  status=ActiveStatus.ACTIVE)
        .filter(_unexpired(now))
        .annotate(preferred=Case(When(delegation_id=issued_under, then=Value(0)), default=Value(1),
                                 output_field=IntegerField()))
        .order_by("preferred", "-pk").only("pk", "delegation_id", "path", "authority_scope")
        [:MAX_DELEGATION_CANDIDATES])
    pks = {pk for candidate in state.candidates for pk in path_pks(candidate.path)}
    state.links = {link.pk: link for link in delegation_links(pks=pks)} if pks else {}


def _load_commerce(state: EnvelopeState, *, inputs: EnvelopeInputs, now: datetime, held_on: str | None,
                   amount: Decimal | None) -> None:
    """Check 9's records: the session (pinned when the envelope holds a reservation, else the
    open, unexpired one for the task and agent that fits best: currency, then room), the
    agent's liability binding, its payment, and the spending under the first candidate's chain."""
    sessions = CommerceSession.objects.select_related("delegation").filter(
        task_id=inputs.task_id, agent_id=inputs.agent_id)
    if held_on:
        state.session = sessions.filter(session_id=held_on).first()
        state.payment = Payment.objects.filter(envelope_id=inputs.action_id).first()
    else:
        currency = inputs.parameters.get("currency")
        room = Value(amount or Decimal("0"), output_field=MONEY)
        state.session = (
            sessions.filter(status="open").filter(_unexpired(now))
            .annotate(currency_rank=Case(When(currency=currency if _is_currency(currency) else "", then=Value(0)),
                                         default=Value(1), output_field=IntegerField()),
                      room_rank=Case(When(amount_limit__gte=F("spent_amount") + F("reserved_amount") + room,
                                          then=Value(0)), default=Value(1), output_field=IntegerField()))
            .order_by("currency_rank", "room_rank", "created_at", "pk").first())
    state.binding = (
        LiabilityBinding.objects.filter(agent_id=inputs.agent_id, root_principal=state.task.root_principal,
                                        status=ActiveStatus.ACTIVE)
        .filter(_unexpired(now))
        .exclude(_revoked(RevocationTarget.LIABILITY_BINDING, OuterRef("binding_id")))
        .order_by("-created_at", "-pk").first())
    if state.candidates:
        state.spending_paths = chain_paths(state.candidates[0].path)
        state.spending = commerce_spending_under(paths=state.spending_paths)


def spending_of_chain(*, paths: list[str]) -> list[Decimal]:
    """The spending under each of ``paths`` (one query): for a usable chain other than the
    first candidate's, whose spending ``envelope_state_load`` read."""
    return commerce_spending_under(paths=paths)
