from django.core.management.base import BaseCommand

from auth_tokens.services import client_set_active

from auth_tokens.management.cli import cli_actor, domain_errors_as_command_errors


class Command(BaseCommand):
    help = ("Disable an API client: it can no longer obtain tokens and its live tokens stop working at once. "
            "Undo with enable_client (tokens issued before the disabling stay invalid).")

    def add_arguments(self, parser):
        parser.add_argument("client_id", help="The client to disable.")

    @domain_errors_as_command_errors
    def handle(self, *args, **options):
        client_set_active(client_id=options["client_id"], active=False, actor=cli_actor())
        self.stdout.write(f"Disabled API client {options['client_id']!r}.")
