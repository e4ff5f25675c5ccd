"""`hotprefix`: hotness-gated DRAM admission; what is refused is dropped, never written.

Every reference (insertion attempt or re-use) of a block key increments its frequency `freq`;
an object's freq is the least of its blocks' (a prefix is as hot as its coldest block). Its
score is freq·clock, clock = the logical time of its last reference (request seq + 1). A newly
computed object is admitted to DRAM while DRAM has room iff freq ≥ θ; when DRAM is full, iff
its score beats the lowest score in DRAM (the object the admission would displace). A refused
object is dropped: never placed, never written to SSD. DRAM evicts the lowest score (leaf side
first on ties) and writes it to SSD (write-back); SSD is LRU. Frequencies of keys unreferenced
for `history_requests` requests are forgotten (bounded memory).

Sweep: θ 1–10 (the Gandalf paper's range).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies._estimators import LazyMinHeap
from policies.base import POLICIES, Policy, PolicyParams, RequestInfo, SimContext, obj_keys, param
from policies.tree import DRAM, SSD, Obj, Segment


@dataclass(frozen=True)
class HotPrefixParams(PolicyParams):
    theta: int = param(2, sweep=(1, 10), help="frequency needed to enter DRAM while it has room")
    history_requests: int = param(100_000, sweep=None,
                                  help="forget frequencies unreferenced for this many requests")

    def __post_init__(self) -> None:
        if self.theta < 1 or self.history_requests < 1:
            raise ValueError("theta and history_requests must be >= 1")


def _depth(obj: Obj) -> int:
    if isinstance(obj, Segment):
        return obj.start
    return obj.seg.start + obj.seg.n  # type: ignore[attr-defined]


@POLICIES.register("hotprefix")
class HotPrefixPolicy(Policy):
    """Admit to DRAM iff freq ≥ θ (room) or freq·clock beats the DRAM minimum; refused → dropped."""

    Params = HotPrefixParams

    def __init__(self, params: PolicyParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        self.p: HotPrefixParams = params  # type: ignore[assignment]
        self.freq: dict[tuple[int, int], list[int]] = {}
        self.dram = LazyMinHeap()
        self.refused = 0
        self.refused_bytes = 0

    def begin_request(self, req: RequestInfo) -> None:
        h = self.p.history_requests
        if req.seq and req.seq % max(h // 2, 1) == 0:
            horizon = req.seq - h
            self.freq = {k: e for k, e in self.freq.items() if e[1] >= horizon}

    def _ref(self, obj: Obj) -> int:
        """Count a reference; store the score in pdata; return the object's freq."""
        seq = self.ctx.seq
        freq = self.freq
        lowest = -1
        for k in obj_keys(obj):
            e = freq.get(k)
            if e is None:
                e = freq[k] = [1, seq]
            else:
                e[0] += 1
                e[1] = seq
            if lowest < 0 or e[0] < lowest:
                lowest = e[0]
        obj.pdata = lowest * (seq + 1)
        return lowest

    @staticmethod
    def _key(obj: Obj) -> tuple[int, int]:
        return (obj.pdata, -_depth(obj))

    def place(self, obj: Obj) -> int:
        f = self._ref(obj)
        if self.ctx.free_bytes(DRAM) >= obj.nbytes:
            ok = f >= self.p.theta
        else:
            top = self.dram.peek()
            ok = top is not None and obj.pdata > top[0][0]  # type: ignore[index]
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
            return top[1]  # type: ignore[return-value]
        return super().victim(tier, need_bytes)

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        if head.tiers & DRAM:
            self.dram.set(head, self._key(head))
        if head.tiers & SSD:
            od = self.lru[SSD]
            od[head] = None
            if evicting_tier == SSD:
                od.move_to_end(head, last=False)
