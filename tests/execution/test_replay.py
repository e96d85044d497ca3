"""GET /agp/replay/{action_id} (docs/reference/ledger.md): original vs current verdicts, and the policy what-if."""

import pytest
from rest_framework.test import APIClient

from core.models import LedgerEvent
from execution.budgets import payment_commit
from execution.models import ActionEnvelope, Operation, Payment
from execution.runner import operation_execute
from tests.execution.factories import (
    THE_CHECKS,
    DENY_TRANSACT_RULESET,
    RULESET,
    make_full_world,
    make_policy_set,
    make_world,
)

pytestmark = pytest.mark.django_db

URL = "/agp/action-envelopes"


def _accept(api, world):
    body = world.envelope_request()
    response = api.post(URL, body, format="json", HTTP_PREFER="respond-async")
    assert response.status_code == 202, response.json()
    return body["action_id"]


def test_it_reports_matching_verdicts_for_an_accepted_action(api):
    world = make_full_world()
    action_id = _accept(api, world)

    response = api.get(f"/agp/replay/{action_id}")

    assert response.status_code == 200
    replay = response.json()
    assert replay["action_id"] == action_id
    assert replay["matches"] is True
    assert replay["changed_checks"] == []
    for side in ("original", "current"):
        assert replay[side]["verdict"] == "cleared"
        assert [item["check"] for item in replay[side]["checks"]] == THE_CHECKS
        assert all(item["passed"] and item["reason"] for item in replay[side]["checks"])
    assert replay["original"]["checks"] == ActionEnvelope.objects.get(action_id=action_id).checks
    assert "what_if" not in replay


def test_it_reports_matching_verdicts_for_an_executed_action(api):
    # The worker's own code path, run in process: the operation succeeds, the payment is
    # committed, and replay still clears the action (its own spending is its own).
    world = make_full_world()
    action_id = _accept(api, world)
    operation = Operation.objects.get(envelope_id=action_id)
    assert operation_execute(operation_id=operation.operation_id, executor="replay-test") == "succeeded"
    assert Payment.objects.get(envelope_id=action_id).status == "committed"

    replay = api.get(f"/agp/replay/{action_id}").json()

    assert replay["matches"] is True
    assert replay["original"]["verdict"] == replay["current"]["verdict"] == "cleared"
    assert replay["changed_checks"] == []


def test_it_still_matches_after_the_payment_was_committed(api):
    # Execution commits the reservation: the action's own spending is not counted against it.
    world = make_full_world()
    action_id = _accept(api, world)
    payment_commit(action_id=action_id)
    replay = api.get(f"/agp/replay/{action_id}").json()
    assert replay["matches"] is True and replay["current"]["verdict"] == "cleared"


def test_it_shows_the_current_verdict_differs_after_a_revocation(api):
    world = make_full_world()
    action_id = _accept(api, world)

    revoked = api.post("/agp/revocations", {"target_type": "delegation", "target_id": world.delegation.delegation_id,
                                            "reason": "agent compromised", "revoked_by": "security"}, format="json")
    assert revoked.status_code == 201, revoked.json()

    replay = api.get(f"/agp/replay/{action_id}").json()
    assert replay["matches"] is False
    assert replay["original"]["verdict"] == "cleared"
    assert replay["current"]["verdict"] == "rejected"
    assert "delegation" in replay["changed_checks"]
    current = {item["check"]: item for item in replay["current"]["checks"]}
    assert current["delegation"]["passed"] is False
    assert set(replay["changed_checks"]) == {name for name, item in current.items() if not item["passed"]}
    # Replay writes nothing.
    assert not LedgerEvent.objects.filter(event_type__startswith="replay").exists()


def test_it_names_the_check_that_changed_after_a_capability_revocation(api):
    world = make_world()
    action_id = _accept(api, world)
    revoked = api.post("/agp/revocations", {"target_type": "capability",
                                            "target_id": world.capability.capability_id,
                                            "reason": "rotated", "revoked_by": "ops"}, format="json")
    assert revoked.status_code == 201, revoked.json()
    replay = api.get(f"/agp/replay/{action_id}").json()
    assert replay["changed_checks"] == ["capability"]
    assert replay["matches"] is False


def test_it_evaluates_the_recorded_policy_input_under_a_candidate_policy_set(api):
    world = make_full_world()
    action_id = _accept(api, world)
    candidate = make_policy_set(ruleset=DENY_TRANSACT_RULESET, name="candidate", version="2.0.0")

    response = api.get(f"/agp/replay/{action_id}", {"policy_set_id": candidate.policy_set_id})

    assert response.status_code == 200
    what_if = response.json()["what_if"]
    assert what_if["policy_set_id"] == candidate.policy_set_id
    assert what_if["ruleset_hash"] == candidate.ruleset_hash
    assert what_if["result"] == {"allow": False, "require_approval": False, "approvals_required": 0,
                                 "reasons": ["transact actions are suspended"]}
    assert what_if["original_result"]["allow"] is True
    assert what_if["matches"] is False
    assert response.json()["matches"] is True  # the what-if does not change the replay verdicts

    same = make_policy_set(ruleset=RULESET, name="same", version="1.0.1")
    what_if = api.get(f"/agp/replay/{action_id}", {"policy_set_id": same.policy_set_id}).json()["what_if"]
    assert what_if["result"] == {"allow": True, "require_approval": True, "approvals_required": 1, "reasons": []}
    assert what_if["matches"] is True


def test_it_refuses_unknown_actions_policy_sets_and_parameters(api):
    world = make_world()
    action_id = _accept(api, world)
    missing = api.get("/agp/replay/act_missing")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "AGP_NOT_FOUND"
    unknown_set = api.get(f"/agp/replay/{action_id}", {"policy_set_id": "ps_missing"})
    assert unknown_set.status_code == 400 and "policy_set_id" in unknown_set.json()["error"]["details"]["fields"]
    unknown_param = api.get(f"/agp/replay/{action_id}", {"verbose": "1"})
    assert unknown_param.status_code == 400 and "verbose" in unknown_param.json()["error"]["details"]["fields"]


def test_it_needs_an_execution_scope(make_token):
    world = make_world()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token()}")
    action_id = _accept(api, world)
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.execution.read'])}")
    assert reader.get(f"/agp/replay/{action_id}").status_code == 200
    outsider = APIClient()
    outsider.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.registry.read'])}")
    denied = outsider.get(f"/agp/replay/{action_id}")
    assert denied.status_code == 403
    assert set(denied.json()["error"]["details"]["required_scopes"]) == {"agp.execution.read", "agp.execution.write"}
    assert APIClient().get(f"/agp/replay/{action_id}").status_code == 401
