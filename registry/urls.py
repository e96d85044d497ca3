from rest_framework.routers import SimpleRouter

from .views import (
    CapabilityViewSet,
    DelegationViewSet,
    FreezeViewSet,
    LiabilityBindingViewSet,
    PolicySetViewSet,
    RevocationViewSet,
    SkillViewSet,
    TaskViewSet,
)

router = SimpleRouter(trailing_slash=False)
router.register("delegations", DelegationViewSet, basename="delegation")
router.register("policy-sets", PolicySetViewSet, basename="policy-set")
router.register("tasks", TaskViewSet, basename="task")
router.register("capabilities", CapabilityViewSet, basename="capability")
router.register("liability-bindings", LiabilityBindingViewSet, basename="liability-binding")
router.register("skills", SkillViewSet, basename="skill")
router.register("revocations", RevocationViewSet, basename="revocation")
router.register("freezes", FreezeViewSet, basename="freeze")

urlpatterns = router.urls
