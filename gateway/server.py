"""The MCP gateway at ``/mcp`` (docs/reference/gateway.md): agents call their tools through AGP.

Built on the official SDK's low-level ``Server`` and its streamable HTTP transport, which
speak the protocol; this module only decides. It runs stateless, answering each request
with one JSON document, so any web process answers any request (docs/decisions/gateway.md).

- ``tools/list``: the agent's governed tools (``gateway.tools``), as pinned, named
  ``<tool_id>.<tool name>``.
- ``tools/call``: one governed action (``execution.one_call``, mode ``INLINE``): the task's
  policy set decides, every check runs, and in one transaction the evaluation, decision,
  envelope and the operation (claimed by this process) are written; then the upstream tool
  is called (its pin checked) and the outcome recorded with its signed receipt, which the
  result carries in ``_meta["agp/receipt"]``. A refusal is a tool result with ``isError``
  and ``_meta["agp/error"]`` = the error object of the REST API; nothing is called then.

The identity is checked before the SDK sees the request (``GatewayApp``): with
authentication on, only an agent client's token passes, and the agent is the token's.
Django's ORM is synchronous: each piece of database work runs in a small pool of threads
that keep their connections (``in_db``), while the upstream MCP call runs in the event loop.
"""

import asyncio
import concurrent.futures
import json
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import mcp_types as types
from django.conf import settings
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host
from django.utils import timezone
from mcp import MCPError
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager

from agp_project import errors
from agp_project.ids import new_id
from agp_project.mcp_client import SessionPool, tools_list_pooled
from auth_tokens.authentication import principal_from_authorization
from auth_tokens.kinds import ClientKind
from auth_tokens.services import ANONYMOUS, ClientPrincipal, auth_enabled
from execution.checks import EnvelopeInputs, ToolRead
from execution.connectors import connector_for
from execution.documents import receipt_document
from execution.one_call import INLINE, Governed, action_govern
from execution.runner import connector_run_async, lease_kept, operation_finish
from execution.serializers_envelopes import parameters_problems
from registry.models import Task

from .tools import GatewayTool, agent_tool, agent_tools

logger = logging.getLogger(__name__)

T = TypeVar("T")

TASK_HEADER = "agp-task-id"
COMMERCE_HEADER = "agp-commerce-session"
# With authentication off only: the agent, when the task does not say (tools/list).
AGENT_HEADER = "agp-agent-id"
TASK_META = "agp/task_id"
COMMERCE_META = "agp/commerce_session_id"
RECEIPT_META = "agp/receipt"
ERROR_META = "agp/error"
# What a connection needs to act: the scope of action envelopes.
GATEWAY_SCOPE = "agp.execution.write"
EXECUTOR = f"gateway@{socket.gethostname()}:{os.getpid()}"
# Open sessions with the upstream MCP servers, kept in the gateway's event loop.
UPSTREAM = SessionPool()

# Threads that run the gateway's database work, each keeping its connection between calls
# (as a web thread does). A web process serves as many MCP requests at once as it has threads.
_db_pool = concurrent.futures.ThreadPoolExecutor(max_workers=settings.AGP_WEB_THREADS, thread_name_prefix="agp-gateway-db")


async def in_db(function: Callable[..., T], /, **kwargs) -> T:
    """Run ``function(**kwargs)`` in one of the database threads; connections too old or broken
    are replaced first, as at the start of a web request."""
    def run() -> T:
        close_old_connections()
        return function(**kwargs)

    return await asyncio.get_running_loop().run_in_executor(_db_pool, run)


# --- identity -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Caller:
    """Who connects, and what its request's headers name."""

    principal: ClientPrincipal
    task_id: str
    commerce_session_id: str
    agent_header: str

    @property
    def tenant(self) -> str | None:
        return next(iter(self.principal.tenants)) if self.principal.tenants else None


def gateway_principal(authorization: str, *, dpop: str | None = None, method: str = "",
                      url: str = "") -> ClientPrincipal:
    """The principal of a connection: anyone while the service is open; else an agent client
    holding the execution scope, or a 401 / 403 in the API's error envelope. A DPoP-bound
    token needs ``dpop``, a proof for this ``method`` and ``url`` (docs/reference/identity.md, "Keys")."""
    if not auth_enabled():
        return ANONYMOUS
    principal = principal_from_authorization(authorization, dpop=dpop, method=method, url=url)
    if principal is None:
        raise errors.Unauthenticated("A bearer token is required.")
    if principal.kind != ClientKind.AGENT:
        raise errors.Forbidden(f"only agent clients connect to the MCP gateway; this client is a {principal.kind}")
    if GATEWAY_SCOPE not in principal.scopes:
        raise errors.InsufficientScope([GATEWAY_SCOPE])
    return principal


def _caller(ctx) -> Caller:
    request = ctx.request
    headers = request.headers
    return Caller(principal=request.scope["state"]["agp_principal"], task_id=headers.get(TASK_HEADER, ""),
                  commerce_session_id=headers.get(COMMERCE_HEADER, ""), agent_header=headers.get(AGENT_HEADER, ""))


def _agent_of(caller: Caller, task_id: str) -> str:
    """The acting agent: the token's; with authentication off, the header's, else the task's."""
    if caller.principal.kind == ClientKind.AGENT:
        return caller.principal.agent_id
    if caller.agent_header:
        return caller.agent_header
    if task_id:
        return Task.objects.filter(task_id=task_id).values_list("agent_id", flat=True).first() or ""
    return ""


# --- tools/list ---------------------------------------------------------------------------------
def _tools_of(*, caller: Caller, task_id: str) -> list[GatewayTool]:
    agent_id = _agent_of(caller, task_id)
    return agent_tools(agent_id=agent_id, tenant=caller.tenant) if agent_id else []


async def list_tools(ctx, params) -> types.ListToolsResult:
    caller = _caller(ctx)
    tools = await in_db(_tools_of, caller=caller, task_id=caller.task_id)
    return types.ListToolsResult(tools=[types.Tool.model_validate(tool.listed()) for tool in tools])


# --- tools/call ---------------------------------------------------------------------------------
def _meta_text(meta: dict | None, key: str) -> str:
    value = (meta or {}).get(key)
    return value if isinstance(value, str) else ""


def _call_inputs(*, caller: Caller, name: str, arguments: dict[str, Any], task_id: str,
                 session_id: str) -> tuple[GatewayTool, ToolRead, EnvelopeInputs]:
    """The tool called, what was read to find it, and the envelope it asks for; a 400 for a
    call that names no task or sends parameters no envelope can hold, an MCP error for a tool
    the agent was not shown."""
    if not task_id:
        raise errors.invalid_fields({TASK_META: [
            f"Name the task: the {TASK_HEADER} header of the connection, or _meta[{TASK_META!r}] of the call."]})
    agent_id = _agent_of(caller, task_id)
    found = agent_tool(agent_id=agent_id, tenant=caller.tenant, name=name) if agent_id else None
    if found is None:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")
    tool, read = found
    problems = parameters_problems(arguments)
    if problems:
        raise errors.invalid_fields({"arguments": [problems]})
    inputs = EnvelopeInputs(action_id=new_id("act"), task_id=task_id, agent_id=agent_id, tool_id=tool.tool_id,
                            operation=tool.operation, capability_token_ref=tool.capability_id, decision_ref="",
                            policy_decision_ref="", created_at=timezone.now(), parameters=arguments,
                            commerce_session_id=session_id)
    return tool, read, inputs


def refused(error: errors.AGPError) -> types.CallToolResult:
    """A refusal as a tool result: the message and each failed check as text, the error object in ``_meta``."""
    body = error.as_body()["error"]
    details = body["details"]
    lines = [body["message"]]
    lines += [f"- {item['check']}: {item['reason']}" for item in details.get("failed_checks", [])]
    if details.get("decision_id"):
        lines.append(f"Decision {details['decision_id']} waits for people; the same call clears once they have "
                     f"acted on it.")
    return _result({"content": [{"type": "text", "text": "\n".join(lines)}], "isError": True,
                    "_meta": {ERROR_META: body}})


def _result(document: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult.model_validate(document)


def _outcome(result: dict[str, Any], error: dict[str, Any] | None, receipt) -> types.CallToolResult:
    """The tool's own result with the signed receipt; a failed call also carries its error."""
    meta = {RECEIPT_META: json.loads(json.dumps(receipt_document(receipt), default=str))}
    if error is None:
        document = {"content": result.get("content") or [], "isError": False, "_meta": meta}
        if "structuredContent" in result:
            document["structuredContent"] = result["structuredContent"]
        return _result(document)
    tool_result = (error.get("details") or {}).get("result") or {}
    content = tool_result.get("content") or [{"type": "text", "text": error["message"]}]
    return _result({"content": content, "isError": True, "_meta": {**meta, ERROR_META: error}})


def _governed(*, caller: Caller, name: str, arguments: dict[str, Any], task_id: str, session_id: str,
              listen: Callable[[str], None]) -> tuple[GatewayTool, Governed]:
    """The tool called and its governed action (``action_govern``), in one database thread;
    ``listen(endpoint_url)`` is told the tool's server as soon as it is known."""
    tool, read, inputs = _call_inputs(caller=caller, name=name, arguments=arguments, task_id=task_id,
                                      session_id=session_id)
    listen(tool.endpoint_url)
    return tool, action_govern(inputs=inputs, actor=caller.principal.client_id, mode=INLINE,
                               tenants=caller.principal.tenants, executor=EXECUTOR, minted=True, tool=read)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    caller = _caller(ctx)
    loop = asyncio.get_running_loop()
    started: list[concurrent.futures.Future] = []

    def listen(url: str) -> None:
        # The tool's definition is read again while the call is governed (one round trip saved);
        # the pin is compared with that reading before the call is made.
        started.append(asyncio.run_coroutine_threadsafe(
            tools_list_pooled(url, pool=UPSTREAM, timeout=settings.AGP_CONNECTOR_TIMEOUT_SECONDS), loop))

    try:
        tool, governed = await in_db(
            _governed, caller=caller, name=params.name, arguments=params.arguments or {},
            task_id=_meta_text(params.meta, TASK_META) or caller.task_id,
            session_id=_meta_text(params.meta, COMMERCE_META) or caller.commerce_session_id, listen=listen)
    except errors.AGPError as exc:
        return refused(exc)
    finally:
        listings = [asyncio.wrap_future(future) for future in started]
        for listing in listings:
            listing.add_done_callback(_quietly)
    listing = listings[0]
    claim = governed.claim
    connector = connector_for(claim.connector)
    if not connector.completes:
        return _result({"content": [{"type": "text", "text": (
            f"Accepted: operation {claim.operation_id} waits for its external executor's receipt.")}],
            "isError": False, "_meta": {"agp/operation_id": claim.operation_id}})
    options = {"pool": UPSTREAM, "listing": listing} if claim.call.endpoint_url == tool.endpoint_url else {}
    with lease_kept(operation_id=claim.operation_id, fence=claim.fence):
        status, result, error = await connector_run_async(connector, claim, **options)
    receipt = await in_db(operation_finish, operation_id=claim.operation_id, fence=claim.fence, status=status,
                          result=result, error=error, executor=EXECUTOR, governance=claim.governance)
    if receipt is None:  # the claim was taken over meanwhile (the lease lapsed): its outcome is not ours
        return refused(errors.Conflict("The call's operation was taken over by another executor; its outcome "
                                       f"is recorded there (operation {claim.operation_id})."))
    return _outcome(result, error, receipt)


def _quietly(future: asyncio.Future) -> None:
    """A listing nobody awaited (the call was refused) may have failed: that is not news."""
    if not future.cancelled():
        future.exception()


def build_server() -> Server:
    return Server("agp", version="1", title="AGP gateway",
                  instructions=("Every tool call here is a governed action: the task's policy set decides, and "
                                "each result carries its signed receipt in _meta['agp/receipt']."),
                  on_list_tools=list_tools, on_call_tool=call_tool,
                  # Without it the SDK runs tools/list (three queries) before every call, to check
                  # Mcp-Param-* headers against the tool's schema. The gateway reads the arguments
                  # from the body only, and the upstream server checks them against its schema.
                  get_tool_input_schema=_no_header_schema)


def _no_header_schema(name: str) -> None:
    return None


def _request_url(scope, headers: dict[str, str]) -> str:
    """The URL a DPoP proof must name: ``AGP_BASE_URL`` + path when set (what clients reach
    behind a proxy), else the scheme and Host this request came with."""
    path = scope.get("root_path", "") + scope.get("path", "")
    if settings.AGP_BASE_URL:
        return settings.AGP_BASE_URL + path
    return f"{scope.get('scheme', 'http')}://{headers.get('host', '')}{path}"


# --- the ASGI application -------------------------------------------------------------------------
class GatewayApp:
    """The SDK's streamable HTTP transport (stateless, JSON answers) behind the identity check.

    ``manager.run()`` must be running (``gateway.wsgi`` keeps it running in its event loop).
    """

    def __init__(self):
        self.manager = StreamableHTTPSessionManager(app=build_server(), json_response=True, stateless=True,
                                                    max_request_body_size=settings.AGP_MAX_BODY_BYTES)
        self.transport = StreamableHTTPASGIApp(self.manager)

    async def __call__(self, scope, receive, send) -> None:
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        try:
            _host_check(headers)
            principal = await in_db(gateway_principal, authorization=headers.get("authorization", ""),
                                    dpop=headers.get("dpop"), method=scope.get("method", ""),
                                    url=_request_url(scope, headers))
        except errors.AGPError as exc:
            await _error_response(send, exc)
            return
        except Exception as exc:  # a database that does not answer, never a half-open door
            logger.error("gateway: identity check failed", exc_info=exc)
            await _error_response(send, errors.Unavailable("The service cannot check credentials now."))
            return
        scope = {**scope, "state": {**scope.get("state", {}), "agp_principal": principal}}
        await self.transport(scope, receive, send)


def _host_check(headers: dict[str, str]) -> None:
    """The Host (and a browser's Origin) must be one the service answers to, as for the API:
    a web page cannot reach a local gateway through a name it controls (DNS rebinding)."""
    hosts = settings.ALLOWED_HOSTS
    host, _ = split_domain_port(headers.get("host", ""))
    if not host or not validate_host(host, hosts):
        raise errors.InvalidRequest("The Host header names a host this service does not answer to.")
    origin = headers.get("origin")
    if origin is not None and not validate_host(urlsplit(origin).hostname or "", hosts):
        raise errors.Forbidden("requests from web pages of other origins are refused", field="Origin")


async def _error_response(send, error: errors.AGPError) -> None:
    body = json.dumps(error.as_body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
