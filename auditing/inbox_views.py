"""The approvals inbox (docs/reference/approvals.md): the decisions a person's tenants wait on,
and one decision's page where the person approves or rejects it, with a reason.

For admin users linked to a human client (``manage.py create_approver``, or the clients admin);
anyone else gets a 403. The verdict is a CSRF-protected POST (the admin site's ``admin_view``)
that records an approval as that client, through the same service as ``POST /agp/approvals``:
every rule of docs/reference/identity.md holds, whatever the form posted. Forward only: an
approval is never edited or withdrawn, a later rejection withdraws the approvals before it.
"""

from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_safe

from agp_project import errors
from decision.choices import ApprovalVerdict, DecisionStatus
from decision.services import approval_create

from . import inbox as selectors

VERDICTS = {"approve": ApprovalVerdict.APPROVED, "reject": ApprovalVerdict.REJECTED}


class VerdictForm(forms.Form):
    verdict = forms.ChoiceField(choices=[(name, name) for name in VERDICTS])
    reason = forms.CharField(max_length=2000, strip=True, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                             help_text="Why: kept with the approval, signed, in the evidence of the action.")


def _person(request) -> selectors.Person:
    person = selectors.person_of(request.user)
    if person is None:
        raise PermissionDenied("This account approves nothing: it is not linked to a person's (human) API client.")
    return person


def _render(request, template: str, title: str, status: int = 200, **context):
    return TemplateResponse(request, template, {**admin.site.each_context(request), "title": title, **context},
                            status=status)


@require_safe
def inbox_view(request):
    person = _person(request)
    items = selectors.inbox(person=person)
    return _render(request, "auditing/inbox.html", "Approvals inbox", person=person, items=items,
                   inbox_max=selectors.INBOX_MAX)


def _closed(decision) -> str:
    """Why nobody decides on ``decision`` any more, or "" while it is a draft."""
    return "" if decision.status == DecisionStatus.DRAFT else f"This decision is {decision.status}: it waits for nobody."


def _decision_page(request, person, item, form, status=200, refused=""):
    decision = item.decision
    closed = _closed(decision)
    return _render(request, "auditing/inbox_decision.html", f"Decision {decision.decision_id}", status=status,
                   person=person, item=item, form=form, refused=refused, closed=closed,
                   may_decide=not item.refusal and not closed)


@require_http_methods(["GET", "HEAD", "POST"])
def inbox_decision_view(request, decision_id: str):
    person = _person(request)
    item = selectors.inbox_decision(person=person, decision_id=decision_id)
    if item is None:
        raise Http404("No decision of your tenants waits for people with this id.")
    if request.method != "POST":
        return _decision_page(request, person, item, VerdictForm())
    form = VerdictForm(request.POST)
    if not form.is_valid():
        return _decision_page(request, person, item, form, status=400)
    refusal = item.refusal or _closed(item.decision)
    if refusal:
        # The buttons were not offered; a posted form is refused all the same.
        return _decision_page(request, person, item, form, status=403, refused=refusal)
    verdict = VERDICTS[form.cleaned_data["verdict"]]
    try:
        approval_create(actor=person.client_id, decision_ref=decision_id, approver=person.subject, verdict=verdict,
                        approver_kind="human", reason=form.cleaned_data["reason"],
                        expires_at=timezone.now() + timedelta(seconds=settings.AGP_INBOX_APPROVAL_TTL_SECONDS))
    except errors.AGPError as exc:
        failed = "; ".join(check["reason"] for check in exc.details.get("failed_checks", []))
        return _decision_page(request, person, item, form, status=exc.status_code,
                              refused=f"{exc.message}{' ' + failed if failed else ''}")
    messages.success(request, f"You {verdict} decision {decision_id} as {person.subject}.")
    return HttpResponseRedirect(reverse("approvals:decision", args=[decision_id]))
