"""The registry's signed documents render exactly the fields their schema declares."""

import pytest
from rest_framework import serializers

from registry.documents import delegation_document, policy_set_document
from registry.serializers import DelegationChainSerializer, PolicySetSerializer
from tests.execution.factories import make_full_world

pytestmark = pytest.mark.django_db


# Members rendered only when set (older signatures cover documents without them).
WHEN_SET = {"shadow_of": None, "tests": [], "test_summary": None, "governance": {}, "created_by": "", "approver_client": "",
            "approver_signature": "",
            "root_principal": None}



def declared(serializer_class, instance) -> dict:
    """What DRF renders from the serializer's declared fields (the schema), with the type."""
    serializer = serializer_class(instance)
    rendered = serializers.Serializer.to_representation(serializer, instance)
    return {"type": serializer_class.type_name, **{name: value for name, value in rendered.items()
                                                   if not (name in WHEN_SET and value == WHEN_SET[name])}}


def test_a_delegation_link_and_a_policy_set_render_their_declared_fields():
    world = make_full_world()
    for delegation in (world.root_delegation, world.delegation):
        assert delegation_document(delegation) == declared(DelegationChainSerializer, delegation)
    assert policy_set_document(world.policy_set) == declared(PolicySetSerializer, world.policy_set)
