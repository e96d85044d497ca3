"""Cross-cutting records: the hash-chained ledger, stored idempotent responses, the outbox."""

from django.db import models

from .choices import OutboxStatus
from .fields import CanonicalJSONField


class LedgerHead(models.Model):
    """The single row that serialises ledger appends.

    Every append locks this row (``SELECT ... FOR UPDATE``) inside the transaction that
    records the change, so concurrent writers queue here and the chain never forks and the
    sequence never has a gap: a rolled-back transaction rolls its head move back too.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    sequence = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64, default="0" * 64)

    class Meta:
        verbose_name = "ledger head"


class LedgerEvent(models.Model):
    """One link of the chain. ``payload`` is stored as its canonical JSON text, the bytes
    ``payload_hash`` covers, so the database can check it without Python (``core.ledger``)."""

    sequence = models.BigIntegerField(primary_key=True)
    event_id = models.CharField(max_length=128)
    event_type = models.CharField(max_length=64)
    resource_type = models.CharField(max_length=64)
    resource_id = models.CharField(max_length=128)
    actor = models.CharField(max_length=128)
    payload = CanonicalJSONField(default=dict)
    payload_hash = models.CharField(max_length=71)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["-sequence"]
        # Declared here rather than as unique=True / db_index=True on the fields: on
        # PostgreSQL those add a second, varchar_pattern_ops index for LIKE 'prefix%', which
        # nothing asks of the ledger (the admin searches with iexact and icontains). At
        # 1,000,000 events the two took 45 MB, and two more B-tree inserts on every append.
        constraints = [models.UniqueConstraint(fields=["event_id"], name="core_ledgerevent_event_id_unique")]
        indexes = [models.Index(fields=["resource_type", "resource_id"]),
                   models.Index(fields=["event_type"], name="core_ledgerevent_event_type")]

    def __str__(self):
        return f"#{self.sequence} {self.event_type} {self.resource_id}"


class IdempotencyRecord(models.Model):
    """The response to a request made with an ``Idempotency-Key`` (C4), stored in the
    transaction that did the request's work."""

    client_id = models.CharField(max_length=128)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=512)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.BinaryField()
    response_headers = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["client_id", "method", "path", "key"], name="idempotency_scope_unique"),
        ]


class OutboxMessage(models.Model):
    """A task to publish, written in the transaction that makes it due (``core.outbox``).

    Publishing happens after commit; a periodic sweep re-publishes what a crash between
    commit and publish left behind, so nothing accepted is ever lost.
    """

    task_name = models.CharField(max_length=128)
    args = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=OutboxStatus.choices, default=OutboxStatus.PENDING,
                              db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    published_at = models.DateTimeField(null=True, blank=True)
