from django.conf import settings
from django.contrib.auth.hashers import check_password, make_password
from django.db import models

from core.fields import ExactJSONField

from .kinds import ClientKind


class Client(models.Model):
    """An API client of the client-credentials grant, and who it is (docs/reference/identity.md).

    ``kind`` and its bindings (``agent_id`` for an agent, ``subject`` for a person,
    ``tenants`` for every kind but an operator) are fixed when the client is created: a
    request's identity is read from them, never from its body.

    The secret is kept only as a password hash. ``tokens_not_before`` is moved forward when
    the secret is rotated or the client is disabled: tokens issued before it stop working,
    so a leaked secret's tokens die with the rotation, not an hour later. The check itself
    uses ``token_generation``, bumped at the same moments and carried in each token as
    ``gen``: ``iat`` has whole-second precision, so a timestamp comparison would let a token
    minted in the same second as the rotation survive it.
    """

    client_id = models.CharField(max_length=128, unique=True)
    secret_hash = models.CharField(max_length=256)
    scopes = ExactJSONField(default=list)
    kind = models.CharField(max_length=16, choices=ClientKind.choices)
    agent_id = models.CharField(max_length=128, blank=True, default="")
    subject = models.CharField(max_length=256, blank=True, default="")
    # Root principals; empty for an operator, ["*"] for an auditor of every tenant.
    tenants = ExactJSONField(default=list, blank=True)
    is_active = models.BooleanField(default=True)
    description = models.CharField(max_length=256, blank=True, default="")
    tokens_not_before = models.DateTimeField(null=True, blank=True)
    token_generation = models.PositiveIntegerField(default=0)
    # Public keys (a JWK Set) for private_key_jwt, DPoP and signed statements; empty: none.
    jwks = ExactJSONField(default=dict, blank=True)
    # Only DPoP-bound tokens are issued to it (docs/reference/identity.md, "Keys").
    require_dpop = models.BooleanField(default=False)
    # A person's sign-in to the approvals inbox (docs/reference/approvals.md): the admin user
    # who approves in the browser as this human client, its subject and tenants.
    user = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="agp_client")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["client_id"]
        verbose_name = "API client"

    def __str__(self):
        return self.client_id

    def set_secret(self, secret: str) -> None:
        self.secret_hash = make_password(secret)

    def check_secret(self, secret: str) -> bool:
        return check_password(secret, self.secret_hash)


class UsedJti(models.Model):
    """A spent ``jti`` of a client assertion or a DPoP proof, kept until what carried it expires.

    The unique key is what makes a jti single-use across every web process
    (``auth_tokens.possession.jti_use_once``); ``key`` is the SHA-256 of its namespace and the jti.
    """

    key = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField(db_index=True)
