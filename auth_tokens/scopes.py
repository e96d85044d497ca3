"""The scopes of the API (docs/reference/identity.md)."""

ALL_SCOPES = (
    "agp.registry.read",
    "agp.registry.write",
    "agp.decision.read",
    "agp.decision.write",
    "agp.execution.read",
    "agp.execution.write",
    "agp.approval.write",
    "agp.policy.write",
    "agp.revocation.write",
    "agp.admin",
)

# Managing API clients (``/agp/clients``); only operators hold it.
ADMIN_SCOPE = "agp.admin"
READ_SCOPES = tuple(scope for scope in ALL_SCOPES if scope.endswith(".read"))

OPERATION_SCOPES = (
    "agp.execution.read",
    "agp.execution.write",
    "agp.decision.read",
    "agp.decision.write",
)


def parse_scopes(text: str) -> list[str]:
    return [item for item in text.replace(",", " ").split() if item]

# PATCH /agp/operations/{id}: an envelope's operation needs the first, a backtest's (docs/reference/governance.md) one of
# the other two (the decision group's write scope, or the scope that created it).
ENVELOPE_OPERATION_WRITE_SCOPES = ("agp.execution.write",)
BACKTEST_OPERATION_WRITE_SCOPES = ("agp.decision.write", "agp.policy.write")
OPERATION_WRITE_SCOPES = ENVELOPE_OPERATION_WRITE_SCOPES + BACKTEST_OPERATION_WRITE_SCOPES
