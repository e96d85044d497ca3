"""A synchronous client for tools on MCP servers (CONTRACT C16), over the official ``mcp`` SDK.

Registration (``registry``) lists a server's tools to pin them; execution (``execution``'s
``mcp`` connector) re-reads the tool it is about to call and calls it only when the
definition still hashes to the pin. Both live above this module, which knows nothing of
skills or operations: it speaks the protocol, guards the address and keeps time.

- **Pins.** A tool's canonical definition is ``{"name", "description", "inputSchema"}``
  (``description`` null when the server gives none) in RFC 8785 canonical JSON;
  ``tool_definition_hash`` is ``sha256:<hex>`` of it. Annotations, titles, icons and the
  output schema are not part of it: C16 pins what the agent's model reads to decide
  what to send (the description and the input schema), and the name it calls.
- **SSRF** (C8). Every exchange starts with ``url_guard``: ``http``/``https`` only, and
  unless ``AGP_ALLOW_PRIVATE_URLS`` is set every address the host resolves to must be
  public. The SDK talks through ``httpx2``, which does not pass through the
  ``requests``-based peer check of ``agp_project.net``; instead its transport here sends
  every request to the first address the guard vetted (the ``Host`` header and TLS server
  name stay the URL's host), so DNS is asked once, by the guard, and an answer that
  changes afterwards (DNS rebinding) is never used. Requests to any other host (the SDK
  follows same-origin redirects only) are refused, proxies from the environment are
  ignored, and a response body larger than ``MAX_RESPONSE_BYTES`` is cut off as an error.
- **Time.** Every HTTP exchange and every MCP request waits at most ``timeout`` seconds;
  one whole session (handshake, listing, call, close) at most ``ROUNDS * timeout``, or the
  ``deadline`` its caller gives (registration gives a short one: it holds a web thread).
- **Safety of a repeat.** ``MCPFailure.call_sent`` says whether a ``tools/call`` may have
  reached the server. Everything before it (connecting, the handshake, ``tools/list``) is
  safe to repeat; the call itself is not, whatever the tool's annotations claim (they are
  the server's unreviewed hints, outside the pin).

The SDK is asynchronous: each public function runs one session in a fresh event loop
(``anyio.run``) and returns plain JSON-shaped values.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types
import pydantic
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from agp_project.canonical import content_hash
from agp_project.net import MAX_RESPONSE_BYTES, USER_AGENT, GuardedURL, UnsafeURL, url_guard

# One session is a handshake, a listing, a call and a close: four waits at most.
ROUNDS = 4
MAX_TOOLS = 1000
MAX_LIST_PAGES = 50
CLIENT_INFO = mcp_types.Implementation(name="agp", version="1")

T = TypeVar("T")


class MCPFailure(Exception):
    """The server could not be used; ``reason`` says why in a sentence fragment.

    ``call_sent``: a ``tools/call`` had been sent (or was being sent) when it failed, so
    the tool may have run.
    """

    def __init__(self, reason: str, *, call_sent: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.call_sent = call_sent


class ToolChanged(MCPFailure):
    """The tool's definition no longer hashes to its pin (or the tool is gone); nothing was called."""

    def __init__(self, reason: str, *, name: str, pinned: str, current: str | None):
        super().__init__(reason)
        self.name = name
        self.pinned = pinned
        self.current = current


def tool_definition(tool: dict[str, Any]) -> dict[str, Any]:
    """The part of a listed tool that is pinned: ``name``, ``description``, ``inputSchema``."""
    return {"name": tool["name"], "description": tool.get("description"), "inputSchema": tool["inputSchema"]}


def tool_definition_hash(tool: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the tool's canonical definition; ``MCPFailure`` when it has none.

    JSON Schema documents may hold numbers RFC 8785 cannot represent (integers beyond
    2^53) or lone surrogates: such a definition cannot be pinned.
    """
    try:
        return content_hash(tool_definition(tool))
    except Exception as exc:  # rfc8785's errors: no canonical form
        raise MCPFailure(f"the definition of tool {tool['name']!r} has no canonical JSON form "
                         f"({type(exc).__name__}: {exc})") from None


def tools_list(url: str, *, timeout: float, deadline: float | None = None,
               field: str = "endpoint_url") -> list[dict[str, Any]]:
    """Every tool the server at ``url`` lists (``tools/list``, all pages), as MCP JSON objects.

    ``deadline``: seconds the whole session may take (handshake, listing, close), when that
    is to be shorter than ``ROUNDS * timeout``. Raises ``UnsafeURL`` (refused by the guard)
    or ``MCPFailure``.
    """
    guarded = url_guard(url, field=field)

    async def work(client: Client, progress: "_Progress") -> list[dict[str, Any]]:
        return [_tool_json(tool) for tool in await _listing(client)]

    return _run(guarded, timeout, work, deadline=deadline)


def tool_call(url: str, *, name: str, arguments: dict[str, Any], pinned_hash: str, timeout: float,
              field: str = "endpoint_url") -> dict[str, Any]:
    """Call tool ``name`` with ``arguments`` if its current definition still hashes to ``pinned_hash``.

    One session: ``tools/list``, compare, then ``tools/call``. Returns the tool result as
    MCP JSON: ``{"content": [...], "isError": bool}`` plus ``"structuredContent"`` when
    the tool gave one. Raises ``UnsafeURL``, ``ToolChanged`` (no call was made) or
    ``MCPFailure`` (``call_sent`` says whether the tool may have run).
    """
    guarded = url_guard(url, field=field)

    async def work(client: Client, progress: "_Progress") -> dict[str, Any]:
        listed = [tool for tool in await _listing(client) if tool.name == name]
        if not listed:
            raise ToolChanged(f"the server no longer lists tool {name!r}", name=name, pinned=pinned_hash,
                              current=None)
        if len(listed) > 1:
            raise ToolChanged(f"the server lists tool {name!r} {len(listed)} times", name=name,
                              pinned=pinned_hash, current=None)
        try:
            current = tool_definition_hash(_tool_json(listed[0]))
        except MCPFailure as exc:
            raise ToolChanged(exc.reason, name=name, pinned=pinned_hash, current=None) from None
        if current != pinned_hash:
            raise ToolChanged(f"the definition of tool {name!r} changed since it was pinned", name=name,
                              pinned=pinned_hash, current=current)
        progress.call_sent = True
        # The session's call, not Client.call_tool: that one re-lists and resends on a
        # schema mismatch, which would call a tool whose new definition nobody checked.
        result = await client.session.call_tool(name, arguments)
        return _result_json(result)

    return _run(guarded, timeout, work)


# --- the session --------------------------------------------------------------------------
@dataclass
class _Progress:
    call_sent: bool = False


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int):
        self.inner = inner
        self.limit = limit

    async def __aiter__(self):
        received = 0
        async for chunk in self.inner:
            received += len(chunk)
            if received > self.limit:
                raise httpx2.ReadError(f"the response is larger than {self.limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends each request to the address the SSRF guard vetted, and only for the guarded host.

    Several vetted addresses are tried in order, the next only when no connection could be
    made to the one before (as ``agp_project.net.PinnedAdapter``). With
    ``AGP_ALLOW_PRIVATE_URLS`` the guard vets no address; requests then resolve as usual.
    """

    def __init__(self, guarded: GuardedURL):
        self.host = httpx2.URL(guarded.url).host
        self.addresses = [str(address) for address in guarded.addresses]
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host != self.host:
            raise UnsafeURL(f"a request to {request.url.host!r} left the guarded host {self.host!r}")
        if not self.addresses:
            return self._capped(await self.inner.handle_async_request(request))
        if request.url.scheme == "https":
            # Certificate checks and SNI stay on the name, not on the address.
            request.extensions = {**request.extensions, "sni_hostname": self.host}
        named, extensions = request.url, request.extensions
        timeouts = extensions.get("timeout") or {}
        if timeouts.get("connect"):
            # Each address but the last gets its share of the connect time, so that the next
            # one is still reached within the request's own deadline.
            share = {**extensions, "timeout": {**timeouts, "connect": timeouts["connect"] / len(self.addresses)}}
        else:
            share = extensions
        for index, address in enumerate(self.addresses):
            last = index == len(self.addresses) - 1
            request.url, request.extensions = named.copy_with(host=address), extensions if last else share
            try:
                response = await self.inner.handle_async_request(request)
            except (httpx2.ConnectError, httpx2.ConnectTimeout):
                if last:
                    raise
                continue  # nothing was sent: the next address
            # The address that answered goes first for the session's next requests.
            self.addresses.insert(0, self.addresses.pop(index))
            return self._capped(response)

    @staticmethod
    def _capped(response: httpx2.Response) -> httpx2.Response:
        return httpx2.Response(status_code=response.status_code, headers=response.headers,
                               stream=_CappedStream(response.stream, MAX_RESPONSE_BYTES),
                               extensions=response.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _run(guarded: GuardedURL, timeout: float, work: Callable[[Client, _Progress], Awaitable[T]], *,
         deadline: float | None = None) -> T:
    """Open a session with the guarded server, run ``work`` in it, close it; all within the deadline
    (``ROUNDS * timeout`` unless given)."""
    progress = _Progress()
    if deadline is None or deadline >= ROUNDS * timeout:
        deadline, limit = ROUNDS * timeout, f"the connector timeout ({timeout:g} s)"
    else:
        limit = f"the time limit of {deadline:g} s"

    async def session() -> T:
        with anyio.fail_after(deadline):
            async with httpx2.AsyncClient(transport=PinnedTransport(guarded), timeout=httpx2.Timeout(timeout),
                                          trust_env=False, follow_redirects=False,
                                          headers={"User-Agent": USER_AGENT}) as http:
                async with Client(streamable_http_client(guarded.url, http_client=http), cache=None,
                                  read_timeout_seconds=timeout, client_info=CLIENT_INFO) as client:
                    return await work(client, progress)

    try:
        return anyio.run(session)
    except Exception as exc:  # the SDK's task groups wrap what went wrong in exception groups
        own = _own_failure(exc)
        if own is not None:
            raise own from None
        raise MCPFailure(_describe(_first_leaf(exc), timeout=timeout, limit=limit),
                         call_sent=progress.call_sent) from None


def _own_failure(exc: BaseException) -> MCPFailure | UnsafeURL | None:
    if isinstance(exc, (MCPFailure, UnsafeURL)):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _own_failure(inner)
            if found is not None:
                return found
    return None


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException, *, timeout: float, limit: str) -> str:
    """A sentence fragment naming what went wrong, for an error message; ``limit`` names the
    session's time limit (``TimeoutError``), ``timeout`` is each exchange's."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {limit}"
    if isinstance(exc, httpx2.TimeoutException):
        return f"no answer within the connector timeout ({timeout:g} s)"
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect ({exc})"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"the server answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx2.HTTPError):
        return f"the connection failed ({type(exc).__name__}: {exc})"
    if isinstance(exc, MCPError):
        return f"the server answered MCP error {exc.code}: {exc.message}"
    if isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"the server's answer is not valid MCP ({where}: {first.get('msg', exc)})"
    return f"{type(exc).__name__}: {exc}"


async def _listing(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        if len(tools) > MAX_TOOLS:
            raise MCPFailure(f"the server lists more than {MAX_TOOLS} tools")
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise MCPFailure(f"the tool listing did not end within {MAX_LIST_PAGES} pages")


def _tool_json(tool: mcp_types.Tool) -> dict[str, Any]:
    return tool.model_dump(mode="json", by_alias=True, exclude_none=True)


def _result_json(result: mcp_types.CallToolResult) -> dict[str, Any]:
    document: dict[str, Any] = {
        "content": [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content],
        "isError": bool(result.is_error),
    }
    if result.structured_content is not None:
        document["structuredContent"] = result.structured_content
    return document
