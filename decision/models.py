"""Decision records: what was evaluated, assessed, decided and approved, and why."""

from django.db import models
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from registry.models import Delegation, PolicySet, Task

from .choices import (
    ApprovalVerdict,
    CommerceSessionStatus,
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
    data = models.JSONField(default=dict)
    content_hash = models.CharField(max_length=71)
    created_at = models.DateTimeField()


class EvidenceBundle(models.Model):
    bundle_id = models.CharField(max_length=128, unique=True)
    task = models.ForeignKey(Task, on_delete=models.PROTECT, to_field="task_id", db_column="task_id",
                             related_name="evidence_bundles")
    items = models.JSONField(default=list)
    bundle_hash = models.CharField(max_length=71)
    created_at = models.DateTimeField()


class PolicyEvaluation(models.Model):
    evaluation_id = models.CharField(max_length=128, unique=True)
    policy_set = models.ForeignKey(PolicySet, on_delete=models.PROTECT, to_field="policy_set_id",
                                   db_column="policy_set_id", related_name="evaluations")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, to_field="task_id", db_column="task_id",
                             related_name="policy_evaluations")
    agent_id = models.CharField(max_length=128)
    input = models.JSONField(default=dict)
    input_hash = models.CharField(max_length=71)
    # The action evaluated (``{"tool_id", "operation", "parameters"}``, the Rego input's
    # ``action``) and its hash; null for an evaluation made without one, which clears nothing.
    action = models.JSONField(null=True, blank=True)
    action_hash = models.CharField(max_length=71, blank=True, default="")
    ruleset_hash = models.CharField(max_length=71)
    result = models.JSONField(default=dict)
    allowed = models.BooleanField(default=False)
    require_approval = models.BooleanField(default=False)
    warnings = models.JSONField(default=list)
    evaluated_at = models.DateTimeField()
    created_at = models.DateTimeField()


class Decision(ConcurrentTransitionMixin, models.Model):
    decision_id = models.CharField(max_length=128, unique=True)
    task = models.ForeignKey(Task, on_delete=models.PROTECT, to_field="task_id", db_column="task_id",
                             related_name="decisions")
    agent_id = models.CharField(max_length=128)
    outcome = models.CharField(max_length=16, choices=DecisionOutcome.choices)
    rationale = models.TextField(blank=True, default="")
    context = models.ForeignKey(Context, null=True, blank=True, on_delete=models.PROTECT, to_field="context_id",
                                db_column="context_ref", related_name="decisions")
    evidence_refs = models.JSONField(default=list, blank=True)
    policy_evaluation = models.ForeignKey(PolicyEvaluation, null=True, blank=True, on_delete=models.PROTECT,
                                          to_field="evaluation_id", db_column="policy_evaluation_ref",
                                          related_name="decisions")
    status = FSMField(max_length=16, choices=DecisionStatus.choices, default=DecisionStatus.DRAFT, protected=True)
    finalised_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

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
    time_horizons = models.JSONField(default=list)
    stakeholders_affected = models.JSONField(default=list)
    pareto_assessment = models.JSONField(default=dict)
    ethical_framework_applied = models.JSONField(default=dict)
    recommendation = models.CharField(max_length=32, choices=Recommendation.choices)
    recommendation_rationale = models.TextField(blank=True, default="")
    assessed_at = models.DateTimeField()
    signature = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    @property
    def decision_ref(self) -> str:
        return self.decision_id


class Approval(models.Model):
    """An approver's verdict on a decision; immutable once written."""

    approval_id = models.CharField(max_length=128, unique=True)
    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, to_field="decision_id",
                                 db_column="decision_ref", related_name="approvals")
    approver = models.CharField(max_length=128)
    verdict = models.CharField(max_length=16, choices=ApprovalVerdict.choices)
    conditions = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    signature = models.JSONField(default=dict)
    created_at = models.DateTimeField()

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
    created_at = models.DateTimeField()

    @property
    def decision_ref(self) -> str | None:
        return self.decision_id

    @transition(field=status, source=EscalationStatus.OPEN, target=EscalationStatus.RESOLVED)
    def resolve(self):
        """open -> resolved, with an outcome; resolved is final."""


class CommerceSession(models.Model):
    """A spending window for one task and agent; budgets move atomically (CONTRACT C8)."""

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

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(spent_amount__gte=0, reserved_amount__gte=0),
                name="commerce_session_amounts_non_negative"),
            # The database itself refuses any write that would overspend the session.
            models.CheckConstraint(
                condition=models.Q(spent_amount__lte=models.F("amount_limit") - models.F("reserved_amount")),
                name="commerce_session_within_limit"),
        ]
