"""The auditor's pages beside the admin's lists: a dashboard, an action's timeline, a delegation tree.

Read-only like the rest of the admin: GET only, for staff who may view the records shown
(the ``auditors`` group, or a superuser). Mounted under ``/admin/audit/`` (agp_project/urls.py),
each view wrapped by the admin site so that login and the admin's look come with it.
"""

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.template.response import TemplateResponse
from django.views.decorators.http import require_safe

from core.admin_base import change_url, changelist_url, staff_tenants
from core.models import LedgerEvent
from decision.models import Escalation
from execution.models import ActionEnvelope, Operation

from . import selectors
from .charts import OUTCOME_COLOURS, delegation_tree_svg, envelope_chart

DASHBOARD_PERMISSIONS = ("core.view_ledgerevent", "execution.view_actionenvelope", "execution.view_operation",
                         "decision.view_escalation")
TIMELINE_PERMISSIONS = ("execution.view_actionenvelope", "execution.view_operation", "execution.view_receipt",
                        "decision.view_decision", "decision.view_approval", "registry.view_task")
TREE_PERMISSIONS = ("registry.view_delegation",)


def _allowed(request, permissions) -> None:
    if not request.user.has_perms(permissions):
        raise PermissionDenied


def _render(request, template: str, title: str, **context):
    return TemplateResponse(request, template, {**admin.site.each_context(request), "title": title, **context})


@require_safe
def dashboard_view(request):
    _allowed(request, DASHBOARD_PERMISSIONS)
    figures = selectors.dashboard(tenants=staff_tenants(request))
    days = figures.days
    rows = [{"day": day, **{name: figures.envelopes_per_day[name][i] for name in OUTCOME_COLOURS}}
            for i, day in enumerate(days)]
    return _render(request, "auditing/dashboard.html", "Auditor's dashboard", figures=figures,
                   chart=envelope_chart(days, figures.envelopes_per_day), day_rows=list(reversed(rows)),
                   outcomes=list(OUTCOME_COLOURS), verify_url=changelist_url(LedgerEvent) + "verify/",
                   ledger_url=changelist_url(LedgerEvent), escalations_url=changelist_url(Escalation, status="open"),
                   operations_url=changelist_url(Operation), envelopes_url=changelist_url(ActionEnvelope),
                   chart_days=selectors.CHART_DAYS, refusal_days=selectors.REFUSAL_DAYS,
                   verify_max=selectors.VERIFY_ON_LOAD_MAX_EVENTS)


@require_safe
def timeline_view(request, action_id: str):
    _allowed(request, TIMELINE_PERMISSIONS)
    timeline = selectors.action_timeline(action_id=action_id, tenants=staff_tenants(request))
    if timeline is None:
        raise Http404("No accepted action with this id.")
    entries = [{"entry": entry, "url": change_url(entry.record) if entry.record is not None else None}
               for entry in timeline.entries]
    return _render(request, "auditing/timeline.html", f"Timeline of action {action_id}", timeline=timeline,
                   entries=entries, envelope_url=change_url(timeline.envelope),
                   ledger=[{"event": event, "url": change_url(event)} for event in timeline.ledger])


@require_safe
def delegation_tree_view(request, delegation_id: str):
    _allowed(request, TREE_PERMISSIONS)
    tree = selectors.delegation_tree(delegation_id=delegation_id, tenants=staff_tenants(request))
    if tree is None or tree.root is None:
        raise Http404("No delegation with this id.")
    picture = delegation_tree_svg(root_principal=tree.root_principal, root=tree.root,
                                  focus_id=tree.focus.delegation_id, link_for=change_url)
    return _render(request, "auditing/delegation_tree.html", f"Delegation tree of {tree.root_principal}",
                   tree=tree, picture=picture, focus_url=change_url(tree.focus))
