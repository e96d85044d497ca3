"""``/agp/ledger-events``: the hash-chained ledger (docs/reference/ledger.md) and its transparency log (docs/reference/ledger.md)."""

import re

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework.decorators import action
from rest_framework.response import Response

from agp_project import errors
from agp_project.http.schema import ErrorEnvelopeSerializer, documented, error_responses, read_views
from agp_project.http.viewsets import NO_TENANT, AGPViewSet, CreateMixin, query_params, tenant_of_write
from core.ledger import ledger_append_client_event, ledger_events_in_chain
from core.selectors import (
    checkpoint_document,
    checkpoint_list,
    checkpoint_newest,
    ledger_consistency_proof,
    ledger_inclusion_proof,
    ledger_verification,
)

from . import api_docs
from .serializers import (
    CheckpointSerializer,
    ConsistencyProofSerializer,
    InclusionProofSerializer,
    LedgerAndTreeVerificationSerializer,
    LedgerEventSerializer,
)

_SIZE = re.compile(r"[0-9]{1,18}")
SIZE_ERRORS = OpenApiResponse(ErrorEnvelopeSerializer, description=(
    "AGP_INVALID_REQUEST: a size that is not a positive integer, a size past the newest checkpoint (or no "
    "checkpoint yet), an event outside the tree, first larger than second, or an unknown query parameter."))


def query_sizes(request, *, required: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> dict[str, int | None]:
    """The named query parameters as positive integers; anything else in the query is a 400."""
    params = query_params(request, (*required, *optional))
    sizes, bad = {}, {}
    for name in (*required, *optional):
        raw = params.get(name)
        if raw is None:
            if name in required:
                bad[name] = ["This query parameter is required."]
            sizes[name] = None
        elif not _SIZE.fullmatch(raw) or int(raw) < 1:
            bad[name] = ["Must be a positive integer."]
        else:
            sizes[name] = int(raw)
    if bad:
        raise errors.invalid_fields(bad)
    return sizes


def size_parameter(name: str, description: str, required: bool = False) -> OpenApiParameter:
    return OpenApiParameter(name, OpenApiTypes.INT, OpenApiParameter.QUERY, required=required,
                            description=description)


@documented(LedgerEventSerializer, api_docs.LEDGER_EVENTS,
            create={409: "AGP_CONFLICT: an event with this event_id exists."})
class LedgerEventViewSet(CreateMixin, AGPViewSet):
    """The hash-chained ledger: read it, append client events, verify it, prove events in its Merkle tree."""

    serializer_class = LedgerEventSerializer
    collection = "ledger-events"
    lookup_field = "sequence"
    lookup_value_regex = r"[0-9]{1,18}"
    scope_group = "execution"
    filter_fields = {"event_type": "event_type", "resource_type": "resource_type",
                     "resource_id": "resource_id", "actor": "actor", "task_id": "task_id", "action_id": "action_id",
                     "root_principal": "root_principal"}
    # Events of no tenant (API clients, shared policy sets) are shown only to callers of every tenant.
    tenant_field = "root_principal"

    def get_queryset(self):
        return self.scoped(ledger_events_in_chain())

    def perform_create(self, validated, actor):
        # A client's own event belongs to its tenant; a client of several tenants cannot say which.
        tenant = None if self.tenants is None else tenant_of_write(self.request, None)
        return ledger_append_client_event(actor=actor, root_principal=tenant, **validated)

    @extend_schema(summary=api_docs.VERIFY_SUMMARY, description=api_docs.VERIFY,
                   responses={200: LedgerAndTreeVerificationSerializer, **error_responses()})
    @action(detail=False, methods=["get"], url_path="verify")
    def verify(self, request):
        query_params(request, ())
        return Response(ledger_verification())

    @extend_schema(summary="Get the newest checkpoint", responses={
        200: CheckpointSerializer,
        404: OpenApiResponse(ErrorEnvelopeSerializer, description="AGP_NOT_FOUND: no checkpoint has been made yet.")},
        description="The newest signed checkpoint of the ledger's Merkle tree: `tree_size`, `root_hash` "
                    "(RFC 9162), `issued_at` and the Ed25519 `signature` over the other three.")
    @action(detail=False, methods=["get"], url_path="checkpoint")
    def checkpoint(self, request):
        query_sizes(request)
        newest = checkpoint_newest()
        if newest is None:
            raise errors.NotFound("No checkpoint has been made yet.")
        return Response(checkpoint_document(newest))

    @extend_schema(
        summary="Prove an event is in the ledger",
        parameters=[size_parameter("tree_size", "The size of the tree to prove the event in; default the newest "
                                                "checkpoint's. At most the newest checkpoint's.")],
        responses={200: InclusionProofSerializer, 400: SIZE_ERRORS},
        description="The RFC 9162 inclusion proof (audit path, sibling first) of the event with this sequence "
                    "(leaf index sequence - 1) in the tree of tree_size events.")
    @action(detail=True, methods=["get"], url_path="proof")
    def proof(self, request, sequence=None):
        sizes = query_sizes(request, optional=("tree_size",))
        self.require_visible(int(sequence))

        return Response(ledger_inclusion_proof(sequence=int(sequence), tree_size=sizes["tree_size"]))

    @extend_schema(
        summary="Prove the ledger only grew",
        parameters=[size_parameter("first", "The size of the older tree.", required=True),
                    size_parameter("second", "The size of the newer tree; default the newest checkpoint's.")],
        responses={200: ConsistencyProofSerializer, 400: SIZE_ERRORS},
        description="The RFC 9162 consistency proof that the tree of `second` events extends the tree of `first` "
                    "events (empty when they are equal).")
    @action(detail=False, methods=["get"], url_path="consistency")
    def consistency(self, request):
        sizes = query_sizes(request, required=("first",), optional=("second",))
        return Response(ledger_consistency_proof(first=sizes["first"], second=sizes["second"]))


@extend_schema_view(**read_views(CheckpointSerializer, api_docs.CHECKPOINTS))
class CheckpointViewSet(AGPViewSet):
    """``/agp/ledger-events/checkpoints``: every signed checkpoint, newest (largest) first."""

    queryset = checkpoint_list()
    serializer_class = CheckpointSerializer
    collection = "ledger-events/checkpoints"
    lookup_field = "tree_size"
    lookup_value_regex = r"[0-9]{1,18}"
    scope_group = "execution"
    # Checkpoints reveal hashes, not records: every authenticated client may read them.
    tenant_field = NO_TENANT


    def get_object(self):
        tree_size = self.kwargs["tree_size"]
        checkpoint = self.get_queryset().filter(tree_size=tree_size).first()
        if checkpoint is None:
            raise errors.NotFound(f"No checkpoint of tree size {tree_size}.")
        return checkpoint
