"""Property-based tests over random delegation trees (docs/reference/governance.md).

Each example builds a tree through the service with random roots, sub-delegations and
revocations, and checks every answer against an independent model of the rules:

- scope coverage is decided by *denotation* (the set of concrete operations a scope
  stands for, with one operation per prefix that no request names), not by the service's
  prefix rule;
- parent discovery is the newest usable, covering link to the delegator;
- a refused request must carry the code the first broken rule calls for.

Invariants of every accepted link: its scope is covered by its parent's, its hops are
strictly fewer, its spend never grows (same currency, no larger amount, none when the
parent has none) and its expiry never extends past the parent's.
"""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from fnmatch import fnmatchcase

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agp_project import errors
from registry import services
from registry.models import Delegation
from tests.registry import factories as f

pytestmark = pytest.mark.django_db

CONCRETE = ["pay:refund", "pay:charge", "payroll:run", "crm:read", "crm:update"]
# Operations no request names: they make "pay:*" mean more than the two named pay operations.
UNSEEN = ["pay:other", "crm:other", "zzz:other"]
SCOPES = CONCRETE + ["pay:*", "crm:*", "*"]
AGENTS = 6


def denote(scope: str) -> set[str]:
    return {op for op in CONCRETE + UNSEEN if fnmatchcase(op, scope)}


def covered(parent_scopes, requested) -> bool:
    granted = set().union(*(denote(s) for s in parent_scopes))
    return all(denote(s) <= granted for s in requested)


@dataclass
class Link:
    id: str
    parent: "Link | None"
    delegator: str
    delegate: str
    scope: list[str]
    hops: int
    spend: tuple[str, Decimal] | None
    expires: object
    revoked: bool = False

    def usable(self) -> bool:
        link = self
        while link is not None:
            if link.revoked:
                return False
            link = link.parent
        return True

    def chain_agents(self) -> set[str]:
        agents, link = set(), self
        while link is not None:
            agents |= {link.delegator, link.delegate}
            link = link.parent
        return agents


spend_st = st.one_of(st.none(), st.tuples(st.sampled_from(["EUR", "USD"]),
                                          st.sampled_from([Decimal(0), Decimal(10), Decimal(50), Decimal(100)])))
scope_st = st.lists(st.sampled_from(SCOPES), min_size=1, max_size=3, unique=True)
root_scope_st = st.one_of(st.just(["*"]), scope_st)
root_st = st.tuples(st.just("root"), st.integers(0, AGENTS - 1), root_scope_st, st.integers(0, 5), spend_st,
                    st.integers(0, 6))
# Weighted choices are drawn as (selector, value) pairs: Hypothesis merges identical
# branches of one_of, so repeating a branch would not weight it.
# The delegator is mostly the delegate of a link already made (index into the model), else any agent.
# (sampled_from draws uniformly; integers() leans towards 0, which would pile every step
# onto the first link and the first agent.)
delegator_st = st.tuples(st.integers(0, 5), st.sampled_from(range(50)), st.sampled_from(range(AGENTS)))
# The requested scope is one scope of the delegator's link (narrowing) or random.
child_scope_st = st.tuples(st.integers(0, 3), st.integers(0, 5), scope_st)
child_st = st.tuples(st.just("child"), delegator_st, st.sampled_from(range(-1, AGENTS)), child_scope_st,
                     st.one_of(st.none(), st.integers(0, 4)), st.one_of(st.none(), spend_st),
                     st.one_of(st.none(), st.integers(-6, 6)))
revoke_st = st.tuples(st.just("revoke"), st.sampled_from(range(50)))
step_st = st.tuples(st.integers(0, 9), root_st, child_st, revoke_st).map(
    lambda t: t[1] if t[0] == 0 else t[3] if t[0] == 9 else t[2])
steps_st = st.tuples(root_st, st.lists(step_st, min_size=3, max_size=12))


def expected_outcome(model: list[Link], principal, delegator, delegate, scope, hops, spend, expires):
    """(error class, None) or (None, parent Link) by the model of docs/reference/governance.md."""
    if delegator == delegate:
        return errors.InvalidRequest, None
    parent = next((link for link in reversed(model)
                   if link.delegate == delegator and link.usable() and covered(link.scope, scope)), None)
    if parent is None:
        return errors.DelegationScopeViolation, None
    if delegate in parent.chain_agents() | {principal}:
        return errors.DelegationScopeViolation, None
    if parent.hops < 1 or (hops is not None and hops > parent.hops - 1):
        return errors.DelegationHopLimit, None
    if spend is not None and (parent.spend is None or spend[0] != parent.spend[0] or spend[1] > parent.spend[1]):
        return errors.DelegationScopeViolation, None
    if expires is not None and expires > parent.expires:
        return errors.DelegationScopeViolation, None
    return None, parent


def assert_attenuated(child: Delegation, parent: Delegation):
    assert covered(parent.authority_scope, child.authority_scope)
    assert child.max_hops_remaining < parent.max_hops_remaining
    if parent.spend_limit is None:
        assert child.spend_limit is None
    else:
        assert child.spend_currency == parent.spend_currency
        assert child.spend_amount <= parent.spend_amount
    assert child.expires_at <= parent.expires_at
    assert child.path.startswith(parent.path) and child.depth == parent.depth + 1


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps_st)
def test_it_attenuates_every_accepted_link_and_refuses_with_the_right_code(steps):
    prefix = f.unique("tree")
    principal = f"{prefix}-p"
    agents = [f"{prefix}-a{i}" for i in range(AGENTS)]
    base = timezone.now() + timedelta(days=10)
    model: list[Link] = []
    first, rest = steps

    for step in [first, *rest]:
        if step[0] == "root":
            _, agent, scope, hops, spend, hours = step
            expires = base + timedelta(hours=hours)
            row = f.root_delegation(principal=principal, delegate=agents[agent], scope=scope, hops=hops,
                                    spend=None if spend is None else {"currency": spend[0], "amount": spend[1]},
                                    expires_at=expires)
            model.append(Link(row.delegation_id, None, principal, agents[agent], scope, hops, spend, expires))
        elif step[0] == "revoke":
            if not model:
                continue
            target = model[step[1] % len(model)]
            if not target.usable():
                with pytest.raises(errors.Conflict):
                    f.revoke("delegation", target.id)
                continue
            f.revoke("delegation", target.id)
            target.revoked = True
            for link in model:
                assert Delegation.objects.get(delegation_id=link.id).status == (
                    "active" if link.usable() else "revoked")
        else:
            _, (pick, link_i, agent_i), delegate_i, (narrow, scope_i, scope), hops, spend, hours = step
            source = model[link_i % len(model)] if pick else None
            delegator = source.delegate if source else agents[agent_i]
            if source and narrow:
                scope = [source.scope[scope_i % len(source.scope)]]
            delegate = principal if delegate_i < 0 else agents[delegate_i]
            expires = None if hours is None else base + timedelta(hours=hours)
            error, parent = expected_outcome(model, principal, delegator, delegate, scope, hops, spend, expires)
            event(f"child: {error.__name__ if error else 'accepted'}")
            constraints = {}
            if hops is not None:
                constraints["max_hops_remaining"] = hops
            if spend is not None:
                constraints["spend_limit"] = {"currency": spend[0], "amount": spend[1]}
            count = Delegation.objects.count()
            call = dict(actor=f.ACTOR, root_principal=principal, delegator_agent=delegator, delegate_agent=delegate,
                        authority_scope=scope, constraints=constraints, expires_at=expires)
            if error is not None:
                with pytest.raises(errors.AGPError) as refused:
                    services.delegation_create(**call)
                assert type(refused.value) is error, (refused.value.code, refused.value.message)
                assert Delegation.objects.count() == count
                continue
            child = services.delegation_create(**call)
            assert child.parent_id == parent.id
            parent_row = Delegation.objects.get(delegation_id=parent.id)
            assert_attenuated(Delegation.objects.get(pk=child.pk), parent_row)
            model.append(Link(child.delegation_id, parent, delegator, delegate, scope, child.max_hops_remaining,
                              None if child.spend_limit is None else (child.spend_currency, child.spend_amount),
                              child.expires_at))

