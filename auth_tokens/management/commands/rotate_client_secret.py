import json

from django.core.management.base import BaseCommand

from auth_tokens.services import client_rotate_secret

from auth_tokens.management.cli import cli_actor, domain_errors_as_command_errors


class Command(BaseCommand):
    help = ("Give an API client a new secret and print it once. The old secret stops working at once, and so "
            "does every token issued before the rotation. The bootstrap client (AGP_CLIENT_ID) is rotated by "
            "changing AGP_CLIENT_SECRET instead.")

    def add_arguments(self, parser):
        parser.add_argument("client_id", help="The client whose secret to rotate.")
        parser.add_argument("--json", action="store_true", help="Print {client_id, client_secret} as JSON.")

    @domain_errors_as_command_errors
    def handle(self, *args, **options):
        client_id = options["client_id"]
        secret = client_rotate_secret(client_id=client_id, actor=cli_actor())
        if options["json"]:
            self.stdout.write(json.dumps({"client_id": client_id, "client_secret": secret}))
            return
        self.stdout.write(f"Rotated the secret of API client {client_id!r}; its earlier tokens no longer work.")
        self.stdout.write(f"client_secret: {secret}")
        self.stdout.write(self.style.WARNING("Store the secret now: it is not shown again."))
