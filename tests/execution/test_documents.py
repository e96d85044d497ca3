"""The Execution API's signed documents render exactly the fields their schema declares."""

import pytest

from agp_project.signing import get_signer, sign_resource, verify_resource
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


def test_a_receipt_issued_before_the_why_record_still_verifies_as_rendered(api):
    world = make_full_world()
    response = api.post("/agp/action-envelopes", world.envelope_request(), format="json",
                        HTTP_PREFER="respond-async")
    assert operation_execute(operation_id=response.json()["operation_id"], executor="test") == "succeeded"
    receipt = Receipt.objects.get()
    # As a receipt was issued before governance and posted_by were recorded: signed without them.
    issued = {name: value for name, value in receipt_document(receipt).items()
              if name not in ("governance", "posted_by", "signature")}
    Receipt.objects.filter(pk=receipt.pk).update(governance={}, posted_by="", signature=sign_resource(issued))

    rendered = api.get(f"/agp/receipts/{receipt.receipt_id}").json()

    assert "governance" not in rendered and "posted_by" not in rendered
    assert verify_resource(rendered, {"keys": [get_signer().jwk()]})
