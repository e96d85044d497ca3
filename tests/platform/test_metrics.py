"""``GET /metrics`` in process (docs/operations.md): Prometheus text, the token guard, and what moves the counters.

The multi-process case (gunicorn workers and a Celery worker adding up their figures) is
tests/platform/test_operating_live.py.
"""

import pytest

from core.models import LedgerHead, OutboxMessage
from execution.models import Operation
from tests.execution.factories import make_world

from .metrics_text import families, samples, value

pytestmark = pytest.mark.django_db

FAMILIES = {
    "agp_http_requests": "counter",
    "agp_http_request_duration_seconds": "histogram",
    "agp_envelopes": "counter",
    "agp_envelope_failed_checks": "counter",
    "agp_operations": "gauge",
    "agp_operations_ended": "counter",
    "agp_ledger_head_sequence": "gauge",
    "agp_ledger_checkpoint_tree_size": "gauge",
    "agp_ledger_checkpoint_issued_timestamp_seconds": "gauge",
    "agp_connector_calls": "counter",
    "agp_callback_deliveries": "counter",
    "agp_outbox_pending_messages": "gauge",
}


def scrape(api, **headers):
    response = api.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return response.content.decode()


def test_it_answers_prometheus_text_with_every_family_the_contract_lists(api):
    text = scrape(api)

    found = families(text)
    for name, kind in FAMILIES.items():
        assert found.get(name) == kind, (name, found.get(name))


def test_it_counts_requests_by_route_template_method_and_status_and_observes_their_latency(api):
    before = samples(scrape(api))
    api.get("/agp/operations/op_missing")
    api.get("/agp/operations/op_other")
    api.get("/healthz")
    after = samples(scrape(api))

    route = "/agp/operations/{operation_id}"
    assert value(after, "agp_http_requests_total", route=route, method="GET", status="404") - value(
        before, "agp_http_requests_total", route=route, method="GET", status="404") == 2
    assert value(after, "agp_http_requests_total", route="/healthz", method="GET", status="200") - value(
        before, "agp_http_requests_total", route="/healthz", method="GET", status="200") == 1
    assert value(after, "agp_http_request_duration_seconds_count", route=route, method="GET") - value(
        before, "agp_http_request_duration_seconds_count", route=route, method="GET") == 2
    assert not any(labels and "op_missing" in str(labels) for _, labels in after)


def test_it_counts_an_unknown_path_once_under_one_label(api):
    before = samples(scrape(api))
    api.get("/no/such/path/1")
    api.get("/no/such/path/2")
    after = samples(scrape(api))

    assert value(after, "agp_http_requests_total", route="unmatched", method="GET", status="404") - value(
        before, "agp_http_requests_total", route="unmatched", method="GET", status="404") == 2


def test_a_validated_a_refused_and_an_accepted_envelope_move_their_counters(
        api, django_capture_on_commit_callbacks):
    world = make_world()
    before = samples(scrape(api))

    # The counts are made when the transaction commits, which the test's wrapping transaction never does.
    with django_capture_on_commit_callbacks(execute=True):
        assert api.post("/agp/action-envelopes", world.envelope_request(), format="json").status_code == 200
        refused = api.post("/agp/action-envelopes", world.envelope_request(decision_ref="dec_missing"),
                           format="json")
        assert refused.status_code == 422
        assert api.post("/agp/action-envelopes", world.envelope_request(), format="json",
                        HTTP_PREFER="respond-async").status_code == 202
    after = samples(scrape(api))

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("agp_envelopes_total", outcome="validated") == 1
    assert moved("agp_envelopes_total", outcome="rejected") == 1
    assert moved("agp_envelopes_total", outcome="accepted") == 1
    failed = {item["check"] for item in refused.json()["error"]["details"]["failed_checks"]}
    assert "decision" in failed
    for check in failed:
        assert moved("agp_envelope_failed_checks_total", check=check, stage="submission") == 1
    assert moved("agp_envelope_failed_checks_total", check="task", stage="submission") == 0
    route = "/agp/action-envelopes"
    for status in ("200", "422", "202"):
        assert moved("agp_http_requests_total", route=route, method="POST", status=status) == 1


def test_database_gauges_show_the_backlog_and_the_ledger_head(api):
    world = make_world()
    for _ in range(2):
        api.post("/agp/action-envelopes", world.envelope_request(), format="json", HTTP_PREFER="respond-async")

    found = samples(scrape(api))

    assert value(found, "agp_operations", status="pending") == Operation.objects.filter(status="pending").count() == 2
    assert value(found, "agp_operations", status="running") == 0
    assert value(found, "agp_ledger_head_sequence") == LedgerHead.objects.get(pk=1).sequence > 0
    # The test's transaction never commits, so nothing was published: both messages wait.
    assert value(found, "agp_outbox_pending_messages") == OutboxMessage.objects.filter(status="pending").count() == 2


def test_it_refuses_a_scrape_without_the_metrics_token_when_one_is_set(api, settings):
    settings.AGP_METRICS_TOKEN = "scrape-secret-1234"

    missing = api.get("/metrics")
    wrong = api.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-12345")
    basic = api.get("/metrics", HTTP_AUTHORIZATION="Basic scrape-secret-1234")
    right = api.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-1234")

    for refused in (missing, wrong, basic):
        assert refused.status_code == 401
        assert refused["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert b"agp_" not in refused.content
    assert right.status_code == 200
    assert families(right.content.decode())["agp_envelopes"] == "counter"


def test_it_answers_only_get_and_head(api):
    assert api.post("/metrics").status_code == 405
    assert api.head("/metrics").status_code == 200


def test_the_checkpoint_gauges_follow_the_newest_signed_checkpoint(api):
    from core.services import checkpoint_create

    before = samples(scrape(api))
    make_world()
    from core.ledger import ledger_append
    ledger_append(event_type="test.event", resource_type="Test", resource_id="t-1", actor="test", payload={})
    checkpoint = checkpoint_create()
    after = samples(scrape(api))

    assert value(before, "agp_ledger_checkpoint_tree_size") == 0
    assert value(after, "agp_ledger_checkpoint_tree_size") == checkpoint.tree_size > 0
    assert value(after, "agp_ledger_checkpoint_issued_timestamp_seconds") == checkpoint.issued_at.timestamp()
