"""RFC 9162 Merkle trees (section 2.1): hashing, which subtrees a proof names, and verification.

Plain functions on bytes, with no Django and no storage: ``core.tree`` keeps the ledger's
tree and asks this module which node hashes a proof needs. ``agp_client/merkle.py`` holds
a copy of the hashing and verification functions, so a client verifies with the same text
without importing the service (tests/platform/test_merkle.py checks the two are equal).

Positions in a tree are ``(level, index)``: the perfect subtree of ``2**level`` leaves
starting at leaf ``index * 2**level``. A tree of ``n`` leaves has RFC 9162's shape: its
left part is the perfect subtree of the largest power of two smaller than ``n``, its right
part the tree of the rest, so every hash a proof contains is the hash of a leaf range
``[start, end)`` that splits into perfect subtrees from the left (``subtrees``).
"""

import hashlib

HASH_SIZE = 32


def leaf_hash(data: bytes) -> bytes:
    """SHA-256(0x00 || data): the hash of one leaf."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): the hash of an interior node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def split_point(size: int) -> int:
    """The largest power of two smaller than ``size`` (``size`` >= 2): where RFC 9162 splits a tree."""
    return 1 << ((size - 1).bit_length() - 1)


def subtrees(start: int, end: int) -> list[tuple[int, int]]:
    """The perfect subtrees, left to right, whose hashes make up the hash of leaves ``[start, end)``.

    For the ranges RFC 9162's recursion produces (the whole tree ``[0, n)`` and every range a
    proof names), ``start`` is a multiple of the size of each piece: the first piece is the
    largest power of two within the range, and so on rightwards.
    """
    if not 0 <= start < end:
        raise ValueError(f"not a range of leaves: [{start}, {end})")
    pieces = []
    while start < end:
        level = (end - start).bit_length() - 1
        if start & ((1 << level) - 1):
            raise ValueError(f"[{start}, {end}) is not a subtree range of an RFC 9162 tree")
        pieces.append((level, start >> level))
        start += 1 << level
    return pieces


def fold(hashes: list[bytes]) -> bytes:
    """The hash of a range from its perfect subtrees' hashes (left to right), combined from the right."""
    root = hashes[-1]
    for left in reversed(hashes[:-1]):
        root = node_hash(left, root)
    return root


def perfect_root(hashes: list[bytes]) -> bytes:
    """The root of a perfect subtree whose bottom row is ``hashes`` (a power of two of them)."""
    if not hashes or len(hashes) & (len(hashes) - 1):
        raise ValueError(f"a perfect subtree has a power of two of nodes per row, not {len(hashes)}")
    while len(hashes) > 1:
        hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
    return hashes[0]


def root_from_leaves(leaves: list[bytes]) -> bytes:
    """MTH of a whole tree, from its leaf hashes (in memory: for small trees and tests)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    return fold([perfect_root(leaves[index << level:(index + 1) << level])
                 for level, index in subtrees(0, len(leaves))])


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes form PATH(index, D[size]) (RFC 9162 2.1.3.1), in proof order:
    the leaf's sibling first, the other half of the whole tree last."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    ranges = []
    start, end = 0, size
    while end - start > 1:
        k = split_point(end - start)
        if index < start + k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start += k
    return ranges[::-1]


def consistency_ranges(first: int, second: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes form PROOF(first, D[second]) (RFC 9162 2.1.4.1), in proof order.

    Empty when ``first == second``.
    """
    if not 0 < first <= second:
        raise ValueError(f"no consistency proof from a tree of {first} to one of {second}")
    ranges = []
    start, end, m, whole = 0, second, first, True
    while m != end - start:
        k = split_point(end - start)
        if m <= k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            m -= k
            start += k
            whole = False
    if not whole:
        # SUBPROOF(m, D[m], false) = {MTH(D[m])}: the old tree's last subtree, where the walk stopped.
        ranges.append((start, end))
    return ranges[::-1]


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
