"""``manage.py verify_ledger``: check the hash chain (docs/reference/ledger.md) and the Merkle tree against the newest
checkpoint (docs/reference/ledger.md); name the first broken link.

Exits 0 when both verify, 1 otherwise, so it can gate a cron job or a CI step.
"""

import json

from django.core.management.base import BaseCommand, CommandError

from core.ledger_verification import ledger_verify
from core.selectors import combined_verification, tree_verify


class Command(BaseCommand):
    help = ("Verify the ledger's hash chain and its Merkle tree against the newest checkpoint; exit non-zero and "
            "name the first broken sequence.")

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the verification as JSON")
        parser.add_argument("--batch-size", type=int, default=5000,
                            help="events read per query by the Python walk (PostgreSQL verifies in one statement)")

    def handle(self, *args, **options):
        chain = ledger_verify(batch_size=options["batch_size"])
        tree = tree_verify()
        if options["json"]:
            self.stdout.write(json.dumps(combined_verification(chain, tree)))
        if not chain.verified:
            raise CommandError(
                f"ledger broken at sequence {chain.first_broken_sequence} "
                f"({chain.events} events before it verified)")
        if not tree.verified:
            raise CommandError(f"Merkle tree does not verify against checkpoint {tree.tree_size}: {tree.problem}")
        if not options["json"]:
            checkpoint = (f"checkpoint {tree.tree_size} (root hash {tree.root_hash}) verified"
                          if tree.tree_size else "no checkpoint yet")
            self.stdout.write(f"ledger verified: {chain.events} events, head hash {chain.head_hash}; {checkpoint}")
