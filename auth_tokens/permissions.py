"""Scope enforcement declared once per viewset (docs/reference/api.md).

A viewset names its API group in ``scope_group``. Reads (GET, HEAD, OPTIONS) need the
group's ``.read`` or ``.write`` scope; writes need ``.write``. ``write_scopes`` maps an action
to the scope(s) that replace that rule (POST approvals: ``agp.approval.write``, POST
policy-evaluations: ``agp.policy.write``, POST revocations: ``agp.revocation.write``);
``read_scopes`` replaces the read rule (operations accept any execution or decision scope).
Holding any one of the required scopes is enough.
"""

from django.core.exceptions import ImproperlyConfigured
from rest_framework.permissions import BasePermission

from agp_project import errors

from .scopes import ADMIN_SCOPE
from .services import auth_enabled

READ_METHODS = ("GET", "HEAD", "OPTIONS")
GROUPS = ("registry", "decision", "execution")
# Managing API clients: every method needs agp.admin.
ADMIN_GROUP = "admin"



def required_scopes(view, method: str) -> list[str]:
    """The scopes of which a token needs one for ``method`` on ``view``."""
    group = getattr(view, "scope_group", "")
    if group == ADMIN_GROUP:
        return [ADMIN_SCOPE]
    if method in READ_METHODS:
        declared = getattr(view, "read_scopes", None)
        if declared:
            return list(declared)
        default = [f"agp.{group}.read", f"agp.{group}.write"]
    else:
        declared = (getattr(view, "write_scopes", None) or {}).get(getattr(view, "action", None))
        if declared:
            return [declared] if isinstance(declared, str) else list(declared)
        default = [f"agp.{group}.write"]
    if group not in GROUPS:
        # Fail closed and loudly: a view without its API group must not fall open.
        raise ImproperlyConfigured(f"{type(view).__name__} declares no scope_group (one of {', '.join(GROUPS)}).")
    return default


def holds_scope(request, scope: str) -> bool:
    """Whether the caller holds ``scope`` (everyone does with authentication off)."""
    if not auth_enabled():
        return True
    principal = request.user
    return principal is not None and scope in principal.scopes


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


def scopes_require(request, scopes: list[str] | tuple[str, ...]) -> None:
    """For a view whose needed scope depends on the record it finds: 403 unless the token holds
    one of ``scopes`` (nothing to check with authentication off)."""
    if not auth_enabled():
        return
    principal = request.user
    if principal is None:
        raise errors.Unauthenticated("A bearer token is required.")
    if principal.scopes.isdisjoint(scopes):
        raise errors.InsufficientScope(list(scopes))
