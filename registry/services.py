"""Writes of registry records (CONTRACT C5, C6, C9, C11).

Each public function owns its transaction, appends a ledger event for every record it
changes inside that transaction, and raises ``agp_project.errors`` on every refusal.

Locking, in one fixed order so that no two writers wait on each other in a cycle:

1. agent locks (PostgreSQL transaction-scoped advisory locks, one per agent id, taken in
   sorted order): creating anything for an agent and revoking that agent queue on them;
2. tree-root locks (``SELECT ... FOR UPDATE`` on the root row of a delegation tree, in
   primary-key order): creating a link or capability under a tree and revoking any link
   of that tree queue on them;
3. the row itself, where one is changed (policy sets, capabilities, skills, bindings);
4. the ledger head, always last (``ledger_append`` is called after every other write).

On SQLite, ``transaction_mode=IMMEDIATE`` gives every write transaction the database
lock at BEGIN, which serialises all writers, so the explicit locks are no-ops there.
"""

import hashlib
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Model, Q
from django.utils import timezone
from django_fsm import ConcurrentTransition, can_proceed

from agp_project import errors, mcp_client
from agp_project.canonical import bytes_hash
from agp_project.ids import new_id
from agp_project.mcp_client import MCPFailure
from agp_project.net import url_guard_registration
from agp_project.signing import sign_resource
from agp_project.timeutil import not_in_future
from core import engine
from core.ledger import ledger_append
from core.outbox import outbox_enqueue

from . import selectors
from .choices import (
    FREEZE_TASK,
    ActiveStatus,
    Connector,
    FreezeStatus,
    FreezeTarget,
    PolicySetStatus,
    RevocationTarget,
    SkillStatus,
    TaskStatus,
)
from .documents import delegation_document, delegation_link_payload, freeze_document, policy_set_document
from .models import (
    Capability,
    Delegation,
    Freeze,
    LiabilityBinding,
    PolicySet,
    Revocation,
    Skill,
    Task,
    path_pks,
    path_segment,
)
from .scopes import scope_covers, tool_scope
from .tool_pins import tool_pins_from_listing


# --- shared helpers -----------------------------------------------------------------------
def _lock_agents(agent_ids: Iterable[str]) -> None:
    """Serialise, per agent, the creation of records for it against its revocation.

    Without it, a revocation of agent X and a concurrent delegation to X could each miss
    the other (the revocation's cascade cannot see the uncommitted link, the link's check
    cannot see the uncommitted revocation): both would commit and an active link to a
    revoked agent would be listed. Read-time validation would still refuse to use it;
    the lock keeps the stored ``status`` truthful too.
    """
    if connection.vendor != "postgresql":
        return
    keys = sorted({int.from_bytes(hashlib.sha256(f"agp-agent:{a}".encode()).digest()[:8], "big", signed=True)
                   for a in agent_ids})
    # One statement. Keys are sorted, and every statement with as many keys has the same
    # shape, so whatever order PostgreSQL evaluates its select list in, two transactions
    # take the keys they share in the same order: no cycle of waits.
    if keys:
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(["pg_advisory_xact_lock(%s)"] * len(keys)), keys)


def _lock_tree_roots(root_pks: Iterable[int]) -> None:
    """Lock the root rows of delegation trees (creation and revocation within a tree queue here).

    A link created under a parent while an ancestor is being revoked would otherwise
    commit unseen by the revocation's cascade. Holding the root lock, the creator reads
    the chain after the revoker committed (and refuses), or the revoker's cascade query
    runs after the creator committed (and marks the new link revoked).

    ``FOR NO KEY UPDATE``: it excludes every other tree lock, but not the ``FOR KEY SHARE``
    a foreign-key check takes on the root link. Those checks run at commit (Django's keys
    are deferred), after the writer took the ledger head: with ``FOR UPDATE``, a writer
    holding the root and waiting for the head, and one holding the head and checking a
    reference to the root, would wait for each other.
    """
    pks = sorted(set(root_pks))
    if pks:
        list(Delegation.objects.select_for_update(no_key=True).filter(pk__in=pks).order_by("pk")
             .values_list("pk", flat=True))


def _refuse_revoked_agents(agent_ids: Iterable[str]) -> None:
    revoked = selectors.agents_revoked(agent_ids=agent_ids)
    if revoked:
        raise errors.Conflict(f"Agent revoked: {', '.join(sorted(revoked))}.",
                              details={"revoked_agents": sorted(revoked)})


def refuse_frozen(*, acting: str, agent_id: str | None = None, root_principal: str | None = None,
                  tool_id: str | None = None) -> None:
    """409 ``AGP_FROZEN`` when an active freeze stops the agent, the root principal or the tool (C13).

    One query. ``acting`` says what was refused ("a delegation", "a policy evaluation").
    Not serialised against a freeze being created at the same instant: what such a record
    would let through, the envelope checks still stop (docs/decisions/operator-controls.md).
    """
    freezes = list(selectors.freezes_matching(agent_id=agent_id, root_principal=root_principal, tool_id=tool_id))
    if freezes:
        raise errors.Frozen(f"Refused {acting}: {selectors.freeze_targets_text(freezes)} is active.",
                            details={"freezes": selectors.freeze_summaries(freezes)})


def _timestamp(value: datetime | None, *, field: str, now: datetime) -> datetime:
    """A client-given record timestamp (default now); more than a minute ahead is a 400."""
    return now if value is None else not_in_future(value, field=field, now=now)


def _future(value: datetime | None, *, field: str, now: datetime) -> None:
    if value is not None and value <= now:
        raise errors.invalid_fields({field: ["Must be in the future."]})


def _insert(instance: Model, *, id_field: str, type_name: str) -> None:
    """Insert ``instance``; a duplicate public id is a 409 ``AGP_CONFLICT``.

    No savepoint of its own (two statements fewer): the refusal leaves the enclosing atomic
    block (a savepoint when nested), which rolls back. A caller that goes on querying
    after a refusal wraps the call in a ``transaction.atomic()`` of its own.
    """
    try:
        instance.save(force_insert=True)
    except IntegrityError:
        raise errors.duplicate_id(type_name, id_field, getattr(instance, id_field)) from None


def _money(value: dict[str, Any] | None) -> tuple[str | None, Decimal | None]:
    if value is None:
        return None, None
    return value["currency"], Decimal(value["amount"])


# --- delegations --------------------------------------------------------------------------
def delegation_create(
    *,
    actor: str,
    root_principal: str,
    delegator_agent: str,
    delegate_agent: str,
    authority_scope: list[str],
    constraints: dict[str, Any] | None = None,
    expires_at: datetime | None = None,
    accepted_at: datetime | None = None,
    created_at: datetime | None = None,
    delegation_id: str | None = None,
) -> Delegation:
    """Record one delegation link under the parent the server finds (CONTRACT C5).

    ``constraints`` may hold ``spend_limit`` (``{"currency", "amount"}``) and
    ``max_hops_remaining``. Refusals, checked in this order: 400 (delegate equals
    delegator, ``expires_at`` not in the future, root without ``expires_at``); 409
    ``AGP_DELEGATION_SCOPE_VIOLATION`` when no usable parent covers the scope; 409
    ``AGP_CONFLICT`` when the delegate (or a root's principal) is a revoked agent; 409
    ``AGP_DELEGATION_SCOPE_VIOLATION`` for a cycle; 409 ``AGP_DELEGATION_HOP_LIMIT``;
    409 ``AGP_DELEGATION_SCOPE_VIOLATION`` for spend, then expiry. Before any of the 409s:
    409 ``AGP_FROZEN`` when the delegator or the root principal is frozen (C13).
    """
    now = timezone.now()
    constraints = constraints or {}
    requested_hops = constraints.get("max_hops_remaining")
    requested_spend = constraints.get("spend_limit")
    if delegate_agent == delegator_agent:
        raise errors.invalid_fields({"delegate_agent": ["Must differ from delegator_agent."]})
    _future(expires_at, field="expires_at", now=now)
    accepted_at = _timestamp(accepted_at, field="accepted_at", now=now)
    created_at = _timestamp(created_at, field="created_at", now=now)
    is_root = delegator_agent == root_principal
    if is_root and expires_at is None:
        raise errors.invalid_fields({"expires_at": ["Required for a root delegation."]})
    refuse_frozen(acting="a delegation", agent_id=delegator_agent, root_principal=root_principal)

    with transaction.atomic():
        _lock_agents([delegator_agent, delegate_agent])
        if is_root:
            parent, chain = None, []
            _refuse_revoked_agents([root_principal, delegate_agent])
            hops = settings.AGP_DEFAULT_MAX_HOPS if requested_hops is None else requested_hops
            spend_currency, spend_amount = _money(requested_spend)
        else:
            parent, chain = _delegation_parent(root_principal=root_principal, delegator_agent=delegator_agent,
                                               authority_scope=authority_scope, now=now)
            _refuse_revoked_agents([delegate_agent])
            _delegation_check_cycle(chain=chain, root_principal=root_principal, delegate_agent=delegate_agent)
            hops = _delegation_hops(parent=parent, requested=requested_hops)
            spend_currency, spend_amount = _delegation_spend(parent=parent, requested=requested_spend)
            expires_at = _delegation_expiry(parent=parent, requested=expires_at)

        delegation = Delegation(
            delegation_id=delegation_id or new_id("dlg"), parent_id=parent.delegation_id if parent else None,
            root_principal=root_principal, delegator_agent=delegator_agent, delegate_agent=delegate_agent,
            authority_scope=list(authority_scope), spend_currency=spend_currency, spend_amount=spend_amount,
            max_hops_remaining=hops, depth=len(chain), accepted_at=accepted_at, expires_at=expires_at,
            signature_chain=list(parent.signature_chain) if parent else [], signature=None,
            status=ActiveStatus.ACTIVE, created_at=created_at)
        # The link's signature covers the rendered link with the parent's signature chain.
        delegation.signature = sign_resource(delegation_link_payload(
            delegation_document(delegation), includes_own_signature=False))
        delegation.signature_chain = [*delegation.signature_chain, delegation.signature["value"]]
        _insert(delegation, id_field="delegation_id", type_name="delegation")
        delegation.path = (parent.path if parent else "") + path_segment(delegation.pk)
        Delegation.objects.filter(pk=delegation.pk).update(path=delegation.path)
        ledger_append(event_type="delegation.created", resource_type="DelegationChain",
                      resource_id=delegation.delegation_id, actor=actor, payload={
                          "parent_delegation_id": delegation.parent_id, "root_principal": root_principal,
                          "delegator_agent": delegator_agent, "delegate_agent": delegate_agent,
                          "authority_scope": delegation.authority_scope,
                          "signature_value": delegation.signature["value"]})
    return delegation


def _delegation_parent(*, root_principal: str, delegator_agent: str, authority_scope: list[str],
                       now: datetime) -> tuple[Delegation, list[Delegation]]:
    """C5 parent discovery under the lock of the parent's tree root.

    The candidates come first (one query). When they all lie in one tree, as they do unless
    the delegator holds links in several of this principal's trees, its root is locked and
    the chains are read once, under the lock: a revocation that committed while we waited
    is seen by that read, so the parent chosen is the parent checked. Otherwise the parent
    is chosen first, only its tree is locked, and its chain is read again under the lock.
    """
    candidates = selectors.delegation_candidates(agent_id=delegator_agent, root_principal=root_principal,
                                                 scope=authority_scope, now=now)
    roots = {path_pks(path)[0] for _, path in candidates}
    one_tree = len(roots) == 1
    if one_tree:
        _lock_tree_roots(roots)
    found = selectors.delegation_usable_among(candidates=candidates, now=now)
    if found is None:
        raise errors.DelegationScopeViolation(
            f"{delegator_agent!r} holds no active delegation from {root_principal!r} covering the requested scope.",
            details={"delegator_agent": delegator_agent, "root_principal": root_principal,
                     "authority_scope": list(authority_scope)})
    if one_tree:
        return found
    parent, chain = found
    _lock_tree_roots([parent.root_pk])
    fresh = selectors.delegation_chain(delegation=parent)  # under the lock: a revocation that committed is seen
    problem = selectors.delegation_links_problem(links=fresh, now=now)
    if problem or len(fresh) != len(chain):
        raise errors.DelegationScopeViolation(
            f"The parent delegation {parent.delegation_id} stopped being usable: {problem or 'chain changed'}.",
            details={"parent_delegation_id": parent.delegation_id})
    return fresh[-1], fresh


def _delegation_check_cycle(*, chain: list[Delegation], root_principal: str, delegate_agent: str) -> None:
    above = {root_principal} | {link.delegator_agent for link in chain} | {link.delegate_agent for link in chain}
    if delegate_agent in above:
        raise errors.DelegationScopeViolation(
            f"{delegate_agent!r} already appears in the chain above: delegating to it would close a cycle.",
            details={"delegate_agent": delegate_agent, "cycle": True})


def _delegation_hops(*, parent: Delegation, requested: int | None) -> int:
    allowed = parent.max_hops_remaining - 1
    if allowed < 0:
        raise errors.DelegationHopLimit(
            f"The parent delegation {parent.delegation_id} permits no further sub-delegation.",
            details={"parent_delegation_id": parent.delegation_id, "parent_max_hops_remaining": 0})
    if requested is None:
        return allowed
    if requested > allowed:
        raise errors.DelegationHopLimit(
            f"max_hops_remaining may be at most {allowed} under {parent.delegation_id}.",
            details={"parent_delegation_id": parent.delegation_id, "max_allowed": allowed, "requested": requested})
    return requested


def _delegation_spend(*, parent: Delegation, requested: dict[str, Any] | None) -> tuple[str | None, Decimal | None]:
    if requested is None:
        return parent.spend_currency, parent.spend_amount
    currency, amount = _money(requested)
    if parent.spend_limit is None:
        raise errors.DelegationScopeViolation(
            f"The parent delegation {parent.delegation_id} grants no spending authority.",
            details={"parent_delegation_id": parent.delegation_id, "constraint": "spend_limit"})
    if currency != parent.spend_currency or amount > parent.spend_amount:
        raise errors.DelegationScopeViolation(
            f"spend_limit must be in {parent.spend_currency} and at most {parent.spend_amount}.",
            details={"parent_delegation_id": parent.delegation_id, "constraint": "spend_limit",
                     "max_allowed": {"currency": parent.spend_currency, "amount": str(parent.spend_amount)}})
    return currency, amount


def _delegation_expiry(*, parent: Delegation, requested: datetime | None) -> datetime:
    if requested is None:
        return parent.expires_at
    if requested > parent.expires_at:
        raise errors.DelegationScopeViolation(
            f"expires_at must not be later than the parent's ({parent.expires_at.isoformat()}).",
            details={"parent_delegation_id": parent.delegation_id, "constraint": "expires_at"})
    return requested


# --- policy sets --------------------------------------------------------------------------
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
) -> PolicySet:
    """Store a Rego ruleset with its verified hash, ``active`` and signed (CONTRACT C6, C12, C14).

    The ruleset must compile (OPA 1.0 syntax) and define ``allow`` (else 400, the engine's
    message in ``details.ruleset``), and pass its own ``tests`` (else 422
    ``AGP_POLICY_TEST_FAILED``): nothing is stored otherwise.

    ``shadow_of_id`` (the API's ``shadow_of``, C14) makes it a shadow of an existing set that
    is not revoked and not itself a shadow (one level: a shadow of a shadow would never be
    evaluated); anything else is a 400.
    """
    now = timezone.now()
    computed = bytes_hash(ruleset.encode("utf-8"))
    if ruleset_hash is not None and ruleset_hash != computed:
        raise errors.invalid_fields({"ruleset_hash": [f"Does not match the ruleset: its hash is {computed}."]})
    problem = engine.ruleset_problem(ruleset=ruleset)
    if problem is not None:
        raise errors.invalid_fields({"ruleset": [problem]}, "The ruleset cannot be registered.")
    tests = [dict(test) for test in tests or []]
    test_summary = _policy_tests_run(ruleset=ruleset, ruleset_hash=computed, tests=tests) if tests else None
    _future(expires_at, field="expires_at", now=now)
    if effective_from is not None and expires_at is not None and expires_at <= effective_from:
        raise errors.invalid_fields({"expires_at": ["Must be later than effective_from."]})
    created_at = _timestamp(created_at, field="created_at", now=now)
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
        created_at=created_at,
        **({"attestation_level": attestation_level} if attestation_level else {}))
    _policy_set_sign(policy_set)
    with transaction.atomic():
        _insert(policy_set, id_field="policy_set_id", type_name="policy set")
        ledger_append(event_type="policy_set.created", resource_type="PolicySet",
                      resource_id=policy_set.policy_set_id, actor=actor,
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
                      resource_id=policy_set.policy_set_id, actor=actor,
                      payload={"from": source, "to": status, "ruleset_hash": policy_set.ruleset_hash})
    return policy_set


# --- tasks --------------------------------------------------------------------------------
def task_create(*, actor: str, root_principal: str, agent_id: str, risk_level: str, action_class: str,
                title: str = "",
                status: str = TaskStatus.OPEN, task_id: str | None = None,
                created_at: datetime | None = None) -> Task:
    """Record a task an agent performs for a root principal (CONTRACT C7)."""
    now = timezone.now()
    task = Task(task_id=task_id or new_id("tsk"), root_principal=root_principal, agent_id=agent_id, title=title,
                risk_level=risk_level, action_class=action_class, status=status,
                created_at=_timestamp(created_at, field="created_at", now=now))
    with transaction.atomic():
        _insert(task, id_field="task_id", type_name="task")
        ledger_append(event_type="task.created", resource_type="Task", resource_id=task.task_id, actor=actor,
                      payload={"root_principal": root_principal, "agent_id": agent_id, "risk_level": risk_level,
                               "action_class": action_class, "status": status})
    return task


def task_transition(*, actor: str, task_id: str, status: str) -> Task:
    """Close a task (``open`` -> ``closed``, ledger ``task.closed``); check 1 then refuses it.

    Any other move, including to the current state, is 409 ``AGP_INVALID_TRANSITION``;
    an unknown id is 404.
    """
    with transaction.atomic():
        # The row lock queues concurrent PATCHes: the second reads the committed state.
        task = Task.objects.select_for_update().filter(task_id=task_id).first()
        if task is None:
            raise errors.NotFound(f"No task with id {task_id!r}.")
        source = task.status
        if status != TaskStatus.CLOSED or not can_proceed(task.close):
            raise errors.InvalidTransition(
                from_state=source, to_state=status,
                allowed=sorted(str(t.target) for t in task.get_available_status_transitions()))
        task.close()
        try:
            task.save(update_fields=["status"])
        except ConcurrentTransition:
            raise errors.InvalidTransition(from_state=source, to_state=status, allowed=[]) from None
        ledger_append(event_type="task.closed", resource_type="Task", resource_id=task.task_id, actor=actor,
                      payload={"from": source, "to": status})
    return task


# --- capabilities -------------------------------------------------------------------------
def capability_create(*, actor: str, agent_id: str, delegation_id: str, tool_id: str, operations: list[str],
                      allowed_parameter_ranges: dict[str, Any] | None = None, expires_at: datetime | None = None,
                      capability_id: str | None = None, created_at: datetime | None = None) -> Capability:
    """Grant ``agent_id`` the use of ``tool_id`` operations, derived from a delegation it holds.

    400 when the delegation does not exist or ``expires_at`` is not in the future; 409
    ``AGP_DELEGATION_SCOPE_VIOLATION`` when the delegation is not usable, is not held by
    ``agent_id``, does not cover every ``tool_id:operation``, or expires earlier.
    """
    now = timezone.now()
    _future(expires_at, field="expires_at", now=now)
    created_at = _timestamp(created_at, field="created_at", now=now)
    with transaction.atomic():
        _lock_agents([agent_id])
        delegation = selectors.delegation_get(delegation_id=delegation_id)
        if delegation is None:
            raise errors.invalid_fields({"delegation_id": [f"No delegation with id {delegation_id!r}."]})
        _lock_tree_roots([delegation.root_pk])
        chain = selectors.delegation_chain(delegation=delegation)  # re-read under the tree lock
        problem = selectors.delegation_links_problem(links=chain, now=now)
        delegation = chain[-1]
        if problem:
            raise errors.DelegationScopeViolation(f"The delegation is not usable: {problem}.",
                                                  details={"delegation_id": delegation_id})
        if agent_id != delegation.delegate_agent:
            raise errors.DelegationScopeViolation(
                f"{agent_id!r} is not the delegate of {delegation_id} ({delegation.delegate_agent!r}).",
                details={"delegation_id": delegation_id, "agent_id": agent_id})
        uncovered = [tool_scope(tool_id, op) for op in operations
                     if not scope_covers(delegation.authority_scope, tool_scope(tool_id, op))]
        if uncovered:
            raise errors.DelegationScopeViolation(
                f"The delegation's authority_scope does not cover {', '.join(uncovered)}.",
                details={"delegation_id": delegation_id, "uncovered_scopes": uncovered})
        if expires_at is None:
            expires_at = delegation.expires_at
        elif expires_at > delegation.expires_at:
            raise errors.DelegationScopeViolation(
                "expires_at must not be later than the delegation's.",
                details={"delegation_id": delegation_id, "constraint": "expires_at"})
        capability = Capability(
            capability_id=capability_id or new_id("cap"), agent_id=agent_id, delegation_id=delegation_id,
            tool_id=tool_id, operations=list(operations), allowed_parameter_ranges=allowed_parameter_ranges or {},
            expires_at=expires_at, status=ActiveStatus.ACTIVE, created_at=created_at)
        _insert(capability, id_field="capability_id", type_name="capability")
        ledger_append(event_type="capability.created", resource_type="Capability",
                      resource_id=capability.capability_id, actor=actor,
                      payload={"agent_id": agent_id, "delegation_id": delegation_id, "tool_id": tool_id,
                               "operations": capability.operations})
    return capability


# --- skills -------------------------------------------------------------------------------
def _mcp_tool_pins(endpoint_url: str) -> list[dict[str, str]]:
    """List the MCP server's tools and pin them; a refused, unreachable or unusable server is a 400."""
    try:
        listed = mcp_client.tools_list(endpoint_url, timeout=settings.AGP_CONNECTOR_TIMEOUT_SECONDS)
        return tool_pins_from_listing(listed)
    except MCPFailure as exc:
        raise errors.invalid_fields(
            {"endpoint_url": [f"The MCP server could not be pinned: {exc.reason}."]},
            message=f"The MCP server at endpoint_url could not be pinned: {exc.reason}.") from None


def _refuse_to_supersede(previous: Skill | None, *, supersedes: str, agent_id: str, tool_id: str) -> None:
    if previous is None:
        raise errors.invalid_fields({"supersedes": [f"No skill with id {supersedes!r}."]})
    if (previous.agent_id, previous.tool_id) != (agent_id, tool_id):
        raise errors.invalid_fields({"supersedes": [
            f"Skill {supersedes!r} is for agent {previous.agent_id!r} and tool {previous.tool_id!r}; a new version "
            f"keeps both."]})
    if previous.status != SkillStatus.ACTIVE:
        raise errors.Conflict(f"Skill {supersedes!r} is {previous.status}; only an active skill can be superseded.",
                              details={"supersedes": supersedes, "status": previous.status})


def skill_create(*, actor: str, agent_id: str, name: str, tool_id: str, version: str = "",
                 connector: str = Connector.NOOP, endpoint_url: str = "", supersedes: str | None = None,
                 skill_id: str | None = None, created_at: datetime | None = None,
                 executor_client_id: str | None = None) -> Skill:
    """Register the tool connector that executes ``tool_id`` for an agent.

    SSRF: an ``http`` endpoint on a forbidden address is refused here already (and checked
    again at every execution). An ``mcp`` endpoint is guarded the same way and then asked
    for its tools, which are pinned on the skill (C16); a server that cannot be listed is a
    400 naming the problem. The network call happens before the transaction opens.

    ``supersedes``: the active skill of the same agent and tool that this version replaces
    (how a reviewed change of an MCP server's tools is re-pinned). It moves to
    ``superseded`` in the same transaction, with its own ledger event; a skill that is no
    longer active (superseded by someone else meanwhile, or revoked) is a 409.
    """
    now = timezone.now()
    created_at = _timestamp(created_at, field="created_at", now=now)
    if connector in (Connector.HTTP, Connector.MCP) and not endpoint_url:
        raise errors.invalid_fields({"endpoint_url": [f"Required for the {connector} connector."]})
    if supersedes is not None:
        # Checked before the network call too: a wrong reference fails without reaching the server.
        _refuse_to_supersede(Skill.objects.filter(skill_id=supersedes).first(), supersedes=supersedes,
                                  agent_id=agent_id, tool_id=tool_id)
    tool_pins: list[dict[str, str]] = []
    if connector == Connector.HTTP:
        url_guard_registration(endpoint_url, field="endpoint_url")
    elif connector == Connector.MCP:
        tool_pins = _mcp_tool_pins(endpoint_url)
    skill = Skill(skill_id=skill_id or new_id("skl"), agent_id=agent_id, name=name, version=version,
                  tool_id=tool_id, connector=connector, endpoint_url=endpoint_url, tool_pins=tool_pins,
                  executor_client_id=executor_client_id or "", supersedes=supersedes, status=SkillStatus.ACTIVE,
                  created_at=created_at)
    with transaction.atomic():
        _lock_agents([agent_id])
        _refuse_revoked_agents([agent_id])
        previous = None
        if supersedes is not None:
            # Locked: of two new versions of one skill, only one supersedes it; the other is a 409.
            previous = Skill.objects.select_for_update().filter(skill_id=supersedes).first()
            _refuse_to_supersede(previous, supersedes=supersedes, agent_id=agent_id, tool_id=tool_id)
        _insert(skill, id_field="skill_id", type_name="skill")
        if previous is not None:
            Skill.objects.filter(pk=previous.pk).update(status=SkillStatus.SUPERSEDED)
        ledger_append(event_type="skill.created", resource_type="Skill", resource_id=skill.skill_id, actor=actor,
                      payload={"agent_id": agent_id, "tool_id": tool_id, "connector": connector,
                               "endpoint_url": endpoint_url, "tool_pins": tool_pins, "supersedes": supersedes,
                               "executor_client_id": executor_client_id or None})
        if previous is not None:
            ledger_append(event_type="skill.superseded", resource_type="Skill", resource_id=previous.skill_id,
                          actor=actor, payload={"superseded_by": skill.skill_id, "tool_pins": previous.tool_pins})
    return skill


# --- liability bindings -------------------------------------------------------------------
def liability_binding_create(*, actor: str, root_principal: str, agent_id: str, liable_party: str,
                             coverage: dict[str, Any] | None = None, expires_at: datetime | None = None,
                             binding_id: str | None = None,
                             created_at: datetime | None = None) -> LiabilityBinding:
    """Bind a liable party to an agent's actions for a root principal."""
    now = timezone.now()
    _future(expires_at, field="expires_at", now=now)
    currency, amount = _money(coverage)
    binding = LiabilityBinding(
        binding_id=binding_id or new_id("lib"), root_principal=root_principal, agent_id=agent_id,
        liable_party=liable_party, coverage_currency=currency, coverage_amount=amount, expires_at=expires_at,
        status=ActiveStatus.ACTIVE, created_at=_timestamp(created_at, field="created_at", now=now))
    with transaction.atomic():
        _lock_agents([agent_id])
        _refuse_revoked_agents([agent_id])
        _insert(binding, id_field="binding_id", type_name="liability binding")
        ledger_append(event_type="liability_binding.created", resource_type="LiabilityBinding",
                      resource_id=binding.binding_id, actor=actor,
                      payload={"root_principal": root_principal, "agent_id": agent_id,
                               "liable_party": liable_party})
    return binding


# --- revocations --------------------------------------------------------------------------
# Event prefix -> the ledger ``resource_type``: the resource's C1 ``type`` constant.
_RESOURCE_TYPES = {"delegation": "DelegationChain", "capability": "Capability", "skill": "Skill",
                   "liability_binding": "LiabilityBinding"}

_SIMPLE_TARGETS: dict[str, tuple[type[Model], str, str]] = {
    RevocationTarget.CAPABILITY: (Capability, "capability_id", "capability"),
    RevocationTarget.SKILL: (Skill, "skill_id", "skill"),
    RevocationTarget.LIABILITY_BINDING: (LiabilityBinding, "binding_id", "liability_binding"),
}


def _already_revoked(target_type: str, target_id: str) -> errors.Conflict:
    existing = Revocation.objects.filter(target_type=target_type, target_id=target_id).first()
    details = {"target_type": target_type, "target_id": target_id,
               "revocation_id": existing.revocation_id if existing else None}
    return errors.Conflict(f"The {target_type} {target_id!r} is already revoked; revocation is irreversible.",
                           details=details)


def _revoke_delegation_trees(*, seeds: list[Delegation], now: datetime) -> tuple[list[str], list[str]]:
    """Mark ``seeds`` and all their descendants revoked, with the capabilities derived from them.

    Returns the delegation ids and capability ids it changed.
    """
    if not seeds:
        return [], []
    _lock_tree_roots(seed.root_pk for seed in seeds)
    # Under the tree locks no link can be added below a seed: this read is complete.
    prefixes = Q()
    for seed in seeds:
        prefixes |= Q(path__startswith=seed.path)
    delegation_ids = list(Delegation.objects.filter(prefixes, status=ActiveStatus.ACTIVE)
                          .order_by("pk").values_list("delegation_id", flat=True))
    Delegation.objects.filter(delegation_id__in=delegation_ids).update(status=ActiveStatus.REVOKED, revoked_at=now)
    capability_ids = list(Capability.objects.filter(delegation_id__in=delegation_ids, status=ActiveStatus.ACTIVE)
                          .order_by("pk").values_list("capability_id", flat=True))
    Capability.objects.filter(capability_id__in=capability_ids).update(status=ActiveStatus.REVOKED)
    return delegation_ids, capability_ids


def _revoke_rows(model: type[Model], id_field: str, query: Q) -> list[str]:
    ids = list(model.objects.select_for_update().filter(query, status=ActiveStatus.ACTIVE)
               .order_by("pk").values_list(id_field, flat=True))
    model.objects.filter(**{f"{id_field}__in": ids}).update(status=ActiveStatus.REVOKED)
    return ids


def revocation_create(*, actor: str, target_type: str, target_id: str, reason: str = "",
                      revoked_by: str | None = None, revocation_id: str | None = None,
                      created_at: datetime | None = None) -> Revocation:
    """Revoke a delegation, capability, agent, skill or liability binding: immediate,
    irreversible and cascading (CONTRACT C9).

    - delegation: it and every descendant link, and the capabilities derived from them;
    - agent: every link it granted or received and their descendants, the capabilities
      derived from those, and every capability, skill and liability binding of the agent;
    - capability, skill, liability binding: that record.

    400 when a non-agent target does not exist; 409 ``AGP_CONFLICT`` when the target is
    already revoked (directly or by a cascade).
    """
    now = timezone.now()
    created_at = _timestamp(created_at, field="created_at", now=now)
    changed: list[tuple[str, str, bool]] = []  # (event prefix, resource_id, is the target itself)
    with transaction.atomic():
        if target_type == RevocationTarget.AGENT:
            _lock_agents([target_id])
            if selectors.agent_is_revoked(agent_id=target_id):
                raise _already_revoked(target_type, target_id)
            seeds = list(Delegation.objects.filter(Q(delegate_agent=target_id) | Q(delegator_agent=target_id),
                                                   status=ActiveStatus.ACTIVE).only("pk", "path"))
            delegation_ids, capability_ids = _revoke_delegation_trees(seeds=seeds, now=now)
            capability_ids += _revoke_rows(Capability, "capability_id", Q(agent_id=target_id))
            changed += [("delegation", i, False) for i in delegation_ids]
            changed += [("capability", i, False) for i in capability_ids]
            changed += [("skill", i, False) for i in _revoke_rows(Skill, "skill_id", Q(agent_id=target_id))]
            changed += [("liability_binding", i, False)
                        for i in _revoke_rows(LiabilityBinding, "binding_id", Q(agent_id=target_id))]
        elif target_type == RevocationTarget.DELEGATION:
            target = selectors.delegation_get(delegation_id=target_id)
            if target is None:
                raise errors.invalid_fields({"target_id": [f"No delegation with id {target_id!r}."]})
            _lock_tree_roots([target.root_pk])
            if Delegation.objects.filter(pk=target.pk, status=ActiveStatus.ACTIVE).count() != 1:
                raise _already_revoked(target_type, target_id)
            delegation_ids, capability_ids = _revoke_delegation_trees(seeds=[target], now=now)
            changed += [("delegation", i, i == target_id) for i in delegation_ids]
            changed += [("capability", i, False) for i in capability_ids]
        else:
            model, id_field, kind = _SIMPLE_TARGETS[target_type]
            if not model.objects.filter(**{id_field: target_id}).exists():
                raise errors.invalid_fields({"target_id": [f"No {kind.replace('_', ' ')} "
                                                           f"with id {target_id!r}."]})
            revoked = _revoke_rows(model, id_field, Q(**{id_field: target_id}))
            if not revoked:
                if model is Skill and Skill.objects.filter(skill_id=target_id,
                                                           status=SkillStatus.SUPERSEDED).exists():
                    raise errors.Conflict(f"The skill {target_id!r} is superseded: nothing executes on it any more.",
                                          details={"target_type": target_type, "target_id": target_id,
                                                   "status": SkillStatus.SUPERSEDED})
                raise _already_revoked(target_type, target_id)
            changed.append((kind, target_id, True))

        revocation = Revocation(
            revocation_id=revocation_id or new_id("rev"), target_type=target_type, target_id=target_id,
            reason=reason, revoked_by=revoked_by or actor, revoked_at=now, created_at=created_at)
        try:
            with transaction.atomic():  # a savepoint: on a refusal the query below still runs
                _insert(revocation, id_field="revocation_id", type_name="revocation")
        except errors.Conflict:
            if Revocation.objects.filter(target_type=target_type, target_id=target_id).exists():
                raise _already_revoked(target_type, target_id) from None
            raise
        # Ledger last: its head lock is the final lock any registry writer takes.
        ledger_append(event_type="revocation.created", resource_type="Revocation",
                      resource_id=revocation.revocation_id, actor=actor,
                      payload={"target_type": target_type, "target_id": target_id, "reason": reason,
                               "revoked_by": revocation.revoked_by})
        for kind, resource_id, direct in changed:
            ledger_append(event_type=f"{kind}.revoked", resource_type=_RESOURCE_TYPES[kind],
                          resource_id=resource_id, actor=actor,
                          payload={"revocation_id": revocation.revocation_id, "cascade": not direct})
    return revocation


# --- freezes ------------------------------------------------------------------------------
def _freeze_sign(freeze: Freeze) -> None:
    """(Re-)sign the freeze as rendered: issued on creation and again when it is lifted."""
    freeze.signature = None
    freeze.signature = sign_resource(freeze_document(freeze))


def freeze_create(*, actor: str, target_type: str, reason: str, target_id: str | None = None,
                  frozen_by: str | None = None, freeze_id: str | None = None,
                  created_at: datetime | None = None) -> Freeze:
    """Freeze an agent, a root principal, a tool or everything, at once (CONTRACT C13).

    In this transaction: the signed freeze, its ledger event (``freeze.created``), and the
    outbox message of the task that cancels the operations it stops (``FREEZE_TASK``,
    which execution registers): those still ``pending`` and those waiting for an external
    executor's receipt. Everything else consults the freeze where it acts: envelopes fail
    the check ``freeze``, evaluations and delegations are 409 ``AGP_FROZEN``, and a worker's
    claim re-checks it before the connector call. Several freezes may name one target;
    each is lifted on its own.
    """
    now = timezone.now()
    freeze = Freeze(freeze_id=freeze_id or new_id("frz"), target_type=target_type,
                    target_id="" if target_type == FreezeTarget.ALL else (target_id or ""), reason=reason,
                    frozen_by=frozen_by or actor, status=FreezeStatus.ACTIVE,
                    created_at=_timestamp(created_at, field="created_at", now=now))
    _freeze_sign(freeze)
    with transaction.atomic():
        _insert(freeze, id_field="freeze_id", type_name="freeze")
        outbox_enqueue(task_name=FREEZE_TASK, args=[freeze.freeze_id])
        ledger_append(event_type="freeze.created", resource_type="Freeze", resource_id=freeze.freeze_id,
                      actor=actor, payload={"target_type": target_type, "target_id": freeze.target_id or None,
                                            "reason": reason, "frozen_by": freeze.frozen_by,
                                            "payload_hash": freeze.signature["payload_hash"]})
    return freeze


def freeze_lift(*, actor: str, freeze_id: str, status: str, lifted_by: str | None = None) -> Freeze:
    """``PATCH /agp/freezes/{id}``: ``active -> lifted``, re-signed, ledgered ``freeze.lifted``.

    Forward only: any other move, lifting twice included, is 409 ``AGP_INVALID_TRANSITION``;
    an unknown id is 404. Operations the freeze cancelled stay cancelled.
    """
    with transaction.atomic():
        # The row lock queues two concurrent lifts: the second reads "lifted" and is refused.
        freeze = Freeze.objects.select_for_update().filter(freeze_id=freeze_id).first()
        if freeze is None:
            raise errors.NotFound(f"No freeze with id {freeze_id!r}.")
        source = freeze.status
        if status != FreezeStatus.LIFTED or not can_proceed(freeze.lift):
            raise errors.InvalidTransition(
                from_state=source, to_state=status,
                allowed=sorted(str(t.target) for t in freeze.get_available_status_transitions()))
        freeze.lift()
        freeze.lifted_at = timezone.now()
        freeze.lifted_by = lifted_by or actor
        _freeze_sign(freeze)
        try:
            freeze.save()
        except ConcurrentTransition:
            raise errors.InvalidTransition(from_state=FreezeStatus.LIFTED, to_state=status, allowed=[]) from None
        ledger_append(event_type="freeze.lifted", resource_type="Freeze", resource_id=freeze.freeze_id,
                      actor=actor, payload={"from": source, "to": status, "lifted_by": freeze.lifted_by,
                                            "payload_hash": freeze.signature["payload_hash"]})
    return freeze
