"""A test-only URLconf: the service's URLs plus views that fail or stall on purpose.

Used with ``@pytest.mark.urls("tests.platform.urls")``.
"""

import threading

from django.db import OperationalError
from django.http import JsonResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from agp_project.urls import handler400, handler403, handler404, handler500
from agp_project.urls import urlpatterns as service_urlpatterns
from core.ledger import ledger_append_client_event

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]

SECRET_DETAIL = "secret-internal-detail-4242"

# The slow view waits for ``release``; ``entered`` tells the test it is inside the view.
slow_entered = threading.Event()
slow_release = threading.Event()
# While set, the flaky view writes a ledger event and then fails with a 500.
flaky_failing = threading.Event()


class Boom(APIView):
    authentication_classes = []
    permission_classes = []

    def get(self, request):
        raise RuntimeError(SECRET_DETAIL)


class DatabaseDown(APIView):
    authentication_classes = []
    permission_classes = []

    def get(self, request):
        raise OperationalError(f"connection refused {SECRET_DETAIL}")


def plain_boom(request):
    raise RuntimeError(SECRET_DETAIL)


def plain_database_down(request):
    raise OperationalError(f"connection refused {SECRET_DETAIL}")


class SlowAppend(APIView):
    """POST: wait until released, then append one client ledger event (201)."""

    authentication_classes = []
    permission_classes = []

    def post(self, request):
        slow_entered.set()
        if not slow_release.wait(timeout=30):
            return JsonResponse({"released": False}, status=504)
        event = ledger_append_client_event(event_type="client.slow", resource_type="test", resource_id="slow",
                                           actor="anonymous", payload=request.data)
        return Response({"sequence": event.sequence}, status=201)


class FlakyAppend(APIView):
    """POST: append a ledger event (its own transaction), then fail while ``flaky_failing`` is set.

    Under an Idempotency-Key the request runs in one transaction, so the failure must undo
    the append along with the key.
    """

    authentication_classes = []
    permission_classes = []

    def post(self, request):
        event = ledger_append_client_event(event_type="client.flaky", resource_type="test", resource_id="flaky",
                                           actor="anonymous", payload=request.data)
        if flaky_failing.is_set():
            raise RuntimeError(SECRET_DETAIL)
        return Response({"sequence": event.sequence}, status=201)


urlpatterns = [
    path("agp/test/boom", Boom.as_view()),
    path("agp/test/database-down", DatabaseDown.as_view()),
    path("agp/test/plain-boom", plain_boom),
    path("agp/test/plain-database-down", plain_database_down),
    path("agp/test/slow-append", SlowAppend.as_view()),
    path("agp/test/flaky-append", FlakyAppend.as_view()),
    *service_urlpatterns,
]
