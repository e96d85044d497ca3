"""Execution records: accepted envelopes, their operations, receipts, payments, callbacks.

The outbox of tasks to publish after commit is core's (``core.models.OutboxMessage``)."""

from django.db import models
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from core.fields import ExactJSONField
from core.models import WebhookAttempt

from .choices import EnvelopeStatus, OperationStatus, PaymentStatus, ReceiptStatus


class ActionEnvelope(models.Model):
    """An envelope accepted for execution (``Prefer: respond-async``), as submitted and as checked.

    ``inputs`` keeps the request as received, so replay can re-run the checks on exactly
    what was submitted; ``checks`` keeps each check's outcome at submission.
    """

    action_id = models.CharField(max_length=128, unique=True)
    task_id = models.CharField(max_length=128, db_index=True)
    agent_id = models.CharField(max_length=128, db_index=True)
    # The task's root principal, the tenant the envelope belongs to.
    root_principal = models.CharField(max_length=128, null=True, blank=True, db_index=True)
    tool_id = models.CharField(max_length=128)
    operation = models.CharField(max_length=128)
    capability_token_ref = models.CharField(max_length=128)
    decision_ref = models.CharField(max_length=128, db_index=True)
    policy_decision_ref = models.CharField(max_length=128)
    parameters = ExactJSONField(default=dict)
    parameters_hash = models.CharField(max_length=71)
    allowed_parameter_ranges = ExactJSONField(default=dict)
    approval_ref = models.CharField(max_length=128, blank=True, default="")
    commerce_session_ref = models.CharField(max_length=128, blank=True, default="")
    payment_ref = models.CharField(max_length=128, blank=True, default="")
    delegation_ref = models.CharField(max_length=128, blank=True, default="")
    callback_url = models.URLField(max_length=2048, blank=True, default="")
    governance_attestations = ExactJSONField(default=list)
    signature = ExactJSONField(default=dict)
    inputs = ExactJSONField(default=dict)
    checks = ExactJSONField(default=list)
    status = models.CharField(max_length=16, choices=EnvelopeStatus.choices, default=EnvelopeStatus.ACCEPTED)
    submitted_by = models.CharField(max_length=128, blank=True, default="")
    created_at = models.DateTimeField()
    accepted_at = models.DateTimeField()

    def __str__(self):
        return self.action_id


class Operation(ConcurrentTransitionMixin, models.Model):
    """The asynchronous execution of one envelope: pending -> running -> succeeded | failed,
    or -> cancelled (by the client while pending, by a freeze before its connector call)."""

    operation_id = models.CharField(max_length=128, unique=True)
    envelope = models.OneToOneField(ActionEnvelope, on_delete=models.PROTECT, related_name="async_operation",
                                    to_field="action_id", db_column="action_id")
    status = FSMField(max_length=16, choices=OperationStatus.choices, default=OperationStatus.PENDING,
                      protected=True, db_index=True)
    error = ExactJSONField(null=True, blank=True)
    callback_url = models.URLField(max_length=2048, blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    # The claim of the worker executing it (execution/runner.py): the worker renews its lease
    # while it runs; a lease left to expire means the worker died and another may take over.
    # ``attempts`` is the fencing token: only the latest claim may record the outcome.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    executor = models.CharField(max_length=256, blank=True, default="")
    connector = models.CharField(max_length=16, blank=True, default="")
    # external: the one API client whose POST /agp/receipts may complete this operation, fixed
    # when the worker hands it to the executor (the skill's executor_client_id, else the submitter).
    receipt_client_id = models.CharField(max_length=128, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    # Indexed: callback recovery looks only at operations that ended recently.
    completed_at = models.DateTimeField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    def __str__(self):
        return self.operation_id

    @transition(field=status, source=OperationStatus.PENDING, target=OperationStatus.RUNNING)
    def start(self):
        """pending -> running: a worker claimed the operation."""

    @transition(field=status, source=OperationStatus.RUNNING, target=OperationStatus.SUCCEEDED)
    def succeed(self):
        """running -> succeeded."""

    @transition(field=status, source=[OperationStatus.PENDING, OperationStatus.RUNNING], target=OperationStatus.FAILED)
    def fail(self):
        """pending|running -> failed (a re-check failed, or the tool failed)."""

    @transition(field=status, source=OperationStatus.PENDING, target=OperationStatus.CANCELLED)
    def cancel(self):
        """pending -> cancelled (the client's PATCH)."""

    @transition(field=status, source=[OperationStatus.PENDING, OperationStatus.RUNNING],
                target=OperationStatus.CANCELLED)
    def halt(self):
        """pending|running -> cancelled by a freeze (docs/reference/governance.md), before the connector call: a pending
        operation, or an ``external`` one waiting for its receipt (``execution.freezes``)."""


class Receipt(models.Model):
    receipt_id = models.CharField(max_length=128, unique=True)
    # One receipt per operation: the database refuses a second, whatever a worker does.
    operation = models.OneToOneField(Operation, on_delete=models.PROTECT, related_name="receipt",
                                     to_field="operation_id", db_column="operation_id")
    action_id = models.CharField(max_length=128, db_index=True)
    status = models.CharField(max_length=16, choices=ReceiptStatus.choices)
    result = ExactJSONField(default=dict, blank=True)
    result_hash = models.CharField(max_length=71)
    started_at = models.DateTimeField()
    completed_at = models.DateTimeField()
    executor = models.CharField(max_length=256)
    # Who wrote the outcome: the worker (``WORKER_ACTOR``) or the API client that posted it.
    posted_by = models.CharField(max_length=128, blank=True, default="")
    # Why the action was allowed (docs/reference/governance.md), covered by the signature.
    governance = ExactJSONField(default=dict)
    signature = ExactJSONField(default=dict)
    created_at = models.DateTimeField()


class Payment(models.Model):
    """An amount reserved on a commerce session at acceptance, committed or released later."""

    payment_id = models.CharField(max_length=128, unique=True)
    envelope = models.OneToOneField(ActionEnvelope, on_delete=models.PROTECT, related_name="payment",
                                    to_field="action_id", db_column="action_id")
    session_id = models.CharField(max_length=128, db_index=True)
    currency = models.CharField(max_length=3)
    amount = models.DecimalField(max_digits=18, decimal_places=4)
    status = models.CharField(max_length=16, choices=PaymentStatus.choices, default=PaymentStatus.RESERVED)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()


class CallbackAttempt(WebhookAttempt):
    """One delivery attempt of an operation's callback, kept for audit."""

    operation = models.ForeignKey(Operation, on_delete=models.PROTECT, related_name="callback_attempts",
                                  to_field="operation_id", db_column="operation_id")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["operation", "attempt"], name="callback_attempt_unique")]
