"""``manage.py freeze``: an operator's emergency stop from the command line (docs/reference/governance.md).

The same service as ``POST /agp/freezes``: signed, ledgered (actor ``cli:<user>``), and the
worker cancels the matching operations not yet passed to their connector.
"""

import json

from django.core.management.base import BaseCommand, CommandError

from auth_tokens.management.cli import cli_actor, domain_errors_as_command_errors
from registry.choices import FreezeTarget
from registry.serializers_stops import FreezeSerializer
from registry.services import freeze_create


class Command(BaseCommand):
    help = ("Freeze an agent, a root principal, a tool, or everything ('all'): matching envelopes fail the check "
            "'freeze', the agent's evaluations and delegations are refused, and matching operations not yet passed "
            "to their connector are cancelled. Prints the freeze as JSON. Undo with unfreeze.")

    def add_arguments(self, parser):
        parser.add_argument("target_type", choices=FreezeTarget.values, help="What to freeze.")
        parser.add_argument("target_id", nargs="?", help="The agent, root principal or tool id (none for 'all').")
        parser.add_argument("--reason", required=True, help="Why: recorded, signed and ledgered with the freeze.")
        parser.add_argument("--frozen-by", help="Who decided it (default: cli:<operating-system user>).")
        parser.add_argument("--id", dest="freeze_id", help="The freeze id (default: generated).")

    @domain_errors_as_command_errors
    def handle(self, *args, **options):
        data = {"target_type": options["target_type"], "reason": options["reason"]}
        for name in ("target_id", "frozen_by", "freeze_id"):
            if options[name] is not None:
                data[name] = options[name]
        serializer = FreezeSerializer(data=data)
        if not serializer.is_valid():
            raise CommandError(json.dumps(serializer.errors))
        freeze = freeze_create(actor=cli_actor(), **serializer.validated_data)
        self.stdout.write(json.dumps(FreezeSerializer(freeze).data, indent=2))
