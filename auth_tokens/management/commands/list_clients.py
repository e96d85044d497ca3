import json

from django.core.management.base import BaseCommand

from auth_tokens.models import Client


class Command(BaseCommand):
    help = "List the API clients: id, kind, bindings, active flag, scopes, creation time, description. Secrets are never shown."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="Print a JSON array instead of a table.")

    def handle(self, *args, **options):
        rows = [{"client_id": c.client_id, "kind": c.kind, "agent_id": c.agent_id, "subject": c.subject,
                 "tenants": c.tenants, "active": c.is_active, "scopes": c.scopes,
                 "created_at": c.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"), "description": c.description}
                for c in Client.objects.order_by("client_id")]
        if options["json"]:
            self.stdout.write(json.dumps(rows))
            return
        if not rows:
            self.stdout.write("No API clients.")
            return
        width = max(len("CLIENT_ID"), *(len(r["client_id"]) for r in rows))
        self.stdout.write(f"{'CLIENT_ID':<{width}}  KIND      ACTIVE  CREATED_AT            SCOPES")
        for r in rows:
            self.stdout.write(f"{r['client_id']:<{width}}  {r['kind']:<8}  {'yes' if r['active'] else 'no':<6}  "
                              f"{r['created_at']}  "
                              f"{' '.join(r['scopes']) or '(none)'}"
                              + (f"  [{r['agent_id'] or r['subject']}]" if r["agent_id"] or r["subject"] else "")
                              + (f"  tenants: {' '.join(r['tenants'])}" if r["tenants"] else "")
                              + (f"  # {r['description']}" if r["description"] else ""))
