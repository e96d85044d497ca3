"""The ledger's gauges on ``/metrics``, read at each scrape (agp_project/metrics.py)."""

from prometheus_client.core import GaugeMetricFamily

from agp_project.metrics import scrape_source

from .models import Checkpoint, LedgerHead


def newest_checkpoint() -> tuple[int, float]:
    """``(tree_size, issued_at as a Unix time)`` of the ledger's newest signed checkpoint; ``(0, 0)`` with none."""
    newest = Checkpoint.objects.order_by("-tree_size").values_list("tree_size", "issued_at").first()
    if newest is None:
        return 0, 0.0
    return newest[0], newest[1].timestamp()


@scrape_source
def ledger_gauges():
    head = LedgerHead.objects.filter(pk=1).values_list("sequence", flat=True).first() or 0
    yield GaugeMetricFamily("agp_ledger_head_sequence", "Sequence number of the newest ledger event.", value=head)
    tree_size, issued_at = newest_checkpoint()
    yield GaugeMetricFamily("agp_ledger_checkpoint_tree_size",
                            "Events covered by the newest signed checkpoint (0: none yet).", value=tree_size)
    yield GaugeMetricFamily("agp_ledger_checkpoint_issued_timestamp_seconds",
                            "When the newest checkpoint was signed, as a Unix time (0: none yet).", value=issued_at)
