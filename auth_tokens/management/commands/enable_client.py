from django.core.management.base import BaseCommand

from auth_tokens.services import client_set_active

from auth_tokens.management.cli import cli_actor, domain_errors_as_command_errors


class Command(BaseCommand):
    help = ("Enable a disabled API client: it can obtain tokens again. Tokens issued before it was disabled "
            "stay invalid.")

    def add_arguments(self, parser):
        parser.add_argument("client_id", help="The client to enable.")

    @domain_errors_as_command_errors
    def handle(self, *args, **options):
        client_set_active(client_id=options["client_id"], active=True, actor=cli_actor())
        self.stdout.write(f"Enabled API client {options['client_id']!r}.")
