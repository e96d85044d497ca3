"""Authority scopes (docs/reference/governance.md, docs/reference/api.md): pure functions, no database.

A scope is a string such as ``payments:refund``. A scope ending in ``*`` stands for every
scope with that prefix: ``payments:*`` covers ``payments:refund`` and ``payments:x*``,
and ``*`` covers everything. A scope without ``*`` covers only itself. Tool operations are
named ``<tool_id>:<operation>``.
"""

import re
from collections.abc import Iterable

WILDCARD = "*"
# A tool id has neither ':' (the separator of ``<tool_id>:<operation>``) nor '*': with either,
# "pay:*" would also cover a tool named "pay:admin", so ids could not be told apart in scopes.
TOOL_ID_PATTERN = r"^[A-Za-z0-9._/-]{1,128}$"
# Letters, digits and . _ : / - with an optional trailing ``*`` (``*`` alone allowed).
SCOPE_PATTERN = re.compile(r"^(?:[A-Za-z0-9._:/-]{1,255}\*?|\*)$")


def is_valid_scope(scope: str) -> bool:
    return isinstance(scope, str) and bool(SCOPE_PATTERN.fullmatch(scope))


def scope_covered_by(granted: str, requested: str) -> bool:
    """True when the single scope ``granted`` covers the single scope ``requested``."""
    if granted.endswith(WILDCARD):
        return requested.startswith(granted[:-1])
    return granted == requested


def scope_covers(parent_scopes: Iterable[str], requested: str | Iterable[str]) -> bool:
    """True when every requested scope is covered by at least one of ``parent_scopes``.

    ``requested`` is one scope or an iterable of scopes; an empty request is covered.
    """
    granted = list(parent_scopes)
    wanted = [requested] if isinstance(requested, str) else list(requested)
    return all(any(scope_covered_by(g, w) for g in granted) for w in wanted)


def tool_id_unambiguous(tool_id: str) -> bool:
    """False for a tool id holding ':' or '*' (only rows registered before they were refused)."""
    return ":" not in tool_id and WILDCARD not in tool_id


def tool_scope(tool_id: str, operation: str) -> str:
    """The authority scope that names one tool operation (docs/reference/api.md)."""
    return f"{tool_id}:{operation}"
