"""A callback receiver that accepts connections and never answers (blackholed) blocks nothing.

The receiver that refuses connections is tests/execution/test_callbacks.py's, in process
(test_it_records_a_receiver_that_is_down); this one hangs instead, the worse case for a
worker: each attempt ends at AGP_CALLBACK_TIMEOUT_SECONDS (2 s for test workers), the
operation has already ended, and other operations keep executing meanwhile.
"""

import socket
import time

import pytest

from execution.models import CallbackAttempt, Operation
from tests.execution.factories import make_world
from tests.execution.worker import module_worker, poll_until_ended, submit_async, test_broker, wait_for, worker_db  # noqa: F401

pytestmark = pytest.mark.postgres


@pytest.fixture
def blackhole():
    """A listening socket that accepts into its backlog and never reads or answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    listener.close()


def test_it_keeps_executing_while_a_receiver_hangs(api, worker_db, module_worker, settings, blackhole):  # noqa: F811
    settings.AGP_ALLOW_PRIVATE_URLS = True  # the receiver is on 127.0.0.1, as in the worker
    world = make_world()
    started = time.monotonic()
    hung = submit_async(api, world.envelope_request(callback_url=blackhole))["operation_id"]
    others = [submit_async(api, world.envelope_request())["operation_id"] for _ in range(3)]

    assert poll_until_ended(api, hung, module_worker)["status"] == "succeeded"
    assert all(poll_until_ended(api, op, module_worker)["status"] == "succeeded" for op in others)
    assert time.monotonic() - started < 20

    def failed_attempts():
        return CallbackAttempt.objects.filter(operation_id=hung, status="failed").count() >= 2

    wait_for(failed_attempts, timeout=30, message="two timed-out attempts", worker=module_worker)
    assert not CallbackAttempt.objects.filter(operation_id=hung, status="delivered").exists()
    assert Operation.objects.get(operation_id=hung).status == "succeeded"
