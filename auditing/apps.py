from django.apps import AppConfig


class AuditingConfig(AppConfig):
    """The auditors' pages: read-only admin views that span the registry, decision and
    execution records. Above every other app, so it may read all of them."""

    name = "auditing"
