"""`meritkv`: SSD admission by merit — write a DRAM victim only if its expected benefit pays.

For a DRAM victim without an SSD copy, in seconds of GPU time (`_estimators.merit_score`):
    merit = saved prefill − lookup − transfer − write cost − historical miss recompute
with saved prefill = n / `recompute_tokens_per_s` (n = tokens a hit saves: a segment's own, a
state's whole prefix), lookup = `lookup_s`, transfer = bytes / `ssd_read_bytes_per_s`, write
cost = bytes · p_w converted to GPU seconds at `gpu_usd_per_hour` (× `write_weight`), and
historical miss recompute = (1 − h)·saved prefill, h = the fraction of this kind's SSD-written
objects (same reuse class: referenced once / more) that were read before leaving the SSD,
decayed with time constant `window_s`. Admit iff merit ≥ τ (`tau_s`).
The first `warmup` demands (SSD-write requests) of each kind × reuse class are admitted
unconditionally, which seeds h (the "first 3 demands" rule; demands are counted per class,
not per object, because most objects are demanded once). Eviction is LRU per tier.

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies._estimators import merit_score
from policies.base import POLICIES, Policy, PolicyParams, RequestInfo, SimContext, param
from policies.tree import FULL, SSD, Obj, Segment


@dataclass(frozen=True)
class MeritKvParams(PolicyParams):
    tau_s: float = param(0.0, sweep=(-0.1, 0.5), help="admission threshold on merit (GPU seconds)")
    warmup: int = param(3, sweep=(0, 100), help="demands per class admitted unconditionally")
    lookup_s: float = param(50e-6, sweep=(0.0, 1e-3), help="cost of an SSD index lookup")
    write_weight: float = param(1.0, sweep=(0.0, 64.0), help="weight of the SSD wear cost")
    window_s: float = param(3600.0, sweep=(600.0, 7200.0), help="time constant of the hit history")

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.lookup_s < 0 or self.write_weight < 0 or self.window_s <= 0:
            raise ValueError("need warmup >= 0, lookup_s >= 0, write_weight >= 0, window_s > 0")


def _class(obj: Obj) -> tuple[int, int]:
    return (obj.kind, 0 if obj.refs <= 1 else 1)


@POLICIES.register("meritkv")
class MeritKvPolicy(Policy):
    """LRU tiers; a DRAM victim is written to SSD iff its merit ≥ τ."""

    Params = MeritKvParams
    summary = "merit-based SSD admission: saved prefill minus lookup, transfer, wear and miss history"

    def __init__(self, params: PolicyParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        p: MeritKvParams = params  # type: ignore[assignment]
        self.p = p
        cfg = ctx.config
        self.gpu_usd_per_s = cfg.gpu_usd_per_s
        self.p_w = cfg.ssd_usd_per_byte_written
        self.read_bps = cfg.ssd_read_bytes_per_s
        self.tps = cfg.recompute_tokens_per_s
        classes = [(k, c) for k in (0, 1) for c in (0, 1)]
        self.demands = dict.fromkeys(classes, 0)
        self.hit = dict.fromkeys(classes, 0.5)   # decayed hits / leaves (prior: one half-hit)
        self.left = dict.fromkeys(classes, 1.0)
        self.ssd_class: dict[Obj, tuple[int, int]] = {}
        self._last_s: float | None = None

    def begin_request(self, req: RequestInfo) -> None:
        if self._last_s is not None and req.arrival_s > self._last_s:
            f = math.exp(-(req.arrival_s - self._last_s) / self.p.window_s)
            for k in self.hit:
                self.hit[k] *= f
                self.left[k] *= f
        self._last_s = req.arrival_s

    def hit_fraction(self, cls: tuple[int, int]) -> float:
        return self.hit[cls] / self.left[cls]

    def merit(self, obj: Obj) -> float:
        tokens = obj.tokens if obj.kind == FULL else obj.end_tokens  # type: ignore[attr-defined]
        saved = tokens / self.tps
        write = self.p.write_weight * obj.nbytes * self.p_w / self.gpu_usd_per_s
        h = self.hit_fraction(_class(obj))
        return merit_score(saved, self.p.lookup_s, obj.nbytes / self.read_bps, write, (1.0 - h) * saved)

    def admit_to_ssd(self, obj: Obj) -> bool:
        cls = _class(obj)
        self.demands[cls] += 1
        if self.demands[cls] <= self.p.warmup:
            return True
        return self.merit(obj) >= self.p.tau_s

    def added(self, obj: Obj, tier: int) -> None:
        super().added(obj, tier)
        if tier == SSD:
            self.ssd_class[obj] = _class(obj)

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        super().split(head, tail, evicting_tier)
        cls = self.ssd_class.get(tail)
        if cls is not None:
            self.ssd_class[head] = cls

    def removed(self, obj: Obj, tier: int) -> None:
        super().removed(obj, tier)
        if tier == SSD:
            cls = self.ssd_class.pop(obj)
            self.left[cls] += 1.0
            if obj.ssd_hit:
                self.hit[cls] += 1.0
