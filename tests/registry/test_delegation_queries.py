"""Parent resolution costs a fixed number of SQL queries, whatever the number of delegations."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import CharField, Value
from django.db.models.functions import Cast, Concat, LPad
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from registry import selectors
from registry.models import Delegation
from tests.registry import factories as f

pytestmark = pytest.mark.django_db

PRINCIPAL = "acme"


def bulk_delegations(count: int, *, start: int, agent: str) -> None:
    """``count`` root links: a third are non-covering candidates of ``agent`` in the same tree
    owner, a third are other agents' links from the same principal, a third are unrelated."""
    now = timezone.now()
    rows = []
    for i in range(start, start + count):
        kind = i % 3
        rows.append(Delegation(
            delegation_id=f"bulk-{i}", root_principal=PRINCIPAL if kind < 2 else f"p-{i}",
            delegator_agent=PRINCIPAL if kind < 2 else f"p-{i}",
            delegate_agent=agent if kind == 0 else f"a-{i}",
            authority_scope=["payments:*"] if kind == 0 else ["*"], max_hops_remaining=3,
            accepted_at=now, expires_at=now + timedelta(days=1), created_at=now, signature={}, signature_chain=[]))
    Delegation.objects.bulk_create(rows, batch_size=2000)
    Delegation.objects.filter(path="").update(path=Concat(LPad(Cast("pk", CharField()), 12, Value("0")), Value("/")))


def measure(agent: str):
    parent = f.root_delegation(principal=PRINCIPAL, delegate=agent, scope=["crm:*"])
    with CaptureQueriesContext(connection) as resolve:
        found = selectors.delegation_usable_with_chain(agent_id=agent, root_principal=PRINCIPAL, scope=["crm:read"])
    assert found is not None and found[0].pk == parent.pk
    with CaptureQueriesContext(connection) as create:
        child = f.child_delegation(parent, scope=["crm:read"])
    assert child.parent_id == parent.delegation_id
    return len(resolve), len(create)


def test_it_resolves_the_parent_in_the_same_number_of_queries_at_10_and_10000_rows():
    bulk_delegations(10, start=0, agent="agent-small")
    assert Delegation.objects.count() == 10
    small = measure("agent-small")

    bulk_delegations(9_990, start=10, agent="agent-small")
    assert Delegation.objects.count() >= 10_000
    large = measure("agent-small")

    assert small[0] == 2  # candidates, then their chains with agent revocations joined in
    assert small == large


def test_it_checks_a_chain_in_one_query_whatever_its_depth():
    shallow = f.chain(2)[-1]
    deep = f.chain(12)[-1]
    for link in (shallow, deep):
        with CaptureQueriesContext(connection) as queries:
            assert selectors.delegation_chain_problem(delegation=link) is None
        assert len(queries) == 1
