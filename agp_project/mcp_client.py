"""A synchronous client for tools on MCP servers (docs/reference/governance.md), over the official ``mcp`` SDK.

Registration (``registry``) lists a server's tools to pin them; execution (``execution``'s
``mcp`` connector) re-reads the tool it is about to call and calls it only when the
definition still hashes to the pin. Both live above this module, which knows nothing of
skills or operations: it speaks the protocol, guards the address and keeps time.

- **Pins.** A tool's canonical definition is ``{"name", "title", "description",
  "inputSchema", "outputSchema", "annotations"}`` (each member the server leaves out is
  null) in RFC 8785 canonical JSON; ``tool_definition_hash`` is ``sha256:<hex>`` of it.
  That is everything a client reads to decide what to call, with what, and how careful to
  be: a tool whose annotations turn ``destructiveHint`` true is a changed tool. Icons and
  ``_meta`` are not part of it (display and the server's own bookkeeping).
- **SSRF** (docs/reference/execution.md). Every exchange starts with ``url_guard``: ``http``/``https`` only, and
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

The SDK is asynchronous: ``tools_list`` runs one session in a fresh event loop
(``anyio.run``); ``tool_call`` is a coroutine, for the connector's retry loop and the MCP
gateway's server alike. Both return plain JSON-shaped values.
"""

import asyncio
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


# The members of a listed tool that its pin covers (docs/decisions/mcp-tools.md).
PINNED_MEMBERS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def tool_definition(tool: dict[str, Any]) -> dict[str, Any]:
    """The part of a listed tool that is pinned (``PINNED_MEMBERS``, null when absent)."""
    return {member: tool.get(member) for member in PINNED_MEMBERS}


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


async def tool_call(url: str, *, name: str, arguments: dict[str, Any], pinned_hash: str, timeout: float,
                    field: str = "endpoint_url", pool: "SessionPool | None" = None,
                    listing: "Awaitable[list[dict[str, Any]]] | None" = None) -> dict[str, Any]:
    """Call tool ``name`` with ``arguments`` if its current definition still hashes to ``pinned_hash``.

    One session: ``tools/list``, compare, then ``tools/call``. Returns the tool result as
    MCP JSON: ``{"content": [...], "isError": bool}`` plus ``"structuredContent"`` when
    the tool gave one. Raises ``UnsafeURL``, ``ToolChanged`` (no call was made) or
    ``MCPFailure`` (``call_sent`` says whether the tool may have run).

    Asynchronous, in the caller's event loop (the worker's connector runs it in one of its
    own; the MCP gateway in the server's). The address guard resolves the host (a blocking
    DNS look-up), so it runs in a worker thread.

    ``pool``: a ``SessionPool`` of the caller's event loop, whose open session with the server
    is used instead of a new one. ``listing``: the server's ``tools/list`` answer, asked
    (``tools_list_pooled``) while the caller did something else since this call began; it
    is what the pin is compared with.
    """
    work = _pinned_call(name=name, arguments=arguments, pinned_hash=pinned_hash, listing=listing)
    if pool is not None:
        return await pool.run(url, timeout, work, field=field)
    guarded = await anyio.to_thread.run_sync(lambda: url_guard(url, field=field))
    return await _session(guarded, timeout, work)


async def tools_list_pooled(url: str, *, pool: "SessionPool", timeout: float,
                            field: str = "endpoint_url") -> list[dict[str, Any]]:
    """``tools_list`` on ``pool``'s session with the server (a coroutine)."""
    async def work(client: Client, progress: "_Progress") -> list[dict[str, Any]]:
        return [_tool_json(tool) for tool in await _listing(client)]

    return await pool.run(url, timeout, work, field=field)


def _pinned_call(*, name: str, arguments: dict[str, Any], pinned_hash: str,
                 listing: Awaitable[list[dict[str, Any]]] | None = None):
    async def work(client: Client, progress: "_Progress") -> dict[str, Any]:
        tools = await listing if listing is not None else [_tool_json(tool) for tool in await _listing(client)]
        listed = [tool for tool in tools if tool.get("name") == name]
        if not listed:
            raise ToolChanged(f"the server no longer lists tool {name!r}", name=name, pinned=pinned_hash,
                              current=None)
        if len(listed) > 1:
            raise ToolChanged(f"the server lists tool {name!r} {len(listed)} times", name=name,
                              pinned=pinned_hash, current=None)
        try:
            current = tool_definition_hash(listed[0])
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

    return work


# --- sessions kept open -----------------------------------------------------------------------
class SessionPool:
    """One open session per server, kept in the event loop of a long-lived process (the MCP
    gateway's), so a call costs its requests and not a handshake.

    A session is opened (the address guarded once, its addresses pinned for the session) on
    first use, serves any number of concurrent works, and is closed after ``idle_seconds``
    without work, after ``max_age_seconds``, or at its first failure; a work that fails
    before anything could have reached the tool is tried once more on a fresh session.
    """

    def __init__(self, *, idle_seconds: float = 60.0, max_age_seconds: float = 600.0):
        self.idle_seconds = idle_seconds
        self.max_age_seconds = max_age_seconds
        self._sessions: dict[str, _PooledSession] = {}
        self._lock = anyio.Lock()

    async def run(self, url: str, timeout: float, work: Callable[[Client, "_Progress"], Awaitable[T]], *,
                  field: str = "endpoint_url") -> T:
        for attempt in (1, 2):
            session = await self._session(url, timeout, field)
            try:
                return await session.run(work)
            except MCPFailure as exc:
                session.close()
                if exc.call_sent or attempt == 2 or session.fresh:
                    raise
        raise AssertionError("unreachable")

    async def _session(self, url: str, timeout: float, field: str) -> "_PooledSession":
        async with self._lock:  # one session per server, even when its first works arrive together
            session = self._sessions.get(url)
            if session is None or not session.usable(self.max_age_seconds):
                guarded = await anyio.to_thread.run_sync(lambda: url_guard(url, field=field))
                session = _PooledSession(guarded, timeout, self.idle_seconds)
                await session.start()
                self._sessions[url] = session
            return session


class _PooledSession:
    """A session held open by a task of its own (the SDK's context must be entered and left in
    one task); works run in that task's group, each within the time limit of a session."""

    def __init__(self, guarded: GuardedURL, timeout: float, idle_seconds: float):
        self.guarded, self.timeout, self.idle_seconds = guarded, timeout, idle_seconds
        self.opened_at = anyio.current_time()
        self.fresh = True  # no work has succeeded on it yet
        self.closed = False
        self._send, self._receive = anyio.create_memory_object_stream(max_buffer_size=1000)

    def usable(self, max_age: float) -> bool:
        return not self.closed and anyio.current_time() - self.opened_at < max_age

    async def start(self) -> None:
        ready = anyio.Event()
        failure: list[BaseException] = []

        async def hold() -> None:
            try:
                await self._hold(ready)
            except BaseException as exc:  # reported to the opener, or to the works it strands
                failure.append(exc)
            finally:
                self.closed = True
                ready.set()
                self._fail_waiting()

        # The gateway's loop is asyncio's: the task outlives the request that opened the session.
        asyncio.get_running_loop().create_task(hold())
        await ready.wait()
        if self.closed:
            own = _own_failure(failure[0]) if failure else None
            raise own or MCPFailure(_describe(_first_leaf(failure[0]), self.timeout) if failure
                                    else "the session could not be opened")

    async def _hold(self, ready: anyio.Event) -> None:
        with anyio.fail_after(self.timeout):
            http = httpx2.AsyncClient(transport=PinnedTransport(self.guarded), timeout=httpx2.Timeout(self.timeout),
                                      trust_env=False, follow_redirects=False, headers={"User-Agent": USER_AGENT})
            await http.__aenter__()
        try:
            async with Client(streamable_http_client(self.guarded.url, http_client=http), cache=None,
                              read_timeout_seconds=self.timeout, client_info=CLIENT_INFO) as client:
                ready.set()
                async with anyio.create_task_group() as works:
                    while True:
                        with anyio.move_on_after(self.idle_seconds) as idle:
                            try:
                                item = await self._receive.receive()
                            except anyio.EndOfStream:  # closed: the works under way finish first
                                break
                        if idle.cancelled_caught:
                            break
                        works.start_soon(self._serve, client, *item)
        finally:
            await http.aclose()

    async def _serve(self, client: Client, work, done) -> None:
        progress = _Progress()
        outcome: Any = None
        try:
            with anyio.fail_after(ROUNDS * self.timeout):
                outcome = await work(client, progress)
            self.fresh = False
        except Exception as exc:
            own = _own_failure(exc)
            outcome = own if own is not None else MCPFailure(_describe(_first_leaf(exc), self.timeout),
                                                             call_sent=progress.call_sent)
            if not isinstance(outcome, ToolChanged):
                self.close()  # a failed exchange may have left the session unusable
        finally:
            if outcome is None:  # cancelled: the session itself failed under the work
                outcome = MCPFailure("the session closed during the work", call_sent=progress.call_sent)
            done.send_nowait(outcome)  # room for one: never waits

    async def run(self, work):
        if self.closed:
            raise MCPFailure("the session was closed")
        done_send, done_receive = anyio.create_memory_object_stream(max_buffer_size=1)
        try:
            self._send.send_nowait((work, done_send))
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise MCPFailure("the session is busy or closed") from None
        outcome = await done_receive.receive()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def close(self) -> None:
        self.closed = True
        self._send.close()

    def _fail_waiting(self) -> None:
        while True:
            try:
                _, done = self._receive.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return
            done.send_nowait(MCPFailure("the session closed before the work began"))


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
    """Open a session with the guarded server, run ``work`` in it, close it: in a fresh event loop."""
    return anyio.run(_session, guarded, timeout, work, deadline)


async def _session(guarded: GuardedURL, timeout: float, work: Callable[[Client, _Progress], Awaitable[T]],
                   deadline: float | None = None) -> T:
    """One session with the guarded server running ``work``, all within the deadline
    (``ROUNDS * timeout`` unless given); every failure is an ``MCPFailure`` (or the guard's ``UnsafeURL``)."""
    progress = _Progress()
    if deadline is None or deadline >= ROUNDS * timeout:
        deadline, limit = ROUNDS * timeout, f"the connector timeout ({timeout:g} s)"
    else:
        limit = f"the time limit of {deadline:g} s"
    try:
        with anyio.fail_after(deadline):
            async with httpx2.AsyncClient(transport=PinnedTransport(guarded), timeout=httpx2.Timeout(timeout),
                                          trust_env=False, follow_redirects=False,
                                          headers={"User-Agent": USER_AGENT}) as http:
                async with Client(streamable_http_client(guarded.url, http_client=http), cache=None,
                                  read_timeout_seconds=timeout, client_info=CLIENT_INFO) as client:
                    return await work(client, progress)
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
