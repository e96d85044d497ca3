"""An MCP server with one tool, from the official SDK: the tool AGP will govern.

    .venv/bin/python examples/mcp/crm_server.py            # http://127.0.0.1:8765/mcp

Pass another description (``--description "..."``) and restart it to see AGP refuse the
changed tool (``AGP_TOOL_CHANGED``) until the skill is re-pinned.
"""

import argparse

from mcp.server.mcpserver import MCPServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=8765)
parser.add_argument("--description", default="Look up a customer by id and return the customer's name.")
options = parser.parse_args()

server = MCPServer("crm")


@server.tool(description=options.description)
def lookup_customer(customer_id: str) -> str:
    print(f"lookup_customer({customer_id!r}) called", flush=True)
    return f"customer {customer_id}: Ada Lovelace"


server.run("streamable-http", host="127.0.0.1", port=options.port)
