"""The eleven fail-closed checks of an action envelope: the ten of docs/reference/execution.md, docs/reference/governance.md's ``freeze``.

``envelope_checks`` loads what the checks need (``state``: a fixed number of ORM queries)
and runs every rule (``rules``: pure functions of that state), even after one has failed.
It returns a ``CheckReport`` with each check's outcome and the references the checks
resolved (delegation, approval, commerce session, allowed parameter ranges, parameters hash).

The same function serves three callers:

- submission (``execution.services``): the envelope as received;
- execution (``envelope_recheck``): the stored inputs, counting the envelope's own budget
  reservation as its own, and the commerce session pinned to the one reserved on;
- replay (``execution.replay``): the stored inputs against today's state.
"""

from datetime import datetime

from django.utils import timezone

from auth_tokens.services import auth_enabled
from registry.selectors import freeze_summaries


from .report import CHECK_NAMES, CheckReport, EnvelopeInputs, Outcome
from .rules import (
    OwnReservation,
    check_approval,
    check_capability,
    check_commerce,
    check_created_at,
    check_decision,
    check_delegation,
    check_escalation,
    check_freeze,
    check_impact_assessment,
    check_policy_evaluation,
    check_task,
    parameters_violations,
    usable_amount,
)
from .state import AlreadyRead, Created, ToolRead, envelope_state_load, freezes_stopping, spending_of_chain

__all__ = ["CHECK_NAMES", "AlreadyRead", "CheckReport", "Created", "EnvelopeInputs", "Outcome", "ToolRead",
           "envelope_checks", "envelope_recheck", "freezes_stopping", "parameters_violations"]


def envelope_checks(*, inputs: EnvelopeInputs, now: datetime | None = None,
                    held_on: str | None = None, new: bool = False,
                    tenants: frozenset[str] | None = None, finalising: str | None = None,
                    created: Created | None = None, read: AlreadyRead | None = None) -> CheckReport:
    """Run all eleven checks on ``inputs``; never stops at the first failure.

    ``held_on``: the commerce session on which the envelope already holds a reservation
    (execution-time re-check, replay): the commerce check then uses that session and
    counts the envelope's own payment as available to it.

    ``new``: ``inputs`` is a submission (validation or acceptance). When an envelope with
    its ``action_id`` was already accepted, no check runs and the report is
    ``already_accepted`` (and does not pass): the caller answers 409, as for any duplicate id.

    ``tenants``: those of a caller bound to tenants; records of others are not found.

    ``finalising``: the id of a draft decision the caller finalises, in its transaction, when
    every check passes (an action made in one call, execution/one_call.py): it is judged as
    finalised.

    ``created``: the decision and evaluation the caller has just created in its transaction
    (execution/one_call.py), judged as created instead of read back. ``read``: the task and
    the freezes the caller has just read (the same call), judged as read.
    """
    now = now or timezone.now()
    report = CheckReport(results=[], parameters_hash=inputs.parameters_hash)
    state = envelope_state_load(inputs=inputs, now=now, held_on=held_on, new=new,
                                amount=usable_amount(inputs.parameters), tenants=tenants, created=created,
                                read=read)
    if state.already_accepted:
        report.already_accepted = True
        return report

    task = state.task
    report.action_class = task.action_class if task is not None else None
    report.root_principal = task.root_principal if task is not None else None

    found = check_delegation(task=task, inputs=inputs, candidates=state.candidates, links=state.links, now=now)
    spending = state.spending
    if found.delegation is not None:
        report.delegation_ref = found.delegation.delegation_id
        report.chain = found.chain
        paths = [link.path for link in found.chain]
        if spending is not None and paths != state.spending_paths:
            # The usable chain is not the first candidate's, whose spending was read.
            spending = spending_of_chain(paths=paths)
    report.evaluation = state.evaluation
    if state.assessment_read:
        report.assessment_read = True
        report.assessment_id = state.assessment.assessment_id if state.assessment is not None else None
    if state.capability is not None:
        report.allowed_parameter_ranges = state.capability.allowed_parameter_ranges or {}
    if state.skill is not None:
        report.skill_id = state.skill.skill_id
        report.skill_connector, report.skill_endpoint_url = state.skill.connector, state.skill.endpoint_url
        report.skill_tool_pins = state.skill.tool_pins or []
        report.skill_executor_client_id = state.skill.executor_client_id
    approval_outcome, approvals = check_approval(approvals=state.approvals, task=task, evaluation=state.evaluation,
                                                 inputs=inputs, authors=state.authors, open_service=not auth_enabled())
    if approvals:
        report.approval_ref = approvals[0].approval_id
        report.approval_ids = [approval.approval_id for approval in approvals]
        report.approval_conditions = [str(item) for approval in approvals for item in (approval.conditions or [])]

    own = OwnReservation.of(session_id=held_on, payment=state.payment) if held_on else None
    commerce = check_commerce(task=task, inputs=inputs, delegation=found.delegation, chain=found.chain,
                              spending=spending, session=state.session, binding=state.binding, now=now, own=own)
    report.commerce_session_ref, report.amount, report.currency = commerce.session_ref, commerce.amount, \
        commerce.currency

    outcomes = [
        check_task(task=task, inputs=inputs),
        found.outcome,
        check_capability(capability=state.capability, skill=state.skill, delegation=found.delegation,
                         inputs=inputs, now=now),
        check_decision(decision=state.decision, inputs=inputs, finalising=finalising),
        check_policy_evaluation(evaluation=state.evaluation, inputs=inputs),
        check_impact_assessment(task=task, assessment=state.assessment, inputs=inputs),
        approval_outcome,
        check_escalation(escalations=state.escalations),
        commerce.outcome,
        check_created_at(inputs=inputs, now=now),
        check_freeze(freezes=state.freezes),
    ]
    report.results = [outcome.as_dict() for outcome in outcomes]
    report.freezes = freeze_summaries(state.freezes)
    return report


def envelope_recheck(*, envelope, now: datetime | None = None) -> CheckReport:
    """Re-run all eleven checks on a stored envelope's inputs, against the state of ``now``.

    The envelope's own reservation (or committed payment) counts as its own: the commerce
    check uses the session it reserved on and does not count its amount twice.
    """
    return envelope_checks(inputs=EnvelopeInputs.from_json(envelope.inputs), now=now,
                           held_on=envelope.commerce_session_ref or None)

