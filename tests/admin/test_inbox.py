"""The approvals inbox (auditing/inbox_views.py): people see what waits for them and approve as themselves."""

import pytest
from django.test import Client as DjangoClient

from decision.models import Approval
from decision.services import decision_create
from execution.models import ActionEnvelope

from .inbox_world import make_inbox_world, make_person

pytestmark = pytest.mark.django_db


def signed_in(user, **kwargs) -> DjangoClient:
    browser = DjangoClient(**kwargs)
    browser.force_login(user)
    return browser


def page(decision_id: str) -> str:
    return f"/admin/approvals/{decision_id}/"


def post(browser, decision_id: str, verdict: str = "approve", reason: str = "checked the figures"):
    return browser.post(f"/admin/approvals/{decision_id}/", {"verdict": verdict, "reason": reason})


@pytest.fixture
def inbox(auth_settings):
    return make_inbox_world()


def test_it_lists_a_waiting_decision_with_its_action_reasons_task_path_and_progress(inbox):
    decision_id = inbox.waiting(limit=80)
    ann, _ = make_person("ann", [inbox.world.root_principal])

    listing = signed_in(ann).get("/admin/approvals/")

    assert listing.status_code == 200
    text = listing.content.decode()
    for expected in (decision_id, "crm:update", "the policy evaluation requires 2 approvals", "0 of 2",
                     inbox.world.task.task_id, f"→ {inbox.world.agent_id}", "500 USD", "none yet"):
        assert expected in text, expected


def test_an_approval_in_the_inbox_is_the_persons_own_and_counts_once(inbox):
    decision_id = inbox.waiting(limit=80)
    ann, ann_client = make_person("ann", [inbox.world.root_principal])
    browser = signed_in(ann)

    answer = post(browser, decision_id)
    again = post(browser, decision_id)

    assert answer.status_code == 302
    approval = Approval.objects.get(decision_id=decision_id)
    assert (approval.approver, approval.approver_client, approval.approver_kind, approval.verdict, approval.reason) == (
        "ann@people.example", ann_client.client_id, "human", "approved", "checked the figures")
    assert again.status_code == 403 and b"already approved" in again.content
    assert Approval.objects.filter(decision_id=decision_id).count() == 1
    assert "1 of 2" in browser.get(page(decision_id)).content.decode()


def test_two_people_complete_an_m_of_n_and_the_same_call_then_clears(inbox):
    decision_id = inbox.waiting(limit=80)
    ann, _ = make_person("ann", [inbox.world.root_principal])
    bob, _ = make_person("bob", [inbox.world.root_principal])

    post(signed_in(ann), decision_id)
    still = inbox.ask(limit=80)
    post(signed_in(bob), decision_id)
    cleared = inbox.ask(limit=80)

    assert still.status_code == 422 and "1 of 2 approvals" in still.content.decode()
    assert cleared.status_code == 200, cleared.content
    assert cleared.json()["decision_ref"] == decision_id
    assert b"it waits for nobody" in signed_in(ann).get(page(decision_id)).content
    assert decision_id not in signed_in(bob).get("/admin/approvals/").content.decode()


def test_a_rejection_is_recorded_with_its_reason_and_withdraws_the_earlier_approvals(inbox):
    decision_id = inbox.waiting(limit=80)
    ann, _ = make_person("ann", [inbox.world.root_principal])
    bob, _ = make_person("bob", [inbox.world.root_principal])

    post(signed_in(ann), decision_id)
    post(signed_in(bob), decision_id, verdict="reject", reason="the customer asked us to stop")

    assert list(Approval.objects.filter(decision_id=decision_id).order_by("pk").values_list("verdict", "reason")) == [
        ("approved", "checked the figures"), ("rejected", "the customer asked us to stop")]
    assert "0 of 2" in signed_in(ann).get(page(decision_id)).content.decode()


def test_the_author_of_a_decision_sees_why_instead_of_buttons_and_is_refused_if_they_post(inbox):
    carol, carol_client = make_person("carol", [inbox.world.root_principal])
    world = inbox.world
    decision = decision_create(actor=carol_client.client_id, task_id=world.task.task_id, agent_id=world.agent_id,
                               outcome="approve", policy_evaluation_ref=world.evaluation.evaluation_id)
    world.evaluation.__class__.objects.filter(pk=world.evaluation.pk).update(require_approval=True)
    browser = signed_in(carol)

    shown = browser.get(page(decision.decision_id))
    refused = post(browser, decision.decision_id)

    assert shown.status_code == 200
    assert b'id="approve"' not in shown.content and b"You asked for this action" in shown.content
    assert refused.status_code == 403 and b"You asked for this action" in refused.content
    assert not Approval.objects.filter(decision_id=decision.decision_id).exists()


def test_a_person_of_another_tenant_neither_sees_nor_approves_it(inbox):
    decision_id = inbox.waiting(limit=60)
    zed, _ = make_person("zed", ["another-tenant"])
    browser = signed_in(zed)

    assert decision_id not in browser.get("/admin/approvals/").content.decode()
    assert browser.get(page(decision_id)).status_code == 404
    assert post(browser, decision_id).status_code == 404
    assert not Approval.objects.filter(decision_id=decision_id).exists()


def test_an_account_not_linked_to_a_person_is_refused(inbox, auditor_client):
    decision_id = inbox.waiting(limit=60)

    assert auditor_client.get("/admin/approvals/").status_code == 403
    assert post(auditor_client, decision_id).status_code == 403
    assert not Approval.objects.filter(decision_id=decision_id).exists()


def test_the_verdict_form_needs_its_csrf_token_and_a_reason(inbox):
    decision_id = inbox.waiting(limit=60)
    ann, _ = make_person("ann", [inbox.world.root_principal])

    forged = post(signed_in(ann, enforce_csrf_checks=True), decision_id)
    no_reason = post(signed_in(ann), decision_id, reason="")
    bad_verdict = post(signed_in(ann), decision_id, verdict="maybe")

    assert forged.status_code == 403
    assert (no_reason.status_code, bad_verdict.status_code) == (400, 400)
    assert not Approval.objects.filter(decision_id=decision_id).exists()


def test_the_timeline_and_the_evidence_bundle_name_who_approved_with_their_client_and_when(inbox, auditor_client):
    decision_id = inbox.waiting(limit=60)
    ann, ann_client = make_person("ann", [inbox.world.root_principal])
    post(signed_in(ann), decision_id)
    accepted = inbox.ask(limit=60, prefer="respond-async")
    assert accepted.status_code == 202, accepted.content
    action_id = ActionEnvelope.objects.get(decision_ref=decision_id).action_id

    timeline = auditor_client.get(f"/admin/audit/actions/{action_id}/timeline/").content.decode()
    evidence = inbox.agent.get(f"/agp/action-envelopes/{action_id}/evidence").json()

    approval = Approval.objects.get(decision_id=decision_id)
    assert (f"approved by ann@people.example (client {ann_client.client_id}, human): checked the figures (cited by "
            "the envelope)") in timeline
    [document] = evidence["records"]["approvals"]
    assert (document["approver"], document["approver_client"], document["reason"], document["created_by"]) == (
        "ann@people.example", ann_client.client_id, "checked the figures", ann_client.client_id)
    assert document["created_at"].startswith(approval.created_at.strftime("%Y-%m-%dT%H:%M:%S"))
    assert document["signature"]["payload_hash"]


def test_the_inbox_reads_the_same_queries_whatever_the_number_of_verdicts(inbox):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    decision_id = inbox.waiting(limit=80)
    ann, _ = make_person("ann", [inbox.world.root_principal])
    people = [make_person(name, [inbox.world.root_principal])[0] for name in ("bob", "cy", "di")]
    browser = signed_in(ann)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert browser.get("/admin/approvals/").status_code == 200
        return len(captured)

    post(signed_in(people[0]), decision_id, verdict="reject", reason="not yet")
    before = queries()
    for person in people[1:]:
        post(signed_in(person), decision_id, verdict="reject", reason="not yet either")

    assert Approval.objects.filter(decision_id=decision_id).count() == 3
    assert queries() == before
