"""One call per governed action (docs/reference/gateway.md): the task's policy set decides.

An envelope that cites no decision and no policy evaluation, for a task that names a
policy set (``Task.policy_set``), is governed in the one request: the set is evaluated on
the exact action (Rego ``input`` = ``{"action": {"tool_id", "operation", "parameters"},
"task": {"task_id", "root_principal", "risk_level", "action_class"}, "agent_id"}``), and
one transaction records the evaluation, the decision the policy made (``decided_by:
"policy"``) and the envelope, after all eleven checks ran on them. The REST API
(``POST /agp/action-envelopes``) and the MCP gateway (``gateway/``) both come here.

- The policy allows and asks for nobody: an ``approve`` decision, final at once.
- It allows but people must act (``require_approval``, a critical task, rule 5's impact
  assessment): the ``approve`` decision waits as a draft and the call is refused with
  ``details.decision_id``. The same call again (same task, agent and action), when the set
  still sends it to people, takes that waiting decision instead of recording a new one;
  once the approvals and the assessment are there, the checks pass, the decision is
  finalised and the action goes ahead, in one transaction. A waiting decision is used
  once: its row is locked, so a call that finds it finalised meanwhile records its own
  evaluation and decision, which wait again.
- It does not allow: a ``deny`` decision, final; the call is refused.

Nothing is evaluated for an agent, principal or tool that is frozen, nor for a task that
names no policy set: the checks then refuse the call (``freeze``, ``decision``,
``policy_evaluation``). A refused call keeps its evaluation and decision on the record,
with the refusal (``envelope.rejected``).
"""

from dataclasses import dataclass, replace

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agp_project import errors
from agp_project.canonical import action_document
from agp_project.http.prefer import EXECUTE, VALIDATE
from agp_project.ids import new_id
from core.ledger import ledger_batch
from decision.choices import DecidedBy, DecisionOutcome, DecisionStatus
from decision.models import Decision
from decision.selectors import impact_assessment_required
from decision.services import (
    decision_by_policy,
    Evaluated,
    decision_finalise_locked,
    policy_evaluate,
    policy_evaluation_record,
    policy_sets_with_shadows,
)
from registry.choices import PolicySetStatus
from registry.models import PolicySet, Task

from .checks import AlreadyRead, CheckReport, Created, EnvelopeInputs, ToolRead, envelope_checks, freezes_stopping
from .models import ActionEnvelope, Operation
from .runner import Claim, claim_start
from .services import (
    broker_ensure_reachable,
    envelope_accepted,
    envelope_acceptance,
    envelope_reject,
    envelope_rejection_record,
    envelope_validated,
)

# The gateway's mode: accept, and claim the operation for the caller, who calls the tool itself.
INLINE = "inline"


@dataclass
class Governed:
    """What one call made: the evaluation and decision (None when nothing was evaluated), and
    the envelope (unsaved when only validated) with its operation when accepted."""

    evaluation_id: str
    decision_id: str
    envelope: ActionEnvelope
    operation: Operation | None = None
    claim: Claim | None = None  # INLINE: what the caller calls, under its claim of the operation


def _governing_read(inputs: EnvelopeInputs, tenants: frozenset[str] | None, tool: ToolRead | None) -> AlreadyRead:
    """The task with its policy set, annotated with whether the set has active shadows
    (``shadowed``), and the freezes that stop the action, in two queries, with ``tool``; the
    checks judge all of it as read here. The task is None when it does not exist or is
    another tenant's."""
    task = (Task.objects.select_related("policy_set").filter(task_id=inputs.task_id)
            .annotate(shadowed=Exists(PolicySet.objects.filter(shadow_of_id=OuterRef("policy_set_id"),
                                                               status=PolicySetStatus.ACTIVE)))
            .first())
    if task is not None and tenants is not None and task.root_principal not in tenants:
        task = None
    return AlreadyRead(task=task, freezes=freezes_stopping(inputs, task.root_principal if task else None), tool=tool)


def policy_input(task: Task, agent_id: str) -> dict:
    """The Rego input besides the action: who acts, on which task (docs/reference/gateway.md)."""
    return {"task": {"task_id": task.task_id, "root_principal": task.root_principal,
                     "risk_level": task.risk_level, "action_class": task.action_class},
            "agent_id": agent_id}


def _waits_for_people(task: Task, evaluated: Evaluated) -> bool:
    return bool(evaluated.outcome.require_approval or task.risk_level == "critical"
                or impact_assessment_required(task=task))


def _waiting_locked(task: Task, evaluated: Evaluated, agent_id: str) -> Decision | None:
    """The newest decision the task's policy set made for this agent and action that waits for
    people, on an evaluation of the set as it is now, locked, with its evaluation; None when
    there is none (or a concurrent call finalised it: a row that no longer matches once its
    lock is granted is not returned)."""
    return (Decision.objects.select_for_update(of=("self",)).select_related("policy_evaluation")
            .filter(task_id=task.task_id, agent_id=agent_id, decided_by=DecidedBy.POLICY,
                    status=DecisionStatus.DRAFT, outcome=DecisionOutcome.APPROVE,
                    policy_evaluation__action_hash=evaluated.action_hash,
                    policy_evaluation__policy_set_id=task.policy_set_id,
                    policy_evaluation__ruleset_hash=evaluated.policy_set.ruleset_hash)
            .order_by("-pk").first())


def action_govern(*, inputs: EnvelopeInputs, actor: str, mode: str, tenants: frozenset[str] | None = None,
                  executor: str = "", minted: bool = False, tool: ToolRead | None = None) -> Governed:
    """Govern ``inputs`` (without ``decision_ref`` and ``policy_decision_ref``) by its task's policy set.

    ``mode``: ``VALIDATE`` (the signed envelope as it would execute, nothing executed),
    ``EXECUTE`` (accepted for a worker, as ``Prefer: respond-async``) or ``INLINE``
    (accepted, its operation claimed for ``executor``, the caller, which calls the tool
    itself: the MCP gateway; ``Governed.claim`` says what to call). A refusal is the 422 of any envelope, with
    ``details.decision_id`` when the decision waits for people.

    ``minted``: ``inputs.action_id`` was made for this call (the MCP gateway's), so no
    envelope has it and the checks do not look for one (the column is unique all the same).
    ``tool``: the skills and the capability the caller read to find the tool called (the
    MCP gateway); the checks judge them as read.
    """
    action = action_document(tool_id=inputs.tool_id, operation=inputs.operation, parameters=inputs.parameters)
    read = _governing_read(inputs, tenants, tool)
    task = read.task
    if task is None or task.policy_set_id is None or read.freezes:
        # Nothing to decide by (or nobody may act): the checks say what is missing.
        report = envelope_checks(inputs=inputs, new=not minted, tenants=tenants, read=read)
        if report.already_accepted:
            raise errors.duplicate_id("action envelope", "action_id", inputs.action_id)
        envelope_reject(inputs=inputs, report=report, actor=actor, mode=_ledger_mode(mode))
    if mode == EXECUTE:  # a worker will be told; inline, the caller executes it
        broker_ensure_reachable()
    return _govern(read=read, inputs=inputs, action=action, actor=actor, mode=mode, tenants=tenants,
                   executor=executor, minted=minted)


def _ledger_mode(mode: str) -> str:
    return VALIDATE if mode == VALIDATE else EXECUTE


def _govern(*, read: AlreadyRead, inputs: EnvelopeInputs, action: dict, actor: str, mode: str,
            tenants: frozenset[str] | None, executor: str, minted: bool) -> Governed:
    task, now = read.task, timezone.now()
    # The engine runs before the transaction: no lock is held while a ruleset runs.
    # The set as read with the task; its shadows are read only when it has any.
    sets = policy_sets_with_shadows(task.policy_set_id) if task.shadowed else [task.policy_set]
    policy_set = next((s for s in sets if s.policy_set_id == task.policy_set_id), None)
    if policy_set is None:  # deleted meanwhile: sets are protected, so never; fail closed anyway
        raise errors.Unavailable("The task's policy set could not be read.")
    evaluated = policy_evaluate(sets=sets, policy_set=policy_set, input=policy_input(task, inputs.agent_id),
                                action=action, now=now)
    waits = evaluated.allowed and _waits_for_people(task, evaluated)
    refusal = None
    checked: list[CheckReport] = []
    with envelope_acceptance(inputs=inputs, report=checked, actor=actor):
        with transaction.atomic(), ledger_batch():
            # Sent to people: a decision of the same call may already wait for them.
            waiting = _waiting_locked(task, evaluated, inputs.agent_id) if waits else None
            if waiting is not None:
                decision, evaluation = waiting, waiting.policy_evaluation
            else:
                evaluation = policy_evaluation_record(
                    evaluated, evaluation_id=new_id("pev"), task_id=task.task_id, agent_id=inputs.agent_id,
                    root_principal=task.root_principal, actor=actor, created_at=now)
                decision = decision_by_policy(actor=actor, task=task, agent_id=inputs.agent_id,
                                              evaluation=evaluation, waits=waits, now=now)
            cited = replace(inputs, decision_ref=decision.decision_id, policy_decision_ref=evaluation.evaluation_id)
            pending = decision.status == DecisionStatus.DRAFT
            report = envelope_checks(inputs=cited, new=not minted, tenants=tenants,
                                     finalising=decision.decision_id if pending else None,
                                     created=Created(decision, evaluation) if waiting is None else None,
                                     read=read)
            checked.append(report)
            if report.already_accepted:
                raise errors.duplicate_id("action envelope", "action_id", inputs.action_id)
            governed = Governed(evaluation_id=evaluation.evaluation_id, decision_id=decision.decision_id,
                                envelope=None)
            if not report.passed:
                # Recorded with the evaluation and the decision; raised once they are committed.
                refusal = envelope_rejection_record(
                    inputs=cited, report=report, actor=actor, mode=_ledger_mode(mode),
                    **({"decision_id": decision.decision_id} if pending else {}))
            else:
                if pending:
                    decision_finalise_locked(decision, actor=actor, root_principal=task.root_principal, now=now)
                _proceed(governed, inputs=cited, report=report, actor=actor, mode=mode, executor=executor, now=now)
    if refusal is not None:
        raise refusal
    return governed


def _proceed(governed: Governed, *, inputs: EnvelopeInputs, report: CheckReport, actor: str, mode: str,
             executor: str, now) -> None:
    """Every check passed: the envelope validated, or accepted (for a worker, or claimed inline)."""
    if mode == VALIDATE:
        governed.envelope = envelope_validated(inputs=inputs, report=report, actor=actor)
        return

    def take(operation, envelope):
        # The acceptance is the claim: the checks just passed in this transaction.
        governed.claim = claim_start(operation=operation, envelope=envelope, report=report, executor=executor,
                                     now=now, actor=actor)

    accepted = envelope_accepted(inputs=inputs, report=report, actor=actor, claim=take if mode == INLINE else None)
    governed.envelope, governed.operation = accepted.envelope, accepted.operation

