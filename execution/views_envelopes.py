"""``/agp/action-envelopes`` and ``/agp/replay/{action_id}`` (docs/reference/execution.md, docs/reference/ledger.md)."""

from django.utils.cache import patch_vary_headers
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from agp_project.http.prefer import EXECUTE, execution_mode, parse_prefer
from agp_project.http.schema import ErrorEnvelopeSerializer, example, read_views
from agp_project import errors
from agp_project.http.viewsets import AGPViewSet, CreateMixin, caller_tenants, query_params, request_sees
from decision.views import CITED_POLICY_SET

from auth_tokens.permissions import holds_scope

from . import api_docs
from .documents import envelope_document
from .evidence import action_evidence
from .models import ActionEnvelope
from .replay import WHAT_IF_SCOPE, replay_action
from .serializers import ActionEvidenceSerializer
from .serializers_envelopes import ActionEnvelopeSerializer, ReplaySerializer
from .serializers_operations import OperationSerializer, operation_representation
from .one_call import action_govern
from .services import envelope_accept, envelope_inputs, envelope_validate
from .views import query_sizes

RETRY_AFTER_SECONDS = "1"


PREFER_PARAMETER = OpenApiParameter(
    name="Prefer", location=OpenApiParameter.HEADER, required=False, type=OpenApiTypes.STR,
    description="RFC 7240. `respond-async`: validate, accept and execute asynchronously (202 Operation). "
                "Absent or `return=representation`: validate only (200 ActionEnvelope). Other preferences "
                "are ignored.")


@extend_schema_view(**read_views(ActionEnvelopeSerializer, api_docs.ACTION_ENVELOPES))
class ActionEnvelopeViewSet(CreateMixin, AGPViewSet):
    """Submit an action envelope (validate, or validate and execute); read accepted envelopes."""

    queryset = ActionEnvelope.objects.all()
    serializer_class = ActionEnvelopeSerializer
    collection = "action-envelopes"
    lookup_field = "action_id"
    scope_group = "execution"
    filter_fields = {"action_id": "action_id", "task_id": "task_id", "agent_id": "agent_id",
                     "decision_ref": "decision_ref", "tool_id": "tool_id"}
    tenant_field = "root_principal"
    agent_fields = ("agent_id",)

    def finalize_response(self, request, response, *args, **kwargs):
        # The answer to the same POST depends on Prefer: caches must key on it (docs/reference/execution.md).
        response = super().finalize_response(request, response, *args, **kwargs)
        patch_vary_headers(response, ["Prefer"])
        return response

    @extend_schema(
        summary=api_docs.ACTION_ENVELOPES.create_summary,
        description=api_docs.ACTION_ENVELOPES.create,
        examples=example(api_docs.ACTION_ENVELOPES.create_example),
        parameters=[PREFER_PARAMETER],
        request=ActionEnvelopeSerializer,
        responses={
            200: OpenApiResponse(ActionEnvelopeSerializer, description="Validated only: the envelope as it would "
                                                                       "execute; nothing reserved or executed."),
            202: OpenApiResponse(OperationSerializer, description="Accepted for asynchronous execution."),
            400: OpenApiResponse(ErrorEnvelopeSerializer, description="AGP_INVALID_REQUEST: malformed body, "
                                                                      "unknown or response-only field."),
            401: OpenApiResponse(ErrorEnvelopeSerializer, description="AGP_UNAUTHENTICATED."),
            403: OpenApiResponse(ErrorEnvelopeSerializer, description="AGP_INSUFFICIENT_SCOPE."),
            409: OpenApiResponse(ErrorEnvelopeSerializer, description="AGP_CONFLICT: the action_id was already "
                                                                      "submitted for execution."),
            422: OpenApiResponse(ErrorEnvelopeSerializer, description="AGP_PREREQUISITE_FAILED: every failed "
                                                                      "check in details.failed_checks "
                                                                      "([{check, reason}])."),
            503: OpenApiResponse(ErrorEnvelopeSerializer, description="AGP_UNAVAILABLE: database or broker "
                                                                      "unreachable; nothing was accepted."),
        },
    )
    def create(self, request, *args, **kwargs):
        preferences = parse_prefer(request.META.get("HTTP_PREFER", ""))
        inputs = envelope_inputs(validated=self.parse(self.bind_acting_agent(request.data)))
        mode = execution_mode(request.META.get("HTTP_PREFER", ""))
        # Without a decision, the task's policy set decides in this request.
        governed = (action_govern(inputs=inputs, actor=self.actor, mode=mode, tenants=self.tenants)
                    if not inputs.decision_ref else None)
        if mode == EXECUTE:
            accepted = governed or envelope_accept(inputs=inputs, actor=self.actor, tenants=self.tenants)
            body = operation_representation(accepted.operation, request=request)
            if governed is not None:
                body |= {"decision_ref": governed.decision_id, "policy_decision_ref": governed.evaluation_id}
            return Response(body, status=status.HTTP_202_ACCEPTED, headers={
                "Location": body["status_url"], "Operation-Location": body["status_url"],
                "Preference-Applied": "respond-async", "Retry-After": RETRY_AFTER_SECONDS})
        envelope = governed.envelope if governed else envelope_validate(inputs=inputs, actor=self.actor,
                                                                        tenants=self.tenants)
        headers = {}
        if preferences.get("return") == "representation":
            headers["Preference-Applied"] = "return=representation"
        return Response(envelope_document(envelope), status=status.HTTP_200_OK, headers=headers)

    @extend_schema(
        summary="Download an action's evidence bundle",
        responses={200: ActionEvidenceSerializer,
                   404: OpenApiResponse(ErrorEnvelopeSerializer, description="No accepted action with this id.")},
        description="Everything an outside party needs to check this action offline: every record that governed "
                    "it, every ledger event of it with its inclusion proof, the signed checkpoint the proofs lead "
                    "to, and the JWKS; signed as a whole. Verify it with `python -m agp_client verify-evidence "
                    "FILE`. When the newest checkpoint does not cover the action's events yet, one is signed first.")
    @action(detail=True, methods=["get"], url_path="evidence")
    def evidence(self, request, action_id=None):
        query_sizes(request)
        self.require_visible(action_id)
        return Response(action_evidence(action_id=action_id, request=request))


class ReplayView(APIView):
    """``GET /agp/replay/{action_id}[?policy_set_id=...]``: original vs current verdicts, and a what-if."""

    scope_group = "execution"
    allowed_params = ("policy_set_id",)

    @extend_schema(
        summary=api_docs.REPLAY_SUMMARY, description=api_docs.REPLAY,
        parameters=[OpenApiParameter("policy_set_id", OpenApiTypes.STR, OpenApiParameter.QUERY, required=False,
                                     description="Also evaluate the action's recorded policy input under this "
                                                 "policy set (what-if). A set other than the one the action's "
                                                 "evaluation used needs the scope agp.policy.write: it runs a "
                                                 "ruleset the caller chose.")],
        responses={200: ReplaySerializer,
                   400: OpenApiResponse(ErrorEnvelopeSerializer, description="Unknown query parameter or "
                                                                             "policy_set_id."),
                   403: OpenApiResponse(ErrorEnvelopeSerializer, description="A what-if under another policy "
                                                                             "set without agp.policy.write."),
                   404: OpenApiResponse(ErrorEnvelopeSerializer, description="No accepted action with this id.")},
    )
    def get(self, request, action_id: str):
        params = query_params(request, self.allowed_params)
        if caller_tenants(request) is not None:
            tenant = ActionEnvelope.objects.filter(action_id=action_id).values_list("root_principal", flat=True).first()
            if not request_sees(request, tenant):
                raise errors.NotFound(f"No accepted action with id {action_id!r}.")
            missing = params.get("policy_set_id") and CITED_POLICY_SET.missing(caller_tenants(request),
                                                                               [params["policy_set_id"]])
            if missing:
                raise errors.invalid_fields({"policy_set_id": [f"No policy set with id {missing[0]!r}."]})

        return Response(replay_action(action_id=action_id, policy_set_id=params.get("policy_set_id"),
                                      any_policy_set=holds_scope(request, WHAT_IF_SCOPE)))
