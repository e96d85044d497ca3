"""Policy sets (docs/reference/governance.md): compiled, tested, signed; moved forward only."""

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, can_proceed

from agp_project import errors
from agp_project.canonical import bytes_hash
from agp_project.ids import new_id
from agp_project.signing import sign_resource
from core import engine
from core.ledger import ledger_append

from ..choices import PolicySetStatus
from ..documents import policy_set_document
from ..models import PolicySet
from .common import insert_new, record_timestamp, require_future


def _policy_set_sign(policy_set: PolicySet) -> None:
    """(Re-)sign the policy set as rendered: issued on creation and on every status change."""
    policy_set.signature = None
    policy_set.signature = sign_resource(policy_set_document(policy_set))


def _policy_tests_run(*, ruleset: str, ruleset_hash: str, tests: list[dict[str, Any]]) -> dict[str, int]:
    """Run a set's tests; their summary, or 422 naming every failure."""
    failures = []
    for test in tests:
        expected = dict(test["expect"])
        outcome = engine.evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash, input=test["input"])
        deny = [reason for reason in outcome.reasons if reason not in outcome.errors]
        actual = {"allow": outcome.allow, "require_approval": outcome.require_approval, "deny": deny}
        if outcome.errors:
            actual["errors"] = list(outcome.errors)
        # The engine stopped this test at its time or memory limit: each of the others could
        # cost as much, so a set of 500 such tests must not hold a request for minutes.
        stopped = any(error.startswith(engine.LIMIT_STOPPED) for error in outcome.errors)
        if stopped or (expected["allow"] != outcome.allow
                       or ("require_approval" in expected and expected["require_approval"] != outcome.require_approval)
                       or ("deny" in expected and sorted(expected["deny"]) != sorted(deny))):
            failures.append({"name": test["name"], "expected": expected, "actual": actual})
        if stopped:
            break
    if failures:
        raise errors.PolicyTestFailed(
            f"{len(failures)} of {len(tests)} policy tests failed: {', '.join(f['name'] for f in failures)}.",
            details={"failures": failures})
    return {"passed": len(tests), "failed": 0}


def policy_set_create(
    *,
    actor: str,
    name: str,
    version: str,
    ruleset: str,
    ruleset_hash: str | None = None,
    policy_set_id: str | None = None,
    publisher: str = "",
    regulatory_frameworks: list[str] | None = None,
    jurisdictions: list[str] | None = None,
    ruleset_engine: str = "opa",
    ruleset_engine_version: str = "",
    ruleset_uri: str = "",
    attestation_level: str | None = None,
    certifying_body: str = "",
    status: str = PolicySetStatus.ACTIVE,
    effective_from: datetime | None = None,
    expires_at: datetime | None = None,
    supersedes: str | None = None,
    shadow_of_id: str | None = None,
    tests: list[dict[str, Any]] | None = None,
    created_at: datetime | None = None,
    root_principal: str | None = None,
) -> PolicySet:
    """Store a Rego ruleset with its verified hash, ``active`` and signed (docs/reference/governance.md).

    The ruleset must compile (OPA 1.0 syntax) and define ``allow`` (else 400, the engine's
    message in ``details.ruleset``), and pass its own ``tests`` (else 422
    ``AGP_POLICY_TEST_FAILED``): nothing is stored otherwise.

    ``shadow_of_id`` (the API's ``shadow_of``, docs/reference/governance.md) makes it a shadow of an existing set that
    is not revoked and not itself a shadow (one level: a shadow of a shadow would never be
    evaluated); anything else is a 400.

    ``root_principal``: the tenant whose set it is; None for a set every tenant may use.
    """
    now = timezone.now()
    computed = bytes_hash(ruleset.encode("utf-8"))
    if ruleset_hash is not None and ruleset_hash != computed:
        raise errors.invalid_fields({"ruleset_hash": [f"Does not match the ruleset: its hash is {computed}."]})
    problem = engine.ruleset_problem(ruleset=ruleset)
    if problem is not None:
        # docs/reference/governance.md names the engine's message details.ruleset; docs/reference/api.md's field errors name it too.
        raise errors.InvalidRequest("The ruleset cannot be registered.",
                                    details={"ruleset": problem, "fields": {"ruleset": [problem]}})
    tests = [dict(test) for test in tests or []]
    test_summary = _policy_tests_run(ruleset=ruleset, ruleset_hash=computed, tests=tests) if tests else None
    require_future(expires_at, field="expires_at", now=now)
    if effective_from is not None and expires_at is not None and expires_at <= effective_from:
        raise errors.invalid_fields({"expires_at": ["Must be later than effective_from."]})
    created_at = record_timestamp(created_at, field="created_at", now=now)
    policy_set_id = policy_set_id or new_id("pol")
    if supersedes is not None:
        if supersedes == policy_set_id:
            raise errors.invalid_fields({"supersedes": ["A policy set cannot supersede itself."]})
        if not PolicySet.objects.filter(policy_set_id=supersedes).exists():
            raise errors.invalid_fields({"supersedes": [f"No policy set with id {supersedes!r}."]})
    if shadow_of_id is not None:
        _refuse_to_shadow(PolicySet.objects.filter(policy_set_id=shadow_of_id).first(), shadow_of_id=shadow_of_id,
                          policy_set_id=policy_set_id)

    policy_set = PolicySet(
        policy_set_id=policy_set_id, name=name, version=version, publisher=publisher,
        regulatory_frameworks=list(regulatory_frameworks or []), jurisdictions=list(jurisdictions or []),
        ruleset=ruleset, ruleset_hash=computed, ruleset_engine=ruleset_engine,
        ruleset_engine_version=ruleset_engine_version, ruleset_uri=ruleset_uri,
        certifying_body=certifying_body, status=status, effective_from=effective_from, expires_at=expires_at,
        supersedes=supersedes, shadow_of_id=shadow_of_id, tests=tests, test_summary=test_summary,
        created_at=created_at, created_by=actor, root_principal=root_principal,
        **({"attestation_level": attestation_level} if attestation_level else {}))
    _policy_set_sign(policy_set)
    with transaction.atomic():
        insert_new(policy_set, id_field="policy_set_id", type_name="policy set")
        ledger_append(event_type="policy_set.created", resource_type="PolicySet",
                      resource_id=policy_set.policy_set_id, actor=actor, root_principal=root_principal,
                      payload={"ruleset_hash": computed, "name": name, "version": version,
                               "supersedes": supersedes, "shadow_of": shadow_of_id})
    return policy_set


def _refuse_to_shadow(shadowed: PolicySet | None, *, shadow_of_id: str, policy_set_id: str) -> None:
    if shadow_of_id == policy_set_id:
        raise errors.invalid_fields({"shadow_of": ["A policy set cannot shadow itself."]})
    if shadowed is None:
        raise errors.invalid_fields({"shadow_of": [f"No policy set with id {shadow_of_id!r}."]})
    if shadowed.shadow_of_id is not None:
        raise errors.invalid_fields({"shadow_of": [
            f"Policy set {shadow_of_id!r} is itself a shadow (of {shadowed.shadow_of_id!r}); shadow that one."]})
    if shadowed.status == PolicySetStatus.REVOKED:
        raise errors.invalid_fields({"shadow_of": [
            f"Policy set {shadow_of_id!r} is revoked: nothing evaluates it any more."]})


_POLICY_SET_MOVES = {PolicySetStatus.DEPRECATED: "deprecate", PolicySetStatus.REVOKED: "revoke"}


def _allowed_targets(policy_set: PolicySet) -> list[str]:
    return sorted(str(t.target) for t in policy_set.get_available_status_transitions())


def policy_set_transition(*, actor: str, policy_set_id: str, status: str) -> PolicySet:
    """Move a policy set forward (``active`` -> ``deprecated`` -> ``revoked``) and re-sign it.

    Any other move, including to the current state, is 409 ``AGP_INVALID_TRANSITION``
    with ``details`` ``from``, ``to`` and ``allowed``; an unknown id is 404.
    """
    with transaction.atomic():
        # The row lock queues concurrent PATCHes: the second one reads the state the first
        # committed and is refused, instead of both passing the FSM check on a stale read.
        policy_set = PolicySet.objects.select_for_update().filter(policy_set_id=policy_set_id).first()
        if policy_set is None:
            raise errors.NotFound(f"No policy set with id {policy_set_id!r}.")
        source = policy_set.status
        move = getattr(policy_set, _POLICY_SET_MOVES.get(status, ""), None)
        if move is None or not can_proceed(move):
            raise errors.InvalidTransition(from_state=source, to_state=status, allowed=_allowed_targets(policy_set))
        move()
        _policy_set_sign(policy_set)
        try:
            policy_set.save()
        except ConcurrentTransition:
            # Backstop where row locks do not exist: ConcurrentTransitionMixin's UPDATE
            # matched no row still in ``source``, so another writer moved it first.
            raise errors.InvalidTransition(from_state=source, to_state=status, allowed=[]) from None
        ledger_append(event_type=f"policy_set.{status}", resource_type="PolicySet",
                      resource_id=policy_set.policy_set_id, actor=actor, root_principal=policy_set.root_principal,
                      payload={"from": source,
 "to": status, "ruleset_hash": policy_set.ruleset_hash})
    return policy_set
