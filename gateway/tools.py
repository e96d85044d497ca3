"""The tools an agent sees through the MCP gateway (docs/reference/gateway.md).

Every tool of the agent's active ``mcp`` skills that an active, unexpired capability of the
agent covers, as the skill pinned it, named ``<tool_id>.<tool name>``. Revoked skills,
capabilities and agents count as gone even before a cascade marked them. Three queries;
two for the one tool of a call (``agent_tool``), whose checks read the revocations and
take the skills and the capability as read here.
"""

from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from execution.checks import ToolRead
from registry.choices import ActiveStatus, Connector, RevocationTarget, SkillStatus
from registry.models import Capability, Revocation, Skill
from registry.tool_pins import WILDCARD

# As check 3 reads them: an agent with more active skills or capabilities than this for one
# tool is shown the newest ones.
MAX_ROWS = 200


@dataclass(frozen=True)
class GatewayTool:
    """One tool as the gateway lists and calls it."""

    name: str  # <tool_id>.<tool name>
    tool_id: str
    operation: str  # the tool's own name: the envelope's operation
    capability_id: str
    definition: dict[str, Any]  # as pinned: name, title, description, inputSchema, outputSchema, annotations
    endpoint_url: str  # the MCP server of the skill

    def listed(self) -> dict[str, Any]:
        """The tool as ``tools/list`` shows it: the pinned definition under the gateway's name."""
        members = {key: value for key, value in self.definition.items() if value is not None}
        return {**members, "name": self.name}


def agent_tools(*, agent_id: str, tenant: str | None) -> list[GatewayTool]:
    """The agent's governed tools, sorted by name. ``tenant``: the agent client's one tenant
    (None: the service is open, every tenant)."""
    skills = list(_skills(agent_id=agent_id, tenant=tenant).filter(connector=Connector.MCP)
                  .only("skill_id", "tool_id", "tool_pins", "endpoint_url")[:MAX_ROWS])
    if not skills:
        return []
    capabilities = list(_capabilities(agent_id=agent_id, tenant=tenant, tool_ids={skill.tool_id for skill in skills})
                        .only("capability_id", "tool_id", "operations")[:MAX_ROWS])
    revoked = set(Revocation.objects.filter(
        Q(target_type=RevocationTarget.AGENT, target_id=agent_id)
        | Q(target_type=RevocationTarget.SKILL, target_id__in=[skill.skill_id for skill in skills])
        | Q(target_type=RevocationTarget.CAPABILITY, target_id__in=[c.capability_id for c in capabilities]))
        .values_list("target_type", "target_id"))
    if (RevocationTarget.AGENT, agent_id) in revoked:
        return []
    tools = _paired(skills, capabilities, revoked)
    return [tools[name] for name in sorted(tools)]


def agent_tool(*, agent_id: str, tenant: str | None, name: str) -> tuple[GatewayTool, ToolRead] | None:
    """The tool ``name`` for a call, paired as ``agent_tools`` pairs it, with what the call's
    checks read of it (``ToolRead``), in two queries: the agent's active skills of every tool
    id the name may begin with, of any connector (check 3 executes on the newest), and its
    capabilities for them with their delegations. The revocations are the checks': they
    refuse a revoked skill, capability or agent (check 3). None: no such tool."""
    tool_ids = {name[:at] for at, char in enumerate(name) if char == "."}  # <tool_id>.<tool name>
    skills = list(_skills(agent_id=agent_id, tenant=tenant).filter(tool_id__in=tool_ids)[:MAX_ROWS])
    served = [skill for skill in skills if skill.connector == Connector.MCP]
    if not served:
        return None
    capabilities = list(_capabilities(agent_id=agent_id, tenant=tenant, tool_ids={skill.tool_id for skill in served})
                        .select_related("delegation")[:MAX_ROWS])
    tool = _paired(served, capabilities, set()).get(name)
    if tool is None:
        return None
    capability = next(c for c in capabilities if c.capability_id == tool.capability_id)
    return tool, ToolRead(skills=[skill for skill in skills if skill.tool_id == tool.tool_id], capability=capability)


def _skills(*, agent_id: str, tenant: str | None) -> QuerySet[Skill]:
    """The agent's active skills in ``tenant`` and those of no tenant, newest first."""
    in_tenant = Q() if tenant is None else Q(root_principal__isnull=True) | Q(root_principal=tenant)
    return Skill.objects.filter(in_tenant, agent_id=agent_id, status=SkillStatus.ACTIVE).order_by("-created_at", "-pk")


def _capabilities(*, agent_id: str, tenant: str | None, tool_ids: set[str]) -> QuerySet[Capability]:
    """The agent's active, unexpired capabilities for ``tool_ids`` in ``tenant``, newest first."""
    return (Capability.objects
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()), agent_id=agent_id,
                    status=ActiveStatus.ACTIVE, tool_id__in=tool_ids,
                    **({} if tenant is None else {"delegation__root_principal": tenant}))
            .order_by("-created_at", "-pk"))


def _paired(skills: list[Skill], capabilities: list[Capability],
            revoked: set[tuple[str, str]]) -> dict[str, GatewayTool]:
    """Each tool of the newest skill of each tool id not ``revoked``, with the newest capability
    not revoked that covers it, by name."""
    tools: dict[str, GatewayTool] = {}
    seen_tool_ids: set[str] = set()
    for skill in skills:
        # The newest usable skill of a tool is the one that executes it (check 3).
        if skill.tool_id in seen_tool_ids or (RevocationTarget.SKILL, skill.skill_id) in revoked:
            continue
        seen_tool_ids.add(skill.tool_id)
        for pin in skill.tool_pins or []:
            if not isinstance(pin, dict) or not isinstance(pin.get("definition"), dict):
                continue  # pinned before definitions were kept: nothing to show (docs/decisions/mcp-tools.md)
            capability = next((c for c in capabilities if c.tool_id == skill.tool_id
                               and (RevocationTarget.CAPABILITY, c.capability_id) not in revoked
                               and (pin["name"] in (c.operations or []) or WILDCARD in (c.operations or []))),
                              None)
            if capability is not None:
                name = f"{skill.tool_id}.{pin['name']}"
                tools[name] = GatewayTool(name=name, tool_id=skill.tool_id, operation=pin["name"],
                                          capability_id=capability.capability_id, definition=pin["definition"],
                                          endpoint_url=skill.endpoint_url)
    return tools
