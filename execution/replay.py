"""Replay (docs/reference/ledger.md): would this action be cleared today, and under another policy set?

``original`` is what the checks found when the envelope was accepted (stored with it);
``current`` re-runs all eleven checks on the inputs recorded at submission against today's
state (the envelope's own reservation or payment counting as its own, exactly as at
execution time). ``changed_checks`` names every check whose outcome differs.

With a ``policy_set_id``, the action is evaluated under that (candidate) policy set: the
input recorded by the action's policy evaluation, with ``input.action`` the envelope's own
action (tool, operation, parameters), whatever the evaluation was made for, through the
engine under its time and memory limits. A what-if before a new policy version is put in
force. Nothing is written. A set other than the one the action's evaluation used needs
``WHAT_IF_SCOPE``: the caller picks the ruleset that runs, which is what a policy author
does, not a reader of executions.
"""

from typing import Any

from agp_project import errors
from agp_project.canonical import action_document, content_hash
from core.engine import evaluate
from decision.models import PolicyEvaluation
from decision.services import policy_evaluation_input
from registry.models import PolicySet

from .checks import envelope_recheck
from .models import ActionEnvelope

WHAT_IF_SCOPE = "agp.policy.write"


def _verdict(checks: list[dict[str, Any]]) -> str:
    return "cleared" if checks and all(item["passed"] for item in checks) else "rejected"


def replay_action(*, action_id: str, policy_set_id: str | None = None, any_policy_set: bool = False) -> dict[str, Any]:
    """The replay report of one accepted action; NotFound for an action never accepted.

    ``any_policy_set``: the caller holds ``WHAT_IF_SCOPE``; without it a what-if under a set
    other than the one the action's evaluation used is a 403.
    """
    envelope = ActionEnvelope.objects.filter(action_id=action_id).first()
    if envelope is None:
        raise errors.NotFound(f"No accepted action with id {action_id!r}.")
    candidate = None
    if policy_set_id is not None:
        if not any_policy_set:
            cited = (PolicyEvaluation.objects.filter(evaluation_id=envelope.policy_decision_ref)
                     .values_list("policy_set_id", flat=True).first())
            if policy_set_id != cited:
                raise errors.InsufficientScope(
                    [WHAT_IF_SCOPE], message=f"A what-if under a policy set other than the one the action's "
                                             f"evaluation used ({cited!r}) needs the scope {WHAT_IF_SCOPE}.")
        candidate = PolicySet.objects.filter(policy_set_id=policy_set_id).first()
        if candidate is None:
            raise errors.invalid_fields({"policy_set_id": [f"No policy set with id {policy_set_id!r}."]})

    original = [dict(item) for item in envelope.checks]
    current = envelope_recheck(envelope=envelope).results
    before = {item["check"]: item["passed"] for item in original}
    changed = [item["check"] for item in current if before.get(item["check"]) != item["passed"]]
    report = {
        "action_id": envelope.action_id,
        "original": {"verdict": _verdict(original), "checks": original},
        "current": {"verdict": _verdict(current), "checks": current},
        "matches": _verdict(original) == _verdict(current),
        "changed_checks": changed,
    }
    if candidate is not None:
        report["what_if"] = _what_if(envelope=envelope, policy_set=candidate)
    return report


def _what_if(*, envelope: ActionEnvelope, policy_set: PolicySet) -> dict[str, Any]:
    evaluation = PolicyEvaluation.objects.filter(evaluation_id=envelope.policy_decision_ref).first()
    if evaluation is None:
        # The recorded evaluation is gone (it cannot be: PROTECT); fail closed all the same.
        recorded_input, original_result = {}, {"allow": False, "require_approval": False,
                                               "reasons": ["the recorded policy evaluation no longer exists"]}
    else:
        recorded_input, original_result = evaluation.input, evaluation.result
    what_if_input = policy_evaluation_input(input=recorded_input, action=action_document(
        tool_id=envelope.tool_id, operation=envelope.operation, parameters=envelope.parameters))
    result = evaluate(ruleset=policy_set.ruleset, ruleset_hash=policy_set.ruleset_hash, input=what_if_input).as_result()
    return {
        "policy_set_id": policy_set.policy_set_id,
        "policy_set_status": policy_set.status,
        "ruleset_hash": policy_set.ruleset_hash,
        "input_hash": content_hash(what_if_input),
        "result": result,
        "original_result": original_result,
        "matches": bool(result.get("allow")) == bool(original_result.get("allow")),
    }
