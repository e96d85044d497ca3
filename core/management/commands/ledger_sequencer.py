"""``manage.py ledger_sequencer``: run the ledger's sequencer in the foreground.

Every Celery worker already runs one (only the holder of the sequencer lock integrates);
this command is the same loop as a process of its own, for operators who want it apart and
for tests that kill it. ``--once`` integrates what is ready, batch after batch, and exits.
"""

import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from core.ledger import ledger_sequenced
from core.sequencer import ledger_integrate, sequencer_run


class Command(BaseCommand):
    help = "Integrate committed ledger events into the chain (PostgreSQL with AGP_LEDGER_SEQUENCER)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="integrate what is ready now, then exit")

    def handle(self, *args, **options):
        if not ledger_sequenced():
            raise CommandError("events are chained in their own transaction here: there is nothing to sequence")
        if options["once"]:
            total = 0
            while done := ledger_integrate():
                total += done
            self.stdout.write(f"{total} events integrated")
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        sequencer_run(stop=stop)
