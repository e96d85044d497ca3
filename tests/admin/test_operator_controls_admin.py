"""What auditors see of the operator controls (docs/reference/governance.md): freezes with what they cancelled,
a policy set's shadows with their agreement rate, a backtest's summary and changes."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agp_project.ids import new_id
from core.admin_base import change_url
from decision.models import Backtest, PolicyEvaluation
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


def test_a_policy_set_page_shows_each_shadow_s_agreement_rate_over_the_evaluated_ones(auditor_client, db):
    world = make_world()
    agreeing = make_policy_set(policy_set_id="ps-shadow-a", shadow_of=world.policy_set)
    dissenting = make_policy_set(policy_set_id="ps-shadow-b", shadow_of=world.policy_set, status="deprecated")
    for a_matches, b_matches in ((True, False), (True, True), (True, False)):
        _evaluation(world, {"ps-shadow-a": {"allow": True, "matches": a_matches},
                            "ps-shadow-b": {"allow": not b_matches, "matches": b_matches}})
    _evaluation(world, {"ps-shadow-a": {"allow": False, "matches": False}})  # b had stopped shadowing
    _evaluation(world, {})  # before either existed
    _evaluation(world, {"ps-shadow-a": {"allow": None, "matches": None}})  # a not evaluated yet: not counted

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


def test_a_backtest_page_shows_its_summary_its_reasons_and_its_changes(auditor_client, api, db):
    world = make_world()
    envelope = submit_async(api, world.envelope_request())
    now = timezone.now()
    backtest = Backtest.objects.create(
        backtest_id="bt-audit", operation_id="op-bt-audit", policy_set=world.policy_set,
        ruleset_hash=world.policy_set.ruleset_hash, since=now - timedelta(days=30), until=now, status="succeeded",
        total=40, evaluations=40, unchanged=30, newly_denied=7, newly_allowed=2, approval_changed=1, errors=1,
        by_reason={"amount over 100": 6, "weekend": 2},
        changes=[{"evaluation_id": world.evaluation.evaluation_id,
                  "action_ids": [envelope["result_url"].rsplit("/", 1)[1]],
                  "before": {"allow": True, "require_approval": False, "approvals_required": 0, "reasons": []},
                  "after": {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": ["amount over 100"]}}],
        created_at=now, updated_at=now)

    page = auditor_client.get(change_url(backtest)).content.decode()

    assert "<td>succeeded</td>" in page and "<td>40 of 40</td>" in page
    assert "<td>30</td><td>7</td><td>2</td><td>1</td><td>1</td>" in page
    assert page.index("<td>amount over 100</td><td>6</td>") < page.index("<td>weekend</td><td>2</td>")
    assert world.evaluation.evaluation_id in page and envelope["result_url"].rsplit("/", 1)[1] in page
    assert "<td>allow</td><td>deny (amount over 100)</td>" in page
    assert auditor_client.get("/admin/decision/backtest/").status_code == 200
