"""Races that only PostgreSQL can run for real (row locks, concurrent transactions)."""


import pytest
from rest_framework.test import APIClient

from core.ledger_verification import ledger_verify
from core.models import LedgerEvent, LedgerHead
from registry.models import Delegation, PolicySet, Skill
from tests.concurrency import run_together
from tests.mcp_server import mcp_servers  # noqa: F401
from tests.registry import factories as f

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def ledger_head():
    # Transactional tests flush every table after each test, the row migration 0001 made too.
    LedgerHead.objects.get_or_create(pk=1)


def test_it_lets_exactly_one_of_two_concurrent_patches_deprecate():
    for _ in range(5):
        policy_set = f.policy_set()
        url = f"/agp/policy-sets/{policy_set.policy_set_id}"

        def patch():
            return APIClient().patch(url, {"status": "deprecated"}, format="json")

        responses = run_together([patch, patch])

        assert sorted(r.status_code for r in responses) == [200, 409]
        refused = next(r for r in responses if r.status_code == 409).json()["error"]
        assert refused["code"] == "AGP_INVALID_TRANSITION"
        assert refused["details"]["from"] == "deprecated"
        assert PolicySet.objects.get(pk=policy_set.pk).status == "deprecated"
        assert LedgerEvent.objects.filter(resource_id=policy_set.policy_set_id,
                                          event_type="policy_set.deprecated").count() == 1
    assert ledger_verify().verified


def test_it_lets_exactly_one_of_two_concurrent_new_versions_supersede_a_skill(settings, mcp_servers):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    server = mcp_servers.start()
    for _ in range(3):
        old = f.skill(connector="mcp", endpoint_url=server.url)

        def supersede():
            return APIClient().post("/agp/skills", {
                "agent_id": old.agent_id, "name": "crm v2", "tool_id": old.tool_id, "connector": "mcp",
                "endpoint_url": server.url, "supersedes": old.skill_id}, format="json")

        responses = run_together([supersede, supersede])

        assert sorted(r.status_code for r in responses) == [201, 409]
        refused = next(r for r in responses if r.status_code == 409).json()["error"]
        assert refused["details"] == {"supersedes": old.skill_id, "status": "superseded"}
        assert list(Skill.objects.filter(supersedes=old.skill_id).values_list("status", flat=True)) == ["active"]
        assert Skill.objects.get(pk=old.pk).status == "superseded"
        assert LedgerEvent.objects.filter(resource_id=old.skill_id, event_type="skill.superseded").count() == 1
    assert ledger_verify().verified


def test_it_lets_no_child_escape_a_concurrent_revocation_of_its_ancestor():
    for _ in range(3):
        links = f.chain(4)
        leaf = links[-1]

        def create_child():
            try:
                return f.child_delegation(leaf).delegation_id
            except Exception as exc:  # noqa: BLE001 - the refusal is an expected outcome
                return exc

        def revoke_middle():
            return f.revoke("delegation", links[1].delegation_id)

        run_together([*[create_child] * 6, revoke_middle])

        below = Delegation.objects.filter(path__startswith=links[1].path)
        assert below.count() >= 3
        assert set(below.values_list("status", flat=True)) == {"revoked"}
        assert Delegation.objects.get(pk=links[0].pk).status == "active"


def test_it_lets_no_delegation_to_an_agent_escape_its_concurrent_revocation():
    for attempt in range(3):
        root = f.root_delegation(hops=5)
        target = f"agent-under-revocation-{attempt}"

        def delegate():
            try:
                return f.child_delegation(root, delegate=target)
            except Exception as exc:  # noqa: BLE001 - the refusal is an expected outcome
                return exc

        run_together([delegate, lambda: f.revoke("agent", target)])

        assert not Delegation.objects.filter(delegate_agent=target, status="active").exists()
