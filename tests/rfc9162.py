"""RFC 9162 section 2.1, written from the RFC for the tests: no code of the service.

The recursive definitions (2.1.1 MTH, 2.1.3.1 PATH, 2.1.4.1 PROOF/SUBPROOF) compute the
expected hashes from the leaves themselves; the verification algorithms (2.1.3.2 and
2.1.4.2) are transcribed step by step, with the RFC's variable names. The tests compare
what the service returns with these, so a mistake shared by the service's builder and its
verifier still shows.
"""

import functools
import hashlib


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def largest_power_of_two_below(n: int) -> int:
    """k: the largest power of two smaller than n (n > 1), as section 2.1.1 defines it."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


class Tree:
    """D[n], a list of leaf inputs (the data, not yet hashed), with the RFC's functions over it."""

    def __init__(self, entries: list[bytes]):
        self.entries = list(entries)
        self.mth = functools.lru_cache(maxsize=None)(self._mth)

    def _mth(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) (2.1.1)."""
        n = end - start
        if n == 0:
            return sha256(b"")
        if n == 1:
            return sha256(b"\x00" + self.entries[start])
        k = largest_power_of_two_below(n)
        return sha256(b"\x01" + self.mth(start, start + k) + self.mth(start + k, end))

    def leaf(self, m: int) -> bytes:
        return self.mth(m, m + 1)

    def root(self, n: int) -> bytes:
        return self.mth(0, n)

    def path(self, m: int, n: int, start: int = 0) -> list[bytes]:
        """PATH(m, D[start:start+n]) (2.1.3.1)."""
        if n == 1:
            return []
        k = largest_power_of_two_below(n)
        if m < k:
            return self.path(m, k, start) + [self.mth(start + k, start + n)]
        return self.path(m - k, n - k, start + k) + [self.mth(start, start + k)]

    def proof(self, m: int, n: int) -> list[bytes]:
        """PROOF(m, D[n]) = SUBPROOF(m, D[n], true) (2.1.4.1)."""
        return self._subproof(m, n, True, 0)

    def _subproof(self, m: int, n: int, b: bool, start: int) -> list[bytes]:
        if m == n:
            return [] if b else [self.mth(start, start + m)]
        k = largest_power_of_two_below(n)
        if m <= k:
            return self._subproof(m, k, b, start) + [self.mth(start + k, start + n)]
        return self._subproof(m - k, n - k, False, start + k) + [self.mth(start, start + k)]


def lsb(x: int) -> int:
    return x & 1


def verify_inclusion(leaf_index: int, tree_size: int, hash_: bytes, inclusion_path: list[bytes],
                     root_hash: bytes) -> bool:
    """2.1.3.2, step by step."""
    # 1. Compare leaf_index from the inclusion_proof against tree_size. If leaf_index is
    #    greater than or equal to tree_size, then fail the proof verification.
    if leaf_index >= tree_size:
        return False
    # 2. Set fn to leaf_index and sn to tree_size - 1.
    fn, sn = leaf_index, tree_size - 1
    # 3. Set r to hash.
    r = hash_
    # 4. For each value p in the inclusion_path array:
    for p in inclusion_path:
        # a. If sn is 0, then stop the iteration and fail the proof verification.
        if sn == 0:
            return False
        # b. If LSB(fn) is set, or if fn is equal to sn, then:
        if lsb(fn) or fn == sn:
            # i. Set r to HASH(0x01 || p || r).
            r = sha256(b"\x01" + p + r)
            # ii. If LSB(fn) is not set, then right-shift both fn and sn equally until either
            #     LSB(fn) is set or fn is 0.
            if not lsb(fn):
                while not (lsb(fn) or fn == 0):
                    fn >>= 1
                    sn >>= 1
        # Otherwise: i. Set r to HASH(0x01 || r || p).
        else:
            r = sha256(b"\x01" + r + p)
        # c. Finally, right-shift both fn and sn one time.
        fn >>= 1
        sn >>= 1
    # 5. Compare sn to 0. Compare r against the root_hash. If sn is equal to 0 and r and the
    #    root_hash are equal, then the log has proven the inclusion of hash.
    return sn == 0 and r == root_hash


def verify_consistency(first: int, second: int, first_hash: bytes, second_hash: bytes,
                       consistency_path: list[bytes]) -> bool:
    """2.1.4.2, step by step (defined for 0 < first < second)."""
    assert 0 < first < second
    # 1. If consistency_path is an empty array, stop and fail the proof verification.
    if not consistency_path:
        return False
    path = list(consistency_path)
    # 2. If first is an exact power of 2, then prepend first_hash to the consistency_path array.
    if first & (first - 1) == 0:
        path = [first_hash] + path
    # 3. Set fn to first - 1 and sn to second - 1.
    fn, sn = first - 1, second - 1
    # 4. If LSB(fn) is set, then right-shift both fn and sn equally until LSB(fn) is not set.
    while lsb(fn):
        fn >>= 1
        sn >>= 1
    # 5. Set both fr and sr to the first value in the consistency_path array.
    fr = sr = path[0]
    # 6. For each subsequent value c in the consistency_path array:
    for c in path[1:]:
        # a. If sn is 0, then stop the iteration and fail the proof verification.
        if sn == 0:
            return False
        # b. If LSB(fn) is set, or if fn is equal to sn, then:
        if lsb(fn) or fn == sn:
            # i. Set fr to HASH(0x01 || c || fr).  ii. Set sr to HASH(0x01 || c || sr).
            fr = sha256(b"\x01" + c + fr)
            sr = sha256(b"\x01" + c + sr)
            # iii. If LSB(fn) is not set, then right-shift both fn and sn equally until either
            #      LSB(fn) is set or fn is 0.
            if not lsb(fn):
                while not (lsb(fn) or fn == 0):
                    fn >>= 1
                    sn >>= 1
        # Otherwise: i. Set sr to HASH(0x01 || sr || c).
        else:
            sr = sha256(b"\x01" + sr + c)
        # c. Finally, right-shift both fn and sn one time.
        fn >>= 1
        sn >>= 1
    # 7. Verify that the fr calculated is equal to the first_hash supplied, that the sr
    #    calculated is equal to the second_hash supplied, and that sn is 0.
    return fr == first_hash and sr == second_hash and sn == 0
