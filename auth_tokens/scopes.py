"""The scopes of the spec's scope table (CONTRACT C3)."""

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
)

OPERATION_SCOPES = (
    "agp.execution.read",
    "agp.execution.write",
    "agp.decision.read",
    "agp.decision.write",
)


def parse_scopes(text: str) -> list[str]:
    return [item for item in text.replace(",", " ").split() if item]
