"""The eleven fail-closed checks (the ten of docs/reference/execution.md, docs/reference/governance.md's freeze), each a pure function
of the loaded state.

Nothing here queries the database: ``execution.checks.state`` loaded everything. Each rule
returns its ``Outcome``; the rules that resolve a reference (the usable delegation, the
approval, the commerce session) return it beside the outcome.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from agp_project.canonical import action_hash
from agp_project.currencies import MAX_AMOUNT, decimals_of, minor_units
from agp_project.exactjson import decimal_text
from decision.models import Approval, CommerceSession, Escalation, ImpactAssessment, PolicyEvaluation
from decision.selectors import ZERO, Authors, approvals_required, impact_assessment_required
from registry.models import Capability, Delegation, Freeze, LiabilityBinding, Skill, Task, path_pks
from registry.scopes import scope_covers, tool_id_unambiguous, tool_scope
from registry.selectors import delegation_links_problem, freeze_targets_text
from registry.tool_pins import mcp_pins_problem

from ..choices import PaymentStatus
from ..models import Payment
from .report import EnvelopeInputs, Outcome

CLOCK_SKEW = timedelta(seconds=60)
# Where the currency is unknown, the most any ISO 4217 currency has (the DecimalField's 4 places).
MAX_DECIMALS = 4


def _expired(value: datetime | None, now: datetime) -> bool:
    return value is not None and value <= now


def to_decimal(value: Any) -> Decimal | None:
    """A finite JSON number as a Decimal, else None. A numeric *string* is None: an amount
    sent as ``"1e-2"`` must not be reserved as 0.01 while the tool receives the string."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return None
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def amount_problem(amount: Decimal | None, currency: Any = None) -> str | None:
    """Why ``amount`` (in ``currency``, when known) cannot be transacted, or None when it can."""
    if amount is None or amount <= 0:
        return "a transact action needs parameters.amount, a JSON number greater than 0"
    if amount >= MAX_AMOUNT:
        return f"parameters.amount {amount} is too large"
    units = minor_units(currency) if isinstance(currency, str) else None
    allowed = MAX_DECIMALS if units is None else units
    if decimals_of(amount) > allowed:
        # Never rounded: the amount reserved must be the amount the tool receives.
        return (f"parameters.amount {amount} has more decimals than {currency if units is not None else 'any currency'} "
                f"has ({allowed})")
    return None


def usable_amount(parameters: dict[str, Any]) -> Decimal | None:
    """``parameters.amount`` when it can be transacted, else None."""
    amount = to_decimal(parameters.get("amount"))
    return None if amount_problem(amount, parameters.get("currency")) else amount


def is_currency(value: Any) -> bool:
    return isinstance(value, str) and minor_units(value) is not None


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
        number = to_decimal(value) if not isinstance(value, str) else None
        if number is None:
            problems.append(f"parameter {name!r}={value!r} is not a number")
            continue
        low, high = to_decimal(spec.get("min")), to_decimal(spec.get("max"))
        if ("min" in spec and low is None) or ("max" in spec and high is None):
            problems.append(f"parameter {name!r} has an unsupported range {spec!r}")
        elif low is not None and number < low:
            problems.append(f"parameter {name!r}={value!r} is below the minimum {spec['min']!r}")
        elif high is not None and number > high:
            problems.append(f"parameter {name!r}={value!r} is above the maximum {spec['max']!r}")
    return problems


# --- 1. task -----------------------------------------------------------------------------------------
def _agent_problem(kind: str, record_id: str, owner: str, agent_id: str) -> str | None:
    """Why a record of another agent cannot govern this envelope (docs/reference/governance.md), or None."""
    if owner != agent_id:
        return f"{kind} {record_id!r} belongs to agent {owner!r}, not to the envelope's agent {agent_id!r}"
    return None


def check_task(*, task: Task | None, inputs: EnvelopeInputs) -> Outcome:
    if task is None:
        return Outcome.fail("task", f"task {inputs.task_id!r} does not exist")
    problems = [problem for problem in (
        f"task {task.task_id!r} is {task.status}, not open" if task.status != "open" else None,
        _agent_problem("task", task.task_id, task.agent_id, inputs.agent_id)) if problem]
    if problems:
        return Outcome.fail("task", *problems)
    return Outcome.ok("task", f"task {task.task_id!r} is open and the envelope's agent's")


# --- 2. delegation ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DelegationFound:
    outcome: Outcome
    delegation: Delegation | None = None
    chain: tuple[Delegation, ...] = ()  # root first, the delegation last


def check_delegation(*, task: Task | None, inputs: EnvelopeInputs, candidates: list[Delegation],
                     links: dict[int, Delegation], now: datetime) -> DelegationFound:
    """The agent's newest delegation for the root principal whose whole chain is usable,
    preferring the one the capability was issued under (``candidates`` are in that order)."""
    if task is None:
        return DelegationFound(Outcome.fail("delegation", "no root principal to look up: the task does not exist"))
    broken = None
    for candidate in candidates:
        chain = tuple(links.get(pk) for pk in path_pks(candidate.path))
        # The validity rule is the registry's (one definition for docs/reference/governance.md, docs/reference/execution.md).
        problem = delegation_links_problem(links=list(chain), now=now) if chain else "it has no recorded chain"
        if problem is None:
            return DelegationFound(Outcome.ok("delegation", f"delegation {candidate.delegation_id!r} and its whole "
                                                            f"chain are active"), candidate, chain)
        broken = broken or (f"delegation {candidate.delegation_id!r} (held by the agent for root principal "
                            f"{task.root_principal!r}) is unusable: {problem}")
    if broken:
        return DelegationFound(Outcome.fail("delegation", broken))
    return DelegationFound(Outcome.fail("delegation", f"agent {inputs.agent_id!r} holds no active, unexpired "
                                                      f"delegation for root principal {task.root_principal!r}"))


# --- 3. capability and skill ------------------------------------------------------------------------------
def check_capability(*, capability: Capability | None, skill: Skill | None, delegation: Delegation | None,
                     inputs: EnvelopeInputs, now: datetime) -> Outcome:
    problems = []
    if not tool_id_unambiguous(inputs.tool_id):
        # A tool registered before ':' and '*' were refused: in a scope "pay:*" it could not be
        # told from tool "pay"'s operations, so no delegation scope can be read as covering it.
        problems.append(f"tool id {inputs.tool_id!r} contains ':' or '*', which scopes use as separators; "
                        f"register the tool under an id without them")
    if capability is None:
        problems.append(f"capability {inputs.capability_token_ref!r} does not exist")
    else:
        if capability.status != "active" or capability.revoked_record or capability.agent_revoked:
            problems.append(f"capability {capability.capability_id!r} is revoked")
        if _expired(capability.expires_at, now):
            problems.append(f"capability {capability.capability_id!r} expired at {capability.expires_at.isoformat()}")
        if capability.agent_id != inputs.agent_id:
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
        problems.extend(parameters_violations(inputs.parameters, capability.allowed_parameter_ranges or {}))
    if skill is None:
        problems.append(f"agent {inputs.agent_id!r} has no active skill for tool {inputs.tool_id!r}")
    elif skill.connector == "mcp":
        # docs/reference/governance.md: the operations are tools the skill pinned at registration.
        granted = (capability.operations or []) if capability is not None else []
        problem = mcp_pins_problem(skill.tool_pins, granted, called=inputs.operation)
        if problem:
            problems.append(f"skill {skill.skill_id!r}: {problem}")
    if problems:
        return Outcome.fail("capability", *problems)
    return Outcome.ok("capability", f"capability {capability.capability_id!r} covers {inputs.tool_id}:"
                                    f"{inputs.operation} within delegation scope; skill {skill.skill_id!r}")


# --- 4. decision ------------------------------------------------------------------------------------------
def check_decision(*, decision, inputs: EnvelopeInputs, finalising: str | None = None) -> Outcome:
    """``finalising``: a draft decision the caller finalises when every check passes (judged finalised)."""
    problems = []
    if decision is None:
        problems.append(f"decision {inputs.decision_ref!r} does not exist" if inputs.decision_ref
                        else "the envelope cites no decision")
    else:
        if decision.task_id != inputs.task_id:
            problems.append(f"decision {decision.decision_id!r} is for another task")
        problem = _agent_problem("decision", decision.decision_id, decision.agent_id, inputs.agent_id)
        if problem:
            problems.append(problem)
        if decision.status != "finalised" and decision.decision_id != finalising:
            problems.append(f"decision {decision.decision_id!r} is {decision.status}, not finalised")
        if decision.outcome != "approve":
            problems.append(f"decision {decision.decision_id!r} has outcome {decision.outcome!r}, not approve")
        # docs/reference/governance.md: a decision (and the approvals and assessments that count through it) is about the
        # action of the evaluation it was made on; cited beside another evaluation, it is not
        # about this action.
        if decision.policy_evaluation_id is None:
            problems.append(f"decision {decision.decision_id!r} names no policy evaluation, so it was made for no "
                            f"action")
        elif decision.policy_evaluation_id != inputs.policy_decision_ref:
            problems.append(f"decision {decision.decision_id!r} was made on policy evaluation "
                            f"{decision.policy_evaluation_id!r}, not the envelope's {inputs.policy_decision_ref!r}: "
                            f"it is about another action")
    if problems:
        return Outcome.fail("decision", *problems)
    return Outcome.ok("decision", f"decision {decision.decision_id!r} is finalised with outcome approve")


def _action_problem(evaluation: PolicyEvaluation, inputs: EnvelopeInputs) -> str | None:
    """Why ``evaluation`` was not made for this envelope's action, or None (compared by hash)."""
    wanted = action_hash(tool_id=inputs.tool_id, operation=inputs.operation, parameters=inputs.parameters)
    if evaluation.action_hash == wanted:
        return None
    prefix = f"policy evaluation {evaluation.evaluation_id!r} was evaluated for another action"
    action = evaluation.action
    if not action:
        return f"{prefix}: it names no action, so it clears none"
    differs = [name for name, value in (("tool_id", inputs.tool_id), ("operation", inputs.operation),
                                        ("parameters", inputs.parameters)) if action.get(name) != value]
    return f"{prefix} ({', '.join(differs) or 'its action'} not the envelope's)"


# --- 5. policy evaluation ---------------------------------------------------------------------------------
def check_policy_evaluation(*, evaluation: PolicyEvaluation | None, inputs: EnvelopeInputs) -> Outcome:
    problems = []
    if evaluation is None:
        problems.append(f"policy evaluation {inputs.policy_decision_ref!r} does not exist" if inputs.policy_decision_ref
                        else "the envelope cites no policy evaluation")
    else:
        policy_set = evaluation.policy_set
        if evaluation.task_id != inputs.task_id:
            problems.append(f"policy evaluation {evaluation.evaluation_id!r} is for another task")
        problem = _agent_problem("policy evaluation", evaluation.evaluation_id, evaluation.agent_id, inputs.agent_id)
        if problem:
            problems.append(problem)
        problem = _action_problem(evaluation, inputs)
        if problem:
            problems.append(problem)
        if not evaluation.allowed or not (evaluation.result or {}).get("allow", False):
            reasons = (evaluation.result or {}).get("reasons") or []
            problems.append(f"policy evaluation {evaluation.evaluation_id!r} did not allow the action"
                            + (f" ({', '.join(map(str, reasons))})" if reasons else ""))
        if policy_set.status == "revoked":
            problems.append(f"policy set {policy_set.policy_set_id!r} is revoked")
        if policy_set.shadow_of_id is not None:
            # docs/reference/governance.md: a shadow is evaluated to be watched, never to clear an action.
            problems.append(f"policy set {policy_set.policy_set_id!r} is a shadow of {policy_set.shadow_of_id!r}: "
                            f"its evaluations clear nothing")
        if policy_set.ruleset_hash != evaluation.ruleset_hash:
            problems.append(f"policy set {policy_set.policy_set_id!r} ruleset changed since the evaluation")
    if problems:
        return Outcome.fail("policy_evaluation", *problems)
    return Outcome.ok("policy_evaluation", f"policy evaluation {evaluation.evaluation_id!r} allowed the action "
                                           f"under policy set {evaluation.policy_set_id!r}")


# --- 6. impact assessment (docs/reference/governance.md rule 5) ---------------------------------------------------------------------
def check_impact_assessment(*, task: Task | None, assessment: ImpactAssessment | None,
                            inputs: EnvelopeInputs) -> Outcome:
    if task is None:
        return Outcome.fail("impact_assessment", "cannot tell whether an impact assessment is required: no task")
    if not impact_assessment_required(task=task):
        return Outcome.ok("impact_assessment", "not required for this task's risk level and action class")
    if assessment is None:
        return Outcome.fail("impact_assessment", f"a {task.risk_level} {task.action_class} task needs an impact "
                                                 f"assessment for decision {inputs.decision_ref!r}")
    if assessment.recommendation == "do_not_proceed":
        return Outcome.fail("impact_assessment", f"impact assessment {assessment.assessment_id!r} recommends "
                                                 f"do_not_proceed")
    return Outcome.ok("impact_assessment", f"impact assessment {assessment.assessment_id!r} recommends "
                                           f"{assessment.recommendation}")


# --- 7. approval ------------------------------------------------------------------------------------------
def approval_problem(approval: Approval, *, inputs: EnvelopeInputs, authors: Authors, open_service: bool,
                     signed_required: bool = False) -> str | None:
    """Why ``approval`` cannot count (docs/reference/identity.md), or None when it can."""
    subject = approval.approver.casefold()
    if subject == inputs.agent_id.casefold():
        return f"approval {approval.approval_id!r} is by the acting agent {approval.approver!r}"
    if open_service:
        return None
    if approval.approver_kind != "human":
        return (f"approval {approval.approval_id!r} was recorded by {approval.approver_kind or 'an unknown'} client "
                f"{approval.approver_client!r}: only a person's approval counts")
    if approval.approver_client in authors.clients or subject in authors.subjects:
        return f"approval {approval.approval_id!r} is by {approval.approver!r}, who asked for the action"
    if signed_required and not getattr(approval, "approver_signature", None):
        return f"approval {approval.approval_id!r} is not signed by its approver, and the policy asks for signed ones"
    return None


def check_approval(*, approvals: list[Approval], task: Task | None, evaluation: PolicyEvaluation | None,
                   inputs: EnvelopeInputs, authors: Authors, open_service: bool) -> tuple[Outcome, list[Approval]]:
    """The approvals that count for the decision, and whether there are enough of them.

    ``approvals``: the decision's approved, unexpired approvals and its rejections, newest
    first (server order). A rejection withdraws every approval recorded before it
    (approvals are immutable, so that is how one is withdrawn). Of the approvals after the
    newest rejection, those ``approval_problem`` does not set aside count once per person
    (distinct subjects). Returns the counted ones, newest first.
    """
    required, why = approvals_required(task=task, evaluation=evaluation)
    signed_required = bool(evaluation is not None and evaluation.result.get("signed_approvals_required"))
    counted: list[Approval] = []
    set_aside: list[str] = []
    withdrawn = None
    subjects: set[str] = set()
    for row in approvals:
        if row.verdict == "rejected":
            withdrawn = row
            break
        problem = approval_problem(row, inputs=inputs, authors=authors, open_service=open_service,
                                   signed_required=signed_required)
        if problem:
            set_aside.append(problem)
        elif row.approver.casefold() not in subjects:
            subjects.add(row.approver.casefold())
            counted.append(row)
    people = ", ".join(f"{row.approval_id!r} by {row.approver!r}" for row in counted)
    if not required:
        return Outcome.ok("approval", "not required" + (f"; approved: {people}" if counted else "")), counted
    if len(counted) >= required:
        return Outcome.ok("approval", f"{len(counted)} of {required} approvals: {people}"), counted

    reason = f"approval is required ({' and '.join(why)}): {len(counted)} of {required} approvals"
    if withdrawn is not None and not counted:
        reason += f"; the approvals recorded before {withdrawn.approval_id!r} were rejected by a later approval"

    elif not approvals:
        reason += f"; decision {inputs.decision_ref!r} has no approved, unexpired approval"
    if set_aside:
        reason += "; not counted: " + "; ".join(set_aside)
    return Outcome.fail("approval", reason), counted


# --- 8. escalation ----------------------------------------------------------------------------------------
def check_escalation(*, escalations: list[Escalation]) -> Outcome:
    if not escalations:
        return Outcome.ok("escalation", "no open or upheld escalation")
    names = ", ".join(f"{row.escalation_id!r} ({'open' if row.status == 'open' else 'upheld'})"
                      for row in sorted(escalations, key=lambda row: -row.pk))
    return Outcome.fail("escalation", f"blocking escalation(s) on the task, decision or action: {names}")


# --- 9. commerce ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OwnReservation:
    """An amount already held by the envelope being re-checked (its Payment row)."""

    session_id: str
    reserved: Decimal  # the part still counted in ``reserved_amount``
    spent: Decimal  # the part already moved into ``spent_amount``

    @classmethod
    def of(cls, *, session_id: str, payment: Payment | None) -> "OwnReservation":
        status, amount = (payment.status, payment.amount) if payment is not None else (None, ZERO)
        return cls(session_id=session_id, reserved=amount if status == PaymentStatus.RESERVED else ZERO,
                   spent=amount if status == PaymentStatus.COMMITTED else ZERO)


@dataclass(frozen=True)
class CommerceFound:
    outcome: Outcome
    session_ref: str | None = None
    amount: Decimal | None = None
    currency: str | None = None


def check_commerce(*, task: Task | None, inputs: EnvelopeInputs, delegation: Delegation | None,
                   chain: tuple[Delegation, ...], spending: list[Decimal] | None,
                   session: CommerceSession | None, binding: LiabilityBinding | None, now: datetime,
                   own: OwnReservation | None) -> CommerceFound:
    """Check 9 for ``transact``: a session with room, the chain's spend limits, a liability binding."""
    if task is None:
        return CommerceFound(Outcome.fail("commerce", "cannot tell whether the action transacts: no task"))
    if task.action_class != "transact":
        return CommerceFound(Outcome.ok("commerce", f"not required for action class {task.action_class}"))
    problems = []
    amount = to_decimal(inputs.parameters.get("amount"))
    currency = inputs.parameters.get("currency")
    problem = amount_problem(amount, currency)
    if problem:
        problems.append(problem)
        amount = None
    if not is_currency(currency):
        problems.append("a transact action needs parameters.currency, an ISO 4217 currency code")
        currency = None

    if session is None and inputs.commerce_session_id:
        problems.append(f"commerce session {inputs.commerce_session_id!r} is not one of task {task.task_id!r} and "
                        f"agent {inputs.agent_id!r}")
    elif session is None:
        problems.append(f"no open, unexpired commerce session for task {task.task_id!r} and agent "
                        f"{inputs.agent_id!r}")
    else:
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
                problems.append(f"commerce session {session.session_id!r} has {decimal_text(room)} {session.currency} left, "
                                f"less than {decimal_text(amount)}")

    # The delegation's spend limit, for every link of the agent's chain: what all sessions
    # under a link (its own and its descendants') have spent or reserved, plus this
    # amount, stays within that link's limit. Without a usable delegation check 2 already
    # fails (and the verdict with it): there is no chain to measure.
    if delegation is not None:
        if session is not None and session.delegation_id not in {link.delegation_id for link in chain}:
            problems.append(f"commerce session {session.session_id!r} is under delegation "
                            f"{session.delegation_id!r}, outside the agent's delegation chain")
        for link, used in zip(chain, spending, strict=True):
            if link.spend_currency is None or link.spend_amount is None:
                problems.append(f"delegation {link.delegation_id!r} grants no spending authority (no spend_limit)")
                continue
            if currency is not None and link.spend_currency != currency:
                problems.append(f"delegation {link.delegation_id!r} spend limit is in {link.spend_currency}, "
                                f"not {currency}")
                continue
            if amount is None:
                continue
            if own is not None and session is not None and session.delegation.path.startswith(link.path):
                used -= own.reserved + own.spent
            if used + amount > link.spend_amount:
                problems.append(f"delegation {link.delegation_id!r} spend limit {decimal_text(link.spend_amount)} "
                                f"{link.spend_currency} would be exceeded ({decimal_text(used)} already spent or reserved)")

    if binding is None:
        problems.append(f"agent {inputs.agent_id!r} has no active liability binding for root principal "
                        f"{task.root_principal!r}")
    elif binding.coverage_amount is not None and amount is not None and (
            binding.coverage_currency != currency or amount > binding.coverage_amount):
        problems.append(f"liability binding {binding.binding_id!r} covers {decimal_text(binding.coverage_amount)} "
                        f"{binding.coverage_currency}, not {decimal_text(amount)} {currency}")

    session_ref = session.session_id if session is not None else None
    if problems:
        return CommerceFound(Outcome.fail("commerce", *problems), session_ref, amount, currency)
    return CommerceFound(Outcome.ok("commerce", f"{decimal_text(amount)} {currency} fits commerce session {session.session_id!r}, "
                                                f"the spend limits of the delegation chain, and liability binding "
                                                f"{binding.binding_id!r}"), session_ref, amount, currency)


# --- 10. created_at ---------------------------------------------------------------------------------------
def check_created_at(*, inputs: EnvelopeInputs, now: datetime) -> Outcome:
    if inputs.created_at > now + CLOCK_SKEW:
        return Outcome.fail("created_at", f"created_at {inputs.created_at.isoformat()} is more than "
                                          f"{int(CLOCK_SKEW.total_seconds())} s in the future")
    return Outcome.ok("created_at", "not in the future")


# --- 11. freeze (docs/reference/governance.md) -------------------------------------------------------------------------------------
def check_freeze(*, freezes: list[Freeze]) -> Outcome:
    """Fails while an active freeze names the agent, the task's root principal or the tool (or ``all``).

    The reason names the freezes, not their ``reason``: that is the operator's note, not the agent's.
    """
    if freezes:
        return Outcome.fail("freeze", f"frozen by {freeze_targets_text(freezes)}")
    return Outcome.ok("freeze", "no active freeze of the agent, the task's root principal or the tool")
