"""Content negotiation (agp_project.http.negotiation): DRF's answers, with a shortcut for JSON."""

import itertools

import pytest
from django.test import RequestFactory
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request

from agp_project.http.negotiation import JSONContentNegotiation
from core.models import LedgerEvent
from tests.platform.conftest import assert_envelope

ACCEPTS = [None, "*/*", "application/json", "", "application/json; indent=4", "application/*", "*/*;q=0.1",
           "text/html", "application/xml", "text/html, application/json;q=0.9", "application/json, text/html",
           "APPLICATION/JSON", "application/jsonx"]
QUERIES = ["", "format=json", "format=api", "limit=5", "x=1&format=xml", "%66ormat=xml", "%66ormat=json",
           "f%6Frmat=api", "cursor=a%3Db"]


def _answer(negotiation, accept, query, suffix, renderers):
    extra = {"HTTP_ACCEPT": accept} if accept is not None else {}
    request = Request(RequestFactory().get(f"/agp/tasks?{query}", **extra))
    try:
        renderer, media_type = negotiation.select_renderer(request, renderers, suffix)
    except Exception as exc:  # DRF's 404 (an unknown format) or 406
        return type(exc).__name__
    return type(renderer).__name__, media_type


@pytest.mark.parametrize("renderers", [[JSONRenderer()], [JSONRenderer(), BrowsableAPIRenderer()]],
                         ids=["json only", "json and html"])
def test_it_answers_every_request_as_drf_does(renderers):
    answers = set()
    for accept, query, suffix in itertools.product(ACCEPTS, QUERIES, [None, "json", "api"]):
        ours = _answer(JSONContentNegotiation(), accept, query, suffix, renderers)
        assert ours == _answer(DefaultContentNegotiation(), accept, query, suffix, renderers), (accept, query, suffix)
        answers.add(ours if isinstance(ours, str) else ours[1])
    # The matrix reaches every kind of answer: JSON, JSON with parameters, a 406 and a 404.
    assert {"application/json", "application/json; indent=4", "NotAcceptable", "Http404"} <= answers


def test_it_parses_the_accept_header_only_when_the_shortcut_does_not_apply(monkeypatch):
    parsed = []
    original = DefaultContentNegotiation.get_accept_list
    monkeypatch.setattr(DefaultContentNegotiation, "get_accept_list",
                        lambda self, request: parsed.append(request) or original(self, request))
    for accept in (None, "*/*", "application/json"):
        assert _answer(JSONContentNegotiation(), accept, "", None, [JSONRenderer()]) == (
            "JSONRenderer", "application/json")
    assert parsed == []
    for accept, query in (("text/html", ""), ("application/json; indent=2", ""), (None, "format=json")):
        _answer(JSONContentNegotiation(), accept, query, None, [JSONRenderer()])
    assert len(parsed) == 3


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
