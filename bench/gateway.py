"""Scenario (i) of ``python -m bench``: a governed tool call through the MCP gateway against the
same call made directly to the same upstream MCP server, with the same official SDK client.

Reads a JSON spec on stdin (``base``, ``gateway`` from the seed, ``requests``, ``rounds``),
prints one JSON result. One client: each side opens one session and calls the tool
``requests`` times in a row; the two sides alternate round by round, so a drift in the
machine's speed reaches both. The figures are the latencies of the calls (sessions already
open), in ms.
"""

import json
import sys
import time

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.load import percentiles

WARMUP = 20


async def calls(url: str, tool: str, n: int, headers: dict[str, str]) -> list[float]:
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            latencies = []
            for i in range(WARMUP + n):
                started = time.perf_counter()
                result = await client.call_tool(tool, {"customer_id": f"c-{i}"})
                elapsed = time.perf_counter() - started
                if result.is_error:
                    raise SystemExit(f"{url}: {tool} answered an error: {result.content}")
                if i >= WARMUP:
                    latencies.append(elapsed * 1e3)
            return latencies


def main() -> None:
    spec = json.loads(sys.stdin.read())
    gateway = spec["gateway"]
    per_round = max(1, spec["requests"] // spec["rounds"])
    direct, governed = [], []
    for _ in range(spec["rounds"]):
        direct += anyio.run(calls, gateway["upstream"], gateway["upstream_tool"], per_round, {})
        governed += anyio.run(calls, f"{spec['base']}/mcp", gateway["tool"], per_round,
                              {"Authorization": f"Bearer {gateway['token']}", "AGP-Task-Id": gateway["task_id"]})
    print(json.dumps({name: {"requests": len(ms), "throughput": len(ms) / (sum(ms) / 1e3), **percentiles(ms)}
                      for name, ms in (("direct", direct), ("gateway", governed))}))


if __name__ == "__main__":
    main()
