"""People who approve in the browser: an admin user linked to a human client (docs/reference/approvals.md)."""

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from agp_project import errors
from auth_tokens.models import Client
from auth_tokens.approvers import client_person_link
from auth_tokens.services import client_create
from core.models import LedgerEvent, StaffTenancy

pytestmark = pytest.mark.django_db


def test_create_approver_makes_a_staff_user_linked_to_a_human_client_of_its_tenants(db, capsys):
    call_command("create_approver", "--username", "dora", "--subject", "dora@acme.example", "--tenant", "acme",
                 "--generate-password")

    user = User.objects.get(username="dora")
    client = Client.objects.get(user=user)
    assert user.is_staff and not user.is_superuser and not user.user_permissions.exists()
    assert (client.kind, client.subject, client.tenants) == ("human", "dora@acme.example", ["acme"])
    assert StaffTenancy.objects.get(user=user).tenants == ["acme"]
    assert "password: " in capsys.readouterr().out


def test_a_superuser_links_a_human_client_to_a_user_in_the_clients_admin(admin_client):
    client, _ = client_create(client_id="erin-client", kind="human", subject="erin@acme.example", tenants=["acme"],
                              actor="test")
    erin = User.objects.create_user(username="erin", password="erin-password-0123", is_staff=True)

    response = admin_client.post(f"/admin/auth_tokens/client/{client.pk}/change/",
                                     {"description": "", "scopes": client.scopes, "user": erin.pk})

    assert response.status_code == 302, response.content
    client.refresh_from_db()
    assert client.user == erin
    assert StaffTenancy.objects.get(user=erin).tenants == ["acme"]


def test_only_a_human_client_is_linked_and_one_user_approves_as_one_client(db):
    person, _ = client_create(client_id="fay-client", kind="human", subject="fay@acme.example", tenants=["acme"],
                              actor="test")
    other, _ = client_create(client_id="gus-client", kind="human", subject="gus@acme.example", tenants=["acme"],
                             actor="test")
    agent, _ = client_create(client_id="bot-client", kind="agent", agent_id="bot", tenants=["acme"], actor="test")
    User.objects.create_user(username="fay", password="fay-password-0123", is_staff=True)

    client_person_link(client_id=person.client_id, username="fay", actor="test")

    with pytest.raises(errors.AGPError):
        client_person_link(client_id=agent.client_id, username="fay", actor="test")
    with pytest.raises(errors.Conflict):
        client_person_link(client_id=other.client_id, username="fay", actor="test")
    with pytest.raises(errors.AGPError):
        client_person_link(client_id=other.client_id, username="nobody", actor="test")
    assert LedgerEvent.objects.filter(resource_id="fay-client", event_type="api_client.person_linked").count() == 1
    client_person_link(client_id=person.client_id, username=None, actor="test")
    assert Client.objects.get(client_id="fay-client").user is None


def test_create_approver_refuses_an_existing_username(db):
    User.objects.create_user(username="hal", password="hal-password-0123")

    with pytest.raises(Exception, match="already exists"):
        call_command("create_approver", "--username", "hal", "--subject", "hal@acme.example", "--tenant", "acme",
                     "--generate-password")
    assert not Client.objects.filter(subject="hal@acme.example").exists()
