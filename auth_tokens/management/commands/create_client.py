import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from auth_tokens.kinds import ClientKind
from auth_tokens.services import client_create

from auth_tokens.management.cli import SCOPES_HELP, cli_actor, domain_errors_as_command_errors, scopes_from_args


class Command(BaseCommand):
    help = ("Create an API client of a kind (operator, agent, human, auditor) for the OAuth 2.0 client-credentials "
            "grant and print its secret. The secret is shown only this once: the server keeps only its hash.")

    def add_arguments(self, parser):
        parser.add_argument("client_id", help="The client id: 1-128 characters of [A-Za-z0-9._:-].")
        parser.add_argument("--kind", required=True, choices=ClientKind.values,
                            help="operator: every scope and tenant; agent: acts for one agent (--agent-id) of one "
                                 "tenant; human: a person (--subject) who approves, in one or more tenants; "
                                 "auditor: reads one or more tenants (--tenant '*' for every one).")
        parser.add_argument("--agent-id", default="", help="The agent an agent client acts for.")
        parser.add_argument("--subject", default="", help="The person a human client is, e.g. an e-mail address.")
        parser.add_argument("--tenant", dest="tenants", action="append", default=[], metavar="ROOT_PRINCIPAL",
                            help="A tenant (root principal) the client is bound to; repeat for several.")
        parser.add_argument("--scopes", nargs="+", metavar="SCOPE",
                            help=SCOPES_HELP + " Default: the kind's default scopes.")
        parser.add_argument("--description", default="", help="Free text shown by list_clients and the admin.")
        parser.add_argument("--jwks", metavar="FILE", help="A JWK Set file of the client's public keys (Ed25519 or "
                                                           "P-256, each with a kid): private_key_jwt, DPoP, signing.")
        parser.add_argument("--require-dpop", action="store_true", help="Issue it only DPoP-bound tokens.")
        parser.add_argument("--json", action="store_true",
                            help="Print {client_id, client_secret, kind, scopes} as JSON (for scripts).")

    @domain_errors_as_command_errors
    def handle(self, *args, **options):
        scopes = scopes_from_args(options["scopes"]) if options["scopes"] else None
        jwks = None
        if options["jwks"]:
            try:
                jwks = json.loads(Path(options["jwks"]).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CommandError(f"--jwks: cannot read a JSON file: {exc}") from None
        client, secret = client_create(client_id=options["client_id"], kind=options["kind"], scopes=scopes,
                                       agent_id=options["agent_id"], subject=options["subject"],
                                       tenants=options["tenants"], description=options["description"],
                                       jwks=jwks, require_dpop=options["require_dpop"], actor=cli_actor())
        if options["json"]:
            self.stdout.write(json.dumps({"client_id": client.client_id, "client_secret": secret,
                                          "kind": client.kind, "scopes": client.scopes}))
            return
        self.stdout.write(f"Created API client {client.client_id!r} ({client.kind}).")
        self.stdout.write(f"client_id:     {client.client_id}")
        self.stdout.write(f"client_secret: {secret}")
        self.stdout.write(f"scopes:        {' '.join(client.scopes) or '(none)'}")
        if client.tenants:
            self.stdout.write(f"tenants:       {' '.join(client.tenants)}")
        self.stdout.write(self.style.WARNING("Store the secret now: it is not shown again."))
