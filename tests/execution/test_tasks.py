"""What the worker does around each task (execution/tasks.py), in this process."""

import pytest

import execution.tasks  # noqa: F401 - connects the worker's task signals in this process
from core.models import IdempotencyRecord
from core.tasks import purge_expired_idempotency_records

pytestmark = pytest.mark.django_db


def test_a_task_applied_inside_a_transaction_leaves_the_callers_connection_to_the_caller():
    # The test runs in a transaction, as a task applied in a request's would: the recycling
    # of connections around the task must not close it under the caller.
    assert purge_expired_idempotency_records.apply().get() == 0
    assert IdempotencyRecord.objects.count() == 0
