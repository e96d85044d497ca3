"""Approvers sign their verdicts, and a policy with ``signed_approvals_required`` counts only signed ones."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agp_client.authors import approver_signatures_problem
from agp_client.keys import ClientKey
from core import engine
from decision.models import Approval, PolicyEvaluation
from execution.checks import envelope_checks
from tests.decision.factories import ruleset_hash
from tests.execution.factories import check_inputs, make_full_world
from tests.identity import client_api

pytestmark = pytest.mark.django_db

SIGNED_POLICY = """package agp.signed
default allow := true
require_approval := true
signed_approvals_required := true
"""


def in_an_hour():
    return (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def world_with_policy(ruleset: str):
    """A critical action whose evaluation is what the engine answers for ``ruleset``."""
    world = make_full_world(approval=False)
    result = engine.evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash(ruleset), input={}).as_result()
    PolicyEvaluation.objects.filter(pk=world.evaluation.pk).update(result={**world.evaluation.result, **result})
    world.evaluation.refresh_from_db()
    return world


def person(world, subject: str, key: ClientKey | None = None):
    api, client = client_api("human", [world.root_principal], subject=subject,
                             **({"jwks": key.public_jwks()} if key else {}))
    return api, client


def statement(world, verdict="approved") -> dict:
    return {"decision_id": world.decision.decision_id, "action_hash": world.evaluation.action_hash or None,
            "verdict": verdict}


def approve(api, world, **extra):
    return api.post("/agp/approvals", {"decision_ref": world.decision.decision_id, "verdict": "approved",
                                       "expires_at": in_an_hour(), **extra}, format="json")


def approval_outcome(world) -> dict:
    return envelope_checks(inputs=check_inputs(world)).result("approval")


def test_the_engine_exposes_signed_approvals_required():
    result = engine.evaluate(ruleset=SIGNED_POLICY, ruleset_hash=ruleset_hash(SIGNED_POLICY), input={})
    assert result.as_result()["signed_approvals_required"] is True


def test_a_policy_asking_for_signed_approvals_clears_only_on_a_signed_one(auth_settings):
    world = world_with_policy(SIGNED_POLICY)
    unsigned_api, _ = person(world, "alice@example.com")
    assert approve(unsigned_api, world).status_code == 201
    outcome = approval_outcome(world)
    assert not outcome["passed"] and "is not signed by its approver" in outcome["reason"]

    key = ClientKey.generate("P-256")
    signed_api, client = person(world, "bob@example.com", key)
    response = approve(signed_api, world, approver_signature=key.sign_statement(statement(world)))
    assert response.status_code == 201, response.content
    assert response.json()["approver_signature"].count(".") == 2
    outcome = approval_outcome(world)
    assert outcome["passed"] and "bob@example.com" in outcome["reason"]
    row = Approval.objects.get(approver="bob@example.com")
    assert row.approver_key == key.public_jwk()
    authors = {client.client_id: {"kind": "human", "subject": "bob@example.com", "keys": [key.public_jwk()]}}
    assert approver_signatures_problem([response.json()], {"action_hash": world.evaluation.action_hash}, authors) is None


def test_an_unsigned_approval_still_counts_under_a_policy_that_does_not_ask(auth_settings):
    world = world_with_policy("package agp.plain\ndefault allow := true\nrequire_approval := true\n")
    api, _ = person(world, "alice@example.com")
    assert approve(api, world).status_code == 201
    assert approval_outcome(world)["passed"]


@pytest.mark.parametrize("change", [{"verdict": "rejected"}, {"action_hash": "sha256:" + "0" * 64},
                                    {"decision_id": "dec-other"}])
def test_it_refuses_a_signature_over_another_verdict(auth_settings, change):
    world = world_with_policy(SIGNED_POLICY)
    key = ClientKey.generate()
    api, _ = person(world, "bob@example.com", key)
    response = approve(api, world, approver_signature=key.sign_statement({**statement(world), **change}))
    assert response.status_code == 400, response.content
    assert "Does not verify" in response.json()["error"]["details"]["fields"]["approver_signature"][0]
    assert not Approval.objects.exists()


def test_it_refuses_a_signature_by_a_key_the_client_does_not_hold(auth_settings):
    world = world_with_policy(SIGNED_POLICY)
    api, _ = person(world, "bob@example.com", ClientKey.generate(kid="k"))
    response = approve(api, world, approver_signature=ClientKey.generate(kid="k").sign_statement(statement(world)))
    assert response.status_code == 400
    assert "does not verify" in response.json()["error"]["details"]["fields"]["approver_signature"][0]


def test_an_approval_altered_after_signing_fails_offline(auth_settings):
    world = world_with_policy(SIGNED_POLICY)
    key = ClientKey.generate()
    api, client = person(world, "bob@example.com", key)
    created = approve(api, world, approver_signature=key.sign_statement(statement(world))).json()
    authors = {client.client_id: {"kind": "human", "subject": "bob@example.com", "keys": [key.public_jwk()]}}
    label, problem = approver_signatures_problem([{**created, "verdict": "rejected"}], {"action_hash": world.evaluation.action_hash},
                                       authors)
    assert label == f"approval {created['approval_id']}" and "not what the record says" in problem
