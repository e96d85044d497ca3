"""The client behind an ``/agp/`` request, known before the view runs.

The idempotency middleware (``core.idempotency``) scopes keys by client, and runs before
DRF authenticates the request in the view. This middleware checks the bearer token first
and leaves the client's id on the request as ``agp_client_id`` (None when the request is not
authenticated); the view's authentication reuses the same check (``authentication._principal``
keeps it on the request), so a token is checked once.
"""

from .authentication import client_id_for_request


class ClientMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/agp/"):
            request.agp_client_id = client_id_for_request(request)
        return self.get_response(request)
