"""The Execution API's signed documents render exactly the fields their schema declares."""

import pytest

from execution.documents import receipt_document
from execution.models import Receipt
from execution.runner import operation_execute
from execution.serializers_operations import ReceiptSerializer
from tests.execution.factories import make_full_world
from tests.registry.test_documents import declared

pytestmark = pytest.mark.django_db


def test_a_receipt_renders_its_declared_fields(api):
    world = make_full_world()
    response = api.post("/agp/action-envelopes", world.envelope_request(), format="json",
                        HTTP_PREFER="respond-async")
    assert operation_execute(operation_id=response.json()["operation_id"], executor="test") == "succeeded"
    receipt = Receipt.objects.get()
    assert receipt_document(receipt) == declared(ReceiptSerializer, receipt)
