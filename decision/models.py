"""Decision records: what was evaluated, assessed, decided and approved, and why."""

from django.db import models
from django.db.models.functions import Round
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from core.fields import ExactJSONField
from core.models import WebhookAttempt
from registry.models import Delegation, PolicySet, Task

from .choices import (
    ApprovalVerdict,
    BacktestStatus,
    CommerceSessionStatus,
    DecidedBy,
    DecisionOutcome,
    DecisionStatus,
    EscalationStatus,
    Recommendation,
)


class Context(models.Model):
    context_id = models.CharField(max_length=128, unique=True)
    task = models.ForeignKey(Task, on_delete=models.PROTECT, to_field="task_id", db_column="task_id",
                             related_name="contexts")
    agent_id = models.CharField(max_length=128, blank=True, default="")
    data = ExactJSONField(default=dict)
    content_hash = models.CharField(max_length=71)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it


class EvidenceBundle(models.Model):
    bundle_id = models.CharField(max_length=128, unique=True)
    task = models.ForeignKey(Task, on_delete=models.PROTECT, to_field="task_id", db_column="task_id",
                             related_name="evidence_bundles")
    items = ExactJSONField(default=list)
    bundle_hash = models.CharField(max_length=71)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it


class PolicyEvaluation(models.Model):
    evaluation_id = models.CharField(max_length=128, unique=True)
    policy_set = models.ForeignKey(PolicySet, on_delete=models.PROTECT, to_field="policy_set_id",
                                   db_column="policy_set_id", related_name="evaluations")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, to_field="task_id", db_column="task_id",
                             related_name="policy_evaluations")
    agent_id = models.CharField(max_length=128)
    input = ExactJSONField(default=dict)
    input_hash = models.CharField(max_length=71)
    # The action evaluated (``{"tool_id", "operation", "parameters"}``, the Rego input's
    # ``action``) and its hash; null for an evaluation made without one, which clears nothing.
    action = ExactJSONField(null=True, blank=True)
    action_hash = models.CharField(max_length=71, blank=True, default="")
    ruleset_hash = models.CharField(max_length=71)
    result = ExactJSONField(default=dict)
    allowed = models.BooleanField(default=False)
    require_approval = models.BooleanField(default=False)
    warnings = ExactJSONField(default=list)
    # The set's active shadows (docs/reference/governance.md), evaluated with the same input: {shadow
    # policy_set_id: {"allow", "matches"}}. Keyed by id so that the auditors' agreement rate of
    # one shadow is a key lookup the database answers (PostgreSQL and SQLite alike); the API
    # renders it as a list (decision/serializers.py).
    shadow_results = ExactJSONField(default=dict)
    evaluated_at = models.DateTimeField()
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    class Meta:
        # A backtest's window is an interval of evaluated_at (docs/reference/governance.md).
        indexes = [models.Index(fields=["evaluated_at"], name="evaluation_evaluated_at")]


class Decision(ConcurrentTransitionMixin, models.Model):
    decision_id = models.CharField(max_length=128, unique=True)
    task = models.ForeignKey(Task, on_delete=models.PROTECT, to_field="task_id", db_column="task_id",
                             related_name="decisions")
    agent_id = models.CharField(max_length=128)
    outcome = models.CharField(max_length=16, choices=DecisionOutcome.choices)
    rationale = models.TextField(blank=True, default="")
    context = models.ForeignKey(Context, null=True, blank=True, on_delete=models.PROTECT, to_field="context_id",
                                db_column="context_ref", related_name="decisions")
    evidence_refs = ExactJSONField(default=list, blank=True)
    policy_evaluation = models.ForeignKey(PolicyEvaluation, null=True, blank=True, on_delete=models.PROTECT,
                                          to_field="evaluation_id", db_column="policy_evaluation_ref",
                                          related_name="decisions")
    status = FSMField(max_length=16, choices=DecisionStatus.choices, default=DecisionStatus.DRAFT, protected=True)
    # "policy": made by the task's policy set for an action made in one call (docs/reference/gateway.md).
    decided_by = models.CharField(max_length=16, choices=DecidedBy.choices, default=DecidedBy.CLIENT)
    finalised_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    class Meta:
        # The one call finds the decision that waits for people on its task (execution/one_call.py):
        # drafts the policy made are few, whatever the number of decisions of the task.
        indexes = [models.Index(fields=["task", "agent_id"], name="decision_waiting_by_policy",
                                condition=models.Q(status="draft", decided_by="policy"))]

    @property
    def context_ref(self) -> str | None:
        return self.context_id

    @property
    def policy_evaluation_ref(self) -> str | None:
        return self.policy_evaluation_id

    @transition(field=status, source=DecisionStatus.DRAFT, target=DecisionStatus.FINALISED)
    def finalise(self):
        """draft -> finalised; a finalised decision is immutable."""


class ImpactAssessment(models.Model):
    assessment_id = models.CharField(max_length=128, unique=True)
    task = models.ForeignKey(Task, on_delete=models.PROTECT, to_field="task_id", db_column="task_id",
                             related_name="impact_assessments")
    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, to_field="decision_id",
                                 db_column="decision_ref", related_name="impact_assessments")
    agent_id = models.CharField(max_length=128)
    time_horizons = ExactJSONField(default=list)
    stakeholders_affected = ExactJSONField(default=list)
    pareto_assessment = ExactJSONField(default=dict)
    ethical_framework_applied = ExactJSONField(default=dict)
    recommendation = models.CharField(max_length=32, choices=Recommendation.choices)
    recommendation_rationale = models.TextField(blank=True, default="")
    assessed_at = models.DateTimeField()
    signature = ExactJSONField(default=dict)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    @property
    def decision_ref(self) -> str:
        return self.decision_id


class Approval(models.Model):
    """An approver's verdict on a decision; immutable once written."""

    approval_id = models.CharField(max_length=128, unique=True)
    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, to_field="decision_id",
                                 db_column="decision_ref", related_name="approvals")
    approver = models.CharField(max_length=128)
    # Who recorded it: the client, and its kind. Only a person's approval can clear an action.
    approver_client = models.CharField(max_length=128, blank=True, default="")
    approver_kind = models.CharField(max_length=16, blank=True, default="")
    verdict = models.CharField(max_length=16, choices=ApprovalVerdict.choices)
    reason = models.TextField(blank=True, default="")  # why the person decided so (the inbox asks)
    conditions = ExactJSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    signature = ExactJSONField(default=dict)
    # The approver's own compact JWS over its verdict, and the public key (a JWK) that verified it.
    approver_signature = models.TextField(blank=True, default="")
    approver_key = ExactJSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    @property
    def decision_ref(self) -> str:
        return self.decision_id


class Escalation(ConcurrentTransitionMixin, models.Model):
    escalation_id = models.CharField(max_length=128, unique=True)
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.PROTECT, to_field="task_id",
                             db_column="task_id", related_name="escalations")
    decision = models.ForeignKey(Decision, null=True, blank=True, on_delete=models.PROTECT,
                                 to_field="decision_id", db_column="decision_ref", related_name="escalations")
    action_id = models.CharField(max_length=128, blank=True, default="", db_index=True)
    raised_by = models.CharField(max_length=128, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    status = FSMField(max_length=16, choices=EscalationStatus.choices, default=EscalationStatus.OPEN, protected=True)
    outcome = models.CharField(max_length=32, blank=True, default="")
    resolved_by = models.CharField(max_length=128, blank=True, default="")
    resolution_notes = models.TextField(blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    # The tenant (root principal) it belongs to; null: of no tenant (never, once made over the API).
    root_principal = models.CharField(max_length=128, null=True, blank=True, db_index=True)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    @property
    def decision_ref(self) -> str | None:
        return self.decision_id

    @transition(field=status, source=EscalationStatus.OPEN, target=EscalationStatus.RESOLVED)
    def resolve(self):
        """open -> resolved, with an outcome; resolved is final."""


class CommerceSession(models.Model):
    """A spending window for one task and agent; budgets move atomically (docs/reference/execution.md)."""

    session_id = models.CharField(max_length=128, unique=True)
    task = models.ForeignKey(Task, on_delete=models.PROTECT, to_field="task_id", db_column="task_id",
                             related_name="commerce_sessions")
    agent_id = models.CharField(max_length=128)
    delegation = models.ForeignKey(Delegation, on_delete=models.PROTECT, to_field="delegation_id",
                                   db_column="delegation_id", related_name="commerce_sessions")
    merchant = models.CharField(max_length=256, blank=True, default="")
    currency = models.CharField(max_length=3)
    amount_limit = models.DecimalField(max_digits=18, decimal_places=4)
    spent_amount = models.DecimalField(max_digits=18, decimal_places=4, default=0)
    reserved_amount = models.DecimalField(max_digits=18, decimal_places=4, default=0)
    status = models.CharField(max_length=16, choices=CommerceSessionStatus.choices,
                              default=CommerceSessionStatus.OPEN)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(spent_amount__gte=0, reserved_amount__gte=0),
                name="commerce_session_amounts_non_negative"),
            # The database itself refuses any write that would overspend the session; at the
            # columns' four decimals, since SQLite computes in binary doubles.
            models.CheckConstraint(
                condition=models.Q(spent_amount__lte=Round(models.F("amount_limit") - models.F("reserved_amount"), 4)),
                name="commerce_session_within_limit"),
        ]


class Backtest(ConcurrentTransitionMixin, models.Model):
    """A candidate policy set re-evaluated over recorded evaluations (docs/reference/governance.md).

    The row is also the backtest's asynchronous Operation (``operation_id``, ``status``,
    progress in ``evaluations`` of ``total``), served at ``/agp/operations/{id}``: the
    decision API owns it, so nothing of execution is needed to create, run or cancel it.
    The counts and ``changes`` are the summary docs/reference/governance.md names; they are written as the run
    progresses (counts) and when it ends (everything).

    The run goes in slices of about a second, each a task of its own on the background queue
    (decision/backtests.py): ``resume`` holds what a slice leaves to the next (where the
    window stands, the changes and reasons so far), ``slices`` counts them (the next slice's
    message names it), ``run_seconds`` adds up their time against ``AGP_BACKTEST_MAX_SECONDS``.
    ``limit_reached`` says which bound ended the run early, if one did. ``client_slot``
    numbers the unfinished backtests of one client, so that the database refuses one more
    than ``AGP_BACKTESTS_PER_CLIENT`` (the constraint below), whatever the concurrency.
    """

    backtest_id = models.CharField(max_length=128, unique=True)
    operation_id = models.CharField(max_length=128, unique=True)
    policy_set = models.ForeignKey(PolicySet, on_delete=models.PROTECT, to_field="policy_set_id",
                                   db_column="policy_set_id", related_name="backtests")
    # The candidate's ruleset hash when the backtest was asked for (a set's ruleset never changes).
    ruleset_hash = models.CharField(max_length=71)
    baseline_policy_set = models.ForeignKey(PolicySet, null=True, blank=True, on_delete=models.PROTECT,
                                            to_field="policy_set_id", db_column="baseline_policy_set_id",
                                            related_name="baseline_backtests")
    since = models.DateTimeField()
    until = models.DateTimeField()
    task_id = models.CharField(max_length=128, blank=True, default="")
    agent_id = models.CharField(max_length=128, blank=True, default="")
    # The tenant (root principal) it belongs to; null: of no tenant (an operator's backtest over every tenant's evaluations).
    root_principal = models.CharField(max_length=128, null=True, blank=True, db_index=True)
    status = FSMField(max_length=16, choices=BacktestStatus.choices, default=BacktestStatus.PENDING, protected=True,
                      db_index=True)
    total = models.PositiveIntegerField(null=True, blank=True)  # evaluations in the window, counted at the start
    evaluations = models.PositiveIntegerField(default=0)  # re-evaluated so far
    unchanged = models.PositiveIntegerField(default=0)
    newly_denied = models.PositiveIntegerField(default=0)
    newly_allowed = models.PositiveIntegerField(default=0)
    approval_changed = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    changes = ExactJSONField(default=list, blank=True)
    by_reason = ExactJSONField(default=dict, blank=True)
    error = ExactJSONField(null=True, blank=True)
    # As an envelope's operation: the worker's claim (a lease it renews with each progress
    # write) and its fencing token.
    attempts = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    executor = models.CharField(max_length=256, blank=True, default="")
    requested_by = models.CharField(max_length=128, blank=True, default="")
    client_slot = models.PositiveSmallIntegerField(null=True, blank=True)
    slices = models.PositiveIntegerField(default=0)
    run_seconds = models.FloatField(default=0)
    resume = ExactJSONField(null=True, blank=True)
    limit_reached = ExactJSONField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            # At most one unfinished backtest per client and slot: the per-client limit holds
            # under concurrent requests (two creations cannot both take the last slot).
            models.UniqueConstraint(fields=["requested_by", "client_slot"], name="backtest_client_slot",
                                    condition=models.Q(status__in=[BacktestStatus.PENDING, BacktestStatus.RUNNING])),
        ]

    def __str__(self):
        return self.backtest_id

    @transition(field=status, source=BacktestStatus.PENDING, target=BacktestStatus.RUNNING)
    def start(self):
        """pending -> running: a worker claimed it."""

    @transition(field=status, source=BacktestStatus.RUNNING, target=BacktestStatus.SUCCEEDED)
    def succeed(self):
        """running -> succeeded: the whole window was re-evaluated."""

    @transition(field=status, source=BacktestStatus.RUNNING, target=BacktestStatus.FAILED)
    def fail(self):
        """running -> failed: the run broke off (``error`` says why)."""

    @transition(field=status, source=[BacktestStatus.PENDING, BacktestStatus.RUNNING], target=BacktestStatus.CANCELLED)
    def cancel(self):
        """pending|running -> cancelled (PATCH /agp/operations/{id}); a running worker stops at its next write."""


class ApprovalWebhook(models.Model):
    """Where a tenant is told that a decision waits for its people (docs/reference/approvals.md)."""

    root_principal = models.CharField(max_length=128, unique=True)
    url = models.URLField(max_length=2048)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["root_principal"]

    def __str__(self):
        return f"{self.root_principal} -> {self.url}"


class ApprovalNotificationAttempt(WebhookAttempt):
    """One delivery attempt of the notice that a decision waits for approval, kept for audit."""

    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, related_name="notification_attempts",
                                 to_field="decision_id", db_column="decision_ref")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["decision", "attempt"],
                                               name="approval_notification_attempt_unique")]
