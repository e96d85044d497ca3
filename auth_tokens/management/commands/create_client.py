import json

from django.core.management.base import BaseCommand

from auth_tokens.services import client_create

from ._common import SCOPES_HELP, cli_actor, domain_errors_as_command_errors, scopes_from_args


class Command(BaseCommand):
    help = ("Create an API client for the OAuth 2.0 client-credentials grant and print its secret. "
            "The secret is shown only this once: the server keeps only its hash.")

    def add_arguments(self, parser):
        parser.add_argument("client_id", help="The client id: 1-128 characters of [A-Za-z0-9._:-].")
        parser.add_argument("--scopes", nargs="+", required=True, metavar="SCOPE", help=SCOPES_HELP)
        parser.add_argument("--description", default="", help="Free text shown by list_clients and the admin.")
        parser.add_argument("--json", action="store_true",
                            help="Print {client_id, client_secret, scopes} as JSON (for scripts).")

    @domain_errors_as_command_errors
    def handle(self, *args, **options):
        client, secret = client_create(client_id=options["client_id"], scopes=scopes_from_args(options["scopes"]),
                                       description=options["description"], actor=cli_actor())
        if options["json"]:
            self.stdout.write(json.dumps({"client_id": client.client_id, "client_secret": secret,
                                          "scopes": client.scopes}))
            return
        self.stdout.write(f"Created API client {client.client_id!r}.")
        self.stdout.write(f"client_id:     {client.client_id}")
        self.stdout.write(f"client_secret: {secret}")
        self.stdout.write(f"scopes:        {' '.join(client.scopes) or '(none)'}")
        self.stdout.write(self.style.WARNING("Store the secret now: it is not shown again."))
