"""`marconi`: prefix caching for hybrid models (Marconi, MLSys'25), on the tiered simulator.

**Admission.** Marconi checkpoints recurrent states only where reuse is likely: at predicted
branch points (a prefix other sequences have already continued differently: speculative
insertion into the radix tree) and at request ends (input+output reuse by the next turn). The
simulator checkpoints exactly one state per request, at the end of its hashed input — always a
request end — so the default `admit=all` caches every state, as Marconi would. `admit=branch`
is the stricter reading for traces with sessions: a state is cached iff its position is a
branch point of the radix tree (its segment already has a child: an earlier sequence went on
past it) or the request belongs to a session (its next turn will extend it). Full-attention KV
is always cached. DRAM victims are written to SSD (write-back), as in `lru`.

**Eviction**, per tier, among leaves (as in Marconi's radix tree: a state, or a segment with no
child and no state resident in that tier): the lowest S = α·minmax(FLOP efficiency) + minmax(recency). FLOP
efficiency = FLOPs a hit on the object saves relative to its parent entry ÷ its bytes: for a
segment the prefill FLOPs of its own tokens at its depth; for a state those of the edge from
the previous checkpoint on its path, ÷ (state + edge KV bytes), as for a Marconi radix node
(`_estimators.FlopModel`: a·L + b·L², a = 2 × `active_params`, b = `attn_flops_coef` ×
`kv_bytes_per_token`, a proxy of 2·L_full·d_attn). Recency = access order (a counter:
objects touched by one request keep the simulator's leaf → root order). minmax
normalizes over the tier's candidates (0 when all are equal).

Per-event work: objects are binned by FLOP efficiency (bins `bin_ratio` apart, log scale) with
one LRU list per bin and tier; within a bin efficiencies differ by less than the ratio, so the
bin's oldest leaf (within `scan` entries of its head) is its best candidate, and an eviction
evaluates the W bin heads (the bins'
geometric centres give the efficiency range; the heads' ages and the current time give the
recency range): O(W), exact up to the bin width.

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from policies._estimators import FlopModel, minmax
from policies.base import POLICIES, Policy, PolicyParams, SimContext, param
from policies.tree import DRAM, FULL, LINEAR, SSD, Obj, Segment, State


@dataclass(frozen=True)
class MarconiParams(PolicyParams):
    alpha: float = param(1.0, sweep=(0.0, 2.0), help="weight of FLOP efficiency against recency")
    admit: Literal["all", "branch"] = param("all", sweep=("all", "branch"),
                                            help="which request-end states to cache")
    active_params: float = param(3e9, sweep=(1e9, 1e11), help="active parameters (linear FLOPs 2·P/token)")
    attn_flops_coef: float = param(1.0, sweep=(0.25, 8.0),
                                   help="quadratic FLOPs per token² = coef × kv_bytes_per_token")
    bin_ratio: float = param(1.25, sweep=(1.05, 2.0), help="width of the FLOP-efficiency bins")
    scan: int = param(64, sweep=(1, 256), help="entries per bin examined for a leaf")

    def __post_init__(self) -> None:
        if (self.alpha < 0 or self.active_params <= 0 or self.attn_flops_coef < 0 or self.bin_ratio <= 1
                or self.scan < 1):
            raise ValueError("need alpha >= 0, active_params > 0, attn_flops_coef >= 0, bin_ratio > 1, scan >= 1")


@POLICIES.register("marconi")
class MarconiPolicy(Policy):
    """Admit states at branch points and session ends; evict lowest α·FLOP-efficiency + recency."""

    Params = MarconiParams
    summary = "hybrid prefix caching: branch-point state admission, FLOP-efficiency + recency eviction"

    def __init__(self, params: PolicyParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        p: MarconiParams = params  # type: ignore[assignment]
        self.p = p
        self.flops = FlopModel(2.0 * p.active_params, p.attn_flops_coef * ctx.config.kv_bytes_per_token)
        self._log_ratio = math.log(p.bin_ratio)
        self.lists: dict[int, dict[int, OrderedDict[Obj, None]]] = {DRAM: {}, SSD: {}}
        self.where: dict[Obj, int] = {}
        self._tick = 0

    # --- FLOP efficiency ---------------------------------------------------------------------
    def efficiency(self, obj: Obj) -> float:
        """FLOPs saved per byte relative to the parent entry.

        A segment: the prefill FLOPs of its own tokens at its depth ÷ its bytes. A state: like a
        Marconi radix node, the FLOPs of the edge from the previous checkpoint on its path (the
        nearest ancestor segment carrying a state, up to 64 segments up) to its own position ÷
        (state bytes + the KV bytes of that edge): without the state nothing on that edge hits.
        """
        if obj.kind == FULL:
            seg: Segment = obj  # type: ignore[assignment]
            return self.flops.flops_saved(seg.start_tokens, seg.end_tokens) / max(seg.nbytes, 1)
        st: State = obj  # type: ignore[assignment]
        end = st.seg.end_tokens
        a = st.seg.parent
        start = 0
        for _ in range(64):
            if a is None or a.parent is None:
                break
            if a.state is not None:
                start = a.end_tokens
                break
            a = a.parent
        kv = (end - start) * self.ctx.config.kv_bytes_per_token
        return self.flops.flops_saved(start, end) / max(st.nbytes + kv, 1)

    def _bin(self, obj: Obj) -> int:
        return math.floor(math.log(max(self.efficiency(obj), 1e-30)) / self._log_ratio)

    # --- admission -----------------------------------------------------------------------------
    def place(self, obj: Obj) -> int:
        if obj.kind != LINEAR or self.p.admit == "all":
            return DRAM
        st: State = obj  # type: ignore[assignment]
        seg = st.seg
        if seg.children or self.ctx.req.session_id is not None:
            return DRAM
        return 0

    # --- lists ---------------------------------------------------------------------------------
    def added(self, obj: Obj, tier: int) -> None:
        if obj.pdata is None:
            self._tick += 1
            obj.pdata = self._tick
        b = self.where.get(obj)
        if b is None:
            b = self.where[obj] = self._bin(obj)
        d = self.lists[tier]
        od = d.get(b)
        if od is None:
            od = d[b] = OrderedDict()
        od[obj] = None

    def removed(self, obj: Obj, tier: int) -> None:
        b = self.where[obj]
        del self.lists[tier][b][obj]
        if not obj.tiers:
            del self.where[obj]

    def touched(self, obj: Obj) -> None:
        self._tick += 1
        obj.pdata = self._tick  # recency = access order (ties of one request broken leaf first)
        b = self.where[obj]
        for tier in (DRAM, SSD):
            if obj.tiers & tier:
                self.lists[tier][b].move_to_end(obj)

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        # the tail keeps its bin and its place (its recency did not change); the head joins the
        # same bin — at the LRU end when cut off a victim, else at the MRU end (it is touched next)
        b = self.where.get(tail)
        if b is None:
            return
        self.where[head] = b
        for tier in (DRAM, SSD):
            if head.tiers & tier:
                od = self.lists[tier][b]
                od[head] = None
                if tier == evicting_tier:
                    od.move_to_end(head, last=False)

    def _head(self, od: OrderedDict[Obj, None], tier: int) -> Obj | None:
        """The bin's oldest eviction candidate: like Marconi's radix tree, only leaves — a state,
        or a segment with no child and no state resident in this tier (its extension goes first)."""
        for i, o in enumerate(od):
            if i >= self.p.scan:
                return None
            if o.kind != FULL:
                return o
            seg: Segment = o  # type: ignore[assignment]
            st = seg.state
            if (st is None or not st.tiers & tier) and not any(c.tiers & tier for c in seg.children.values()):
                return o
        return None

    def victim(self, tier: int, need_bytes: int) -> Obj:
        heads = []
        for b, od in self.lists[tier].items():
            if od:
                o = self._head(od, tier)
                if o is not None:
                    heads.append((b, o))
        if not heads:  # no leaf near any head: fall back to the bins' oldest objects
            heads = [(b, next(iter(od))) for b, od in self.lists[tier].items() if od]
        assert heads, "victim() called on an empty tier"
        if len(heads) == 1:
            return heads[0][1]
        # bin b holds efficiencies in [r^b, r^(b+1)): its geometric centre stands for them
        ratio = self.p.bin_ratio
        e_lo = ratio ** (min(b for b, _ in heads) + 0.5)
        e_hi = ratio ** (max(b for b, _ in heads) + 0.5)
        r_lo = min(o.pdata for _, o in heads)
        r_hi = self._tick
        best: tuple[float, Obj] | None = None
        alpha = self.p.alpha
        for b, o in heads:
            s = alpha * minmax(ratio ** (b + 0.5), e_lo, e_hi) + minmax(o.pdata, r_lo, r_hi)
            if best is None or s < best[0]:
                best = (s, o)
        assert best is not None
        return best[1]
