"""``manage.py bootstrap``: make a fresh or existing installation ready to serve.

Runs the migrations, ensures the bootstrap client of ``AGP_CLIENT_ID`` /
``AGP_CLIENT_SECRET`` exists with every scope, creates or re-syncs the ``auditors`` group
(view permission on every model, nothing else; ``core.auditors``), and creates the
signing key if there is none yet, so web and worker processes started next find
everything in place. Safe to run any number of times.
"""

from django.core.management import call_command
from django.core.management.base import BaseCommand

from agp_project.signing import get_signer
from auth_tokens.services import auth_enabled, bootstrap_client_ensure
from core.auditors import auditor_group_ensure


class Command(BaseCommand):
    help = "Migrate, ensure the bootstrap client, the auditors group and the signing key. Safe to run twice."

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=max(options["verbosity"] - 1, 0))
        client = bootstrap_client_ensure()
        auditors = auditor_group_ensure()
        signer = get_signer()
        self.stdout.write(f"database migrated; signing key kid={signer.kid}")
        self.stdout.write(f"group {auditors.name!r}: view permission on {auditors.permissions.count()} models, "
                          "nothing else")
        if not auth_enabled():
            self.stdout.write("authentication is off (AGP_AUTH_SECRET is unset)")
        elif client is None:
            self.stdout.write("authentication is on; no bootstrap client (AGP_CLIENT_ID/AGP_CLIENT_SECRET unset)")
        else:
            self.stdout.write(f"authentication is on; bootstrap client {client.client_id!r} has every scope")
