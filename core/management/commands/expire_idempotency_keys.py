"""``manage.py expire_idempotency_keys``: delete stored Idempotency-Key responses past their expiry (docs/reference/api.md).

The same purge runs periodically in Celery beat (``core.tasks``); this command is for a
cron job, a one-off clean-up, or a look at how many are due (``--dry-run``).
"""

from django.core.management.base import BaseCommand
from django.utils import timezone

from core.models import IdempotencyRecord
from core.services import idempotency_record_purge_expired


class Command(BaseCommand):
    help = ("Delete stored Idempotency-Key records whose expiry (AGP_IDEMPOTENCY_TTL_SECONDS after the request) "
            "has passed; a retry with such a key is then processed as a new request. Also runs periodically "
            "under Celery beat.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count the expired records, delete nothing")
        parser.add_argument("--batch-size", type=int, default=1000,
                            help="records deleted per transaction (short transactions never hold up requests)")

    def handle(self, *args, **options):
        now = timezone.now()
        if options["dry_run"]:
            due = IdempotencyRecord.objects.filter(expires_at__lte=now).count()
            self.stdout.write(f"{due} expired idempotency record(s) would be deleted")
            return
        deleted = idempotency_record_purge_expired(now=now, batch_size=max(options["batch_size"], 1))
        self.stdout.write(f"{deleted} expired idempotency record(s) deleted")
