"""Atomic budgets (docs/reference/execution.md): reserve at acceptance, commit on success, release on failure.

The amounts live on the commerce session (``reserved_amount``, ``spent_amount``); each
envelope's share is one ``Payment`` row. Every move is a conditional ``UPDATE`` that must
touch exactly one row, so no interleaving of requests and workers can overspend a session,
and a database CHECK constraint on the session refuses any write that would
(decision/models.py ``commerce_session_within_limit``).

The delegation spend limit spans sessions: every link of the agent's delegation chain
bounds what all sessions under it (its own and its descendants') have spent or reserved.
Reservations in one delegation tree queue on a row lock of the tree's root link, then
re-measure the spending under every link before reserving.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Round
from django.utils import timezone

from agp_project import errors
from agp_project.exactjson import decimal_text
from core.ledger import ledger_append
from decision.models import CommerceSession
from decision.selectors import MONEY, commerce_spending_under
from registry.models import Delegation

from .choices import WORKER_ACTOR, PaymentStatus
from .models import ActionEnvelope, Payment
from .selectors import action_trail


class BudgetExhausted(Exception):
    """A reservation that no longer fits: the commerce check fails with ``reason``."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class _Link:
    pk: int
    delegation_id: str
    path: str
    spend_currency: str | None
    spend_amount: Decimal | None


def money(expression):
    """Money arithmetic in SQL, at the columns' four decimals: exact on PostgreSQL already;
    on SQLite, which computes in binary doubles, it keeps 0.1 + 0.2 from exceeding 0.3."""
    return Round(expression, 4, output_field=MONEY)


def payment_reserve(*, envelope: ActionEnvelope, session_id: str, amount: Decimal, currency: str,
                    chain_pks: list[int], actor: str) -> Payment:
    """Hold ``amount`` on the session for ``envelope``; raise BudgetExhausted when it does not fit.

    Must run inside the transaction that accepts the envelope: the reservation, the
    Payment and the envelope commit or roll back together.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("payment_reserve must run inside the transaction that accepts the envelope")
    now = timezone.now()
    # Queue every reservation in this delegation tree behind one row lock (the root link),
    # so two sessions under one delegation cannot both take its last headroom. NO KEY
    # UPDATE, as registry's tree lock: it leaves foreign-key checks on the root free.
    list(Delegation.objects.select_for_update(no_key=True).filter(pk=chain_pks[0]).values_list("pk", flat=True))
    links = [_Link(*row) for row in Delegation.objects.filter(pk__in=chain_pks).order_by("depth", "pk")
             .values_list("pk", "delegation_id", "path", "spend_currency", "spend_amount")]
    spending = commerce_spending_under(paths=[link.path for link in links])
    for link, used in zip(links, spending, strict=True):
        if link.spend_currency != currency or link.spend_amount is None or used + amount > link.spend_amount:
            raise BudgetExhausted(f"delegation {link.delegation_id!r} spend limit would be exceeded "
                                  f"({used} already spent or reserved)")
    # The race this prevents: two submissions both read "room for 50" and both reserve.
    # The WHERE re-checks the room in the same statement that takes it.
    reserved = (CommerceSession.objects
                .filter(session_id=session_id, status="open", currency=currency,
                        amount_limit__gte=money(F("spent_amount") + F("reserved_amount")
                                                + Value(amount, output_field=MONEY)))
                .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
                .update(reserved_amount=money(F("reserved_amount") + Value(amount, output_field=MONEY))))
    if reserved != 1:
        raise BudgetExhausted(f"commerce session {session_id!r} has no room left for {decimal_text(amount)} {currency}")
    payment = Payment.objects.create(payment_id=envelope.payment_ref, envelope=envelope, session_id=session_id,
                                     currency=currency, amount=amount, status=PaymentStatus.RESERVED,
                                     created_at=now, updated_at=now)
    ledger_append(event_type="payment.reserved", resource_type="Payment", resource_id=payment.payment_id,
                  actor=actor, root_principal=envelope.root_principal, payload={**action_trail(envelope), "session_id": session_id,
                                        "amount": str(amount), "currency": currency})
    return payment


def _payment_move(*, action_id: str, target: str, actor: str) -> Payment | None:
    with transaction.atomic():
        payment = (Payment.objects.select_for_update(of=("self",)).select_related("envelope")
                   .filter(envelope_id=action_id).first())
        if payment is None:
            return None
        if payment.status == target:
            return payment  # already done: a redelivered task repeats nothing
        if payment.status != PaymentStatus.RESERVED:
            raise errors.InvalidTransition(from_state=payment.status, to_state=target,
                                           allowed=[PaymentStatus.COMMITTED, PaymentStatus.RELEASED])
        now = timezone.now()
        moved = Payment.objects.filter(pk=payment.pk, status=PaymentStatus.RESERVED).update(
            status=target, updated_at=now)
        if moved != 1:  # cannot happen under the row lock; refuse rather than double-count
            raise errors.Conflict(f"payment {payment.payment_id!r} moved concurrently")
        amount = Value(payment.amount, output_field=MONEY)
        changes = {"reserved_amount": money(F("reserved_amount") - amount)}
        if target == PaymentStatus.COMMITTED:
            changes["spent_amount"] = money(F("spent_amount") + amount)
        updated = (CommerceSession.objects
                   .filter(session_id=payment.session_id, reserved_amount__gte=amount).update(**changes))
        if updated != 1:
            raise errors.Conflict(f"commerce session {payment.session_id!r} does not hold the reservation of "
                                  f"payment {payment.payment_id!r}")
        ledger_append(event_type=f"payment.{target}", resource_type="Payment", resource_id=payment.payment_id,
                      actor=actor, root_principal=payment.envelope.root_principal, payload={**action_trail(payment.envelope), "session_id": payment.session_id,
                                            "amount": str(payment.amount), "currency": payment.currency})
        payment.status, payment.updated_at = target, now
        return payment


def payment_commit(*, action_id: str, actor: str = WORKER_ACTOR) -> Payment | None:
    """reserved -> committed: the reservation becomes spending. Idempotent; None without a payment."""
    return _payment_move(action_id=action_id, target=PaymentStatus.COMMITTED, actor=actor)


def payment_release(*, action_id: str, actor: str = WORKER_ACTOR) -> Payment | None:
    """reserved -> released: the amount is free again. Idempotent; None without a payment.

    A committed payment cannot be released (that would be a refund): InvalidTransition.
    """
    return _payment_move(action_id=action_id, target=PaymentStatus.RELEASED, actor=actor)
