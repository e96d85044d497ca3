"""Backtests (docs/reference/governance.md): what a candidate policy set would have decided on recorded traffic.

``backtest_create`` (``POST /agp/backtests``) records the request, pending, and makes the
``agp.run_backtest`` task due through the outbox; ``backtest_run`` is that task's body. It
re-evaluates, under the candidate, every recorded policy evaluation of the window (of the
baseline set when one is named) with its recorded input and action, and stores the summary on the
backtest itself. Nothing else is written: no evaluation, no decision; the ledger records
only the backtest's own moves (created, running, and how it ended).

The run streams the window in keyset batches (``BATCH`` rows, by primary key, between the
window's first and last keys): memory holds one batch, at most ``MAX_CHANGES`` changes and
``MAX_REASONS`` distinct reasons, whatever the window's size. Each re-evaluation goes
through ``core.engine.evaluate``, with whatever limits the engine applies to any
evaluation. It runs in slices of ``SLICE_SECONDS``, each a task on the background queue that
hands its worker process back when it ends (``backtest_run``); each slice's progress write
renews the claim, and one that finds the backtest cancelled, or claimed by another worker,
stops the run, which writes nothing more. A run stops early at ``AGP_BACKTEST_MAX_SECONDS``
or ``AGP_BACKTEST_MAX_EVALUATIONS`` and says so in ``limit_reached``; a client may have
``AGP_BACKTESTS_PER_CLIENT`` unfinished backtests (429 past it).
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, transaction
from django.db.models import Count, Max, Min, Q, QuerySet
from django.utils import timezone
from django_fsm import ConcurrentTransition, can_proceed

from agp_project import errors
from agp_project.ids import new_id
from agp_project.timeutil import iso, not_in_future
from core import engine
from core.ledger import ledger_append
from core.outbox import outbox_enqueue
from registry.choices import PolicySetStatus
from registry.models import PolicySet

from .choices import BACKTEST_TASK, BACKTEST_TERMINAL, BacktestStatus
from .models import Backtest, PolicyEvaluation
from .services import policy_evaluation_input

logger = logging.getLogger(__name__)

RESOURCE = "Backtest"
ACTOR = "agp-worker"
DEFAULT_WINDOW = timedelta(days=30)
# Rows read per query.
BATCH = 500
# docs/reference/governance.md: the changes kept (the counts cover every evaluation).
MAX_CHANGES = 1000
# Distinct reasons counted in ``by_reason``; any further one counts under OTHER_REASONS.
MAX_REASONS = 1000
OTHER_REASONS = "(other reasons)"
# A denial whose ruleset gave no ``deny`` reason: its ``allow`` was not true.
NO_REASON = "(allow is not true)"
# Envelopes named per change.
MAX_ACTION_IDS = 100
# Seconds a client past its limit of unfinished backtests is told to wait: about what a
# backtest of an ordinary window takes.
RATE_LIMITED_RETRY_AFTER = 30
# How long one slice of a run lasts (then it writes its progress, which renews its claim and
# learns whether it was cancelled, and hands its worker process back, sending the next slice).
SLICE_SECONDS = 1.0

# The fields of a recorded evaluation a re-evaluation reads: its input and the action it was
# made for (docs/reference/governance.md), which ``_rego_input`` passes on as ``input.action``.
RECORDED = ("pk", "evaluation_id", "input", "action", "result")

ActionIdsOf = Callable[[list[str]], dict[str, list[str]]]


def _rego_input(row: dict[str, Any]) -> dict[str, Any]:
    """The recorded Rego input, with ``input.action`` set to the recorded action when there is one (docs/reference/governance.md)."""
    return policy_evaluation_input(input=row["input"], action=row["action"])


def _lease() -> timedelta:
    return timedelta(seconds=settings.AGP_OPERATION_LEASE_SECONDS)


# --- the summary ------------------------------------------------------------------------------
def _verdict(result: dict[str, Any] | None) -> tuple[bool, bool]:
    result = result or {}
    return result.get("allow") is True, result.get("require_approval") is True


@dataclass
class Tally:
    """What a backtest counts: every evaluation lands in exactly one of ``unchanged``,
    ``newly_denied``, ``newly_allowed`` and ``approval_changed`` (allowed before and after,
    with another ``require_approval``); ``errors`` counts those the candidate could not
    evaluate (they are denials, as every engine failure is). Two denials are unchanged,
    whatever their reasons."""

    evaluations: int = 0
    unchanged: int = 0
    newly_denied: int = 0
    newly_allowed: int = 0
    approval_changed: int = 0
    errors: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)
    by_reason: dict[str, int] = field(default_factory=dict)

    COUNTS = ("evaluations", "unchanged", "newly_denied", "newly_allowed", "approval_changed", "errors")

    def add(self, *, evaluation_id: str, before: dict[str, Any], after: dict[str, Any], errored: bool) -> None:
        self.evaluations += 1
        self.errors += int(errored)
        (allowed_before, approval_before), (allowed_after, approval_after) = _verdict(before), _verdict(after)
        if allowed_before and not allowed_after:
            self.newly_denied += 1
            for reason in after.get("reasons") or [NO_REASON]:
                self._count_reason(str(reason))
        elif allowed_after and not allowed_before:
            self.newly_allowed += 1
        elif allowed_before and approval_before != approval_after:
            # Only an allowed evaluation's require_approval decides anything.
            self.approval_changed += 1
        else:
            self.unchanged += 1
            return
        if len(self.changes) < MAX_CHANGES:
            self.changes.append({"evaluation_id": evaluation_id, "action_ids": [], "before": before, "after": after})

    def _count_reason(self, reason: str) -> None:
        if reason not in self.by_reason and len(self.by_reason) >= MAX_REASONS:
            reason = OTHER_REASONS
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.COUNTS}


# --- creating and cancelling ---------------------------------------------------------------------
def backtest_create(*, actor: str, policy_set_id: str, baseline_policy_set_id: str | None = None,
                    since: datetime | None = None, until: datetime | None = None, task_id: str | None = None,
                    agent_id: str | None = None, backtest_id: str | None = None,
                    created_at: datetime | None = None, root_principal: str | None = None) -> Backtest:
    """Record a backtest of ``policy_set_id`` (the candidate: any status but revoked), pending.

    ``since``/``until`` bound ``evaluated_at`` (``since`` included, ``until`` not); the
    default is the 30 days before now. 400 for an unknown set or an empty interval, 422
    ``AGP_PREREQUISITE_FAILED`` for a revoked candidate (as for an evaluation), 409 for a
    duplicate id. In one transaction: the backtest, its outbox message and ``backtest.created``.

    ``root_principal``: the tenant whose evaluations it replays (None: every tenant's, for an
    operator). A candidate or baseline of another tenant is as missing as an unknown one.
    """
    now = timezone.now()
    ids = [policy_set_id] + ([baseline_policy_set_id] if baseline_policy_set_id else [])
    found = {s.policy_set_id: s for s in PolicySet.objects.filter(policy_set_id__in=ids)}
    problems = {name: [f"No policy set with id {value!r}."]
                for name, value in (("policy_set_id", policy_set_id), ("baseline_policy_set_id", baseline_policy_set_id))
                if value and (value not in found or (root_principal is not None
                                                     and found[value].root_principal not in (None, root_principal)))}
    until = until or now
    since = since or until - DEFAULT_WINDOW
    if since >= until:
        problems["since"] = ["Must be earlier than until."]
    if problems:
        raise errors.invalid_fields(problems)
    candidate = found[policy_set_id]
    if candidate.status == PolicySetStatus.REVOKED:
        raise errors.PrerequisiteFailed(
            f"Policy set {policy_set_id!r} is revoked: it cannot be backtested.",
            details={"failed_checks": [{"check": "policy_set_not_revoked",
                                        "reason": f"policy set {policy_set_id!r} is revoked"}]})
    backtest = Backtest(
        backtest_id=backtest_id or new_id("bt"), operation_id=new_id("op"), policy_set=candidate,
        ruleset_hash=candidate.ruleset_hash, baseline_policy_set_id=baseline_policy_set_id, since=since, until=until,
        task_id=task_id or "", agent_id=agent_id or "", requested_by=actor, root_principal=root_principal,
        created_at=now if created_at is None else not_in_future(created_at, field="created_at", now=now),
        updated_at=now)
    # Each unfinished backtest of a client holds one of its slots; the database's unique index
    # (requested_by, client_slot) refuses a second holder, so concurrent requests cannot go past
    # the limit. A slot that is taken fails the insert, and the next one is tried.
    for slot in range(settings.AGP_BACKTESTS_PER_CLIENT):
        backtest.client_slot = slot
        try:
            with transaction.atomic():
                backtest.save(force_insert=True)  # the unique indexes decide, races included
                outbox_enqueue(task_name=BACKTEST_TASK, args=[backtest.backtest_id])
                ledger_append(event_type="backtest.created", resource_type=RESOURCE,
                              resource_id=backtest.backtest_id, actor=actor, root_principal=root_principal,
                              payload={
                                  "operation_id": backtest.operation_id, "policy_set_id": policy_set_id,
                                  "ruleset_hash": backtest.ruleset_hash,
                                  "baseline_policy_set_id": baseline_policy_set_id, "since": iso(since),
                                  "until": iso(until), "task_id": task_id, "agent_id": agent_id})
            return backtest
        except IntegrityError:
            if Backtest.objects.filter(backtest_id=backtest.backtest_id).exists():
                raise errors.duplicate_id("backtest", "backtest_id", backtest.backtest_id) from None
    limit = settings.AGP_BACKTESTS_PER_CLIENT
    raise errors.RateLimited(
        f"This client already has {limit} unfinished backtests (AGP_BACKTESTS_PER_CLIENT); wait for one to end, "
        f"or cancel one, before asking for another.",
        details={"unfinished_backtests": limit}, headers={"Retry-After": str(RATE_LIMITED_RETRY_AFTER)})


def backtest_cancel(*, actor: str, operation_id: str) -> Backtest:
    """``PATCH /agp/operations/{id}`` ``{"status": "cancelled"}`` for a backtest's operation.

    A pending or running backtest becomes ``cancelled`` (a running one keeps the counts of
    its last progress write; its worker stops at its next write). Ended: 409.
    """
    with transaction.atomic():
        backtest = Backtest.objects.select_for_update().filter(operation_id=operation_id).first()
        if backtest is None:
            raise errors.NotFound(f"No operation with id {operation_id!r}.")
        if not can_proceed(backtest.cancel):
            raise errors.InvalidTransition(
                from_state=backtest.status, to_state=BacktestStatus.CANCELLED.value, allowed=[],
                message=f"Operation {operation_id!r} is {backtest.status}; only a pending or running backtest can "
                        f"be cancelled.")
        source = backtest.status
        backtest.cancel()
        backtest.completed_at = backtest.updated_at = timezone.now()
        backtest.lease_expires_at, backtest.resume = None, None
        backtest.save()
        ledger_append(event_type="backtest.cancelled", resource_type=RESOURCE, resource_id=backtest.backtest_id,
                      actor=actor, root_principal=backtest.root_principal, payload={"operation_id": operation_id, "from": source,
                                            "evaluations": backtest.evaluations})
    return backtest


# --- running -------------------------------------------------------------------------------------
def _window(backtest: Backtest) -> QuerySet[PolicyEvaluation]:
    window = PolicyEvaluation.objects.filter(evaluated_at__gte=backtest.since, evaluated_at__lt=backtest.until)
    if backtest.root_principal is not None:
        window = window.filter(task__root_principal=backtest.root_principal)

    if backtest.baseline_policy_set_id:
        window = window.filter(policy_set_id=backtest.baseline_policy_set_id)
    if backtest.task_id:
        window = window.filter(task_id=backtest.task_id)
    if backtest.agent_id:
        window = window.filter(agent_id=backtest.agent_id)
    return window


def _claim(*, backtest_id: str, executor: str, attempt: int | None, slice_number: int | None) -> Backtest | str:
    """Take the backtest for one slice.

    A slice's own message (``attempt`` and ``slice_number`` given) continues the run it was
    sent by, if that run still holds it: same attempt, no slice since. Any other message (the
    first one, or recovery's) starts a pending backtest, or takes over a running one whose
    worker stopped renewing its lease (a new attempt, from where the last slice left it).
    """
    with transaction.atomic():
        backtest = Backtest.objects.select_for_update().filter(backtest_id=backtest_id).first()
        if backtest is None:
            logger.warning("backtest: no backtest %s", backtest_id)
            return "missing"
        if backtest.status in BACKTEST_TERMINAL:
            return "done"
        now = timezone.now()
        if slice_number is not None:
            if (backtest.status, backtest.attempts, backtest.slices) != (BacktestStatus.RUNNING, attempt,
                                                                         slice_number):
                return "stale"  # its run was taken over, or this message is a repeat
        else:
            takeover = backtest.status == BacktestStatus.RUNNING
            if takeover and (backtest.lease_expires_at is None or backtest.lease_expires_at > now):
                return "busy"
            if takeover:
                backtest.attempts += 1
            else:
                backtest.start()
                backtest.attempts, backtest.started_at = backtest.attempts + 1, now
            ledger_append(event_type="backtest.reclaimed" if takeover else "backtest.running", resource_type=RESOURCE,
                          resource_id=backtest_id, actor=ACTOR, root_principal=backtest.root_principal,
                          payload={"operation_id": backtest.operation_id, "attempt": backtest.attempts,
                                   "executor": executor})
        backtest.executor = executor
        backtest.updated_at = now
        backtest.lease_expires_at = now + _lease()
        backtest.save()
    return backtest


@dataclass
class _Slice:
    """Where the run stands: the window's keys still to go, the summary so far."""

    tally: Tally
    after_pk: int
    last_pk: int

    @classmethod
    def resumed(cls, backtest: Backtest) -> "_Slice":
        state = backtest.resume
        tally = Tally(**{name: getattr(backtest, name) for name in Tally.COUNTS}, changes=state["changes"],
                      by_reason=state["by_reason"])
        return cls(tally=tally, after_pk=state["after_pk"], last_pk=state["last_pk"])

    def resume_state(self) -> dict[str, Any]:
        return {"after_pk": self.after_pk, "last_pk": self.last_pk, "changes": self.tally.changes,
                "by_reason": self.tally.by_reason}


def _begin(backtest: Backtest) -> _Slice | None:
    """The run's start: the window's bounds and size, written before anything is evaluated (so
    ``total`` shows at once); None when the backtest was stopped from outside meanwhile."""
    bounds = _window(backtest).aggregate(first=Min("pk"), last=Max("pk"), total=Count("pk"))
    run = _Slice(tally=Tally(), after_pk=(bounds["first"] or 1) - 1, last_pk=bounds["last"] or 0)
    backtest.total = bounds["total"]
    written = _progress(backtest, run.tally, total=backtest.total, resume=run.resume_state())
    return run if written else None


def _progress(backtest: Backtest, tally: Tally, **fields: Any) -> bool:
    """Write the counts so far and renew the claim; False when the backtest was cancelled or
    another worker holds it now (the run must stop and write nothing more)."""
    now = timezone.now()
    return Backtest.objects.filter(pk=backtest.pk, status=BacktestStatus.RUNNING, attempts=backtest.attempts).update(
        **tally.counts(), **fields, updated_at=now, lease_expires_at=now + _lease()) == 1


def _limit(backtest: Backtest, tally: Tally, seconds: float) -> dict[str, Any] | None:
    """The bound the run has reached, if any: its total time or its number of evaluations."""
    if tally.evaluations >= settings.AGP_BACKTEST_MAX_EVALUATIONS:
        name, value, what = "AGP_BACKTEST_MAX_EVALUATIONS", settings.AGP_BACKTEST_MAX_EVALUATIONS, "evaluations"
    elif seconds >= settings.AGP_BACKTEST_MAX_SECONDS:
        name, value, what = "AGP_BACKTEST_MAX_SECONDS", settings.AGP_BACKTEST_MAX_SECONDS, "seconds"
    else:
        return None
    left = (backtest.total or 0) - tally.evaluations
    return {"limit": name, "value": value, "message": (
        f"The backtest stopped at its bound of {value} {what} ({name}): {tally.evaluations} of the window's "
        f"{backtest.total or 0} evaluations were re-evaluated, {left} were not.")}


def _finish(backtest: Backtest, *, tally: Tally | None = None, error: dict[str, Any] | None = None,
            limit_reached: dict[str, Any] | None = None, seconds: float = 0) -> bool:
    """running -> succeeded (with the summary) or failed (with ``error``), if still this worker's."""
    with transaction.atomic():
        current = Backtest.objects.select_for_update().filter(pk=backtest.pk).first()
        if current.status != BacktestStatus.RUNNING or current.attempts != backtest.attempts:
            return False
        now = timezone.now()
        if error is None:
            current.succeed()
            for name, value in tally.counts().items():
                setattr(current, name, value)
            current.changes, current.by_reason = tally.changes, tally.by_reason
            current.limit_reached, current.run_seconds = limit_reached, seconds
        else:
            current.fail()
            current.error = error
        current.resume = None
        current.completed_at = current.updated_at = now
        current.lease_expires_at = None
        try:
            current.save()
        except ConcurrentTransition:
            return False
        ledger_append(event_type=f"backtest.{current.status}", resource_type=RESOURCE,
                      resource_id=current.backtest_id, actor=ACTOR, root_principal=current.root_principal,
                      payload={"operation_id": current.operation_id, **(tally.counts() if tally else {}),
                               "limit_reached": (limit_reached or {}).get("limit"),
                               "error_code": (error or {}).get("code")})
    return True


def _yield(backtest: Backtest, run: _Slice, *, seconds: float) -> bool:
    """End this slice: write where the run stands and send the next slice's message, in one
    transaction (so a crash leaves either both or neither); False when the backtest was
    stopped from outside (nothing is sent)."""
    with transaction.atomic():
        if not _progress(backtest, run.tally, resume=run.resume_state(), run_seconds=seconds,
                         slices=backtest.slices + 1):
            return False
        outbox_enqueue(task_name=BACKTEST_TASK, args=[backtest.backtest_id, backtest.attempts, backtest.slices + 1])
    return True


def _replay_slice(backtest: Backtest, candidate: PolicySet, run: _Slice) -> tuple[str, dict[str, Any] | None, float]:
    """Re-evaluate from where the run stands for about ``SLICE_SECONDS``.

    Returns how the slice ended (``ended``: the window is done; ``limit``: a bound was reached;
    ``yielded``: time is up, the next slice goes on), the bound reached, and the run's seconds.
    """
    started = time.monotonic()
    window = _window(backtest)
    evaluated = 0

    def seconds() -> float:
        return backtest.run_seconds + time.monotonic() - started

    while True:
        rows = list(window.filter(pk__gt=run.after_pk, pk__lte=run.last_pk).order_by("pk")
                    .values(*RECORDED)[:BATCH])
        if not rows:
            return "ended", None, seconds()
        for row in rows:
            limit_reached = _limit(backtest, run.tally, seconds())
            if limit_reached is not None:
                return "limit", limit_reached, seconds()
            if evaluated and time.monotonic() - started >= SLICE_SECONDS:  # each slice makes progress
                return "yielded", None, seconds()
            evaluated += 1
            outcome = engine.evaluate(ruleset=candidate.ruleset, ruleset_hash=candidate.ruleset_hash,
                                      input=_rego_input(row))
            run.tally.add(evaluation_id=row["evaluation_id"], before=row["result"], after=outcome.as_result(),
                          errored=bool(outcome.errors))
            run.after_pk = row["pk"]


def _name_actions(tally: Tally, action_ids_of: ActionIdsOf | None) -> None:
    if action_ids_of is None or not tally.changes:
        return
    found = action_ids_of([change["evaluation_id"] for change in tally.changes])
    for change in tally.changes:
        change["action_ids"] = list(found.get(change["evaluation_id"], []))[:MAX_ACTION_IDS]


def backtest_run(*, backtest_id: str, executor: str, action_ids_of: ActionIdsOf | None = None,
                 attempt: int | None = None, slice_number: int | None = None) -> str:
    """Claim a backtest and run one slice of it (about ``SLICE_SECONDS``); returns what happened:
    ``continued`` (the next slice's message is sent), ``succeeded``, ``failed``, ``cancelled``,
    or why there was nothing to do.

    Slices keep a backtest from holding a worker process for its whole run: between two, the
    process takes the next message of any queue, so executions and controls wait at most
    about a slice (plus one evaluation) behind any number of running backtests. The run ends
    when the window is done or at its bound (``AGP_BACKTEST_MAX_SECONDS`` of slices,
    ``AGP_BACKTEST_MAX_EVALUATIONS``), which the result then names in ``limit_reached``.

    ``attempt``/``slice_number``: given by a slice's own message (the run it continues).
    ``action_ids_of``: given evaluation ids, the accepted envelopes that cited each one (the
    execution app supplies it, since the decision API cannot read envelopes); without it
    ``action_ids`` stay empty.
    """
    claimed = _claim(backtest_id=backtest_id, executor=executor, attempt=attempt, slice_number=slice_number)
    if isinstance(claimed, str):
        return claimed
    try:
        run = _Slice.resumed(claimed) if claimed.resume else _begin(claimed)
        if run is None:
            return _status_now(claimed)
        ended, limit_reached, seconds = _replay_slice(
            claimed, PolicySet.objects.get(policy_set_id=claimed.policy_set_id), run)
        if ended == "yielded":
            return "continued" if _yield(claimed, run, seconds=seconds) else _status_now(claimed)
        _name_actions(run.tally, action_ids_of)
    except (OperationalError, InterfaceError):
        raise  # the database is away: the claim lapses and recovery runs it again
    except Exception as exc:  # a bug must end the backtest, never leave it running
        logger.exception("backtest %s failed", backtest_id)
        error = errors.InternalError("The backtest could not be completed.",
                                     details={"reason": type(exc).__name__}).as_body()["error"]
        return "failed" if _finish(claimed, error=error) else "superseded"
    done = _finish(claimed, tally=run.tally, limit_reached=limit_reached, seconds=seconds)
    return "succeeded" if done else "superseded"


def _status_now(backtest: Backtest) -> str:
    return Backtest.objects.filter(pk=backtest.pk).values_list("status", flat=True).first() or "missing"


def backtests_recover(*, now: datetime | None = None, limit: int = 100) -> int:
    """Re-enqueue backtests no message is moving: pending for longer than
    ``AGP_RECOVER_PENDING_AFTER_SECONDS``, or running with a lapsed claim (their worker died).
    ``updated_at`` records the nudge, so each is re-enqueued at most once per period."""
    now = now or timezone.now()
    pending_cutoff = now - timedelta(seconds=settings.AGP_RECOVER_PENDING_AFTER_SECONDS)
    stalled = list(Backtest.objects.filter(
        Q(status=BacktestStatus.PENDING, updated_at__lt=pending_cutoff)
        | Q(status=BacktestStatus.RUNNING, lease_expires_at__lt=now, updated_at__lt=now - _lease()))
        .order_by("updated_at").values_list("pk", "backtest_id", "updated_at")[:limit])
    count = 0
    for pk, backtest_id, updated_at in stalled:
        with transaction.atomic():
            # Conditional on the updated_at just read: two sweeps never both nudge.
            if Backtest.objects.filter(pk=pk, updated_at=updated_at).update(updated_at=now) != 1:
                continue
            outbox_enqueue(task_name=BACKTEST_TASK, args=[backtest_id])
        count += 1
    return count
