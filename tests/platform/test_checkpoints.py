"""Checkpoints of the ledger's Merkle tree (docs/reference/ledger.md): made incrementally, under a lock, by the
worker and by ``manage.py checkpoint``; refused for events that do not chain; verified by
``verify_ledger``."""

import json
import logging

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agp_project.signing import get_signer, verify_resource
from core import tasks
from core.ledger_verification import ledger_verify
from core.models import Checkpoint, LedgerEvent, LedgerHead, MerkleTile
from core.selectors import checkpoint_document, tree_verify
from core.services import checkpoint_create
from core.tree import LedgerBroken
from tests.concurrency import run_together
from tests.execution.worker import test_broker, wait_for, worker_db, worker_factory  # noqa: F401 - fixtures
from tests.transparency import append, rfc_tree, seed


def tiles() -> dict:
    return {(level, index): bytes(hashes) for level, index, hashes in
            MerkleTile.objects.values_list("level", "index", "hashes")}


def tamper(sql, params):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.mark.django_db
class TestCheckpointCreate:
    def test_it_signs_a_checkpoint_only_when_the_ledger_grew(self):
        assert checkpoint_create() is None  # an empty ledger
        append(3)
        made = checkpoint_create()
        assert checkpoint_create() is None
        append(1)
        grown = checkpoint_create()

        assert (made.tree_size, grown.tree_size) == (3, 4)
        assert list(Checkpoint.objects.values_list("tree_size", flat=True)) == [4, 3]
        document = checkpoint_document(grown)
        assert document["root_hash"] == rfc_tree().root(4).hex()
        assert verify_resource(document, {"keys": [get_signer().jwk()]})

    def test_a_tree_grown_checkpoint_by_checkpoint_is_the_tree_built_at_once(self):
        for size in (1, 2, 255, 256, 257, 300, 511, 513, 1000):
            seed(size)
            checkpoint_create()
        grown = tiles()
        root = Checkpoint.objects.get(tree_size=1000).root_hash
        MerkleTile.objects.all().delete()
        Checkpoint.objects.all().delete()

        at_once = checkpoint_create()

        assert tiles() == grown
        assert at_once.root_hash == root == rfc_tree().root(1000).hex()
        # 1000 leaves in 62 full tiles of 16 and one of 8; their 62 roots in 3 tiles of 16 and one of 14; ...
        widths = {key: len(hashes) // 32 for key, hashes in grown.items()}
        assert [widths[(0, index)] for index in range(63)] == [16] * 62 + [8]
        assert [widths[(1, index)] for index in range(4)] == [16, 16, 16, 14]
        assert widths[(2, 0)] == 3 and len(widths) == 63 + 4 + 1

    def test_it_reads_only_the_events_added_since_the_newest_checkpoint(self):
        seed(300)
        checkpoint_create()
        # An event the tree already holds is never read again: breaking it does not stop the next checkpoint.
        tamper("UPDATE core_ledgerevent SET actor = %s WHERE sequence = %s", ["mallory", 5])
        append(10)

        assert checkpoint_create().tree_size == 310
        assert not ledger_verify().verified  # verify_ledger, which walks everything, does see it
        assert tree_verify().first_broken_sequence == 5

    def test_a_checkpoint_costs_the_same_queries_on_a_small_and_a_large_ledger(self):
        def queries_for_ten_more() -> int:
            append(10)
            with CaptureQueriesContext(connection) as captured:
                checkpoint_create()
            return len(captured)

        # Ten more leaves land alike in both: 12 leaves in the last tile of 16 become 6 in a new one,
        # and the completed tile's root is the third entry of the last tile above. The large
        # ledger is 28 times the small one, with a level of tiles more: its two full tiles of
        # level 2 (4096 leaves each) are two entries of a tile of level 3.
        seed(300)
        checkpoint_create()
        small = queries_for_ten_more()
        seed(2 * 4096 + 300)
        checkpoint_create()
        large = queries_for_ten_more()

        assert small == large  # nothing depends on the size of the ledger before

    def test_it_refuses_to_sign_new_events_that_do_not_chain(self):
        append(4)
        checkpoint_create()
        before = tiles()
        append(3)
        tamper("UPDATE core_ledgerevent SET event_type = %s WHERE sequence = %s", ["test.rewritten", 6])

        with pytest.raises(LedgerBroken) as broken:
            checkpoint_create()

        assert broken.value.sequence == 6
        assert "does not recompute" in str(broken.value)
        assert list(Checkpoint.objects.values_list("tree_size", flat=True)) == [4]
        assert tiles() == before

    def test_it_refuses_a_ledger_shorter_than_the_newest_checkpoint(self):
        append(5)
        checkpoint_create()
        LedgerEvent.objects.filter(sequence=5).delete()

        with pytest.raises(LedgerBroken, match="#5: missing"):
            checkpoint_create()

    def test_the_task_logs_a_broken_ledger_and_signs_nothing(self, caplog):
        append(2)
        assert tasks.checkpoint() == 2
        append(1)
        tamper("UPDATE core_ledgerevent SET prev_hash = %s WHERE sequence = %s", ["0" * 64, 3])

        with caplog.at_level(logging.ERROR, logger="core.tasks"):
            assert tasks.checkpoint() is None

        assert "checkpoint refused: ledger event #3: its prev_hash is not the previous event's hash" in caplog.text
        assert Checkpoint.objects.count() == 1


@pytest.mark.django_db
class TestCommands:
    def test_checkpoint_signs_on_demand_and_says_when_there_is_nothing_new(self, capsys):
        call_command("checkpoint")
        assert capsys.readouterr().out.strip() == "the ledger is empty: nothing to checkpoint"
        append(3)
        call_command("checkpoint")
        checkpoint = Checkpoint.objects.get()
        assert capsys.readouterr().out.strip() == (f"checkpoint signed: tree size 3, root hash "
                                                   f"{checkpoint.root_hash}")
        call_command("checkpoint", "--json")
        assert json.loads(capsys.readouterr().out) == checkpoint_document(checkpoint)
        call_command("checkpoint")
        assert "has not grown since checkpoint 3" in capsys.readouterr().out

    def test_checkpoint_fails_for_a_broken_ledger(self):
        append(2)
        tamper("UPDATE core_ledgerevent SET actor = %s WHERE sequence = %s", ["mallory", 2])
        with pytest.raises(CommandError, match="no checkpoint signed: ledger event #2"):
            call_command("checkpoint")

    def test_verify_ledger_checks_the_tree_against_the_newest_checkpoint(self, capsys):
        append(4)
        checkpoint = checkpoint_create()
        call_command("verify_ledger")
        assert capsys.readouterr().out.strip().endswith(
            f"; checkpoint 4 (root hash {checkpoint.root_hash}) verified")

        MerkleTile.objects.filter(level=0).update(hashes=b"\x00" * 32 * 4)
        with pytest.raises(CommandError, match="Merkle tree does not verify against checkpoint 4: the leaf of "
                                               "ledger event #1 is not the one the stored tree holds"):
            call_command("verify_ledger")
        with pytest.raises(CommandError):
            call_command("verify_ledger", "--json")
        reported = json.loads(capsys.readouterr().out)
        assert (reported["verified"], reported["first_broken_sequence"]) == (False, 1)
        assert reported["tree"]["verified"] is False


@pytest.mark.postgres
def test_two_checkpoint_runs_at_once_extend_the_tree_once(transactional_db):
    LedgerHead.objects.get_or_create(pk=1)
    append(700)

    results = run_together([checkpoint_create, checkpoint_create])

    made = [result for result in results if result is not None]
    assert not [result for result in results if isinstance(result, Exception)], results
    assert len(made) == 1 and made[0].tree_size == 700
    assert tree_verify().verified


@pytest.mark.postgres
def test_checkpoints_taken_while_events_are_appended_all_hold(transactional_db):
    LedgerHead.objects.get_or_create(pk=1)

    def appender(tag):
        return lambda: append(150, resource_id=tag)

    def checkpointer():
        return [checkpoint_create() for _ in range(15)]

    results = run_together([appender("a"), appender("b"), checkpointer, checkpointer])

    assert not [result for result in results if isinstance(result, Exception)], results
    checkpoint_create()
    tree = rfc_tree()
    sizes = list(Checkpoint.objects.order_by("tree_size").values_list("tree_size", "root_hash"))
    assert sizes[-1][0] == 300
    assert all(root == tree.root(size).hex() for size, root in sizes)
    assert tree_verify().verified


@pytest.mark.postgres
def test_the_worker_signs_a_checkpoint_every_few_seconds_when_the_ledger_grew(worker_factory, worker_db):
    worker = worker_factory.start(AGP_CHECKPOINT_SECONDS="1")
    # Each batch in one transaction: the worker sees 0, 5, then 8 events, never a batch half done.
    with transaction.atomic():
        append(5)
    wait_for(lambda: Checkpoint.objects.filter(tree_size=5).exists(), timeout=30,
             message="a checkpoint of 5 events", worker=worker)
    with transaction.atomic():
        append(3)
    wait_for(lambda: Checkpoint.objects.filter(tree_size=8).exists(), timeout=30,
             message="a checkpoint of 8 events", worker=worker)

    assert list(Checkpoint.objects.values_list("tree_size", flat=True)) == [8, 5]
    assert Checkpoint.objects.get(tree_size=8).root_hash == rfc_tree().root(8).hex()
    assert tree_verify().verified
