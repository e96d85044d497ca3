from django.urls import re_path
from rest_framework.routers import SimpleRouter

from .views import LedgerEventViewSet
from .views_envelopes import ActionEnvelopeViewSet, ReplayView

router = SimpleRouter(trailing_slash=False)
router.register("ledger-events", LedgerEventViewSet, basename="ledger-event")
router.register("action-envelopes", ActionEnvelopeViewSet, basename="action-envelope")

urlpatterns = router.urls + [
    re_path(r"^replay/(?P<action_id>[A-Za-z0-9._:-]{1,128})$", ReplayView.as_view(), name="replay"),
]
