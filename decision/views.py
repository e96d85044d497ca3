"""The Decision API: thin viewsets that parse, call one service, render (docs/reference/governance.md)."""

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.response import Response

from agp_project import errors
from agp_project.http.schema import documented, error_responses, example, read_views
from agp_project.http.viewsets import AGPViewSet, Cited, CreateMixin, tenant_of_write
from registry.models import Delegation, PolicySet, Task
from registry.views import refuse_agent_client

from . import api_docs, backtests, selectors, services
from .models import Decision
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
    tenant_field = "task__root_principal"


# What decision records cite, as a caller bound to tenants may see it.
CITED_TASK = Cited(Task, "task_id", "root_principal", "task")
CITED_DECISION = Cited(Decision, "decision_id", "task__root_principal", "decision")
CITED_POLICY_SET = Cited(PolicySet, "policy_set_id", "root_principal", "policy set", shared_when_null=True)


@documented(ContextSerializer, api_docs.CONTEXTS)
class ContextViewSet(DecisionGroupViewSet):
    """Task-scoped context records with a server-computed ``content_hash``."""

    queryset = selectors.context_list()
    serializer_class = ContextSerializer
    collection = "contexts"
    lookup_field = "context_id"
    filter_fields = {"task_id": "task_id", "agent_id": "agent_id"}
    agent_fields = ("agent_id",)
    cited = {"task_id": CITED_TASK}

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
    cited = {"task_id": CITED_TASK}

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
    agent_fields = ("agent_id",)
    cited = {"task_id": CITED_TASK, "policy_set_id": CITED_POLICY_SET}

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
    agent_fields = ("agent_id",)
    cited = {"task_id": CITED_TASK}

    def perform_create(self, validated, actor):
        return services.decision_create(actor=actor, **validated)

    def partial_update(self, request, decision_id=None):
        self.require_own(decision_id)
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
    agent_fields = ("agent_id",)
    cited = {"task_id": CITED_TASK, "decision_ref": CITED_DECISION}

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
    filter_fields = {"decision_ref": "decision_id", "approver": "approver", "verdict": "verdict",
                     "approver_client": "approver_client"}
    write_scopes = {"create": "agp.approval.write"}
    tenant_field = "decision__task__root_principal"
    cited = {"decision_ref": CITED_DECISION}

    def perform_create(self, validated, actor):
        principal = self.request.user
        if principal.kind == "human":
            if validated.get("approver", principal.subject) != principal.subject:
                raise errors.Forbidden(f"a person approves as themselves ({principal.subject!r})", field="approver")
            validated["approver"] = principal.subject
        elif not validated.get("approver"):
            raise errors.invalid_fields({"approver": ["Required: only a person's client approves as itself."]})
        return services.approval_create(actor=actor, approver_kind=principal.kind, **validated)


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
    tenant_field = "root_principal"
    cited = {"task_id": CITED_TASK, "decision_ref": CITED_DECISION}

    def perform_create(self, validated, actor):
        # Naming only an action, it is raised in the caller's tenant (an operator's: in every
        # tenant); naming a task or decision, in theirs (the service takes it from them).
        named = validated.get("task_id") or validated.get("decision_ref")
        tenant = None if named else tenant_of_write(self.request, None)
        return services.escalation_create(actor=actor, root_principal=tenant, **validated)

    def partial_update(self, request, escalation_id=None):
        refuse_agent_client(request, "resolve an escalation")
        self.require_own(escalation_id)
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
    agent_fields = ("agent_id",)
    cited = {"task_id": CITED_TASK, "delegation_id": Cited(Delegation, "delegation_id", "root_principal", "delegation")}

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
    """What a candidate policy set would have decided on recorded evaluations (docs/reference/governance.md); creating needs agp.policy.write."""

    queryset = selectors.backtest_list()
    serializer_class = BacktestSerializer
    collection = "backtests"
    lookup_field = "backtest_id"
    filter_fields = {"policy_set_id": "policy_set_id", "baseline_policy_set_id": "baseline_policy_set_id",
                     "status": "status", "task_id": "task_id", "agent_id": "agent_id",
                     "root_principal": "root_principal"}
    write_scopes = {"create": "agp.policy.write"}
    tenant_field = "root_principal"
    cited = {"policy_set_id": CITED_POLICY_SET, "baseline_policy_set_id": CITED_POLICY_SET, "task_id": CITED_TASK}

    def create(self, request, *args, **kwargs):
        validated = self.parse()
        self.check_citations(validated)
        validated["root_principal"] = tenant_of_write(request, validated.get("root_principal"))
        backtest = backtests.backtest_create(actor=self.actor, **validated)
        body = backtest_operation_representation(backtest, request=request)
        return Response(body, status=status.HTTP_202_ACCEPTED, headers={
            "Location": body["status_url"], "Operation-Location": body["status_url"], "Retry-After": "1"})
