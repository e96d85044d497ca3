"""Tool connectors (docs/reference/execution.md, docs/reference/api.md): how an envelope's action is actually carried out.

The agent's active Skill for the envelope's ``tool_id`` names the connector:

- ``noop``: does nothing and returns ``{"ok": true}``. ``parameters.sleep_seconds``
  (bounded by ``AGP_NOOP_MAX_SLEEP_SECONDS``) makes it slow, for demos and tests.
- ``http``: POSTs the signed envelope to the skill's ``endpoint_url`` through the SSRF
  guard (agp_project/net.py), with ``Idempotency-Key: <operation_id>`` so a repeat after a
  worker crash is recognisable as the same call. 2xx is success; a 4xx or a refused URL
  is a failure; timeouts, connection errors, 429 and 5xx are retried a few times in
  process, then a failure.
- ``external``: nothing is called; the operation stays ``running`` until the executor
  POSTs its receipt (``POST /agp/receipts``).
- ``mcp`` (docs/reference/governance.md): in one MCP session with the skill's server (agp_project/mcp_client.py:
  SSRF guard, address pinned against DNS rebinding, connector timeouts), re-reads the
  tool named by the envelope's ``operation`` and calls it (``tools/call``, ``arguments`` =
  the envelope's ``parameters``) only if its definition still hashes to the skill's pin;
  otherwise the operation fails with ``AGP_TOOL_CHANGED`` and nothing is called. The
  result is the tool result as MCP JSON (``content``, ``isError``, ``structuredContent``),
  hashed into the receipt; ``isError`` fails the operation with the tool's text in
  ``error.details.text``. Failures before the call was sent (connecting, the handshake,
  the listing) are retried like ``http``'s; once a ``tools/call`` may have reached the
  server it is never repeated: the operation fails saying the tool may have run.

A connector returns the result (a JSON object, hashed into the receipt) or raises
``ExecutionFailed``. Connectors never touch the database: the runner owns every write.
"""

import json
import logging
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import anyio
import requests
from django.conf import settings

from agp_project import errors, exactjson, mcp_client
from agp_project.canonical import bytes_hash, canonical_json
from agp_project.http.parsers import has_nul
from agp_project.net import UnsafeURL, http_post

logger = logging.getLogger(__name__)

TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class ExecutionFailed(errors.AGPError):
    """The tool did not carry the action out; recorded as the operation's ``error``."""

    status_code = 502
    code = "AGP_EXECUTION_FAILED"
    retryable = False
    default_message = "The tool connector failed to execute the action."


@dataclass(frozen=True)
class Call:
    """What a connector gets: ids and the signed envelope document, never model instances."""

    operation_id: str
    action_id: str
    connector: str
    endpoint_url: str
    parameters: dict[str, Any]
    envelope: dict[str, Any]
    # mcp: the tool to call (the envelope's operation) and the skill's pins.
    operation: str = ""
    tool_pins: list[dict[str, Any]] = field(default_factory=list)


class Connector(ABC):
    name = ""
    # False: the connector finishes the operation later, from outside (``external``).
    completes = True
    # False: a call cut short by a worker's death is not made again by the worker that
    # takes the operation over (the tool cannot recognise a repeat: ``mcp``).
    repeatable = True

    @abstractmethod
    def execute(self, call: Call) -> dict[str, Any]:
        """Run the tool call; the result is hashed into the receipt."""

    async def execute_async(self, call: Call, **options) -> dict[str, Any]:
        """``execute`` from an event loop (the MCP gateway's), in a worker thread unless the
        connector is asynchronous itself. ``options``: what an asynchronous connector can use."""
        return await anyio.to_thread.run_sync(self.execute, call)

    def runs_in_claim(self, call: Call) -> bool:
        """True when ``call`` is instant and touches nothing outside this process.

        Such a call runs inside the claim's transaction, which then records the outcome
        too: one commit instead of two, and no lease, because a worker killed mid-call
        rolls everything back and its message is delivered again. A call that waits or
        reaches the outside world runs under a lease between two transactions instead.
        """
        return False


class NoopConnector(Connector):
    name = "noop"

    def runs_in_claim(self, call: Call) -> bool:
        return not _sleep_seconds(call)

    def execute(self, call: Call) -> dict[str, Any]:
        delay = _sleep_seconds(call)
        if delay:
            time.sleep(delay)
        return {"ok": True}


def _sleep_seconds(call: Call) -> float:
    """The noop's requested delay (``parameters.sleep_seconds``), bounded; 0 when none."""
    delay = call.parameters.get("sleep_seconds")
    if isinstance(delay, (int, float, Decimal)) and not isinstance(delay, bool) and delay > 0:
        return min(float(delay), settings.AGP_NOOP_MAX_SLEEP_SECONDS)
    return 0.0


class HttpConnector(Connector):
    name = "http"

    def execute(self, call: Call) -> dict[str, Any]:
        if not call.endpoint_url:
            raise ExecutionFailed("The skill has no endpoint_url.", details={"connector": self.name})
        # Exact numbers: the tool receives the amount that was checked and reserved, digit for digit.
        body = exactjson.dumps(call.envelope, sort_keys=True).encode()
        headers = {"Idempotency-Key": call.operation_id, "AGP-Operation-Id": call.operation_id,
                   "AGP-Action-Id": call.action_id}
        attempts = settings.AGP_CONNECTOR_ATTEMPTS
        last_problem = ""
        for attempt in range(1, attempts + 1):
            try:
                response = http_post(url=call.endpoint_url, body=body, headers=headers,
                                     timeout=settings.AGP_CONNECTOR_TIMEOUT_SECONDS, field="endpoint_url")
            except UnsafeURL as exc:
                raise ExecutionFailed(f"The skill's endpoint was refused: {exc.reason}.",
                                      details={"connector": self.name, "reason": exc.reason}) from None
            except (requests.RequestException, OSError) as exc:
                last_problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.ok:
                    return _http_result(response)
                last_problem = f"HTTP {response.status_code}"
                if response.status_code not in TRANSIENT_STATUS:
                    raise ExecutionFailed(
                        f"The tool endpoint answered HTTP {response.status_code}.",
                        details={"connector": self.name, "status_code": response.status_code,
                                 "response": _http_result(response)})
            logger.warning("http connector: operation %s attempt %s/%s failed: %s", call.operation_id, attempt,
                           attempts, last_problem)
            if attempt < attempts:
                time.sleep(settings.AGP_CONNECTOR_RETRY_BASE_SECONDS * 2 ** (attempt - 1))
        raise ExecutionFailed(f"The tool endpoint could not be reached after {attempts} attempts ({last_problem}).",
                              details={"connector": self.name, "attempts": attempts, "reason": last_problem})


SAFE_INTEGER = 2 ** 53


def _parse_int(text: str) -> int:
    value = int(text)
    if abs(value) > SAFE_INTEGER:
        raise ValueError("integer outside the canonical JSON domain")
    return value


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400
        raise ValueError("number outside the canonical JSON domain")
    return value


def _http_result(response) -> dict[str, Any]:
    """The tool's answer as recorded in the receipt: untrusted input (OWASP API10).

    The parsed body is kept only when it has a canonical form and can be stored: no NaN or
    Infinity, no integer beyond 2^53, no NUL character, not nested past the parser's limit.
    Otherwise ``body`` is null; ``body_hash`` always covers the bytes received.
    """
    parsed = None
    if response.body:
        try:
            parsed = json.loads(response.body, parse_int=_parse_int, parse_float=_parse_float,
                                parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            parsed = None
        else:
            if has_nul(parsed):
                parsed = None
    return {"status_code": response.status_code, "body": parsed, "body_hash": bytes_hash(response.body)}


def _mcp_arguments(value: Any) -> Any:
    """The parameters as the MCP SDK can send them, numbers unchanged.

    The SDK (pydantic) would send a Decimal as a *string*; a Decimal that is the shortest
    form of a double goes as that double, whose JSON is the same digits. One that no double
    holds (``1234567890123.4567``) cannot be sent exactly, so the call is not made.
    """
    if isinstance(value, Decimal):
        double = exactjson.as_double(value)
        if double is not None:
            return double
        raise ExecutionFailed(f"The number {exactjson.decimal_text(value)} cannot be sent exactly to an MCP tool "
                              f"(no binary double holds it); the tool was not called.",
                              details={"connector": "mcp"})
    if isinstance(value, dict):
        return {key: _mcp_arguments(member) for key, member in value.items()}
    if isinstance(value, list):
        return [_mcp_arguments(member) for member in value]
    return value


class ToolChanged(ExecutionFailed):
    """docs/reference/governance.md: the MCP tool's definition differs from the skill's pin; the tool was not called."""

    code = "AGP_TOOL_CHANGED"
    default_message = "The tool's definition changed since the skill pinned it; nothing was called."


def mcp_pinned_hash(call: Call) -> str:
    """The pin of the tool ``call`` names; ``ToolChanged`` (nothing called) when there is none usable.

    A pin without its ``definition`` was made before titles, output schemas and annotations
    were pinned: it cannot tell whether those changed, so the tool counts as changed until
    a new skill version (``supersedes``) pins it again.
    """
    pin = next((pin for pin in call.tool_pins if isinstance(pin, dict) and pin.get("name") == call.operation), None)
    if pin is None or not isinstance(pin.get("definition_hash"), str):
        raise ExecutionFailed(f"The skill pinned no tool {call.operation!r}.",
                              details={"connector": "mcp", "tool": call.operation})
    if not isinstance(pin.get("definition"), dict):
        raise ToolChanged(f"Tool {call.operation!r} was not called: its pin predates the pinning of titles, output "
                          f"schemas and annotations; register a new version of the skill (supersedes) to pin it "
                          f"again.", details={"connector": "mcp", "tool": call.operation,
                                              "pinned": pin["definition_hash"], "current": None})
    return pin["definition_hash"]


class McpConnector(Connector):
    name = "mcp"
    repeatable = False

    def execute(self, call: Call) -> dict[str, Any]:
        return anyio.run(self.execute_async, call)

    async def execute_async(self, call: Call, *, pool: mcp_client.SessionPool | None = None,
                            listing=None) -> dict[str, Any]:
        """The call in the caller's event loop. The MCP gateway passes its ``pool`` of open
        sessions, and the server's ``listing`` asked while it governed the call (the pin is
        compared with it; a retry lists again)."""
        if not call.endpoint_url:
            raise ExecutionFailed("The skill has no endpoint_url.", details={"connector": self.name})
        pinned = mcp_pinned_hash(call)
        arguments = _mcp_arguments(call.parameters)
        attempts = settings.AGP_CONNECTOR_ATTEMPTS
        last_problem = ""
        for attempt in range(1, attempts + 1):
            try:
                result = await mcp_client.tool_call(call.endpoint_url, name=call.operation, arguments=arguments,
                                                    pinned_hash=pinned, timeout=settings.AGP_CONNECTOR_TIMEOUT_SECONDS,
                                                    pool=pool, listing=listing if attempt == 1 else None)
            except UnsafeURL as exc:
                raise ExecutionFailed(f"The skill's endpoint was refused: {exc.reason}.",
                                      details={"connector": self.name, "reason": exc.reason}) from None
            except mcp_client.ToolChanged as exc:
                raise ToolChanged(f"Tool {call.operation!r} was not called: {exc.reason}.",
                                  details={"connector": self.name, "tool": call.operation, "pinned": exc.pinned,
                                           "current": exc.current}) from None
            except mcp_client.MCPFailure as exc:
                if exc.call_sent:
                    raise ExecutionFailed(
                        f"The call of tool {call.operation!r} failed after it was sent ({exc.reason}); the tool may "
                        f"have run, so it is not repeated.",
                        details={"connector": self.name, "tool": call.operation, "reason": exc.reason,
                                 "call_sent": True}) from None
                last_problem = exc.reason
            else:
                return _mcp_result(call, result)
            logger.warning("mcp connector: operation %s attempt %s/%s failed before the call: %s",
                           call.operation_id, attempt, attempts, last_problem)
            if attempt < attempts:
                await anyio.sleep(settings.AGP_CONNECTOR_RETRY_BASE_SECONDS * 2 ** (attempt - 1))
        raise ExecutionFailed(f"The MCP server could not be used after {attempts} attempts ({last_problem}); "
                              f"tool {call.operation!r} was not called.",
                              details={"connector": self.name, "tool": call.operation, "attempts": attempts,
                                       "reason": last_problem, "call_sent": False})


def _mcp_result(call: Call, result: dict[str, Any]) -> dict[str, Any]:
    """The tool result as the receipt records it: untrusted input, kept only when storable.

    A result with no canonical JSON form (an integer beyond 2^53, a lone surrogate) or a
    NUL character (which PostgreSQL's jsonb cannot hold) is recorded without its
    ``content`` and ``structuredContent``, saying why.
    """
    problem = None
    if has_nul(result):
        problem = "the tool result holds a NUL character"
    else:
        try:
            canonical_json(result)
        except Exception as exc:  # rfc8785's errors: no canonical form
            problem = f"the tool result has no canonical JSON form ({type(exc).__name__})"
    if problem:
        result = {"content": None, "isError": bool(result.get("isError")), "unrecorded": problem}
    if result.get("isError"):
        text = "\n".join(block.get("text", "") for block in result.get("content") or []
                         if isinstance(block, dict) and block.get("type") == "text")
        raise ExecutionFailed(f"Tool {call.operation!r} reported an error: {text or 'no text given'}",
                              details={"connector": "mcp", "tool": call.operation, "text": text, "result": result})
    return result


class ExternalConnector(Connector):
    name = "external"
    completes = False

    def execute(self, call: Call) -> dict[str, Any]:
        return {}


CONNECTORS: dict[str, Connector] = {c.name: c for c in (NoopConnector(), HttpConnector(), ExternalConnector(),
                                                         McpConnector())}


def connector_for(name: str) -> Connector:
    try:
        return CONNECTORS[name]
    except KeyError:
        raise ExecutionFailed(f"Unknown connector {name!r}.", details={"connector": name}) from None
