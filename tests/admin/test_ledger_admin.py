"""The ledger in the admin: chain position on each event, and "Verify ledger" naming the first broken link."""

from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.db import transaction
from django.test import Client as DjangoClient

from agp_project.timeutil import iso
from core.admin_base import change_url
from core.ledger import canonical_event, chain_hash, ledger_append
from core.models import Checkpoint, LedgerEvent, LedgerHead

CHANGELIST = "/admin/core/ledgerevent/"
VERIFY = "/admin/core/ledgerevent/verify/"


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]


def test_it_offers_the_verify_button_on_the_ledger_list(auditor_client, admin_world):
    response = auditor_client.get(CHANGELIST)

    assert response.status_code == 200
    assert b'id="verify-ledger"' in response.content
    assert f'action="{VERIFY}"'.encode() in response.content


def test_it_reports_a_ledger_that_verifies(auditor_client, admin_world):
    total = LedgerEvent.objects.count()

    response = auditor_client.post(VERIFY)

    assert response.status_code == 302 and response["Location"] == CHANGELIST
    checkpoint = Checkpoint.objects.get()
    assert messages_of(response) == [
        ("success", f"Ledger verified: all {total} events chain correctly "
                    f"(head hash {LedgerEvent.objects.order_by('-sequence')[0].hash})."),
        ("success", f"Merkle tree verified: the first {checkpoint.tree_size} events make the tree whose root "
                    f"checkpoint {checkpoint.tree_size} signed ({checkpoint.root_hash}).")]
    assert LedgerEvent.objects.count() == total  # verifying writes nothing


def test_it_names_the_first_broken_link_of_a_tampered_ledger(auditor_client, admin_world):
    tampered = admin_world.events[1]
    LedgerEvent.objects.filter(sequence=tampered.sequence).update(payload={"rewritten": True})

    response = auditor_client.post(VERIFY)

    [(level, text), tree] = messages_of(response)
    assert level == "error"
    assert "FAILED: the first broken link is event" in text
    assert f'<a href="{change_url(tampered)}">#{tampered.sequence}</a>' in text
    assert f"({tampered.sequence - 1} events before it verified)" in text
    # The payload is bound by payload_hash, which the chain checks; the tree's leaves are the chained fields.
    assert tree[0] == "success"


def test_it_reports_events_cut_from_the_tail(auditor_client, admin_world):
    last = LedgerEvent.objects.order_by("-sequence")[0]
    sequence = last.sequence
    last.delete()

    response = auditor_client.post(VERIFY)

    [(level, text), tree] = messages_of(response)
    assert level == "error"
    assert f"FAILED at sequence {sequence}" in text
    assert "no longer in the table" in text
    assert tree == ("error", f"Merkle tree verification FAILED against checkpoint {sequence}: "
                             f"ledger event #{sequence} is missing.")


def test_it_shows_the_newest_checkpoint_on_the_ledger_list(auditor_client, admin_world):
    checkpoint = Checkpoint.objects.get()

    page = auditor_client.get(CHANGELIST).content.decode()

    assert f"tree size {checkpoint.tree_size}</a>" in page
    assert f"<code>{checkpoint.root_hash}</code>" in page


def test_it_finds_an_event_rewritten_together_with_the_chain_after_it(auditor_client, admin_world):
    # Whoever rewrites an event and recomputes every hash after it keeps the chain intact;
    # the checkpoint's signed root (and the stored tree) still holds the old event.
    rewritten = admin_world.events[0]
    prev_hash = rewritten.prev_hash
    for event in LedgerEvent.objects.filter(sequence__gte=rewritten.sequence).order_by("sequence"):
        actor = "mallory" if event.sequence == rewritten.sequence else event.actor
        event_hash = chain_hash(prev_hash, canonical_event(
            sequence=event.sequence, event_id=event.event_id, event_type=event.event_type,
            resource_type=event.resource_type, resource_id=event.resource_id, actor=actor,
            payload_hash=event.payload_hash, recorded_at=iso(event.recorded_at)))
        LedgerEvent.objects.filter(sequence=event.sequence).update(actor=actor, prev_hash=prev_hash, hash=event_hash)
        prev_hash = event_hash
    LedgerHead.objects.filter(pk=1).update(hash=prev_hash)

    response = auditor_client.post(VERIFY)

    [chain, tree] = messages_of(response)
    assert chain[0] == "success"
    assert tree == ("error", f"Merkle tree verification FAILED against checkpoint {Checkpoint.objects.get().tree_size}: "
                             f"the leaf of ledger event #{rewritten.sequence} is not the one the stored tree holds: "
                             "the event changed after it was added.")


def test_it_refuses_a_get_on_verify(auditor_client, admin_world):
    assert auditor_client.get(VERIFY).status_code == 405


def test_it_refuses_verify_to_staff_who_cannot_view_the_ledger(db, admin_world):
    user = User.objects.create_user(username="intern", password="x", is_staff=True)
    client = DjangoClient()
    client.force_login(user)

    assert client.post(VERIFY).status_code == 403
    assert DjangoClient().post(VERIFY).status_code == 302  # anonymous: to the login page


def test_it_shows_an_event_with_its_chain_position(auditor_client, admin_world):
    first, middle, last = admin_world.events[-3:]

    page = auditor_client.get(change_url(middle)).content.decode()

    assert middle.prev_hash == first.hash
    assert f"<div class=\"readonly\">{middle.prev_hash}</div>" in page
    assert f"<div class=\"readonly\">{middle.hash}</div>" in page
    assert f'<a href="{change_url(first)}">← #{first.sequence}</a>' in page
    assert f'<a href="{change_url(last)}">#{last.sequence} →</a>' in page
    assert "intact: extends its predecessor, and its hashes recompute" in page
    assert f"decision {admin_world.world.decision.decision_id}" in page  # the resource, linked


def test_it_flags_a_tampered_event_on_its_own_page(auditor_client, admin_world):
    event = admin_world.events[0]
    LedgerEvent.objects.filter(sequence=event.sequence).update(payload={"rewritten": True})

    page = auditor_client.get(change_url(event)).content.decode()

    assert "broken: payload does not hash to payload_hash" in page


def test_it_filters_the_ledger_by_resource(auditor_client, admin_world):
    envelope_event = admin_world.events[-1]

    response = auditor_client.get(CHANGELIST, {"resource_id": envelope_event.resource_id})

    assert [e.sequence for e in response.context["cl"].result_list] == [envelope_event.sequence]


def test_it_filters_the_ledger_by_task_and_by_action_and_links_each_event_to_both_trails(auditor_client,
                                                                                       admin_world):
    task_created, _decision_event, envelope_accepted = admin_world.events
    action_id, task_id = admin_world.envelope.action_id, admin_world.world.task.task_id
    with transaction.atomic():
        operation_event = ledger_append(event_type="operation.created", resource_type="Operation",
                                        resource_id=admin_world.operation.operation_id, actor="agp-worker",
                                        payload={"task_id": task_id, "action_id": action_id})

    def listed(**query):
        response = auditor_client.get(CHANGELIST, query)
        assert response.status_code == 200
        return [e.sequence for e in response.context["cl"].result_list]

    assert listed(task_id=task_id) == [operation_event.sequence, task_created.sequence]
    assert listed(action_id=action_id) == [operation_event.sequence, envelope_accepted.sequence]
    assert listed(task_id=task_id, action_id=action_id) == [operation_event.sequence]
    assert listed(q=action_id) == [operation_event.sequence, envelope_accepted.sequence]
    assert listed(action_id="act-none") == []

    page = auditor_client.get(change_url(operation_event)).content.decode()
    assert f'<a href="{CHANGELIST}?task_id={task_id}">its whole trail</a>' in page
    assert f'<a href="{CHANGELIST}?action_id={action_id}">its whole trail</a>' in page
