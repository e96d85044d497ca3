"""Delegation chains, action envelopes with what governed them, filters, and planned queries."""

import json
from decimal import Decimal

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agp_client import numbers, verify_evidence
from agp_project.signing import get_signer
from core.admin_base import change_url
from decision.models import Approval, Decision
from execution.models import ActionEnvelope
from registry.models import Task
from tests.execution.signed_world import make_executed_action

from .world import make_admin_world


def test_it_shows_a_delegation_with_its_chain_up_to_the_root(auditor_client, admin_world):
    root, child, grandchild = admin_world.world.root_delegation, admin_world.world.delegation, admin_world.grandchild

    page = auditor_client.get(change_url(grandchild)).content.decode()

    root_link = f'<a href="{change_url(root)}">{root.delegation_id}</a>'
    child_link = f'<a href="{change_url(child)}">{child.delegation_id}</a>'
    this = f"<strong>{grandchild.delegation_id} (this delegation)</strong>"
    assert root_link in page and child_link in page and this in page
    assert page.index(root_link) < page.index(child_link) < page.index(this)
    assert f"{root.delegator_agent} → {root.delegate_agent}" in page


def test_it_walks_the_parent_links_when_a_delegation_has_no_path(auditor_client, admin_world):
    grandchild = admin_world.grandchild
    type(grandchild).objects.filter(pk=grandchild.pk).update(path="")

    page = auditor_client.get(change_url(grandchild)).content.decode()

    root_link = f'<a href="{change_url(admin_world.world.root_delegation)}">'
    child_link = f'<a href="{change_url(admin_world.world.delegation)}">'
    assert page.index(root_link) < page.index(child_link) < page.index("(this delegation)")


def test_it_lists_a_delegations_further_delegations(auditor_client, admin_world):
    page = auditor_client.get(change_url(admin_world.world.delegation)).content.decode()

    assert f'<a href="{change_url(admin_world.grandchild)}">{admin_world.grandchild.delegation_id}</a>' in page


def test_it_shows_an_envelope_with_its_operation_receipt_decision_evaluation_and_approvals(auditor_client,
                                                                                           admin_world):
    world, envelope = admin_world.world, admin_world.envelope

    response = auditor_client.get(change_url(envelope))
    page = response.content.decode()

    assert response.status_code == 200
    for record, text in ((admin_world.operation, admin_world.operation.operation_id),
                         (admin_world.receipt, admin_world.receipt.receipt_id),
                         (world.decision, world.decision.decision_id),
                         (world.evaluation, world.evaluation.evaluation_id),
                         (world.approval, world.approval.approval_id),
                         (admin_world.payment, admin_world.payment.payment_id)):
        assert f'<a href="{change_url(record)}">{text}</a>' in page, type(record).__name__
    assert "(cited by this envelope)" in page
    assert "outcome approve, finalised" in page
    assert "allowed, approval required" in page
    assert f"?capability_id={world.capability.capability_id}" in page
    assert b'name="_save"' not in response.content and b'class="deletelink"' not in response.content


def test_it_links_an_envelope_to_its_evidence_bundle_download(auditor_client, admin_world):
    envelope = admin_world.envelope
    evidence_url = f"/admin/execution/actionenvelope/{envelope.pk}/evidence/"

    page = auditor_client.get(change_url(envelope)).content.decode()
    download = auditor_client.get(evidence_url)

    assert f'<a href="{evidence_url}" download>Download the evidence bundle</a>' in page
    assert download.status_code == 200
    assert download["Content-Type"] == "application/json"
    assert download["Content-Disposition"] == f'attachment; filename="evidence-{envelope.pk}.json"'
    bundle = json.loads(download.content)
    assert (bundle["type"], bundle["action_id"]) == ("ActionEvidence", envelope.action_id)
    assert [item["event"]["event_type"] for item in bundle["ledger_events"]] == ["envelope.accepted"]
    assert bundle["records"]["receipt"]["receipt_id"] == admin_world.receipt.receipt_id
    assert auditor_client.get("/admin/execution/actionenvelope/999999/evidence/").status_code == 404


def test_it_links_an_envelope_to_its_ledger_trail(auditor_client, admin_world):
    envelope = admin_world.envelope
    trail_url = f"/admin/core/ledgerevent/?action_id={envelope.action_id}"

    page = auditor_client.get(change_url(envelope)).content.decode()
    trail = auditor_client.get(trail_url)

    assert f'<a href="{trail_url}">Every ledger event of this action</a>' in page
    assert [(e.event_type, e.resource_id) for e in trail.context["cl"].result_list] == [
        ("envelope.accepted", envelope.action_id)]


def test_the_evidence_download_keeps_exact_numbers_and_verifies_offline(auditor_client, api):
    parameters = {"amount": Decimal("49.99"), "currency": "USD", "rate": Decimal("0.1")}
    limit = Decimal("100.0000000000000000001")  # no binary double holds it
    action_id = make_executed_action(api, parameters=parameters, amount_max=limit)["action_id"]
    envelope = ActionEnvelope.objects.get(action_id=action_id)

    download = auditor_client.get(f"/admin/execution/actionenvelope/{envelope.pk}/evidence/")

    assert download.status_code == 200
    bundle = numbers.loads(download.content)
    assert bundle["records"]["envelope"]["parameters"] == parameters
    assert bundle["records"]["capability"]["allowed_parameter_ranges"]["amount"]["max"] == limit
    assert verify_evidence(bundle, kids={get_signer().kid})["action_id"] == action_id


def _envelope_page_queries(client, envelope) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(change_url(envelope)).status_code == 200
    return len(queries)


def test_it_renders_an_envelope_page_in_the_same_queries_whatever_its_approvals(auditor_client, db):
    few = make_admin_world()
    many = make_admin_world(extra_approvals=6)
    assert Approval.objects.filter(decision__decision_id=many.envelope.decision_ref).count() == 7

    assert _envelope_page_queries(auditor_client, few.envelope) == \
        _envelope_page_queries(auditor_client, many.envelope)


def _changelist_queries(client, model) -> int:
    opts = model._meta
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/admin/{opts.app_label}/{opts.model_name}/")
    assert response.status_code == 200
    return len(queries)


def test_it_lists_every_model_without_a_query_per_row(auditor_client, db):
    # One loop rather than one test per model: three worlds in all instead of three per model.
    models = sorted((m for m in apps.get_models() if admin.site.is_registered(m)), key=lambda m: m._meta.label)
    make_admin_world()
    one = {model._meta.label: _changelist_queries(auditor_client, model) for model in models}
    make_admin_world()
    make_admin_world()

    three = {model._meta.label: _changelist_queries(auditor_client, model) for model in models}

    assert all(model._default_manager.count() >= 1 for model in models)
    assert three == one


@pytest.mark.parametrize(("model", "params", "expected"), [
    (Task, lambda w: {"task_id": w.world.task.task_id}, lambda w: [w.world.task.pk]),
    (Decision, lambda w: {"agent_id": w.world.agent_id}, lambda w: [w.world.decision.pk]),
    (Decision, lambda w: {"status": "finalised", "task_id": w.world.task.task_id}, lambda w: [w.world.decision.pk]),
    (Approval, lambda w: {"task_id": w.world.task.task_id}, lambda w: [w.world.approval.pk]),
    (ActionEnvelope, lambda w: {"agent_id": w.world.agent_id}, lambda w: [w.envelope.pk]),
    (ActionEnvelope, lambda w: {"decision_ref": w.envelope.decision_ref}, lambda w: [w.envelope.pk]),
], ids=["task-by-task", "decision-by-agent", "decision-by-status-and-task", "approval-by-task",
        "envelope-by-agent", "envelope-by-decision"])
def test_it_filters_by_task_agent_and_status(model, params, expected, auditor_client, db):
    target = make_admin_world()
    make_admin_world()
    opts = model._meta

    response = auditor_client.get(f"/admin/{opts.app_label}/{opts.model_name}/", params(target))

    assert response.status_code == 200
    assert sorted(obj.pk for obj in response.context["cl"].result_list) == sorted(expected(target))


def test_it_filters_the_envelopes_by_date_and_search(auditor_client, db):
    target = make_admin_world()
    make_admin_world()
    today = target.envelope.accepted_at

    by_date = auditor_client.get("/admin/execution/actionenvelope/", {
        "accepted_at__year": today.year, "accepted_at__month": today.month, "accepted_at__day": today.day})
    by_search = auditor_client.get("/admin/execution/actionenvelope/", {"q": target.envelope.action_id})

    assert by_date.context["cl"].result_count == 2
    assert [e.pk for e in by_search.context["cl"].result_list] == [target.envelope.pk]


def test_it_links_a_task_to_every_list_filtered_on_it(auditor_client, admin_world):
    task = admin_world.world.task

    page = auditor_client.get(change_url(task)).content.decode()

    for model in (Decision, Approval, ActionEnvelope):
        opts = model._meta
        assert f"/admin/{opts.app_label}/{opts.model_name}/?task_id={task.task_id}" in page
