"""Reading ``GET /metrics`` as Prometheus does: prometheus-client's own text parser."""

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of an exposition: ``(name, sorted label pairs) -> value``; raises if it does not parse."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def families(text: str) -> dict[str, str]:
    """Family name -> type."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def value(found: dict, name: str, **labels) -> float:
    """One sample's value; 0 when the series does not exist yet (a counter nobody incremented)."""
    return found.get((name, tuple(sorted(labels.items()))), 0.0)
