"""The OpenAPI description of authentication: an OAuth 2.0 client-credentials scheme whose
per-operation requirements list the scopes of which a token needs one (docs/reference/api.md)."""

from django.core.exceptions import ImproperlyConfigured
from drf_spectacular.extensions import OpenApiAuthenticationExtension

from agp_project.http.schema import BODY_ERRORS, error_envelope_response

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
    "agp.revocation.write": "POST revocations, POST and PATCH freezes",
    "agp.admin": "GET, POST and PATCH API clients (operators only)",
}


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "auth_tokens.authentication.BearerTokenAuthentication"
    name = "oauth2"

    def get_security_definition(self, auto_schema):
        return {
            "type": "oauth2",
            "description": "Bearer tokens (HS256 JWTs) from the client-credentials grant. Required only when the "
                           "server sets AGP_AUTH_SECRET. A token needs any one of an operation's listed scopes; "
                           "who it may act for (its client's kind, agent, subject and tenants) is its client's.",

            "flows": {"clientCredentials": {"tokenUrl": "/oauth/token", "scopes": SCOPE_DESCRIPTIONS}},
        }

    def get_security_requirement(self, auto_schema):
        try:
            scopes = required_scopes(auto_schema.view, auto_schema.method.upper())
        except ImproperlyConfigured:
            return {self.name: []}
        # Any one of the scopes suffices: alternative requirement objects (OR).
        return [{self.name: [scope]} for scope in scopes]


TOKEN_PATH = "/oauth/token"
OAUTH_ERRORS = ["invalid_request", "invalid_client", "invalid_grant", "unauthorized_client",
                "unsupported_grant_type", "invalid_scope", "slow_down"]


def _oauth_error(description: str) -> dict:
    return {"description": description, "headers": {"Cache-Control": {"schema": {"type": "string"},
                                                                       "description": "no-store"}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OAuthError"}}}}


def token_endpoint(result, generator, request, public):
    """``POST /oauth/token`` in the OpenAPI document (a drf-spectacular postprocessing hook).

    The endpoint is a plain Django view, since its errors follow RFC 6749 rather than the
    API's error envelope, so the generator does not see it; this hook describes it.
    """
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["TokenRequest"] = {
        "type": "object", "required": ["grant_type"],
        "properties": {
            "grant_type": {"type": "string", "enum": ["client_credentials"]},
            "client_id": {"type": "string", "description": "Your client id (or send it with HTTP Basic)."},
            "client_secret": {"type": "string", "format": "password",
                              "description": "Your client secret (or send it with HTTP Basic)."},
            "scope": {"type": "string", "description": "Space-separated scopes, to get fewer than the client "
                                                       "holds; left out, the token carries them all."},
        },
    }
    schemas["TokenResponse"] = {
        "type": "object", "required": ["access_token", "token_type", "expires_in", "scope"],
        "properties": {
            "access_token": {"type": "string", "description": "Send it as `Authorization: Bearer <access_token>`."},
            "token_type": {"type": "string", "enum": ["bearer"]},
            "expires_in": {"type": "integer", "description": "Seconds the token stays valid."},
            "scope": {"type": "string", "description": "The scopes granted, space-separated."},
        },
    }
    schemas["OAuthError"] = {
        "type": "object", "required": ["error", "error_description"],
        "description": "An OAuth 2.0 error (RFC 6749, section 5.2), the shape OAuth client libraries read.",
        "properties": {"error": {"type": "string", "enum": OAUTH_ERRORS}, "error_description": {"type": "string"}},
    }
    result.setdefault("components", {}).setdefault("securitySchemes", {})["clientBasic"] = {
        "type": "http", "scheme": "basic", "description": "Client id and secret as HTTP Basic credentials."}
    result.setdefault("paths", {})[TOKEN_PATH] = {"post": {
        "operationId": "oauth_token_create",
        "tags": ["oauth"],
        "summary": "Get an access token",
        "description": (
            "The OAuth 2.0 client-credentials grant. Authenticate your client with `client_id` and "
            "`client_secret` in the form, or with HTTP Basic (not both), and get a bearer token for the API. Ask "
            "for fewer scopes with `scope`. Tokens expire after `expires_in` seconds: get a new one then. "
            "Errors follow OAuth 2.0 rather than the API's error envelope: `invalid_client` (401) when the "
            "client cannot be authenticated, `invalid_request`, `unsupported_grant_type` or `invalid_scope` "
            "(400) otherwise, and `slow_down` (429, with `Retry-After`) after too many failed attempts. On a "
            "server with authentication off no token is needed, and this answers `invalid_request`."),
        "security": [{}, {"clientBasic": []}],
        "requestBody": {"required": True, "content": {"application/x-www-form-urlencoded": {
            "schema": {"$ref": "#/components/schemas/TokenRequest"},
            "examples": {"ClientCredentials": {
                "summary": "Client credentials in the form",
                "value": {"grant_type": "client_credentials", "client_id": "billing-agent",
                          "client_secret": "s3cr3t-from-your-operator", "scope": "agp.execution.write"}}}}}},
        "responses": {
            "200": {"description": "A bearer token.",
                    "headers": {"Cache-Control": {"schema": {"type": "string"}, "description": "no-store"}},
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenResponse"}}}},
            "400": _oauth_error("`invalid_request` (a missing or duplicated parameter, a body that is not a form, "
                                "authentication off on this server), `unsupported_grant_type` or `invalid_scope` "
                                "(a scope the client does not hold)."),
            "401": _oauth_error("`invalid_client`: unknown client, wrong secret, disabled client or malformed "
                                "HTTP Basic credentials."),
            "429": _oauth_error("`slow_down`: too many failed client authentications from this address or for "
                                "this client in the current minute; retry after `Retry-After` seconds."),
            # The body-size middleware answers before the view, in the API's error envelope.
            **{code: error_envelope_response(text) for code, text in BODY_ERRORS.items()},
        },
    }}
    return result
