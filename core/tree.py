"""The ledger's Merkle tree, stored as tiles (docs/reference/ledger.md; docs/decisions/ledger.md).

Leaf ``i`` of the tree is the event with ``sequence`` ``i + 1``; its hash is
``merkle.leaf_hash(canonical_event(...))``, the bytes the hash chain covers. The tree is
kept as transparency logs keep theirs (Tessera's and C2SP tlog-tiles' tiles, 16 hashes
wide instead of 256): tile (L, t) holds the hashes of the nodes at height ``4 L`` with
indices ``16 t`` to ``16 t + 15``, so level 0 holds the leaf hashes, level 1 the roots of
each 16 leaves, and so on. A node between two tile rows is hashed from the row below it
when it is read (at most 15 hashes a tile, remembered for the rest of the request).

What this buys:

- a proof reads at most two tiles per tile level (about ten rows of 512 bytes for a
  million events), in one query, and hashes a few dozen nodes, whatever the ledger's size;
- extending the tree by ``k`` events writes ``k`` leaf hashes and ``k / 15`` node hashes,
  and rewrites one partial tile per level: work proportional to ``k``, never a walk of the
  ledger;
- about 34 bytes per event (the leaf hashes, and a fifteenth of that for the levels above).

Tiles 16 wide rather than tlog-tiles' 256: reading a sibling from a tile's bottom row costs
up to ``width - 1`` hashes, so a proof over 256-wide tiles hashed about 500 nodes in Python
(a millisecond, more than the rest of the request) where 16-wide ones hash about 50.

Only ``core.services.checkpoint_create`` extends the tree, under the tree lock, in the
transaction that signs the checkpoint of its new size.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection, models
from django.db.models import Q
from django.db.models.functions import Cast

from agp_project.timeutil import iso

from .ledger import CANONICAL_EVENT_SQL, GENESIS_HASH, canonical_event, chain_hash, payload_text_hash
from .merkle import HASH_SIZE, fold, leaf_hash, node_hash, perfect_root, subtrees
from .models import LedgerEvent, MerkleTile

TILE_HEIGHT = 4
TILE_WIDTH = 1 << TILE_HEIGHT
TILE_BYTES = TILE_WIDTH * HASH_SIZE
# Events read per query while extending or recomputing the tree: a whole number of tiles.
BATCH = 65_536

_EVENTS = LedgerEvent._meta.db_table


class TreeIncomplete(RuntimeError):
    """A node hash the stored tiles should hold is missing: the stored tree is damaged."""


class LedgerBroken(Exception):
    """The events the tree was to grow by do not chain: no checkpoint may vouch for them."""

    def __init__(self, sequence: int, reason: str):
        self.sequence = sequence
        self.reason = reason
        super().__init__(f"ledger event #{sequence}: {reason}")


def tile_of(level: int, index: int) -> tuple[int, int]:
    """The tile whose row holds node (``level``, ``index``) or the nodes it is hashed from."""
    tile_level, height = divmod(level, TILE_HEIGHT)
    return tile_level, (index << height) >> TILE_HEIGHT


def split_hashes(data: bytes) -> list[bytes]:
    return [data[offset:offset + HASH_SIZE] for offset in range(0, len(data), HASH_SIZE)]


class Tiles:
    """Node hashes read from tiles, held in memory (``tiles``: (level, index) -> bytes)."""

    def __init__(self, tiles: dict[tuple[int, int], bytes] | None = None):
        self.tiles = dict(tiles or {})
        self._nodes: dict[tuple[int, int], bytes] = {}

    def _load(self, keys: set[tuple[int, int]]) -> None:
        """Fetch tiles not held yet (the stored tree reads them from the database)."""

    def fetch(self, keys: Iterable[tuple[int, int]]) -> None:
        """Load, at once, the tiles ``keys`` (level, index) not held yet."""
        wanted = set(keys) - self.tiles.keys()
        if wanted:
            self._load(wanted)

    def prefetch(self, nodes: Iterable[tuple[int, int]]) -> None:
        """Load, at once, every tile the hashes of ``nodes`` need."""
        self.fetch(tile_of(level, index) for level, index in nodes)

    def node(self, level: int, index: int) -> bytes:
        """The hash of the perfect subtree (``level``, ``index``)."""
        key = (level, index)
        found = self._nodes.get(key)
        if found is not None:
            return found
        tile_level, height = divmod(level, TILE_HEIGHT)
        if height:
            found = node_hash(self.node(level - 1, 2 * index), self.node(level - 1, 2 * index + 1))
        else:
            position = (tile_level, index >> TILE_HEIGHT)
            if position not in self.tiles:
                self._load({position})
            offset = (index % TILE_WIDTH) * HASH_SIZE
            found = self.tiles.get(position, b"")[offset:offset + HASH_SIZE]
            if len(found) != HASH_SIZE:
                raise TreeIncomplete(f"the stored Merkle tree lacks node {level}/{index} (tile {position})")
        self._nodes[key] = found
        return found

    def range_hash(self, start: int, end: int) -> bytes:
        """The hash RFC 9162 gives the leaves ``[start, end)`` (a range a proof names)."""
        return fold([self.node(level, index) for level, index in subtrees(start, end)])

    def root(self, size: int) -> bytes:
        self.prefetch(subtrees(0, size))
        return self.range_hash(0, size)


class StoredTiles(Tiles):
    """The tiles in the database, fetched as they are needed (``prefetch``: one query)."""

    def _load(self, keys: set[tuple[int, int]]) -> None:
        condition = Q()
        for level, index in sorted(keys):
            condition |= Q(level=level, index=index)
        rows = MerkleTile.objects.filter(condition).values_list("level", "index", "hashes")
        for level, index, hashes in rows:
            self.tiles[(level, index)] = bytes(hashes)
        for key in keys:
            self.tiles.setdefault(key, b"")


def tree_extend(*, size: int, leaves: list[bytes]) -> None:
    """Append ``leaves`` (the leaf hashes of events ``size + 1`` onwards) to the stored tree of ``size``.

    Level by level: the new hashes continue the level's last tile (rewritten) and fill new
    ones; every tile they complete adds its root to the level above. The caller holds the
    tree lock.
    """
    if not leaves:
        return
    partial, level, count = [], 0, size
    while count:
        if count % TILE_WIDTH:
            partial.append((level, count // TILE_WIDTH))
        count >>= TILE_HEIGHT
        level += 1
    stored = StoredTiles()
    stored.fetch(partial)
    appended, level = list(leaves), 0
    while appended:
        before = size >> (TILE_HEIGHT * level)
        first = before // TILE_WIDTH
        kept = stored.tiles.get((level, first), b"") if before % TILE_WIDTH else b""
        if len(kept) != (before % TILE_WIDTH) * HASH_SIZE:
            raise TreeIncomplete(f"the stored Merkle tree's tile {level}/{first} does not hold {before % TILE_WIDTH} "
                                 f"hashes (tree of {size})")
        data = kept + b"".join(appended)
        upward, created = [], []
        for offset in range(0, len(data), TILE_BYTES):
            chunk = data[offset:offset + TILE_BYTES]
            index = first + offset // TILE_BYTES
            if len(chunk) == TILE_BYTES:
                upward.append(perfect_root(split_hashes(chunk)))
            if offset == 0 and kept:
                MerkleTile.objects.filter(level=level, index=index).update(hashes=chunk)
            else:
                created.append(MerkleTile(level=level, index=index, hashes=chunk))
        MerkleTile.objects.bulk_create(created)
        appended, level = upward, level + 1


# --- leaf hashes from the events ----------------------------------------------------------------------

# PostgreSQL hashes the leaves from the stored columns, as it hashes the chain in
# ``ledger_verify``; ``intact`` is the chain and payload check of each event.
_PG_SEGMENT = f"""
SELECT sequence, prev_hash, hash, sha256(decode('00', 'hex') || canonical),
       encode(sha256(convert_to(prev_hash, 'UTF8') || canonical), 'hex') = hash
       AND 'sha256:' || encode(sha256(convert_to(payload, 'UTF8')), 'hex') = payload_hash
  FROM (SELECT sequence, prev_hash, hash, payload, payload_hash, convert_to({CANONICAL_EVENT_SQL}, 'UTF8') AS canonical
          FROM "{_EVENTS}" WHERE sequence > %s AND sequence <= %s) AS segment
 ORDER BY sequence
"""
_PG_LEAVES = (f"""SELECT sequence, sha256(decode('00', 'hex') || convert_to({CANONICAL_EVENT_SQL}, 'UTF8'))"""
              f""" FROM "{_EVENTS}" WHERE sequence > %s AND sequence <= %s ORDER BY sequence""")
_ROW_FIELDS = ("sequence", "event_id", "event_type", "resource_type", "resource_id", "actor",
               Cast("payload", models.TextField()), "payload_hash", "prev_hash", "hash", "recorded_at")


def _python_rows(after: int, upto: int) -> list[tuple[int, str, str, bytes, bool]]:
    """``_PG_SEGMENT``'s rows computed here (every database but PostgreSQL)."""
    rows = []
    for (sequence, event_id, event_type, resource_type, resource_id, actor, payload, payload_hash, prev_hash,
         stored_hash, recorded_at) in (LedgerEvent.objects.filter(sequence__gt=after, sequence__lte=upto)
                                       .order_by("sequence").values_list(*_ROW_FIELDS)):
        canonical = canonical_event(sequence=sequence, event_id=event_id, event_type=event_type,
                                    resource_type=resource_type, resource_id=resource_id, actor=actor,
                                    payload_hash=payload_hash, recorded_at=iso(recorded_at))
        intact = chain_hash(prev_hash, canonical) == stored_hash and payload_text_hash(payload) == payload_hash
        rows.append((sequence, prev_hash, stored_hash, leaf_hash(canonical), intact))
    return rows


@dataclass(frozen=True)
class Segment:
    leaves: list[bytes]
    last_hash: str


def event_segment(*, after: int, upto: int, prev_hash: str) -> Segment:
    """The leaf hashes of events ``after + 1`` .. ``upto``, once they are shown to chain on from
    ``prev_hash`` (the hash of event ``after``): gap-free, each linked to the one before, each
    hash and payload hash recomputing. Raises ``LedgerBroken`` naming the first that does not."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_PG_SEGMENT, [after, upto])
            rows = [(sequence, prev, stored, bytes(leaf), intact)
                    for sequence, prev, stored, leaf, intact in cursor.fetchall()]
    else:
        rows = _python_rows(after, upto)
    leaves, expected = [], after + 1
    for sequence, prev, stored, leaf, intact in rows:
        if sequence != expected:
            raise LedgerBroken(expected, "missing")
        if prev != prev_hash:
            raise LedgerBroken(sequence, "its prev_hash is not the previous event's hash")
        if not intact:
            raise LedgerBroken(sequence, "its hash or payload hash does not recompute")
        leaves.append(leaf)
        prev_hash = stored
        expected += 1
    if expected != upto + 1:
        raise LedgerBroken(expected, "missing")
    return Segment(leaves=leaves, last_hash=prev_hash)


def event_hash(sequence: int) -> str:
    """The chain hash of event ``sequence`` (the genesis hash for 0)."""
    if sequence == 0:
        return GENESIS_HASH
    stored = LedgerEvent.objects.filter(sequence=sequence).values_list("hash", flat=True).first()
    if stored is None:
        raise LedgerBroken(sequence, "missing")
    return stored


def event_leaves(*, after: int, upto: int) -> list[tuple[int, bytes]]:
    """(sequence, leaf hash) of the events stored in ``after + 1`` .. ``upto``, in order (no chain check)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_PG_LEAVES, [after, upto])
            return [(sequence, bytes(leaf)) for sequence, leaf in cursor.fetchall()]
    return [(sequence, leaf) for sequence, _prev, _hash, leaf, _intact in _python_rows(after, upto)]


# --- recomputing the whole tree -------------------------------------------------------------------------

@dataclass(frozen=True)
class Recomputation:
    """The tree of the first ``size`` events, recomputed from the events, against the stored tiles."""

    root: bytes | None  # None when the events do not make a tree of that size
    first_broken_sequence: int | None  # the first event whose leaf differs from the stored tree's
    problem: str | None


def _first_difference(stored: bytes, computed: bytes) -> int:
    for position, (mine, theirs) in enumerate(zip(split_hashes(computed), split_hashes(stored), strict=False)):
        if mine != theirs:
            return position
    return min(len(stored), len(computed)) // HASH_SIZE


def tree_recompute(*, size: int) -> Recomputation:
    """Rebuild the tree of events 1..``size`` from the events themselves and compare each stored tile.

    Every leaf is hashed again (in the database on PostgreSQL) and every node above it: the
    work of building the tree once, in batches of ``BATCH`` events, keeping in memory only
    the levels above the leaves (1/15 of the hashes). The first tile that differs names
    the first event whose leaf changed since the tree was built.
    """
    computed = Tiles()
    upward: list[bytes] = []
    done = 0
    while done < size:
        upto = min(done + BATCH, size)
        rows = event_leaves(after=done, upto=upto)
        for offset, (sequence, _leaf) in enumerate(rows):
            if sequence != done + offset + 1:
                return Recomputation(None, done + offset + 1, f"ledger event #{done + offset + 1} is missing")
        if len(rows) != upto - done:
            return Recomputation(None, done + len(rows) + 1, f"ledger event #{done + len(rows) + 1} is missing")
        first, last = done // TILE_WIDTH, (upto - 1) // TILE_WIDTH
        stored = {index: bytes(hashes) for index, hashes in MerkleTile.objects.filter(
            level=0, index__gte=first, index__lte=last).values_list("index", "hashes")}
        data = b"".join(leaf for _sequence, leaf in rows)
        for offset in range(0, len(data), TILE_BYTES):
            chunk = data[offset:offset + TILE_BYTES]
            index = first + offset // TILE_BYTES
            # A prefix: tiles only grow, and a checkpoint committed since may have extended this one.
            kept = stored.get(index, b"")[:len(chunk)]
            if kept != chunk:
                position = _first_difference(kept, chunk)
                sequence = index * TILE_WIDTH + position + 1
                return Recomputation(None, sequence, f"the leaf of ledger event #{sequence} is not the one the "
                                                     "stored tree holds: the event changed after it was added")
            if len(chunk) == TILE_BYTES:
                upward.append(perfect_root(split_hashes(chunk)))
            else:
                computed.tiles[(0, index)] = chunk
        done = upto
    level = 1
    while upward:
        stored = {index: bytes(hashes) for index, hashes in
                  MerkleTile.objects.filter(level=level).values_list("index", "hashes")}
        data, upward = b"".join(upward), []
        for offset in range(0, len(data), TILE_BYTES):
            chunk = data[offset:offset + TILE_BYTES]
            index = offset // TILE_BYTES
            if stored.get(index, b"")[:len(chunk)] != chunk:
                return Recomputation(None, None, f"the stored tile {level}/{index} is not the one the events give")
            computed.tiles[(level, index)] = chunk
            if len(chunk) == TILE_BYTES:
                upward.append(perfect_root(split_hashes(chunk)))
        level += 1
    return Recomputation(computed.root(size) if size else None, None, None)
