"""Registry test data, made through the services (so every row is as the API would write it)."""

from datetime import datetime, timedelta
from itertools import count

from django.utils import timezone

from registry import services

ACTOR = "test-client"
_seq = count(1)


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_seq)}"


def later(**delta) -> datetime:
    return timezone.now() + timedelta(**(delta or {"days": 1}))


def root_delegation(*, principal=None, delegate=None, scope=("*",), hops=3, spend=None, expires_at=None, **kwargs):
    principal = principal or unique("principal")
    constraints = {"max_hops_remaining": hops}
    if spend is not None:
        constraints["spend_limit"] = spend
    return services.delegation_create(
        actor=ACTOR, root_principal=principal, delegator_agent=principal, delegate_agent=delegate or unique("agent"),
        authority_scope=list(scope), constraints=constraints, expires_at=expires_at or later(days=7), **kwargs)


def child_delegation(parent, *, delegate=None, scope=None, constraints=None, expires_at=None, **kwargs):
    return services.delegation_create(
        actor=ACTOR, root_principal=parent.root_principal, delegator_agent=parent.delegate_agent,
        delegate_agent=delegate or unique("agent"), authority_scope=list(scope or parent.authority_scope),
        constraints=constraints, expires_at=expires_at, **kwargs)


def chain(depth: int, *, scope=("*",), **kwargs):
    """A root and ``depth - 1`` descendants, one under the other; returns the links root first."""
    links = [root_delegation(scope=scope, hops=depth + 2, **kwargs)]
    for _ in range(depth - 1):
        links.append(child_delegation(links[-1]))
    return links


RULESET = """package agp.test
import rego.v1

default allow := false
allow if input.amount < 100
"""


def policy_set(**kwargs):
    kwargs.setdefault("name", "payments")
    kwargs.setdefault("version", "1.0.0")
    kwargs.setdefault("ruleset", RULESET)
    return services.policy_set_create(actor=ACTOR, **kwargs)


def task(**kwargs):
    kwargs.setdefault("root_principal", unique("principal"))
    kwargs.setdefault("agent_id", unique("agent"))
    kwargs.setdefault("risk_level", "low")
    kwargs.setdefault("action_class", "read")
    return services.task_create(actor=ACTOR, **kwargs)


def capability(delegation, *, tool_id="crm", operations=("read",), **kwargs):
    return services.capability_create(actor=ACTOR, agent_id=delegation.delegate_agent,
                                      delegation_id=delegation.delegation_id, tool_id=tool_id,
                                      operations=list(operations), **kwargs)


def skill(*, agent_id=None, tool_id="crm", **kwargs):
    kwargs.setdefault("name", "crm connector")
    return services.skill_create(actor=ACTOR, agent_id=agent_id or unique("agent"), tool_id=tool_id, **kwargs)


def liability_binding(*, agent_id=None, **kwargs):
    kwargs.setdefault("root_principal", unique("principal"))
    kwargs.setdefault("liable_party", "Acme Insurance")
    return services.liability_binding_create(actor=ACTOR, agent_id=agent_id or unique("agent"), **kwargs)


def revoke(target_type, target_id, **kwargs):
    return services.revocation_create(actor=ACTOR, target_type=target_type, target_id=target_id, **kwargs)
