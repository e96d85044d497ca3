"""Helpers every registry writer shares: the locks, the refusals, client timestamps, inserts."""

import hashlib
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, connection
from django.db.models import Model

from agp_project import errors
from agp_project.timeutil import not_in_future

from .. import selectors
from ..models import Delegation


def lock_agents(agent_ids: Iterable[str]) -> None:
    """Serialise, per agent, the creation of records for it against its revocation.

    Without it, a revocation of agent X and a concurrent delegation to X could each miss
    the other (the revocation's cascade cannot see the uncommitted link, the link's check
    cannot see the uncommitted revocation): both would commit and an active link to a
    revoked agent would be listed. Read-time validation would still refuse to use it;
    the lock keeps the stored ``status`` truthful too.
    """
    if connection.vendor != "postgresql":
        return
    keys = sorted({int.from_bytes(hashlib.sha256(f"agp-agent:{a}".encode()).digest()[:8], "big", signed=True)
                   for a in agent_ids})
    # One statement. Keys are sorted, and every statement with as many keys has the same
    # shape, so whatever order PostgreSQL evaluates its select list in, two transactions
    # take the keys they share in the same order: no cycle of waits.
    if keys:
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(["pg_advisory_xact_lock(%s)"] * len(keys)), keys)


def lock_tree_roots(root_pks: Iterable[int]) -> None:
    """Lock the root rows of delegation trees (creation and revocation within a tree queue here).

    A link created under a parent while an ancestor is being revoked would otherwise
    commit unseen by the revocation's cascade. Holding the root lock, the creator reads
    the chain after the revoker committed (and refuses), or the revoker's cascade query
    runs after the creator committed (and marks the new link revoked).

    ``FOR NO KEY UPDATE``: it excludes every other tree lock, but not the ``FOR KEY SHARE``
    a foreign-key check takes on the root link. Those checks run at commit (Django's keys
    are deferred), after the writer took the ledger head: with ``FOR UPDATE``, a writer
    holding the root and waiting for the head, and one holding the head and checking a
    reference to the root, would wait for each other.
    """
    pks = sorted(set(root_pks))
    if pks:
        list(Delegation.objects.select_for_update(no_key=True).filter(pk__in=pks).order_by("pk")
             .values_list("pk", flat=True))


def refuse_revoked_agents(agent_ids: Iterable[str]) -> None:
    revoked = selectors.agents_revoked(agent_ids=agent_ids)
    if revoked:
        raise errors.Conflict(f"Agent revoked: {', '.join(sorted(revoked))}.",
                              details={"revoked_agents": sorted(revoked)})


def refuse_frozen(*, acting: str, agent_id: str | None = None, root_principal: str | None = None,
                  tool_id: str | None = None) -> None:
    """409 ``AGP_FROZEN`` when an active freeze stops the agent, the root principal or the tool (docs/reference/governance.md).

    One query. ``acting`` says what was refused ("a delegation", "a policy evaluation").
    Not serialised against a freeze being created at the same instant: what such a record
    would let through, the envelope checks still stop (docs/decisions/operator-controls.md).
    """
    freezes = list(selectors.freezes_matching(agent_id=agent_id, root_principal=root_principal, tool_id=tool_id))
    if freezes:
        raise errors.Frozen(f"Refused {acting}: {selectors.freeze_targets_text(freezes)} is active.",
                            details={"freezes": selectors.freeze_summaries(freezes)})


def record_timestamp(value: datetime | None, *, field: str, now: datetime) -> datetime:
    """A client-given record timestamp (default now); more than a minute ahead is a 400."""
    return now if value is None else not_in_future(value, field=field, now=now)


def require_future(value: datetime | None, *, field: str, now: datetime) -> None:
    if value is not None and value <= now:
        raise errors.invalid_fields({field: ["Must be in the future."]})


def insert_new(instance: Model, *, id_field: str, type_name: str) -> None:
    """Insert ``instance``; a duplicate public id is a 409 ``AGP_CONFLICT``.

    No savepoint of its own (two statements fewer): the refusal leaves the enclosing atomic
    block (a savepoint when nested), which rolls back. A caller that goes on querying
    after a refusal wraps the call in a ``transaction.atomic()`` of its own.
    """
    try:
        instance.save(force_insert=True)
    except IntegrityError:
        raise errors.duplicate_id(type_name, id_field, getattr(instance, id_field)) from None


def money(value: dict[str, Any] | None) -> tuple[str | None, Decimal | None]:
    if value is None:
        return None, None
    return value["currency"], Decimal(value["amount"])
