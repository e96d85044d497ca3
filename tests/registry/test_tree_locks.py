"""The lock on a delegation tree's root link (PostgreSQL): it queues the tree's writers, and
leaves the foreign-key checks of rows that reference the root free."""

import psycopg
import pytest
from django.db import transaction

from registry.services.common import lock_tree_roots
from tests.concurrency import pg_connect
from tests.registry import factories as f

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_tree_lock_excludes_other_tree_locks_but_not_a_reference_check_on_the_root():
    root = f.root_delegation()
    with transaction.atomic(), pg_connect(autocommit=True) as other:
        lock_tree_roots([root.pk])
        other.execute("SET lock_timeout = '2s'")

        # What PostgreSQL's foreign-key check takes on the referenced row: not blocked.
        row = other.execute("SELECT id FROM registry_delegation WHERE id = %s FOR KEY SHARE", [root.pk]).fetchone()
        assert row == (root.pk,)
        # Another writer's tree lock (a creation, a revocation, a payment reservation) waits.
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("SELECT id FROM registry_delegation WHERE id = %s FOR NO KEY UPDATE NOWAIT", [root.pk])
