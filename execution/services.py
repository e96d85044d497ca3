"""Submitting action envelopes (docs/reference/execution.md): validate only, or validate and accept.

Both paths run all eleven checks (``execution.checks``). A rejection is recorded in the
ledger (``envelope.rejected``) in its own committed transaction and only then raised as
``PrerequisiteFailed``: the error handler does not roll back 4xx responses, and the
idempotency middleware commits the request transaction for them, so the record of the
refusal stays while nothing else was written (no envelope, operation, payment or
reservation).

Acceptance writes, in one transaction: the envelope (inputs as received, checks as
found, signed), the budget reservation and Payment for ``transact``, the Operation in
``pending``, the outbox message that makes a worker run it after commit, and the ledger
events. Any failure rolls all of it back.
"""

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import NoReturn

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agp_project import errors
from agp_project.broker import is_embedded as is_embedded_broker
from agp_project.http.prefer import EXECUTE, VALIDATE
from agp_project.ids import new_id
from agp_project.metrics import ENVELOPE_FAILED_CHECKS, ENVELOPES, count_on_commit
from agp_project.signing import get_signer, sign_resource
from agp_project.timeutil import iso
from core.ledger import ledger_append, ledger_batch, ledger_record
from core.outbox import outbox_enqueue

from .budgets import BudgetExhausted, payment_reserve
from .checks import CHECK_NAMES, CheckReport, EnvelopeInputs, envelope_checks
from .choices import EXECUTE_TASK, OperationStatus
from .documents import envelope_document
from .models import ActionEnvelope, Operation
from .selectors import action_trail

BROKER_TIMEOUT_SECONDS = 1.0


@dataclass
class Accepted:
    envelope: ActionEnvelope
    operation: Operation


def envelope_inputs(*, validated: dict) -> EnvelopeInputs:
    """The submission as the checks see it: the server fills ``action_id`` and ``created_at``."""
    return EnvelopeInputs(
        action_id=validated.get("action_id") or new_id("act"),
        task_id=validated["task_id"], agent_id=validated["agent_id"], tool_id=validated["tool_id"],
        operation=validated["operation"], capability_token_ref=validated["capability_token_ref"],
        decision_ref=validated.get("decision_ref") or "", policy_decision_ref=validated.get("policy_decision_ref") or "",
        created_at=validated.get("created_at") or timezone.now(),
        parameters=validated.get("parameters") or {}, callback_url=validated.get("callback_url") or "")


def _submission_checks(inputs: EnvelopeInputs, tenants: frozenset[str] | None) -> CheckReport:
    """The checks of a submission; 409 when its action_id names an envelope already accepted.

    The duplicate is found by the checks' first statement, so it costs no round trip of
    its own, and it is answered before any check's outcome (nothing is recorded).
    """
    report = envelope_checks(inputs=inputs, new=True, tenants=tenants)
    if report.already_accepted:
        raise errors.duplicate_id("action envelope", "action_id", inputs.action_id)
    return report


def _ledger_payload(inputs: EnvelopeInputs, report: CheckReport, **extra) -> dict:
    return {"action_id": inputs.action_id, "task_id": inputs.task_id, "agent_id": inputs.agent_id,
            "tool_id": inputs.tool_id, "operation": inputs.operation, "parameters_hash": report.parameters_hash,
            "verdict": report.verdict, **extra}


def envelope_rejection_record(*, inputs: EnvelopeInputs, report: CheckReport, actor: str, mode: str,
                              **details) -> errors.PrerequisiteFailed:
    """Record the refusal (in the caller's transaction, or one of its own) and return the 422
    listing every failed check, with ``details`` beside them, for the caller to raise."""
    ledger_record(event_type="envelope.rejected", resource_type="ActionEnvelope", resource_id=inputs.action_id,
                  actor=actor, root_principal=report.root_principal, payload=_ledger_payload(
                      inputs, report, mode=mode, failed_checks=report.failed, **details))
    count_on_commit(ENVELOPES.labels("rejected"))
    for item in report.failed:
        count_on_commit(ENVELOPE_FAILED_CHECKS.labels(item["check"], "submission"))
    names = ", ".join(item["check"] for item in report.failed)
    return errors.PrerequisiteFailed(f"Governance prerequisites failed: {names}.",
                                     details={"action_id": inputs.action_id, "failed_checks": report.failed,
                                              **details})


def envelope_reject(*, inputs: EnvelopeInputs, report: CheckReport, actor: str, mode: str) -> NoReturn:
    """Record the refusal (committed), then raise 422 listing every failed check."""
    raise envelope_rejection_record(inputs=inputs, report=report, actor=actor, mode=mode)


def _attestation(report: CheckReport, now: datetime) -> dict:
    """The service's own GovernanceAttestation: every check cleared, under these conditions."""
    attestation = {
        "agent_id": get_signer().issuer,
        "agent_role": "executive",
        "verdict": "cleared",
        "conditions": report.approval_conditions,
        "notes": (f"All {len(CHECK_NAMES)} governance checks passed ({', '.join(CHECK_NAMES)}); "
                  f"delegation {report.delegation_ref}"
                  + (f", approval {report.approval_ref}" if report.approval_ref else "")
                  + (f", commerce session {report.commerce_session_ref}" if report.commerce_session_ref else "")
                  + "."),
        "attested_at": iso(now),
    }
    attestation["signature"] = sign_resource(attestation)
    return attestation


def _envelope(*, inputs: EnvelopeInputs, report: CheckReport, actor: str, now: datetime,
              payment_ref: str = "") -> ActionEnvelope:
    envelope = ActionEnvelope(
        action_id=inputs.action_id, task_id=inputs.task_id, agent_id=inputs.agent_id, tool_id=inputs.tool_id,
        operation=inputs.operation, capability_token_ref=inputs.capability_token_ref,
        decision_ref=inputs.decision_ref, policy_decision_ref=inputs.policy_decision_ref,
        parameters=inputs.parameters, parameters_hash=report.parameters_hash,
        allowed_parameter_ranges=report.allowed_parameter_ranges, approval_ref=report.approval_ref or "",
        commerce_session_ref=report.commerce_session_ref or "", payment_ref=payment_ref,
        delegation_ref=report.delegation_ref or "", callback_url=inputs.callback_url,
        governance_attestations=[_attestation(report, now)], inputs=inputs.as_json(), checks=report.results,
        submitted_by=actor, root_principal=report.root_principal, created_at=inputs.created_at, accepted_at=now)
    envelope.signature = sign_resource(envelope_document(envelope, signed=False))
    return envelope


def envelope_validate(*, inputs: EnvelopeInputs, actor: str, tenants: frozenset[str] | None = None) -> ActionEnvelope:
    """Validate only: the signed envelope as it would execute (unsaved); nothing reserved or run.

    ``tenants``: those of a caller bound to tenants, for whom other tenants' records do not exist.
    """
    report = _submission_checks(inputs, tenants)
    if not report.passed:
        envelope_reject(inputs=inputs, report=report, actor=actor, mode=VALIDATE)
    return envelope_validated(inputs=inputs, report=report, actor=actor)


def envelope_validated(*, inputs: EnvelopeInputs, report: CheckReport, actor: str) -> ActionEnvelope:
    """The signed envelope (unsaved) of a submission whose checks passed, its validation recorded."""
    envelope = _envelope(inputs=inputs, report=report, actor=actor, now=timezone.now())
    ledger_record(event_type="envelope.validated", resource_type="ActionEnvelope", resource_id=inputs.action_id,
                  actor=actor, root_principal=report.root_principal, payload=_ledger_payload(
                      inputs, report, approval_ref=report.approval_ref,
                      commerce_session_ref=report.commerce_session_ref, delegation_ref=report.delegation_ref,
                      signature_payload_hash=envelope.signature["payload_hash"]))
    count_on_commit(ENVELOPES.labels("validated"))
    return envelope


@functools.cache
def _redis_probe(url: str, timeout: float):
    """A Redis client kept per process for the probe: a PING on a pooled connection.

    Opening a fresh broker connection for every submission cost about 1.4 ms; a PING on
    a kept one costs a loopback round trip. A dead server still fails the PING (the pool
    drops the broken connection and the reconnect is refused).
    """
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, health_check_interval=0)


def broker_ensure_reachable(*, timeout: float = BROKER_TIMEOUT_SECONDS) -> None:
    """503 unless the broker answers: accepting work no worker can be told about helps no one.

    The embedded broker (a SQLite file) needs no server. The outbox would deliver later
    anyway; refusing up front tells the client now, with nothing stored.
    """
    from agp_project.celery import app

    url = app.conf.broker_url or settings.CELERY_BROKER_URL
    if is_embedded_broker(url):
        return

    try:
        if url.startswith(("redis://", "rediss://")):
            _redis_probe(url, timeout).ping()
            return
        with app.connection_for_write(url=url, connect_timeout=timeout) as conn:
            conn.ensure_connection(max_retries=0, timeout=timeout)
    except Exception as exc:  # any failure to connect is "unavailable", never a 500
        raise errors.Unavailable("The message broker is unreachable; nothing was accepted.") from exc


def envelope_accept(*, inputs: EnvelopeInputs, actor: str, tenants: frozenset[str] | None = None) -> Accepted:
    """Validate and accept for asynchronous execution (``Prefer: respond-async``); ``tenants`` as for
    ``envelope_validate``."""
    report = _submission_checks(inputs, tenants)
    if not report.passed:
        envelope_reject(inputs=inputs, report=report, actor=actor, mode=EXECUTE)
    broker_ensure_reachable()
    with envelope_acceptance(inputs=inputs, report=report, actor=actor):
        with transaction.atomic(), ledger_batch():
            return envelope_accepted(inputs=inputs, report=report, actor=actor)


@contextlib.contextmanager
def envelope_acceptance(*, inputs: EnvelopeInputs, report: CheckReport | list[CheckReport], actor: str):
    """Around the transaction that accepts an envelope whose checks passed: the two races it can
    lose become the answers they would have had (409, 422 naming the commerce check).

    ``report``: the checks' report, or a list the transaction appends it to when it runs them.
    """
    try:
        yield
    except IntegrityError:
        # Two submissions of one action_id both passed the checks' look-up: the unique index decides.
        if ActionEnvelope.objects.filter(action_id=inputs.action_id).exists():
            raise errors.duplicate_id("action envelope", "action_id", inputs.action_id) from None
        raise
    except BudgetExhausted as exc:
        # Another submission took the room between the checks and the reservation.
        report = report[-1] if isinstance(report, list) else report
        for result in report.results:
            if result["check"] == "commerce":
                result.update(passed=False, reason=exc.reason)
        envelope_reject(inputs=inputs, report=report, actor=actor, mode=EXECUTE)


def envelope_accepted(*, inputs: EnvelopeInputs, report: CheckReport, actor: str,
                      claim: Callable[[Operation, ActionEnvelope], None] | None = None) -> Accepted:
    """Inside the caller's transaction (and ledger batch): write the accepted envelope, its budget
    reservation and payment (``transact``), its operation and ledger events.

    Without ``claim`` the operation waits (``pending``) for a worker, told by an outbox
    message after the commit. With ``claim`` (the MCP gateway, which executes the call
    itself), ``claim(operation, envelope)`` moves the operation to ``running`` for the caller
    before it is written, and no message is sent.
    """
    now = timezone.now()
    transact = report.action_class == "transact"
    envelope = _envelope(inputs=inputs, report=report, actor=actor, now=now,
                         payment_ref=new_id("pay") if transact else "")
    envelope.save(force_insert=True)
    if transact:
        payment_reserve(envelope=envelope, session_id=report.commerce_session_ref, amount=report.amount,
                        currency=report.currency, chain_pks=report.chain_delegation_pks, actor=actor)
    operation = Operation(operation_id=new_id("op"), envelope=envelope, callback_url=inputs.callback_url,
                          created_at=now, updated_at=now)
    if claim is None:
        operation.save(force_insert=True)
        outbox_enqueue(task_name=EXECUTE_TASK, args=[operation.operation_id])
    ledger_append(event_type="envelope.accepted", resource_type="ActionEnvelope",
                  resource_id=envelope.action_id, actor=actor, root_principal=report.root_principal, payload=_ledger_payload(
                      inputs, report, operation_id=operation.operation_id, payment_ref=envelope.payment_ref,
                      approval_ref=report.approval_ref, commerce_session_ref=report.commerce_session_ref,
                      delegation_ref=report.delegation_ref,
                      signature_payload_hash=envelope.signature["payload_hash"]))
    ledger_append(event_type="operation.created", resource_type="Operation",
                  resource_id=operation.operation_id, actor=actor, root_principal=report.root_principal,
                  payload={**action_trail(envelope), "status": OperationStatus.PENDING})
    if claim is not None:
        claim(operation, envelope)
        operation.save(force_insert=True)
    count_on_commit(ENVELOPES.labels("accepted"))
    return Accepted(envelope=envelope, operation=operation)
