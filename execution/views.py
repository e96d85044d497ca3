from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.response import Response

from agp_project.http.schema import documented, error_responses
from agp_project.http.viewsets import AGPViewSet, CreateMixin
from core.ledger import ledger_append_client_event, ledger_verify
from core.models import LedgerEvent

from . import api_docs
from .serializers import LedgerEventSerializer, LedgerVerificationSerializer


@documented(LedgerEventSerializer, api_docs.LEDGER_EVENTS,
            create={409: "AGP_CONFLICT: an event with this event_id exists."})
class LedgerEventViewSet(CreateMixin, AGPViewSet):
    """The hash-chained ledger: read it, append client events, verify the chain."""

    queryset = LedgerEvent.objects.all()
    serializer_class = LedgerEventSerializer
    collection = "ledger-events"
    lookup_field = "sequence"
    lookup_value_regex = r"[0-9]{1,18}"
    scope_group = "execution"
    filter_fields = {"event_type": "event_type", "resource_type": "resource_type",
                     "resource_id": "resource_id", "actor": "actor"}

    def perform_create(self, validated, actor):
        return ledger_append_client_event(actor=actor, **validated)

    @extend_schema(summary=api_docs.VERIFY_SUMMARY, description=api_docs.VERIFY,
                   responses={200: LedgerVerificationSerializer, **error_responses()})
    @action(detail=False, methods=["get"], url_path="verify")
    def verify(self, request):
        return Response(ledger_verify().as_dict())
