"""`hotprefix`: hotness-gated DRAM admission (HotPrefix, SIGMOD'25); what is refused is dropped.

**The paper's rule.** HotPrefix tracks the *hotness of prefix-tree nodes* over time and admits an
evicted prefix to the lower tier only if it is hot ("selective KV cache admission"); cold
prefixes are dropped. kvwear's Gandalf-paper baseline reads it as: a newly computed object is
admitted to DRAM while DRAM has room iff its hotness ≥ θ; when DRAM is full, iff its score
hotness·clock beats the lowest score in DRAM (the object the admission would displace); a
refused object is dropped — never placed, never written to SSD. DRAM evicts the lowest score
(leaf side first on ties) and writes it to SSD (write-back); SSD is LRU.

**kvwear's reading of what the paper leaves implicit**, each a choice made here:

- *Hotness is per prefix node* (`hotness=node`, default): the number of requests that reached
  the node, i.e. the references of the node's root-side block. kvwear's tree prunes what no tier
  holds, so a missed run merges prefix blocks requested many times with the request's never-seen
  tail into one segment; counting the node's entry keeps a prefix requested θ times admissible
  whatever its unseen tail (it is admitted with it, as the paper's radix tree admits a node). A
  state takes the hotness of the segment it ends (the node it checkpoints). `hotness=block-min`
  (an object as hot as its coldest block) is the earlier reading, kept to show why it fails:
  on append-only traces every missed run holds a never-seen block, so θ ≥ 2 admits nothing.
- *A reference* is a request whose path passes the block (hit, touched or computed), counted
  once per request; references are kept by stable key across evictions (`_history.KeyHistory`)
  and forgotten after `history_requests` requests without one (the paper's hotness decays over
  time; a window in requests is scale-free across traces).
- *clock* = the request sequence number + 1 (recency in the score, as in HotPrefix's
  hotness × time product). The displaced object is the DRAM heap's top by its full key (score,
  then leaf side first), so on a tie — objects of one request — a root-side object displaces a
  leaf-side one, as the simulator's tie-break convention says, rather than being refused.

Sweep: θ 1–10 (the Gandalf paper's range). θ = 1 admits every computed object while DRAM has
room (plain hotness-ordered DRAM, write-back).

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from policies._estimators import LazyMinHeap
from policies._history import KeyHistory
from policies.base import POLICIES, Policy, PolicyParams, RequestInfo, SimContext, obj_keys, param
from policies.tree import DRAM, SSD, Obj, Segment, State, depth_blocks


@dataclass(frozen=True)
class HotPrefixParams(PolicyParams):
    theta: int = param(2, sweep=(1, 10), help="hotness needed to enter DRAM while it has room")
    hotness: Literal["node", "block-min"] = param(
        "node", sweep=("node", "block-min"),
        help="node: requests that reached the object's prefix node; block-min: its coldest block")
    history_requests: int = param(100_000, sweep=(1_000, 1_000_000),
                                  help="forget references unseen for this many requests")

    def __post_init__(self) -> None:
        if self.theta < 1 or self.history_requests < 1:
            raise ValueError("theta and history_requests must be >= 1")


@POLICIES.register("hotprefix")
class HotPrefixPolicy(Policy[HotPrefixParams]):
    """Admit to DRAM iff hotness ≥ θ (room) or hotness·clock beats the DRAM minimum; refused → dropped."""

    def __init__(self, params: HotPrefixParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        self.hist = KeyHistory(self.p.history_requests)
        self.dram: LazyMinHeap[Obj, tuple[int, int]] = LazyMinHeap()
        self.refused = 0
        self.refused_bytes = 0

    def begin_request(self, req: RequestInfo) -> None:
        self.hist.begin_request(req.seq)

    def hotness(self, obj: Obj) -> int:
        """The object's hotness under the configured reading (references within the history)."""
        if self.p.hotness == "node":
            return self.hist.entered(obj)
        return self.hist.least(obj)

    def _ref(self, obj: Obj) -> int:
        """Count this request's reference; store the score in pdata; return the hotness."""
        hist = self.hist
        hist.ref(obj)
        if not isinstance(obj, Segment):
            # a state is placed before the walk reaches its segment: count the node it ends now
            assert isinstance(obj, State)
            hist.ref_keys(obj_keys(obj.seg))
        h = self.hotness(obj)
        obj.pdata = h * (self.ctx.seq + 1)
        return h

    @staticmethod
    def _key(obj: Obj) -> tuple[int, int]:
        return (obj.pdata, -depth_blocks(obj))

    def place(self, obj: Obj) -> int:
        h = self._ref(obj)
        if self.ctx.free_bytes(DRAM) >= obj.nbytes:
            ok = h >= self.p.theta
        else:
            top = self.dram.peek()
            ok = top is not None and self._key(obj) > top[0]
        if not ok:
            self.refused += 1
            self.refused_bytes += obj.nbytes
            return 0
        return DRAM

    def added(self, obj: Obj, tier: int) -> None:
        if tier == DRAM:
            if obj.pdata is None:
                self._ref(obj)
            self.dram.set(obj, self._key(obj))
        else:
            super().added(obj, tier)

    def removed(self, obj: Obj, tier: int) -> None:
        if tier == DRAM:
            self.dram.discard(obj)
        else:
            super().removed(obj, tier)

    def touched(self, obj: Obj) -> None:
        self._ref(obj)
        if obj.tiers & DRAM:
            self.dram.set(obj, self._key(obj))
        if obj.tiers & SSD:
            self.lru[SSD].move_to_end(obj)

    def victim(self, tier: int, need_bytes: int) -> Obj:
        if tier == DRAM:
            top = self.dram.peek()
            assert top is not None
            return top[1]
        return super().victim(tier, need_bytes)

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        if head.tiers & DRAM:
            self.dram.set(head, self._key(head))
        if head.tiers & SSD:
            od = self.lru[SSD]
            od[head] = None
            if evicting_tier == SSD:
                od.move_to_end(head, last=False)
