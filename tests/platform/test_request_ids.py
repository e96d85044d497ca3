"""Request ids (docs/operations.md): kept when sane, made otherwise, echoed, stored with the work they cause;
and the JSON log line that carries them."""

import json
import logging

import pytest

from agp_project.logformat import JsonFormatter, RequestIdFilter
from agp_project.request_context import bind_request_id, unbind_request_id
from core.models import OutboxMessage
from tests.execution.factories import make_world

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("sent", ["req-42", "01J9Z3Q5F2:abc.def_ghi", "a" * 128, "b64+/=@x"])
def test_it_keeps_a_sane_request_id_and_echoes_it(api, sent):
    response = api.get("/healthz", HTTP_X_REQUEST_ID=sent)

    assert response["X-Request-ID"] == sent


@pytest.mark.parametrize("sent", [None, "", "has space", "a" * 129, "new\nline", "ünïcode", "<script>"])
def test_it_makes_a_request_id_when_none_or_an_unusable_one_is_sent(api, sent):
    headers = {} if sent is None else {"HTTP_X_REQUEST_ID": sent}
    first = api.get("/healthz", **headers)["X-Request-ID"]
    second = api.get("/healthz", **headers)["X-Request-ID"]

    assert len(first) == 32 and int(first, 16) >= 0
    assert first != second and first != sent


def test_error_answers_echo_the_request_id_too(api):
    assert api.get("/agp/tasks/task_missing", HTTP_X_REQUEST_ID="rid-404")["X-Request-ID"] == "rid-404"
    assert api.get("/no/such/path", HTTP_X_REQUEST_ID="rid-unrouted")["X-Request-ID"] == "rid-unrouted"
    too_large = api.post("/agp/tasks", data=b"{}", content_type="application/json",
                         HTTP_X_REQUEST_ID="rid-413", CONTENT_LENGTH=str(10 * 1024 * 1024))
    assert too_large.status_code == 413 and too_large["X-Request-ID"] == "rid-413"


def test_the_outbox_message_of_an_accepted_envelope_carries_the_request_id(api):
    world = make_world()
    response = api.post("/agp/action-envelopes", world.envelope_request(), format="json",
                        HTTP_PREFER="respond-async", HTTP_X_REQUEST_ID="rid-accepted-1")

    assert response.status_code == 202
    message = OutboxMessage.objects.get(task_name="agp.execute_operation", args=[response.json()["operation_id"]])
    assert message.request_id == "rid-accepted-1"


def _record(message="hello %s", args=("world",), exc_info=None, name="agp.test"):
    record = logging.LogRecord(name, logging.WARNING, __file__, 1, message, args, exc_info)
    RequestIdFilter().filter(record)
    return record


def test_a_json_log_line_is_one_object_with_the_bound_request_id():
    token = bind_request_id("rid-log-1")
    try:
        line = JsonFormatter().format(_record())
    finally:
        unbind_request_id(token)

    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "hello world"
    assert entry["request_id"] == "rid-log-1"
    assert (entry["level"], entry["logger"]) == ("WARNING", "agp.test")
    assert entry["time"].endswith("Z") and "task" not in entry
    assert json.loads(JsonFormatter().format(_record()))["request_id"] is None


def test_a_json_log_line_keeps_a_traceback_on_one_line():
    try:
        raise ValueError("broken\nacross lines")
    except ValueError:
        import sys

        line = JsonFormatter().format(_record(exc_info=sys.exc_info()))

    assert "\n" not in line
    entry = json.loads(line)
    assert "ValueError: broken\nacross lines" in entry["exception"]
