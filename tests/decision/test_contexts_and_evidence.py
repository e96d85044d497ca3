"""POST/GET /agp/contexts and /agp/evidence-bundles: task-scoped, with server-computed hashes."""

import pytest

from agp_project.canonical import content_hash
from core.models import LedgerEvent
from decision.models import Context, EvidenceBundle
from tests.decision.factories import make_task

pytestmark = pytest.mark.django_db

ITEM = {"uri": "https://evidence.example/runs/1", "sha256": "c" * 64, "kind": "run-log"}


def test_it_stores_a_context_with_its_content_hash(api):
    task = make_task()
    data = {"customer": {"tier": "gold", "since": 2019}, "notes": ["é", 1.5]}

    response = api.post("/agp/contexts", {"context_id": "ctx-1", "task_id": task.task_id, "agent_id": "agent-1",
                                          "data": data}, format="json")

    assert response.status_code == 201
    assert response.json() == {"type": "Context", "context_id": "ctx-1", "task_id": task.task_id,
                               "agent_id": "agent-1", "data": data, "content_hash": content_hash(data),
                               "created_at": response.json()["created_at"], "created_by": "anonymous"}
    row = Context.objects.get(context_id="ctx-1")
    assert (row.data, row.content_hash) == (data, content_hash(data))
    event = LedgerEvent.objects.get(resource_id="ctx-1")
    assert (event.event_type, event.payload["content_hash"]) == ("context.created", content_hash(data))


def test_the_content_hash_does_not_depend_on_key_order(api):
    task = make_task()
    first = api.post("/agp/contexts", {"task_id": task.task_id, "data": {"a": 1, "b": 2}}, format="json").json()
    second = api.post("/agp/contexts", {"task_id": task.task_id, "data": {"b": 2, "a": 1}}, format="json").json()

    assert first["content_hash"] == second["content_hash"]
    assert Context.objects.count() == 2


@pytest.mark.parametrize(("body", "field"), [
    ({"task_id": "no-task", "data": {}}, "task_id"),
    ({"task_id": "{task}", "data": "text"}, "data"),
    ({"task_id": "{task}", "data": {}, "content_hash": "sha256:0"}, "content_hash"),
    ({"task_id": "{task}", "data": {"big": 2**60}}, "data"),
])
def test_it_refuses_bad_contexts(api, body, field):
    task = make_task()
    body = {k: (task.task_id if v == "{task}" else v) for k, v in body.items()}

    response = api.post("/agp/contexts", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["details"]["fields"]
    assert not Context.objects.exists()


def test_it_stores_an_evidence_bundle_with_its_bundle_hash(api):
    task = make_task()
    items = [ITEM, {"uri": "s3://bucket/key", "sha256": "sha256:" + "d" * 64, "kind": "screenshot"}]

    response = api.post("/agp/evidence-bundles", {"bundle_id": "evb-1", "task_id": task.task_id, "items": items},
                        format="json")

    assert response.status_code == 201
    assert response.json()["bundle_hash"] == content_hash(items)
    assert response.json()["items"] == items
    row = EvidenceBundle.objects.get(bundle_id="evb-1")
    assert (row.items, row.bundle_hash) == (items, content_hash(items))
    assert LedgerEvent.objects.get(resource_id="evb-1").payload == {
        "task_id": task.task_id, "bundle_hash": content_hash(items), "items": 2}


@pytest.mark.parametrize(("items", "path"), [
    ([], None),
    ([{**ITEM, "sha256": "XYZ"}], "sha256"),
    ([{**ITEM, "uri": "not a uri"}], "uri"),
    ([{**ITEM, "size": 10}], "size"),
    ([{"uri": ITEM["uri"], "sha256": ITEM["sha256"]}], "kind"),
])
def test_it_refuses_bad_evidence_items(api, items, path):
    task = make_task()

    response = api.post("/agp/evidence-bundles", {"task_id": task.task_id, "items": items}, format="json")

    assert response.status_code == 400
    fields = response.json()["error"]["details"]["fields"]
    assert "items" in fields
    if path is not None:
        assert path in fields["items"]["0"]
    assert not EvidenceBundle.objects.exists()


def test_it_lists_contexts_and_bundles_by_task(api):
    task, other = make_task(), make_task()
    for target in (task, other):
        api.post("/agp/contexts", {"task_id": target.task_id, "data": {}}, format="json")
        api.post("/agp/evidence-bundles", {"task_id": target.task_id, "items": [ITEM]}, format="json")

    contexts = api.get(f"/agp/contexts?task_id={task.task_id}")
    bundles = api.get(f"/agp/evidence-bundles?task_id={task.task_id}")

    assert contexts.status_code == bundles.status_code == 200
    assert [item["task_id"] for item in contexts.json()["items"]] == [task.task_id]
    assert [item["task_id"] for item in bundles.json()["items"]] == [task.task_id]
