"""Governing a plain Python function in one line (docs/reference/gateway.md, "In-process tools").

``agp.govern(...)`` decorates a function, ``agp.governed_action(...)`` is the same as a
context manager. Each call is one governed action: an action envelope without a decision
(the task's policy set decides, in one request) is submitted for execution; the agent's
skill for the tool uses the ``external`` connector, so a worker re-checks it and hands it
back; the function runs only then, and its receipt is posted with the hash of what it
returned (``{"output_hash": "sha256:<hex of its RFC 8785 JSON>"}``): the service signs the
receipt, and anyone holding the output can recompute the hash. A refusal raises
``PrerequisiteFailedError`` (``decision_id`` set when the decision waits for people) and the
function is not run; a function that raises gets a failed receipt, and the exception goes on.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import PrerequisiteFailedError, error_from_body
from .signatures import canonical_json

if TYPE_CHECKING:
    from .client import AGPClient

ENDED = ("succeeded", "failed", "cancelled")


def output_hash(value: Any) -> str:
    """``sha256:<hex>`` of ``value``'s RFC 8785 canonical JSON (its ``repr`` when it is not JSON)."""
    try:
        data = canonical_json(value)
    except Exception:  # not JSON: its text, which still tells two outputs apart
        data = canonical_json(repr(value))
    return "sha256:" + hashlib.sha256(data).hexdigest()


class GovernedAction:
    """One governed call of in-process code: ``clear()`` before it runs, ``finish()`` after."""

    def __init__(self, agp: AGPClient, *, task_id: str, tool_id: str, operation: str,
                 parameters: dict[str, Any] | None = None, capability_id: str | None = None,
                 agent_id: str | None = None, timeout: float = 60.0, poll_interval: float = 0.05):
        self.agp = agp
        self.fields = {"task_id": task_id, "tool_id": tool_id, "operation": operation,
                       "parameters": dict(parameters or {})}
        if agent_id is not None:  # an agent client's own agent is filled in by the service
            self.fields["agent_id"] = agent_id
        self.capability_id = capability_id
        self.timeout, self.poll_interval = timeout, poll_interval
        self.operation: dict[str, Any] | None = None
        self.receipt: dict[str, Any] | None = None
        self.result: Any = None

    def clear(self) -> dict[str, Any]:
        """Submit the action and wait until it is handed to this process to run; the Operation.

        Raises ``PrerequisiteFailedError`` when a check refuses it, at submission or when the
        worker checks it again."""
        capability = self.capability_id or self._capability()
        accepted = self.agp.action_envelopes.submit(capability_token_ref=capability, **self.fields)
        deadline = time.monotonic() + self.timeout
        operation = accepted
        while operation["status"] == "pending":
            if time.monotonic() > deadline:
                raise TimeoutError(f"operation {accepted['operation_id']} was not handed over within {self.timeout} s")
            time.sleep(self.poll_interval)
            operation = self.agp.operations.get(accepted["operation_id"])
        if operation["status"] in ENDED:  # refused when the worker checked it again, or stopped
            raise error_from_body(422, {"error": operation.get("error") or {}}, {})
        self.operation = {**operation, "decision_ref": accepted.get("decision_ref"),
                          "policy_decision_ref": accepted.get("policy_decision_ref")}
        return self.operation

    def finish(self, *, result: Any = None, error: BaseException | None = None) -> dict[str, Any]:
        """Post the receipt: succeeded with the output's hash, or failed naming the exception."""
        body = ({"output_hash": output_hash(result)} if error is None
                else {"error": f"{type(error).__name__}: {error}"})
        self.receipt = self.agp.receipts.create(
            action_id=self._action_id(), operation_id=self.operation["operation_id"],
            status="succeeded" if error is None else "failed", result=body)
        return self.receipt

    def __enter__(self) -> GovernedAction:
        self.clear()
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        self.finish(result=self.result, error=error)
        return False

    def _action_id(self) -> str:
        return self.operation["result_url"].rstrip("/").rsplit("/", 1)[-1]

    def _capability(self) -> str:
        """The newest active capability for the tool that covers the operation."""
        wanted = self.fields["operation"]
        for capability in self.agp.capabilities.list(tool_id=self.fields["tool_id"], status="active"):
            if wanted in capability["operations"] or "*" in capability["operations"]:
                return capability["capability_id"]
        raise PrerequisiteFailedError(
            f"No active capability covers {self.fields['tool_id']}:{wanted}.", status=422,
            details={"failed_checks": [{"check": "capability", "reason": "no active capability covers the tool "
                                                                          "and operation"}]})


def govern(agp: AGPClient, *, task_id: str, tool_id: str, operation: str | None = None,
           capability_id: str | None = None, agent_id: str | None = None,
           timeout: float = 60.0) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: each call of the function is one governed action whose ``operation`` is the
    function's name (unless given) and whose ``parameters`` are its arguments by name."""
    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def governed(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            action = GovernedAction(agp, task_id=task_id, tool_id=tool_id, operation=operation or function.__name__,
                                    parameters=dict(bound.arguments), capability_id=capability_id,
                                    agent_id=agent_id, timeout=timeout)
            with action:
                action.result = function(*args, **kwargs)
            return action.result

        return governed

    return decorate
