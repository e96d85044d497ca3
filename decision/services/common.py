"""Helpers the Decision API's writers share: duplicate ids, hashes, tasks, client timestamps."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import rfc8785
from django.db import IntegrityError
from django.utils import timezone

from agp_project import errors
from agp_project.canonical import content_hash
from agp_project.timeutil import not_in_future
from registry.models import Task


@contextmanager
def unique_id(resource: str, id_field: str, value: str) -> Iterator[None]:
    """A duplicate client-chosen id is a 409; the unique index decides, so races are covered too."""
    try:
        yield
    except IntegrityError:
        raise errors.duplicate_id(resource, id_field, value) from None


def hash_of(value: Any, field: str) -> str:
    try:
        return content_hash(value)
    except rfc8785.CanonicalizationError as exc:
        # e.g. an integer beyond 2**53: RFC 8785 cannot represent it exactly.
        raise errors.invalid_fields({field: [f"Cannot be canonicalised (RFC 8785): {exc}"]}) from None


def task_required(task_id: str, field: str = "task_id") -> Task:
    task = Task.objects.filter(task_id=task_id).first()
    if task is None:
        raise errors.invalid_fields({field: [f"No task with id {task_id!r}."]})
    return task


def record_created_at(value: datetime | None, now: datetime | None = None) -> datetime:
    """A client may date its record (docs/reference/api.md), but not ahead of the server clock: "newest" decides
    which approval or assessment counts, and a future date would win every comparison."""
    now = now or timezone.now()
    return now if value is None else not_in_future(value, field="created_at", now=now)


def failed_check(check: str, reason: str) -> dict[str, str]:
    return {"check": check, "reason": reason}
