"""`meritkv`: SSD admission by merit — write a DRAM victim only if its expected benefit pays.

**The paper's rule.** A DRAM victim without an SSD copy is written to SSD iff, in seconds of GPU
time (`_estimators.merit_score`),
    merit = saved prefill − lookup − transfer − write cost − historical miss recompute ≥ τ,
and an object's first 3 demands are admitted unconditionally (a warm-up that seeds the history).

**kvwear's reading**, each a choice made here:

- *Terms.* saved prefill = n / `recompute_tokens_per_s` (n = tokens a hit saves: a segment's
  own, a state's whole prefix); lookup = `lookup_s`; transfer = bytes / `ssd_read_bytes_per_s`;
  write cost = bytes · p_w converted to GPU seconds at `gpu_usd_per_hour` (× `write_weight`);
  historical miss recompute = (1 − h)·saved prefill.
- *h, the hit fraction*, is kept per object kind (full KV, linear state): decayed SSD hits ÷
  decayed SSD lookups, updated on **every** lookup — an SSD hit (an object staged from SSD into
  DRAM) or an SSD miss (an object demanded again, found in no tier and recomputed). So h keeps
  moving when admissions stop: a class whose objects are refused accumulates misses, its h
  falls and merit falls with it; hits raise it. A never-seen object's first demand is not a
  miss of the SSD's (nothing could have been admitted), unless `compulsory=true`. Decay: time
  constant `window_s` of trace time; prior one half-hit in one lookup.
- *Demands* are requests that reference the object (hit, touched or computed), counted per
  stable key across evictions (`_history.KeyHistory`, kept for `window_s`); an object's count is
  its least-demanded block's. The warm-up is **per object**: a victim demanded at most `warmup`
  times so far is written unconditionally — so MeritKV writes about what LRU writes on traces
  where most objects are demanded a few times, as the paper reports.
- Eviction is LRU per tier.

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvwear.policies._estimators import merit_score
from kvwear.policies._history import KeyHistory
from kvwear.policies.base import POLICIES, YEAR_S, Policy, PolicyParams, RequestInfo, SimContext, param
from kvwear.policies.tree import DRAM, SSD, Obj, Segment, State


@dataclass(frozen=True)
class MeritKvParams(PolicyParams):
    tau_s: float = param(0.0, sweep=(0.0, 0.5), help="admission threshold on merit (GPU seconds)", valid=(0.0, 1e12))
    warmup: int = param(3, sweep=(0, 10), help="demands of an object admitted unconditionally", valid=(0, 10**6))
    lookup_s: float = param(50e-6, sweep=(0.0, 1e-3), help="cost of an SSD index lookup", valid=(0.0, 1.0))
    write_weight: float = param(1.0, sweep=(0.0, 64.0), help="weight of the SSD wear cost", valid=(0.0, 1e6))
    window_s: float = param(3600.0, sweep=(600.0, 7200.0),
                            help="time constant of the hit history and retention of demand counts",
                            valid=(0.0, YEAR_S), above=True)
    compulsory: bool = param(False, sweep=(False, True),
                             help="count an object's first demand as an SSD miss")

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.lookup_s < 0 or self.write_weight < 0 or self.window_s <= 0:
            raise ValueError("need warmup >= 0, lookup_s >= 0, write_weight >= 0, window_s > 0")


@POLICIES.register("meritkv")
class MeritKvPolicy(Policy[MeritKvParams]):
    """LRU tiers; a DRAM victim is written to SSD iff demanded ≤ warmup times or its merit ≥ τ."""

    summary = "merit-based SSD admission: saved prefill minus lookup, transfer, wear and miss history"

    def __init__(self, params: MeritKvParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        cfg = ctx.config
        self.gpu_usd_per_s = cfg.gpu_usd_per_s
        self.p_w = cfg.ssd_usd_per_byte_written
        self.read_bps = cfg.ssd_read_bytes_per_s
        self.tps = cfg.recompute_tokens_per_s
        self.demands = KeyHistory(params.window_s)
        self.hits = [0.5, 0.5]      # decayed SSD hits per kind (prior: one half-hit ...)
        self.lookups = [1.0, 1.0]   # ... in one lookup)
        self._last_s: float | None = None

    def begin_request(self, req: RequestInfo) -> None:
        if self._last_s is not None and req.arrival_s > self._last_s:
            f = math.exp(-(req.arrival_s - self._last_s) / self.p.window_s)
            for k in (0, 1):
                self.hits[k] *= f
                self.lookups[k] *= f
        self._last_s = req.arrival_s
        self.demands.begin_request(req.arrival_s)

    def hit_fraction(self, kind: int) -> float:
        return self.hits[kind] / self.lookups[kind]

    def merit(self, obj: Obj) -> float:
        if isinstance(obj, Segment):
            tokens = obj.tokens
        else:
            assert isinstance(obj, State)
            tokens = obj.end_tokens
        saved = tokens / self.tps
        write = self.p.write_weight * obj.nbytes * self.p_w / self.gpu_usd_per_s
        h = self.hit_fraction(obj.kind)
        return merit_score(saved, self.p.lookup_s, obj.nbytes / self.read_bps, write, (1.0 - h) * saved)

    # --- lookups: every SSD hit and miss moves h --------------------------------------------
    def place(self, obj: Obj) -> int:
        seen = self.demands.least(obj) > 0
        self.demands.ref(obj)
        if seen or self.p.compulsory:
            self.lookups[obj.kind] += 1.0  # demanded, in no tier: an SSD miss
        return DRAM

    def added(self, obj: Obj, tier: int) -> None:
        super().added(obj, tier)
        if tier == DRAM and obj.tiers & SSD:  # staged from SSD: an SSD hit
            self.hits[obj.kind] += 1.0
            self.lookups[obj.kind] += 1.0

    def touched(self, obj: Obj) -> None:
        self.demands.ref(obj)
        super().touched(obj)

    def admit_to_ssd(self, obj: Obj) -> bool:
        if self.demands.least(obj) <= self.p.warmup:
            return True
        return self.merit(obj) >= self.p.tau_s
