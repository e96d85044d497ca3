"""The client library drives a whole execution: validate, submit, wait on the Operation,
read the signed receipt, replay. A live gunicorn server and a real Celery worker share the
PostgreSQL test database and a Redis broker queue of this test session. A refused envelope's
PrerequisiteFailedError is tests/agp_client/test_client_units.py's, the refusal itself
tests/execution/test_checks.py's."""

import pytest

from agp_client import AGPClient, ConflictError
from agp_project.signing import get_signer
from execution.models import Receipt
from tests.execution.factories import make_full_world
from tests.execution.worker import module_worker, test_broker  # noqa: F401 - fixtures

from .conftest import CLIENT_ID, CLIENT_SECRET, start_live_server

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("live_db")]


@pytest.fixture(scope="module")
def executing_agp(django_db_setup, django_db_blocker, tmp_path_factory, test_broker, module_worker):  # noqa: F811
    """A server that publishes to the worker's queue and signs with the worker's key."""
    server = start_live_server(tmp_path_factory, django_db_blocker, signing_key=get_signer().private_key,
                               AGP_BROKER_URL=test_broker.url, AGP_CELERY_QUEUE=test_broker.queue)
    yield server
    server.stop()


def test_it_submits_an_envelope_and_waits_for_its_signed_receipt(executing_agp):
    world = make_full_world()
    body = world.envelope_request()
    # verify_signatures: the envelope, the receipts page and the receipt were verified as they arrived.
    with AGPClient(executing_agp.url, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, backoff=0.1,
                   verify_signatures=True) as client:
        envelope = client.action_envelopes.validate(**body)
        assert envelope["action_id"] == body["action_id"]
        assert client.verify_signature(envelope) is True
        assert client.verify_signature({**envelope, "operation": "delete"}) is False

        operation = client.action_envelopes.submit(**body, callback_url=None)
        assert operation["status"] == "pending"
        done = client.operations.wait(operation, timeout=60, poll_interval=0.2)
        assert done["status"] == "succeeded", done
        assert done["operation_id"] == operation["operation_id"]

        receipts = list(client.receipts.list(action_id=body["action_id"]))
        assert len(receipts) == 1
        assert receipts[0]["status"] == "succeeded"
        assert client.verify_signature(receipts[0]) is True
        assert receipts[0]["governance"]["decision_id"] == world.decision.decision_id
        assert client.receipts.get(receipts[0]["receipt_id"]) == receipts[0]

        with pytest.raises(ConflictError):
            client.action_envelopes.submit(**body)
        replay = client.replay(body["action_id"])
        assert replay["original"]["verdict"] == "cleared" and replay["matches"] is True
    assert Receipt.objects.filter(action_id=body["action_id"]).count() == 1
