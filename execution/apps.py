from django.apps import AppConfig


class ExecutionConfig(AppConfig):
    name = "execution"

    def ready(self):
        from . import metrics  # noqa: F401 - registers the backlog gauges of /metrics
