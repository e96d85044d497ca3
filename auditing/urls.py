"""``/admin/audit/``: the auditor's pages (auditing/views.py), behind the admin site's login."""

from django.contrib import admin
from django.urls import path

from .views import dashboard_view, delegation_tree_view, timeline_view

app_name = "audit"
urlpatterns = [
    path("", admin.site.admin_view(dashboard_view), name="dashboard"),
    path("actions/<str:action_id>/timeline/", admin.site.admin_view(timeline_view), name="timeline"),
    path("delegations/<str:delegation_id>/tree/", admin.site.admin_view(delegation_tree_view),
         name="delegation-tree"),
]
