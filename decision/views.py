"""The Decision API: thin viewsets that parse, call one service, render (CONTRACT C7)."""

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.response import Response

from agp_project.http.schema import documented, error_responses, example, read_views
from agp_project.http.viewsets import AGPViewSet, CreateMixin

from . import api_docs, backtests, selectors, services
from .serializers import (
    ApprovalSerializer,
    BacktestOperationSerializer,
    BacktestSerializer,
    CommerceSessionSerializer,
    ContextSerializer,
    DecisionSerializer,
    DecisionStatusSerializer,
    EscalationResolveSerializer,
    EscalationSerializer,
    EvidenceBundleSerializer,
    ImpactAssessmentSerializer,
    PolicyEvaluationSerializer,
    backtest_operation_representation,
)


class DecisionGroupViewSet(CreateMixin, AGPViewSet):
    scope_group = "decision"


@documented(ContextSerializer, api_docs.CONTEXTS)
class ContextViewSet(DecisionGroupViewSet):
    """Task-scoped context records with a server-computed ``content_hash``."""

    queryset = selectors.context_list()
    serializer_class = ContextSerializer
    collection = "contexts"
    lookup_field = "context_id"
    filter_fields = {"task_id": "task_id", "agent_id": "agent_id"}

    def perform_create(self, validated, actor):
        return services.context_create(actor=actor, **validated)


@documented(EvidenceBundleSerializer, api_docs.EVIDENCE_BUNDLES)
class EvidenceBundleViewSet(DecisionGroupViewSet):
    """Task-scoped evidence bundles with a server-computed ``bundle_hash``."""

    queryset = selectors.evidence_bundle_list()
    serializer_class = EvidenceBundleSerializer
    collection = "evidence-bundles"
    lookup_field = "bundle_id"
    filter_fields = {"task_id": "task_id"}

    def perform_create(self, validated, actor):
        return services.evidence_bundle_create(actor=actor, **validated)


@documented(PolicyEvaluationSerializer, api_docs.POLICY_EVALUATIONS, create={
    409: "AGP_CONFLICT: the id already exists; AGP_FROZEN: an active freeze stops the agent or the task's root "
         "principal (`details.freezes`).",
    422: "AGP_PREREQUISITE_FAILED: the policy set is revoked (check `policy_set_not_revoked`)."})
class PolicyEvaluationViewSet(DecisionGroupViewSet):
    """Rego evaluations of a policy set's ruleset for a task (refused for revoked sets)."""

    queryset = selectors.policy_evaluation_list()
    serializer_class = PolicyEvaluationSerializer
    collection = "policy-evaluations"
    lookup_field = "evaluation_id"
    filter_fields = {"policy_set_id": "policy_set_id", "task_id": "task_id", "agent_id": "agent_id"}
    write_scopes = {"create": "agp.policy.write"}

    def perform_create(self, validated, actor):
        return services.policy_evaluation_create(actor=actor, **validated)


@documented(DecisionSerializer, api_docs.DECISIONS, patch=DecisionStatusSerializer, patch_errors={
    409: "AGP_INVALID_TRANSITION: only draft -> finalised (`details.from`, `to`, `allowed`).",
    422: "AGP_IMPACT_ASSESSMENT_REQUIRED: the task needs an impact assessment of this decision first; or "
         "AGP_PREREQUISITE_FAILED: an approve over a "
            "do_not_proceed assessment, or an evaluation of a revoked policy set (`details.failed_checks`)."})
class DecisionViewSet(DecisionGroupViewSet):
    """Decision records: created ``draft``, finalised by PATCH (rule 5 applies)."""

    queryset = selectors.decision_list()
    serializer_class = DecisionSerializer
    collection = "decisions"
    lookup_field = "decision_id"
    filter_fields = {"task_id": "task_id", "agent_id": "agent_id", "status": "status", "outcome": "outcome",
                     "context_ref": "context_id", "policy_evaluation_ref": "policy_evaluation_id"}

    def perform_create(self, validated, actor):
        return services.decision_create(actor=actor, **validated)

    def partial_update(self, request, decision_id=None):
        validated = self.parse(serializer_class=DecisionStatusSerializer)
        decision = services.decision_status_set(actor=self.actor, decision_id=decision_id, **validated)
        return Response(self.render(decision))


@documented(ImpactAssessmentSerializer, api_docs.IMPACT_ASSESSMENTS)
class ImpactAssessmentViewSet(DecisionGroupViewSet):
    """Signed consequence assessments that rule 5 requires before finalising."""

    queryset = selectors.impact_assessment_list()
    serializer_class = ImpactAssessmentSerializer
    collection = "impact-assessments"
    lookup_field = "assessment_id"
    filter_fields = {"task_id": "task_id", "decision_ref": "decision_id", "agent_id": "agent_id",
                     "recommendation": "recommendation"}

    def perform_create(self, validated, actor):
        return services.impact_assessment_create(actor=actor, **validated)


@documented(ApprovalSerializer, api_docs.APPROVALS, create={
    422: "AGP_PREREQUISITE_FAILED: the approver is the decision's own agent (check `approver_independent`)."})
class ApprovalViewSet(DecisionGroupViewSet):
    """Immutable, expiring, signed approvals of decisions (``agp.approval.write`` to create)."""

    queryset = selectors.approval_list()
    serializer_class = ApprovalSerializer
    collection = "approvals"
    lookup_field = "approval_id"
    filter_fields = {"decision_ref": "decision_id", "approver": "approver", "verdict": "verdict"}
    write_scopes = {"create": "agp.approval.write"}

    def perform_create(self, validated, actor):
        return services.approval_create(actor=actor, **validated)


@documented(EscalationSerializer, api_docs.ESCALATIONS, patch=EscalationResolveSerializer, patch_errors={
    409: "AGP_INVALID_TRANSITION: only open -> resolved; resolved is final."})
class EscalationViewSet(DecisionGroupViewSet):
    """Escalation notices: created ``open``, resolved once by PATCH with an outcome."""

    queryset = selectors.escalation_list()
    serializer_class = EscalationSerializer
    collection = "escalations"
    lookup_field = "escalation_id"
    filter_fields = {"task_id": "task_id", "decision_ref": "decision_id", "action_id": "action_id",
                     "status": "status", "outcome": "outcome"}

    def perform_create(self, validated, actor):
        return services.escalation_create(actor=actor, **validated)

    def partial_update(self, request, escalation_id=None):
        validated = self.parse(serializer_class=EscalationResolveSerializer)
        escalation = services.escalation_status_set(actor=self.actor, escalation_id=escalation_id, **validated)
        return Response(self.render(escalation))


@documented(CommerceSessionSerializer, api_docs.COMMERCE_SESSIONS, create={
    409: "AGP_CONFLICT: the id already exists; AGP_DELEGATION_SCOPE_VIOLATION: outside the delegation "
            "(agent, principal, chain, currency, spend limit, expiry; `details.violations`)."})
class CommerceSessionViewSet(DecisionGroupViewSet):
    """Spending windows inside a delegation's spend limit; spent and reserved amounts are server-kept."""

    queryset = selectors.commerce_session_list()
    serializer_class = CommerceSessionSerializer
    collection = "commerce-sessions"
    lookup_field = "session_id"
    filter_fields = {"task_id": "task_id", "agent_id": "agent_id", "delegation_id": "delegation_id",
                     "status": "status"}

    def perform_create(self, validated, actor):
        return services.commerce_session_create(actor=actor, **validated)


@extend_schema_view(
    **read_views(BacktestSerializer, api_docs.BACKTESTS),
    create=extend_schema(
        summary=api_docs.BACKTESTS.create_summary, description=api_docs.BACKTESTS.create,
        request=BacktestSerializer, examples=example(api_docs.BACKTESTS.create_example),
        responses={202: BacktestOperationSerializer, **error_responses({
            409: "AGP_CONFLICT: the id already exists.",
            422: "AGP_PREREQUISITE_FAILED: the candidate policy set is revoked (check `policy_set_not_revoked`).",
            429: "AGP_RATE_LIMITED (retry after `Retry-After` seconds): this client already has as many unfinished "
                 "backtests as it may."})}))
class BacktestViewSet(DecisionGroupViewSet):
    """What a candidate policy set would have decided on recorded evaluations (C14); creating needs agp.policy.write."""

    queryset = selectors.backtest_list()
    serializer_class = BacktestSerializer
    collection = "backtests"
    lookup_field = "backtest_id"
    filter_fields = {"policy_set_id": "policy_set_id", "baseline_policy_set_id": "baseline_policy_set_id",
                     "status": "status", "task_id": "task_id", "agent_id": "agent_id"}
    write_scopes = {"create": "agp.policy.write"}

    def create(self, request, *args, **kwargs):
        backtest = backtests.backtest_create(actor=self.actor, **self.parse())
        body = backtest_operation_representation(backtest, request=request)
        return Response(body, status=status.HTTP_202_ACCEPTED, headers={
            "Location": body["status_url"], "Operation-Location": body["status_url"], "Retry-After": "1"})
