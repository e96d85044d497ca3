from django.urls import re_path
from rest_framework.routers import SimpleRouter

from .views import CheckpointViewSet, LedgerEventViewSet
from .views_envelopes import ActionEnvelopeViewSet, ReplayView
from .views_operations import OperationViewSet, ReceiptViewSet

router = SimpleRouter(trailing_slash=False)
router.register("ledger-events/checkpoints", CheckpointViewSet, basename="checkpoint")
router.register("ledger-events", LedgerEventViewSet, basename="ledger-event")
router.register("action-envelopes", ActionEnvelopeViewSet, basename="action-envelope")
router.register("receipts", ReceiptViewSet, basename="receipt")

urlpatterns = router.urls + [
    re_path(r"^replay/(?P<action_id>[A-Za-z0-9._:-]{1,128})$", ReplayView.as_view(), name="replay"),
]
urlpatterns += [
    re_path(r"^operations/(?P<operation_id>[A-Za-z0-9._:-]{1,128})$",
            OperationViewSet.as_view({"get": "retrieve", "patch": "partial_update"}),
            name="operation-detail"),
]
