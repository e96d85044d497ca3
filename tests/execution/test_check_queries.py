"""The eleven checks read a fixed number of queries, whatever the table sizes (docs/reference/execution.md)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from decision.models import Approval, CommerceSession
from execution.checks import Created, envelope_checks, envelope_recheck
from execution.models import ActionEnvelope
from registry.models import Delegation, Freeze
from tests.execution.factories import check_inputs, failed_checks, make_full_world, make_noise, make_world

pytestmark = pytest.mark.django_db

URL = "/agp/action-envelopes"
# The checks' queries, in tests/query_counts.json: for a read, the task, skills, approvals, capability,
# decision, evaluation, escalations, freezes, delegation candidates, their links, revocations; for a
# transact, also the impact assessment (rule 5), the commerce session, the spending under the chain
# and the liability bindings.
READ = "envelope checks: read"
TRANSACT = "envelope checks: transact"
MAX_VALIDATE_QUERIES = 20


def _count_check_queries(world) -> int:
    inputs = check_inputs(world)
    with CaptureQueriesContext(connection) as captured:
        report = envelope_checks(inputs=inputs)
    assert report.passed, report.failed
    return len(captured.captured_queries)


@pytest.mark.parametrize("factory", [make_world, make_full_world])
def test_it_validates_with_a_fixed_number_of_queries_at_small_and_large_table_sizes(factory, api, query_counts):
    small_world = factory()
    small = _count_check_queries(small_world)

    large_world = factory()
    make_noise(large_world, 1000)
    make_noise(small_world, 10)
    large = _count_check_queries(large_world)

    assert small == large == query_counts.expected(READ if factory is make_world else TRANSACT)

    # The whole validate-only request too: same count at both sizes.
    counts = []
    for world in (small_world, large_world):
        with CaptureQueriesContext(connection) as captured:
            response = api.post(URL, world.envelope_request(), format="json")
        assert response.status_code == 200, response.json()
        counts.append(len(captured.captured_queries))
    assert counts[0] == counts[1] <= MAX_VALIDATE_QUERIES


def test_it_pins_the_query_count_of_each_action_class(query_counts):
    read, transact = make_world(), make_full_world()
    read_inputs, transact_inputs = check_inputs(read), check_inputs(transact)
    with query_counts.pinned(READ):
        assert envelope_checks(inputs=read_inputs).passed
    with query_counts.pinned(TRANSACT):
        assert envelope_checks(inputs=transact_inputs).passed


def test_it_reads_the_matching_freezes_in_one_query_whether_or_not_one_matches(django_assert_num_queries, query_counts):
    world = make_world()
    # Other targets' freezes, active and lifted, and a lifted one of this agent: none matches.
    now = timezone.now()
    Freeze.objects.bulk_create([
        Freeze(freeze_id="frz-other-agent", target_type="agent", target_id="someone-else", reason="r",
               frozen_by="ops", created_at=now),
        Freeze(freeze_id="frz-other-tool", target_type="tool", target_id="another-tool", reason="r",
               frozen_by="ops", created_at=now),
        Freeze(freeze_id="frz-lifted", target_type="agent", target_id=world.agent_id, reason="r", frozen_by="ops",
               status="lifted", lifted_at=now, created_at=now)])
    with django_assert_num_queries(query_counts.expected(READ)):
        assert envelope_checks(inputs=check_inputs(world)).passed

    Freeze.objects.create(freeze_id="frz-principal", target_type="root_principal", target_id=world.root_principal,
                          reason="r", frozen_by="ops", created_at=now)
    Freeze.objects.create(freeze_id="frz-tool", target_type="tool", target_id=world.tool_id, reason="r",
                          frozen_by="ops", created_at=now)
    with django_assert_num_queries(query_counts.expected(READ)):
        report = envelope_checks(inputs=check_inputs(world))
    assert failed_checks(report) == ["freeze"]
    assert report.result("freeze")["reason"] == (
        f"frozen by freeze 'frz-principal' (root_principal {world.root_principal!r}), "
        f"freeze 'frz-tool' (tool {world.tool_id!r})")
    assert [f["freeze_id"] for f in report.freezes] == ["frz-principal", "frz-tool"]


def test_a_submission_s_checks_find_an_accepted_envelope_before_anything_else(api, django_assert_num_queries, query_counts):
    world = make_world()
    inputs = check_inputs(world)
    with django_assert_num_queries(query_counts.expected(READ) + 1):
        fresh = envelope_checks(inputs=inputs, new=True)
    assert fresh.passed and not fresh.already_accepted and len(fresh.results) == 11
    assert api.post("/agp/action-envelopes", world.envelope_request(action_id=inputs.action_id), format="json",
                    HTTP_PREFER="respond-async").status_code == 202
    # Accepted now: one query, no check runs, and the report does not pass (fails closed).
    with django_assert_num_queries(1):
        duplicate = envelope_checks(inputs=inputs, new=True)
    assert duplicate.already_accepted and not duplicate.passed and duplicate.results == []
    # Execution and replay check a stored envelope: it is not a duplicate of itself.
    assert not envelope_checks(inputs=inputs).already_accepted


def test_a_decision_and_evaluation_just_created_are_judged_as_read_back_without_reading_them(
        django_assert_num_queries, query_counts):
    world = make_world()
    Approval.objects.filter(decision=world.decision).delete()  # as for a decision nobody has seen yet
    inputs = check_inputs(world)
    read = envelope_checks(inputs=inputs)

    # Not the decision, the evaluation, nor the decision's approvals (none can cite it yet).
    with django_assert_num_queries(query_counts.expected(READ) - 3):
        created = envelope_checks(inputs=inputs, created=Created(world.decision, world.evaluation))

    assert created.passed and created.results == read.results
    assert (created.assessment_read, created.assessment_id) == (True, None)
    # Records the envelope does not cite are read as any others.
    with django_assert_num_queries(query_counts.expected(READ)):
        other = envelope_checks(inputs=check_inputs(world, decision_ref="dec-other"),
                                created=Created(world.decision, world.evaluation))
    assert failed_checks(other) == ["decision"]


def test_it_rechecks_a_stored_envelope_with_its_own_payment(api, django_assert_num_queries, query_counts):
    world = make_full_world(amount_limit=Decimal("50"))
    response = api.post(URL, world.envelope_request(), format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 202, response.json()
    envelope = ActionEnvelope.objects.get()

    # The session is full, but with the envelope's own reservation (its payment: one query more).
    with django_assert_num_queries(query_counts.expected(TRANSACT) + 1):
        report = envelope_recheck(envelope=envelope)

    assert report.passed, report.failed
    assert report.commerce_session_ref == world.session.session_id


def test_it_sums_the_spending_of_the_usable_chain_when_the_preferred_delegation_is_broken(
        django_assert_num_queries, query_counts):
    world = make_full_world(root_spend_limit=Decimal("500"), spend_limit=Decimal("500"))
    from tests.execution.factories import make_delegation
    # A second tree for the same root principal, under which the agent's other delegation
    # has already spent 470 of its 500: the preferred chain's sums would let 50 through.
    other_root = make_delegation(root_principal=world.root_principal, delegator=world.root_principal,
                                 delegate=world.orchestrator_id, scope=["crm:*"], spend=("USD", Decimal("500")))
    other = make_delegation(root_principal=world.root_principal, delegator=world.orchestrator_id,
                            delegate=world.agent_id, scope=["crm:*"], parent=other_root,
                            spend=("USD", Decimal("500")))
    CommerceSession.objects.create(session_id="cs-other-tree", task=world.task, agent_id="someone",
                                   delegation=other, currency="USD", amount_limit=Decimal("500"),
                                   spent_amount=Decimal("470"), created_at=timezone.now())
    # The preferred delegation (the capability's) stays a candidate, but its root expired.
    Delegation.objects.filter(pk=world.root_delegation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    inputs = check_inputs(world)

    # The sums of the preferred, broken chain, then those of the usable one.
    with django_assert_num_queries(query_counts.expected(TRANSACT) + 1):
        report = envelope_checks(inputs=inputs)

    assert report.delegation_ref == other.delegation_id
    assert report.chain_delegation_pks == [other_root.pk, other.pk]
    assert failed_checks(report) == ["capability", "commerce"]
    reason = report.result("commerce")["reason"]
    assert f"delegation {other_root.delegation_id!r} spend limit" in reason
    assert f"delegation {other.delegation_id!r} spend limit" in reason
    assert "outside the agent's delegation chain" in reason  # the session is under the broken one
