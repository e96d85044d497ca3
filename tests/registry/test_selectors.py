"""The reads other apps' fail-closed checks call (registry.selectors)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from registry import selectors
from registry.models import Capability, Delegation, LiabilityBinding
from tests.registry import factories as f

pytestmark = pytest.mark.django_db


def test_it_finds_the_newest_active_delegation_for_an_agent_and_scope():
    older = f.root_delegation(principal="alice", delegate="agent-a", scope=["crm:*"])
    newer = f.root_delegation(principal="alice", delegate="agent-a", scope=["mail:send"])
    assert selectors.delegation_active_for(agent_id="agent-a", root_principal="alice").pk == newer.pk
    assert selectors.delegation_active_for(agent_id="agent-a", root_principal="alice", scope="crm:update").pk \
        == older.pk
    assert selectors.delegation_active_for(agent_id="agent-a", root_principal="alice",
                                           scope=["crm:read", "mail:send"]) is None
    assert selectors.delegation_active_for(agent_id="agent-a", root_principal="bob") is None


def test_it_judges_a_delegation_at_a_given_instant():
    link = f.root_delegation(expires_at=f.later(hours=2))
    assert selectors.delegation_chain_valid(delegation=link)
    assert not selectors.delegation_chain_valid(delegation=link, now=timezone.now() + timedelta(hours=3))
    assert selectors.delegation_active_for(agent_id=link.delegate_agent, root_principal=link.root_principal,
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


def test_it_decides_whether_a_capability_is_usable():
    links = f.chain(2, scope=["crm:*"])
    capability = f.capability(links[1], operations=["read"])
    assert selectors.capability_usable(capability=capability)
    assert not selectors.capability_usable(capability=capability, now=links[1].expires_at + timedelta(seconds=1))

    Delegation.objects.filter(pk=links[0].pk).update(authority_scope=["mail:*"], max_hops_remaining=3)
    Delegation.objects.filter(pk=links[1].pk).update(authority_scope=["mail:*"])
    assert selectors.capability_problem(capability=capability) == (
        f"capability {capability.capability_id} lies outside its delegation's scope")

    f.revoke("delegation", links[0].delegation_id)
    capability = Capability.objects.get(pk=capability.pk)
    assert capability.status == "revoked"
    assert selectors.capability_problem(capability=capability) == f"capability {capability.capability_id} is revoked"


def test_it_checks_a_capability_in_a_fixed_number_of_queries():
    shallow = f.capability(f.chain(1)[-1])
    deep = f.capability(f.chain(8)[-1])
    counts = []
    for capability in (shallow, deep):
        with CaptureQueriesContext(connection) as queries:
            assert selectors.capability_usable(capability=capability)
        counts.append(len(queries))
    assert counts == [3, 3]


def test_it_finds_the_active_skill_and_binding_of_an_agent():
    f.skill(agent_id="agent-a", tool_id="crm")
    newest = f.skill(agent_id="agent-a", tool_id="crm", connector="external")
    assert selectors.skill_active_for(agent_id="agent-a", tool_id="crm").pk == newest.pk
    assert selectors.skill_active_for(agent_id="agent-a", tool_id="mail") is None

    binding = f.liability_binding(agent_id="agent-a", root_principal="alice", expires_at=f.later(days=1))
    assert selectors.liability_binding_active_for(agent_id="agent-a").pk == binding.pk
    assert selectors.liability_binding_active_for(agent_id="agent-a", root_principal="bob") is None
    LiabilityBinding.objects.filter(pk=binding.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert selectors.liability_binding_active_for(agent_id="agent-a") is None
