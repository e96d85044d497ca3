"""``/admin/approvals/``: the approvals inbox (auditing/inbox_views.py), behind the admin site's login."""

from django.contrib import admin
from django.urls import path

from .inbox_views import inbox_decision_view, inbox_view

app_name = "approvals"
urlpatterns = [
    path("", admin.site.admin_view(inbox_view), name="inbox"),
    path("<str:decision_id>/", admin.site.admin_view(inbox_decision_view), name="decision"),
]
