"""Shared pieces of the client-management commands."""

import functools
import getpass
import json

from django.core.management.base import CommandError

from agp_project import errors
from auth_tokens.scopes import ALL_SCOPES, parse_scopes

SCOPES_HELP = ("Scopes to grant, separated by spaces or commas, or 'all' for every scope. Known scopes: "
               + ", ".join(ALL_SCOPES) + ".")


def cli_actor() -> str:
    """The ledger actor of a management command: the operating-system user who ran it."""
    try:
        return f"cli:{getpass.getuser()}"[:128]  # the ledger's actor column holds 128
    except Exception:  # no passwd entry (containers): still record where it came from
        return "cli"


def scopes_from_args(values: list[str]) -> list[str]:
    scopes = [scope for value in values for scope in parse_scopes(value)]
    if scopes == ["all"]:
        return list(ALL_SCOPES)
    if "all" in scopes:
        raise CommandError("'all' cannot be combined with other scopes.")
    return scopes


def domain_errors_as_command_errors(func):
    """Run ``func``; a domain error becomes a CommandError (exit status 1, message on stderr)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except errors.AGPError as exc:
            fields = exc.details.get("fields")
            generic = exc.message == "The request has invalid fields."
            raise CommandError(f"{exc.message} {json.dumps(fields)}" if fields and generic else exc.message) from None

    return wrapper
