"""Django's PostgreSQL backend, with commit failures marked (agp_project/db/__init__.py)."""

from django.db.backends.postgresql import base

from .. import MarkCommitFailures


class DatabaseWrapper(MarkCommitFailures, base.DatabaseWrapper):
    """Django's PostgreSQL connection, whose failed COMMIT is marked as an unknown outcome."""
