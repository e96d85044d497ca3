"""Tasks (docs/reference/governance.md): the registry resource an agent's work hangs on (not Celery tasks)."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, can_proceed

from agp_project import errors
from agp_project.ids import new_id
from core.ledger import ledger_append

from ..choices import PolicySetStatus, TaskStatus
from ..models import PolicySet, Task
from .common import insert_new, record_timestamp


def _governing_policy_set(policy_set_id: str, root_principal: str) -> PolicySet:
    """The set a task names to govern its one-call actions: one its tenant sees (its own or a
    shared one), not revoked, and not a shadow; else a 400 naming ``policy_set_id``."""
    policy_set = PolicySet.objects.filter(policy_set_id=policy_set_id).first()
    if policy_set is None or policy_set.root_principal not in (None, root_principal):
        # Another tenant's set: as if it did not exist (docs/reference/identity.md).
        problem = f"No policy set with id {policy_set_id!r}."
    elif policy_set.status == PolicySetStatus.REVOKED:
        problem = f"Policy set {policy_set_id!r} is revoked."
    elif policy_set.shadow_of_id is not None:
        problem = f"Policy set {policy_set_id!r} is a shadow of {policy_set.shadow_of_id!r}: it clears nothing."
    else:
        return policy_set
    raise errors.invalid_fields({"policy_set_id": [problem]})


def task_create(*, actor: str, root_principal: str, agent_id: str, risk_level: str, action_class: str,
                title: str = "", policy_set_id: str | None = None,
                status: str = TaskStatus.OPEN, task_id: str | None = None,
                created_at: datetime | None = None) -> Task:
    """Record a task an agent performs for a root principal (docs/reference/governance.md), optionally governed by
    ``policy_set_id`` for the actions made in one call (docs/reference/gateway.md)."""
    now = timezone.now()
    policy_set = _governing_policy_set(policy_set_id, root_principal) if policy_set_id else None
    task = Task(task_id=task_id or new_id("tsk"), root_principal=root_principal, agent_id=agent_id, title=title,
                risk_level=risk_level, action_class=action_class, status=status, policy_set=policy_set,
                created_by=actor, created_at=record_timestamp(created_at, field="created_at", now=now))
    with transaction.atomic():
        insert_new(task, id_field="task_id", type_name="task")
        ledger_append(event_type="task.created", resource_type="Task", resource_id=task.task_id, actor=actor,
                      root_principal=root_principal, payload={
                          "root_principal": root_principal, "agent_id": agent_id, "risk_level": risk_level,
                          "action_class": action_class, "status": status, "policy_set_id": policy_set_id})
    return task


def task_transition(*, actor: str, task_id: str, status: str) -> Task:
    """Close a task (``open`` -> ``closed``, ledger ``task.closed``); check 1 then refuses it.

    Any other move, including to the current state, is 409 ``AGP_INVALID_TRANSITION``;
    an unknown id is 404.
    """
    with transaction.atomic():
        # The row lock queues concurrent PATCHes: the second reads the committed state.
        task = Task.objects.select_for_update().filter(task_id=task_id).first()
        if task is None:
            raise errors.NotFound(f"No task with id {task_id!r}.")
        source = task.status
        if status != TaskStatus.CLOSED or not can_proceed(task.close):
            raise errors.InvalidTransition(
                from_state=source, to_state=status,
                allowed=sorted(str(t.target) for t in task.get_available_status_transitions()))
        task.close()
        try:
            task.save(update_fields=["status"])
        except ConcurrentTransition:
            raise errors.InvalidTransition(from_state=source, to_state=status, allowed=[]) from None
        ledger_append(event_type="task.closed", resource_type="Task", resource_id=task.task_id, actor=actor,
                      root_principal=task.root_principal, payload={"from": source, "to": status})
    return task
