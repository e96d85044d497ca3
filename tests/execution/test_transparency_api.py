"""The transparency log through the API (docs/reference/ledger.md): checkpoints, inclusion and consistency proofs.

Every proof is compared with RFC 9162's own definitions and checked with its verification
algorithms, both written from the RFC in tests/rfc9162.py over the events' canonical bytes
(computed there with the rfc8785 library): never with the service's code.
"""

import pytest

from agp_project.signing import get_signer, verify_resource
from core.models import Checkpoint, LedgerEvent
from core.selectors import ledger_consistency_proof, ledger_inclusion_proofs
from core.services import checkpoint_create
from tests import rfc9162
from tests.platform.conftest import assert_envelope
from tests.transparency import append, rfc_tree, seed

pytestmark = pytest.mark.django_db


def unhex(values: list[str]) -> list[bytes]:
    return [bytes.fromhex(value) for value in values]


def proof(api, sequence: int, tree_size: int | None = None) -> dict:
    params = {} if tree_size is None else {"tree_size": tree_size}
    response = api.get(f"/agp/ledger-events/{sequence}/proof", params)
    assert response.status_code == 200, response.content
    return response.json()


def consistency(api, first: int, second: int | None = None) -> dict:
    params = {"first": first} if second is None else {"first": first, "second": second}
    response = api.get("/agp/ledger-events/consistency", params)
    assert response.status_code == 200, response.content
    return response.json()


def assert_inclusion(api, tree: rfc9162.Tree, m: int, n: int) -> None:
    check_inclusion(proof(api, m + 1, n), tree, m, n)


def check_inclusion(body: dict, tree: rfc9162.Tree, m: int, n: int) -> None:
    assert body == {"sequence": m + 1, "leaf_index": m, "tree_size": n, "leaf_hash": tree.leaf(m).hex(),
                    "audit_path": [h.hex() for h in tree.path(m, n)]}, (m, n)
    assert rfc9162.verify_inclusion(m, n, tree.leaf(m), unhex(body["audit_path"]), tree.root(n))


def assert_consistency(api, tree: rfc9162.Tree, m: int, n: int) -> None:
    check_consistency(consistency(api, m, n), tree, m, n)


def check_consistency(body: dict, tree: rfc9162.Tree, m: int, n: int) -> None:
    assert body == {"first": m, "second": n, "proof": [h.hex() for h in tree.proof(m, n)]}, (m, n)
    if m < n:
        assert rfc9162.verify_consistency(m, n, tree.root(m), tree.root(n), unhex(body["proof"]))
    else:
        assert body["proof"] == []


def test_every_proof_of_every_tree_up_to_64_events_is_rfc_9162s(api):
    # One event, one checkpoint, 64 times: the stored tree grows by one leaf each time. Every
    # proof of every tree is checked as the endpoints compute it (core.selectors, whose
    # documents they answer unchanged), and the first, middle and last through the API itself.
    for _ in range(64):
        append(1)
        checkpoint_create()
    tree = rfc_tree()
    assert Checkpoint.objects.count() == 64
    for n in range(1, 65):
        assert Checkpoint.objects.get(tree_size=n).root_hash == tree.root(n).hex()
        proofs = ledger_inclusion_proofs(sequences=range(1, n + 1), tree_size=n)
        for m in range(n):
            check_inclusion(proofs[m + 1], tree, m, n)
        for m in range(1, n + 1):
            check_consistency(ledger_consistency_proof(first=m, second=n), tree, m, n)
        for m in {0, n // 2, n - 1}:
            assert_inclusion(api, tree, m, n)
        for m in {1, (n + 1) // 2, n}:
            assert_consistency(api, tree, m, n)


def test_the_proofs_have_the_shape_of_rfc_9162s_example_tree_of_seven(api):
    # RFC 9162 2.1.5: leaves d0..d6 under a b c d e f / g h i j / k l, root = H(k, l).
    append(7)
    checkpoint_create()
    tree = rfc_tree()
    a, b, c, d, e, f = (tree.leaf(i) for i in range(6))
    g, h, i, j = tree.mth(0, 2), tree.mth(2, 4), tree.mth(4, 6), tree.leaf(6)
    k, l = tree.mth(0, 4), tree.mth(4, 7)  # noqa: E741 - the RFC's name
    assert tree.root(7) == rfc9162.sha256(b"\x01" + k + l)

    def path(sequence):
        return unhex(proof(api, sequence)["audit_path"])

    assert path(1) == [b, h, l]      # d0
    assert path(4) == [c, g, l]      # d3
    assert path(5) == [f, j, k]      # d4
    assert path(7) == [i, k]         # d6
    assert unhex(consistency(api, 3, 7)["proof"]) == [c, d, g, l]
    assert unhex(consistency(api, 4, 7)["proof"]) == [l]
    assert unhex(consistency(api, 6, 7)["proof"]) == [i, j, k]
    assert consistency(api, 7)["proof"] == []


def test_proofs_across_tile_boundaries_of_large_trees_are_rfc_9162s(api):
    # Tiles hold 16 hashes: 256 and 65,536 leaves complete tiles of levels 0 and 1, and of levels 0 to 3.
    checkpoints = (300, 65_535, 65_537, 70_000)
    for size in checkpoints:
        seed(size)
        checkpoint_create()
    tree = rfc_tree()
    for size in checkpoints:
        assert Checkpoint.objects.get(tree_size=size).root_hash == tree.root(size).hex()
    sizes = (255, 256, 257, 65_535, 65_536, 65_537, 70_000)
    for n in sizes:
        for m in {0, 1, 254, 255, 256, n // 2, n - 2, n - 1} & set(range(n)):
            assert_inclusion(api, tree, m, n)
        for m in (1, 255, 256, 257, 65_535, 65_536, n - 1, n):
            if m <= n:
                assert_consistency(api, tree, m, n)


def test_a_proof_and_the_newest_checkpoint_read_two_queries_whatever_the_size(api, django_assert_num_queries):
    seed(5000)
    checkpoint_create()
    with django_assert_num_queries(2):  # the newest checkpoint's size, the tiles
        proof(api, 1234)
    with django_assert_num_queries(2):
        consistency(api, 1000, 4321)
    with django_assert_num_queries(1):
        assert api.get("/agp/ledger-events/checkpoint").status_code == 200


def test_the_checkpoint_is_signed_and_listed_newest_first(api):
    assert_envelope(api.get("/agp/ledger-events/checkpoint"), 404, "AGP_NOT_FOUND")
    assert api.get("/agp/ledger-events/checkpoints").json() == {"items": [], "next_cursor": None}
    for _ in range(3):
        append(2)
        checkpoint_create()

    newest = api.get("/agp/ledger-events/checkpoint").json()
    first_page = api.get("/agp/ledger-events/checkpoints", {"limit": 2}).json()
    second_page = api.get("/agp/ledger-events/checkpoints", {"limit": 2, "cursor": first_page["next_cursor"]}).json()

    assert set(newest) == {"tree_size", "root_hash", "issued_at", "signature"}
    assert newest["tree_size"] == 6 and newest["root_hash"] == rfc_tree().root(6).hex()
    assert newest["signature"]["issued_at"] == newest["issued_at"]
    assert verify_resource(newest, {"keys": [get_signer().jwk()]})
    assert not verify_resource({**newest, "tree_size": 5}, {"keys": [get_signer().jwk()]})
    assert [c["tree_size"] for c in first_page["items"]] == [6, 4]
    assert [c["tree_size"] for c in second_page["items"]] == [2] and second_page["next_cursor"] is None
    assert first_page["items"][0] == newest == api.get("/agp/ledger-events/checkpoints/6").json()
    assert_envelope(api.get("/agp/ledger-events/checkpoints/5"), 404, "AGP_NOT_FOUND")
    assert_envelope(api.get("/agp/ledger-events/checkpoints", {"cursor": "nonsense"}), 400, "AGP_INVALID_REQUEST")
    assert_envelope(api.get("/agp/ledger-events/checkpoints", {"tree_size": "6"}), 400, "AGP_INVALID_REQUEST")


def test_a_proof_before_any_checkpoint_is_a_400(api):
    append(3)
    error = assert_envelope(api.get("/agp/ledger-events/1/proof"), 400, "AGP_INVALID_REQUEST")
    assert "tree_size" in error["details"]["fields"]
    assert_envelope(api.get("/agp/ledger-events/consistency", {"first": 1}), 400, "AGP_INVALID_REQUEST")


@pytest.mark.parametrize("path, params, field", [
    ("/agp/ledger-events/1/proof", {"tree_size": "11"}, "tree_size"),          # past the newest checkpoint
    ("/agp/ledger-events/1/proof", {"tree_size": "0"}, "tree_size"),
    ("/agp/ledger-events/1/proof", {"tree_size": "-3"}, "tree_size"),
    ("/agp/ledger-events/1/proof", {"tree_size": "five"}, "tree_size"),
    ("/agp/ledger-events/1/proof", {"tree_size": "1e3"}, "tree_size"),
    ("/agp/ledger-events/1/proof", {"tree_size": "\uff15"}, "tree_size"),     # a fullwidth 5
    ("/agp/ledger-events/1/proof", {"tree_size": "9" * 19}, "tree_size"),
    ("/agp/ledger-events/1/proof", {"size": "5"}, "size"),
    ("/agp/ledger-events/8/proof", {"tree_size": "7"}, "sequence"),           # the event is outside the tree
    ("/agp/ledger-events/11/proof", {}, "sequence"),                          # past the newest checkpoint
    ("/agp/ledger-events/0/proof", {}, "sequence"),
    ("/agp/ledger-events/consistency", {}, "first"),
    ("/agp/ledger-events/consistency", {"first": "6", "second": "5"}, "first"),
    ("/agp/ledger-events/consistency", {"first": "5", "second": "11"}, "second"),
    ("/agp/ledger-events/consistency", {"first": "11"}, "first"),
    ("/agp/ledger-events/consistency", {"first": "0"}, "first"),
    ("/agp/ledger-events/consistency", {"first": "x", "second": "y"}, "first"),
    ("/agp/ledger-events/consistency", {"first": "1", "third": "2"}, "third"),
    ("/agp/ledger-events/checkpoint", {"tree_size": "1"}, "tree_size"),
])
def test_bad_sizes_and_events_outside_the_tree_are_400_envelopes(api, path, params, field):
    append(10)
    checkpoint_create()
    append(4)  # in the ledger, not yet in a checkpoint: nothing vouches for them

    error = assert_envelope(api.get(path, params), 400, "AGP_INVALID_REQUEST")

    assert field in error["details"]["fields"], error


def test_the_proof_endpoints_need_an_execution_scope(make_token, api):
    append(2)
    checkpoint_create()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.decision.read'])}")
    for path in ("/agp/ledger-events/1/proof", "/agp/ledger-events/consistency?first=1",
                 "/agp/ledger-events/checkpoint", "/agp/ledger-events/checkpoints"):
        assert_envelope(api.get(path), 403, "AGP_INSUFFICIENT_SCOPE")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.execution.read'])}")
    assert api.get("/agp/ledger-events/1/proof").status_code == 200


def test_the_verify_endpoint_checks_the_tree_against_the_newest_checkpoint(api):
    append(5)
    checkpoint = checkpoint_create()
    body = api.get("/agp/ledger-events/verify").json()
    assert body["verified"] is True
    assert body["tree"] == {"verified": True, "tree_size": 5, "root_hash": checkpoint.root_hash,
                            "first_broken_sequence": None, "problem": None}

    # The checkpoint's root no longer matches what the events give (as if the log were rewritten).
    Checkpoint.objects.filter(tree_size=5).update(root_hash="ab" * 32)
    body = api.get("/agp/ledger-events/verify").json()

    assert body["verified"] is False
    assert body["first_broken_sequence"] is None  # the chain itself is intact
    assert body["tree"]["verified"] is False
    assert body["tree"]["problem"] == "the signature of checkpoint 5 does not verify with the service's key"
    assert LedgerEvent.objects.count() == 5
