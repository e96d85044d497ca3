"""Reads of registry records for every app (keyword-only, ``<entity>_<verb>``).

Every function here issues a fixed number of SQL queries, whatever the number of rows
stored and whatever the depth of a chain: the chain of a delegation is read through its
materialised ``path`` in one query, with the agent revocations of every link joined in.

The validity rule (docs/reference/governance.md, docs/reference/execution.md check 2): a delegation is usable when it and every
ancestor are ``active`` and unexpired, and no delegator or delegate along the chain has
been revoked as an agent. It is derived here at read time; the ``status`` column is the
revocation cascade's materialisation for lists, not the only guard.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from .choices import ActiveStatus, FreezeStatus, FreezeTarget, RevocationTarget
from .models import Delegation, Freeze, Revocation, path_pks
from .scopes import scope_covers

# Parent discovery reads the chains of this many newest candidates first, then (only if
# none of them is usable) of all the others: two or three queries, never more.
_FIRST_BATCH = 16


# --- agents -------------------------------------------------------------------------------
def agents_revoked(*, agent_ids: Iterable[str]) -> set[str]:
    """The subset of ``agent_ids`` that has been revoked as agents (one query)."""
    ids = set(agent_ids)
    if not ids:
        return set()
    return set(Revocation.objects.filter(target_type=RevocationTarget.AGENT, target_id__in=ids)
               .values_list("target_id", flat=True))


def agent_is_revoked(*, agent_id: str) -> bool:
    return bool(agents_revoked(agent_ids=[agent_id]))


# --- freezes ------------------------------------------------------------------------------
def freezes_matching(*, agent_id: Any = None, root_principal: Any = None, tool_id: Any = None) -> QuerySet[Freeze]:
    """The active freezes that stop an actor (docs/reference/governance.md), oldest first: ``all`` freezes and
    those naming its agent, its root principal or its tool (one query).

    A value left None is not matched (a delegation names no tool); each may be an
    expression such as ``OuterRef("root_principal")`` inside a subquery. A freeze bound to
    one tenant matches only when ``root_principal`` is that tenant.
    """
    match = Q(target_type=FreezeTarget.ALL)
    for target_type, value in ((FreezeTarget.AGENT, agent_id), (FreezeTarget.ROOT_PRINCIPAL, root_principal),
                               (FreezeTarget.TOOL, tool_id)):
        if value is not None:
            match |= Q(target_type=target_type, target_id=value)
    reach = Q(root_principal__isnull=True)
    if root_principal is not None:
        reach |= Q(root_principal=root_principal)
    return Freeze.objects.filter(match, reach, status=FreezeStatus.ACTIVE).order_by("pk")



def freeze_summaries(freezes: Iterable[Freeze]) -> list[dict[str, Any]]:
    """How a refusal names the freezes that caused it (``details.freezes`` of 409 AGP_FROZEN)."""
    return [{"freeze_id": f.freeze_id, "target_type": f.target_type, "target_id": f.target_id or None}
            for f in freezes]


def freeze_targets_text(freezes: Iterable[Freeze]) -> str:
    """``freeze 'frz_1' (agent 'a-7'), freeze 'frz_2' (all)`` for messages and check reasons."""
    return ", ".join(f"freeze {f.freeze_id!r} ({f.target_type}" + (f" {f.target_id!r})" if f.target_id else ")")
                     for f in freezes)


# --- delegations --------------------------------------------------------------------------
def delegation_get(*, delegation_id: str) -> Delegation | None:
    return Delegation.objects.filter(delegation_id=delegation_id).first()


def delegation_links(*, pks: Iterable[int]) -> QuerySet[Delegation]:
    """The links with these primary keys, each annotated with ``agent_revoked`` (whether the
    agent it was granted to or by is revoked), as ``delegation_links_problem`` needs them.

    """
    agent_revoked = Revocation.objects.filter(
        Q(target_id=OuterRef("delegator_agent")) | Q(target_id=OuterRef("delegate_agent")),
        target_type=RevocationTarget.AGENT)
    return Delegation.objects.filter(pk__in=set(pks)).annotate(agent_revoked=Exists(agent_revoked))


def _chain_rows(pks: Iterable[int]) -> dict[int, Delegation]:
    """The links with these primary keys, each annotated with ``agent_revoked`` (one query)."""
    keys = set(pks)
    if not keys:
        return {}
    return {row.pk: row for row in delegation_links(pks=keys)}


def _link_problem(link: Delegation | None, now: datetime) -> str | None:
    if link is None:
        return "a link of the chain is missing"
    if link.status != ActiveStatus.ACTIVE:
        return f"delegation {link.delegation_id} is revoked"
    if link.expires_at <= now:
        return f"delegation {link.delegation_id} has expired"
    if link.agent_revoked:
        return f"an agent of delegation {link.delegation_id} is revoked"
    return None


def _chain_problem(delegation: Delegation, rows: dict[int, Delegation], now: datetime) -> str | None:
    for pk in delegation.chain_pks:
        problem = _link_problem(rows.get(pk), now)
        if problem:
            return problem
    return None


def delegation_links_problem(*, links: list[Delegation], now: datetime | None = None) -> str | None:
    """Why a chain already read is not usable, or None (no query).

    ``links`` (root first; None for a missing link) must carry the ``agent_revoked``
    annotation, as ``delegation_chain`` and ``delegation_usable_with_chain`` return them;
    a link without it raises rather than pass unchecked.
    """
    now = now or timezone.now()
    return next((problem for problem in (_link_problem(link, now) for link in links) if problem), None)


def delegation_chain(*, delegation: Delegation) -> list[Delegation]:
    """The links from the root down to ``delegation`` itself, freshly read (one query)."""
    rows = _chain_rows(delegation.chain_pks)
    return [rows[pk] for pk in delegation.chain_pks if pk in rows]


def delegation_chain_problem(*, delegation: Delegation, now: datetime | None = None) -> str | None:
    """Why ``delegation`` is not usable now (revoked, expired or revoked-agent link), or None.

    One query, whatever the depth of the chain.
    """
    now = now or timezone.now()
    return _chain_problem(delegation, _chain_rows(delegation.chain_pks), now)


def delegation_candidates(*, agent_id: str, root_principal: str, scope: str | Iterable[str] | None = None,
                          now: datetime | None = None) -> list[tuple[int, str]]:
    """The active, unexpired delegations to ``agent_id`` under ``root_principal`` covering
    ``scope``, newest first, as ``(pk, path)``; their chains are not checked (one query)."""
    now = now or timezone.now()
    return [
        (pk, path) for pk, path, granted in
        Delegation.objects.filter(delegate_agent=agent_id, root_principal=root_principal,
                                  status=ActiveStatus.ACTIVE, expires_at__gt=now)
        .order_by("-pk").values_list("pk", "path", "authority_scope")
        if scope is None or scope_covers(granted, scope)
    ]


def delegation_usable_among(*, candidates: list[tuple[int, str]],
                            now: datetime | None = None) -> tuple[Delegation, list[Delegation]] | None:
    """The first of ``candidates`` (``delegation_candidates``) whose whole chain is usable,
    with that chain (root first, the delegation last); None when there is none.

    One query for the chains of the 16 first candidates, a second only when none of them
    is usable.
    """
    now = now or timezone.now()
    for batch in (candidates[:_FIRST_BATCH], candidates[_FIRST_BATCH:]):
        if not batch:
            continue
        chains = {pk: path_pks(path) for pk, path in batch}
        rows = _chain_rows(pk for chain in chains.values() for pk in chain)
        for pk, chain_pks in chains.items():
            links = [rows.get(p) for p in chain_pks]
            if all(_link_problem(link, now) is None for link in links):
                return rows[pk], links
    return None


def delegation_usable_with_chain(*, agent_id: str, root_principal: str, scope: str | Iterable[str] | None = None,
                                 now: datetime | None = None) -> tuple[Delegation, list[Delegation]] | None:
    """The newest usable delegation to ``agent_id`` under ``root_principal`` covering ``scope``,
    with its chain (root first, the delegation last); None when there is none.

    This is docs/reference/governance.md's parent discovery as reads only: ``delegation_create`` runs the two steps
    itself, with the tree lock between or after them. Two queries (three when none of the
    16 newest candidates is usable), independent of how many delegations are stored.
    """
    now = now or timezone.now()
    candidates = delegation_candidates(agent_id=agent_id, root_principal=root_principal, scope=scope, now=now)
    return delegation_usable_among(candidates=candidates, now=now)
