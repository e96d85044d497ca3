"""What authentication costs per request, and the bootstrap client under concurrent first use."""

import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from auth_tokens.models import Client
from auth_tokens.scopes import ALL_SCOPES
from auth_tokens.services import client_authenticate
from core.models import LedgerEvent, LedgerHead


def _count_queries(api, **headers) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = api.get("/agp/ledger-events", **headers)
    assert response.status_code == 200
    return len(queries)


@pytest.mark.django_db
def test_it_costs_one_indexed_query_per_authenticated_request(api, settings, make_token):
    token = make_token()
    with_token = _count_queries(api, HTTP_AUTHORIZATION=f"Bearer {token}")
    settings.AGP_AUTH_SECRET = None
    without = _count_queries(api)
    assert with_token - without == 1


@pytest.mark.django_db
def test_it_reads_the_client_once_even_when_the_idempotency_middleware_asks_too(api, settings, make_token,
                                                                                ledger_head):
    token = make_token()

    def keyed_write(key: str, **headers) -> int:
        body = {"event_type": "client.x", "resource_type": "X", "resource_id": key}
        with CaptureQueriesContext(connection) as queries:
            response = api.post("/agp/ledger-events", body, format="json", HTTP_IDEMPOTENCY_KEY=key, **headers)
        assert response.status_code == 201
        return len(queries)

    with_token = keyed_write("key-1", HTTP_AUTHORIZATION=f"Bearer {token}")
    settings.AGP_AUTH_SECRET = None
    without = keyed_write("key-2")
    assert with_token - without == 1
    assert LedgerEvent.objects.filter(event_type="client.x").count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_creates_the_bootstrap_client_once_under_concurrent_first_use(settings):
    LedgerHead.objects.get_or_create(pk=1)
    settings.AGP_AUTH_SECRET = "x" * 48
    settings.AGP_CLIENT_ID, settings.AGP_CLIENT_SECRET = "boot", "boot-secret-0123456789abcdef0123456789"
    barrier = threading.Barrier(8)
    results, failures = [], []

    def authenticate():
        barrier.wait()
        try:
            results.append(client_authenticate(client_id="boot", secret="boot-secret-0123456789abcdef0123456789"))
        except Exception as exc:  # noqa: BLE001 - asserted below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=authenticate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(results) == 8 and all(r is not None and r.client_id == "boot" for r in results)
    assert Client.objects.filter(client_id="boot").count() == 1
    assert Client.objects.get(client_id="boot").scopes == list(ALL_SCOPES)
    assert LedgerEvent.objects.filter(event_type="api_client.created", resource_id="boot").count() == 1
