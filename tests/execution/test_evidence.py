"""``GET /agp/action-envelopes/{action_id}/evidence`` (docs/reference/ledger.md) and its offline verification by
``python -m agp_client verify-evidence``, run as a separate process."""

import copy
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agp_client import VerificationError, numbers, verify_evidence
from agp_client.keys import ClientKey
from agp_project.signing import Signer, get_signer
from core.models import Checkpoint, LedgerEvent
from core.services import checkpoint_create
from execution.evidence import action_ledger_events
from execution.models import Operation
from tests import rfc9162
from tests.execution.signed_world import make_executed_action
from tests.platform.conftest import assert_envelope
from tests.transparency import canonical

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]


def evidence(api, action_id: str) -> dict:
    response = api.get(f"/agp/action-envelopes/{action_id}/evidence")
    assert response.status_code == 200, response.content
    return response.json()


def get(api, path: str) -> dict:
    response = api.get(path)
    assert response.status_code == 200, response.content
    return response.json()


def test_it_gathers_the_whole_story_of_an_action_with_every_event_proved(api):
    ids = make_executed_action(api)
    action_id = ids["action_id"]
    assert not Checkpoint.objects.exists()

    bundle = evidence(api, action_id)

    records = bundle["records"]
    operation = Operation.objects.select_related("receipt", "envelope__payment").get(operation_id=ids["operation_id"])
    assert (bundle["type"], bundle["action_id"]) == ("ActionEvidence", action_id)
    # Each record exactly as its own endpoint renders it, so its own signature verifies the same.
    assert records["envelope"] == get(api, f"/agp/action-envelopes/{action_id}")
    assert records["task"] == get(api, f"/agp/tasks/{ids['task_id']}")
    assert records["decision"] == get(api, f"/agp/decisions/{ids['decision_id']}")
    envelope = records["envelope"]
    assert records["policy_evaluation"] == get(api, f"/agp/policy-evaluations/{envelope['policy_decision_ref']}")
    assert records["policy_set"] == get(api, f"/agp/policy-sets/{records['policy_evaluation']['policy_set_id']}")
    assert records["approvals"] == get(api, f"/agp/approvals?decision_ref={ids['decision_id']}")["items"]
    assert records["impact_assessments"] == get(
        api, f"/agp/impact-assessments?decision_ref={ids['decision_id']}")["items"]
    assert [link["delegation_id"] for link in records["delegation_chain"]] == [
        records["delegation_chain"][1]["parent_delegation_id"], ids["delegation_id"]]
    assert records["delegation_chain"][1] == get(api, f"/agp/delegations/{ids['delegation_id']}")
    assert records["capability"] == get(api, f"/agp/capabilities/{envelope['capability_token_ref']}")
    assert records["commerce_session"] == get(api, f"/agp/commerce-sessions/{envelope['commerce_session_ref']}")
    assert records["operation"] == get(api, f"/agp/operations/{ids['operation_id']}")
    assert records["receipt"] == get(api, f"/agp/receipts/{operation.receipt.receipt_id}")
    assert records["payment"] == {
        "type": "Payment", "payment_id": operation.envelope.payment.payment_id, "action_id": action_id,
        "session_id": records["commerce_session"]["session_id"], "currency": "USD", "amount": 50.0,
        "status": "committed", "created_at": records["payment"]["created_at"],
        "updated_at": records["payment"]["updated_at"]}
    assert bundle["jwks"] == get(api, "/.well-known/jwks.json")

    # Every event of the action, in order, each proved in the tree of the checkpoint signed for it.
    events = [item["event"] for item in bundle["ledger_events"]]
    # The records that governed it first (evaluation, decision, its assessment, finalisation,
    # approval), then the action's own.
    assert [event["event_type"] for event in events] == [
        "policy_evaluation.created", "decision.created", "impact_assessment.created", "decision.finalised",
        "approval.created", "payment.reserved", "envelope.accepted", "operation.created", "operation.running",
        "payment.committed", "envelope.executed", "operation.succeeded", "receipt.issued"]
    assert {event["resource_id"] for event in events[:5]} == {
        envelope["policy_decision_ref"], ids["decision_id"], records["impact_assessments"][0]["assessment_id"],
        records["approvals"][0]["approval_id"]}
    assert events == [get(api, f"/agp/ledger-events/{event['sequence']}") for event in events]
    checkpoint = Checkpoint.objects.get()
    assert bundle["checkpoint"] == get(api, "/agp/ledger-events/checkpoint")
    assert checkpoint.tree_size == LedgerEvent.objects.count()
    root = bytes.fromhex(checkpoint.root_hash)
    for item in bundle["ledger_events"]:
        event, proof = item["event"], item["proof"]
        leaf = rfc9162.sha256(b"\x00" + canonical(event))
        assert proof["leaf_hash"] == leaf.hex()
        assert rfc9162.verify_inclusion(event["sequence"] - 1, checkpoint.tree_size, leaf,
                                        [bytes.fromhex(h) for h in proof["audit_path"]], root)

    summary = verify_evidence(bundle, jwks=service_keys())
    assert summary == {"action_id": action_id, "signatures": 10, "author_signatures": 0, "ledger_events": 13,
                       "tree_size": checkpoint.tree_size, "root_hash": checkpoint.root_hash,
                       "kids": [bundle["jwks"]["keys"][0]["kid"]]}


def test_it_proves_against_the_newest_checkpoint_when_that_covers_the_action(api, query_counts):
    action_id = make_executed_action(api)["action_id"]
    checkpoint_create()
    newest = Checkpoint.objects.get()

    with query_counts.pinned("evidence bundle"):
        bundle = evidence(api, action_id)

    assert bundle["checkpoint"]["tree_size"] == newest.tree_size
    assert Checkpoint.objects.count() == 1  # none signed for it
    verify_evidence(bundle, jwks=service_keys())


def test_an_action_not_executed_yet_has_evidence_too(api):
    action_id = make_executed_action(api, execute=False)["action_id"]

    bundle = evidence(api, action_id)

    assert bundle["records"]["operation"]["status"] == "pending"
    assert bundle["records"]["receipt"] is None
    assert bundle["records"]["payment"]["status"] == "reserved"
    assert [item["event"]["event_type"] for item in bundle["ledger_events"]][-3:] == [
        "payment.reserved", "envelope.accepted", "operation.created"]
    assert verify_evidence(bundle, jwks=service_keys())["signatures"] == 9


def test_the_ledger_events_of_an_action_are_those_of_its_records(api):
    first, second = make_executed_action(api), make_executed_action(api)

    events = list(action_ledger_events(action_id=first["action_id"]))

    assert {event.resource_id for event in events} == {
        first["action_id"], first["operation_id"], events[0].resource_id,
        next(e.resource_id for e in events if e.resource_type == "Receipt")}
    assert second["action_id"] not in {event.resource_id for event in events}
    assert [event.sequence for event in events] == sorted(event.sequence for event in events)


def test_an_unknown_or_never_accepted_action_is_a_404_and_a_query_a_400(api):
    assert_envelope(api.get("/agp/action-envelopes/act-nowhere/evidence"), 404, "AGP_NOT_FOUND")
    action_id = make_executed_action(api)["action_id"]
    assert_envelope(api.get(f"/agp/action-envelopes/{action_id}/evidence", {"download": "1"}), 400,
                    "AGP_INVALID_REQUEST")


def test_it_needs_an_execution_scope(make_token, authed_api, api):
    action_id = make_executed_action(authed_api)["action_id"]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.decision.read'])}")
    assert_envelope(api.get(f"/agp/action-envelopes/{action_id}/evidence"), 403, "AGP_INSUFFICIENT_SCOPE")


# --- the offline verifier, as a separate process ----------------------------------------------------------

def service_keys() -> dict:
    return {"keys": [get_signer().jwk()]}


def verify_file(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agp_client", "verify-evidence", str(path), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=60)


def flip_hex(value: str) -> str:
    return ("1" if value[0] == "0" else "0") + value[1:]


def flip_b64(value: str) -> str:
    return ("A" if value[0] != "A" else "B") + value[1:]


def tamperings(bundle: dict) -> list[tuple[str, object, str]]:
    """(what is changed, how, the failure the verifier must name)."""
    records, events = bundle["records"], bundle["ledger_events"]
    receipt, envelope, link = records["receipt"], records["envelope"], records["delegation_chain"][0]
    proved = events[2]
    size = bundle["checkpoint"]["tree_size"]
    label = f"ledger event #{proved['event']['sequence']} ({proved['event']['event_type']})"
    other_key = Signer(Ed25519PrivateKey.generate(), "agp").jwk()

    def setter(*path, value):
        def change(document):
            target = document
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value(target[path[-1]]) if callable(value) else value
        return change

    return [
        ("a signed record's field", setter("records", "receipt", "status", value="failed"),
         f"receipt {receipt['receipt_id']}: its content is not what was signed"),
        ("an unsigned record's field", setter("records", "task", "title", value="Refund order 43"),
         "the bundle's own signature: its content is not what was signed"),
        ("a signature", setter("records", "envelope", "signature", "value", value=flip_b64),
         f"action envelope {envelope['action_id']}: its signature value does not verify"),
        ("a delegation link", setter("records", "delegation_chain", 0, "authority_scope", value=["*"]),
         f"delegation {link['delegation_id']}: its content is not what was signed"),
        ("a proof hash", setter("ledger_events", 2, "proof", "audit_path", 0, value=flip_hex),
         f"{label}: its inclusion proof does not lead to the root hash of checkpoint {size}"),
        ("a ledger event's field", setter("ledger_events", 2, "event", "actor", value="mallory"),
         f"{label}: its hash does not recompute from its fields"),
        ("a ledger event's payload", setter("ledger_events", 2, "event", "payload", value={"forged": True}),
         f"{label}: its payload does not hash to its payload_hash"),
        ("a ledger event left out", setter("ledger_events", value=lambda items: [
            item for item in items if item["event"]["event_type"] != "envelope.accepted"]),
         "no ledger event records the envelope's acceptance"),
        ("the checkpoint's root", setter("checkpoint", "root_hash", value=flip_hex),
         f"checkpoint {size}: its content is not what was signed"),
        ("the checkpoint's size", setter("checkpoint", "tree_size", value=size + 1),
         f"checkpoint {size + 1}: its content is not what was signed"),
        ("the JWKS", setter("jwks", value={"keys": [other_key]}),
         "no trusted key: the JWKS given holds none, or the bundle holds no key with a pinned kid"),
        ("the bundle's type", setter("type", value="EvidenceBundle"), "not an evidence bundle"),
        ("a record of the wrong kind", setter("records", "approvals", value=["apr_1"]), "the bundle is malformed"),
    ]


@pytest.mark.system
def test_verify_evidence_passes_an_untouched_bundle_and_names_each_tampering(api, tmp_path):
    bundle = evidence(api, make_executed_action(api)["action_id"])
    untouched = tmp_path / "evidence.json"
    untouched.write_text(json.dumps(bundle))

    done = verify_file(untouched, "--kid", get_signer().kid)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"OK: evidence for action {bundle['action_id']} verified: 10 signatures, "
                                  f"13 ledger events included in checkpoint {bundle['checkpoint']['tree_size']}")
    for name, change, failure in tamperings(bundle):
        assert_verifier_names(bundle, name, change, failure, tmp_path)


def assert_verifier_names(bundle: dict, name: str, change, failure: str, tmp_path: Path) -> None:
    """``change`` made to a copy of ``bundle``, the command and ``verify_evidence`` both refuse it, naming ``failure``."""
    tampered = copy.deepcopy(bundle)
    change(tampered)
    path = tmp_path / f"tampered-{name.replace(' ', '-')}.json"
    path.write_text(json.dumps(tampered))

    done = verify_file(path, "--kid", get_signer().kid)

    assert done.returncode == 1, (name, done.stdout, done.stderr)
    assert done.stderr.startswith(f"FAILED: {failure}"), (name, done.stderr)
    with pytest.raises(VerificationError, match="^" + failure.replace("(", r"\(").replace(")", r"\)")):
        verify_evidence(tampered, kids={get_signer().kid})


@pytest.mark.system
def test_a_bundle_with_exact_numbers_verifies_offline_as_downloaded(api, tmp_path):
    # A number no binary double holds, signed exactly (docs/decisions/exact-json.md): the
    # capability's bound on the amount. The file as the service sent it must verify with the
    # client alone, and not once its numbers are rounded.
    limit = "100.0000000000000000001"
    action_id = make_executed_action(api, amount_max=Decimal(limit))["action_id"]
    response = api.get(f"/agp/action-envelopes/{action_id}/evidence")
    assert response.status_code == 200, response.content
    downloaded = tmp_path / "evidence.json"
    downloaded.write_bytes(response.content)

    done = verify_file(downloaded, "--kid", get_signer().kid)

    assert done.returncode == 0, done.stderr
    assert f'"max":{limit}' in response.content.decode()
    bundle = numbers.loads(response.content)
    assert bundle["records"]["capability"]["allowed_parameter_ranges"]["amount"]["max"] == Decimal(limit)
    assert verify_evidence(bundle, jwks=service_keys())["signatures"] == 10
    # Read as binary doubles (json.loads' default), the bundle no longer hashes as it was signed.
    rounded = tmp_path / "rounded.json"
    rounded.write_text(json.dumps(json.loads(response.content)))
    refused = verify_file(rounded, "--kid", get_signer().kid)
    assert refused.returncode == 1 and refused.stderr.startswith("FAILED: "), refused.stderr


def test_a_client_event_that_names_an_action_in_its_payload_stays_out_of_its_trail_and_evidence(api):
    action_id = make_executed_action(api)["action_id"]
    note = api.post("/agp/ledger-events", {"event_type": "client.refund.reversed", "resource_type": "Note",
                                           "resource_id": "note-1", "payload": {"action_id": action_id}}, format="json")
    assert note.status_code == 201 and note.json()["action_id"] is None
    trail = api.get(f"/agp/ledger-events?action_id={action_id}").json()["items"]
    assert "client.refund.reversed" not in [event["event_type"] for event in trail]
    # A trail row about something else (the index is not chained, so nothing else says so) is
    # left out of the bundle all the same: the bundle holds events about the action's records.
    LedgerEvent.objects.filter(event_id=note.json()["event_id"]).update(action_id=action_id)
    # A client's note about the envelope itself is part of the trail and of the bundle.
    own = api.post("/agp/ledger-events", {"event_type": "client.reviewed", "resource_type": "ActionEnvelope",
                                          "resource_id": action_id, "payload": {}}, format="json")
    assert own.status_code == 201 and own.json()["action_id"] == action_id

    bundle = numbers.loads(api.get(f"/agp/action-envelopes/{action_id}/evidence").content)

    types = [item["event"]["event_type"] for item in bundle["ledger_events"]]
    assert "client.reviewed" in types and "client.refund.reversed" not in types
    assert verify_evidence(bundle, jwks=service_keys())["action_id"] == action_id


@pytest.mark.system
def test_a_bundle_file_naming_a_member_twice_is_refused(api, tmp_path):
    # One reader would take the first "action_id", another the last: the file says two things.
    action_id = make_executed_action(api)["action_id"]
    text = api.get(f"/agp/action-envelopes/{action_id}/evidence").content.decode()
    assert text.startswith('{"type":"ActionEvidence",')
    doubled = tmp_path / "doubled.json"
    opening = '{"type":"ActionEvidence",'
    doubled.write_text(text.replace(opening, opening + '"action_id":"act_other",', 1))

    done = verify_file(doubled, "--kid", get_signer().kid)

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "'action_id' appear more than once" in done.stderr
    with pytest.raises(ValueError, match="more than once"):
        numbers.loads(doubled.read_text())


@pytest.mark.system
def test_verify_evidence_checks_against_a_trusted_jwks_when_given(api, tmp_path):
    bundle = evidence(api, make_executed_action(api)["action_id"])
    path, right, wrong = tmp_path / "evidence.json", tmp_path / "service.json", tmp_path / "other.json"
    path.write_text(json.dumps(bundle))
    right.write_text(json.dumps(bundle["jwks"]))
    wrong.write_text(json.dumps({"keys": [Signer(Ed25519PrivateKey.generate(), "agp").jwk()]}))

    trusted = verify_file(path, "--jwks", str(right))
    refused = verify_file(path, "--jwks", str(wrong))
    unreadable = verify_file(tmp_path / "missing.json", "--jwks", str(right))

    assert trusted.returncode == 0 and f"from the JWKS file {right}" in trusted.stdout
    assert refused.returncode == 1 and "which the JWKS does not hold" in refused.stderr
    assert unreadable.returncode == 2 and "cannot read the evidence bundle" in unreadable.stderr


@pytest.mark.system
def test_the_verifier_imports_nothing_of_the_service():
    probe = ("import sys, agp_client.__main__, agp_client.transparency; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & "
             "{'django', 'rest_framework', 'agp_project', 'core', 'registry', 'decision', 'execution'}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.system
def test_verify_evidence_trusts_only_the_keys_it_is_told_to(api, tmp_path):
    # A bundle re-signed by a key put beside the service's in its own JWKS: every signature is
    # the other key's, so only a verifier that trusts the bundle's keys would pass it.
    bundle = evidence(api, make_executed_action(api)["action_id"])
    forger = Signer(Ed25519PrivateKey.generate(), "agp")
    forged = copy.deepcopy(bundle)
    forged["jwks"]["keys"].append(forger.jwk())
    forged["checkpoint"]["signature"] = forger.sign({k: v for k, v in forged["checkpoint"].items() if k != "signature"})
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged))
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(service_keys()))

    unsaid = verify_file(path)
    pinned = verify_file(path, "--kid", get_signer().kid)
    given = verify_file(path, "--jwks", str(keys))

    assert unsaid.returncode == 2 and "--jwks" in unsaid.stderr and "--kid" in unsaid.stderr
    assert (pinned.returncode, given.returncode) == (1, 1)
    assert pinned.stderr.startswith(f"FAILED: checkpoint {bundle['checkpoint']['tree_size']}: it is signed with key")
    with pytest.raises(ValueError, match="say which keys to trust"):
        verify_evidence(bundle)


@pytest.mark.system
def test_verify_evidence_can_trust_the_keys_the_service_publishes(transactional_db, api, live_server, tmp_path):
    from core.models import LedgerHead

    LedgerHead.objects.get_or_create(pk=1)  # a transactional test before may have flushed it
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(evidence(api, make_executed_action(api)["action_id"])))

    done = verify_file(path, "--service", live_server.url)
    unreachable = verify_file(path, "--service", "http://127.0.0.1:9")

    assert done.returncode == 0, done.stderr
    assert f"from the service at {live_server.url}" in done.stdout
    assert unreachable.returncode == 2 and "cannot read the service's JWKS" in unreachable.stderr


# --- the authors' own signatures --------------------------------------------------------------------------

@pytest.mark.system
def test_a_bundle_carries_the_authors_keys_and_verify_evidence_names_a_broken_signature(authed_api, tmp_path):
    signers: dict = {}
    bundle = evidence(authed_api, make_executed_action(authed_api, signers=signers)["action_id"])
    delegator, approver = signers["delegator_client"], signers["approver_client"]
    assert bundle["authors"] == {
        delegator.client_id: {"kind": "agent", "agent_id": delegator.agent_id, "subject": None,
                              "keys": [signers["delegator"].public_jwk()]},
        approver.client_id: {"kind": "human", "agent_id": None, "subject": approver.subject,
                             "keys": [signers["approver"].public_jwk()]}}
    link, approval = bundle["records"]["delegation_chain"][1], bundle["records"]["approvals"][0]
    assert verify_evidence(bundle, kids={get_signer().kid})["author_signatures"] == 2

    other = ClientKey.generate(kid=signers["delegator"].kid).public_jwk()
    for name, change, failure in [
        ("the delegator's key", lambda b: b["authors"][delegator.client_id].update(keys=[other]),
         f"delegation link {link['delegation_id']}: the delegator's signature: it does not verify"),
        ("the approver's key", lambda b: b["authors"].pop(approver.client_id),
         f"approval {approval['approval_id']}: the bundle carries no keys of its approver's client"),
        ("an approval's verdict", lambda b: b["records"]["approvals"][0].update(verdict="rejected"),
         f"approval {approval['approval_id']}: its content is not what was signed"),
    ]:
        assert_verifier_names(bundle, name, change, failure, tmp_path)
