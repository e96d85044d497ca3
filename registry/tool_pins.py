"""Tool pins of ``mcp`` skills (docs/reference/governance.md): what registration stores, and the rule check 3 applies.

A skill's ``tool_pins`` is a list of ``{"name", "definition_hash", "definition"}``, one per
tool the MCP server listed when the skill was registered, sorted by name. ``definition`` is
``agp_project.mcp_client.tool_definition`` of the listed tool (what the MCP gateway lists
to agents) and ``definition_hash`` its hash. Pure functions: no database, no network.
"""

from collections.abc import Iterable
from typing import Any

from agp_project.exactjson import bad_text
from agp_project.mcp_client import MCPFailure, tool_definition, tool_definition_hash

# A capability operation that names no tool: it covers every operation of the tool.
WILDCARD = "*"


def tool_pins_from_listing(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pins of a ``tools/list`` answer; ``MCPFailure`` when it cannot be pinned.

    A listing that names one tool twice is refused: the pin would say nothing about which
    of the two definitions a call reaches. So is a tool named ``*`` (the capabilities'
    wildcard) or with a name no database can store (NUL, lone surrogates).
    """
    pins: dict[str, dict[str, Any]] = {}
    for tool in tools:
        name = tool["name"]
        unstorable = bad_text(name)
        if unstorable is not None:
            raise MCPFailure(f"the server lists a tool whose name cannot be stored ({unstorable[1]})")
        if name == WILDCARD:
            raise MCPFailure("the server lists a tool named '*', which capabilities use for every operation")
        if name in pins:
            raise MCPFailure(f"the server lists tool {name!r} twice")
        pins[name] = {"name": name, "definition_hash": tool_definition_hash(tool), "definition": tool_definition(tool)}
    return [pins[name] for name in sorted(pins)]


def mcp_pins_problem(pins: Any, operations: Iterable[str], *, called: str | None = None) -> str | None:
    """Why ``operations`` and ``called`` are not all tools the skill pinned (None: they all are).

    ``operations``: the capability's operations, where the wildcard ``*`` names no tool and
    is skipped; ``called``: the envelope's operation, the tool that would be called, which
    must be pinned itself (``*`` is no tool). Pins of any other shape than registration
    stores fail closed.
    """
    if not isinstance(pins, list) or not all(
            isinstance(pin, dict) and isinstance(pin.get("name"), str)
            and isinstance(pin.get("definition_hash"), str) for pin in pins):
        return "the mcp skill's tool_pins are malformed"
    pinned = {pin["name"] for pin in pins}
    missing = {operation for operation in operations if operation != WILDCARD} - pinned
    if called is not None and called not in pinned:
        missing.add(called)
    missing = sorted(missing)
    if not missing:
        return None
    names = ", ".join(repr(name) for name in missing)
    return (f"operation(s) {names} are not tools the mcp skill pinned"
            + (f" (pinned: {', '.join(sorted(pinned))})" if pinned else " (it pinned no tools)"))
