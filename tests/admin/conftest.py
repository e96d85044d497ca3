import pytest
from django.contrib.auth.models import User
from django.test import Client as DjangoClient

from core.auditors import auditor_create

from .world import make_admin_world

AUDITOR_PASSWORD = "auditor-password-0123"


@pytest.fixture
def auditor(db):
    return auditor_create(username="alice-auditor", password=AUDITOR_PASSWORD)


@pytest.fixture
def auditor_client(auditor):
    client = DjangoClient()
    client.force_login(auditor)
    return client


@pytest.fixture
def superuser(db):
    return User.objects.create_superuser(username="root", password="root-password", email="root@example.org")


@pytest.fixture
def superuser_client(superuser):
    client = DjangoClient()
    client.force_login(superuser)
    return client


@pytest.fixture
def admin_world(db):
    return make_admin_world()
