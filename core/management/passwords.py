"""The password of an account a management command creates: given, typed at a prompt, or generated."""

import getpass
import secrets
import sys

from django.core.management.base import CommandError

PASSWORD_HELP = "the password (visible in the process list: prefer the prompt or a generated one)"
GENERATE_HELP = "generate a password and print it, even on a terminal"


def password_from_options(options) -> tuple[str, bool]:
    """(password, generated?): ``--password``, else a prompt on a terminal (empty input
    generates one), else a generated one the command prints once."""
    if options["password"]:
        return options["password"], False
    if not options["generate_password"] and sys.stdin.isatty():
        first = getpass.getpass("Password (empty to generate one): ")
        if first:
            if getpass.getpass("Password (again): ") != first:
                raise CommandError("the passwords do not match")
            return first, False
    return secrets.token_urlsafe(18), True
