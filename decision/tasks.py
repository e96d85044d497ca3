"""Celery tasks of the Decision API: stable names, JSON arguments (ids), idempotent bodies.

The backtest's task is registered by execution (it needs a reader only execution has); the
shadow evaluations' and the approval notices' are here.
"""

from celery import shared_task
from django.db import InterfaceError, OperationalError

from .choices import APPROVAL_NOTICE_TASK, SHADOW_TASK
from .notifications import approval_notice_deliver
from .services import policy_evaluation_shadows_record


@shared_task(name=SHADOW_TASK, autoretry_for=(OperationalError, InterfaceError), retry_backoff=True,
             retry_backoff_max=60, max_retries=8)
def evaluate_shadows(evaluation_id: str) -> int:
    """Evaluate an evaluation's shadows and record what each decided (decision/services/evaluations.py)."""
    return policy_evaluation_shadows_record(evaluation_id=evaluation_id)


@shared_task(name=APPROVAL_NOTICE_TASK, bind=True, autoretry_for=(OperationalError, InterfaceError),
             retry_backoff=True, retry_backoff_max=60, max_retries=None)
def notify_approval_waiting(self, decision_id: str) -> str:
    """One delivery attempt of a waiting decision's notice (decision/notifications.py); schedules the
    next on failure."""
    outcome = approval_notice_deliver(decision_id=decision_id)
    if outcome.retry_in is not None:
        # A new message with a countdown: the worker slot is free while the receiver recovers.
        raise self.retry(countdown=outcome.retry_in, max_retries=None)
    return outcome.outcome
