"""Cancelling a backtest through its operation (docs/reference/governance.md): who may, with which scope, and
that a cancelled backtest never runs."""

import pytest

from tests.decision.backtests import CANDIDATE, URL, backtest_of, run, start
from tests.execution.factories import make_policy_set, make_world
from tests.execution.worker import ledger_event_types, submit_async
from tests.identity import person_api

pytestmark = pytest.mark.django_db


def test_a_pending_backtest_is_cancelled_through_its_operation_and_then_never_runs(api):
    candidate = make_policy_set(ruleset=CANDIDATE)
    operation = start(api, policy_set_id=candidate.policy_set_id)

    response = api.patch(f"/agp/operations/{operation['operation_id']}", {"status": "cancelled"}, format="json")

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled" and response.json()["progress"]["evaluations"] == 0
    assert run(backtest_of(operation)) == "done"
    again = api.patch(f"/agp/operations/{operation['operation_id']}", {"status": "cancelled"}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "AGP_INVALID_TRANSITION"
    assert ledger_event_types(backtest_of(operation)) == ["backtest.created", "backtest.cancelled"]


def test_only_the_client_that_asked_for_a_backtest_or_an_operator_cancels_it(auth_settings):
    candidate = make_policy_set(ruleset=CANDIDATE, root_principal="acme")
    owner, other = (person_api(subject, ["acme"], scopes=["agp.policy.write", "agp.decision.read"])
                    for subject in ("owner@acme.example", "other@acme.example"))
    operation = start(owner, policy_set_id=candidate.policy_set_id)

    refused = other.patch(f"/agp/operations/{operation['operation_id']}", {"status": "cancelled"}, format="json")
    cancelled = owner.patch(f"/agp/operations/{operation['operation_id']}", {"status": "cancelled"}, format="json")

    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "AGP_FORBIDDEN")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


def test_an_unknown_operation_is_a_404_for_both_kinds(api):

    assert api.get("/agp/operations/op_none").status_code == 404
    response = api.patch("/agp/operations/op_none", {"status": "cancelled"}, format="json")
    assert response.status_code == 404 and response.json()["error"]["code"] == "AGP_NOT_FOUND"


def test_the_scope_to_cancel_depends_on_the_operation_s_kind(api, make_token):
    world = make_world()
    candidate = make_policy_set(ruleset=CANDIDATE)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.policy.write', 'agp.execution.write'])}")
    operation = start(api, policy_set_id=candidate.policy_set_id)
    envelope_operation = submit_async(api, world.envelope_request())
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.execution.write'])}")
    refused = api.patch(f"/agp/operations/{operation['operation_id']}", {"status": "cancelled"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["required_scopes"] == ["agp.decision.write", "agp.policy.write"]

    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.policy.write', 'agp.decision.read'])}")
    refused = api.patch(f"/agp/operations/{envelope_operation['operation_id']}", {"status": "cancelled"},
                        format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["required_scopes"] == ["agp.execution.write"]
    assert api.get(f"/agp/operations/{operation['operation_id']}").status_code == 200
    assert api.patch(f"/agp/operations/{operation['operation_id']}", {"status": "cancelled"},
                     format="json").status_code == 200
    assert api.get(f"{URL}/{backtest_of(operation)}").json()["status"] == "cancelled"
