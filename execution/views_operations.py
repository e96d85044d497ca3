"""``GET /agp/operations/{id}`` and the receipts collection (CONTRACT C8, C9)."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from agp_project.http.viewsets import AGPViewSet, CreateMixin
from auth_tokens.scopes import OPERATION_SCOPES

from .models import Operation, Receipt
from .runner import operation_cancel, receipt_submit
from .serializers_operations import (
    OperationSerializer,
    OperationStatusSerializer,
    ReceiptSerializer,
    operation_representation,
)


class OperationViewSet(AGPViewSet):
    """The asynchronous operation of an envelope submitted with ``Prefer: respond-async``."""

    queryset = Operation.objects.all()
    serializer_class = OperationSerializer
    collection = "operations"
    lookup_field = "operation_id"
    scope_group = "execution"
    # The spec lists the path in both the Execution and the Decision API groups.
    read_scopes = OPERATION_SCOPES

    @extend_schema(responses=OperationSerializer, operation_id="operations_retrieve")
    def retrieve(self, request, *args, **kwargs):
        return Response(operation_representation(self.get_object(), request=request))

    @extend_schema(request=OperationStatusSerializer, responses=OperationSerializer,
                   operation_id="operations_partial_update",
                   description="Cancel a pending operation: its budget reservation is released and no worker "
                               "executes it. Any other state is 409 AGP_INVALID_TRANSITION.")
    def partial_update(self, request, *args, **kwargs):
        self.parse(serializer_class=OperationStatusSerializer)  # {"status": "cancelled"} only
        operation = operation_cancel(operation_id=kwargs[self.lookup_field], actor=self.actor)
        return Response(operation_representation(operation, request=request))


class ReceiptViewSet(CreateMixin, AGPViewSet):
    """Signed receipts of executed operations; ``POST`` completes an ``external`` operation."""

    queryset = Receipt.objects.all()
    serializer_class = ReceiptSerializer
    collection = "receipts"
    lookup_field = "receipt_id"
    scope_group = "execution"
    filter_fields = {"action_id": "action_id", "operation_id": "operation_id", "status": "status"}

    def perform_create(self, validated, actor):
        return receipt_submit(actor=actor, **validated)
