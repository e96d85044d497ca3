"""Cross-cutting records: the hash-chained ledger, stored idempotent responses, the outbox."""

from django.conf import settings
from django.db import models

from .choices import DeliveryStatus, OutboxStatus
from .fields import CanonicalJSONField, ExactJSONField, TransactionIdField


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


class LedgerEventFields(models.Model):
    """The fields an event has before it has a place in the chain."""

    event_id = models.CharField(max_length=128)
    event_type = models.CharField(max_length=64)
    resource_type = models.CharField(max_length=64)
    resource_id = models.CharField(max_length=128)
    actor = models.CharField(max_length=128)
    payload_hash = models.CharField(max_length=71)
    recorded_at = models.DateTimeField()
    # The task and action the event belongs to (core.ledger.event_trail): an index of what the
    # payload says, outside the chained fields; null where it does not apply.
    task_id = models.CharField(max_length=128, null=True, blank=True)
    action_id = models.CharField(max_length=128, null=True, blank=True)
    # The tenant (root principal) whose records the event is about; null for an event of no
    # tenant (API clients, shared policy sets), which only callers of every tenant see.
    root_principal = models.CharField(max_length=128, null=True, blank=True)

    class Meta:
        abstract = True


class LedgerEvent(LedgerEventFields):
    """One link of the chain. ``payload`` is stored as its canonical JSON text, the bytes
    ``payload_hash`` covers, so the database can check it without Python (``core.ledger``)."""

    sequence = models.BigIntegerField(primary_key=True)
    payload = CanonicalJSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["-sequence"]
        # Declared here rather than as unique=True / db_index=True on the fields: on
        # PostgreSQL those add a second, varchar_pattern_ops index for LIKE 'prefix%', which
        # nothing asks of the ledger (the admin searches with iexact and icontains). At
        # 1,000,000 events the two took 45 MB, and two more B-tree inserts on every append.
        constraints = [models.UniqueConstraint(fields=["event_id"], name="core_ledgerevent_event_id_unique")]
        indexes = [models.Index(fields=["resource_type", "resource_id"]),
                   models.Index(fields=["event_type"], name="core_ledgerevent_event_type"),
                   models.Index(fields=["task_id", "sequence"], name="core_ledgerevent_task_trail"),
                   models.Index(fields=["action_id", "sequence"], name="core_ledgerevent_action_trail"),
                   models.Index(fields=["root_principal", "sequence"], name="core_ledgerevent_tenant")]

    def __str__(self):
        return f"#{self.sequence} {self.event_type} {self.resource_id}"


class LedgerPendingEvent(LedgerEventFields):
    """An event committed with its change and not yet in the chain (PostgreSQL; ``core.sequencer``).

    Written in the transaction of the change it records, so it is durable exactly when the
    change is. The sequencer moves it into ``LedgerEvent`` (giving it its ``sequence``,
    ``prev_hash`` and ``hash``) and deletes it here in one transaction: an event is in
    exactly one of the two tables, and readers of the ledger, which read ``LedgerEvent``
    only, see integrated events only. ``payload`` is the canonical JSON text as hashed.
    """

    id = models.BigAutoField(primary_key=True)
    xid = TransactionIdField(null=True)
    payload = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["event_id"], name="core_ledgerpending_event_id_unique")]
        # The sequencer's order: the writers' transaction ids, then the insertion order.
        indexes = [models.Index(fields=["xid", "id"], name="core_ledgerpending_order")]

    def __str__(self):
        return f"pending {self.event_type} {self.resource_id}"


class IdempotencyRecord(models.Model):
    """The response to a request made with an ``Idempotency-Key`` (docs/reference/api.md), stored in the
    transaction that did the request's work."""

    client_id = models.CharField(max_length=128)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=512)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.BinaryField()
    response_headers = ExactJSONField(default=dict)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["client_id", "method", "path", "key"], name="idempotency_scope_unique"),
        ]


class MerkleTile(models.Model):
    """One tile of the ledger's Merkle tree (docs/reference/ledger.md; ``core.tree``).

    Tile (``level``, ``index``) holds the hashes of the tree's nodes at height ``4 * level``
    with indices ``16 * index`` onwards: up to 16 hashes of 32 bytes, concatenated. Level 0
    holds the leaf hashes. Only the last tile of a level is ever partial, and a tile only
    grows: the hash of a complete subtree never changes.
    """

    level = models.PositiveSmallIntegerField()
    index = models.BigIntegerField()
    hashes = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["level", "index"], name="core_merkletile_position_unique")]

    def __str__(self):
        return f"tile {self.level}/{self.index} ({len(self.hashes) // 32} hashes)"


class Checkpoint(models.Model):
    """A signed statement of the ledger's Merkle tree at one size (docs/reference/ledger.md).

    The worker makes one every ``AGP_CHECKPOINT_SECONDS`` when the ledger grew, in the
    transaction that extends the stored tiles to ``tree_size``: the newest checkpoint's size
    is always the size of the stored tree.
    """

    tree_size = models.BigIntegerField(primary_key=True)
    root_hash = models.CharField(max_length=64)
    issued_at = models.DateTimeField()
    signature = ExactJSONField(default=dict)

    class Meta:
        ordering = ["-tree_size"]

    def __str__(self):
        return f"checkpoint {self.tree_size} {self.root_hash[:12]}"


class MerkleTreeLock(models.Model):
    """The single row every checkpoint run updates first, so runs extend the tree one at a time.

    An ``UPDATE`` rather than ``SELECT ... FOR UPDATE``: it takes the row lock on PostgreSQL
    and the database's write lock on SQLite, where a read takes none.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    locked_at = models.DateTimeField(null=True)

    class Meta:
        verbose_name = "Merkle tree lock"
class OutboxMessage(models.Model):
    """A task to publish, written in the transaction that makes it due (``core.outbox``).

    Publishing happens after commit; a periodic sweep re-publishes what a crash between
    commit and publish left behind, so nothing accepted is ever lost.
    """

    task_name = models.CharField(max_length=128)
    args = ExactJSONField(default=list)
    status = models.CharField(max_length=16, choices=OutboxStatus.choices, default=OutboxStatus.PENDING,
                              db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    # The request whose work this is (its X-Request-ID): published as the message header
    # agp_request_id, so the worker's log lines of the task name the request.
    request_id = models.CharField(max_length=128, blank=True, default="")
    created_at = models.DateTimeField()
    published_at = models.DateTimeField(null=True, blank=True)


class StaffTenancy(models.Model):
    """The tenants (root principals) an admin user is bound to (docs/reference/identity.md).

    A staff user with a row sees, in the admin and the auditor's pages, only the records of
    these tenants, as an API client bound to them would; ``"*"`` is every tenant. A staff user
    without one (a superuser, an auditor of the whole service) sees everything.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agp_tenancy")
    tenants = ExactJSONField(default=list)

    class Meta:
        verbose_name = "tenancy"
        verbose_name_plural = "tenancy"

    def __str__(self):
        return " ".join(self.tenants) or "(no tenant)"


class WebhookAttempt(models.Model):
    """One delivery attempt of a signed webhook (core/webhooks.py), kept for audit; numbered
    from 1 per delivery (a unique constraint of each concrete model)."""

    attempt = models.PositiveIntegerField()
    url = models.URLField(max_length=2048)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    attempted_at = models.DateTimeField()

    class Meta:
        abstract = True
