from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularJSONAPIView

from agp_project.http.docs import ApiDocsView
from agp_project.metrics import metrics_view
from auth_tokens.views import token
from core.views import ApiIndexView, healthz, jwks, readyz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path(".well-known/jwks.json", jwks, name="jwks"),
    path("oauth/token", token, name="oauth-token"),
    path("agp/openapi.json", SpectacularJSONAPIView.as_view(authentication_classes=[], permission_classes=[]),
         name="openapi"),
    path("agp/", ApiIndexView.as_view(), name="api-index"),
    path("agp/docs", ApiDocsView.as_view(), name="api-docs"),
    path("agp/", include("registry.urls")),

    path("agp/", include("decision.urls")),
    path("agp/", include("execution.urls")),
    path("agp/", include("auth_tokens.urls")),
    path("admin/audit/", include("auditing.urls")),
    path("admin/approvals/", include("auditing.inbox_urls")),
    path("admin/", admin.site.urls),
]

handler400 = "agp_project.http.errors.handler400"
handler403 = "agp_project.http.errors.handler403"
handler404 = "agp_project.http.errors.handler404"
handler500 = "agp_project.http.errors.handler500"
