"""``agp_project.db.CompiledQuery``: a queryset compiled once, run prepared, loaded as the ORM loads it."""

from datetime import UTC, datetime

import pytest
from django.db.models import Exists

from agp_project.db import CompiledQuery
from registry.models import Delegation, PolicySet, Task
from tests.decision.factories import make_policy_set, make_task

pytestmark = pytest.mark.django_db


def policy_set_with_task(policy_set_id, task_id):
    return (PolicySet.objects.filter(policy_set_id=policy_set_id)
            .only("policy_set_id", "status", "ruleset", "effective_from", "expires_at")
            .annotate(task_exists=Exists(Task.objects.filter(task_id=task_id))))


def test_it_loads_the_row_as_the_orm_does(django_assert_num_queries):
    task = make_task()
    stored = make_policy_set(policy_set_id="ps-'quoted\"", effective_from=datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC))
    query = CompiledQuery(policy_set_with_task, "policy_set_id", "task_id")

    with django_assert_num_queries(1):
        found = query.first(policy_set_id=stored.policy_set_id, task_id=task.task_id)
    expected = policy_set_with_task(stored.policy_set_id, task.task_id).get()

    assert type(found) is PolicySet and not found._state.adding
    assert found.get_deferred_fields() == expected.get_deferred_fields() and "ruleset_hash" in found.get_deferred_fields()
    for name in ("id", "policy_set_id", "status", "ruleset", "effective_from", "expires_at", "task_exists"):
        assert getattr(found, name) == getattr(expected, name), name
    assert found.effective_from == datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC) and found.task_exists is True


def test_each_call_binds_its_own_values():
    first, second, task = make_policy_set(), make_policy_set(), make_task()
    query = CompiledQuery(policy_set_with_task, "policy_set_id", "task_id")

    assert query.first(policy_set_id=first.policy_set_id, task_id=task.task_id).pk == first.pk
    assert query.first(policy_set_id=second.policy_set_id, task_id="no-such-task").task_exists is False
    assert query.first(policy_set_id="no-such-set", task_id=task.task_id) is None
    assert query.first(policy_set_id="x' OR '1'='1", task_id=task.task_id) is None


def test_it_refuses_a_queryset_that_transforms_its_argument():
    query = CompiledQuery(lambda prefix: PolicySet.objects.filter(policy_set_id__startswith=prefix), "prefix")

    with pytest.raises(TypeError, match="transformed"):
        query.first(prefix="ps-")


def test_it_refuses_a_queryset_that_joins_another_model():
    query = CompiledQuery(lambda delegation_id: Delegation.objects.select_related("parent")
                          .filter(delegation_id=delegation_id), "delegation_id")

    with pytest.raises(TypeError, match="one model"):
        query.first(delegation_id="d")
