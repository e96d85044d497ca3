"""The execution backlog's gauges on ``/metrics``, read at each scrape (agp_project/metrics.py).

Each is a count over an indexed status column, stopped at ``COUNT_CAP`` rows so that a
scrape costs the same whatever the backlog: past the cap the gauge reads the cap, which is
already an alert. Operations that ended are counted as they end (``agp_operations_ended_total``).
"""

from prometheus_client.core import GaugeMetricFamily

from agp_project.metrics import scrape_source
from core.choices import OutboxStatus
from core.models import OutboxMessage

from .choices import OperationStatus
from .models import Operation

COUNT_CAP = 100_000


@scrape_source
def backlog_gauges():
    operations = GaugeMetricFamily(
        "agp_operations", f"Operations not yet ended, by status (pending, running); counting stops at {COUNT_CAP}.",
        labels=["status"])
    for status in (OperationStatus.PENDING, OperationStatus.RUNNING):
        operations.add_metric([status.value], Operation.objects.filter(status=status)[:COUNT_CAP].count())
    yield operations
    yield GaugeMetricFamily(
        "agp_outbox_pending_messages",
        f"Tasks recorded but not yet handed to the broker (the sweep retries them); counting stops at {COUNT_CAP}.",
        value=OutboxMessage.objects.filter(status=OutboxStatus.PENDING)[:COUNT_CAP].count())
