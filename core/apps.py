from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Ledger and request records"

    def ready(self):
        from . import metrics  # noqa: F401 - registers the ledger gauges of /metrics
