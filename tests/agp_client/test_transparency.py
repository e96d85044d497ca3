"""The client's transparency-log verifiers (docs/reference/ledger.md): proofs and checkpoints as the API returns
them, and the checkpoint a client remembers between looks at a live server."""

import json

import pytest

from agp_client import AGPClient, VerificationError, verify_checkpoint, verify_consistency, verify_inclusion
from agp_project.signing import get_signer
from core.models import Checkpoint
from core.selectors import checkpoint_document
from core.services import checkpoint_create
from tests.transparency import append

from .conftest import CLIENT_ID, CLIENT_SECRET, start_live_server


def jwks() -> dict:
    return {"keys": [get_signer().jwk()]}


@pytest.mark.django_db
def test_it_verifies_the_proofs_and_checkpoints_the_api_returns(api):
    append(9)
    checkpoint_create()
    old = api.get("/agp/ledger-events/checkpoint").json()
    append(4)
    checkpoint_create()
    new = api.get("/agp/ledger-events/checkpoint").json()
    proof = api.get("/agp/ledger-events/6/proof").json()
    between = api.get("/agp/ledger-events/consistency", {"first": 9}).json()

    assert verify_checkpoint(new, jwks()) and verify_checkpoint(old, jwks())
    assert verify_inclusion(leaf_hash=proof["leaf_hash"], leaf_index=proof["leaf_index"],
                            tree_size=proof["tree_size"], audit_path=proof["audit_path"], root_hash=new["root_hash"])
    assert verify_consistency(first=9, second=13, first_root=old["root_hash"], second_root=new["root_hash"],
                              proof=between["proof"])
    # Anything else is refused, never raised.
    assert not verify_checkpoint({**new, "tree_size": 12}, jwks())
    assert not verify_checkpoint({**new, "extra": 1}, jwks())
    assert not verify_checkpoint(new, {"keys": []})
    assert not verify_inclusion(leaf_hash=proof["leaf_hash"], leaf_index=proof["leaf_index"], tree_size=13,
                                audit_path=proof["audit_path"], root_hash=old["root_hash"])
    for bad in ({"leaf_hash": "zz" * 32}, {"leaf_hash": proof["leaf_hash"].upper()}, {"leaf_index": True},
                {"leaf_index": -1}, {"audit_path": "ab" * 32}, {"audit_path": [*proof["audit_path"], "00"]}):
        arguments = {**{k: proof[k] for k in ("leaf_hash", "leaf_index", "tree_size", "audit_path")},
                     "root_hash": new["root_hash"], **bad}
        assert not verify_inclusion(**arguments), bad
    assert not verify_consistency(first=9, second=13, first_root=new["root_hash"], second_root=new["root_hash"],
                                  proof=between["proof"])
    assert not verify_consistency(first=13, second=9, first_root=new["root_hash"], second_root=old["root_hash"],
                                  proof=between["proof"])


@pytest.fixture(scope="module")
def live_log(django_db_setup, django_db_blocker, tmp_path_factory):
    """A live server signing with this process's key, so the checkpoints made here verify there."""
    server = start_live_server(tmp_path_factory, django_db_blocker, signing_key=get_signer().private_key)
    yield server
    server.stop()


@pytest.mark.postgres
def test_the_client_remembers_the_checkpoint_it_verified_and_checks_the_next_extends_it(live_log, live_db,
                                                                                         tmp_path):
    memory = tmp_path / "checkpoints.json"
    append(5)
    checkpoint_create()

    with AGPClient(live_log.url, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, checkpoint_file=memory) as client:
        assert client.last_checkpoint is None
        first = client.check_checkpoint()
        append(300)
        grown = checkpoint_create()
        second = client.check_checkpoint()
        again = client.check_checkpoint()

    assert second == checkpoint_document(grown) and again == second
    assert second["tree_size"] >= first["tree_size"] + 300  # (the server's bootstrap client may add an event)
    assert json.loads(memory.read_text()) == {live_log.url: second}
    # A later process continues from the file.
    with AGPClient(live_log.url, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, checkpoint_file=memory) as later:
        assert later.last_checkpoint == second
        append(1)
        checkpoint_create()
        assert later.check_checkpoint()["tree_size"] == second["tree_size"] + 1


@pytest.mark.postgres
def test_the_client_refuses_a_log_that_was_rewritten_or_shrank_since_its_last_look(live_log, live_db, tmp_path):
    memory = tmp_path / "checkpoints.json"
    append(8)
    checkpoint_create()
    newest = Checkpoint.objects.get()

    def client_remembering(tree_size: int, root_hash: str) -> AGPClient:
        seen = {"tree_size": tree_size, "root_hash": root_hash, "issued_at": "2026-01-01T00:00:00.000000Z",
                "signature": {}}
        memory.write_text(json.dumps({live_log.url: seen}))
        return AGPClient(live_log.url, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, checkpoint_file=memory)

    size = newest.tree_size
    with client_remembering(4, "ab" * 32) as client:  # a tree of 4 the log never had
        with pytest.raises(VerificationError, match=f"checkpoint {size} does not extend checkpoint 4 seen before"):
            client.check_checkpoint()
        assert client.last_checkpoint["root_hash"] == "ab" * 32  # unchanged
    with client_remembering(size, "cd" * 32) as client:
        with pytest.raises(VerificationError, match=f"checkpoint {size} does not extend checkpoint {size}"):
            client.check_checkpoint()
    with client_remembering(size + 1, newest.root_hash) as client:
        with pytest.raises(VerificationError, match=f"the log shrank: checkpoint {size} after checkpoint {size + 1}"):
            client.check_checkpoint()

    Checkpoint.objects.update(root_hash="ef" * 32)  # a checkpoint the service never signed
    with AGPClient(live_log.url, client_id=CLIENT_ID, client_secret=CLIENT_SECRET) as client:
        with pytest.raises(VerificationError, match=f"checkpoint {size}: its content is not what was signed"):
            client.check_checkpoint()
        assert client.last_checkpoint is None
