"""Client kinds: who an API client is, and which scopes each kind gets and may hold.

See docs/reference/identity.md. A tenant is a root principal. ``operator`` clients act in
every tenant; the others are bound to the tenants (and the agent or the person) they were
created for, and a request's identity comes from those bindings, never from its body.
"""

from django.db import models

from agp_project.tenancy import EVERY_TENANT

from .scopes import ADMIN_SCOPE, ALL_SCOPES, READ_SCOPES

__all__ = ["AGENT_DEFAULT_SCOPES", "DEFAULT_SCOPES", "EVERY_TENANT", "HUMAN_DEFAULT_SCOPES", "SCOPE_CEILINGS",
           "ClientKind"]


class ClientKind(models.TextChoices):
    OPERATOR = "operator", "operator"
    AGENT = "agent", "agent"
    HUMAN = "human", "human"
    AUDITOR = "auditor", "auditor"


AGENT_DEFAULT_SCOPES = (*READ_SCOPES, "agp.registry.write", "agp.decision.write", "agp.policy.write",
                        "agp.execution.write")
HUMAN_DEFAULT_SCOPES = (*READ_SCOPES, "agp.approval.write", "agp.revocation.write")

# Scopes given when a client is created without ``scopes``.
DEFAULT_SCOPES = {
    ClientKind.OPERATOR: ALL_SCOPES,
    ClientKind.AGENT: AGENT_DEFAULT_SCOPES,
    ClientKind.HUMAN: HUMAN_DEFAULT_SCOPES,
    ClientKind.AUDITOR: READ_SCOPES,
}

# The most each kind may hold: an agent never approves, revokes or administers; a person
# never administers; an auditor only reads.
SCOPE_CEILINGS = {
    ClientKind.OPERATOR: frozenset(ALL_SCOPES),
    ClientKind.AGENT: frozenset(AGENT_DEFAULT_SCOPES),
    ClientKind.HUMAN: frozenset(ALL_SCOPES) - {ADMIN_SCOPE},
    ClientKind.AUDITOR: frozenset(READ_SCOPES),
}
