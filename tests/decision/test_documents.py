"""The Decision API's signed documents render exactly the fields their schema declares."""

import pytest

from decision.documents import approval_document, impact_assessment_document
from decision.serializers import ApprovalSerializer, ImpactAssessmentSerializer
from tests.execution.factories import make_full_world
from tests.registry.test_documents import declared

pytestmark = pytest.mark.django_db


def test_an_assessment_and_an_approval_render_their_declared_fields():
    world = make_full_world()
    world.refresh()
    assert impact_assessment_document(world.assessment) == declared(ImpactAssessmentSerializer, world.assessment)
    assert approval_document(world.approval) == declared(ApprovalSerializer, world.approval)
