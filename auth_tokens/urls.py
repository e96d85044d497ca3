from rest_framework.routers import SimpleRouter

from .views import ApiClientViewSet

router = SimpleRouter(trailing_slash=False)
router.register("clients", ApiClientViewSet, basename="api-client")

urlpatterns = router.urls
