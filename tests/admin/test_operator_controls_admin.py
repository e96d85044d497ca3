"""What auditors see of the operator controls (C13, C14): freezes with what they cancelled,
a policy set's shadows with their agreement rate, a backtest's summary and changes."""

import pytest
from django.utils import timezone

from agp_project.ids import new_id
from core.admin_base import change_url
from decision.models import PolicyEvaluation
from execution.freezes import freezes_enforce
from registry.models import Freeze
from tests.execution.factories import make_policy_set, make_world
from tests.execution.worker import submit_async


def _evaluation(world, shadow_results):
    now = timezone.now()
    return PolicyEvaluation.objects.create(
        evaluation_id=new_id("pe"), policy_set=world.policy_set, task=world.task, agent_id=world.agent_id,
        input={}, input_hash="x", ruleset_hash=world.policy_set.ruleset_hash, result={"allow": True},
        allowed=True, shadow_results=shadow_results, evaluated_at=now, created_at=now)


def test_a_policy_set_page_shows_each_shadow_s_agreement_rate(auditor_client, db):
    world = make_world()
    agreeing = make_policy_set(policy_set_id="ps-shadow-a", shadow_of=world.policy_set)
    dissenting = make_policy_set(policy_set_id="ps-shadow-b", shadow_of=world.policy_set, status="deprecated")
    for a_matches, b_matches in ((True, False), (True, True), (True, False)):
        _evaluation(world, {"ps-shadow-a": {"allow": True, "matches": a_matches},
                            "ps-shadow-b": {"allow": not b_matches, "matches": b_matches}})
    _evaluation(world, {"ps-shadow-a": {"allow": False, "matches": False}})  # b had stopped shadowing
    _evaluation(world, {})  # before either existed

    page = auditor_client.get(change_url(world.policy_set)).content.decode()

    assert page.count("agreement rate") == 1
    row_a = page[page.index(f'{agreeing.policy_set_id}</a>'):]
    assert "<td>active</td><td>4</td><td>3</td><td>75.0 %</td>" in row_a
    row_b = page[page.index(f'{dissenting.policy_set_id}</a>'):]
    assert "<td>deprecated</td><td>3</td><td>1</td><td>33.3 %</td>" in row_b

    shadow_page = auditor_client.get(change_url(agreeing)).content.decode()
    assert "3 of 4 evaluations agreed (75.0 %)" in shadow_page
    assert auditor_client.get(change_url(make_policy_set())).status_code == 200  # no shadows, no rate


def test_a_freeze_page_lists_the_operations_it_cancelled(auditor_client, api, db):
    world = make_world()
    operation_id = submit_async(api, world.envelope_request())["operation_id"]
    freeze = Freeze.objects.create(freeze_id="frz-audit", target_type="agent", target_id=world.agent_id,
                                   reason="runaway", frozen_by="ops", created_at=timezone.now())
    freezes_enforce(freeze_id=freeze.freeze_id)

    page = auditor_client.get(change_url(freeze)).content.decode()

    assert operation_id in page and "<td>pending</td>" in page
    assert "freeze.created and freeze.lifted events" in page
    other = Freeze.objects.create(freeze_id="frz-idle", target_type="tool", target_id="nothing-uses-it",
                                  reason="precaution", frozen_by="ops", created_at=timezone.now())
    assert operation_id not in auditor_client.get(change_url(other)).content.decode()


@pytest.mark.parametrize("path", ["/admin/registry/freeze/", "/admin/registry/policyset/"])
def test_auditors_list_the_operator_records(auditor_client, db, path):
    make_policy_set()
    Freeze.objects.create(freeze_id="frz-list", target_type="all", reason="r", frozen_by="ops",
                          created_at=timezone.now())
    assert auditor_client.get(path).status_code == 200
