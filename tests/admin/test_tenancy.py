"""The auditors' admin follows the tenants: an auditor bound to tenants sees only their records.

Every registered model is walked (a model added later is walked too): a model admin that
declares no tenant field shows a bound auditor nothing, so forgetting one fails closed.
"""

import pytest
from django.contrib import admin
from django.test import Client as DjangoClient

from auth_tokens.models import UsedJti
from core.admin_base import AuditorReadOnlyMixin
from core.auditors import auditor_create
from core.models import Checkpoint, LedgerHead, MerkleTile, MerkleTreeLock
from tests.admin.test_permissions import MODELS, label, url

pytestmark = pytest.mark.django_db

# Records that reveal hashes, not a tenant's records: every auditor sees them.
HASHES = {LedgerHead, Checkpoint, MerkleTile, MerkleTreeLock, UsedJti}


def bound_auditor(username: str, tenants: list[str]) -> DjangoClient:
    client = DjangoClient()
    client.force_login(auditor_create(username=username, password="p-0123456789", tenants=tenants))
    return client


@pytest.mark.parametrize("model", MODELS, ids=label)
def test_an_auditor_of_another_tenant_sees_no_record_of_the_tenant(model, admin_world):
    other = bound_auditor("bob-auditor", ["other-tenant"])
    row = admin_world.rows[model]

    listing = other.get(url(model, "changelist"))
    page = other.get(url(model, "change", row.pk))

    assert listing.status_code == 200
    if model in HASHES:
        assert listing.context["cl"].result_count >= 1
        return
    assert listing.context["cl"].result_count == 0
    assert page.status_code == 302  # the admin's answer for a record it cannot find: back to the index
    assert isinstance(admin.site.get_model_admin(model), AuditorReadOnlyMixin)


def test_an_auditor_of_the_tenant_sees_its_records_and_not_those_of_no_tenant(admin_world):
    mine = bound_auditor("carol-auditor", [admin_world.world.root_principal])
    tenantless = {"auth.User", "auth.Group", "auth_tokens.Client", "core.IdempotencyRecord", "core.OutboxMessage",
                  "core.StaffTenancy"}
    for model in MODELS:
        count = mine.get(url(model, "changelist")).context["cl"].result_count
        assert (count == 0) == (label(model) in tenantless), (label(model), count)


def test_the_dashboard_timeline_and_tree_follow_the_tenants(admin_world):
    other = bound_auditor("dave-auditor", ["other-tenant"])
    mine = bound_auditor("erin-auditor", [admin_world.world.root_principal])
    action = admin_world.envelope.action_id
    delegation = admin_world.world.delegation.delegation_id

    assert other.get(f"/admin/audit/actions/{action}/timeline/").status_code == 404
    assert other.get(f"/admin/audit/delegations/{delegation}/tree/").status_code == 404
    assert mine.get(f"/admin/audit/actions/{action}/timeline/").status_code == 200
    assert mine.get(f"/admin/audit/delegations/{delegation}/tree/").status_code == 200
    theirs, own = other.get("/admin/audit/").context["figures"], mine.get("/admin/audit/").context["figures"]
    assert sum(theirs.operations_by_status.values()) == 0 and sum(own.operations_by_status.values()) == 1
    assert theirs.active_freezes == [] and len(own.active_freezes) == 1
    assert theirs.open_escalation_count == 0 and own.open_escalation_count == 1
