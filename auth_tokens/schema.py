"""The OpenAPI description of authentication: an OAuth 2.0 client-credentials scheme whose
per-operation requirements list the scopes of which a token needs one (CONTRACT C3)."""

from django.core.exceptions import ImproperlyConfigured
from drf_spectacular.extensions import OpenApiAuthenticationExtension

from .permissions import required_scopes

SCOPE_DESCRIPTIONS = {
    "agp.registry.read": "GET tasks, capabilities, delegations, skills, policy sets, revocations, liability bindings",
    "agp.registry.write": "POST/PATCH tasks, capabilities, liability bindings, delegations, skills, policy sets",
    "agp.decision.read": "GET contexts, evidence bundles, decisions, policy evaluations, approvals, escalations, "
                         "commerce sessions, impact assessments, operations",
    "agp.decision.write": "POST/PATCH contexts, evidence bundles, decisions, escalations, commerce sessions, "
                          "impact assessments",
    "agp.execution.read": "GET action envelopes, receipts, ledger events, replay, operations",
    "agp.execution.write": "POST action envelopes, receipts, ledger events",
    "agp.approval.write": "POST approvals",
    "agp.policy.write": "POST policy evaluations",
    "agp.revocation.write": "POST revocations",
}


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "auth_tokens.authentication.BearerTokenAuthentication"
    name = "oauth2"

    def get_security_definition(self, auto_schema):
        return {
            "type": "oauth2",
            "description": "Bearer tokens (HS256 JWTs) from the client-credentials grant. Required only when the "
                           "server sets AGP_AUTH_SECRET. A token needs any one of an operation's listed scopes.",
            "flows": {"clientCredentials": {"tokenUrl": "/oauth/token", "scopes": SCOPE_DESCRIPTIONS}},
        }

    def get_security_requirement(self, auto_schema):
        try:
            scopes = required_scopes(auto_schema.view, auto_schema.method.upper())
        except ImproperlyConfigured:
            return {self.name: []}
        # Any one of the scopes suffices: alternative requirement objects (OR).
        return [{self.name: [scope]} for scope in scopes]
