"""People who approve in the browser: admin users linked to human clients (docs/reference/approvals.md).

A person approves in the approvals inbox as the human client their admin user is linked to,
bound in the admin to that client's tenants; each link and unlink is a ledger event.
"""

from django.contrib.auth import get_user_model
from django.db import transaction

from agp_project import errors
from core.auditors import staff_user_create
from core.ledger import ledger_append
from core.models import StaffTenancy

from .kinds import ClientKind
from .models import Client
from .services import RESOURCE_TYPE, client_create, client_get


def client_person_link(*, client_id: str, username: str | None, actor: str) -> Client:
    """Link a human client to the admin user who approves as it in the approvals inbox
    (docs/reference/approvals.md); ``username`` None unlinks it.

    The user is bound to the client's tenants in the admin too (``StaffTenancy``), so what
    the admin shows them is what the client may read. One user approves as one client.
    """
    with transaction.atomic():
        client = client_get(client_id, for_update=True)
        if client.kind != ClientKind.HUMAN:
            raise errors.invalid_fields({"user": ["Only a human client approves in the inbox."]})
        user = None
        if username is not None:
            user = get_user_model().objects.filter(username=username).first()
            if user is None:
                raise errors.invalid_fields({"user": [f"No admin user named {username!r}."]})
            taken = Client.objects.filter(user=user).exclude(pk=client.pk).values_list("client_id", flat=True).first()
            if taken:
                raise errors.Conflict(f"User {username!r} already approves as client {taken!r}.")
        if client.user_id == (user.pk if user else None):
            return client
        client.user = user
        client.save(update_fields=["user", "updated_at"])
        if user is not None and not user.is_superuser:
            StaffTenancy.objects.update_or_create(user=user, defaults={"tenants": list(client.tenants)})
        ledger_append(event_type="api_client.person_linked" if user else "api_client.person_unlinked",
                      resource_type=RESOURCE_TYPE, resource_id=client_id, actor=actor,
                      payload={"username": username} if user else {})
    return client


def approver_create(*, username: str, password: str, subject: str, tenants: list[str], client_id: str = "",
                    email: str = "", actor: str) -> tuple[object, Client]:
    """A person who approves in the browser: a staff admin user (no permissions, not a superuser)
    linked to a new human client with ``subject`` in ``tenants``. An existing username is a
    ``Conflict``: an account is never silently made an approver."""
    with transaction.atomic():
        user = staff_user_create(username=username, password=password, email=email)
        client, _ = client_create(client_id=client_id or f"person-{username}"[:128], kind=ClientKind.HUMAN,
                                  subject=subject, tenants=tenants, actor=actor,
                                  description=f"approves in the inbox as admin user {username}")
        client = client_person_link(client_id=client.client_id, username=username, actor=actor)
    return user, client
