"""Celery tasks of the Decision API: stable names, JSON arguments (ids), idempotent bodies.

The backtest's task is registered by execution (it needs a reader only execution has); the
shadow evaluations' is here.
"""

from celery import shared_task
from django.db import InterfaceError, OperationalError

from .choices import SHADOW_TASK
from .services import policy_evaluation_shadows_record


@shared_task(name=SHADOW_TASK, autoretry_for=(OperationalError, InterfaceError), retry_backoff=True,
             retry_backoff_max=60, max_retries=8)
def evaluate_shadows(evaluation_id: str) -> int:
    """Evaluate an evaluation's shadows and record what each decided (decision/services/evaluations.py)."""
    return policy_evaluation_shadows_record(evaluation_id=evaluation_id)
