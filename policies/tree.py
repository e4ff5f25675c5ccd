"""The cache objects the simulator manages and policies see: prefix-tree segments and states.

Two kinds of object:

* `Segment` (kind FULL): a run of consecutive full-attention KV blocks on one path of the prefix
  tree that share one fate — the same tier residency, last access, access count and flags. The
  tree is a radix tree: a segment's children are keyed by the first block key of the child. A
  segment is split when the blocks in it stop sharing a fate (a request ends or diverges inside
  it, or only its leaf-side part is evicted), never merged. Each block of a segment is one
  cache object on the SSD (`obj_id` = `oid + i` for block i): block ids of a segment are
  contiguous and a split keeps them so, which lets ssd_ops rows be produced per block with numpy.
* `State` (kind LINEAR): one linear-attention / sliding-window state checkpoint, attached to the
  segment whose last block ends the prefix it summarises (`Segment.state`). Hybrid models get one
  checkpoint per request boundary: at the end of each request's hashed prefix.

Tiers are a bit mask (`HBM`, `DRAM`, `SSD`): an object may be resident in several tiers at once
(an SSD hit staged to DRAM keeps its SSD copy; write-through keeps both). A segment resident in
no tier is a *ghost*: kept only while it is needed to hold the tree together (it has children or
a state); ghost leaves are pruned, so memory follows what the tiers hold.

This module holds data only: no policy logic, no I/O.
"""

from __future__ import annotations

from typing import Any

FULL = 0
LINEAR = 1
KIND_NAMES = ("full", "linear")

HBM = 1
DRAM = 2
SSD = 4
TIER_NAMES = {HBM: "hbm", DRAM: "dram", SSD: "ssd"}


class Obj:
    """State shared by every cache object (segment or state).

    Fields the simulator maintains (policies read them, never write them):
    - `oid`: object id (for a segment, the id of its first block).
    - `kind`: FULL or LINEAR.
    - `nbytes`: total bytes (all blocks of a segment).
    - `tiers`: residency bit mask (HBM | DRAM | SSD).
    - `last_seq` / `last_s`: request sequence number / simulated time of the last access.
    - `refs`: number of requests that referenced the object (its insertion counts as one).
    - `created_s`: when it was last (re)inserted after being absent from every tier.
    - `ssd_hit`: served from SSD at least once since it was last written there.
    - `next_seq`: request sequence number of the next access (oracle policies only; else -1,
      and `NEVER` when no later request references it); `_fut` where it was read from.
    Field a policy owns: `pdata` (anything; copied to both halves on a split unless the
    policy's `split` hook says otherwise).
    """

    __slots__ = ("_fut", "created_s", "kind", "last_s", "last_seq", "nbytes", "next_seq", "oid",
                 "pdata", "refs", "ssd_hit", "tiers")

    def __init__(self, oid: int, kind: int, nbytes: int) -> None:
        self.oid = oid
        self.kind = kind
        self.nbytes = nbytes
        self.tiers = 0
        self.last_seq = -1
        self.last_s = 0.0
        self.refs = 0
        self.created_s = 0.0
        self.ssd_hit = False
        self.next_seq = -1
        self.pdata: Any = None
        # (future array, index) of the access that last touched it: oracle runs only (the
        # simulator's; policies read it through ctx.next_seqs / ctx.future_refs)
        self._fut: tuple[Any, int] | None = None

    @property
    def n_objects(self) -> int:
        """How many SSD objects (rows in ssd_ops per operation) this object is."""
        return 1

    def __repr__(self) -> str:
        tiers = "|".join(n for t, n in TIER_NAMES.items() if self.tiers & t) or "ghost"
        return f"<{KIND_NAMES[self.kind]} {self.oid} {self.nbytes}B {tiers} seq={self.last_seq}>"


NEVER = 1 << 62


class State(Obj):
    """A linear/sliding state checkpoint at the end of `seg` (its prefix ends at `seg`'s end)."""

    __slots__ = ("seg",)

    def __init__(self, oid: int, nbytes: int, seg: Segment) -> None:
        super().__init__(oid, LINEAR, nbytes)
        self.seg = seg

    @property
    def end_tokens(self) -> int:
        """Prefix length (tokens) this state summarises."""
        return self.seg.end_tokens


class Segment(Obj):
    """A run of `n` full-attention KV blocks of one fate on one tree path (see module doc).

    - `ns`: hash namespace; `keys`: the block keys (list of int, root side first).
    - `start`: index (in blocks, from the root) of the first block; depth of the segment.
    - `block_tokens`: tokens per block (the source block size B); `last_tokens`: tokens in the
      last block (< B only for a trace's partial last block, which is always a leaf).
    - `block_bytes` / `last_bytes`: bytes of one block / of the last block.
    - `parent`: parent segment (the namespace root has parent None); `children`: first key →
      child segment; `state`: the state checkpoint at this segment's end, if any.
    """

    __slots__ = ("block_bytes", "block_tokens", "children", "keys", "last_bytes",
                 "last_tokens", "n", "ns", "parent", "start", "state")

    def __init__(self, oid: int, ns: int, keys: list[int], start: int, block_tokens: int,
                 last_tokens: int, block_bytes: int, last_bytes: int,
                 parent: Segment | None) -> None:
        n = len(keys)
        super().__init__(oid, FULL, (n - 1) * block_bytes + last_bytes if n else 0)
        self.ns = ns
        self.keys = keys
        self.n = n
        self.start = start
        self.block_tokens = block_tokens
        self.last_tokens = last_tokens
        self.block_bytes = block_bytes
        self.last_bytes = last_bytes
        self.parent = parent
        self.children: dict[int, Segment] = {}
        self.state: State | None = None

    @property
    def n_objects(self) -> int:
        return self.n

    @property
    def tokens(self) -> int:
        """Tokens held by this segment's blocks."""
        return (self.n - 1) * self.block_tokens + self.last_tokens if self.n else 0

    @property
    def start_tokens(self) -> int:
        """Prefix length (tokens) before this segment (its depth in tokens)."""
        return self.start * self.block_tokens

    @property
    def end_tokens(self) -> int:
        """Prefix length (tokens) at this segment's end: start_tokens + tokens, written out (policies
        price states by it in their eviction loops)."""
        n = self.n
        return (self.start + n - 1) * self.block_tokens + self.last_tokens if n else self.start * self.block_tokens

    @property
    def is_leaf(self) -> bool:
        """No child segment in the tree (ghost children count: they hold the tree together)."""
        return not self.children

    @property
    def is_root(self) -> bool:
        return self.parent is None


def depth_blocks(obj: Obj) -> int:
    """Where an object sits on its path, in blocks from the root: a segment at its first block,
    a state below its segment (the tie-break "leaf side first" keys on minus this)."""
    if isinstance(obj, Segment):
        return obj.start
    assert isinstance(obj, State)
    return obj.seg.start + obj.seg.n
