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

    # Another agent, so that each holds one covering grant (two would be two trees: one
    # statement more, whatever the table's size).
    bulk_delegations(9_990, start=10, agent="agent-large")
    assert Delegation.objects.count() >= 10_000
    large = measure("agent-large")

    assert small[0] == 2  # candidates, then their chains with agent revocations joined in
    assert small == large


def test_it_checks_a_chain_in_one_query_whatever_its_depth():
    shallow = f.chain(2)[-1]
    deep = f.chain(12)[-1]
    for link in (shallow, deep):
        with CaptureQueriesContext(connection) as queries:
            assert selectors.delegation_chain_problem(delegation=link) is None
        assert len(queries) == 1


# One creation's statements: the freeze check; then, under the agents' lock (PostgreSQL
# only), the candidates, the lock on their tree's root, their chains read once under it, the
# revoked-agent check, the row and its path, the ledger event (one statement on PostgreSQL,
# three on SQLite); and the savepoint pair of the service's atomic block, nested in the test's.
ONE_TREE = "delegation link in one tree"  # tests/query_counts.json


def test_it_creates_a_link_in_a_fixed_number_of_statements_whatever_the_depth(query_counts):
    for depth in (2, 12):
        parent = f.chain(depth)[-1]
        with query_counts.pinned(ONE_TREE):
            child = f.child_delegation(parent)
        assert child.depth == depth and child.chain_pks == [*parent.chain_pks, child.pk]


def test_it_reads_the_chain_once_more_when_the_candidates_span_several_trees(django_assert_num_queries,
                                                                           query_counts):
    """The parent is chosen first, then only its tree is locked and its chain read again
    under the lock: one statement more (tests/registry/test_tree_locks.py shows the other
    tree stays free)."""
    older = f.root_delegation(principal=PRINCIPAL, delegate="agent-two-trees", scope=["crm:*"])
    newer = f.root_delegation(principal=PRINCIPAL, delegate="agent-two-trees", scope=["crm:*"])
    with django_assert_num_queries(query_counts.expected(ONE_TREE) + 1):
        child = f.child_delegation(newer, scope=["crm:read"])
    assert child.parent_id == newer.delegation_id and older.root_pk != newer.root_pk
