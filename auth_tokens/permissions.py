"""Scope enforcement declared once per viewset (CONTRACT C3).

A viewset names its API group in ``scope_group``. Reads need the group's ``.read`` or
``.write`` scope; writes need ``.write``, unless ``write_scopes`` names another scope for
an action (approvals, policy evaluations, revocations). ``read_scopes`` replaces the read
rule (operations accept any execution or decision scope).
"""

from rest_framework.permissions import BasePermission

from agp_project import errors

from .services import auth_enabled

READ_METHODS = ("GET", "HEAD", "OPTIONS")


def required_scopes(view, method: str) -> list[str]:
    group = view.scope_group
    if method in READ_METHODS:
        return list(getattr(view, "read_scopes", None) or (f"agp.{group}.read", f"agp.{group}.write"))
    override = getattr(view, "write_scopes", {}).get(getattr(view, "action", None))
    return [override or f"agp.{group}.write"]


class HasGroupScope(BasePermission):
    def has_permission(self, request, view):
        if not auth_enabled():
            return True
        principal = request.user
        if principal is None:
            raise errors.Unauthenticated("A bearer token is required.")
        needed = required_scopes(view, request.method)
        if principal.scopes.isdisjoint(needed):
            raise errors.InsufficientScope(needed)
        return True
