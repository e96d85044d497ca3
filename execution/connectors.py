"""Tool connectors (CONTRACT C8, C11): how an envelope's action is actually carried out.

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

A connector returns the result (a JSON object, hashed into the receipt) or raises
``ExecutionFailed``. Connectors never touch the database: the runner owns every write.
"""

import json
import logging
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings

from agp_project import errors
from agp_project.canonical import bytes_hash
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


class Connector(ABC):
    name = ""
    # False: the connector finishes the operation later, from outside (``external``).
    completes = True

    @abstractmethod
    def execute(self, call: Call) -> dict[str, Any]:
        """Run the tool call; the result is hashed into the receipt."""

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
    if isinstance(delay, (int, float)) and not isinstance(delay, bool) and delay > 0:
        return min(float(delay), settings.AGP_NOOP_MAX_SLEEP_SECONDS)
    return 0.0


class HttpConnector(Connector):
    name = "http"

    def execute(self, call: Call) -> dict[str, Any]:
        if not call.endpoint_url:
            raise ExecutionFailed("The skill has no endpoint_url.", details={"connector": self.name})
        body = json.dumps(call.envelope, separators=(",", ":"), sort_keys=True).encode()
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


class ExternalConnector(Connector):
    name = "external"
    completes = False

    def execute(self, call: Call) -> dict[str, Any]:
        return {}


CONNECTORS: dict[str, Connector] = {c.name: c for c in (NoopConnector(), HttpConnector(), ExternalConnector())}


def connector_for(name: str) -> Connector:
    try:
        return CONNECTORS[name]
    except KeyError:
        raise ExecutionFailed(f"Unknown connector {name!r}.", details={"connector": name}) from None
