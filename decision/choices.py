from django.db import models


class DecisionOutcome(models.TextChoices):
    APPROVE = "approve"
    DENY = "deny"
    ESCALATE = "escalate"


class DecidedBy(models.TextChoices):
    """Who made a decision: a client that recorded it, or a task's policy set in a one-call action."""

    CLIENT = "client"
    POLICY = "policy"


class DecisionStatus(models.TextChoices):
    DRAFT = "draft"
    FINALISED = "finalised"


class Recommendation(models.TextChoices):
    PROCEED = "proceed"
    PROCEED_WITH_CONDITIONS = "proceed_with_conditions"
    DEFER = "defer"
    DO_NOT_PROCEED = "do_not_proceed"


class Horizon(models.TextChoices):
    IMMEDIATE = "immediate"
    SHORT_TERM = "short_term"
    MEDIUM_TERM = "medium_term"
    LONG_TERM = "long_term"


class Severity(models.TextChoices):
    NEGLIGIBLE = "negligible"
    MINOR = "minor"
    MODERATE = "moderate"
    MAJOR = "major"
    SEVERE = "severe"


class ImpactDirection(models.TextChoices):
    POSITIVE = "positive"
    NEGATIVE = "negative"
    NEUTRAL = "neutral"
    MIXED = "mixed"


class EthicalFramework(models.TextChoices):
    VEIL_OF_IGNORANCE = "veil_of_ignorance"
    UTILITARIAN = "utilitarian"
    DEONTOLOGICAL = "deontological"
    VIRTUE_ETHICS = "virtue_ethics"
    CARE_ETHICS = "care_ethics"
    RIGHTS_BASED = "rights_based"


class ApprovalVerdict(models.TextChoices):
    APPROVED = "approved"
    REJECTED = "rejected"


class EscalationStatus(models.TextChoices):
    OPEN = "open"
    RESOLVED = "resolved"


class EscalationOutcome(models.TextChoices):
    UPHELD = "upheld"
    DISMISSED = "dismissed"
    PARTIALLY_UPHELD = "partially_upheld"


class CommerceSessionStatus(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"


class BacktestStatus(models.TextChoices):
    """A backtest is its own asynchronous Operation: the same statuses (docs/reference/execution.md, docs/reference/governance.md)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


DECISION_TERMINAL = DecisionStatus.FINALISED
ESCALATION_TERMINAL = EscalationStatus.RESOLVED
BACKTEST_TERMINAL = (BacktestStatus.SUCCEEDED, BacktestStatus.FAILED, BacktestStatus.CANCELLED)

# The Celery task that runs a backtest (registered by execution, which can also name the
# envelopes that cited each changed evaluation); made due through the outbox, by name.
BACKTEST_TASK = "agp.run_backtest"

# The Celery task that evaluates a policy evaluation's shadows after it was answered (docs/reference/governance.md),
# on the background queue; made due through the outbox, by name.
SHADOW_TASK = "agp.evaluate_shadows"

# The Celery task that tells a tenant's approval webhook that a decision waits for its people
# (decision/notifications.py); made due through the outbox, by name.
APPROVAL_NOTICE_TASK = "agp.notify_approval_waiting"
