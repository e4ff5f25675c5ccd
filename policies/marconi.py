"""`marconi`: prefix caching for hybrid models (Marconi, MLSys'25), on the tiered simulator.

**The paper's rules.** Marconi keeps a radix tree whose nodes hold the KV of their edge and, at
their end, a recurrent (SSM) state checkpoint. (1) *Admission*: states are checkpointed only
where reuse is likely — at predicted branch points (a prefix other sequences have continued
differently: speculative insertion) and at request ends (a conversation's next turn resumes
there). (2) *Eviction*: among the tree's leaves, evict the node with the lowest
S = α·minmax(FLOP efficiency) + minmax(recency), FLOP efficiency = FLOPs a hit on the node
saves relative to its parent ÷ the node's bytes (its state and its edge's KV); evicting a node
frees its KV and its state together — without its state no request can hit the edge's KV.

**kvwear's reading**, each a choice made here:

- *Admission.* The simulator checkpoints exactly one state per request, at the end of its hashed
  input — always a request end — so the default `admit=all` caches every state, as Marconi
  would. `admit=branch` is the stricter reading for traces with sessions: a state is cached iff
  its position is a branch point of the radix tree (its segment already has a child: an earlier
  sequence went on past it) or the request belongs to a session (its next turn will extend it).
  Full-attention KV is always cached. DRAM victims are written to SSD (write-back), as in `lru`.
- *A node* is a state plus its *edge*: the segments from the state's position up to the previous
  checkpoint on its path (a segment carrying a resident state), a branch (a segment with another
  child resident in the tier) or the root. Evicting a state from a tier takes the edge's segments
  resident there with it (`evict_with`): in DRAM both are written to SSD (write-back) or both
  dropped, on SSD both are deleted — kvwear never keeps KV below a dropped state that no other
  state can use. A state whose segment still has children resident in the tier is an inner
  node: only its state goes (its KV serves the children), as Marconi evicts single-child nodes.
- *Leaves* per tier: a state, or a segment with no child and no state resident in that tier
  (KV that no state needs; its own edge).
- *FLOPs* come from the model profile (`kvwear.workloads.models`: active parameters and attention FLOPs
  per token, from the architecture): prefill of L tokens = 2·active_params·L +
  attn_flops_per_token·L²/2 (`_estimators.FlopModel`). A segment saves the prefill of its own
  tokens at its depth ÷ its bytes; a state, that of its edge ÷ (state + edge KV bytes). The
  `active_params` / `attn_flops_per_token` parameters override the profile (a config built
  without one must give them).
- *Recency* = access order (a counter: objects touched by one request keep the simulator's leaf →
  root order). minmax normalizes over the tier's candidates (0 when all are equal).

Per-event work: objects are binned by FLOP efficiency (bins `bin_ratio` apart, log scale) with
one LRU list per bin and tier; within a bin efficiencies differ by less than the ratio, so the
bin's oldest leaf (within `scan` entries of its head) is its best candidate, and an eviction
evaluates the W bin heads (the bins' geometric centres give the efficiency range; the heads'
ages and the current time give the recency range): O(W), exact up to the bin width. An edge is
walked up to `EDGE_SEGMENTS` segments.

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kvwear.errors import KvwearError
from kvwear.policies._estimators import FlopModel, minmax
from kvwear.policies.base import POLICIES, Policy, PolicyParams, SimContext, param
from kvwear.policies.tree import DRAM, SSD, Obj, Segment, State

EDGE_SEGMENTS = 64  # bound on the walk from a state to the previous checkpoint


@dataclass(frozen=True)
class MarconiParams(PolicyParams):
    alpha: float = param(1.0, sweep=(0.0, 2.0), help="weight of FLOP efficiency against recency", valid=(0.0, 1e3))
    admit: Literal["all", "branch"] = param("all", sweep=("all", "branch"),
                                            help="which request-end states to cache")
    active_params: float | None = param(None, sweep=None,
                                        help="active parameters (default: the model profile's)",
                                        valid=(0.0, 1e15), above=True)
    attn_flops_per_token: float | None = param(
        None, sweep=None, help="attention FLOPs per token per context token (default: the model profile's)",
        valid=(0.0, 1e15), above=True)
    bin_ratio: float = param(1.25, sweep=(1.05, 2.0), help="width of the FLOP-efficiency bins",
                             valid=(1.0, 100.0), above=True)
    scan: int = param(64, sweep=(1, 256), help="entries per bin examined for a leaf", valid=(1, 10**6))

    def __post_init__(self) -> None:
        if (self.alpha < 0 or (self.active_params is not None and self.active_params <= 0)
                or (self.attn_flops_per_token is not None and self.attn_flops_per_token < 0)
                or self.bin_ratio <= 1 or self.scan < 1):
            raise ValueError("need alpha >= 0, active_params > 0, attn_flops_per_token >= 0, bin_ratio > 1, "
                             "scan >= 1")


@POLICIES.register("marconi")
class MarconiPolicy(Policy[MarconiParams]):
    """Admit states at branch points and session ends; evict lowest α·FLOP-efficiency + recency."""

    summary = "hybrid prefix caching: branch-point state admission, FLOP-efficiency + recency eviction"

    def __init__(self, params: MarconiParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        self.flops = _flop_model(params, ctx)
        self._log_ratio = math.log(params.bin_ratio)
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
        if isinstance(obj, Segment):
            seg = obj
            return self.flops.flops_saved(seg.start_tokens, seg.end_tokens) / max(seg.nbytes, 1)
        assert isinstance(obj, State)
        st = obj
        end = st.seg.end_tokens
        a = st.seg.parent
        start = 0
        for _ in range(EDGE_SEGMENTS):
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
        if not isinstance(obj, State) or self.p.admit == "all":
            return DRAM
        st = obj
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

    def evict_with(self, victim: Obj, tier: int) -> Sequence[Obj]:
        """A state leaves with its edge's KV resident in `tier` (see the module doc)."""
        if not isinstance(victim, State):
            return []
        st = victim
        seg: Segment | None = st.seg
        below: Segment | None = None
        edge: list[Segment] = []
        for _ in range(EDGE_SEGMENTS):
            if seg is None or seg.parent is None or not seg.tiers & tier:
                break
            if seg.state is not None and seg.state is not st and seg.state.tiers:
                break  # the previous checkpoint: its KV serves that state
            if any(c is not below and c.tiers & tier for c in seg.children.values()):
                break  # shared with another resident branch (or an inner node's children)
            edge.append(seg)
            below = seg
            seg = seg.parent
        return edge

    def _head(self, od: OrderedDict[Obj, None], tier: int) -> Obj | None:
        """The bin's oldest eviction candidate: like Marconi's radix tree, only leaves — a state,
        or a segment with no child and no state resident in this tier (its extension goes first)."""
        for i, o in enumerate(od):
            if i >= self.p.scan:
                return None
            if not isinstance(o, Segment):
                return o
            seg = o
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


def _flop_model(p: MarconiParams, ctx: SimContext) -> FlopModel:
    """Prefill FLOPs a·L + b·L² with a = 2·active params, b = attention FLOPs per token / 2 (a
    causal prefill attends to L/2 tokens on average): the parameters, else the simulation's model
    profile, else the built-in profile named by the config."""
    cfg = ctx.config
    active, attn = cfg.active_params, cfg.attn_flops_per_token
    if not active and cfg.model:
        from kvwear.workloads.models import PROFILES

        if cfg.model in PROFILES:
            prof = PROFILES.get(cfg.model)
            active, attn = prof.active_params, prof.attn_flops_per_token
    if p.active_params is not None:
        active = p.active_params
    if p.attn_flops_per_token is not None:
        attn = p.attn_flops_per_token
    if not active:
        raise KvwearError(
            f"marconi: the model profile {cfg.model or '(none)'!r} has no prefill compute (hidden_size, "
            "attn_heads, mlp_active_width); give them in the profile or marconi:active_params=…,"
            "attn_flops_per_token=…")
    return FlopModel(2.0 * active, attn / 2.0)
