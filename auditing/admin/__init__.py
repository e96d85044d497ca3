"""Admin pages of the registry, decision and execution records (read-only for auditors).

A page links the records an auditor follows from it (a task's decisions and envelopes, an
envelope's evaluation and approvals), across the three apps: so the pages live here, above
them, and each app stays free of imports from the apps above it.
"""

from django.contrib import admin

from . import decision, execution, registry  # noqa: F401 - registers the model admins

# The admin's home page leads to the auditor's dashboard (auditing/views.py).
admin.site.index_template = "admin/agp_index.html"
