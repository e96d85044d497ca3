"""What the checks take (``EnvelopeInputs``) and what they give (``CheckReport``)."""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.utils.dateparse import parse_datetime

from agp_project.canonical import content_hash

CHECK_NAMES = (
    "task",
    "delegation",
    "capability",
    "decision",
    "policy_evaluation",
    "impact_assessment",
    "approval",
    "escalation",
    "commerce",
    "created_at",
    # docs/reference/governance.md: an operator's freeze of the agent, the task's root principal or the tool.
    "freeze",
)


@dataclass(frozen=True)
class EnvelopeInputs:
    """What the client submitted (after parsing), as stored in ``ActionEnvelope.inputs``."""

    action_id: str
    task_id: str
    agent_id: str
    tool_id: str
    operation: str
    capability_token_ref: str
    decision_ref: str
    policy_decision_ref: str
    created_at: datetime
    parameters: dict[str, Any] = field(default_factory=dict)
    callback_url: str = ""
    # The commerce session a spending call names (the MCP gateway's ``agp/commerce_session_id``);
    # empty: check 9 picks the task's and agent's open session that fits.
    commerce_session_id: str = ""

    def as_json(self) -> dict[str, Any]:
        document = {
            "action_id": self.action_id, "task_id": self.task_id, "agent_id": self.agent_id,
            "tool_id": self.tool_id, "operation": self.operation,
            "capability_token_ref": self.capability_token_ref, "decision_ref": self.decision_ref,
            "policy_decision_ref": self.policy_decision_ref,
            "created_at": self.created_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "parameters": self.parameters, "callback_url": self.callback_url,
        }
        if self.commerce_session_id:
            document["commerce_session_id"] = self.commerce_session_id
        return document

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EnvelopeInputs":
        created_at = data["created_at"]
        if isinstance(created_at, str):
            created_at = parse_datetime(created_at)
        return cls(action_id=data["action_id"], task_id=data["task_id"], agent_id=data["agent_id"],
                   tool_id=data["tool_id"], operation=data["operation"],
                   capability_token_ref=data["capability_token_ref"], decision_ref=data["decision_ref"],
                   policy_decision_ref=data["policy_decision_ref"], created_at=created_at,
                   parameters=data.get("parameters") or {}, callback_url=data.get("callback_url") or "",
                   commerce_session_id=data.get("commerce_session_id") or "")

    @property
    def parameters_hash(self) -> str:
        return content_hash(self.parameters)


@dataclass(frozen=True)
class Outcome:
    """One check's verdict, as ``failed_checks`` and replay report it."""

    check: str
    passed: bool
    reason: str

    @classmethod
    def ok(cls, check: str, reason: str) -> "Outcome":
        return cls(check, True, reason)

    @classmethod
    def fail(cls, check: str, *reasons: str) -> "Outcome":
        return cls(check, False, "; ".join(reasons))

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "passed": self.passed, "reason": self.reason}


@dataclass
class CheckReport:
    """Every check's outcome plus the references the checks resolved."""

    results: list[dict[str, Any]]
    action_class: str | None = None
    root_principal: str | None = None  # the task's: the tenant the envelope belongs to
    delegation_ref: str | None = None
    approval_ref: str | None = None  # the newest approval that counted
    approval_ids: list[str] = field(default_factory=list)  # every approval that counted, newest first

    approval_conditions: list[str] = field(default_factory=list)
    commerce_session_ref: str | None = None
    amount: Decimal | None = None
    currency: str | None = None
    allowed_parameter_ranges: dict[str, Any] = field(default_factory=dict)
    parameters_hash: str = ""
    skill_id: str | None = None
    # How the skill executes (the worker needs them; read with the skill, not again).
    skill_connector: str | None = None
    skill_endpoint_url: str = ""
    skill_tool_pins: list[dict[str, str]] = field(default_factory=list)
    skill_executor_client_id: str = ""
    # What the checks read that a receipt's why-record names (``execution.selectors.receipt_governance``):
    # the usable chain's links (root first), the policy evaluation, and the standing impact
    # assessment when the checks know it (``assessment_read``: rule 5 had it read, or the
    # decision was created in the checks' transaction and has none).
    chain: tuple[Any, ...] = ()
    evaluation: Any = None
    assessment_read: bool = False
    assessment_id: str | None = None
    # The active freezes that fail check 11, as ``details.freezes`` names them.
    freezes: list[dict[str, Any]] = field(default_factory=list)
    # A submission whose action_id names an envelope already accepted: no check ran.
    already_accepted: bool = False

    @property
    def chain_delegation_pks(self) -> list[int]:
        return [link.pk for link in self.chain]

    @property
    def passed(self) -> bool:
        return not self.already_accepted and all(result["passed"] for result in self.results)

    @property
    def failed(self) -> list[dict[str, str]]:
        """The failed checks as ``details.failed_checks`` lists them: ``{"check", "reason"}``."""
        return [{"check": r["check"], "reason": r["reason"]} for r in self.results if not r["passed"]]

    @property
    def verdict(self) -> str:
        return "cleared" if self.passed else "rejected"

    def result(self, check: str) -> dict[str, Any]:
        return next(r for r in self.results if r["check"] == check)
