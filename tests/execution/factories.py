"""A complete governance world, built with the ORM, in which an action envelope passes all ten checks.

``make_world(action_class="read", risk_level="low", ...)`` creates (each with ids unique to
the world, so several worlds coexist in one test):

- ``task`` (open) for ``root_principal`` and ``agent_id``;
- ``root_delegation`` (root principal -> ``orchestrator_id``, scope ``[f"{tool_id}:*"]``, spend limit
  1000 USD) and ``delegation`` (orchestrator -> agent, scope ``[f"{tool_id}:{operation}"]``, spend
  limit 500 USD), with materialised paths as registry/models.py describes;
- ``capability`` (agent, child delegation, tool, [operation], parameter ranges) and ``skill``
  (agent, tool, ``connector`` "noop" by default);
- ``policy_set`` (active, a real Rego ruleset) and ``evaluation`` (allowed; ``require_approval``
  as asked; the Rego really evaluates to that result for the recorded ``input``);
- ``decision`` (approve, finalised), ``assessment`` (when rule 5 applies, or when asked),
  ``approval`` (approved, unexpired);
- for ``transact`` (or ``commerce=True``): ``session`` (open commerce session, 200 USD) and
  ``binding`` (active liability binding); ``None`` otherwise.

``world.envelope_request(**overrides)`` returns a request body for ``POST /agp/action-envelopes``
that passes every check (``parameters`` set to an amount within range for transact).

Its keyword arguments are typed and listed in its signature: a misspelt one is a TypeError.
"""

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agp_project.canonical import action_document, content_hash
from agp_project.ids import new_id
from decision.models import Approval, CommerceSession, Decision, Escalation, ImpactAssessment, PolicyEvaluation
from execution.checks import EnvelopeInputs
from execution.services import envelope_inputs
from registry.models import Capability, Delegation, LiabilityBinding, PolicySet, Revocation, Skill, Task

# docs/reference/execution.md's checks and docs/reference/governance.md's freeze, in the order a report lists them.
THE_CHECKS = ["task", "delegation", "capability", "decision", "policy_evaluation", "impact_assessment", "approval",
                   "escalation", "commerce", "created_at", "freeze"]

RULESET = """package agp.test

import rego.v1

default allow := false

default require_approval := false

allow if input.action_class in {"read", "write", "communicate", "transact", "delete", "admin"}

require_approval if input.require_approval == true

deny contains "amount over 1000" if input.amount > 1000
"""

# A candidate ruleset that denies every transact action (for replay what-if tests).
DENY_TRANSACT_RULESET = """package agp.candidate

import rego.v1

default allow := false

allow if input.action_class != "transact"

deny contains "transact actions are suspended" if input.action_class == "transact"
"""

RULE5_RISK = ("high", "critical")
RULE5_CLASSES = ("transact", "delete", "admin")


def ruleset_hash(ruleset: str) -> str:
    return "sha256:" + hashlib.sha256(ruleset.encode("utf-8")).hexdigest()


def _iso(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _path_segment(pk: int) -> str:
    return f"{pk:012d}/"


def make_delegation(*, root_principal: str, delegator: str, delegate: str, scope: list[str],
                    parent: Delegation | None = None, spend: tuple[str, Decimal] | None = None,
                    expires_at=None, max_hops: int = 3) -> Delegation:
    """One delegation link with its materialised path (registry/models.py)."""
    now = timezone.now()
    delegation = Delegation.objects.create(
        delegation_id=new_id("dlg"), parent=parent, root_principal=root_principal, delegator_agent=delegator,
        delegate_agent=delegate, authority_scope=scope,
        spend_currency=spend[0] if spend else None, spend_amount=spend[1] if spend else None,
        max_hops_remaining=max_hops, depth=(parent.depth + 1) if parent else 0,
        accepted_at=now, expires_at=expires_at or now + timedelta(days=1), created_at=now)
    delegation.path = (parent.path if parent else "") + _path_segment(delegation.pk)
    delegation.save(update_fields=["path"])
    return delegation


def make_policy_set(*, ruleset: str = RULESET, status: str = "active", **fields) -> PolicySet:
    now = timezone.now()
    values = {"policy_set_id": new_id("ps"), "name": "test policies", "version": "1.0.0",
              "ruleset": ruleset, "ruleset_hash": ruleset_hash(ruleset), "created_at": now,
              "effective_from": now}
    values.update(fields)
    policy_set = PolicySet(**values)
    policy_set.save()
    if status != "active":
        # status is an FSM-protected field: set it with a plain UPDATE, as a fixture may.
        PolicySet.objects.filter(pk=policy_set.pk).update(status=status)
        policy_set = PolicySet.objects.get(pk=policy_set.pk)
    return policy_set


@dataclass
class World:
    root_principal: str
    agent_id: str
    orchestrator_id: str
    tool_id: str
    operation: str
    task: Task
    root_delegation: Delegation
    delegation: Delegation
    capability: Capability
    skill: Skill
    policy_set: PolicySet
    evaluation: PolicyEvaluation
    decision: Decision
    assessment: ImpactAssessment | None
    approval: Approval | None
    session: CommerceSession | None
    binding: LiabilityBinding | None
    parameters: dict[str, Any] = field(default_factory=dict)

    def envelope_request(self, **overrides) -> dict[str, Any]:
        """A request body that passes all ten checks; keys in ``overrides`` replace (None removes)."""
        body = {
            "type": "ActionEnvelope",
            "action_id": new_id("act"),
            "task_id": self.task.task_id,
            "agent_id": self.agent_id,
            "tool_id": self.tool_id,
            "operation": self.operation,
            "capability_token_ref": self.capability.capability_id,
            "decision_ref": self.decision.decision_id,
            "policy_decision_ref": self.evaluation.evaluation_id,
            "created_at": _iso(timezone.now()),
            "parameters": dict(self.parameters),
        }
        for key, value in overrides.items():
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
        return body

    def evaluation_bound_to(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` citing a new policy evaluation, like the world's, made for exactly its
        action (docs/reference/governance.md): for tests that vary the envelope's action to test another check.

        When ``body`` cites the world's decision, it cites instead a twin of it made on the new
        evaluation, with twins of the decision's assessments, approvals and escalations as they
        are now: a decision is about the action of the evaluation it was made on (check 4).
        """
        action = action_document(tool_id=body["tool_id"], operation=body["operation"],
                                 parameters=body.get("parameters"))
        evaluation = _twin(PolicyEvaluation.objects.get(pk=self.evaluation.pk), "evaluation_id", "pe",
                           action=action, action_hash=content_hash(action))
        body = {**body, "policy_decision_ref": evaluation.evaluation_id}
        if body.get("decision_ref") != self.decision.decision_id:
            return body
        decision = _twin(Decision.objects.get(pk=self.decision.pk), "decision_id", "dec", policy_evaluation=evaluation)
        for model, id_field, prefix in ((ImpactAssessment, "assessment_id", "ia"), (Approval, "approval_id", "apr"),
                                        (Escalation, "escalation_id", "esc")):
            for row in model.objects.filter(decision=self.decision).order_by("pk"):
                _twin(row, id_field, prefix, decision=decision)
        return {**body, "decision_ref": decision.decision_id}

    def bound_request(self, **overrides) -> dict[str, Any]:
        """``envelope_request(**overrides)`` citing an evaluation made for its action."""
        return self.evaluation_bound_to(self.envelope_request(**overrides))

    def refresh(self) -> "World":
        """Reload every record from the database."""
        for name in ("task", "root_delegation", "delegation", "capability", "skill", "policy_set", "evaluation",
                     "decision", "assessment", "approval", "session", "binding"):
            record = getattr(self, name)
            if record is not None:
                record.refresh_from_db()
        return self


def _twin(row, id_field: str, prefix: str, **changes):
    """A copy of ``row`` under a new id, with ``changes``, inserted as it is (statuses included)."""
    row.pk = None
    setattr(row, id_field, new_id(prefix))
    for name, value in changes.items():
        setattr(row, name, value)
    row.save(force_insert=True)
    return row


def make_world(action_class: str = "read", risk_level: str = "low", *, root_principal: str | None = None,
               agent_id: str | None = None, tool_id: str = "crm", operation: str = "update", currency: str = "USD",
               root_spend_limit: Decimal | None = Decimal("1000"), spend_limit: Decimal | None = Decimal("500"),
               allowed_parameter_ranges: dict | None = None, parameters: dict | None = None,
               connector: str = "noop", endpoint_url: str = "", executor_client_id: str = "",
               require_approval: bool = False, impact_assessment: bool | None = None, recommendation: str = "proceed",
               approval: bool = True, commerce: bool | None = None, amount_limit: Decimal = Decimal("200")) -> World:
    """Build a complete governance world in which ``world.envelope_request()`` passes every check.

    ``root_principal`` and ``agent_id`` default to fresh names; a spend limit of None leaves the
    delegation without one; ``impact_assessment`` and ``commerce`` default to what the action
    class and risk need (rule 5; a transact's session and liability binding).
    """
    now = timezone.now()
    later = now + timedelta(days=1)
    suffix = new_id("w")[2:].lower()
    root_principal = root_principal or f"principal-{suffix}"
    agent_id = agent_id or f"agent-{suffix}"
    orchestrator_id = f"orchestrator-{suffix}"
    transact = action_class == "transact"

    task = Task.objects.create(task_id=new_id("task"), root_principal=root_principal, agent_id=agent_id,
                               title="test task", risk_level=risk_level, action_class=action_class,
                               status="open", created_at=now)

    root_spend = root_spend_limit
    child_spend = spend_limit
    root_delegation = make_delegation(
        root_principal=root_principal, delegator=root_principal, delegate=orchestrator_id,
        scope=[f"{tool_id}:*"], spend=(currency, root_spend) if root_spend is not None else None)
    delegation = make_delegation(
        root_principal=root_principal, delegator=orchestrator_id, delegate=agent_id,
        scope=[f"{tool_id}:{operation}"], parent=root_delegation, max_hops=2,
        spend=(currency, child_spend) if child_spend is not None else None)

    if transact:
        default_ranges = {"amount": {"min": 0, "max": 100}, "currency": {"enum": [currency]}}
        default_parameters = {"amount": 50, "currency": currency}
    else:
        default_ranges = {"limit": {"min": 1, "max": 100}}
        default_parameters = {"limit": 10}
    capability = Capability.objects.create(
        capability_id=new_id("cap"), agent_id=agent_id, delegation=delegation, tool_id=tool_id,
        operations=[operation], allowed_parameter_ranges=default_ranges if allowed_parameter_ranges is None else allowed_parameter_ranges,
        expires_at=later, status="active", created_at=now)
    skill = Skill.objects.create(
        skill_id=new_id("skl"), agent_id=agent_id, name=f"{tool_id} connector", version="1",
        tool_id=tool_id, connector=connector,
        endpoint_url=endpoint_url, executor_client_id=executor_client_id,
        status="active", created_at=now)

    policy_set = make_policy_set()
    parameters = default_parameters if parameters is None else parameters
    policy_input = {"task_id": task.task_id, "agent_id": agent_id, "tool_id": tool_id, "operation": operation,
                    "action_class": action_class, "risk_level": risk_level, "require_approval": require_approval,
                    "amount": parameters.get("amount", 0)}
    action = action_document(tool_id=tool_id, operation=operation, parameters=parameters)
    evaluation = PolicyEvaluation.objects.create(
        evaluation_id=new_id("pe"), policy_set=policy_set, task=task, agent_id=agent_id, input=policy_input,
        input_hash=content_hash(policy_input), action=action, action_hash=content_hash(action),
        ruleset_hash=policy_set.ruleset_hash,
        result={"allow": True, "require_approval": require_approval, "reasons": []},
        allowed=True, require_approval=require_approval, warnings=[], evaluated_at=now, created_at=now)
    decision = Decision(decision_id=new_id("dec"), task=task, agent_id=agent_id, outcome="approve",
                        rationale="within policy", policy_evaluation=evaluation, created_at=now)
    decision.save()

    rule5 = risk_level in RULE5_RISK and action_class in RULE5_CLASSES
    assessment = None
    if rule5 if impact_assessment is None else impact_assessment:
        assessment = ImpactAssessment.objects.create(
            assessment_id=new_id("ia"), task=task, decision=decision, agent_id=f"assessor-{suffix}",
            time_horizons=[{"horizon": "immediate", "consequences": ["funds move"], "severity": "minor",
                            "reversible": True}],
            recommendation=recommendation, assessed_at=now, created_at=now)
    # Finalise after the assessment exists (rule 5 ordering); status is FSM-protected.
    Decision.objects.filter(pk=decision.pk).update(status="finalised", finalised_at=now)
    decision.refresh_from_db()

    approved = None
    if approval:
        approved = Approval.objects.create(
            approval_id=new_id("apr"), decision=decision, approver=f"approver-{suffix}", verdict="approved",
            approver_kind="human", approver_client=f"approver-client-{suffix}",
            conditions=["log every call"], expires_at=later, created_at=now)


    session = binding = None
    if transact if commerce is None else commerce:
        session = CommerceSession.objects.create(
            session_id=new_id("cs"), task=task, agent_id=agent_id, delegation=delegation, merchant="acme",
            currency=currency, amount_limit=amount_limit,
            status="open", expires_at=later, created_at=now)
        binding = LiabilityBinding.objects.create(
            binding_id=new_id("lb"), root_principal=root_principal, agent_id=agent_id,
            liable_party=root_principal, coverage_currency=currency, coverage_amount=Decimal("10000"),
            expires_at=later, status="active", created_at=now)

    return World(root_principal=root_principal, agent_id=agent_id, orchestrator_id=orchestrator_id,
                 tool_id=tool_id, operation=operation, task=task, root_delegation=root_delegation,
                 delegation=delegation, capability=capability, skill=skill, policy_set=policy_set,
                 evaluation=evaluation, decision=decision, assessment=assessment, approval=approved,
                 session=session, binding=binding, parameters=dict(parameters))


def make_full_world(*, require_approval: bool = True, **options) -> World:
    """The world where every one of the ten checks has something to check: a critical transact
    (``options`` as for ``make_world``)."""
    return make_world(action_class="transact", risk_level="critical", require_approval=require_approval, **options)


def make_noise(world: World, n: int) -> None:
    """Grow every table the checks read by ``n`` rows of records that must not change the verdict.

    Rows share the world's root principal, agent, task and decision where that makes them
    candidates the queries must filter out (other agents' delegations in the same tree,
    resolved escalations, rejected-then-superseded approvals of other decisions, sessions of
    other agents under the same delegation tree, revocations of other targets).
    """
    now = timezone.now()
    later = now + timedelta(days=1)
    tag = new_id("n")[2:].lower()
    tasks = Task.objects.bulk_create([
        Task(task_id=f"noise-task-{tag}-{i}", root_principal=world.root_principal, agent_id=f"other-{tag}-{i}",
             risk_level="low", action_class="read", created_at=now) for i in range(n)])
    Delegation.objects.bulk_create([
        Delegation(delegation_id=f"noise-dlg-{tag}-{i}", parent=world.root_delegation,
                   root_principal=world.root_principal, delegator_agent=world.orchestrator_id,
                   delegate_agent=f"other-{tag}-{i}", authority_scope=[f"{world.tool_id}:read"],
                   spend_currency="USD", spend_amount=Decimal("1"), max_hops_remaining=0, depth=1,
                   path="", accepted_at=now, expires_at=later, created_at=now) for i in range(n)])
    noise_delegations = list(Delegation.objects.filter(delegation_id__startswith=f"noise-dlg-{tag}-"))
    for delegation in noise_delegations:
        delegation.path = world.root_delegation.path + _path_segment(delegation.pk)
    Delegation.objects.bulk_update(noise_delegations, ["path"], batch_size=500)
    Capability.objects.bulk_create([
        Capability(capability_id=f"noise-cap-{tag}-{i}", agent_id=f"other-{tag}-{i}",
                   delegation_id=f"noise-dlg-{tag}-{i}", tool_id=world.tool_id, operations=["read"],
                   expires_at=later, created_at=now) for i in range(n)])
    Skill.objects.bulk_create([
        Skill(skill_id=f"noise-skl-{tag}-{i}", agent_id=f"other-{tag}-{i}", name="noise", tool_id=world.tool_id,
              created_at=now) for i in range(n)])
    LiabilityBinding.objects.bulk_create([
        LiabilityBinding(binding_id=f"noise-lb-{tag}-{i}", root_principal=world.root_principal,
                         agent_id=f"other-{tag}-{i}", liable_party="x", expires_at=later, created_at=now)
        for i in range(n)])
    Revocation.objects.bulk_create([
        Revocation(revocation_id=f"noise-rev-{tag}-{i}", target_type="capability",
                   target_id=f"noise-cap-{tag}-{i}", revoked_at=now, created_at=now) for i in range(n)])
    evaluations = PolicyEvaluation.objects.bulk_create([
        PolicyEvaluation(evaluation_id=f"noise-pe-{tag}-{i}", policy_set=world.policy_set, task=tasks[i],
                         agent_id=f"other-{tag}-{i}", input={}, input_hash="x", ruleset_hash="x",
                         result={"allow": False}, evaluated_at=now, created_at=now) for i in range(n)])
    decisions = Decision.objects.bulk_create([
        Decision(decision_id=f"noise-dec-{tag}-{i}", task=tasks[i], agent_id=f"other-{tag}-{i}", outcome="deny",
                 policy_evaluation=evaluations[i], created_at=now) for i in range(n)])
    ImpactAssessment.objects.bulk_create([
        ImpactAssessment(assessment_id=f"noise-ia-{tag}-{i}", task=world.task if i % 2 else tasks[i],
                         decision=decisions[i], agent_id="x", recommendation="do_not_proceed",
                         assessed_at=now, created_at=now) for i in range(n)])
    Approval.objects.bulk_create([
        Approval(approval_id=f"noise-apr-{tag}-{i}", decision=decisions[i], approver="x", verdict="rejected",
                 created_at=now) for i in range(n)])
    Escalation.objects.bulk_create([
        Escalation(escalation_id=f"noise-esc-{tag}-{i}", task=world.task, decision=world.decision,
                   action_id=f"noise-act-{i}", reason="noise", status="resolved", outcome="dismissed",
                   resolved_at=now, created_at=now) for i in range(n)])
    CommerceSession.objects.bulk_create([
        CommerceSession(session_id=f"noise-cs-{tag}-{i}", task=tasks[i], agent_id=f"other-{tag}-{i}",
                        delegation_id=f"noise-dlg-{tag}-{i}", currency="USD", amount_limit=Decimal("1"),
                        created_at=now) for i in range(n)])


def make_mcp_world(endpoint_url: str, *, operation: str = "lookup_customer", **options) -> World:
    """``make_world`` whose agent executes ``tool_id`` on the MCP server at ``endpoint_url``.

    The mcp skill is registered through the registry service, so its tools are really
    listed and pinned (the server must be reachable, and on 127.0.0.1 the caller allows
    private URLs); it supersedes the world's noop skill.
    """
    from registry.services import skill_create

    world = make_world(operation=operation, **options)
    world.skill = skill_create(actor="test", agent_id=world.agent_id, name=f"{world.tool_id} over MCP", version="2",
                               tool_id=world.tool_id, connector="mcp", endpoint_url=endpoint_url,
                               supersedes=world.skill.skill_id)
    return world


# The Rego of a task's policy set for actions made in one call (execution/one_call.py): it reads
# the documented input, {"action", "task", "agent_id"}.
ONE_CALL_RULESET = """package agp.one_call

import rego.v1

default allow := false

allow if input.task.action_class in {"read", "write", "transact"}

require_approval if {
    input.action.parameters.limit > 50
    input.action.parameters.limit <= 90
}

deny contains "limit over 90" if input.action.parameters.limit > 90
"""


def governed_by_policy(world: World, *, ruleset: str = ONE_CALL_RULESET) -> World:
    """``world`` whose task names a policy set of ``ruleset``, so that a call without a decision
    is governed by it; ``world.one_call_request()`` is such a call."""
    world.policy_set = make_policy_set(ruleset=ruleset)
    Task.objects.filter(pk=world.task.pk).update(policy_set=world.policy_set)
    world.task.refresh_from_db()
    return world


def one_call_request(world: World, **overrides) -> dict[str, Any]:
    """An envelope request without decision_ref and policy_decision_ref: the task's policy set decides."""
    return world.envelope_request(**{"decision_ref": None, "policy_decision_ref": None, **overrides})


def check_inputs(world: World, **overrides) -> EnvelopeInputs:
    """The world's envelope with ``overrides``, as the checks take it; its evaluation is made for the
    resulting action unless the test is about the action (the evaluation's binding is check 5's own test)."""
    body = world.bound_request(**overrides) if "parameters" in overrides else world.envelope_request(**overrides)
    body.pop("type")
    body["created_at"] = parse_datetime(body["created_at"])
    return envelope_inputs(validated=body)


def failed_checks(report) -> list[str]:
    """The names of the checks ``report`` failed, in order."""
    return [item["check"] for item in report.failed]
