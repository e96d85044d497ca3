"""``manage.py create_approver``: a person who approves in the browser (the approvals inbox)."""

from django.core.management.base import BaseCommand

from auth_tokens.approvers import approver_create
from core.management.passwords import GENERATE_HELP, PASSWORD_HELP, password_from_options

from ..cli import cli_actor, domain_errors_as_command_errors


class Command(BaseCommand):
    help = ("Create a person who approves in the admin's approvals inbox (/admin/approvals/): a staff admin user "
            "with no permissions, linked to a new human API client with --subject in the --tenant(s). Approvals "
            "made there are the client's, as if posted to /agp/approvals. Without --password: prompts for one on "
            "a terminal, otherwise generates one and prints it once. To link an existing human client to an "
            "existing user, use the API clients admin.")

    def add_arguments(self, parser):
        parser.add_argument("--username", required=True, help="login name of the new admin user")
        parser.add_argument("--subject", required=True, help="who the person is, e.g. an e-mail address")
        parser.add_argument("--tenant", dest="tenants", action="append", default=[], required=True,
                            metavar="ROOT_PRINCIPAL",
                            help="a tenant (root principal) they approve in; repeat for several")
        parser.add_argument("--client-id", default="", help="the new human client's id (default: person-<username>)")
        parser.add_argument("--email", default="", help="optional e-mail address of the admin user")
        parser.add_argument("--password", help=PASSWORD_HELP)
        parser.add_argument("--generate-password", action="store_true", help=GENERATE_HELP)

    @domain_errors_as_command_errors
    def handle(self, *args, **options):
        password, generated = password_from_options(options)
        user, client = approver_create(username=options["username"], password=password, subject=options["subject"],
                                       tenants=options["tenants"], client_id=options["client_id"],
                                       email=options["email"], actor=cli_actor())
        self.stdout.write(f"approver {user.username!r} created: approves as {client.subject!r} (human client "
                          f"{client.client_id!r}) in {' '.join(client.tenants)}, at /admin/approvals/")
        if generated:
            self.stdout.write(f"password: {password}")
            self.stdout.write("it is shown only this once; the database keeps only its hash")
