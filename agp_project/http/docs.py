"""``GET /agp/docs``: the OpenAPI document as an interactive page (Swagger UI), served from this server.

Swagger UI's files come from the installed drf-spectacular-sidecar package (whitenoise
serves them with the other static files) and its start-up script from this view
(``?script``), so the page loads nothing from anywhere else and runs under a content
security policy that allows only this origin. "Try it out" sends requests to this server;
"Authorize" takes a bearer token or fetches one with the client-credentials grant.
"""

from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularSwaggerSplitView

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                           "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
                           "form-action 'self'")


class ApiDocsView(SpectacularSwaggerSplitView):
    authentication_classes = []
    permission_classes = []
    url_name = "openapi"
    # A page, not a resource: no OPTIONS metadata (it would be rendered through the page's
    # HTML template), so OPTIONS is a 405 like any other method but GET.
    http_method_names = ["get", "head"]

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response
