"""An action with its whole story, for the auditor's pages: signed as the services sign, executed for real.

``make_audited_action(api)`` builds the execution factories' full world (a critical transact:
every check has something to check), signs what the services sign (the delegation links,
the policy set, the impact assessment, the approval), submits an envelope through the API
(signed, accepted, its payment reserved) and executes its operation in process (the signed
receipt, the committed payment), records a delivered callback, and has one envelope refused
and one delegation link revoked, so the dashboard and the tree have something to show.
"""

from dataclasses import dataclass

from django.test import override_settings
from django.utils import timezone

from agp_project.signing import sign_resource
from decision.documents import approval_document, impact_assessment_document
from execution.models import ActionEnvelope, CallbackAttempt, Operation
from execution.runner import operation_execute
from registry.documents import delegation_document, delegation_link_payload, policy_set_document
from registry.models import Delegation, PolicySet
from tests.execution.factories import World, make_delegation, make_full_world

CALLBACK_URL = "http://127.0.0.1:9/agp/callbacks"


@dataclass
class AuditedAction:
    world: World
    envelope: ActionEnvelope
    operation: Operation
    refused_action_id: str
    revoked: Delegation
    sibling: Delegation


def sign_delegation(link: Delegation) -> None:
    parent_chain = list(link.parent.signature_chain) if link.parent_id else []
    link.signature_chain = parent_chain
    link.signature = sign_resource(delegation_link_payload(delegation_document(link), includes_own_signature=False))
    link.signature_chain = [*parent_chain, link.signature["value"]]
    Delegation.objects.filter(pk=link.pk).update(signature=link.signature, signature_chain=link.signature_chain)


def make_audited_action(api, **overrides) -> AuditedAction:
    """``overrides`` go to ``make_full_world`` (names that read well in a screenshot, say)."""
    world = make_full_world(**overrides)
    for link in (world.root_delegation, world.delegation):
        link.refresh_from_db()
        sign_delegation(link)
    world.policy_set.signature = sign_resource(policy_set_document(world.policy_set))
    PolicySet.objects.filter(pk=world.policy_set.pk).update(signature=world.policy_set.signature)
    for record, document in ((world.assessment, impact_assessment_document), (world.approval, approval_document)):
        record.signature = sign_resource(document(record))
        type(record).objects.filter(pk=record.pk).update(signature=record.signature)

    refused = api.post("/agp/action-envelopes", world.envelope_request(capability_token_ref="cap_unknown"),
                       format="json")
    assert refused.status_code == 422, refused.content
    # The callback goes to a local receiver that is never called here: its attempt is recorded below.
    with override_settings(AGP_ALLOW_PRIVATE_URLS=True):
        accepted = api.post("/agp/action-envelopes", world.envelope_request(callback_url=CALLBACK_URL),
                            format="json", HTTP_PREFER="respond-async")
    assert accepted.status_code == 202, accepted.content
    operation_id = accepted.json()["operation_id"]
    assert operation_execute(operation_id=operation_id, executor="audit-test/pid-1") == "succeeded"
    CallbackAttempt.objects.create(operation_id=operation_id, attempt=1, url=CALLBACK_URL,
                                   status="delivered", response_status=200, attempted_at=timezone.now())
    operation = Operation.objects.select_related("envelope").get(operation_id=operation_id)

    # Two more links under the agent's: one revoked, one still active.
    revoked = make_delegation(root_principal=world.root_principal, delegator=world.agent_id,
                              delegate=f"{world.agent_id}-helper", scope=[f"{world.tool_id}:{world.operation}"],
                              parent=world.delegation, max_hops=1)
    sibling = make_delegation(root_principal=world.root_principal, delegator=world.agent_id,
                              delegate=f"{world.agent_id}-backup", scope=[f"{world.tool_id}:{world.operation}"],
                              parent=world.delegation, max_hops=1)
    for link in (revoked, sibling):
        sign_delegation(link)
    Delegation.objects.filter(pk=revoked.pk).update(status="revoked", revoked_at=timezone.now())
    revoked.refresh_from_db()
    return AuditedAction(world=world, envelope=operation.envelope, operation=operation,
                         refused_action_id=refused.json()["error"]["details"]["action_id"], revoked=revoked,
                         sibling=sibling)
