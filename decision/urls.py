from rest_framework.routers import SimpleRouter

from .views import (
    ApprovalViewSet,
    BacktestViewSet,
    CommerceSessionViewSet,
    ContextViewSet,
    DecisionViewSet,
    EscalationViewSet,
    EvidenceBundleViewSet,
    ImpactAssessmentViewSet,
    PolicyEvaluationViewSet,
)

router = SimpleRouter(trailing_slash=False)
router.register("contexts", ContextViewSet, basename="context")
router.register("evidence-bundles", EvidenceBundleViewSet, basename="evidence-bundle")
router.register("policy-evaluations", PolicyEvaluationViewSet, basename="policy-evaluation")
router.register("decisions", DecisionViewSet, basename="decision")
router.register("impact-assessments", ImpactAssessmentViewSet, basename="impact-assessment")
router.register("approvals", ApprovalViewSet, basename="approval")
router.register("escalations", EscalationViewSet, basename="escalation")
router.register("commerce-sessions", CommerceSessionViewSet, basename="commerce-session")
router.register("backtests", BacktestViewSet, basename="backtest")

urlpatterns = router.urls
