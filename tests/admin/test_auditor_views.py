"""The auditor's pages (docs/operations.md): the dashboard, an action's timeline, a delegation tree.

Read-only, for staff who may view the records; every record's signature is checked against
the service's own key; the pictures are SVG drawn on the server.
"""

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client as DjangoClient
from django.urls import reverse

from core.ledger_verification import ledger_verify
from decision.models import Approval
from execution.models import Receipt
from tests.execution.factories import make_world

from .audit_world import make_audited_action

pytestmark = pytest.mark.django_db


@pytest.fixture
def audited(api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        return make_audited_action(api)


def test_the_dashboard_shows_integrity_traffic_refusals_operations_and_escalations(auditor_client, audited):
    response = auditor_client.get(reverse("audit:dashboard"))

    assert response.status_code == 200
    page = response.content.decode()
    verification = ledger_verify()
    assert f"Verified: all {verification.events} events chain correctly" in page
    assert "No signed checkpoint yet." in page
    # Today's bar: one executed, one refused (and one accepted on its way to executed).
    figures = response.context["figures"]
    assert figures.envelopes_per_day["executed"][-1] == 1
    assert figures.envelopes_per_day["rejected"][-1] == 1
    assert figures.envelopes_per_day["accepted"][-1] == 1
    assert "class='bar bar-executed'" in page and "class='bar bar-rejected'" in page
    assert ("capability", "submission", 1) in figures.refusals
    assert figures.operations_by_status == {"pending": 0, "running": 0, "succeeded": 1, "failed": 0,
                                            "cancelled": 0}
    assert figures.open_escalation_count == 0
    assert figures.active_freezes == [] and 'id="active-freezes"' in page
    assert "<script" not in page.split('id="content-main"')[1]


def test_the_dashboard_counts_open_escalations_and_names_a_broken_chain(auditor_client, audited):
    from core.models import LedgerEvent
    from decision.models import Escalation

    Escalation(escalation_id="esc_open_1", task=audited.world.task, raised_by="risk-bot", reason="looks odd",
               created_at=audited.envelope.accepted_at).save()
    tampered = LedgerEvent.objects.order_by("sequence")[2]
    LedgerEvent.objects.filter(pk=tampered.pk).update(actor="someone-else")

    page = auditor_client.get(reverse("audit:dashboard")).content.decode()

    assert "esc_open_1" in page and "looks odd" in page
    assert f"BROKEN at event #{tampered.sequence}" in page


def test_the_dashboard_lists_the_active_freezes_and_not_the_lifted_ones(auditor_client, api):
    def freeze(target_id, reason):
        response = api.post("/agp/freezes", {"target_type": "agent", "target_id": target_id, "reason": reason},
                            format="json")
        assert response.status_code == 201, response.content
        return response.json()["freeze_id"]

    active = freeze("agent-gone-rogue", "spending spree under review")
    lifted = freeze("agent-cleared", "false alarm")
    assert api.patch(f"/agp/freezes/{lifted}", {"status": "lifted"}, format="json").status_code == 200

    response = auditor_client.get(reverse("audit:dashboard"))

    assert [f.freeze_id for f in response.context["figures"].active_freezes] == [active]
    card = response.content.decode().split('id="active-freezes"')[1].split("</div>")[0]
    assert "Active freezes: <span class=\"agp-big\">1</span>" in card
    assert "agent agent-gone-rogue" in card and "spending spree under review" in card
    assert "agent-cleared" not in card


def test_an_actions_timeline_lists_its_records_in_time_order_with_verified_signatures(auditor_client, audited):
    response = auditor_client.get(reverse("audit:timeline", args=[audited.envelope.action_id]))

    assert response.status_code == 200
    entries = [entry["entry"] for entry in response.context["entries"]]
    kinds = [entry.kind for entry in entries]
    for kind in ("task", "policy evaluation", "decision", "impact assessment", "approval", "action envelope",
                 "operation", "payment", "operation ended", "receipt", "callback"):
        assert kind in kinds, kinds
    assert [entry.at for entry in entries] == sorted(entry.at for entry in entries)
    assert kinds.index("action envelope") < kinds.index("operation ended") < kinds.index("callback")
    signatures = {entry.kind: entry.signature.state for entry in entries}
    for signed in ("impact assessment", "approval", "action envelope", "receipt"):
        assert signatures[signed] == "verified", (signed, signatures)
    for unsigned in ("task", "decision", "operation", "payment", "callback"):
        assert signatures[unsigned] == "unsigned"
    page = response.content.decode()
    assert page.count("✓ signature verified") == 4
    events = [event["event"].event_type for event in response.context["ledger"]]
    assert {"envelope.accepted", "payment.reserved", "operation.succeeded", "receipt.issued",
            "payment.committed", "envelope.executed"} <= set(events)


def test_a_tampered_record_shows_an_invalid_signature_on_the_timeline(auditor_client, audited):
    Receipt.objects.filter(operation_id=audited.operation.operation_id).update(executor="someone-else")
    Approval.objects.filter(pk=audited.world.approval.pk).update(verdict="rejected")

    response = auditor_client.get(reverse("audit:timeline", args=[audited.envelope.action_id]))

    states = {entry["entry"].kind: entry["entry"].signature.state for entry in response.context["entries"]}
    assert states["receipt"] == "invalid" and states["approval"] == "invalid"
    assert states["action envelope"] == "verified"
    assert response.content.decode().count("✗ signature INVALID") == 2


def test_the_timeline_costs_the_same_queries_with_more_approvals(auditor_client, audited, django_assert_num_queries):
    url = reverse("audit:timeline", args=[audited.envelope.action_id])
    auditor_client.get(url)  # warm the session and permission caches
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as one:
        auditor_client.get(url)
    for i in range(4):
        Approval.objects.create(approval_id=f"apr_more_{i}", decision=audited.world.decision, approver=f"a{i}",
                                verdict="approved", created_at=audited.envelope.accepted_at)
    with CaptureQueriesContext(connection) as five:
        auditor_client.get(url)
    assert len(five) == len(one)


def test_a_delegation_tree_is_drawn_with_scope_spend_hops_and_its_revoked_links(auditor_client, audited):
    world = audited.world
    response = auditor_client.get(reverse("audit:delegation-tree", args=[world.delegation.delegation_id]))

    assert response.status_code == 200
    page = response.content.decode()
    start = page.index("class='agp-tree'")
    svg = page[start:page.index("</svg>", start)]
    boxes = re.findall(r"data-delegation='([^']+)'", svg)
    assert set(boxes) == {world.root_delegation.delegation_id, world.delegation.delegation_id,
                          audited.revoked.delegation_id, audited.sibling.delegation_id}
    assert svg.count("class='link focus'") == 1
    assert f"data-delegation='{audited.revoked.delegation_id}'" in svg
    assert svg.count("class='edge revoked'") == 1 and "REVOKED" in svg
    assert f"scope: {world.tool_id}:*" in svg and "spend ≤ 1000 USD · hops left 3" in svg
    assert "spend ≤ 500 USD · hops left 2" in svg
    assert svg.count("✓ signed") == 4
    assert f"data-full='{world.root_principal}'" in svg


def test_a_tree_escapes_what_agents_named_themselves(auditor_client, db):
    from tests.execution.factories import make_delegation

    root = make_delegation(root_principal="acme", delegator="acme", delegate="<script>alert(1)</script>",
                           scope=["crm:*"])
    page = auditor_client.get(reverse("audit:delegation-tree", args=[root.delegation_id])).content.decode()

    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_pages_are_for_staff_who_may_view_the_records(audited, client, db):
    urls = [reverse("audit:dashboard"), reverse("audit:timeline", args=[audited.envelope.action_id]),
            reverse("audit:delegation-tree", args=[audited.world.delegation.delegation_id])]
    staff = User.objects.create_user(username="staff-no-perms", password="x", is_staff=True)
    staff_client = DjangoClient()
    staff_client.force_login(staff)

    for url in urls:
        assert client.get(url).status_code == 302  # to the login page
        assert staff_client.get(url).status_code == 403


def test_the_pages_answer_404_for_unknown_ids_and_refuse_writes(auditor_client, db):
    make_world()
    assert auditor_client.get(reverse("audit:timeline", args=["act_missing"])).status_code == 404
    assert auditor_client.get(reverse("audit:delegation-tree", args=["dlg_missing"])).status_code == 404
    assert auditor_client.post(reverse("audit:dashboard")).status_code == 405


def test_the_admin_links_to_the_new_pages(auditor_client, audited):
    from core.admin_base import change_url

    home = auditor_client.get(reverse("admin:index")).content.decode()
    envelope = auditor_client.get(change_url(audited.envelope)).content.decode()
    delegation = auditor_client.get(change_url(audited.world.delegation)).content.decode()

    assert reverse("audit:dashboard") in home
    assert reverse("audit:timeline", args=[audited.envelope.action_id]) in envelope
    assert reverse("audit:delegation-tree", args=[audited.world.delegation.delegation_id]) in delegation


def test_the_dashboard_says_up_to_which_checkpoint_the_ledger_verifies(auditor_client, audited):
    from core.services import checkpoint_create

    checkpoint = checkpoint_create()
    audited_more = make_world()  # events after the checkpoint: verified by the chain, not yet by a checkpoint
    assert audited_more.task is not None

    response = auditor_client.get(reverse("audit:dashboard"))

    integrity = response.context["figures"].integrity
    assert integrity.checkpoint_size == checkpoint.tree_size and integrity.checkpoint_verified
    page = response.content.decode()
    assert f"Newest signed checkpoint: {checkpoint.tree_size} events" in page
    assert "Verified up to it" in page
