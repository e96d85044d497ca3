"""Revocations (docs/reference/ledger.md): immediate, irreversible and cascading."""

from datetime import datetime

from django.db import transaction
from django.db.models import Model, Q
from django.utils import timezone

from agp_project import errors
from agp_project.ids import new_id
from auth_tokens.kinds import ClientKind
from auth_tokens.models import Client
from core.ledger import ledger_append

from .. import selectors
from ..choices import ActiveStatus, RevocationTarget, SkillStatus
from ..models import Capability, Delegation, LiabilityBinding, Revocation, Skill
from .common import insert_new, lock_agents, lock_tree_roots, record_timestamp

# Event prefix -> the ledger ``resource_type``: the resource's docs/reference/api.md ``type`` constant.
_RESOURCE_TYPES = {"delegation": "DelegationChain", "capability": "Capability", "skill": "Skill",
                   "liability_binding": "LiabilityBinding"}

_SIMPLE_TARGETS: dict[str, tuple[type[Model], str, str]] = {
    RevocationTarget.CAPABILITY: (Capability, "capability_id", "capability"),
    RevocationTarget.SKILL: (Skill, "skill_id", "skill"),
    RevocationTarget.LIABILITY_BINDING: (LiabilityBinding, "binding_id", "liability_binding"),
}


def _already_revoked(target_type: str, target_id: str) -> errors.Conflict:
    existing = Revocation.objects.filter(target_type=target_type, target_id=target_id).first()
    details = {"target_type": target_type, "target_id": target_id,
               "revocation_id": existing.revocation_id if existing else None}
    return errors.Conflict(f"The {target_type} {target_id!r} is already revoked; revocation is irreversible.",
                           details=details)


def _revoke_delegation_trees(*, seeds: list[Delegation], now: datetime) -> tuple[list[str], list[str]]:
    """Mark ``seeds`` and all their descendants revoked, with the capabilities derived from them.

    Returns the delegation ids and capability ids it changed.
    """
    if not seeds:
        return [], []
    lock_tree_roots(seed.root_pk for seed in seeds)
    # Under the tree locks no link can be added below a seed: this read is complete.
    prefixes = Q()
    for seed in seeds:
        prefixes |= Q(path__startswith=seed.path)
    delegation_ids = list(Delegation.objects.filter(prefixes, status=ActiveStatus.ACTIVE)
                          .order_by("pk").values_list("delegation_id", flat=True))
    Delegation.objects.filter(delegation_id__in=delegation_ids).update(status=ActiveStatus.REVOKED, revoked_at=now)
    capability_ids = list(Capability.objects.filter(delegation_id__in=delegation_ids, status=ActiveStatus.ACTIVE)
                          .order_by("pk").values_list("capability_id", flat=True))
    Capability.objects.filter(capability_id__in=capability_ids).update(status=ActiveStatus.REVOKED)
    return delegation_ids, capability_ids


def _revoke_rows(model: type[Model], id_field: str, query: Q) -> list[str]:
    ids = list(model.objects.select_for_update().filter(query, status=ActiveStatus.ACTIVE)
               .order_by("pk").values_list(id_field, flat=True))
    model.objects.filter(**{f"{id_field}__in": ids}).update(status=ActiveStatus.REVOKED)
    return ids


def _target_tenant(target_type: str, target_id: str) -> tuple[bool, set[str | None]]:
    """(whether the target exists, the tenants its records lie in; None: a record of no tenant).

    An agent's tenants are those of every delegation it granted or received, liability
    binding and skill of it, and of the agent clients that act for it: revoking it reaches all of them.
    """
    if target_type == RevocationTarget.AGENT:
        tenants = set(Delegation.objects.filter(Q(delegate_agent=target_id) | Q(delegator_agent=target_id))
                      .values_list("root_principal", flat=True))
        tenants |= set(LiabilityBinding.objects.filter(agent_id=target_id).values_list("root_principal", flat=True))
        tenants |= set(Skill.objects.filter(agent_id=target_id, root_principal__isnull=False)
                       .values_list("root_principal", flat=True))
        for bound in Client.objects.filter(kind=ClientKind.AGENT, agent_id=target_id).values_list("tenants", flat=True):

            tenants |= set(bound)
        return bool(tenants), tenants
    if target_type == RevocationTarget.DELEGATION:
        found = Delegation.objects.filter(delegation_id=target_id).values_list("root_principal", flat=True)
    elif target_type == RevocationTarget.CAPABILITY:
        found = Capability.objects.filter(capability_id=target_id).values_list("delegation__root_principal", flat=True)
    else:
        model, id_field, _ = _SIMPLE_TARGETS[target_type]
        found = model.objects.filter(**{id_field: target_id}).values_list("root_principal", flat=True)
    tenants = set(found)
    return bool(tenants), tenants


def revocation_tenant(*, target_type: str, target_id: str, tenants: frozenset[str] | None) -> str | None:
    """The tenant a revocation belongs to, for a caller of ``tenants`` (None: every tenant).

    A caller bound to tenants may revoke only what lies wholly in them: anything else is
    refused as a missing target is (400), since another tenant's records are not its to see.
    """
    exists, found = _target_tenant(target_type, target_id)
    if tenants is not None and (not exists or not found <= tenants):
        noun = target_type.replace("_", " ")
        raise errors.invalid_fields({"target_id": [f"No {noun} with id {target_id!r}"
                                                   + (" acts in this client's tenants." if noun == "agent" else ".")]})
    return next(iter(found)) if len(found) == 1 else None


def revocation_create(*, actor: str, target_type: str, target_id: str, reason: str = "",
                      revoked_by: str | None = None, revocation_id: str | None = None,
                      created_at: datetime | None = None, tenants: frozenset[str] | None = None) -> Revocation:
    """Revoke a delegation, capability, agent, skill or liability binding: immediate,
    irreversible and cascading (docs/reference/ledger.md).

    - delegation: it and every descendant link, and the capabilities derived from them;
    - agent: every link it granted or received and their descendants, the capabilities
      derived from those, and every capability, skill and liability binding of the agent;
    - capability, skill, liability binding: that record.

    400 when a non-agent target does not exist; 409 ``AGP_CONFLICT`` when the target is
    already revoked (directly or by a cascade). ``tenants``: those of a caller bound to
    tenants (see ``revocation_tenant``).
    """
    now = timezone.now()
    root_principal = revocation_tenant(target_type=target_type, target_id=target_id, tenants=tenants)
    created_at = record_timestamp(created_at, field="created_at", now=now)
    changed: list[tuple[str, str, bool]] = []  # (event prefix, resource_id, is the target itself)
    with transaction.atomic():
        if target_type == RevocationTarget.AGENT:
            lock_agents([target_id])
            if selectors.agent_is_revoked(agent_id=target_id):
                raise _already_revoked(target_type, target_id)
            seeds = list(Delegation.objects.filter(Q(delegate_agent=target_id) | Q(delegator_agent=target_id),
                                                   status=ActiveStatus.ACTIVE).only("pk", "path"))
            delegation_ids, capability_ids = _revoke_delegation_trees(seeds=seeds, now=now)
            capability_ids += _revoke_rows(Capability, "capability_id", Q(agent_id=target_id))
            changed += [("delegation", i, False) for i in delegation_ids]
            changed += [("capability", i, False) for i in capability_ids]
            changed += [("skill", i, False) for i in _revoke_rows(Skill, "skill_id", Q(agent_id=target_id))]
            changed += [("liability_binding", i, False)
                        for i in _revoke_rows(LiabilityBinding, "binding_id", Q(agent_id=target_id))]
        elif target_type == RevocationTarget.DELEGATION:
            target = selectors.delegation_get(delegation_id=target_id)
            if target is None:
                raise errors.invalid_fields({"target_id": [f"No delegation with id {target_id!r}."]})
            lock_tree_roots([target.root_pk])
            if Delegation.objects.filter(pk=target.pk, status=ActiveStatus.ACTIVE).count() != 1:
                raise _already_revoked(target_type, target_id)
            delegation_ids, capability_ids = _revoke_delegation_trees(seeds=[target], now=now)
            changed += [("delegation", i, i == target_id) for i in delegation_ids]
            changed += [("capability", i, False) for i in capability_ids]
        else:
            model, id_field, kind = _SIMPLE_TARGETS[target_type]
            if not model.objects.filter(**{id_field: target_id}).exists():
                raise errors.invalid_fields({"target_id": [f"No {kind.replace('_', ' ')} "
                                                           f"with id {target_id!r}."]})
            revoked = _revoke_rows(model, id_field, Q(**{id_field: target_id}))
            if not revoked:
                if model is Skill and Skill.objects.filter(skill_id=target_id,
                                                           status=SkillStatus.SUPERSEDED).exists():
                    raise errors.Conflict(f"The skill {target_id!r} is superseded: nothing executes on it any more.",
                                          details={"target_type": target_type, "target_id": target_id,
                                                   "status": SkillStatus.SUPERSEDED})
                raise _already_revoked(target_type, target_id)
            changed.append((kind, target_id, True))

        revocation = Revocation(
            revocation_id=revocation_id or new_id("rev"), target_type=target_type, target_id=target_id,
            reason=reason, revoked_by=revoked_by or actor, revoked_at=now, created_at=created_at,
            root_principal=root_principal, created_by=actor)
        try:
            with transaction.atomic():  # a savepoint: on a refusal the query below still runs
                insert_new(revocation, id_field="revocation_id", type_name="revocation")
        except errors.Conflict:
            if Revocation.objects.filter(target_type=target_type, target_id=target_id).exists():
                raise _already_revoked(target_type, target_id) from None
            raise
        # Ledger last: its head lock is the final lock any registry writer takes.
        ledger_append(event_type="revocation.created", resource_type="Revocation",
                      resource_id=revocation.revocation_id, actor=actor, root_principal=root_principal,
                      payload={"target_type": target_type, "target_id": target_id, "reason": reason,
                               "revoked_by": revocation.revoked_by})
        for kind, resource_id, direct in changed:
            ledger_append(event_type=f"{kind}.revoked", resource_type=_RESOURCE_TYPES[kind],
                          resource_id=resource_id, actor=actor, root_principal=root_principal,
                          payload={"revocation_id": revocation.revocation_id, "cascade": not direct})

    return revocation
