"""The lock on a delegation tree's root link (PostgreSQL): it queues the tree's writers, and
leaves the foreign-key checks of rows that reference the root free."""

import psycopg
import pytest
from django.db import transaction

from registry.services.common import lock_tree_roots
from tests.concurrency import pg_connect, waits_behind
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


TREE_LOCK = "SELECT id FROM registry_delegation WHERE id = %s FOR NO KEY UPDATE"


def test_a_link_is_created_behind_its_own_trees_lock_and_not_behind_another_trees():
    """A delegator holding root grants in two trees: the parent is chosen, and only its
    tree's root is locked; a writer holding the other tree does not hold it up."""
    older = f.root_delegation(principal="acme", delegate="agent-two-trees", scope=["crm:*"])
    newer = f.root_delegation(principal="acme", delegate="agent-two-trees", scope=["crm:*"])

    waited, child = waits_behind(TREE_LOCK, [older.pk], lambda: f.child_delegation(newer, scope=["crm:read"]))
    assert not waited and child.parent_id == newer.delegation_id

    waited, child = waits_behind(TREE_LOCK, [newer.pk], lambda: f.child_delegation(newer, scope=["crm:read"]))
    assert waited and child.parent_id == newer.delegation_id


def test_a_link_in_a_single_tree_is_created_behind_that_trees_lock():
    parent = f.chain(3)[-1]
    waited, child = waits_behind(TREE_LOCK, [parent.root_pk], lambda: f.child_delegation(parent))
    assert waited and child.parent_id == parent.delegation_id
