"""The ``auditors`` group and its members: Django admin users who may look at everything and change nothing.

The group is kept by ``auditor_group_ensure()``, called by ``manage.py bootstrap`` (after
``migrate``) and by ``manage.py create_auditor``. It is not a data migration: permissions
are created by ``post_migrate``, after every migration has run, so a migration would have
to fabricate them and depend on the latest migration of every app, and would still miss
the models added later. A step that runs after ``migrate`` sees every model there is.
"""

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import AbstractUser, Group, Permission
from django.db import transaction

from agp_project import errors

from .ledger import ledger_append
from .models import StaffTenancy

AUDITORS_GROUP = "auditors"
# Every record of the service, plus who may use the admin (users and groups): an auditor
# asks "who could have changed this?" as often as "what changed?".
AUDITED_APPS = ("core", "auth_tokens", "registry", "decision", "execution", "auth")


def auditor_group_ensure() -> Group:
    """Create the group, or bring it back to exactly the ``view_*`` permissions of the audited apps.

    Idempotent. Any other permission found on the group (someone granted ``change_task``
    by hand) is removed: the group's contract is "view everything, change nothing".
    """
    with transaction.atomic():
        for app_config in apps.get_app_configs():
            if app_config.label in AUDITED_APPS:
                # A no-op after migrate (post_migrate already made them); needed when the
                # tables were made some other way, e.g. a test database without migrations.
                create_permissions(app_config, verbosity=0)
        group, _ = Group.objects.get_or_create(name=AUDITORS_GROUP)
        view_permissions = Permission.objects.filter(content_type__app_label__in=AUDITED_APPS,
                                                     codename__startswith="view_")
        group.permissions.set(view_permissions)
    return group


def staff_user_create(*, username: str, password: str, email: str = "") -> AbstractUser:
    """A new staff admin user with no permission and no group, not a superuser. An existing
    username is a ``Conflict``: an existing account is never silently given a new role, nor
    its password replaced."""
    if not username:
        raise errors.invalid_fields({"username": ["This field may not be blank."]})
    if not password:
        raise errors.invalid_fields({"password": ["This field may not be blank."]})
    user_model = get_user_model()
    if user_model.objects.filter(username=username).exists():
        raise errors.Conflict(f"A user named {username!r} already exists.")
    return user_model.objects.create_user(username=username, email=email, password=password, is_staff=True,
                                          is_superuser=False)


def auditor_create(*, username: str, password: str, email: str = "", actor: str = "manage.py",
                   tenants: list[str] = ()) -> AbstractUser:
    """Create a staff user who belongs to the auditors group and to nothing else.

    ``tenants``: the root principals whose records alone the auditor sees (none: every tenant).

    The creation is recorded in the ledger: who can read the governance records is itself
    governance information. An existing username is a ``Conflict`` (an existing account is
    never silently turned into an auditor, nor its password replaced).
    """
    group = auditor_group_ensure()
    with transaction.atomic():
        user = staff_user_create(username=username, password=password, email=email)
        user.groups.add(group)
        if tenants:
            StaffTenancy.objects.create(user=user, tenants=list(tenants))
        ledger_append(event_type="auditor.created", resource_type="AdminUser", resource_id=username, actor=actor,
                      payload={"username": username, "email": email, "groups": [AUDITORS_GROUP],
                               "tenants": list(tenants)})
    return user
