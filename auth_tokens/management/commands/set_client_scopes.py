from django.core.management.base import BaseCommand

from auth_tokens.services import client_update

from auth_tokens.management.cli import SCOPES_HELP, cli_actor, domain_errors_as_command_errors, scopes_from_args


class Command(BaseCommand):
    help = ("Replace an API client's scopes. A removed scope stops working at once, also in tokens already "
            "issued; an added one is in the client's next token.")

    def add_arguments(self, parser):
        parser.add_argument("client_id", help="The client whose scopes to set.")
        parser.add_argument("--scopes", nargs="+", required=True, metavar="SCOPE", help=SCOPES_HELP)

    @domain_errors_as_command_errors
    def handle(self, *args, **options):
        client = client_update(client_id=options["client_id"], scopes=scopes_from_args(options["scopes"]),
                               actor=cli_actor())
        self.stdout.write(f"API client {client.client_id!r} now has scopes: {' '.join(client.scopes) or '(none)'}")
