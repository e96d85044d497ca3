"""Reads of the transparency log (docs/reference/ledger.md): checkpoints, proofs, and the tree's verification.

Every proof is built from the stored tiles (``core.tree``) in a fixed number of queries: the
newest checkpoint, then the tiles the proof's hashes come from, in one query. Sizes past
the newest checkpoint are refused: the service vouches only for trees it has signed.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from agp_project import errors
from agp_project.signing import get_signer, verify_resource
from agp_project.timeutil import iso

from .ledger_verification import Verification, ledger_verify
from .merkle import consistency_ranges, inclusion_ranges, subtrees
from .models import Checkpoint
from .tree import StoredTiles, tree_recompute


def checkpoint_newest() -> Checkpoint | None:
    return Checkpoint.objects.order_by("-tree_size").first()


def checkpoint_list() -> QuerySet[Checkpoint]:
    return Checkpoint.objects.all()


def checkpoint_document(checkpoint: Checkpoint) -> dict[str, Any]:
    """The checkpoint as signed and served: ``{"tree_size", "root_hash", "issued_at", "signature"}``."""
    return {"tree_size": checkpoint.tree_size, "root_hash": checkpoint.root_hash,
            "issued_at": iso(checkpoint.issued_at), "signature": checkpoint.signature}


def _newest_size() -> int:
    return Checkpoint.objects.order_by("-tree_size").values_list("tree_size", flat=True).first() or 0


def _tree_size(field: str, requested: int | None, newest: int) -> int:
    """``requested`` (or the newest checkpoint's size), once it is within the newest checkpoint."""
    size = newest if requested is None else requested
    if newest == 0:
        raise errors.invalid_fields({field: ["No checkpoint has been made yet: there is no tree to prove against."]},
                                    "No checkpoint yet.")
    if not 1 <= size <= newest:
        raise errors.invalid_fields({field: [f"Must be from 1 to {newest}, the size of the newest checkpoint."]},
                                    f"Tree size {size} is outside the newest checkpoint ({newest} events).")
    return size


def ledger_inclusion_proofs(*, sequences: Iterable[int], tree_size: int) -> dict[int, dict[str, Any]]:
    """The inclusion proof of each event in the tree of ``tree_size`` (which the caller checked is
    signed), reading every tile the proofs need in one query."""
    plans = {sequence: inclusion_ranges(sequence - 1, tree_size) for sequence in sorted(set(sequences))}
    tiles = StoredTiles()
    tiles.prefetch([(0, sequence - 1) for sequence in plans]
                   + [node for ranges in plans.values() for start, end in ranges for node in subtrees(start, end)])
    return {sequence: {"sequence": sequence, "leaf_index": sequence - 1, "tree_size": tree_size,
                       "leaf_hash": tiles.node(0, sequence - 1).hex(),
                       "audit_path": [tiles.range_hash(start, end).hex() for start, end in ranges]}
            for sequence, ranges in plans.items()}


def ledger_inclusion_proof(*, sequence: int, tree_size: int | None = None) -> dict[str, Any]:
    """``GET /agp/ledger-events/{sequence}/proof``: the audit path of one event (RFC 9162 2.1.3).

    ``tree_size`` defaults to the newest checkpoint's; a size past it, or an event outside
    the tree, is a 400.
    """
    size = _tree_size("tree_size", tree_size, _newest_size())
    if not 1 <= sequence <= size:
        raise errors.invalid_fields({"sequence": [f"Event {sequence} is not in the tree of {size} events."]},
                                    f"Event {sequence} is outside the tree of {size} events.")
    return ledger_inclusion_proofs(sequences=[sequence], tree_size=size)[sequence]


def ledger_consistency_proof(*, first: int, second: int | None = None) -> dict[str, Any]:
    """``GET /agp/ledger-events/consistency``: the proof that the tree of ``second`` events extends the
    tree of ``first`` (RFC 9162 2.1.4). ``second`` defaults to the newest checkpoint's size."""
    newest = _newest_size()
    first = _tree_size("first", first, newest)
    second = _tree_size("second", second, newest)
    if first > second:
        raise errors.invalid_fields({"first": [f"Must not be larger than second ({second})."]},
                                    "first is larger than second.")
    ranges = consistency_ranges(first, second)
    tiles = StoredTiles()
    tiles.prefetch(node for start, end in ranges for node in subtrees(start, end))
    return {"first": first, "second": second, "proof": [tiles.range_hash(start, end).hex() for start, end in ranges]}


@dataclass(frozen=True)
class TreeVerification:
    """The stored tree and the events against the newest checkpoint."""

    verified: bool
    tree_size: int  # the newest checkpoint's; 0 when there is none yet (nothing to check)
    root_hash: str | None
    first_broken_sequence: int | None
    problem: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"verified": self.verified, "tree_size": self.tree_size, "root_hash": self.root_hash,
                "first_broken_sequence": self.first_broken_sequence, "problem": self.problem}


def tree_verify() -> TreeVerification:
    """Check the newest checkpoint: its signature, and its root against the tree recomputed
    from the events (every leaf and node, compared with the stored tiles on the way).

    A rewritten event is found even when its chain was rewritten after it: its leaf no
    longer matches the stored tree, and a tree rebuilt to match no longer has the root the
    checkpoint signed.
    """
    checkpoint = checkpoint_newest()
    if checkpoint is None:
        return TreeVerification(True, 0, None, None, None)
    size, root = checkpoint.tree_size, checkpoint.root_hash

    def failed(problem: str, sequence: int | None = None) -> TreeVerification:
        return TreeVerification(False, size, root, sequence, problem)

    if not verify_resource(checkpoint_document(checkpoint), {"keys": [get_signer().jwk()]}):
        return failed(f"the signature of checkpoint {size} does not verify with the service's key")
    recomputed = tree_recompute(size=size)
    if recomputed.problem:
        return failed(recomputed.problem, recomputed.first_broken_sequence)
    if recomputed.root.hex() != root:
        return failed(f"the first {size} events make a tree with root {recomputed.root.hex()}, not the root "
                      "the checkpoint signed")
    return TreeVerification(True, size, root, None, None)


def combined_verification(chain: Verification, tree: TreeVerification) -> dict[str, Any]:
    """The verify response: the chain's fields as ``ledger_verify`` gives them, with ``verified``
    true only when the tree verifies too, ``first_broken_sequence`` falling back to the tree's
    (an event rewritten with its chain after it), and the tree's own verdict as ``tree``."""
    result = chain.as_dict()
    result["verified"] = chain.verified and tree.verified
    if result["first_broken_sequence"] is None:
        result["first_broken_sequence"] = tree.first_broken_sequence
    result["tree"] = tree.as_dict()
    return result


def ledger_verification() -> dict[str, Any]:
    """``GET /agp/ledger-events/verify``: the hash chain (docs/reference/ledger.md) and the Merkle tree against the newest
    checkpoint (docs/reference/ledger.md), as ``combined_verification`` reports them."""
    return combined_verification(ledger_verify(), tree_verify())
