"""Policy evaluations (docs/reference/governance.md): the Rego engine's verdict, with its shadows'.

An evaluation is answered with its own verdict only. Its set's active shadows are evaluated
after the commit, on a worker (``agp.evaluate_shadows``, on the background queue): a slow
shadow costs the live evaluation nothing (docs/decisions/operator-controls.md). Until then
its ``shadow_results`` name each shadow with ``allow`` and ``matches`` null.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from agp_project import errors
from agp_project.canonical import action_document
from agp_project.exactjson import changed_as_double, decimal_text
from agp_project.ids import new_id
from agp_project.timeutil import iso
from core import engine
from core.engine import EvaluationResult
from core.ledger import ledger_append
from core.outbox import outbox_enqueue
from registry.choices import PolicySetStatus
from registry.models import PolicySet, Task
from registry.selectors import freezes_matching
from registry.services import refuse_frozen

from ..choices import SHADOW_TASK
from ..models import PolicyEvaluation
from .common import failed_check, hash_of, record_created_at, unique_id

# A shadow's verdict until the worker records it.
PENDING = {"allow": None, "matches": None}
SHADOW_ACTOR = "agp-worker"


def _policy_set_warnings(policy_set: PolicySet, now: datetime) -> list[str]:
    warnings = []
    if policy_set.status == PolicySetStatus.DEPRECATED:
        warnings.append(f"Policy set {policy_set.policy_set_id!r} is deprecated.")
    if policy_set.effective_from and policy_set.effective_from > now:
        warnings.append(f"Policy set {policy_set.policy_set_id!r} is not effective until "
                        f"{iso(policy_set.effective_from)}.")
    if policy_set.expires_at and policy_set.expires_at <= now:
        warnings.append(f"Policy set {policy_set.policy_set_id!r} expired at {iso(policy_set.expires_at)}.")
    return warnings


def policy_evaluation_input(*, input: dict[str, Any], action: dict[str, Any] | None) -> dict[str, Any]:
    """The Rego ``input``: the client's input with ``input.action`` set to the action evaluated."""
    return {**input, "action": action} if action is not None else input


def _refuse_numbers_the_engine_changes(rego_input: dict[str, Any]) -> None:
    """400 for a number the engine would not compare as written. regorus reads numbers as
    IEEE doubles: ``100.0000000000000000001 > 100`` would be false there, and a deny rule
    would let the action through. Refused under OPA too, so an evaluation means the same
    under both engines (docs/decisions/exact-json.md)."""
    changed = changed_as_double(rego_input)
    if changed is None:
        return
    path, number = changed
    text = decimal_text(number)
    field = path if path.split(".", 1)[0] == "action" else f"input.{path}"
    raise errors.invalid_fields({field: [
        f"{text} cannot be compared exactly by the policy engine, which reads numbers as IEEE 754 doubles "
        f"({float(number)!r}). Send at most 15 significant digits, an integer within 2^53, or a string."]})


def policy_evaluation_create(*, actor: str, policy_set_id: str, task_id: str, agent_id: str,
                             input: dict[str, Any], action: dict[str, Any] | None = None,
                             evaluation_id: str | None = None, created_at: datetime | None = None) -> PolicyEvaluation:
    """Evaluate the policy set's Rego ruleset for ``input`` and ``action``, and record the result.

    ``action`` (``{"tool_id", "operation", "parameters"}``) is what the evaluation may later
    clear: an envelope cites it only for exactly that action (docs/reference/governance.md); the ruleset
    reads it as ``input.action``. An evaluation without one clears no envelope.

    A revoked set is refused (422); a deprecated, expired or not yet effective one is
    evaluated with a warning. The engine never raises: a ruleset that fails to compile or
    to evaluate is recorded as ``allow: false`` with the error among the reasons. An
    active freeze of the agent or of the task's root principal refuses it (409
    ``AGP_FROZEN``, docs/reference/governance.md); whether one exists is read with the task, in the same query.

    The set is read once, before the engine runs. A revocation that commits while the
    evaluation runs may be ordered before it in the ledger; the evaluation still clears
    nothing, since check 5 of an envelope refuses an evaluation whose set is revoked.
    """
    chosen_id = evaluation_id is not None
    evaluation_id = evaluation_id or new_id("pev")
    if action is not None:
        if "action" in input:
            raise errors.invalid_fields({"input": [
                "input.action is set by the service from the request's action: send one or the other."]})
        action = action_document(**action)
    _refuse_numbers_the_engine_changes(policy_evaluation_input(input=input, action=action))
    sets = policy_sets_with_shadows(policy_set_id)
    policy_set = next((candidate for candidate in sets if candidate.policy_set_id == policy_set_id), None)
    missing = {}
    if policy_set is None:
        missing["policy_set_id"] = [f"No policy set with id {policy_set_id!r}."]
    task = (Task.objects.filter(task_id=task_id)
            .annotate(frozen=Exists(freezes_matching(agent_id=agent_id, root_principal=OuterRef("root_principal"))))
            .values("root_principal", "frozen").first())
    if task is None:
        missing["task_id"] = [f"No task with id {task_id!r}."]
    elif policy_set is not None and policy_set.root_principal not in (None, task["root_principal"]):
        # Another tenant's set: as if it did not exist (docs/reference/identity.md).
        missing["policy_set_id"] = [f"No policy set with id {policy_set_id!r}."]
    if missing:
        raise errors.invalid_fields(missing)
    if task["frozen"]:
        refuse_frozen(acting="a policy evaluation", agent_id=agent_id, root_principal=task["root_principal"])
    if policy_set.status == PolicySetStatus.REVOKED:
        raise errors.PrerequisiteFailed(
            f"Policy set {policy_set_id!r} is revoked: it cannot be referenced in new policy evaluations.",
            details={"failed_checks": [failed_check("policy_set_not_revoked", f"policy set {policy_set_id!r} is revoked")]})
    now = timezone.now()
    created_at = record_created_at(created_at, now)  # may refuse (400): before the block without a savepoint
    evaluated = policy_evaluate(sets=sets, policy_set=policy_set, input=input, action=action, now=now)
    # A savepoint only for a client-chosen id, which may collide (409 in a transaction that
    # goes on to store the answer under its Idempotency-Key); a fresh id cannot. Nothing else
    # in the block may refuse: without a savepoint, a refusal would doom that transaction.
    with unique_id("policy evaluation", "evaluation_id", evaluation_id), transaction.atomic(savepoint=chosen_id):
        return policy_evaluation_record(evaluated, evaluation_id=evaluation_id, task_id=task_id, agent_id=agent_id,
                                        root_principal=task["root_principal"], actor=actor, created_at=created_at)


@dataclass(frozen=True)
class Evaluated:
    """A policy set's verdict on an input, not recorded yet (``policy_evaluation_record`` records it)."""

    policy_set: PolicySet
    input: dict[str, Any]
    input_hash: str
    action: dict[str, Any] | None
    action_hash: str
    outcome: EvaluationResult
    shadow_results: dict[str, dict[str, bool | None]]  # each shadow pending until the worker records it
    evaluated_at: datetime

    @property
    def allowed(self) -> bool:
        return self.outcome.allow


def policy_sets_with_shadows(policy_set_id: str) -> list[PolicySet]:
    """The set and its active shadows (docs/reference/governance.md), in one query."""
    return list(PolicySet.objects.filter(Q(policy_set_id=policy_set_id)
                                         | Q(shadow_of_id=policy_set_id, status=PolicySetStatus.ACTIVE))
                .order_by("policy_set_id"))


def policy_evaluate(*, sets: Sequence[PolicySet], policy_set: PolicySet, input: dict[str, Any],
                    action: dict[str, Any] | None, now: datetime) -> Evaluated:
    """Run the engine for ``input`` and ``action`` under ``policy_set``; its shadows among ``sets``
    are named, pending, for the worker to evaluate after the commit. Nothing is written. A
    number the engine would not compare exactly is a 400."""
    rego_input = policy_evaluation_input(input=input, action=action)
    _refuse_numbers_the_engine_changes(rego_input)
    input_hash = hash_of(input, "input")
    evaluated_action_hash = hash_of(action, "action") if action is not None else ""
    outcome = engine.evaluate(ruleset=policy_set.ruleset, ruleset_hash=policy_set.ruleset_hash, input=rego_input)
    shadow_results = {shadow.policy_set_id: dict(PENDING) for shadow in sets if shadow is not policy_set}
    return Evaluated(policy_set=policy_set, input=input, input_hash=input_hash, action=action,
                     action_hash=evaluated_action_hash, outcome=outcome, shadow_results=shadow_results,
                     evaluated_at=now)


def policy_evaluation_record(evaluated: Evaluated, *, evaluation_id: str, task_id: str, agent_id: str,
                             root_principal: str, actor: str, created_at: datetime) -> PolicyEvaluation:
    """Write the evaluation and its ledger event, in the caller's transaction."""
    policy_set, outcome = evaluated.policy_set, evaluated.outcome
    result = outcome.as_result()
    payload = {"policy_set_id": policy_set.policy_set_id, "task_id": task_id, "agent_id": agent_id,
               "ruleset_hash": policy_set.ruleset_hash, "input_hash": evaluated.input_hash,
               "action_hash": evaluated.action_hash or None, "result": result, "engine": outcome.engine}
    if evaluated.shadow_results:
        payload["shadows"] = list(evaluated.shadow_results)
    evaluation = PolicyEvaluation.objects.create(
        evaluation_id=evaluation_id, policy_set=policy_set, task_id=task_id, agent_id=agent_id,
        input=evaluated.input, input_hash=evaluated.input_hash, action=evaluated.action,
        action_hash=evaluated.action_hash, ruleset_hash=policy_set.ruleset_hash, result=result,
        allowed=outcome.allow, require_approval=outcome.require_approval,
        warnings=_policy_set_warnings(policy_set, evaluated.evaluated_at),
        shadow_results=evaluated.shadow_results, evaluated_at=evaluated.evaluated_at, created_at=created_at,
        created_by=actor)
    ledger_append(event_type="policy_evaluation.created", resource_type="PolicyEvaluation",
                  resource_id=evaluation_id, actor=actor, root_principal=root_principal, payload=payload)
    if evaluated.shadow_results:
        outbox_enqueue(task_name=SHADOW_TASK, args=[evaluation_id])
    return evaluation


def policy_evaluation_shadows_record(*, evaluation_id: str) -> int:
    """Evaluate the shadows an evaluation is still waiting for, and record what each decided (docs/reference/governance.md).

    The body of ``agp.evaluate_shadows``. Each shadow goes through the same engine call as
    any evaluation, under its limits (``AGP_POLICY_TIMEOUT_MS``, ``AGP_POLICY_MEMORY_MB``):
    that is a shadow's time budget, spent on a worker, never by the live evaluation. A
    shadow that fails or is stopped records ``allow: false``, as any evaluation would, and
    the ledger event ``policy_evaluation.shadowed`` keeps each shadow's reasons (a stop at a
    limit says so). Idempotent: a shadow already recorded is not evaluated again, so a
    repeated message records nothing. Returns how many shadows it recorded.
    """
    row = (PolicyEvaluation.objects.filter(evaluation_id=evaluation_id)
           .values("input", "action", "allowed", "shadow_results", "task__root_principal").first())
    if row is None:
        return 0
    waiting = [shadow_id for shadow_id, shadow in row["shadow_results"].items() if shadow["allow"] is None]
    rego_input = policy_evaluation_input(input=row["input"], action=row["action"])
    outcomes = {shadow.policy_set_id: engine.evaluate(ruleset=shadow.ruleset, ruleset_hash=shadow.ruleset_hash,
                                                      input=rego_input)
                for shadow in PolicySet.objects.filter(policy_set_id__in=waiting).order_by("policy_set_id")}
    if not outcomes:
        return 0
    with transaction.atomic():
        # Locked: two deliveries of the message record each shadow once.
        evaluation = PolicyEvaluation.objects.select_for_update().get(evaluation_id=evaluation_id)
        recorded = {}
        for shadow_id, outcome in outcomes.items():
            if evaluation.shadow_results.get(shadow_id, {}).get("allow") is not None:
                continue
            evaluation.shadow_results[shadow_id] = {"allow": outcome.allow, "matches": outcome.allow == row["allowed"]}
            recorded[shadow_id] = {**evaluation.shadow_results[shadow_id], "reasons": list(outcome.reasons)}
        if not recorded:
            return 0
        evaluation.save(update_fields=["shadow_results"])
        ledger_append(event_type="policy_evaluation.shadowed", resource_type="PolicyEvaluation",
                      resource_id=evaluation_id, actor=SHADOW_ACTOR, root_principal=row["task__root_principal"],
                      payload={"shadow_results": recorded})
    return len(recorded)
