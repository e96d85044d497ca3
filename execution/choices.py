from django.db import models

from core.choices import DeliveryStatus

# Who the ledger names for what the worker does (operations, payments, callbacks).
WORKER_ACTOR = "agp-worker"
# Cancelling another client's operation is an operator's brake, like a revocation or a freeze.
CANCEL_ANY_SCOPE = "agp.revocation.write"
# Celery task names (execution/tasks.py registers them; the outbox publishes by name).
EXECUTE_TASK = "agp.execute_operation"
CALLBACK_TASK = "agp.deliver_callback"


class OperationStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


OPERATION_TERMINAL = (OperationStatus.SUCCEEDED, OperationStatus.FAILED, OperationStatus.CANCELLED)


class EnvelopeStatus(models.TextChoices):
    ACCEPTED = "accepted"
    EXECUTED = "executed"
    FAILED = "failed"


class ReceiptStatus(models.TextChoices):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class PaymentStatus(models.TextChoices):
    RESERVED = "reserved"
    COMMITTED = "committed"
    RELEASED = "released"


CallbackStatus = DeliveryStatus  # a callback is a signed webhook (core/webhooks.py)
