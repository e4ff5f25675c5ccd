"""`fifo`: write-back with first-in-first-out eviction in each tier.

The order is the order of entry into the tier (a hit does not refresh it); among objects that
entered together the leaf side leaves first. Kept in a lazy min-heap per tier keyed by
(entry number, −depth); a split head inherits its tail's entry number. No parameters.
"""

from __future__ import annotations

from kvwear.policies._estimators import LazyMinHeap
from kvwear.policies.base import POLICIES, Policy, PolicyParams, SimContext
from kvwear.policies.tree import DRAM, SSD, Obj, Segment, depth_blocks


@POLICIES.register("fifo")
class FifoPolicy(Policy[PolicyParams]):
    """FIFO write-back: evict in order of entry into the tier."""

    def __init__(self, params: PolicyParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        self.heaps: dict[int, LazyMinHeap[Obj, tuple[int, int]]] = {DRAM: LazyMinHeap(), SSD: LazyMinHeap()}
        self.entries = 0

    def added(self, obj: Obj, tier: int) -> None:
        self.entries += 1
        key = (self.entries, -depth_blocks(obj))
        if obj.pdata is None:
            obj.pdata = {}
        obj.pdata[tier] = key
        self.heaps[tier].set(obj, key)

    def removed(self, obj: Obj, tier: int) -> None:
        self.heaps[tier].discard(obj)

    def touched(self, obj: Obj) -> None:
        pass

    def victim(self, tier: int, need_bytes: int) -> Obj:
        top = self.heaps[tier].peek()
        assert top is not None
        return top[1]

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        head.pdata = {}
        for tier in (DRAM, SSD):
            if head.tiers & tier:
                entry = tail.pdata[tier][0]
                key = (entry, -head.start)
                head.pdata[tier] = key
                self.heaps[tier].set(head, key)
