"""`wa`: Workload-Aware eviction ("KVCache Cache in the Wild", ATC'25).

Each object belongs to the workload of the request that last accessed it — workload = category
× turn (`key=category-turn`, turns above `max_turn` share one bucket, a null turn is its own
bucket) or category alone (`key=category`). Per workload, the reuse times observed in the last
`window_s` seconds (gaps between consecutive accesses of one object, charged to the workload
of the earlier access) are fitted with an exponential CDF F (`_estimators.SlidingExpFit`).
An object idle for t has ReuseProb = F(t + life) − F(t); each tier evicts the object with the
lowest (ReuseProb, −offset), offset = the object's position in its prompt (in blocks), so that
among equals the tail of a prompt goes before its head. DRAM victims are written to SSD (write-
back, as `lru`): WA is an eviction policy.

`life` (left open by the paper) is a parameter: `life_s > 0` is a fixed horizon in seconds;
`life_s = 0` (default) uses each workload's own mean reuse time 1/λ, i.e. "will it be reused
within one typical reuse interval".

Per-event work: since F is exponential, ReuseProb decreases with idle time inside a workload,
so each workload keeps one LRU list per tier (ordered by last access, ties leaf-side first as the
simulator visits paths leaf → root) and an eviction compares only the W list heads, in log space
(`log_reuse_prob`, exact where the probabilities underflow): O(W). With a single workload the
order is exactly LRU's.

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from kvwear.policies._estimators import SlidingExpFit, log_reuse_prob
from kvwear.policies.base import POLICIES, YEAR_S, Policy, PolicyParams, RequestInfo, SimContext, param
from kvwear.policies.tree import DRAM, SSD, Obj, Segment, depth_blocks

Workload = tuple[str, int | None]


@dataclass(frozen=True)
class WaParams(PolicyParams):
    key: Literal["category-turn", "category"] = param(
        "category-turn", sweep=("category-turn", "category"), help="what defines a workload")
    max_turn: int = param(8, sweep=(1, 100), help="turns above this share one workload bucket", valid=(1, 10**6))
    life_s: float = param(0.0, sweep=(0.0, 3600.0),
                          help="ReuseProb horizon in s; 0 = each workload's mean reuse time", valid=(0.0, YEAR_S))
    window_s: float = param(3600.0, sweep=(600.0, 7200.0), help="sliding window of the reuse-time fits",
                            valid=(0.0, YEAR_S), above=True)
    prior_reuse_s: float = param(60.0, sweep=(1.0, 3600.0), help="prior mean reuse time (one pseudo-sample)",
                                 valid=(0.0, YEAR_S), above=True)

    def __post_init__(self) -> None:
        if self.max_turn < 1 or self.life_s < 0 or self.window_s <= 0 or self.prior_reuse_s <= 0:
            raise ValueError("need max_turn >= 1, life_s >= 0, window_s > 0, prior_reuse_s > 0")


@POLICIES.register("wa")
class WaPolicy(Policy[WaParams]):
    """Workload-aware: evict the lowest (ReuseProb, −offset) over per-workload LRU heads."""

    summary = "workload-aware: per category × turn exponential reuse fit, evict lowest ReuseProb"

    def __init__(self, params: WaParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        # tier → workload → LRU list (the base class's per-tier lists are not used)
        self.lists: dict[int, dict[Workload, OrderedDict[Obj, None]]] = {DRAM: {}, SSD: {}}
        self.fits: dict[Workload, SlidingExpFit] = {}
        self.wl: Workload = ("", None)

    def workload_of(self, req: RequestInfo) -> Workload:
        if self.p.key == "category":
            return (req.category, None)
        turn = req.turn if req.turn is None else min(req.turn, self.p.max_turn)
        return (req.category, turn)

    def begin_request(self, req: RequestInfo) -> None:
        self.wl = self.workload_of(req)

    def _fit(self, wl: Workload) -> SlidingExpFit:
        f = self.fits.get(wl)
        if f is None:
            f = self.fits[wl] = SlidingExpFit(self.p.window_s, prior_rate_per_s=1.0 / self.p.prior_reuse_s)
        return f

    # pdata = (workload, last access s)
    def place(self, obj: Obj) -> int:
        obj.pdata = (self.wl, self.ctx.now_s)
        return DRAM

    def _list(self, tier: int, wl: Workload) -> OrderedDict[Obj, None]:
        d = self.lists[tier]
        od = d.get(wl)
        if od is None:
            od = d[wl] = OrderedDict()
        return od

    def added(self, obj: Obj, tier: int) -> None:
        if obj.pdata is None:
            obj.pdata = (self.wl, self.ctx.now_s)
        self._list(tier, obj.pdata[0])[obj] = None

    def removed(self, obj: Obj, tier: int) -> None:
        del self.lists[tier][obj.pdata[0]][obj]

    def touched(self, obj: Obj) -> None:
        now = self.ctx.now_s
        old_wl, last_s = obj.pdata
        self._fit(old_wl).observe(now, now - last_s)
        wl = self.wl
        obj.pdata = (wl, now)
        for tier in (DRAM, SSD):
            if obj.tiers & tier:
                if wl == old_wl:
                    self.lists[tier][wl].move_to_end(obj)
                else:
                    del self.lists[tier][old_wl][obj]
                    self._list(tier, wl)[obj] = None

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        if not head.tiers & (DRAM | SSD):
            return
        wl = tail.pdata[0]
        for tier in (DRAM, SSD):
            if head.tiers & tier:
                od = self._list(tier, wl)
                od[head] = None
                if tier == evicting_tier:
                    od.move_to_end(head, last=False)  # it inherits the victim's (oldest) place

    def priority(self, obj: Obj, wl: Workload) -> tuple[float, int]:
        """(log ReuseProb, −offset): the object with the smallest is evicted."""
        now = self.ctx.now_s
        lam = self._fit(wl).rate(now)
        life = self.p.life_s if self.p.life_s > 0 else 1.0 / lam
        return (log_reuse_prob(now - obj.pdata[1], life, lam), -depth_blocks(obj))

    def victim(self, tier: int, need_bytes: int) -> Obj:
        best: tuple[float, int] | None = None
        best_obj: Obj | None = None
        for wl, od in self.lists[tier].items():
            if od:
                o = next(iter(od))
                pr = self.priority(o, wl)
                if best is None or pr < best:
                    best, best_obj = pr, o
        assert best_obj is not None, "victim() called on an empty tier"
        return best_obj


__all__ = ["WaParams", "WaPolicy"]
