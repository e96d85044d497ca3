"""The reads other apps' fail-closed checks call (registry.selectors)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from registry import selectors
from registry.models import Delegation
from tests.registry import factories as f

pytestmark = pytest.mark.django_db


def test_it_finds_the_newest_usable_delegation_for_an_agent_and_scope():
    older = f.root_delegation(principal="alice", delegate="agent-a", scope=["crm:*"])
    newer = f.root_delegation(principal="alice", delegate="agent-a", scope=["mail:send"])

    def usable(**kwargs):
        found = selectors.delegation_usable_with_chain(agent_id="agent-a", **kwargs)
        return found[0].pk if found else None

    assert usable(root_principal="alice") == newer.pk
    assert usable(root_principal="alice", scope="crm:update") == older.pk
    assert usable(root_principal="alice", scope=["crm:read", "mail:send"]) is None
    assert usable(root_principal="bob") is None


def test_it_judges_a_delegation_at_a_given_instant():
    link = f.root_delegation(expires_at=f.later(hours=2))
    assert selectors.delegation_chain_problem(delegation=link) is None
    assert selectors.delegation_chain_problem(delegation=link, now=timezone.now() + timedelta(hours=3)) == (
        f"delegation {link.delegation_id} has expired")
    assert selectors.delegation_usable_with_chain(agent_id=link.delegate_agent, root_principal=link.root_principal,
                                                  now=timezone.now() + timedelta(hours=3)) is None


def test_it_names_why_a_chain_is_unusable():
    links = f.chain(3)
    assert selectors.delegation_chain_problem(delegation=links[2]) is None
    f.revoke("agent", links[1].delegate_agent)
    # The agent's own links are cascaded; the read-time rule names the first broken link.
    problem = selectors.delegation_chain_problem(delegation=links[2])
    assert problem == f"delegation {links[1].delegation_id} is revoked"
    Delegation.objects.filter(pk__in=[links[1].pk, links[2].pk]).update(status="active")
    assert selectors.delegation_chain_problem(delegation=links[2]) == (
        f"an agent of delegation {links[1].delegation_id} is revoked")


def test_it_judges_a_chain_in_one_query_whatever_its_depth():
    counts = []
    for depth in (1, 8):
        link = f.chain(depth)[-1]
        with CaptureQueriesContext(connection) as queries:
            assert selectors.delegation_chain_problem(delegation=link) is None
        counts.append(len(queries))
    assert counts == [1, 1]


def test_it_reads_a_chain_root_first_with_each_links_agent_revocation():
    links = f.chain(6)
    f.revoke("agent", links[2].delegate_agent)  # links 2 and 3 carry the revoked agent
    for count in (1, 2, 3, 6):
        chain = selectors.delegation_chain(delegation=links[count - 1])
        assert [link.pk for link in chain] == [link.pk for link in links[:count]]
        assert [link.agent_revoked for link in chain] == [False, False, True, True, False, False][:count]
    assert [link.status for link in selectors.delegation_chain(delegation=links[5])] == [
        "active", "active", "revoked", "revoked", "revoked", "revoked"]
