"""The published RFC 9162 (RFC 6962 hashing) test vectors of transparency-dev/merkle
(``testonly/constants.go``, ``proof/verify_test.go``): roots, inclusion and consistency
proofs over eight leaves, checked against the service's and the client's verifiers, with
every single corruption of a good proof refused. Data only; the checks are ours."""

import hashlib

import pytest

import agp_client.merkle
from core import merkle

pytestmark = pytest.mark.unit

LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                     "606162636465666768696a6b6c6d6e6f")]
ROOTS = [bytes.fromhex(h) for h in (  # by tree size, 1 to 8
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")]
H = {name: bytes.fromhex(value) for name, value in {
    "l1": "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    "n01": "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
    "n1": "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    "l4": "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    "n03": "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    "n0": "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "r2": "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "l0": "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "n02": "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
    "l6": "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
}.items()}
# (leaf number from 1, tree size, proof)
INCLUSION = [(1, 1, []), (1, 8, [H["l1"], H["n01"], H["n1"]]), (6, 8, [H["l4"], H["n03"], H["n0"]]),
             (3, 3, [H["r2"]]), (2, 5, [H["l0"], H["n01"], H["l4"]])]
# (first size, second size, proof)
CONSISTENCY = [(1, 1, []), (1, 8, [H["l1"], H["n01"], H["n1"]]), (6, 8, [H["n02"], H["n03"], H["n0"]]),
               (2, 5, [H["n01"], H["l4"]]), (6, 7, [H["n02"], H["l6"], H["n0"]])]
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")
EMPTY_ROOT = hashlib.sha256(b"").digest()
VERIFIERS = pytest.mark.parametrize("verifier", [merkle, agp_client.merkle], ids=["service", "client"])


def flipped(proof: list[bytes], i: int, bit: int) -> list[bytes]:
    return [bytes([p[0] ^ bit]) + p[1:] if n == i else p for n, p in enumerate(proof)]


@VERIFIERS
def test_the_roots_of_the_published_trees(verifier):
    leaf_hashes = [verifier.leaf_hash(leaf) for leaf in LEAVES]
    assert [merkle.root_from_leaves(leaf_hashes[:size]) for size in range(1, 9)] == ROOTS


@VERIFIERS
@pytest.mark.parametrize("number,size,proof", INCLUSION)
def test_each_published_inclusion_proof_verifies_and_none_of_its_corruptions_does(verifier, number, size, proof):
    leaf, root, index = verifier.leaf_hash(LEAVES[number - 1]), ROOTS[size - 1], number - 1
    assert verifier.verify_inclusion(leaf, index, size, proof, root)
    corruptions = [(index - 1, size, leaf, proof, root), (index + 1, size, leaf, proof, root),
                   (index ^ 2, size, leaf, proof, root), (index, size * 2, leaf, proof, root),
                   (index, size // 2, leaf, proof, root), (index, size, b"WrongLeaf", proof, root),
                   (index, size, leaf, proof, EMPTY_ROOT), (index, size, leaf, proof, SOME_HASH),
                   (index, size, leaf, [*proof, b""], root), (index, size, leaf, [*proof, root], root),
                   (index, size, leaf, [b"", *proof], root), (index, size, leaf, [root, *proof], root)]
    corruptions += [(index, size, leaf, flipped(proof, i, 8), root) for i in range(len(proof))]
    if proof:
        corruptions.append((index, size, leaf, proof[:-1], root))
    if len(proof) > 1:
        corruptions.append((index, size, leaf, [proof[0], SOME_HASH, *proof[1:]], root))
    for i, (bad_index, bad_size, bad_leaf, bad_proof, bad_root) in enumerate(corruptions):
        assert not verifier.verify_inclusion(bad_leaf, bad_index, bad_size, bad_proof, bad_root), i


@VERIFIERS
@pytest.mark.parametrize("first,second,proof", CONSISTENCY)
def test_each_published_consistency_proof_verifies_and_none_of_its_corruptions_does(verifier, first, second, proof):
    root1, root2 = ROOTS[first - 1], ROOTS[second - 1]
    assert verifier.verify_consistency(first, second, root1, root2, proof)
    if not proof:
        return
    corruptions = [(first - 1, second, root1, root2, proof), (first + 1, second, root1, root2, proof),
                   (first ^ 2, second, root1, root2, proof), (first, second * 2, root1, root2, proof),
                   (first, second // 2, root1, root2, proof), (first, second, b"WrongRoot", root2, proof),
                   (first, second, root1, b"WrongRoot", proof), (first, second, root2, root1, proof),
                   (first, second, root1, root2, []), (first, second, root1, root2, [*proof, b""]),
                   (first, second, root1, root2, [*proof, root1]), (first, second, root1, root2, [*proof, root2]),
                   (first, second, root1, root2, [b"", *proof]), (first, second, root1, root2, [root1, *proof]),
                   (first, second, root1, root2, [root2, *proof]), (first, second, root1, root2, [proof[0], *proof]),
                   (first, second, root1, root2, proof[:-1])]
    corruptions += [(first, second, root1, root2, flipped(proof, i, 16)) for i in range(len(proof))]
    for i, (size1, size2, bad1, bad2, bad_proof) in enumerate(corruptions):
        assert not verifier.verify_consistency(size1, size2, bad1, bad2, bad_proof), i
