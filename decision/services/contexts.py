"""Contexts and evidence bundles: task-scoped records, hashed as canonical JSON."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction

from agp_project.ids import new_id
from core.ledger import ledger_append

from ..models import Context, EvidenceBundle
from .common import hash_of, record_created_at, task_required, unique_id


def context_create(*, actor: str, task_id: str, data: dict[str, Any], agent_id: str = "",
                   context_id: str | None = None, created_at: datetime | None = None) -> Context:
    """A task-scoped context; ``content_hash`` is the canonical-JSON SHA-256 of ``data``."""
    context_id = context_id or new_id("ctx")
    task = task_required(task_id)
    digest = hash_of(data, "data")
    with unique_id("context", "context_id", context_id), transaction.atomic():
        context = Context.objects.create(context_id=context_id, task=task, agent_id=agent_id, data=data,
                                         content_hash=digest, created_at=record_created_at(created_at),
                                         created_by=actor)
        ledger_append(event_type="context.created", resource_type="Context", resource_id=context_id,
                      actor=actor, root_principal=task.root_principal, payload={"task_id": task_id, "content_hash": digest})
    return context


def evidence_bundle_create(*, actor: str, task_id: str, items: Sequence[dict[str, Any]],
                           bundle_id: str | None = None, created_at: datetime | None = None) -> EvidenceBundle:
    """A task-scoped bundle; ``bundle_hash`` is the canonical-JSON SHA-256 of ``items``."""
    bundle_id = bundle_id or new_id("evb")
    task = task_required(task_id)
    items = [dict(item) for item in items]
    digest = hash_of(items, "items")
    with unique_id("evidence bundle", "bundle_id", bundle_id), transaction.atomic():
        bundle = EvidenceBundle.objects.create(bundle_id=bundle_id, task=task, items=items, bundle_hash=digest,
                                               created_at=record_created_at(created_at), created_by=actor)
        ledger_append(event_type="evidence_bundle.created", resource_type="EvidenceBundle", resource_id=bundle_id,
                      actor=actor, root_principal=task.root_principal, payload=
{"task_id": task_id, "bundle_hash": digest, "items": len(items)})
    return bundle
