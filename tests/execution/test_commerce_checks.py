"""The commerce check (docs/reference/execution.md): room in the session, the spend limits of every
link up the chain, liability bindings, a usable amount in the session's currency, and the reasons
written as the API writes money."""

from decimal import Decimal

import pytest
from django.db.models import F, Sum
from django.utils import timezone

from agp_project.exactjson import decimal_text
from decision.models import CommerceSession
from execution.checks import envelope_checks
from registry.models import Delegation, LiabilityBinding
from tests.execution.factories import check_inputs, failed_checks, make_delegation, make_full_world, make_world

pytestmark = pytest.mark.django_db


def _commerce_reason(world, **overrides) -> str:
    report = envelope_checks(inputs=check_inputs(world, **overrides))
    assert failed_checks(report) == ["commerce"]
    return report.result("commerce")["reason"]


def test_it_fails_commerce_without_room_in_the_session():
    world = make_full_world()
    CommerceSession.objects.filter(pk=world.session.pk).update(spent_amount=Decimal("120"),
                                                               reserved_amount=Decimal("40"))
    # Amounts as the API writes them: 40, not 40.0000 (the column's scale).
    assert "has 40 USD left, less than 50" in _commerce_reason(world)


def test_it_fails_commerce_beyond_the_delegation_spend_limit():
    world = make_full_world(spend_limit=Decimal("40"))
    assert "spend limit 40" in _commerce_reason(world)


def _sibling_session(world, spent: Decimal) -> None:
    """A session under a sibling of the agent's delegation (same root) that has spent ``spent``."""
    sibling = make_delegation(root_principal=world.root_principal, delegator=world.orchestrator_id,
                              delegate="sibling-agent", scope=["crm:update"], parent=world.root_delegation,
                              spend=("USD", Decimal("500")))
    CommerceSession.objects.create(session_id="cs-sibling", task=world.task, agent_id="sibling-agent",
                                   delegation=sibling, currency="USD", amount_limit=Decimal("500"),
                                   spent_amount=spent, created_at=timezone.now())


def test_it_counts_spending_of_sibling_sessions_against_an_ancestors_limit():
    world = make_full_world(root_spend_limit=Decimal("500"), spend_limit=Decimal("500"))
    _sibling_session(world, Decimal("460"))
    reason = _commerce_reason(world)
    assert world.root_delegation.delegation_id in reason and "460" in reason


def test_it_fails_commerce_without_a_liability_binding_or_with_too_little_coverage():
    world = make_full_world()
    LiabilityBinding.objects.filter(pk=world.binding.pk).update(coverage_amount=Decimal("10"))
    assert "covers 10" in _commerce_reason(world)
    LiabilityBinding.objects.filter(pk=world.binding.pk).update(status="revoked")
    assert "no active liability binding" in _commerce_reason(world)


@pytest.mark.parametrize("parameters, expected", [
    ({"currency": "USD"}, "parameters.amount"),
    ({"amount": 50}, "parameters.currency"),
    ({"amount": -5, "currency": "USD"}, "parameters.amount"),
    ({"amount": Decimal("0.001"), "currency": "USD"}, "has more decimals than USD has (2)"),
    ({"amount": Decimal("1.5"), "currency": "JPY"}, "has more decimals than JPY has (0)"),
    ({"amount": Decimal("0.00001"), "currency": "XYZ"}, "more decimals than any currency has (4)"),
    ({"amount": "50", "currency": "USD"}, "parameters.amount, a JSON number"),  # a string is not money
    ({"amount": 1e15, "currency": "USD"}, "too large"),
    ({"amount": 1e30, "currency": "USD"}, "too large"),
])
def test_it_fails_commerce_without_a_usable_amount(parameters, expected):
    world = make_full_world(allowed_parameter_ranges={})
    assert expected in _commerce_reason(world, parameters=parameters)


def test_it_passes_a_read_whose_parameters_hold_an_amount_too_large_to_transact():
    world = make_world()
    report = envelope_checks(inputs=check_inputs(world, parameters={"amount": 1e30}))
    assert report.passed, report.failed


def test_it_fails_commerce_in_another_currency():
    world = make_full_world(allowed_parameter_ranges={})
    reason = _commerce_reason(world, parameters={"amount": 50, "currency": "EUR"})
    assert "is in USD, not EUR" in reason


def test_it_reports_the_spending_under_a_link_as_the_orm_sums_it():
    world = make_full_world(root_spend_limit=Decimal("500"), spend_limit=Decimal("500"))
    CommerceSession.objects.filter(pk=world.session.pk).update(spent_amount=Decimal("100.25"))
    _sibling_session(world, Decimal("420.5"))
    used = CommerceSession.objects.filter(delegation__path__startswith=world.root_delegation.path).aggregate(
        used=Sum(F("spent_amount") + F("reserved_amount")))["used"]

    reason = _commerce_reason(world)

    limit = Delegation.objects.get(pk=world.root_delegation.pk).spend_amount
    assert reason.endswith(f"spend limit {decimal_text(limit)} USD would be exceeded ({decimal_text(used)} already "
                           f"spent or reserved)")
    assert reason.endswith("spend limit 500 USD would be exceeded (520.75 already spent or reserved)")
