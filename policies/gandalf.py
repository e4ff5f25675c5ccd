"""`gandalf`: SSD-lifetime-aware placement ("Gandalf: Flash Shall Not Die!").

DRAM-first: every new object goes to DRAM. When DRAM must free space the policy compares the
cheapest *drop* with the cheapest *move* (write to SSD) and does the cheaper one:

- drop cost, per byte: D = P(idle ≥ w)·n·c / (s·w) — n tokens the object would save, c the
  recompute price of one token (`gpu_usd_per_hour` / 3600 / `recompute_tokens_per_s`), s its
  bytes, w how long it has been idle. Only DRAM *leaves* are dropped: a segment with no child
  resident in any tier and no resident state (a state is always a leaf).
- move cost, per byte: γ·μ(t)·p_w plus the future-hit value of the SSD victims the write
  displaces (p_w = SSD price per byte written, `ssd_usd_per_tb_written`/10¹²). Only root-side
  DRAM nodes are moved: a segment whose parent is the root or holds an SSD copy, or a state
  whose segment is not DRAM-only — so along every path the SSD part stays a prefix of the
  DRAM part.
- μ(t) keeps SSD writes on the budget TBW·t/T_target (`_estimators.WriteBudget`).

A DRAM copy of an object that is also on SSD ("clean") costs nothing to evict and goes first.
SSD victims are the lowest-D SSD objects.

Choices the paper leaves implicit (each a parameter where it is a choice):
- **P(idle ≥ w)** (`idle_model`): "hist" (default) = the probability that an object of its class
  idle for w is reused, from `_estimators.ReuseHistogram`: decayed counts (time constant
  `window_s`) of accesses into the class, of reuses, and of reuse gaps in log₂ bins; P =
  G(≥w)/(G(≥w) + never-reused). "exp" = q·e^(−λw), λ an exponential fit of the class's gaps over
  the last `window_s`, q the class's reuse fraction. Classes: kind × reuse class (accessed once /
  more) × log₂ of the prefix length at the object's end (in 256-token units). Reuses of dropped
  objects are counted through a bounded ghost table (`ghosts`): a segment recreated with the
  same first key, a dropped state whose position a later request passes.
- **Hybrid structure**: a segment that leads to no resident state (no resident state at its end,
  no resident child) can be in no hit, so its D is 0 (it goes first; a request that later
  checkpoints below it recomputes it anyway); a state whose segment already has a child (a later
  request extended that prefix, so the next turn will use the deeper state) has P ×
  `superseded_weight`.
- **Units and arbitration**: D is dollars per byte per second (w in seconds, floored at
  `min_idle_s`); the move cost is dollars per byte. They are compared through the horizon T an
  object written now is expected to stay on SSD (an EWMA of the age of SSD victims at eviction;
  `window_s` while the SSD has never evicted): drop iff D_drop·T ≤ γ·μ·p_w + D_ssd·T·(bytes to
  displace)/s, where D_ssd is the lowest per-byte D among SSD objects (the next SSD victim) —
  the victims' value is estimated from that one head, not by walking them. The drop candidate is
  the lowest-D droppable leaf among the list heads (`scan` entries per list); the move candidate
  is the root-side ancestor of the lowest-D DRAM object.
- **μ(t)** (`budget`): "ratio" = (written / budget)^`budget_gain`, clipped to [0.05, 20];
  "fixed" = 1. The budget is `dwpd` drive writes per day of the simulated SSD capacity, i.e.
  TBW·t/T_target with TBW = capacity·DWPD·365·years and T_target = years. Traces that write far
  above the budget make μ(t) saturate and Gandalf drop nearly everything: use `budget=fixed`
  to study γ alone.

Per-event work: objects sit in LRU lists per tier × class, inside which D is non-increasing in
idle time, so the cheapest object of a list is (up to the hybrid adjustments) its head and a
decision looks at O(W) heads (W ≈ 2 kinds × 2 reuse classes × ~10 length classes, up to `scan`
entries each for the leaf test) plus the walk up the DRAM-only run to the root-side node. `split_victims` is off: a move
must write the root side of a segment, not the leaf-side part the simulator would cut.

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from kvwear.errors import KvwearError
from policies._estimators import ReuseHistogram, SlidingExpFit, WriteBudget
from policies.base import POLICIES, Policy, PolicyParams, RequestInfo, SimContext, param
from policies.tree import DRAM, FULL, LINEAR, SSD, Obj, Segment, State


@dataclass(frozen=True)
class GandalfParams(PolicyParams):
    gamma: float = param(8.0, sweep=(0.0, 64.0),
                         help="weight of the SSD wear cost of a move against a drop's recompute cost")
    dwpd: float = param(1.0, sweep=(0.1, 10.0),
                        help="write budget in drive writes per day of the simulated SSD (TBW/T_target)")
    budget: Literal["ratio", "fixed"] = param("ratio", sweep=("ratio", "fixed"),
                                              help="μ(t) rule: (written/budget)^gain, or 1")
    budget_gain: float = param(1.0, sweep=(0.5, 2.0), help="exponent of the μ(t) ratio rule")
    idle_model: Literal["hist", "exp"] = param(
        "hist", sweep=("hist", "exp"),
        help="P(idle≥w): empirical reuse-gap survival per class, or q·e^(−λw)")
    min_idle_s: float = param(1.0, sweep=(0.1, 60.0), help="floor of the idle time w in D")
    window_s: float = param(3600.0, sweep=(600.0, 7200.0), help="time constant of the estimators")
    scan: int = param(4, sweep=(1, 16), help="entries per list examined for the leaf test")
    superseded_weight: float = param(
        0.1, sweep=(0.0, 1.0),
        help="P multiplier for a state whose prefix a later request already extended")
    ghosts: int = param(1 << 20, sweep=(0, 1 << 22), help="forgotten objects remembered for reuse counts")

    def __post_init__(self) -> None:
        if (self.gamma < 0 or self.dwpd <= 0 or self.min_idle_s <= 0 or self.window_s <= 0 or self.scan < 1
                or self.ghosts < 0 or not 0 <= self.superseded_weight <= 1):
            raise ValueError("need gamma >= 0, dwpd > 0, min_idle_s > 0, window_s > 0, scan >= 1, "
                             "ghosts >= 0, 0 <= superseded_weight <= 1")


def _rc(refs: int) -> int:
    """Reuse class: 0 = not reused since it was (re)inserted, 1 = reused."""
    return 0 if refs <= 1 else 1


def _size_class(obj: Obj) -> int:
    """log₂ of the prefix length (in 256-token units) at the object's end."""
    return (obj.end_tokens >> 8).bit_length()  # type: ignore[attr-defined]


def _tokens(obj: Obj) -> int:
    """Tokens whose recompute a hit on `obj` saves: a segment's own, a state's whole prefix."""
    if obj.kind == FULL:
        return obj.tokens  # type: ignore[attr-defined]
    return obj.end_tokens  # type: ignore[attr-defined]


def _leads_nowhere(seg: Segment) -> bool:
    """Hybrid models: no resident state at its end and no resident child, so the segment cannot
    be part of any hit (a hit needs a resident state at or below it): dropping it loses nothing,
    since a request that later checkpoints a state below it recomputes it anyway."""
    st = seg.state
    if st is not None and st.tiers:
        return False
    return not any(c.tiers for c in seg.children.values())


ClassKey = tuple[int, int, int]  # kind, reuse class, size class


@POLICIES.register("gandalf")
class GandalfPolicy(Policy):
    """DRAM-first; on DRAM pressure drop or move, whichever costs less (wear vs recompute)."""

    Params = GandalfParams
    split_victims = False
    summary = "SSD-lifetime-aware: drop cold DRAM leaves or move root-side nodes, on a write budget"

    def __init__(self, params: PolicyParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        p: GandalfParams = params  # type: ignore[assignment]
        self.p = p
        cfg = ctx.config
        self.c_token = cfg.usd_per_recomputed_token
        self.c_per_kv_byte = self.c_token / cfg.kv_bytes_per_token
        self._hist_model = p.idle_model == "hist"
        self._dcache: dict[Obj, float] = {}
        self.p_w = cfg.ssd_usd_per_byte_written
        day = 86400.0
        cap = max(ctx.capacity_bytes[SSD], 1)
        # TBW·t/T_target with TBW = cap·DWPD·365·years and T_target = years
        self.budget = WriteBudget(tbw_bytes=cap * p.dwpd * 365.0, target_lifetime_s=365.0 * day,
                                  gain=p.budget_gain, mode=p.budget)
        self._started = False
        # lists: tier → class key → LRU of objects; DRAM copies with an SSD copy live in `clean`
        self.lists: dict[int, dict[ClassKey, OrderedDict[Obj, None]]] = {DRAM: {}, SSD: {}}
        self.where: dict[int, dict[Obj, ClassKey]] = {DRAM: {}, SSD: {}}
        self.clean: OrderedDict[Obj, None] = OrderedDict()
        # estimators per (kind, reuse class); pdata = (last access s, accesses incl. ghost past)
        self.hists: dict[ClassKey, ReuseHistogram] = {}
        self.fits: dict[ClassKey, SlidingExpFit] = {}
        self.ghosts: OrderedDict[tuple[int, int, int], tuple[float, int]] = OrderedDict()
        self._last_decay_s = 0.0
        self.hybrid = ctx.hybrid
        self._ssd_age_s = p.window_s
        self._ssd_evictions = 0
        self._decision: tuple[Obj, bool] | None = None

    # --- estimators ---------------------------------------------------------------------------
    def begin_request(self, req: RequestInfo) -> None:
        now = req.arrival_s
        if not self._started:
            self._started = True
            self.budget.start_s = now
            self._last_decay_s = now
        dt = now - self._last_decay_s
        if dt > self.p.window_s / 256:  # decay in small steps, not at every request
            f = math.exp(-dt / self.p.window_s)
            for h in self.hists.values():
                h.decay(f)
            self._last_decay_s = now

    def _observe_access(self, obj: Obj, new: bool) -> None:
        """Count an access: a reuse (with its gap) if the object, or its ghost, was seen before."""
        if self._dcache:
            self._dcache.clear()
        now = self.ctx.now_s
        k = obj.kind
        prev = obj.pdata
        if prev is None and new:
            prev = self.ghosts.pop(self._ghost_key(obj), None)
        sc = _size_class(obj)
        if prev is not None:
            last_s, refs = prev
            before = (k, _rc(refs), sc)
            self._hist(before).reused(now - last_s)
            self.fits[before].observe(now, now - last_s)
            refs += 1
        else:
            refs = 1
        self._hist((k, _rc(refs), sc)).entered()
        obj.pdata = (now, refs)
        if k == FULL and self.ghosts:
            # a request passing the end of this segment reuses a dropped state checkpointed there
            seg: Segment = obj  # type: ignore[assignment]
            if seg.n and (seg.state is None or not seg.state.tiers):
                gone = self.ghosts.pop((LINEAR, seg.ns, seg.keys[-1]), None)
                if gone is not None:
                    self._hist((LINEAR, _rc(gone[1]), sc)).reused(now - gone[0])

    def _hist(self, key: ClassKey) -> ReuseHistogram:
        h = self.hists.get(key)
        if h is None:
            h = self.hists[key] = ReuseHistogram(self.p.window_s)
            self.fits[key] = SlidingExpFit(self.p.window_s, prior_rate_per_s=1.0 / 60.0)
        return h

    @staticmethod
    def _ghost_key(obj: Obj) -> tuple[int, int, int]:
        if obj.kind == FULL:
            seg: Segment = obj  # type: ignore[assignment]
            return (FULL, seg.ns, seg.keys[0])
        st: State = obj  # type: ignore[assignment]
        return (LINEAR, st.seg.ns, st.seg.keys[-1])

    def _forget(self, obj: Obj) -> None:
        """`obj` left every tier: remember its last access so a comeback counts as a reuse."""
        if obj.pdata is None or (obj.kind == FULL and not obj.n):  # type: ignore[attr-defined]
            return
        g = self.ghosts
        g[self._ghost_key(obj)] = obj.pdata
        if len(g) > self.p.ghosts:
            g.popitem(last=False)

    def class_of(self, obj: Obj) -> ClassKey:
        return (obj.kind, _rc(obj.pdata[1] if obj.pdata else 1), _size_class(obj))

    def p_idle(self, obj: Obj, idle_s: float, key: ClassKey | None = None) -> float:
        """P(idle ≥ w): the probability that an object of this class idle for w is reused."""
        if key is None:
            key = self.class_of(obj)
        h = self.hists.get(key) or self._hist(key)
        if self._hist_model:
            return h.p_reuse(idle_s)
        q = h.p_reuse(0.0)
        return q * math.exp(-self.fits[key].rate(self.ctx.now_s) * idle_s)

    def drop_cost(self, obj: Obj, key: ClassKey | None = None) -> float:
        """D = P(idle ≥ w)·n·c/(s·w): dollars per byte per second (w in s, floored at min_idle_s).

        n·c/s is c/kv_bytes_per_token for KV (exact up to the rounding of a partial last block)
        and end_tokens·c/state_bytes for a state. `key` is the object's list (class) if known.
        """
        if self.hybrid and obj.kind == FULL and _leads_nowhere(obj):  # type: ignore[arg-type]
            return 0.0
        w_s = self.ctx.now_s - obj.last_s
        if w_s < 0.0:
            w_s = 0.0
        h = self.hists.get(key) if key is not None and self._hist_model else None
        p = h.p_reuse(w_s) if h is not None else self.p_idle(obj, w_s, key)   # p_idle, inlined when it can be
        if p == 0.0:
            return 0.0
        if obj.kind == FULL:
            vpb = self.c_per_kv_byte
        else:
            st: State = obj  # type: ignore[assignment]
            nb = st.nbytes
            vpb = st.seg.end_tokens * self.c_token / (nb if nb > 1 else 1)
            if self.hybrid and st.seg.children:
                p *= self.p.superseded_weight
        w = w_s if w_s > self.p.min_idle_s else self.p.min_idle_s
        return p * vpb / w

    def horizon_s(self) -> float:
        """T: how long a moved object is expected to stay on SSD (the SSD's eviction age)."""
        if self.ctx.free_bytes(SSD) > 0 and not self._ssd_evictions:
            return self.p.window_s
        return self._ssd_age_s

    def move_cost_per_byte(self, obj: Obj) -> float:
        """γ·μ(t)·p_w plus the value (D·T) of the SSD bytes the write displaces, per byte."""
        mu = self.budget.mu(self.ctx.now_s)
        cost = self.p.gamma * mu * self.p_w
        over = obj.nbytes - self.ctx.free_bytes(SSD)
        if over > 0:
            v = self._cheapest(SSD)
            if v is not None:
                cost += v[0] * self.horizon_s() * over / obj.nbytes
        return cost

    # --- list bookkeeping ---------------------------------------------------------------------
    def _enlist(self, obj: Obj, tier: int) -> None:
        key = (obj.kind, _rc(obj.pdata[1] if obj.pdata else 1), _size_class(obj))
        lists = self.lists[tier]
        od = lists.get(key)
        if od is None:
            od = lists[key] = OrderedDict()
        od[obj] = None
        self.where[tier][obj] = key

    def _delist(self, obj: Obj, tier: int) -> bool:
        key = self.where[tier].pop(obj, None)
        if key is None:
            return False
        del self.lists[tier][key][obj]
        return True

    def _cached_cost(self, obj: Obj, key: ClassKey) -> float:
        """drop_cost, memoized between accesses: during one request's evictions nothing it
        depends on changes except the tree around removed objects (invalidated in `removed`)."""
        c = self._dcache
        d = c.get(obj)
        if d is None:
            d = c[obj] = self.drop_cost(obj, key)
        return d

    def _cheapest(self, tier: int) -> tuple[float, Obj] | None:
        best: tuple[float, Obj] | None = None
        for key, od in self.lists[tier].items():
            if od:
                o = next(iter(od))
                d = self._cached_cost(o, key)
                if best is None or d < best[0]:
                    best = (d, o)
        return best

    # --- notifications ------------------------------------------------------------------------
    def place(self, obj: Obj) -> int:
        self._observe_access(obj, new=True)
        return DRAM

    def added(self, obj: Obj, tier: int) -> None:
        if tier == DRAM:
            if obj.tiers & SSD:
                self.clean[obj] = None
            else:
                self._enlist(obj, DRAM)
        elif tier == SSD:
            self.budget.record_write(obj.nbytes)
            self._enlist(obj, SSD)
            if self._delist(obj, DRAM):
                self.clean[obj] = None

    def removed(self, obj: Obj, tier: int) -> None:
        c = self._dcache
        if c:
            c.pop(obj, None)
            up = obj.parent if obj.kind == FULL else obj.seg  # type: ignore[attr-defined]
            if up is not None:
                c.pop(up, None)
        if not obj.tiers:
            self._forget(obj)
        if tier == DRAM:
            if not self._delist(obj, DRAM):
                self.clean.pop(obj, None)
        elif tier == SSD:
            self._delist(obj, SSD)
            if obj in self.clean:
                del self.clean[obj]
                self._enlist(obj, DRAM)

    def touched(self, obj: Obj) -> None:
        self._observe_access(obj, new=False)
        for tier in (DRAM, SSD):
            if self._delist(obj, tier):
                self._enlist(obj, tier)
        if obj in self.clean:
            self.clean.move_to_end(obj)

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        for tier in (DRAM, SSD):
            key = self.where[tier].get(tail)
            if key is not None:
                self.lists[tier][key][head] = None
                self.where[tier][head] = key
        if tail in self.clean:
            self.clean[head] = None

    # --- decisions ----------------------------------------------------------------------------
    @staticmethod
    def _root_side(obj: Obj) -> Obj:
        """The root-side end of the DRAM-only run above `obj` (the node a move may write)."""
        if obj.kind == LINEAR:
            st: State = obj  # type: ignore[assignment]
            seg = st.seg
            if not (seg.tiers & DRAM and not seg.tiers & SSD):
                return obj
            a = seg
        else:
            a = obj  # type: ignore[assignment]
        par = a.parent
        while par is not None and par.parent is not None and par.tiers & DRAM and not par.tiers & SSD:
            a = par
            par = a.parent
        return a

    def victim(self, tier: int, need_bytes: int) -> Obj:
        self._decision = None
        if tier == SSD:
            best = self._cheapest(SSD)
            if best is None:
                raise KvwearError("gandalf: SSD over capacity with no SSD object listed")
            self._ssd_evictions += 1
            self._ssd_age_s += 0.05 * (self.ctx.now_s - best[1].last_s - self._ssd_age_s)
            return best[1]
        if self.clean:
            return next(iter(self.clean))
        drop: tuple[float, Obj] | None = None
        coldest: tuple[float, Obj] | None = None
        scan = self.p.scan
        # the hot loop of the policy: locals instead of attribute lookups, _cached_cost inlined
        cache = self._dcache
        cost = self.drop_cost
        hybrid = self.hybrid
        for key, od in self.lists[DRAM].items():
            if not od:          # a quarter of the lists are empty at a time (kept: their order breaks ties)
                continue
            for i, o in enumerate(od):
                if i >= scan:
                    break
                # D is needed for a list's head (the coldest candidate) and its first droppable
                # object only; the non-droppable objects between them are passed over unpriced.
                # Droppable: a state always; a segment when it leads nowhere (_leads_nowhere,
                # inlined), and then in hybrid models its drop_cost is 0 without the call.
                ok = True
                zero = False
                if o.kind == FULL:
                    st = o.state  # type: ignore[attr-defined]
                    if st is not None and st.tiers:
                        ok = False
                    else:
                        for c in o.children.values():  # type: ignore[attr-defined]
                            if c.tiers:
                                ok = False
                                break
                    zero = ok and hybrid
                if i and not ok:
                    continue
                if zero:
                    d = 0.0
                else:
                    got = cache.get(o)
                    if got is None:
                        got = cache[o] = cost(o, key)
                    d = got
                if i == 0 and (coldest is None or d < coldest[0]):
                    coldest = (d, o)
                if ok:
                    if drop is None or d < drop[0]:
                        drop = (d, o)
                    break
        if coldest is None:
            raise KvwearError("gandalf: DRAM over capacity with no DRAM object listed")
        move = self._root_side(coldest[1])
        can_move = move.nbytes <= self.ctx.capacity_bytes[SSD]
        if drop is None and not can_move:
            # nothing satisfies the rules (oversized run with no droppable leaf): drop the coldest
            self._decision = (coldest[1], False)
            return coldest[1]
        if drop is not None and (not can_move or drop[0] * self.horizon_s() <= self.move_cost_per_byte(move)):
            self._decision = (drop[1], False)
            return drop[1]
        self._decision = (move, True)
        return move

    def admit_to_ssd(self, obj: Obj) -> bool:
        dec = self._decision
        if dec is not None and dec[0] is obj:
            return dec[1]
        # an object too large for DRAM: write it iff a drop would cost more than the move
        if obj.nbytes > self.ctx.capacity_bytes[SSD]:
            return False
        return self.drop_cost(obj) * self.horizon_s() > self.move_cost_per_byte(obj)
