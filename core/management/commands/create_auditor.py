"""``manage.py create_auditor``: a Django admin user who can view every record and change none."""

from django.core.management.base import BaseCommand, CommandError

from agp_project import errors
from core.auditors import AUDITORS_GROUP, auditor_create
from core.management.passwords import GENERATE_HELP, PASSWORD_HELP, password_from_options


class Command(BaseCommand):
    help = (
        "Create a staff user in the 'auditors' group (view every record in /admin/, change nothing). "
        "Without --password: prompts for one on a terminal, otherwise generates one and prints it once. "
        "Also creates or re-syncs the group itself. The creation is recorded in the ledger."
    )

    def add_arguments(self, parser):
        parser.add_argument("--username", required=True, help="login name of the new auditor")
        parser.add_argument("--email", default="", help="optional e-mail address")
        parser.add_argument("--tenant", dest="tenants", action="append", default=[], metavar="ROOT_PRINCIPAL",
                            help="a tenant (root principal) whose records alone the auditor sees; repeat for "
                                 "several; none: every tenant")
        parser.add_argument("--password", help=PASSWORD_HELP)
        parser.add_argument("--generate-password", action="store_true", help=GENERATE_HELP)

    def handle(self, *args, **options):
        password, generated = password_from_options(options)
        try:
            user = auditor_create(username=options["username"], password=password, email=options["email"],
                                  tenants=options["tenants"])
        except errors.AGPError as exc:
            raise CommandError(exc.message) from None
        reach = f"tenants {' '.join(options['tenants'])}" if options["tenants"] else "every tenant"
        self.stdout.write(f"auditor {user.username!r} created (staff, group {AUDITORS_GROUP!r}, not a superuser; "
                          f"sees {reach})")
        if generated:
            self.stdout.write(f"password: {password}")
            self.stdout.write("it is shown only this once; the database keeps only its hash")
