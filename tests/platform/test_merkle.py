"""core.merkle (RFC 9162 2.1) in memory, against tests/rfc9162.py; and agp_client's copy of its verifiers."""

import inspect

import pytest

import agp_client.merkle
from core import merkle
from tests import rfc9162

pytestmark = pytest.mark.unit

SIZES = range(1, 65)


def entries(n: int) -> list[bytes]:
    return [f"entry {i}".encode() for i in range(n)]


def leaves(n: int) -> list[bytes]:
    return [merkle.leaf_hash(entry) for entry in entries(n)]


def proof_hashes(ranges, hashes) -> list[bytes]:
    """The hashes of the ranges a proof names, each computed as a tree of its own leaves."""
    return [merkle.root_from_leaves(hashes[start:end]) for start, end in ranges]


def flip(digest: bytes) -> bytes:
    return bytes([digest[0] ^ 1]) + digest[1:]


def test_the_root_is_rfc_9162s_mth_for_every_size_up_to_64():
    tree = rfc9162.Tree(entries(64))
    for n in SIZES:
        assert merkle.root_from_leaves(leaves(n)) == tree.root(n)
    assert merkle.root_from_leaves([]) == rfc9162.sha256(b"")


def test_every_inclusion_proof_up_to_64_is_rfc_9162s_path_and_verifies_both_ways():
    tree = rfc9162.Tree(entries(64))
    for n in SIZES:
        hashes, root = leaves(n), tree.root(n)
        for m in range(n):
            path = proof_hashes(merkle.inclusion_ranges(m, n), hashes)
            assert path == tree.path(m, n), (m, n)
            assert merkle.verify_inclusion(hashes[m], m, n, path, root)
            assert rfc9162.verify_inclusion(m, n, hashes[m], path, root)
            if path:
                assert not merkle.verify_inclusion(hashes[m], m, n, [flip(path[0]), *path[1:]], root)
                assert not merkle.verify_inclusion(hashes[m], m, n, path[:-1], root)
            assert not merkle.verify_inclusion(hashes[m], m, n, [*path, root], root)


def test_every_consistency_proof_up_to_64_is_rfc_9162s_proof_and_verifies_both_ways():
    tree = rfc9162.Tree(entries(64))
    for n in SIZES:
        hashes = leaves(n)
        for m in range(1, n + 1):
            proof = proof_hashes(merkle.consistency_ranges(m, n), hashes)
            assert proof == tree.proof(m, n), (m, n)
            assert merkle.verify_consistency(m, n, tree.root(m), tree.root(n), proof)
            if m < n:
                assert rfc9162.verify_consistency(m, n, tree.root(m), tree.root(n), proof)
                assert not merkle.verify_consistency(m, n, tree.root(m), tree.root(n), [flip(proof[0]), *proof[1:]])
                assert not merkle.verify_consistency(m, n, flip(tree.root(m)), tree.root(n), proof)
                assert not merkle.verify_consistency(m, n, tree.root(m), tree.root(n), [])
            else:
                assert proof == []
                assert not merkle.verify_consistency(m, n, tree.root(m), flip(tree.root(n)), proof)


def test_the_verifiers_refuse_sizes_outside_a_tree():
    hashes = leaves(4)
    root = merkle.root_from_leaves(hashes)
    assert not merkle.verify_inclusion(hashes[0], 4, 4, [], root)
    assert not merkle.verify_inclusion(hashes[0], -1, 4, [], root)
    assert not merkle.verify_consistency(0, 4, root, root, [])
    assert not merkle.verify_consistency(5, 4, root, root, [])
    with pytest.raises(ValueError):
        merkle.inclusion_ranges(4, 4)
    with pytest.raises(ValueError):
        merkle.consistency_ranges(5, 4)


def test_a_range_is_split_into_perfect_subtrees_from_the_left():
    assert merkle.subtrees(0, 7) == [(2, 0), (1, 2), (0, 6)]
    assert merkle.subtrees(4, 7) == [(1, 2), (0, 6)]
    assert merkle.subtrees(256, 300) == [(5, 8), (3, 36), (2, 74)]
    with pytest.raises(ValueError, match="not a subtree range"):
        merkle.subtrees(1, 3)


@pytest.mark.parametrize("name", ["leaf_hash", "node_hash", "is_hash", "is_count", "verify_inclusion",
                                  "verify_consistency"])
def test_the_client_verifies_with_the_same_text_as_the_service(name):
    assert inspect.getsource(getattr(agp_client.merkle, name)) == inspect.getsource(getattr(merkle, name))


@pytest.mark.parametrize("verifier", [merkle, agp_client.merkle], ids=["service", "client"])
def test_the_verifiers_refuse_hashes_that_are_not_32_bytes_and_booleans_as_counts(verifier):
    leaf = verifier.leaf_hash(b"event")
    # A tree of one leaf: its root is the leaf hash, and the proof is empty.
    assert verifier.verify_inclusion(leaf, 0, 1, [], leaf)
    assert not verifier.verify_inclusion(b"", 0, 1, [], b"")
    assert not verifier.verify_inclusion(leaf[:31], 0, 1, [], leaf[:31])
    assert not verifier.verify_inclusion(leaf, False, True, [], leaf)
    assert verifier.verify_consistency(1, 1, leaf, leaf, [])
    assert not verifier.verify_consistency(True, True, leaf, leaf, [])
    assert not verifier.verify_consistency(1, 1, b"", b"", [])
    assert not verifier.verify_consistency(1, 2, leaf, verifier.node_hash(leaf, leaf), ["00" * 32])
