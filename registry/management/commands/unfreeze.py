"""``manage.py unfreeze``: lift a freeze (docs/reference/governance.md), as ``PATCH /agp/freezes/{id}`` does.

Forward only: a freeze already lifted is an error. Operations it cancelled stay cancelled.
"""

import json

from django.core.management.base import BaseCommand

from auth_tokens.management.cli import cli_actor, domain_errors_as_command_errors
from registry.choices import FreezeStatus
from registry.serializers_stops import FreezeSerializer
from registry.services import freeze_lift


class Command(BaseCommand):
    help = "Lift a freeze: what it stopped may act again (cancelled operations stay cancelled). Prints it as JSON."

    def add_arguments(self, parser):
        parser.add_argument("freeze_id", help="The freeze to lift.")
        parser.add_argument("--lifted-by", help="Who decided it (default: cli:<operating-system user>).")

    @domain_errors_as_command_errors
    def handle(self, *args, **options):
        actor = cli_actor()
        freeze = freeze_lift(actor=actor, freeze_id=options["freeze_id"], status=FreezeStatus.LIFTED.value,
                             lifted_by=options["lifted_by"] or actor)
        self.stdout.write(json.dumps(FreezeSerializer(freeze).data, indent=2))
