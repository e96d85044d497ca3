"""RFC 9162 Merkle tree hashing and proof verification (section 2.1), for clients.

The same text as these functions in the service's ``core/merkle.py`` (a test compares the
two), so that this package needs nothing from the service: ``verify_inclusion`` follows
RFC 9162 2.1.3.2 and ``verify_consistency`` 2.1.4.2 step by step, on raw 32-byte hashes.
``agp_client.transparency`` wraps them for the hex strings the API returns.
"""

from __future__ import annotations

import hashlib

HASH_SIZE = 32


def leaf_hash(data: bytes) -> bytes:
    """SHA-256(0x00 || data): the hash of one leaf."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): the hash of an interior node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def is_hash(value) -> bool:
    """A raw SHA-256 hash: 32 bytes, nothing else (an empty leaf or root must not verify)."""
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def is_count(value) -> bool:
    """An index or a size: an int, and not a bool (``True`` is an int to Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def verify_inclusion(leaf: bytes, index: int, size: int, path: list[bytes], root: bytes) -> bool:
    """RFC 9162 2.1.3.2: does ``path`` lead from the leaf hash at ``index`` to ``root`` in a tree of ``size``?"""
    if not (is_count(index) and is_count(size) and 0 <= index < size and is_hash(leaf) and is_hash(root)
            and all(is_hash(p) for p in path)):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(first: int, second: int, first_root: bytes, second_root: bytes, proof: list[bytes]) -> bool:
    """RFC 9162 2.1.4.2: is the tree of ``second`` leaves (``second_root``) an extension of the tree of
    ``first`` leaves (``first_root``)? Equal sizes need an empty proof and equal roots."""
    if not (is_count(first) and is_count(second) and 0 < first <= second and is_hash(first_root)
            and is_hash(second_root) and all(is_hash(p) for p in proof)):
        return False
    if first == second:
        return not proof and first_root == second_root
    if not proof:
        return False
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_root and sr == second_root and sn == 0
