"""``manage.py checkpoint``: extend the ledger's Merkle tree and sign a checkpoint now (docs/reference/ledger.md).

What the worker does every ``AGP_CHECKPOINT_SECONDS``, on demand: exits 0 with the new
checkpoint (or saying the ledger has not grown since the newest one), 1 when the events
since the newest checkpoint do not chain.
"""

import json

from django.core.management.base import BaseCommand, CommandError

from core.selectors import checkpoint_document, checkpoint_newest
from core.services import checkpoint_create
from core.tree import LedgerBroken


class Command(BaseCommand):
    help = "Extend the ledger's Merkle tree with the events appended since the newest checkpoint and sign a checkpoint."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the newest checkpoint as JSON")

    def handle(self, *args, **options):
        try:
            made = checkpoint_create()
        except LedgerBroken as exc:
            raise CommandError(f"no checkpoint signed: {exc}") from None
        newest = made or checkpoint_newest()
        if options["json"]:
            self.stdout.write(json.dumps(checkpoint_document(newest) if newest else None))
        elif made is not None:
            self.stdout.write(f"checkpoint signed: tree size {made.tree_size}, root hash {made.root_hash}")
        elif newest is not None:
            self.stdout.write(f"the ledger has not grown since checkpoint {newest.tree_size} "
                              f"(root hash {newest.root_hash})")
        else:
            self.stdout.write("the ledger is empty: nothing to checkpoint")
