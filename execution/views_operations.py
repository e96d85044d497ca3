"""``GET /agp/operations/{id}`` and the receipts collection (docs/reference/execution.md, docs/reference/ledger.md)."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from agp_project import errors
from agp_project.http.schema import NOT_FOUND, documented, error_responses, example
from agp_project.http.viewsets import AGPViewSet, Cited, CreateMixin, request_sees
from auth_tokens.permissions import holds_scope, scopes_require
from auth_tokens.scopes import (
    BACKTEST_OPERATION_WRITE_SCOPES,
    ENVELOPE_OPERATION_WRITE_SCOPES,
    OPERATION_SCOPES,
    OPERATION_WRITE_SCOPES,
)
from decision.backtests import backtest_cancel
from decision.models import Backtest
from decision.selectors import backtest_by_operation
from decision.serializers import backtest_operation_representation

from . import api_docs
from .cancellation import operation_cancel
from .choices import CANCEL_ANY_SCOPE
from .models import Operation, Receipt
from .runner import receipt_submit
from .serializers_operations import (
    OperationSerializer,
    OperationStatusSerializer,
    ReceiptSerializer,
    operation_representation,
)


class OperationViewSet(AGPViewSet):
    """The asynchronous operations: an envelope's (``Prefer: respond-async``) and a backtest's.

    Both kinds share the path and the Operation body; a backtest's adds ``progress``. The
    envelope's operation is looked for first (one query), then the backtest's.
    """

    queryset = Operation.objects.all()
    serializer_class = OperationSerializer
    collection = "operations"
    lookup_field = "operation_id"
    scope_group = "execution"
    tenant_field = "envelope__root_principal"

    # The spec lists the path in both the Execution and the Decision API groups.
    read_scopes = OPERATION_SCOPES
    # Which of these a PATCH needs depends on the operation's kind (checked once it is found).
    write_scopes = {"partial_update": OPERATION_WRITE_SCOPES}

    def _not_found(self, operation_id: str) -> errors.NotFound:
        return errors.NotFound(f"No operation with id {operation_id!r}.")

    def _visible(self, operation_id: str) -> tuple[Operation | None, Backtest | None]:
        """The envelope's operation or the backtest with this operation id, when it is one of the
        caller's tenants'; 404 otherwise."""
        operation = self.scoped(Operation.objects.filter(operation_id=operation_id)).first()
        if operation is not None:
            return operation, None
        backtest = backtest_by_operation(operation_id=operation_id)
        if backtest is None or not request_sees(self.request, backtest.root_principal):
            raise self._not_found(operation_id)
        return None, backtest

    @extend_schema(summary=api_docs.OPERATION_SUMMARY, description=api_docs.OPERATION + (
                       "\n\nA backtest's operation also carries `progress` (`evaluations` re-evaluated of `total`)."),
                   responses={200: OperationSerializer, **error_responses({404: NOT_FOUND})},
                   operation_id="operations_retrieve")
    def retrieve(self, request, *args, **kwargs):
        operation, backtest = self._visible(kwargs[self.lookup_field])
        if operation is not None:
            return Response(operation_representation(operation, request=request))
        return Response(backtest_operation_representation(backtest, request=request))

    @extend_schema(request=OperationStatusSerializer, operation_id="operations_partial_update",
                   summary=api_docs.CANCEL_SUMMARY, description=api_docs.CANCEL,
                   examples=example(api_docs.CANCEL_EXAMPLE),
                   responses={200: OperationSerializer, **error_responses({
                       404: NOT_FOUND, 409: "AGP_INVALID_TRANSITION: the operation is not pending (an envelope's), "
                                           "or has ended (a backtest's)."})})
    def partial_update(self, request, *args, **kwargs):
        self.parse(serializer_class=OperationStatusSerializer)  # {"status": "cancelled"} only
        operation_id = kwargs[self.lookup_field]
        operation, backtest = self._visible(operation_id)
        if operation is not None:
            scopes_require(request, ENVELOPE_OPERATION_WRITE_SCOPES)
            operation = operation_cancel(operation_id=operation_id, actor=self.actor,
                                         operator=holds_scope(request, CANCEL_ANY_SCOPE))
            return Response(operation_representation(operation, request=request))
        scopes_require(request, BACKTEST_OPERATION_WRITE_SCOPES)
        if backtest.requested_by != self.actor and not request.user.is_operator:
            raise errors.Forbidden(f"only the client that asked for backtest {backtest.backtest_id!r}, or an "
                                   f"operator, may cancel it", field="operation_id")
        backtest = backtest_cancel(operation_id=operation_id, actor=self.actor)
        return Response(backtest_operation_representation(backtest, request=request))


@documented(ReceiptSerializer, api_docs.RECEIPTS, create={
    409: "AGP_CONFLICT: the receipt id exists; AGP_INVALID_TRANSITION: the operation does not wait for a receipt "
         "(not external, not running, or already ended); AGP_FROZEN: a freeze of the agent, the task's root "
         "principal, the tool or everything stands (the operation is being cancelled)."})
class ReceiptViewSet(CreateMixin, AGPViewSet):
    """Signed receipts of executed operations; ``POST`` completes an ``external`` operation."""

    queryset = Receipt.objects.all()
    serializer_class = ReceiptSerializer
    collection = "receipts"
    lookup_field = "receipt_id"
    scope_group = "execution"
    filter_fields = {"action_id": "action_id", "operation_id": "operation_id", "status": "status"}
    tenant_field = "operation__envelope__root_principal"
    cited = {"operation_id": Cited(Operation, "operation_id", "envelope__root_principal", "operation")}


    def perform_create(self, validated, actor):
        return receipt_submit(actor=actor, **validated)
