"""A worker that dies mid-execution (docs/reference/execution.md): real worker processes, killed.

An operation whose prerequisite broke before any worker ran it (a revoked delegation) is
tests/execution/test_runner.py's, in process.

Each test starts (and kills) its own workers, so no shared worker may run in this module.

``AGP_RECOVERY_MEASURE_ENV`` (JSON object of AGP_* settings) overrides the settings of the
workers in ``test_a_killed_workers_operations_finish_on_another_worker`` (and lifts its time
bound): docs/reliability.md's recovery figures come from it with the production lease and
recovery periods, e.g. ``AGP_RECOVERY_MEASURE_ENV='{"AGP_OPERATION_LEASE_SECONDS": "30",
"AGP_RECOVER_OPERATIONS_SECONDS": "15", "AGP_RECOVER_PENDING_AFTER_SECONDS": "120"}'``.
"""

import json
import os
import time
from decimal import Decimal

import pytest

from core.ledger_verification import ledger_verify
from decision.models import CommerceSession
from execution.models import Operation, Payment, Receipt
from tests.execution.factories import make_world
from tests.execution.worker import (  # noqa: F401
    ledger_event_types,
    poll_until_ended,
    submit_async,
    test_broker,
    wait_for,
    worker_db,
    worker_factory,
)

pytestmark = pytest.mark.postgres


def test_it_finishes_exactly_once_after_the_worker_is_killed_mid_execution(api, worker_factory, worker_db):
    world = make_world(action_class="transact", allowed_parameter_ranges={
        "amount": {"min": 0, "max": 100}, "currency": {"enum": ["USD"]}, "sleep_seconds": {"min": 0, "max": 30}})
    first = worker_factory.start()
    parameters = {"amount": 50, "currency": "USD", "sleep_seconds": 4}
    accepted = submit_async(api, world.bound_request(parameters=parameters))
    operation_id = accepted["operation_id"]
    wait_for(lambda: Operation.objects.filter(operation_id=operation_id, status="running").exists(),
             message="the operation to start", worker=first)
    time.sleep(0.5)  # well inside the 4 s noop

    first.kill()
    assert Operation.objects.get(operation_id=operation_id).status == "running"
    second = worker_factory.start()
    final = poll_until_ended(api, operation_id, second, timeout=40)

    assert final["status"] == "succeeded", final
    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.attempts == 2
    assert Receipt.objects.filter(operation_id=operation_id).count() == 1
    receipt = Receipt.objects.get(operation_id=operation_id)
    assert receipt.executor.startswith(second.name)
    assert Payment.objects.filter(envelope_id=operation.envelope_id).count() == 1
    assert Payment.objects.get(envelope_id=operation.envelope_id).status == "committed"
    session = CommerceSession.objects.get(session_id=world.session.session_id)
    assert (session.spent_amount, session.reserved_amount) == (Decimal("50"), Decimal("0"))
    assert ledger_event_types(operation_id) == ["operation.created", "operation.running", "operation.reclaimed",
                                        "operation.succeeded"]
    assert ledger_verify().verified


def test_a_killed_workers_operations_finish_on_another_worker(api, worker_factory, worker_db):
    """kill -9 of a worker holding operations: with prefetch 1 (docs/reference/execution.md) it holds only the one it
    runs; the others stay in the queue for the next worker, and the one it ran comes back
    after its lease. With prefetch 4 three more would wait, reserved by the dead worker, for
    the pending recovery (30 s here, 120 s in production)."""
    measure = json.loads(os.environ.get("AGP_RECOVERY_MEASURE_ENV", "{}"))
    world = make_world(allowed_parameter_ranges={"limit": {"min": 1, "max": 100},
                                                 "sleep_seconds": {"min": 0, "max": 30}})
    first = worker_factory.start(concurrency=1, **measure)
    operations = [submit_async(api, world.bound_request(parameters={"limit": 10, "sleep_seconds": 2}))["operation_id"]
                  for _ in range(4)]
    wait_for(lambda: Operation.objects.filter(operation_id__in=operations, status="running").exists(),
             message="an operation to start", worker=first)

    first.kill()
    killed = time.monotonic()
    second = worker_factory.start(**measure)
    for operation_id in operations:
        assert poll_until_ended(api, operation_id, second, timeout=300)["status"] == "succeeded"
    elapsed = time.monotonic() - killed

    print(f"all {len(operations)} operations of the killed worker done {elapsed:.1f} s after the kill "
          f"(prefetch {measure.get('AGP_WORKER_PREFETCH', 'default')})")
    if not measure:
        assert elapsed < 20, elapsed  # lease 2 s, recovery every 1 s, 2 s each; a stranded one: 30 s
    assert Receipt.objects.filter(operation_id__in=operations).count() == len(operations)
    assert ledger_verify().verified
