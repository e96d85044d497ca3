"""Strict request parsing and rendering of the registry's stops: revocations and freezes
(docs/reference/api.md, docs/reference/governance.md), as ``registry.serializers`` does the
other registry resources.
"""

import re

from rest_framework import serializers

from agp_project.http.serializers import IdField, SignatureSerializer, StrictSerializer

from .choices import FreezeStatus, FreezeTarget, RevocationTarget
from .documents import freeze_document
from .serializers import TOOL_MESSAGE, TOOL_PATTERN, AgentField


# --- revocations --------------------------------------------------------------------------
class RevocationSerializer(StrictSerializer):
    """An immediate, irreversible, cascading revocation of a delegation, capability, agent, skill or binding."""

    type_name = "Revocation"

    revocation_id = IdField(required=False)
    target_type = serializers.ChoiceField(choices=RevocationTarget.choices)
    target_id = AgentField()
    reason = serializers.CharField(max_length=4096, required=False, allow_blank=True)
    revoked_by = serializers.CharField(max_length=128, required=False, allow_blank=True,
                                       help_text="Defaults to the calling client.")
    revoked_at = serializers.DateTimeField(read_only=True)
    root_principal = serializers.CharField(read_only=True, allow_null=True,
                                           help_text="The tenant of what was revoked; null when it spans tenants.")
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")


# --- freezes ------------------------------------------------------------------------------
class FreezeSerializer(StrictSerializer):
    """An emergency stop of an agent, a root principal, a tool, or everything.

    ``target_id`` is the agent, principal or tool id; absent (rendered null) for ``all``.
    The signature covers the freeze as rendered: issued at creation, issued again on lifting.
    """

    type_name = "Freeze"

    freeze_id = IdField(required=False)
    target_type = serializers.ChoiceField(choices=FreezeTarget.choices)
    target_id = AgentField(required=False, allow_null=True,
                           help_text="The agent, root principal or tool id; absent for `all`.")
    reason = serializers.CharField(max_length=4096)
    frozen_by = serializers.CharField(max_length=128, required=False,
                                      help_text="Defaults to the calling client.")
    status = serializers.ChoiceField(choices=FreezeStatus.choices, read_only=True)
    lifted_at = serializers.DateTimeField(read_only=True, allow_null=True)
    lifted_by = serializers.CharField(read_only=True, allow_null=True)
    root_principal = AgentField(required=False, allow_null=True, help_text=(
        "The one tenant the freeze reaches (a person's freeze of an agent of one of their tenants); left out by "
        "an operator, it reaches every tenant. For target_type root_principal it is the target."))
    signature = SignatureSerializer(read_only=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")

    def validate(self, attrs):
        target_type, target_id = attrs["target_type"], attrs.get("target_id")
        if target_type == FreezeTarget.ALL:
            if target_id is not None:
                raise serializers.ValidationError({"target_id": ["Must be absent when target_type is 'all'."]})
        elif not target_id:
            raise serializers.ValidationError({"target_id": [f"Required when target_type is {target_type!r}."]})
        elif target_type == FreezeTarget.TOOL and not re.fullmatch(TOOL_PATTERN, target_id):
            raise serializers.ValidationError({"target_id": [TOOL_MESSAGE]})
        return attrs

    def to_representation(self, instance):
        return freeze_document(instance)


class FreezeLiftSerializer(StrictSerializer):
    """``PATCH /agp/freezes/{id}``: ``{"status": "lifted", "lifted_by"}`` (``lifted_by`` defaults to the client)."""

    type_name = "Freeze"

    status = serializers.ChoiceField(choices=FreezeStatus.choices)
    lifted_by = serializers.CharField(max_length=128, required=False)
