"""Operator commands: bootstrap's auditor group, create_auditor, expire_idempotency_keys, and their --help."""

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError
from django.test import RequestFactory
from django.utils import timezone

from core.auditors import AUDITORS_GROUP, auditor_group_ensure
from core.models import IdempotencyRecord, LedgerEvent


def _login_request():
    """django-axes counts admin logins per request: authenticate() needs one."""
    return RequestFactory().post("/admin/login/")


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("name", ["bootstrap", "create_auditor", "verify_ledger", "expire_idempotency_keys"])
def test_it_documents_every_operator_command_in_its_help(name):
    command = load_command_class(get_commands()[name], name)

    text = command.create_parser("manage.py", name).format_help()

    assert len(command.help) > 40
    assert command.help.split()[0] in text


def test_it_creates_an_auditor_with_a_generated_password_shown_once(db):
    out = run("create_auditor", "--username", "carol")

    password = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("password: "))
    user = User.objects.get(username="carol")
    assert authenticate(_login_request(), username="carol", password=password) == user
    assert user.is_staff and not user.is_superuser
    assert list(user.groups.values_list("name", flat=True)) == [AUDITORS_GROUP]
    assert user.get_all_permissions() == {f"{p.content_type.app_label}.{p.codename}"
                                          for p in Group.objects.get(name=AUDITORS_GROUP).permissions.all()}
    assert all(permission.split(".")[1].startswith("view_") for permission in user.get_all_permissions())
    event = LedgerEvent.objects.get(event_type="auditor.created")
    assert (event.resource_type, event.resource_id, event.actor) == ("AdminUser", "carol", "manage.py")
    assert password not in str(event.payload)


def test_it_creates_an_auditor_with_the_given_password(db):
    out = run("create_auditor", "--username", "dave", "--password", "s3cret-enough", "--email", "d@example.org")

    assert "password:" not in out
    assert authenticate(_login_request(), username="dave", password="s3cret-enough").email == "d@example.org"


def test_it_refuses_to_turn_an_existing_user_into_an_auditor(db):
    User.objects.create_user(username="erin", password="original")

    with pytest.raises(CommandError, match="already exists"):
        run("create_auditor", "--username", "erin", "--password", "other")

    assert authenticate(_login_request(), username="erin", password="original") is not None
    assert not User.objects.get(username="erin").groups.exists()
    assert not LedgerEvent.objects.filter(event_type="auditor.created").exists()


def test_it_resyncs_the_auditors_group_to_view_permissions_only(db):
    group = auditor_group_ensure()
    views = set(group.permissions.all())
    group.permissions.add(Permission.objects.get(codename="change_task"))

    again = auditor_group_ensure()

    assert set(again.permissions.all()) == views
    assert Group.objects.filter(name=AUDITORS_GROUP).count() == 1
    assert views and all(p.codename.startswith("view_") for p in views)


def test_it_creates_the_auditors_group_on_bootstrap_safely_twice(db, settings, tmp_path):
    settings.AGP_SIGNING_KEY_FILE = tmp_path / "signing-key.pem"

    first, second = run("bootstrap"), run("bootstrap")

    group = Group.objects.get(name=AUDITORS_GROUP)
    assert group.permissions.filter(codename="view_ledgerevent").exists()
    assert not group.permissions.exclude(codename__startswith="view_").exists()
    assert "group 'auditors'" in first and "group 'auditors'" in second


def _record(key: str, expires_at) -> IdempotencyRecord:
    return IdempotencyRecord.objects.create(client_id="c", method="POST", path="/agp/tasks", key=key,
                                            fingerprint="0" * 64, response_status=201,
                                            response_body=b"{}", created_at=timezone.now(), expires_at=expires_at)


def test_it_deletes_only_the_expired_idempotency_keys(db):
    now = timezone.now()
    for i in range(3):
        _record(f"old-{i}", now - timedelta(seconds=1 + i))
    _record("live", now + timedelta(hours=1))

    dry = run("expire_idempotency_keys", "--dry-run")
    assert IdempotencyRecord.objects.count() == 4
    out = run("expire_idempotency_keys", "--batch-size", "2")

    assert dry.strip() == "3 expired idempotency record(s) would be deleted"
    assert out.strip() == "3 expired idempotency record(s) deleted"
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["live"]
    assert run("expire_idempotency_keys").strip() == "0 expired idempotency record(s) deleted"


def test_it_also_expires_idempotency_keys_periodically_under_celery_beat(db, settings):
    from core.tasks import purge_expired_idempotency_records

    entries = [entry for entry in settings.CELERY_BEAT_SCHEDULE.values()
               if entry["task"] == purge_expired_idempotency_records.name]
    _record("old", timezone.now() - timedelta(seconds=1))
    _record("live", timezone.now() + timedelta(hours=1))

    deleted = purge_expired_idempotency_records.apply().get()

    assert len(entries) == 1 and entries[0]["schedule"] <= 3600
    assert deleted == 1
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["live"]
