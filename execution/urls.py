from rest_framework.routers import SimpleRouter

from .views import LedgerEventViewSet

router = SimpleRouter(trailing_slash=False)
router.register("ledger-events", LedgerEventViewSet, basename="ledger-event")

urlpatterns = router.urls
