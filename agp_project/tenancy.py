"""Tenants: the root principals whose records a caller may see (docs/reference/identity.md).

One filter for every reader (API viewsets, the admin, the auditor's pages): ``tenants`` is
the caller's set of root principals, or None for a caller of every tenant.
"""

from django.db.models import Q

# The ``tenant_field`` of records that belong to no tenant and reveal nothing of one (API
# clients for operators, checkpoints and other hashes).
NO_TENANT = ""
# A binding to every tenant (an auditor of the whole service).
EVERY_TENANT = "*"


def tenant_condition(tenants: frozenset[str] | None, field: str, *, shared_when_null: bool = False) -> Q:
    """The filter that keeps the records of ``tenants`` (every record when None), ``field``
    being the path from the record to its root principal; records of no tenant pass only
    with ``shared_when_null``."""
    if tenants is None:
        return Q()
    condition = Q(**{f"{field}__in": tenants})
    return condition | Q(**{f"{field}__isnull": True}) if shared_when_null else condition
