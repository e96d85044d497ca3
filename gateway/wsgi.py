"""The MCP gateway served by the web processes, beside the API (docs/decisions/gateway.md).

gunicorn's workers speak WSGI; the SDK's server is ASGI. Each web process, on its first
``/mcp`` request (after gunicorn has forked it), starts one asyncio event loop in a thread of
its own, runs the SDK's session manager in it for the life of the process, and hands each
``/mcp`` request to the gateway through a2wsgi's ASGI-to-WSGI bridge: the web thread that
took the request waits for the answer while the loop serves it.
"""

import asyncio
import threading

from a2wsgi import ASGIMiddleware

from .server import GatewayApp

START_TIMEOUT_SECONDS = 10

_lock = threading.Lock()
_bridge: ASGIMiddleware | None = None


def _started() -> ASGIMiddleware:
    global _bridge
    with _lock:  # the first requests of a process may arrive on several threads at once
        if _bridge is None:
            app = GatewayApp()
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agp-gateway-loop", daemon=True).start()
            running = threading.Event()

            async def serve_forever():
                async with app.manager.run():
                    running.set()
                    await asyncio.Event().wait()

            asyncio.run_coroutine_threadsafe(serve_forever(), loop)
            if not running.wait(START_TIMEOUT_SECONDS):
                raise RuntimeError("the MCP gateway's session manager did not start")
            _bridge = ASGIMiddleware(app, loop=loop)
    return _bridge


def gateway_application(environ, start_response):
    """The WSGI application of ``/mcp``."""
    return _started()(environ, start_response)
