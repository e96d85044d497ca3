"""``manage.py callback_secret``: print the HMAC key of the ``AGP-Signature`` callback header.

Operators give this value to callback receivers so they can verify deliveries. It is
``AGP_CALLBACK_SECRET`` when set, else the key generated once under ``var/callback-secret``;
it is never the token-signing ``AGP_AUTH_SECRET``.
"""

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Print the effective callback signing secret (AGP_CALLBACK_SECRET or var/callback-secret)."

    def handle(self, *args, **options):
        self.stdout.write(settings.AGP_CALLBACK_SECRET)
