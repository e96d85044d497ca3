"""``/agp/clients``: API clients as the API shows them (never a secret's hash)."""

from rest_framework import serializers

from agp_project.http.serializers import IdField, StrictSerializer

from .kinds import ClientKind
from .scopes import ALL_SCOPES


class ApiClientSerializer(StrictSerializer):
    """An API client: who it is (kind and bindings) and what it may do (scopes)."""

    type_name = "ApiClient"

    client_id = IdField(required=False)
    kind = serializers.ChoiceField(choices=ClientKind.choices)
    agent_id = serializers.CharField(max_length=128, required=False, help_text="The agent an agent client acts for.")
    subject = serializers.CharField(max_length=256, required=False,
                                    help_text="The person a human client is, such as an e-mail address.")
    tenants = serializers.ListField(child=serializers.CharField(max_length=128), required=False, max_length=100,
                                    help_text="The root principals it is bound to; none for an operator, `*` for "
                                              "an auditor of every tenant.")
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ALL_SCOPES), required=False,
                                   max_length=len(ALL_SCOPES), help_text="Left out: the kind's default scopes.")
    description = serializers.CharField(max_length=256, required=False, allow_blank=True)
    jwks = serializers.JSONField(required=False, help_text=(
        "Public keys (a JWK Set of OKP Ed25519 or EC P-256 keys, each with a `kid`) for private_key_jwt, DPoP "
        "and signed delegations and approvals."))
    require_dpop = serializers.BooleanField(required=False, help_text="Issue it only DPoP-bound tokens.")
    is_active = serializers.BooleanField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


class ApiClientCreatedSerializer(ApiClientSerializer):
    """The answer to a create or a rotation: the client with its secret, shown this once."""

    client_secret = serializers.CharField(read_only=True)


class ApiClientChangeSerializer(StrictSerializer):
    """``PATCH /agp/clients/{id}``: disable or enable it, rotate its secret, or change its scopes or description."""

    type_name = "ApiClient"

    is_active = serializers.BooleanField(required=False)
    rotate_secret = serializers.BooleanField(required=False)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ALL_SCOPES), required=False,
                                   max_length=len(ALL_SCOPES))
    description = serializers.CharField(max_length=256, required=False, allow_blank=True)
    jwks = serializers.JSONField(required=False, help_text="Replaces the client's public keys ({\"keys\": []}: none).")
    require_dpop = serializers.BooleanField(required=False)

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError({"non_field_errors": ["Nothing to change."]})
        if attrs.get("rotate_secret") is False:
            raise serializers.ValidationError({"rotate_secret": ["Send true to rotate, or leave it out."]})
        return attrs
