"""Skills (docs/reference/governance.md): the connector that executes a tool for an agent, MCP tools pinned."""

import contextlib
import threading
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agp_project import errors, mcp_client
from agp_project.ids import new_id
from agp_project.mcp_client import MCPFailure
from agp_project.net import url_guard_registration
from core.ledger import ledger_append

from ..choices import Connector, SkillStatus
from ..models import Skill
from ..tool_pins import tool_pins_from_listing
from .common import insert_new, lock_agents, record_timestamp, refuse_revoked_agents


class _Listings:
    """This process's outbound tool listings of registrations now in progress, at most
    ``AGP_MCP_REGISTRATIONS_PER_PROCESS``.

    Each one holds a web thread for as long as the server takes (up to the registration's
    time limit). Without a cap, a burst of registrations against servers that never answer
    takes every thread and the API stops answering anyone; with it, the burst gets 503s it
    may retry and the other threads keep serving (docs/decisions/mcp-tools.md).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._running = 0

    @contextlib.contextmanager
    def slot(self):
        with self._lock:
            if self._running >= settings.AGP_MCP_REGISTRATIONS_PER_PROCESS:
                wait = settings.AGP_MCP_REGISTRATION_TIMEOUT_SECONDS
                raise errors.Unavailable(
                    f"This server is already asking as many MCP servers for their tools as it allows at once "
                    f"(AGP_MCP_REGISTRATIONS_PER_PROCESS); retry in {wait} s. Nothing was written.",
                    headers={"Retry-After": str(wait)})
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1


_listings = _Listings()


def _mcp_tool_pins(endpoint_url: str) -> list[dict[str, Any]]:
    """List the MCP server's tools and pin them; a refused, unreachable, slow or unusable server
    is a 400, a registration past this process's cap a 503."""
    try:
        with _listings.slot():
            listed = mcp_client.tools_list(endpoint_url, timeout=settings.AGP_CONNECTOR_TIMEOUT_SECONDS,
                                           deadline=settings.AGP_MCP_REGISTRATION_TIMEOUT_SECONDS)
        return tool_pins_from_listing(listed)
    except MCPFailure as exc:
        raise errors.invalid_fields(
            {"endpoint_url": [f"The MCP server could not be pinned: {exc.reason}."]},
            message=f"The MCP server at endpoint_url could not be pinned: {exc.reason}.") from None


def _refuse_to_supersede(previous: Skill | None, *, supersedes: str, agent_id: str, tool_id: str,
                         root_principal: str | None) -> None:
    if previous is None:
        raise errors.invalid_fields({"supersedes": [f"No skill with id {supersedes!r}."]})
    if (previous.agent_id, previous.tool_id, previous.root_principal) != (agent_id, tool_id, root_principal):
        raise errors.invalid_fields({"supersedes": [
            f"Skill {supersedes!r} is for agent {previous.agent_id!r}, tool {previous.tool_id!r} and tenant "
            f"{previous.root_principal!r}; a new version keeps all three."]})
    if previous.status != SkillStatus.ACTIVE:
        raise errors.Conflict(f"Skill {supersedes!r} is {previous.status}; only an active skill can be superseded.",
                              details={"supersedes": supersedes, "status": previous.status})


def skill_create(*, actor: str, agent_id: str, name: str, tool_id: str, version: str = "",
                 connector: str = Connector.NOOP, endpoint_url: str = "", supersedes: str | None = None,
                 skill_id: str | None = None, created_at: datetime | None = None,
                 executor_client_id: str | None = None, root_principal: str | None = None) -> Skill:
    """Register the tool connector that executes ``tool_id`` for an agent.

    SSRF: an ``http`` endpoint on a forbidden address is refused here already (and checked
    again at every execution). An ``mcp`` endpoint is guarded the same way and then asked
    for its tools, which are pinned on the skill (docs/reference/governance.md); a server that cannot be listed is a
    400 naming the problem. The network call happens before the transaction opens.

    ``supersedes``: the active skill of the same agent and tool that this version replaces
    (how a reviewed change of an MCP server's tools is re-pinned). It moves to
    ``superseded`` in the same transaction, with its own ledger event; a skill that is no
    longer active (superseded by someone else meanwhile, or revoked) is a 409.

    ``root_principal``: the tenant whose tasks the skill executes; None (an operator's
    skill) for every tenant the agent acts in. A new version keeps its tenant.
    """
    now = timezone.now()
    created_at = record_timestamp(created_at, field="created_at", now=now)
    if connector in (Connector.HTTP, Connector.MCP) and not endpoint_url:
        raise errors.invalid_fields({"endpoint_url": [f"Required for the {connector} connector."]})
    if supersedes is not None:
        # Checked before the network call too: a wrong reference fails without reaching the server.
        _refuse_to_supersede(Skill.objects.filter(skill_id=supersedes).first(), supersedes=supersedes,
                             agent_id=agent_id, tool_id=tool_id, root_principal=root_principal)
    tool_pins: list[dict[str, Any]] = []
    if connector == Connector.HTTP:
        url_guard_registration(endpoint_url, field="endpoint_url")
    elif connector == Connector.MCP:
        tool_pins = _mcp_tool_pins(endpoint_url)
    skill = Skill(skill_id=skill_id or new_id("skl"), agent_id=agent_id, name=name, version=version,
                  tool_id=tool_id, connector=connector, endpoint_url=endpoint_url, tool_pins=tool_pins,
                  executor_client_id=executor_client_id or "", supersedes=supersedes, status=SkillStatus.ACTIVE,
                  root_principal=root_principal, created_by=actor, created_at=created_at)
    with transaction.atomic():
        lock_agents([agent_id])
        refuse_revoked_agents([agent_id])
        previous = None
        if supersedes is not None:
            # Locked: of two new versions of one skill, only one supersedes it; the other is a 409.
            previous = Skill.objects.select_for_update().filter(skill_id=supersedes).first()
            _refuse_to_supersede(previous, supersedes=supersedes, agent_id=agent_id, tool_id=tool_id,
                                 root_principal=root_principal)

        insert_new(skill, id_field="skill_id", type_name="skill")
        if previous is not None:
            Skill.objects.filter(pk=previous.pk).update(status=SkillStatus.SUPERSEDED)
        ledger_append(event_type="skill.created", resource_type="Skill", resource_id=skill.skill_id, actor=actor,
                      root_principal=root_principal, payload={"agent_id": agent_id, "tool_id": tool_id, "connector": connector,
                               "endpoint_url": endpoint_url, "tool_pins": tool_pins, "supersedes": supersedes,
                               "executor_client_id": executor_client_id or None})
        if previous is not None:
            ledger_append(event_type="skill.superseded", resource_type="Skill", resource_id=previous.skill_id,
                          actor=actor, root_principal=previous.root_principal,
                          payload={"superseded_by": skill.skill_id, "tool_pins": previous.tool_pins})

    return skill
