"""``manage.py verify_ledger``: check the hash chain and name the first broken link (C9).

Exits 0 when the whole chain verifies, 1 otherwise, so it can gate a cron job or a CI step.
"""

import json

from django.core.management.base import BaseCommand, CommandError

from core.ledger import ledger_verify


class Command(BaseCommand):
    help = "Verify the ledger's hash chain; exit non-zero and name the first broken sequence."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the verification as JSON")
        parser.add_argument("--batch-size", type=int, default=5000, help="events read per query by the Python walk (PostgreSQL verifies in one statement)")

    def handle(self, *args, **options):
        result = ledger_verify(batch_size=options["batch_size"])
        if options["json"]:
            self.stdout.write(json.dumps(result.as_dict()))
        if result.verified:
            if not options["json"]:
                self.stdout.write(f"ledger verified: {result.events} events, head hash {result.head_hash}")
            return
        raise CommandError(
            f"ledger broken at sequence {result.first_broken_sequence} "
            f"({result.events} events before it verified)")
