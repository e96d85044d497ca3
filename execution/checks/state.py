"""Everything an envelope's checks read, loaded in a fixed number of plain ORM queries.

``envelope_state_load`` is the only place the checks touch the database; the rules
(``execution.checks.rules``) are pure functions of what it returns. The queries, pinned by
tests/execution/test_checks.py, each a filter on one table by a unique key or an indexed
column, with a limit:

- at submission, whether an envelope with this ``action_id`` was already accepted (when
  one was, nothing else is read);
- the task, the capability, the agent's newest active skills for the tool, the decision,
  the policy evaluation with its set, the decision's newest approvals and rejections, the
  escalations that block, and the active freezes of the agent, the task's root principal,
  the tool or ``all``;
- the standing impact assessment (a ``do_not_proceed`` one if any, else the newest), when
  rule 5 asks for one;
- none of the decision, its evaluation, approvals and assessment when the caller has just
  created the decision and evaluation in its transaction (``Created``: an action made in
  one call), nor the task and the freezes when the caller has just read them
  (``AlreadyRead``: the same call, which reads them to know whether to run the policy),
  nor the skills and the capability when the caller read them to find the tool called
  (``ToolRead``: the MCP gateway);
- the agent's delegation candidates for the task's root principal, then every link of
  their chains;
- for ``transact``: the commerce session, the agent's newest active liability bindings,
  the spending under each link of the chain, and at execution the envelope's own payment;
- last, the revocations of any of those records or of their agents, in one query: the
  records whose status a cascade did not change (an agent revoked after a skill or a
  link was granted it) are revoked all the same.

Plain filters rather than subqueries and annotations: building and compiling a query
is most of what a check costs in Django, and these are the cheapest ones to build.
"""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Case, F, IntegerField, Q, Value, When

from decision.choices import ApprovalVerdict
from decision.models import Approval, CommerceSession, Decision, Escalation, ImpactAssessment, PolicyEvaluation
from decision.selectors import (
    MONEY,
    Authors,
    authors_of,
    commerce_spending_under,
    escalations_blocking,
    impact_assessment_required,
    impact_assessment_standing,
)
from auth_tokens.services import auth_enabled
from registry.choices import ActionClass, ActiveStatus, RevocationTarget
from registry.models import Capability, Delegation, Freeze, LiabilityBinding, Revocation, Skill, Task, path_pks
from registry.selectors import freezes_matching

from ..models import ActionEnvelope, Payment
from .report import EnvelopeInputs


# Candidates examined for check 2; an agent with more active delegations under one root
# principal than this, all broken but an older one, is refused (fail closed).
MAX_DELEGATION_CANDIDATES = 20
# The newest active skills (and liability bindings) examined for the first one not revoked:
# an agent with more than this many revoked ones still marked active is refused (fail closed).
MAX_CANDIDATES = 20
# The decision's newest approvals and rejections examined for check 7. More rejections than
# this recorded after its newest approval: the approval is not found, and the check fails
# when approval is required, as it would for the withdrawn approval.
MAX_APPROVALS = 20
# Blocking escalations named in check 8's reason.
MAX_ESCALATIONS = 5
# Matching freezes named in check 11's reason.
MAX_FREEZES = 5


@dataclass
class EnvelopeState:
    """The records an envelope cites or needs, as found now (None: not found)."""

    task: Task | None
    capability: Capability | None  # with revoked_record, agent_revoked
    skill: Skill | None
    decision: Decision | None
    evaluation: PolicyEvaluation | None  # with its policy_set
    approvals: list[Approval]  # the decision's approved, unexpired approvals and its rejections, newest first
    escalations: list[Escalation]
    # Who asked for the action (check 7): read only when approvals could count against them.
    authors: Authors = field(default_factory=Authors)
    freezes: list[Freeze] = field(default_factory=list)  # active, matching (docs/reference/governance.md)
    assessment: ImpactAssessment | None = None
    # ``assessment`` is known: looked up (rule 5 applies), or none (a decision just created)
    assessment_read: bool = False
    # The agent's delegation candidates (newest first) and every link of their chains by pk
    # (each with agent_revoked).
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


def _is_currency(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 3


def chain_paths(path: str) -> list[str]:
    """The materialised paths of a link's chain, root first, as its own path spells them."""
    segments = [segment + "/" for segment in path.split("/") if segment]
    return ["".join(segments[:depth + 1]) for depth in range(len(segments))]


def _of_tenants(record, root_principal: str | None, tenants: frozenset[str] | None):
    """``record`` when it belongs to one of ``tenants`` (None: every tenant), else None: a
    caller bound to tenants cites another tenant's record as one that does not exist."""
    if record is None or tenants is None or root_principal in tenants:
        return record
    return None


@dataclass(frozen=True)
class Created:
    """The decision and its policy evaluation that the caller has just created, in the
    transaction the checks run in (an action made in one call, execution/one_call.py), for
    the task and agent the envelope names."""

    decision: Decision
    evaluation: PolicyEvaluation  # with its policy_set


@dataclass(frozen=True)
class ToolRead:
    """What the caller read to find the tool an envelope calls (the MCP gateway: the tool named
    in a call, execution/one_call.py): the agent's newest active skills of the tool's id, of
    any connector, in every tenant the caller may see (newest first), and the capability the
    envelope cites, with its delegation."""

    skills: list[Skill]
    capability: Capability


@dataclass(frozen=True)
class AlreadyRead:
    """The envelope's task (None: not found, or another tenant's) and the freezes that stop its
    action (``freezes_stopping``), which the caller has just read for the same envelope (an
    action made in one call reads them to know whether to run the policy at all); and what
    it read to find the tool, if it did."""

    task: Task | None
    freezes: list[Freeze]
    tool: ToolRead | None = None


def freezes_stopping(inputs: EnvelopeInputs, root_principal: str | None) -> list[Freeze]:
    """The active freezes that stop the envelope's agent, tool or root principal (check 11), oldest first."""
    return list(freezes_matching(agent_id=inputs.agent_id, tool_id=inputs.tool_id,
                                 root_principal=root_principal)[:MAX_FREEZES])


def envelope_state_load(*, inputs: EnvelopeInputs, now: datetime, held_on: str | None = None,
                        new: bool = False, amount: Decimal | None = None, tenants: frozenset[str] | None = None,
                        created: Created | None = None, read: AlreadyRead | None = None) -> EnvelopeState:
    """The state the eleven checks judge ``inputs`` against, at ``now``.

    ``held_on``: the commerce session the envelope already holds a reservation on (the
    re-check at execution, replay): that session is read, with the envelope's payment.
    ``new``: a submission; when an envelope with its ``action_id`` was already accepted,
    nothing else is read. ``amount``: the usable ``transact`` amount, to rank the sessions.
    ``tenants``: those of a caller bound to tenants, whose citations of another tenant's
    records find nothing (None: every tenant). ``created``: when the envelope cites them,
    they are judged as created rather than read back; nobody has approved or assessed a
    decision no other transaction can see yet (the foreign keys of approvals and impact
    assessments need the committed decision), so it has neither. ``read``: the task and
    freezes as the caller has just read them, and with ``read.tool`` the skills and the
    capability it read to find the tool (when that is the capability the envelope cites).
    """
    if new and ActionEnvelope.objects.filter(action_id=inputs.action_id).exists():
        return EnvelopeState(task=None, capability=None, skill=None, decision=None, evaluation=None,
                             approvals=[], escalations=[], already_accepted=True)
    task = read.task if read is not None else Task.objects.filter(task_id=inputs.task_id).first()
    task = _of_tenants(task, task.root_principal if task else None, tenants)
    root_principal = task.root_principal if task else None
    tool = read.tool if read is not None else None
    if tool is not None and tool.capability.capability_id == inputs.capability_token_ref:
        # The same rows as the two queries below, filtered as they filter.
        skills = [skill for skill in tool.skills if skill.tool_id == inputs.tool_id and skill.agent_id == inputs.agent_id
                  and skill.root_principal in (None, root_principal)][:MAX_CANDIDATES]
        capability = tool.capability
    else:
        # The agent's skills for the tool in the task's tenant, and those registered for every tenant.
        skills = list(Skill.objects.filter(Q(root_principal__isnull=True) | Q(root_principal=root_principal),
                                           agent_id=inputs.agent_id, tool_id=inputs.tool_id,
                                           status=ActiveStatus.ACTIVE)
                      .order_by("-created_at", "-pk")[:MAX_CANDIDATES])
        capability = (Capability.objects.select_related("delegation")
                      .filter(capability_id=inputs.capability_token_ref).first())
    fresh = created is not None and (created.decision.decision_id, created.evaluation.evaluation_id) == (
        inputs.decision_ref, inputs.policy_decision_ref)
    if fresh:
        decision, evaluation, approvals = created.decision, created.evaluation, []
    else:
        approvals = list(Approval.objects.filter(
            Q(verdict=ApprovalVerdict.REJECTED) | Q(_unexpired(now), verdict=ApprovalVerdict.APPROVED),
            decision_id=inputs.decision_ref).order_by("-pk")[:MAX_APPROVALS])
        decision = Decision.objects.select_related("task").filter(decision_id=inputs.decision_ref).first()
        decision = _of_tenants(decision, decision.task.root_principal if decision else None, tenants)
        evaluation = (PolicyEvaluation.objects.select_related("policy_set", "task")
                      .filter(evaluation_id=inputs.policy_decision_ref).first())
        evaluation = _of_tenants(evaluation, evaluation.task.root_principal if evaluation else None, tenants)
    state = EnvelopeState(
        task=task,
        capability=_of_tenants(capability, capability.delegation.root_principal if capability else None, tenants),
        skill=None,
        decision=decision,
        evaluation=evaluation,
        approvals=approvals,
        escalations=list(escalations_blocking(task_id=inputs.task_id, decision_id=inputs.decision_ref,
                                              action_id=inputs.action_id,
                                              root_principal=root_principal)[:MAX_ESCALATIONS]),
        freezes=read.freezes if read is not None else freezes_stopping(inputs, root_principal),
    )
    if state.decision is None:
        state.approvals = []
    elif approvals and auth_enabled():
        state.authors = authors_of(decision=state.decision, evaluation=state.evaluation)

    bindings: list[LiabilityBinding] = []
    if task is not None:
        if fresh:  # like approvals, an assessment needs the committed decision: there is none
            state.assessment_read = True
        elif impact_assessment_required(task=task):
            state.assessment_read = True
            state.assessment = impact_assessment_standing(task=task, decision=inputs.decision_ref)
        _load_delegations(state, inputs=inputs, now=now)
        if task.action_class == ActionClass.TRANSACT:
            bindings = _load_commerce(state, inputs=inputs, now=now, held_on=held_on, amount=amount)
    _apply_revocations(state, inputs=inputs, skills=skills, bindings=bindings)
    return state


def _apply_revocations(state: EnvelopeState, *, inputs: EnvelopeInputs, skills: list[Skill],
                       bindings: list[LiabilityBinding]) -> None:
    """Read the revocations of every record loaded and of their agents (one query), then mark
    the capability and the links, and pick the newest skill and binding not revoked."""
    targets = {(RevocationTarget.AGENT, inputs.agent_id)}
    capability = state.capability
    if capability is not None:
        targets |= {(RevocationTarget.CAPABILITY, capability.capability_id),
                    (RevocationTarget.AGENT, capability.agent_id)}
    for link in state.links.values():
        targets |= {(RevocationTarget.AGENT, link.delegator_agent), (RevocationTarget.AGENT, link.delegate_agent)}
    targets |= {(RevocationTarget.SKILL, skill.skill_id) for skill in skills}
    targets |= {(RevocationTarget.LIABILITY_BINDING, binding.binding_id) for binding in bindings}
    revoked = set(Revocation.objects.filter(
        target_type__in={kind for kind, _ in targets}, target_id__in={ref for _, ref in targets},
    ).values_list("target_type", "target_id"))

    def agent_revoked(agent_id: str) -> bool:
        return (RevocationTarget.AGENT, agent_id) in revoked

    if capability is not None:
        capability.revoked_record = (RevocationTarget.CAPABILITY, capability.capability_id) in revoked
        capability.agent_revoked = agent_revoked(capability.agent_id)
    for link in state.links.values():
        link.agent_revoked = agent_revoked(link.delegator_agent) or agent_revoked(link.delegate_agent)
    if not agent_revoked(inputs.agent_id):
        state.skill = next((skill for skill in skills if (RevocationTarget.SKILL, skill.skill_id) not in revoked),
                           None)
    state.binding = next((binding for binding in bindings
                          if (RevocationTarget.LIABILITY_BINDING, binding.binding_id) not in revoked), None)


def _load_delegations(state: EnvelopeState, *, inputs: EnvelopeInputs, now: datetime) -> None:
    """Check 2's candidates: the agent's active, unexpired delegations for the root principal,
    newest by server order (as docs/reference/governance.md parent discovery), not by the client-settable accepted_at;
    the one the capability was issued under first. Then every link of their chains."""
    issued_under = state.capability.delegation_id if state.capability is not None else None
    state.candidates = list(
        Delegation.objects.filter(_unexpired(now), delegate_agent=inputs.agent_id,
                                  root_principal=state.task.root_principal, status=ActiveStatus.ACTIVE)
        .annotate(preferred=Case(When(delegation_id=issued_under, then=Value(0)), default=Value(1),
                                 output_field=IntegerField()))
        .order_by("preferred", "-pk").only("pk", "delegation_id", "path", "authority_scope")
        [:MAX_DELEGATION_CANDIDATES])
    pks = {pk for candidate in state.candidates for pk in path_pks(candidate.path)}
    state.links = {link.pk: link for link in Delegation.objects.filter(pk__in=pks)} if pks else {}


def _load_commerce(state: EnvelopeState, *, inputs: EnvelopeInputs, now: datetime, held_on: str | None,
                   amount: Decimal | None) -> list[LiabilityBinding]:
    """Check 9's records: the session (pinned when the envelope holds a reservation, else the
    open, unexpired one for the task and agent that fits best: currency, then room), the
    envelope's payment, and the spending under the first candidate's chain. Returns the
    agent's newest active, unexpired liability bindings for the root principal, from which
    ``_apply_revocations`` picks the binding."""
    sessions = CommerceSession.objects.select_related("delegation").filter(
        task_id=inputs.task_id, agent_id=inputs.agent_id)
    if held_on:
        state.session = sessions.filter(session_id=held_on).first()
        state.payment = Payment.objects.filter(envelope_id=inputs.action_id).first()
    elif inputs.commerce_session_id:
        # The call named its session: that one or none (check 9 says why it does not fit).
        state.session = sessions.filter(session_id=inputs.commerce_session_id).first()
    else:
        currency = inputs.parameters.get("currency")
        room = Value(amount or Decimal("0"), output_field=MONEY)
        state.session = (
            sessions.filter(_unexpired(now), status="open")
            .annotate(currency_rank=Case(When(currency=currency if _is_currency(currency) else "", then=Value(0)),
                                         default=Value(1), output_field=IntegerField()),
                      room_rank=Case(When(amount_limit__gte=F("spent_amount") + F("reserved_amount") + room,
                                          then=Value(0)), default=Value(1), output_field=IntegerField()))
            .order_by("currency_rank", "room_rank", "created_at", "pk").first())
    if state.candidates:
        state.spending_paths = chain_paths(state.candidates[0].path)
        state.spending = commerce_spending_under(paths=state.spending_paths)
    return list(LiabilityBinding.objects.filter(_unexpired(now), agent_id=inputs.agent_id,
                                                root_principal=state.task.root_principal,
                                                status=ActiveStatus.ACTIVE)
                .order_by("-created_at", "-pk")[:MAX_CANDIDATES])


def spending_of_chain(*, paths: list[str]) -> list[Decimal]:
    """The spending under each of ``paths`` (one query): for a usable chain other than the
    first candidate's, whose spending ``envelope_state_load`` read."""
    return commerce_spending_under(paths=paths)
