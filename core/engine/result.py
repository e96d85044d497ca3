"""What a policy evaluation returns, whichever engine ran it (docs/reference/governance.md, docs/reference/api.md)."""

import json
from dataclasses import dataclass, field
from typing import Any

MAX_REASON_CHARS = 2000
# More approvers than any policy could mean; a larger number is a ruleset error.
MAX_APPROVALS_REQUIRED = 20

_BACKTRACE_MARKER = "Stack backtrace:"


@dataclass(frozen=True)
class EvaluationResult:
    """The outcome of evaluating a ruleset's ``allow``, ``require_approval`` and ``deny``.

    ``allow`` is true only when the ruleset's ``allow`` rule is ``true``, its ``deny`` set
    is empty and nothing went wrong; ``errors`` holds compile, runtime and type errors
    (each one also listed in ``reasons``, after the ``deny`` reasons).
    """

    allow: bool
    require_approval: bool
    reasons: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    engine: str = "regorus"
    package: str | None = None
    # How many people, with distinct subjects, must approve (the rule ``approvals_required``;
    # by default 1 when ``require_approval`` holds, else 0), and whether only approvals the
    # approvers signed count (``signed_approvals_required``).
    approvals_required: int = 0
    signed_approvals_required: bool = False

    def as_result(self) -> dict[str, Any]:
        """The stored and rendered ``result`` object."""
        result = {"allow": self.allow, "require_approval": self.require_approval,
                  "approvals_required": self.approvals_required, "reasons": list(self.reasons)}
        if self.signed_approvals_required:
            result["signed_approvals_required"] = True
        return result

    def as_answer(self) -> dict[str, Any]:
        """Every field, as JSON (how an engine process hands a result back)."""
        return {"allow": self.allow, "require_approval": self.require_approval, "reasons": list(self.reasons),
                "errors": list(self.errors), "engine": self.engine, "package": self.package,
                "approvals_required": self.approvals_required,
                "signed_approvals_required": self.signed_approvals_required}

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> "EvaluationResult":
        return cls(allow=answer["allow"], require_approval=answer["require_approval"],
                   reasons=tuple(answer["reasons"]), errors=tuple(answer["errors"]), engine=answer["engine"],
                   package=answer["package"], approvals_required=answer["approvals_required"],
                   signed_approvals_required=answer["signed_approvals_required"])


@dataclass
class RuleValues:
    """The raw values an engine read; ``None`` means the rule is undefined."""

    allow: Any = None
    require_approval: Any = None
    deny: Any = None
    approvals_required: Any = None
    signed_approvals_required: Any = None
    errors: list[str] = field(default_factory=list)


def clean_error(prefix: str, exc: BaseException | str) -> str:
    """One readable line (or a few) from an engine error: no Rust backtrace, bounded length."""
    text = str(exc)
    cut = text.find(_BACKTRACE_MARKER)
    if cut != -1:
        text = text[:cut]
    text = text.strip() or type(exc).__name__
    message = f"{prefix}: {text}"
    if len(message) > MAX_REASON_CHARS:
        message = message[: MAX_REASON_CHARS - 3] + "..."
    return message


def _reason_text(item: Any) -> str:
    if isinstance(item, str):
        return item
    try:
        return json.dumps(item, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(item)


def decide(values: RuleValues, *, engine: str, package: str | None) -> EvaluationResult:
    """Apply docs/reference/api.md to the rule values: fail closed on anything that is not as specified."""
    errors = list(values.errors)
    reasons: list[str] = []
    deny = values.deny
    if deny is None:
        deny_items: list[Any] = []
    elif isinstance(deny, (set, frozenset, list, tuple)):
        deny_items = list(deny)
    else:
        deny_items = []
        errors.append(f"policy result error: deny must be a set of reason strings, got {type(deny).__name__}")
    reasons.extend(sorted({_reason_text(item) for item in deny_items}))

    allow = values.allow
    if allow is not None and not isinstance(allow, bool):
        errors.append(f"policy result error: allow must be a boolean, got {type(allow).__name__}")
        allow = False
    require_approval = values.require_approval
    if require_approval is not None and not isinstance(require_approval, bool):
        errors.append("policy result error: require_approval must be a boolean, "
                      f"got {type(require_approval).__name__}")
        # Unknown means the careful answer: a human looks at it.
        require_approval = True

    approvals = values.approvals_required
    if approvals is not None and (isinstance(approvals, bool) or not isinstance(approvals, int)
                                  or not 0 <= approvals <= MAX_APPROVALS_REQUIRED):
        errors.append(f"policy result error: approvals_required must be an integer from 0 to "
                      f"{MAX_APPROVALS_REQUIRED}, got {approvals!r}")
        approvals = MAX_APPROVALS_REQUIRED
    signed = values.signed_approvals_required
    if signed is not None and not isinstance(signed, bool):
        errors.append(f"policy result error: signed_approvals_required must be a boolean, got {type(signed).__name__}")
        signed = True
    if approvals is None:
        approvals = 1 if require_approval is True else 0
    reasons.extend(errors)
    allowed = allow is True and not deny_items and not errors
    return EvaluationResult(allow=allowed, require_approval=require_approval is True or approvals > 0,
                            reasons=tuple(reasons), errors=tuple(errors), engine=engine, package=package,
                            approvals_required=approvals, signed_approvals_required=signed is True)


def failure(message: str, *, engine: str, package: str | None = None) -> EvaluationResult:
    """A refusal caused by the engine itself (compile error, unreachable OPA, ...)."""
    return EvaluationResult(allow=False, require_approval=False, reasons=(message,), errors=(message,),
                            engine=engine, package=package)
