"""``GET /agp/operations/{id}`` and the receipts collection (CONTRACT C8, C9)."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from agp_project.http.schema import NOT_FOUND, documented, error_responses, example
from agp_project.http.viewsets import AGPViewSet, CreateMixin
from auth_tokens.scopes import OPERATION_SCOPES

from . import api_docs
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

    @extend_schema(summary=api_docs.OPERATION_SUMMARY, description=api_docs.OPERATION,
                   responses={200: OperationSerializer, **error_responses({404: NOT_FOUND})},
                   operation_id="operations_retrieve")
    def retrieve(self, request, *args, **kwargs):
        return Response(operation_representation(self.get_object(), request=request))

    @extend_schema(request=OperationStatusSerializer, operation_id="operations_partial_update",
                   summary=api_docs.CANCEL_SUMMARY, description=api_docs.CANCEL,
                   examples=example(api_docs.CANCEL_EXAMPLE),
                   responses={200: OperationSerializer, **error_responses({
                       404: NOT_FOUND, 409: "AGP_INVALID_TRANSITION: the operation is not pending."})})
    def partial_update(self, request, *args, **kwargs):
        self.parse(serializer_class=OperationStatusSerializer)  # {"status": "cancelled"} only
        operation = operation_cancel(operation_id=kwargs[self.lookup_field], actor=self.actor)
        return Response(operation_representation(operation, request=request))


@documented(ReceiptSerializer, api_docs.RECEIPTS, create={
    409: "AGP_CONFLICT: the receipt id exists; AGP_INVALID_TRANSITION: the operation does not wait for a receipt "
         "(not external, not running, or already ended)."})
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
