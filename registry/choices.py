from django.db import models


class RiskLevel(models.TextChoices):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class ActionClass(models.TextChoices):
    READ = "read"
    WRITE = "write"
    COMMUNICATE = "communicate"
    TRANSACT = "transact"
    DELETE = "delete"
    ADMIN = "admin"


class TaskStatus(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"


class ActiveStatus(models.TextChoices):
    ACTIVE = "active"
    REVOKED = "revoked"


class SkillStatus(models.TextChoices):
    ACTIVE = "active"
    # Replaced by a newer version of the skill (``supersedes``): no longer executes anything.
    SUPERSEDED = "superseded"
    REVOKED = "revoked"


class PolicySetStatus(models.TextChoices):
    ACTIVE = "active"
    DEPRECATED = "deprecated"
    REVOKED = "revoked"


class Connector(models.TextChoices):
    NOOP = "noop"
    HTTP = "http"
    EXTERNAL = "external"
    MCP = "mcp"


class RevocationTarget(models.TextChoices):
    DELEGATION = "delegation"
    CAPABILITY = "capability"
    AGENT = "agent"
    SKILL = "skill"
    LIABILITY_BINDING = "liability_binding"


class RegulatoryFramework(models.TextChoices):
    EU_AI_ACT_2024 = "EU_AI_ACT_2024"
    GDPR = "GDPR"
    NIST_AI_RMF = "NIST_AI_RMF"
    ISO_IEC_42001 = "ISO_IEC_42001"


class AttestationLevel(models.TextChoices):
    UNVERIFIED = "unverified"
    SELF_ATTESTED = "self_attested"
    THIRD_PARTY = "third_party"
    CERTIFIED = "certified"


class FreezeTarget(models.TextChoices):
    AGENT = "agent"
    ROOT_PRINCIPAL = "root_principal"
    TOOL = "tool"
    ALL = "all"


class FreezeStatus(models.TextChoices):
    ACTIVE = "active"
    LIFTED = "lifted"


# Terminal states, named once.
POLICY_SET_TERMINAL = PolicySetStatus.REVOKED
FREEZE_TERMINAL = FreezeStatus.LIFTED

# The Celery task (registered by execution, the app that owns operations) that cancels the
# operations a new freeze stops; the registry makes it due through the outbox, by name.
FREEZE_TASK = "agp.enforce_freeze"
