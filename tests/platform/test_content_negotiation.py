"""Content negotiation: the service answers JSON, and refuses another type in the error envelope."""

import pytest

from core.models import LedgerEvent
from tests.platform.conftest import assert_envelope


@pytest.mark.django_db
def test_the_api_answers_json_and_refuses_another_type_in_the_envelope(api):
    event = {"event_type": "client.note", "resource_type": "task", "resource_id": "tsk_1", "payload": {"n": 1}}
    refused = api.post("/agp/ledger-events", event, format="json", HTTP_ACCEPT="text/html")
    error = assert_envelope(refused, 400, "AGP_INVALID_REQUEST")
    assert error["message"] == "Responses are application/json only."
    assert LedgerEvent.objects.filter(event_type="client.note").count() == 0
    for accept in (None, "application/json", "*/*"):
        extra = {"HTTP_ACCEPT": accept} if accept else {}
        created = api.post("/agp/ledger-events", event, format="json", **extra)
        assert created.status_code == 201, created.content
        assert created["Content-Type"] == "application/json"
        assert created.json()["event_type"] == "client.note"
    assert LedgerEvent.objects.filter(event_type="client.note").count() == 3
