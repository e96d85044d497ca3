"""API clients of each kind for tests: a client row made by the service, and an APIClient holding its token."""

from rest_framework.test import APIClient

from agp_project.ids import new_id
from auth_tokens.models import Client
from auth_tokens.services import client_create, token_issue


def client_api(kind: str, tenants: list[str] = (), **bindings) -> tuple[APIClient, Client]:
    """A new client of ``kind`` bound to ``tenants`` (and ``agent_id`` or ``subject``), and an API
    client carrying its token. Authentication must be on (the ``auth_settings`` fixture)."""
    client, _ = client_create(client_id=new_id(kind), kind=kind, tenants=list(tenants), actor="test", **bindings)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(client=client, scopes=client.scopes)['access_token']}")
    return api, client


def agent_api(agent_id: str, tenant: str, **kwargs) -> APIClient:
    return client_api("agent", [tenant], agent_id=agent_id, **kwargs)[0]


def person_api(subject: str, tenants: list[str], **kwargs) -> APIClient:
    return client_api("human", tenants, subject=subject, **kwargs)[0]
