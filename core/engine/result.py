"""What a policy evaluation returns, whichever engine ran it (CONTRACT C7, C11)."""

import json
from dataclasses import dataclass, field
from typing import Any

MAX_REASON_CHARS = 2000
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

    def as_result(self) -> dict[str, Any]:
        """The stored and rendered ``result`` object."""
        return {"allow": self.allow, "require_approval": self.require_approval, "reasons": list(self.reasons)}


@dataclass
class RuleValues:
    """The raw values an engine read; ``None`` means the rule is undefined."""

    allow: Any = None
    require_approval: Any = None
    deny: Any = None
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
    """Apply C11 to the rule values: fail closed on anything that is not as specified."""
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

    reasons.extend(errors)
    allowed = allow is True and not deny_items and not errors
    return EvaluationResult(allow=allowed, require_approval=require_approval is True, reasons=tuple(reasons),
                            errors=tuple(errors), engine=engine, package=package)


def failure(message: str, *, engine: str, package: str | None = None) -> EvaluationResult:
    """A refusal caused by the engine itself (compile error, unreachable OPA, ...)."""
    return EvaluationResult(allow=False, require_approval=False, reasons=(message,), errors=(message,),
                            engine=engine, package=package)
