"""Freezes (docs/reference/governance.md): an operator's emergency stop, signed, and lifted forward only."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, can_proceed

from agp_project import errors
from agp_project.ids import new_id
from agp_project.signing import sign_resource
from core.ledger import ledger_append
from core.outbox import outbox_enqueue

from ..choices import FREEZE_TASK, FreezeStatus, FreezeTarget
from ..documents import freeze_document
from ..models import Freeze
from .common import insert_new, record_timestamp


def _freeze_sign(freeze: Freeze) -> None:
    """(Re-)sign the freeze as rendered: issued on creation and again when it is lifted."""
    freeze.signature = None
    freeze.signature = sign_resource(freeze_document(freeze))


def freeze_create(*, actor: str, target_type: str, reason: str, target_id: str | None = None,
                  frozen_by: str | None = None, freeze_id: str | None = None,
                  created_at: datetime | None = None, root_principal: str | None = None) -> Freeze:
    """Freeze an agent, a root principal, a tool or everything, at once (docs/reference/governance.md).

    In this transaction: the signed freeze, its ledger event (``freeze.created``), and the
    outbox message of the task that cancels the operations it stops (``FREEZE_TASK``,
    which execution registers): those still ``pending`` and those waiting for an external
    executor's receipt. Everything else consults the freeze where it acts: envelopes fail
    the check ``freeze``, evaluations and delegations are 409 ``AGP_FROZEN``, and a worker's
    claim re-checks it before the connector call. Several freezes may name one target;
    each is lifted on its own.

    ``root_principal``: the one tenant the freeze reaches (a person's freeze of an agent of
    their tenant, or of the tenant itself); None reaches every tenant (an operator's).
    """
    now = timezone.now()
    freeze = Freeze(freeze_id=freeze_id or new_id("frz"), target_type=target_type,
                    target_id="" if target_type == FreezeTarget.ALL else (target_id or ""), reason=reason,
                    frozen_by=frozen_by or actor, status=FreezeStatus.ACTIVE, root_principal=root_principal,
                    created_by=actor,
                    created_at=record_timestamp(created_at, field="created_at", now=now))
    _freeze_sign(freeze)
    with transaction.atomic():
        insert_new(freeze, id_field="freeze_id", type_name="freeze")
        outbox_enqueue(task_name=FREEZE_TASK, args=[freeze.freeze_id])
        ledger_append(event_type="freeze.created", resource_type="Freeze", resource_id=freeze.freeze_id,
                      actor=actor, root_principal=root_principal, payload={"target_type": target_type, "target_id": freeze.target_id or None,
                                            "reason": reason, "frozen_by": freeze.frozen_by,
                                            "payload_hash": freeze.signature["payload_hash"]})
    return freeze


def freeze_lift(*, actor: str, freeze_id: str, status: str, lifted_by: str | None = None) -> Freeze:
    """``PATCH /agp/freezes/{id}``: ``active -> lifted``, re-signed, ledgered ``freeze.lifted``.

    Forward only: any other move, lifting twice included, is 409 ``AGP_INVALID_TRANSITION``;
    an unknown id is 404. Operations the freeze cancelled stay cancelled.
    """
    with transaction.atomic():
        # The row lock queues two concurrent lifts: the second reads "lifted" and is refused.
        freeze = Freeze.objects.select_for_update().filter(freeze_id=freeze_id).first()
        if freeze is None:
            raise errors.NotFound(f"No freeze with id {freeze_id!r}.")
        source = freeze.status
        if status != FreezeStatus.LIFTED or not can_proceed(freeze.lift):
            raise errors.InvalidTransition(
                from_state=source, to_state=status,
                allowed=sorted(str(t.target) for t in freeze.get_available_status_transitions()))
        freeze.lift()
        freeze.lifted_at = timezone.now()
        freeze.lifted_by = lifted_by or actor
        _freeze_sign(freeze)
        try:
            freeze.save()
        except ConcurrentTransition:
            raise errors.InvalidTransition(from_state=FreezeStatus.LIFTED, to_state=status, allowed=[]) from None
        ledger_append(event_type="freeze.lifted", resource_type="Freeze", resource_id=freeze.freeze_id,
                      actor=actor, root_principal=freeze.root_principal, payload=
{"from": source, "to": status, "lifted_by": freeze.lifted_by,
                                            "payload_hash": freeze.signature["payload_hash"]})
    return freeze
