"""An MCP client session with AGP's gateway, holding the agent's credentials (docs/reference/gateway.md).

    async with agp.mcp_session(task_id=task["task_id"]) as session:   # an mcp.Client
        tools = await session.list_tools()
        result = await session.call_tool("crm.lookup_customer", {"customer_id": "c-42"})
        receipt = result.meta["agp/receipt"]

It is the official SDK's client (the ``mcp`` package, imported when first used) over
streamable HTTP to ``<base_url>/mcp``; every request carries a current token from the
``AGPClient``'s token cache (a 401 fetches a new one, once), with a fresh DPoP proof when the
token is bound to the client's key, and the task (and commerce session) as the
``AGP-Task-Id`` (``AGP-Commerce-Session``) header.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import AGPClient

TIMEOUT_SECONDS = 60.0


@asynccontextmanager
async def gateway_session(agp: AGPClient, *, task_id: str | None = None, commerce_session_id: str | None = None,
                          timeout: float = TIMEOUT_SECONDS) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    class AgentToken(httpx2.Auth):
        def auth_flow(self, request):
            if agp.auth is None:  # the service is open
                yield request
                return
            # Bearer, or a DPoP-bound token with a fresh proof for this request.
            request.headers.update(agp.auth.headers(request.method, str(request.url)))
            response = yield request
            if response.status_code == 401:
                agp.auth.invalidate(request.headers["Authorization"].partition(" ")[2])
                request.headers.update(agp.auth.headers(request.method, str(request.url)))
                yield request

    headers = {}
    if task_id:
        headers["AGP-Task-Id"] = task_id
    if commerce_session_id:
        headers["AGP-Commerce-Session"] = commerce_session_id
    async with httpx2.AsyncClient(auth=AgentToken(), headers=headers, timeout=httpx2.Timeout(timeout)) as http:
        async with Client(streamable_http_client(f"{agp.base_url}/mcp", http_client=http),
                          read_timeout_seconds=timeout) as client:
            yield client
