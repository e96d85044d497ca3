"""The ten fail-closed checks of an action envelope (CONTRACT C8).

``envelope_checks`` runs every check, even after one has failed, and returns a
``CheckReport`` listing each check's outcome and the references the checks resolved
(delegation, approval, commerce session, allowed parameter ranges, parameters hash).

The checks read the database with a fixed number of queries, whatever the size of the
tables (at most 13; pinned by tests/execution/test_checks.py): every lookup is by a unique
key or an indexed filter with ``LIMIT 1``, and chain-wide conditions (every link of the
delegation chain unexpired and unrevoked; spending under every link of the chain) are
folded into one query each with ``EXISTS`` subqueries or conditional aggregation.

The same function serves three callers:

- submission (``execution.services``): the envelope as received;
- execution (``envelope_recheck``): the stored inputs, counting the envelope's own budget
  reservation as its own, and the commerce session pinned to the one reserved on;
- replay (``execution.replay``): the stored inputs against today's state.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db.models import Case, DecimalField, Exists, F, IntegerField, OuterRef, Q, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agp_project.canonical import content_hash
from decision.models import CommerceSession, Decision, PolicyEvaluation
from decision.selectors import (
    approval_newest,
    escalations_blocking,
    impact_assessment_newest,
    impact_assessment_required,
)
from registry.models import Capability, Delegation, LiabilityBinding, Revocation, Skill, Task
from registry.scopes import scope_covers, tool_scope
from registry.selectors import delegation_links_problem

CHECK_NAMES = (
    "task",
    "delegation",
    "capability",
    "decision",
    "policy_evaluation",
    "impact_assessment",
    "approval",
    "escalation",
    "commerce",
    "created_at",
)

CLOCK_SKEW = timedelta(seconds=60)
# Candidates examined for check 2; an agent with more active delegations under one root
# principal than this, all broken but an older one, is refused (fail closed).
MAX_DELEGATION_CANDIDATES = 20
MONEY = DecimalField(max_digits=20, decimal_places=4)
ZERO = Decimal("0")
AMOUNT_QUANTUM = Decimal("0.0001")
MAX_AMOUNT = Decimal("1e14")  # DecimalField(max_digits=18, decimal_places=4)


@dataclass(frozen=True)
class EnvelopeInputs:
    """What the client submitted (after parsing), as stored in ``ActionEnvelope.inputs``."""

    action_id: str
    task_id: str
    agent_id: str
    tool_id: str
    operation: str
    capability_token_ref: str
    decision_ref: str
    policy_decision_ref: str
    created_at: datetime
    parameters: dict[str, Any] = field(default_factory=dict)
    callback_url: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "action_id": self.action_id, "task_id": self.task_id, "agent_id": self.agent_id,
            "tool_id": self.tool_id, "operation": self.operation,
            "capability_token_ref": self.capability_token_ref, "decision_ref": self.decision_ref,
            "policy_decision_ref": self.policy_decision_ref,
            "created_at": self.created_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "parameters": self.parameters, "callback_url": self.callback_url,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EnvelopeInputs":
        created_at = data["created_at"]
        if isinstance(created_at, str):
            created_at = parse_datetime(created_at)
        return cls(action_id=data["action_id"], task_id=data["task_id"], agent_id=data["agent_id"],
                   tool_id=data["tool_id"], operation=data["operation"],
                   capability_token_ref=data["capability_token_ref"], decision_ref=data["decision_ref"],
                   policy_decision_ref=data["policy_decision_ref"], created_at=created_at,
                   parameters=data.get("parameters") or {}, callback_url=data.get("callback_url") or "")

    @property
    def parameters_hash(self) -> str:
        return content_hash(self.parameters)


@dataclass(frozen=True)
class OwnReservation:
    """An amount already held by the envelope being re-checked (its Payment row)."""

    session_id: str
    reserved: Decimal  # the part still counted in ``reserved_amount``
    spent: Decimal  # the part already moved into ``spent_amount``


@dataclass
class CheckReport:
    """Every check's outcome plus the references the checks resolved."""

    results: list[dict[str, Any]]
    action_class: str | None = None
    delegation_ref: str | None = None
    approval_ref: str | None = None
    approval_conditions: list[str] = field(default_factory=list)
    commerce_session_ref: str | None = None
    amount: Decimal | None = None
    currency: str | None = None
    allowed_parameter_ranges: dict[str, Any] = field(default_factory=dict)
    parameters_hash: str = ""
    skill_id: str | None = None
    chain_delegation_pks: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(result["passed"] for result in self.results)

    @property
    def failed(self) -> list[dict[str, str]]:
        """The failed checks as ``details.failed_checks`` lists them: ``{"check", "reason"}``."""
        return [{"check": r["check"], "reason": r["reason"]} for r in self.results if not r["passed"]]

    @property
    def verdict(self) -> str:
        return "cleared" if self.passed else "rejected"

    def result(self, check: str) -> dict[str, Any]:
        return next(r for r in self.results if r["check"] == check)


class _Results:
    def __init__(self):
        self.items: dict[str, dict[str, Any]] = {}

    def ok(self, check: str, reason: str) -> None:
        self.items[check] = {"check": check, "passed": True, "reason": reason}

    def fail(self, check: str, *reasons: str) -> None:
        self.items[check] = {"check": check, "passed": False, "reason": "; ".join(reasons)}

    def ordered(self) -> list[dict[str, Any]]:
        return [self.items[name] for name in CHECK_NAMES]


def _unexpired(now: datetime, prefix: str = "") -> Q:
    return Q(**{f"{prefix}expires_at__isnull": True}) | Q(**{f"{prefix}expires_at__gt": now})


def _revoked(target_type: str, ref: Any) -> Exists:
    return Exists(Revocation.objects.filter(target_type=target_type, target_id=ref))


def _expired(value: datetime | None, now: datetime) -> bool:
    return value is not None and value <= now


def _to_decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def parameters_violations(parameters: dict[str, Any], ranges: dict[str, Any]) -> list[str]:
    """Every way ``parameters`` leave the capability's ``allowed_parameter_ranges``.

    A range is ``{"min": n, "max": n}`` (either bound optional) or ``{"enum": [...]}``. A
    parameter the ranges do not name is unconstrained; a named parameter that is absent
    is not checked (there is nothing to bound). A range of any other shape fails closed.
    """
    problems = []
    for name in sorted(ranges):
        spec = ranges[name]
        if name not in parameters:
            continue
        value = parameters[name]
        if not isinstance(spec, dict) or not spec or set(spec) - {"min", "max", "enum"}:
            problems.append(f"parameter {name!r} has an unsupported range {spec!r}")
            continue
        if "enum" in spec:
            allowed = spec["enum"]
            if not isinstance(allowed, list) or value not in allowed or isinstance(value, bool) != any(
                    isinstance(item, bool) and item == value for item in allowed):
                problems.append(f"parameter {name!r}={value!r} is not one of {allowed!r}")
            continue
        number = _to_decimal(value) if not isinstance(value, str) else None
        if number is None:
            problems.append(f"parameter {name!r}={value!r} is not a number")
            continue
        low, high = _to_decimal(spec.get("min")), _to_decimal(spec.get("max"))
        if ("min" in spec and low is None) or ("max" in spec and high is None):
            problems.append(f"parameter {name!r} has an unsupported range {spec!r}")
        elif low is not None and number < low:
            problems.append(f"parameter {name!r}={value!r} is below the minimum {spec['min']!r}")
        elif high is not None and number > high:
            problems.append(f"parameter {name!r}={value!r} is above the maximum {spec['max']!r}")
    return problems


def _chain_pks(path: str) -> list[int]:
    return [int(segment) for segment in path.split("/") if segment]


def envelope_checks(*, inputs: EnvelopeInputs, now: datetime | None = None,
                    own: OwnReservation | None = None) -> CheckReport:
    """Run all ten C8 checks on ``inputs``; never stops at the first failure.

    ``own``: the reservation the envelope already holds (execution-time re-check, replay):
    the commerce check then uses that session and counts that amount as available to it.
    """
    now = now or timezone.now()
    results = _Results()
    report = CheckReport(results=[], parameters_hash=inputs.parameters_hash)
    agent_id = inputs.agent_id

    # 1. task ------------------------------------------------------------------------
    task = Task.objects.filter(task_id=inputs.task_id).first()
    if task is None:
        results.fail("task", f"task {inputs.task_id!r} does not exist")
    elif task.status != "open":
        results.fail("task", f"task {task.task_id!r} is {task.status}, not open")
    else:
        results.ok("task", f"task {task.task_id!r} is open")
    report.action_class = task.action_class if task else None

    # 3a. capability (read first: check 2 prefers the delegation it was issued under) --
    capability = (Capability.objects.filter(capability_id=inputs.capability_token_ref)
                  .annotate(revoked_record=_revoked("capability", OuterRef("capability_id")),
                            agent_revoked=_revoked("agent", OuterRef("agent_id")))
                  .first())

    # 2. delegation: the agent's newest delegation for the root principal whose whole
    # chain is usable, preferring the one the capability was issued under. Two queries:
    # the agent's active, unexpired candidates (newest first, at most
    # MAX_DELEGATION_CANDIDATES), then every link of their chains by primary key (the
    # materialised path names them), each annotated with whether an agent it was granted
    # to or by is revoked.
    delegation, chain = None, []
    if task is None:
        results.fail("delegation", "no root principal to look up: the task does not exist")
    else:
        preferred = capability.delegation_id if capability is not None else ""
        candidates = list(
            Delegation.objects
            .filter(delegate_agent=agent_id, root_principal=task.root_principal, status="active")
            .filter(_unexpired(now))
            .annotate(preferred=Case(When(delegation_id=preferred, then=Value(0)), default=Value(1),
                                     output_field=IntegerField()))
            # Newest by server order (as C5 parent discovery), not by the client-settable accepted_at.
            .order_by("preferred", "-pk")[:MAX_DELEGATION_CANDIDATES])
        link_pks = {pk for candidate in candidates for pk in _chain_pks(candidate.path)}
        links = {link.pk: link for link in (
            Delegation.objects.filter(pk__in=link_pks)
            .annotate(agent_revoked=Exists(Revocation.objects.filter(
                Q(target_id=OuterRef("delegate_agent")) | Q(target_id=OuterRef("delegator_agent")),
                target_type="agent"))))} if link_pks else {}
        broken = None
        for candidate in candidates:
            candidate_chain = [links.get(pk) for pk in _chain_pks(candidate.path)]
            # The validity rule is the registry's (one definition for C5 and C8).
            problem = (delegation_links_problem(links=candidate_chain, now=now) if candidate_chain
                       else "it has no recorded chain")
            if problem is None:
                delegation, chain = candidate, candidate_chain
                break
            broken = broken or (f"delegation {candidate.delegation_id!r} (held by the agent for root principal "
                                f"{task.root_principal!r}) is unusable: {problem}")
        if delegation is not None:
            results.ok("delegation", f"delegation {delegation.delegation_id!r} and its whole chain are active")
            report.delegation_ref = delegation.delegation_id
            report.chain_delegation_pks = [link.pk for link in chain]
        elif broken:
            results.fail("delegation", broken)
        else:
            results.fail("delegation", f"agent {agent_id!r} holds no active, unexpired delegation for root "
                                       f"principal {task.root_principal!r}")

    # 3. capability -------------------------------------------------------------------
    skill = (Skill.objects.filter(agent_id=agent_id, tool_id=inputs.tool_id, status="active")
             .exclude(_revoked("skill", OuterRef("skill_id")))
             .exclude(_revoked("agent", OuterRef("agent_id")))
             .order_by("-created_at", "-pk").first())
    problems = []
    if capability is None:
        problems.append(f"capability {inputs.capability_token_ref!r} does not exist")
    else:
        report.allowed_parameter_ranges = capability.allowed_parameter_ranges or {}
        if capability.status != "active" or capability.revoked_record or capability.agent_revoked:
            problems.append(f"capability {capability.capability_id!r} is revoked")
        if _expired(capability.expires_at, now):
            problems.append(f"capability {capability.capability_id!r} expired at {capability.expires_at.isoformat()}")
        if capability.agent_id != agent_id:
            problems.append(f"capability {capability.capability_id!r} belongs to another agent")
        if capability.tool_id != inputs.tool_id:
            problems.append(f"capability {capability.capability_id!r} is for tool {capability.tool_id!r}, "
                            f"not {inputs.tool_id!r}")
        operations = capability.operations or []
        if inputs.operation not in operations and "*" not in operations:
            problems.append(f"capability {capability.capability_id!r} does not cover operation "
                            f"{inputs.operation!r}")
        if delegation is not None:
            # Without a usable delegation check 2 already fails: the scope rule has no
            # delegation to be measured against, and the verdict is rejected either way.
            wanted = tool_scope(inputs.tool_id, inputs.operation)
            if capability.delegation_id != delegation.delegation_id:
                problems.append(f"capability {capability.capability_id!r} was issued under delegation "
                                f"{capability.delegation_id!r}, not the agent's active delegation "
                                f"{delegation.delegation_id!r}")
            elif not scope_covers(delegation.authority_scope or [], wanted):
                problems.append(f"{wanted!r} lies outside the authority scope of delegation "
                                f"{delegation.delegation_id!r}")
        problems.extend(parameters_violations(inputs.parameters, report.allowed_parameter_ranges))
    if skill is None:
        problems.append(f"agent {agent_id!r} has no active skill for tool {inputs.tool_id!r}")
    else:
        report.skill_id = skill.skill_id
    if problems:
        results.fail("capability", *problems)
    else:
        results.ok("capability", f"capability {capability.capability_id!r} covers {inputs.tool_id}:"
                                 f"{inputs.operation} within delegation scope; skill {skill.skill_id!r}")

    # 4. decision ---------------------------------------------------------------------
    decision = Decision.objects.filter(decision_id=inputs.decision_ref).first()
    problems = []
    if decision is None:
        problems.append(f"decision {inputs.decision_ref!r} does not exist")
    else:
        if decision.task_id != inputs.task_id:
            problems.append(f"decision {decision.decision_id!r} is for another task")
        if decision.status != "finalised":
            problems.append(f"decision {decision.decision_id!r} is {decision.status}, not finalised")
        if decision.outcome != "approve":
            problems.append(f"decision {decision.decision_id!r} has outcome {decision.outcome!r}, not approve")
    if problems:
        results.fail("decision", *problems)
    else:
        results.ok("decision", f"decision {decision.decision_id!r} is finalised with outcome approve")

    # 5. policy evaluation ------------------------------------------------------------
    evaluation = (PolicyEvaluation.objects.select_related("policy_set")
                  .filter(evaluation_id=inputs.policy_decision_ref).first())
    problems = []
    if evaluation is None:
        problems.append(f"policy evaluation {inputs.policy_decision_ref!r} does not exist")
    else:
        policy_set = evaluation.policy_set
        if evaluation.task_id != inputs.task_id:
            problems.append(f"policy evaluation {evaluation.evaluation_id!r} is for another task")
        if evaluation.agent_id != agent_id:
            problems.append(f"policy evaluation {evaluation.evaluation_id!r} is for another agent")
        if not evaluation.allowed or not (evaluation.result or {}).get("allow", False):
            reasons = (evaluation.result or {}).get("reasons") or []
            problems.append(f"policy evaluation {evaluation.evaluation_id!r} did not allow the action"
                            + (f" ({', '.join(map(str, reasons))})" if reasons else ""))
        if policy_set.status == "revoked":
            problems.append(f"policy set {policy_set.policy_set_id!r} is revoked")
        if policy_set.ruleset_hash != evaluation.ruleset_hash:
            problems.append(f"policy set {policy_set.policy_set_id!r} ruleset changed since the evaluation")
    if problems:
        results.fail("policy_evaluation", *problems)
    else:
        results.ok("policy_evaluation", f"policy evaluation {evaluation.evaluation_id!r} allowed the action "
                                        f"under policy set {evaluation.policy_set.policy_set_id!r}")

    # 6. impact assessment (C7 rule 5) ------------------------------------------------
    if task is None:
        results.fail("impact_assessment", "cannot tell whether an impact assessment is required: no task")
    elif impact_assessment_required(task=task):
        assessment = impact_assessment_newest(task=task, decision=inputs.decision_ref)
        if assessment is None:
            results.fail("impact_assessment", f"a {task.risk_level} {task.action_class} task needs an impact "
                                              f"assessment for decision {inputs.decision_ref!r}")
        elif assessment.recommendation == "do_not_proceed":
            results.fail("impact_assessment", f"impact assessment {assessment.assessment_id!r} recommends "
                                              f"do_not_proceed")
        else:
            results.ok("impact_assessment", f"impact assessment {assessment.assessment_id!r} recommends "
                                            f"{assessment.recommendation}")
    else:
        results.ok("impact_assessment", "not required for this task's risk level and action class")

    # 7. approval ---------------------------------------------------------------------
    # The newest approved, unexpired approval of the decision, unless a later approval
    # rejected it (approvals are immutable, so a later rejection is how one is withdrawn).
    approval = approval_newest(decision=inputs.decision_ref, now=now)
    usable = approval is not None and not approval.rejected_later
    required_because = []
    if task is not None and task.risk_level == "critical":
        required_because.append("the task is critical")
    if evaluation is not None and evaluation.require_approval:
        required_because.append("the policy evaluation requires approval")
    if usable:
        report.approval_ref = approval.approval_id
        report.approval_conditions = [str(item) for item in (approval.conditions or [])]
        results.ok("approval", f"approval {approval.approval_id!r} by {approval.approver!r} is approved and "
                               f"unexpired")
    elif required_because:
        why = " and ".join(required_because)
        if approval is not None:
            results.fail("approval", f"approval is required ({why}); approval {approval.approval_id!r} was "
                                     f"rejected by a later approval")
        else:
            results.fail("approval", f"approval is required ({why}) but decision {inputs.decision_ref!r} has no "
                                     f"approved, unexpired approval")
    else:
        results.ok("approval", "not required")

    # 8. escalation -------------------------------------------------------------------
    blocking = list(escalations_blocking(task_id=inputs.task_id, decision_id=inputs.decision_ref,
                                         action_id=inputs.action_id)
                    .values_list("escalation_id", "status")[:5])
    if blocking:
        names = ", ".join(f"{eid!r} ({'open' if status == 'open' else 'upheld'})" for eid, status in blocking)
        results.fail("escalation", f"blocking escalation(s) on the task, decision or action: {names}")
    else:
        results.ok("escalation", "no open or upheld escalation")

    # 9. commerce ---------------------------------------------------------------------
    if task is None:
        results.fail("commerce", "cannot tell whether the action transacts: no task")
    elif task.action_class == "transact":
        _check_commerce(inputs=inputs, task=task, delegation=delegation, chain=chain, now=now, own=own,
                        results=results, report=report)
    else:
        results.ok("commerce", f"not required for action class {task.action_class}")

    # 10. created_at ------------------------------------------------------------------
    if inputs.created_at > now + CLOCK_SKEW:
        results.fail("created_at", f"created_at {inputs.created_at.isoformat()} is more than "
                                   f"{int(CLOCK_SKEW.total_seconds())} s in the future")
    else:
        results.ok("created_at", "not in the future")

    report.results = results.ordered()
    return report


def _check_commerce(*, inputs: EnvelopeInputs, task: Task, delegation: Delegation | None, chain: list,
                    now: datetime,
                    own: OwnReservation | None, results: _Results, report: CheckReport) -> None:
    """Check 9 for ``transact``: session with room, chain spend limits, liability binding.

    Three queries: the session, the spending under each link of the chain (one
    conditional aggregate), the liability binding.
    """
    problems = []
    amount = _to_decimal(inputs.parameters.get("amount"))
    currency = inputs.parameters.get("currency")
    if amount is None or amount <= 0:
        problems.append("a transact action needs parameters.amount, a number greater than 0")
        amount = None
    elif amount != amount.quantize(AMOUNT_QUANTUM) or amount >= MAX_AMOUNT:
        # Amounts are stored with 4 decimal places: a finer amount would be rounded on one
        # side of the ledger and not the other.
        problems.append(f"parameters.amount {amount} has more than 4 decimal places or is too large")
        amount = None
    if not isinstance(currency, str) or len(currency) != 3:
        problems.append("a transact action needs parameters.currency, a 3-letter currency code")
        currency = None
    report.amount, report.currency = amount, currency

    # The session: pinned when the envelope already holds a reservation; otherwise the
    # open, unexpired session for the task and agent that fits best (currency, then room).
    sessions = CommerceSession.objects.filter(task_id=task.task_id, agent_id=inputs.agent_id)
    if own is not None:
        session = sessions.filter(session_id=own.session_id).select_related("delegation").first()
    else:
        session = (sessions.filter(status="open").filter(_unexpired(now))
                   .annotate(currency_rank=Case(When(currency=currency or "", then=Value(0)), default=Value(1),
                                                output_field=IntegerField()),
                             room_rank=Case(When(Q(amount_limit__gte=F("spent_amount") + F("reserved_amount")
                                                   + Value(amount or ZERO, output_field=MONEY)), then=Value(0)),
                                            default=Value(1), output_field=IntegerField()))
                   .select_related("delegation")
                   .order_by("currency_rank", "room_rank", "created_at", "pk").first())
    if session is None:
        problems.append(f"no open, unexpired commerce session for task {task.task_id!r} and agent "
                        f"{inputs.agent_id!r}")
    else:
        report.commerce_session_ref = session.session_id
        if session.status != "open":
            problems.append(f"commerce session {session.session_id!r} is {session.status}")
        if _expired(session.expires_at, now):
            problems.append(f"commerce session {session.session_id!r} has expired")
        if currency is not None and session.currency != currency:
            problems.append(f"commerce session {session.session_id!r} is in {session.currency}, not {currency}")
        if amount is not None:
            own_held = (own.reserved + own.spent) if own is not None else ZERO
            room = session.amount_limit - session.spent_amount - session.reserved_amount + own_held
            if amount > room:
                problems.append(f"commerce session {session.session_id!r} has {room} {session.currency} left, "
                                f"less than {amount}")

    # The delegation's spend limit, for every link of the agent's chain: what all sessions
    # under a link (its own and its descendants') have spent or reserved, plus this
    # amount, stays within that link's limit.
    if delegation is not None:
        # Without a usable delegation check 2 already fails (and the verdict with it):
        # there is no chain whose spend limits could be measured.
        if session is not None and session.delegation_id not in {link.delegation_id for link in chain}:
            problems.append(f"commerce session {session.session_id!r} is under delegation "
                            f"{session.delegation_id!r}, outside the agent's delegation chain")
        sums = CommerceSession.objects.filter(delegation__path__startswith=chain[0].path).aggregate(**{
            f"link_{link.pk}": Coalesce(Sum(Case(
                When(delegation__path__startswith=link.path,
                     then=F("spent_amount") + F("reserved_amount")),
                default=Value(ZERO), output_field=MONEY)), Value(ZERO), output_field=MONEY)
            for link in chain})
        for link in chain:
            if link.spend_currency is None or link.spend_amount is None:
                problems.append(f"delegation {link.delegation_id!r} grants no spending authority (no spend_limit)")
                continue
            if currency is not None and link.spend_currency != currency:
                problems.append(f"delegation {link.delegation_id!r} spend limit is in {link.spend_currency}, "
                                f"not {currency}")
                continue
            if amount is None:
                continue
            used = sums[f"link_{link.pk}"] or ZERO
            if own is not None and session is not None and session.delegation.path.startswith(link.path):
                used -= own.reserved + own.spent
            if used + amount > link.spend_amount:
                problems.append(f"delegation {link.delegation_id!r} spend limit {link.spend_amount} "
                                f"{link.spend_currency} would be exceeded ({used} already spent or reserved)")

    binding = (LiabilityBinding.objects.filter(agent_id=inputs.agent_id, root_principal=task.root_principal,
                                               status="active")
               .filter(_unexpired(now))
               .exclude(_revoked("liability_binding", OuterRef("binding_id")))
               .order_by("-created_at", "-pk").first())
    if binding is None:
        problems.append(f"agent {inputs.agent_id!r} has no active liability binding for root principal "
                        f"{task.root_principal!r}")
    elif binding.coverage_amount is not None and amount is not None and (
            binding.coverage_currency != currency or amount > binding.coverage_amount):
        problems.append(f"liability binding {binding.binding_id!r} covers {binding.coverage_amount} "
                        f"{binding.coverage_currency}, not {amount} {currency}")

    if problems:
        results.fail("commerce", *problems)
    else:
        results.ok("commerce", f"{amount} {currency} fits commerce session {session.session_id!r}, the spend "
                               f"limits of the delegation chain, and liability binding {binding.binding_id!r}")


def own_reservation(*, envelope) -> OwnReservation | None:
    """What ``envelope`` already holds on its commerce session (one query; None if it reserved nothing)."""
    from .choices import PaymentStatus
    from .models import Payment

    if not envelope.commerce_session_ref:
        return None
    payment = Payment.objects.filter(envelope_id=envelope.action_id).values_list("status", "amount").first()
    status, amount = payment if payment is not None else (None, ZERO)
    return OwnReservation(session_id=envelope.commerce_session_ref,
                          reserved=amount if status == PaymentStatus.RESERVED else ZERO,
                          spent=amount if status == PaymentStatus.COMMITTED else ZERO)


def envelope_recheck(*, envelope, now: datetime | None = None) -> CheckReport:
    """Re-run all ten checks on a stored envelope's inputs, against the state of ``now``.

    The envelope's own reservation (or committed payment) counts as its own: the commerce
    check uses the session it reserved on and does not count its amount twice.
    """
    return envelope_checks(inputs=EnvelopeInputs.from_json(envelope.inputs), now=now,
                           own=own_reservation(envelope=envelope))
