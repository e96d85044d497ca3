"""Registry records: who may act for whom, with which tools, under which rules."""

from django.db import models
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from core.fields import ExactJSONField

from .choices import (
    ActionClass,
    ActiveStatus,
    AttestationLevel,
    Connector,
    FreezeStatus,
    FreezeTarget,
    PolicySetStatus,
    RevocationTarget,
    RiskLevel,
    SkillStatus,
    TaskStatus,
)


class Task(ConcurrentTransitionMixin, models.Model):
    """A unit of work; ``status`` only moves ``open`` -> ``closed`` (PATCH /agp/tasks/{id})."""

    task_id = models.CharField(max_length=128, unique=True)
    root_principal = models.CharField(max_length=128, db_index=True)
    agent_id = models.CharField(max_length=128, db_index=True)
    title = models.CharField(max_length=512, blank=True, default="")
    risk_level = models.CharField(max_length=16, choices=RiskLevel.choices, default=RiskLevel.LOW)
    action_class = models.CharField(max_length=16, choices=ActionClass.choices, default=ActionClass.READ)
    status = FSMField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.OPEN, db_index=True,
                      protected=True)
    # The policy set that governs the task's actions made in one call (an envelope without a
    # decision, a tool call through the MCP gateway): docs/reference/gateway.md.
    policy_set = models.ForeignKey("PolicySet", null=True, blank=True, on_delete=models.PROTECT,
                                   to_field="policy_set_id", db_column="policy_set_id", related_name="tasks")
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    def __str__(self):
        return self.task_id

    @transition(field=status, source=TaskStatus.OPEN, target=TaskStatus.CLOSED)
    def close(self):
        """open -> closed: no new envelope passes check 1 for it."""


PATH_SEGMENT_WIDTH = 12


def path_segment(pk: int) -> str:
    return f"{pk:0{PATH_SEGMENT_WIDTH}d}/"


def path_pks(path: str) -> list[int]:
    """The primary keys a materialised ``path`` lists, from the root of the tree down."""
    return [int(segment) for segment in path.split("/") if segment]


class Delegation(models.Model):
    """One link of a delegation chain (docs/reference/governance.md).

    ``path`` is the materialised path of primary keys from the root to this link
    (``"000000000001/000000000007/"``): the chain of any link is one indexed query, and
    every descendant of a link is ``path__startswith=link.path``.

    ``status`` is ``revoked`` when this link, an ancestor, or one of their agents was
    revoked (the revocation service cascades it). Whether a link is *usable* is still
    derived from the whole chain at read time (``registry.selectors``), so an expired
    ancestor or a revoked agent stops it even before any cascade ran.
    """

    delegation_id = models.CharField(max_length=128, unique=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children",
                               to_field="delegation_id", db_column="parent_delegation_id")
    root_principal = models.CharField(max_length=128)
    delegator_agent = models.CharField(max_length=128)
    delegate_agent = models.CharField(max_length=128)
    authority_scope = ExactJSONField(default=list)
    spend_currency = models.CharField(max_length=3, null=True, blank=True)
    spend_amount = models.DecimalField(max_digits=18, decimal_places=4, null=True, blank=True)
    max_hops_remaining = models.PositiveIntegerField()
    depth = models.PositiveSmallIntegerField(default=0)
    path = models.CharField(max_length=2048, db_index=True, blank=True, default="")
    accepted_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    signature = ExactJSONField(default=dict)
    # The delegator's public key (a JWK) that verified its signature in ``signature_chain``; {}: unsigned.
    delegator_key = ExactJSONField(default=dict, blank=True)
    signature_chain = ExactJSONField(default=list)
    status = models.CharField(max_length=16, choices=ActiveStatus.choices, default=ActiveStatus.ACTIVE)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    class Meta:
        indexes = [
            # Parent discovery: the delegator's own inbound delegations in one tree.
            models.Index(fields=["delegate_agent", "root_principal", "status"], name="delegation_parent_lookup"),
            # Agent revocation: every link the agent granted.
            models.Index(fields=["delegator_agent", "status"], name="delegation_delegator"),
        ]

    def __str__(self):
        return self.delegation_id

    @property
    def chain_pks(self) -> list[int]:
        """Primary keys from the root of the tree down to this link (from ``path``)."""
        return path_pks(self.path)

    @property
    def root_pk(self) -> int:
        return self.chain_pks[0]

    @property
    def spend_limit(self) -> dict | None:
        if self.spend_currency is None or self.spend_amount is None:
            return None
        return {"currency": self.spend_currency, "amount": self.spend_amount}

    @property
    def constraints(self) -> dict:
        """The populated ``constraints`` object: no ``spend_limit`` means no spending authority."""
        constraints = {"max_hops_remaining": self.max_hops_remaining}
        if self.spend_limit is not None:
            constraints = {"spend_limit": self.spend_limit, **constraints}
        return constraints


class PolicySet(ConcurrentTransitionMixin, models.Model):
    """A versioned Rego ruleset whose status only moves forward (docs/reference/governance.md)."""

    policy_set_id = models.CharField(max_length=128, unique=True)
    name = models.CharField(max_length=256)
    version = models.CharField(max_length=64)
    publisher = models.CharField(max_length=256, blank=True, default="")
    regulatory_frameworks = ExactJSONField(default=list, blank=True)
    jurisdictions = ExactJSONField(default=list, blank=True)
    ruleset = models.TextField()
    ruleset_hash = models.CharField(max_length=71)
    ruleset_engine = models.CharField(max_length=16, default="opa")
    ruleset_engine_version = models.CharField(max_length=64, blank=True, default="")
    ruleset_uri = models.URLField(max_length=1024, blank=True, default="")
    attestation_level = models.CharField(max_length=32, choices=AttestationLevel.choices,
                                         default=AttestationLevel.UNVERIFIED)
    certifying_body = models.CharField(max_length=256, blank=True, default="")
    status = FSMField(max_length=16, choices=PolicySetStatus.choices, default=PolicySetStatus.ACTIVE, protected=True)
    effective_from = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    supersedes = models.CharField(max_length=128, null=True, blank=True)
    # The set's own tests (``{"name", "input", "expect"}``), run before it was stored, and their
    # summary; both covered by the signature (docs/reference/governance.md).
    tests = ExactJSONField(default=list, blank=True)
    test_summary = ExactJSONField(null=True, blank=True)
    # docs/reference/governance.md: a shadow is evaluated beside every evaluation of the set it shadows, while it is
    # active; it never decides anything and no envelope may cite an evaluation of it.
    shadow_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="shadows",
                                  to_field="policy_set_id", db_column="shadow_of")
    signature = ExactJSONField(default=dict)
    # The tenant (root principal) it belongs to; null: of no tenant (a shared set, made by an operator, that every tenant may use).
    root_principal = models.CharField(max_length=128, null=True, blank=True, db_index=True)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    def __str__(self):
        return f"{self.policy_set_id} ({self.name} {self.version})"

    @transition(field=status, source=PolicySetStatus.ACTIVE, target=PolicySetStatus.DEPRECATED)
    def deprecate(self):
        """active -> deprecated: still evaluable, with a warning."""

    @transition(field=status, source=PolicySetStatus.DEPRECATED, target=PolicySetStatus.REVOKED)
    def revoke(self):
        """deprecated -> revoked: no new evaluation may cite it."""


class Capability(models.Model):
    capability_id = models.CharField(max_length=128, unique=True)
    agent_id = models.CharField(max_length=128, db_index=True)
    delegation = models.ForeignKey(Delegation, on_delete=models.PROTECT, related_name="capabilities",
                                   to_field="delegation_id", db_column="delegation_id")
    tool_id = models.CharField(max_length=128)
    operations = ExactJSONField(default=list)
    allowed_parameter_ranges = ExactJSONField(default=dict, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=ActiveStatus.choices, default=ActiveStatus.ACTIVE)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    class Meta:
        verbose_name_plural = "capabilities"

    def __str__(self):
        return self.capability_id


class Skill(models.Model):
    """The connector that executes an agent's tool; an ``mcp`` skill pins the server's tools (docs/reference/governance.md)."""

    skill_id = models.CharField(max_length=128, unique=True)
    agent_id = models.CharField(max_length=128)
    name = models.CharField(max_length=256)
    version = models.CharField(max_length=64, blank=True, default="")
    tool_id = models.CharField(max_length=128)
    connector = models.CharField(max_length=16, choices=Connector.choices, default=Connector.NOOP)
    endpoint_url = models.URLField(max_length=1024, blank=True, default="")
    # external: the API client whose receipts complete this skill's operations; empty means
    # the client that submitted the envelope (execution/runner.py, receipt_submit).
    executor_client_id = models.CharField(max_length=128, blank=True, default="")
    # [{"name", "definition_hash", "definition"}] sorted by name: what registration listed
    # (registry/tool_pins.py).
    tool_pins = ExactJSONField(default=list, blank=True)
    supersedes = models.CharField(max_length=128, null=True, blank=True)
    status = models.CharField(max_length=16, choices=SkillStatus.choices, default=SkillStatus.ACTIVE)
    # The tenant (root principal) it belongs to; null: of no tenant (registered by an operator for the agent wherever it acts).
    root_principal = models.CharField(max_length=128, null=True, blank=True, db_index=True)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    class Meta:
        indexes = [models.Index(fields=["agent_id", "tool_id", "status"], name="skill_agent_tool")]

    def __str__(self):
        return self.skill_id


class LiabilityBinding(models.Model):
    binding_id = models.CharField(max_length=128, unique=True)
    root_principal = models.CharField(max_length=128)
    agent_id = models.CharField(max_length=128, db_index=True)
    liable_party = models.CharField(max_length=256)
    coverage_currency = models.CharField(max_length=3, null=True, blank=True)
    coverage_amount = models.DecimalField(max_digits=18, decimal_places=4, null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=ActiveStatus.choices, default=ActiveStatus.ACTIVE)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    def __str__(self):
        return self.binding_id

    @property
    def coverage(self) -> dict | None:
        if self.coverage_currency is None or self.coverage_amount is None:
            return None
        return {"currency": self.coverage_currency, "amount": self.coverage_amount}


class Revocation(models.Model):
    """An immediate, irreversible, cascading revocation (docs/reference/ledger.md)."""

    revocation_id = models.CharField(max_length=128, unique=True)
    target_type = models.CharField(max_length=32, choices=RevocationTarget.choices)
    target_id = models.CharField(max_length=128)
    reason = models.TextField(blank=True, default="")
    revoked_by = models.CharField(max_length=128, blank=True, default="")
    revoked_at = models.DateTimeField()
    # The tenant (root principal) it belongs to; null: of no tenant (an operator's revocation of what spans tenants).
    root_principal = models.CharField(max_length=128, null=True, blank=True, db_index=True)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    class Meta:
        constraints = [
            # A target is revoked directly at most once: revoking is irreversible, so a
            # second revocation has nothing to do (409, see docs/decisions/registry.md).
            models.UniqueConstraint(fields=["target_type", "target_id"], name="revocation_target_once"),
        ]

    def __str__(self):
        return f"{self.target_type}:{self.target_id}"


class Freeze(ConcurrentTransitionMixin, models.Model):
    """An operator's emergency stop (docs/reference/governance.md): while ``active``, nothing of the agent, root
    principal or tool it names (everything, for ``all``) acts; ``lifted`` is final.

    Unlike a revocation it changes no other record: every place that must stop asks
    whether an active freeze matches (``registry.selectors.freezes_matching``), so lifting
    it restores exactly what it stopped, except the operations it cancelled.
    """

    freeze_id = models.CharField(max_length=128, unique=True)
    target_type = models.CharField(max_length=16, choices=FreezeTarget.choices)
    # Empty for ``all``.
    target_id = models.CharField(max_length=128, blank=True, default="")
    reason = models.TextField()
    frozen_by = models.CharField(max_length=128)
    status = FSMField(max_length=16, choices=FreezeStatus.choices, default=FreezeStatus.ACTIVE, protected=True)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.CharField(max_length=128, blank=True, default="")
    # The tenant (root principal) it belongs to; null: of no tenant (an operator's freeze, which stops its target in every tenant).
    root_principal = models.CharField(max_length=128, null=True, blank=True, db_index=True)
    signature = ExactJSONField(default=dict)
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=128, blank=True, default="")  # the API client that made it

    class Meta:
        indexes = [
            # Every envelope check asks for the active freezes of its agent, principal and tool:
            # a small partial index, however many freezes were ever lifted.
            models.Index(fields=["target_type", "target_id"], condition=models.Q(status=FreezeStatus.ACTIVE),
                         name="freeze_active_target"),
        ]

    def __str__(self):
        return f"{self.freeze_id} ({self.target_type}{':' + self.target_id if self.target_id else ''})"

    @transition(field=status, source=FreezeStatus.ACTIVE, target=FreezeStatus.LIFTED)
    def lift(self):
        """active -> lifted: matching work may act again; what the freeze cancelled stays cancelled."""
