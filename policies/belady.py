"""`belady`: offline oracles that know every object's future (the simulator's pre-passes).

**The paper's oracle** (Gandalf, the offline bound its figures compare against): an object is
promoted (written) to SSD only when its *total* future hits are worth more than its write and
the future hits of the SSD victims it displaces: f_x·n·c > γ·p_w·s + Σ_victims f_v·n_v·c, f_x
the number of later requests that reference it; the SSD evicts the residents with the fewest
future hits.

**kvwear's reading** (each a parameter where it is a choice):
- `mode=wear` (default) is that oracle; `mode=min` is plain MIN per tier with LRU's write-back
  (every DRAM victim is written), the miss-ratio floor of the comparison.
- f_x is the later requests that reference the object's first block (a state: its position),
  from the future-references column the simulator streams with the next-use one (one backward
  pass, `kvwear.workloads.nextuse`; issue 16): both modes stream, neither holds the trace. n·c/s is
  priced per *unit* a hit needs — a hit at prefix length E saves E tokens and needs E tokens of
  KV plus, on a hybrid model, one state — so every part of it has value density f·E/(E·kv +
  state bytes). Pricing a state by f·E/s and its KV by f/kv (each part alone) made the oracle
  write, at high γ, states without the KV they need (Weka, Kimi-K3, leaf-first ties, the old
  $2.5 GPU-hour, γ = 64: miss 0.246 at 134 GB; with unit pricing 0.214 at 88 GB).
- SSD victims (`ssd_evict`): "min" (default) = the furthest next use, as DRAM; "fewest" = the
  paper's fewest future hits per byte (ties: MIN's order). Measured on the Weka workload at γ = 0
  (DRAM/SSD 1 %/10 % of its footprint, `ties=root`), "fewest" writes more at more misses
  (Kimi-K3: 119 vs 115 GiB, miss 0.087 vs 0.078; Qwen3.5-27B: 259 vs 241 GiB, 0.185 vs 0.119),
  so it is kept only as a variant. The victims' value Σ f_v·n_v·c is estimated from the first victim's
  density × the bytes displaced (one O(log n) peek, not a walk of the victim set).
- DRAM victims: MIN (furthest next use), which maximizes DRAM hits for unit sizes. Ties are
  the rule, not the exception: a session's KV and its state share their next use (the next
  turn). `ties=root` (default) evicts — and so writes — the KV first, root side first, and keeps
  the state in DRAM, as Gandalf's root-side rule does (the SSD part of a path stays a prefix);
  `ties=leaf` is LRU's convention (leaf first). Measured on Weka (DRAM/SSD 1 %/10 % of its
  footprint), γ = 0: Kimi-K3 miss 0.078 at 115 GiB with `root` vs 0.078 at 184 GiB with
  `leaf`; Qwen3.5-27B 0.119 at 241 GiB vs 0.126 at 424 GiB. `mode=min` keeps `leaf` (the
  floor: 0.079 vs 0.082 with `root` on Weka × Kimi-K3).
- `max_write_bytes` caps the total SSD writes (a budget), checked per write.
- The `ties` and `ssd_evict` numbers above were measured with `dram_copy=first` (next item).

An SSD copy of an object that is also in DRAM (an SSD hit staged into DRAM keeps its SSD copy)
serves no hit while the DRAM copy lives. `dram_copy=first` keys it as the SSD's first victim
until the DRAM copy leaves, which maximizes hits (without it MIN kept such copies and refused to
write the block needed next: the hit-property test in tests/policies/test_adv_oracle.py uses
it). But a dropped copy has to be written again when its DRAM copy is evicted, and that is
where the oracle's γ line lost to the online policies (issue 11): at γ = 0 it wrote more than
write-back LRU, which keeps those copies. `dram_copy=keep` (default, wear mode) keys the copy by
its own next use like any other SSD object. Measured (DRAM/SSD 1 %/10 % of the footprint,
γ = 0, `first` → `keep`): Weka × Kimi-K3 0.078 at 115 GiB → 0.078 at 75 GiB; Weka ×
Qwen3.5-27B 0.119 at 241 → 0.123 at 177 GiB; agentic generator × Qwen3.5-27B 0.077 at 410 →
0.077 at 177 GiB (LRU: 0.098 at 325). `mode=min` keeps `first` (the miss floor).

**Hindsight passes** (`passes`, default 1; the bench's line runs 1 and 2). f_x counts every later
reference of an object, but an SSD copy serves only those it is still resident for and that no
DRAM copy or deeper state serves first; that is where the γ line had its cliffs (multi-round ×
Kimi-K3, γ = 48: 45 % of the oracle's bytes were dead writes). With `passes` = k the oracle first
runs itself k − 1 times (same parameters, whole table in memory: `needs_table`); each run logs,
per written block (a state: one), its identity — kind, hash namespace, hash id (a state: its
position's) and the next use it was written for — and the SSD hits its copy served before
leaving the SSD (`served_reads`). The next pass prices a write by those hits instead of f_x (a
segment: the mean over its blocks that pass wrote; an object no earlier pass wrote keeps f_x)
and refuses it when they are zero; `mode=min` only refuses those. This is kvwear's reading of
"f_x := the hits the copy would serve", a fixed-point iteration, not an optimum: the space a
refused write frees changes what later copies serve, and a refused write is not retried. It
stops early when a pass learns nothing new. Measured on multi-round × Kimi-K3 (DRAM/SSD
1 %/10 %): at γ = 32 one pass 0.303 at 203.5 GiB (179.0 live), two 0.307 at 178.9, four 0.309 at
174.1 — at the same γ it mostly drops dead writes; but the learned hits rescale γ, and the
two-pass family traces the cliff smoothly (γ = 8: 0.215 at 179.1 GiB, γ = 12: 0.316 at 118.9,
γ = 16: 0.457 at 59.4) where one pass jumps from 0.303 at 203.5 (γ = 32) to 0.473 at 134.9 (48).
A third pass changes little (γ = 8: 179.1 → 178.7 GiB; γ = 12: 118.9 → 117.8, same misses), so
the bench runs two. Pricing the SSD victims by their learned hits too changed nothing on the
small agentic workload of tests/policies/test_oracle_bound.py. `mode=min,passes=2` (MIN per
tier without the writes its first pass found dead) is the line's miss end: trace-a × Kimi-K3
0.513 at 451.1 GiB (plain MIN 0.513 at 4,228.6; the wear oracle's best 0.541 at 448.6), so it
is in the line and plain MIN stays apart as the floor.

Hybrid models: a segment that leads to no resident state (no state at its end, no resident
child) can never be part of a hit, so it is keyed as never used again, and when a state or a
segment leaves every tier the chain above it is re-keyed that way (O(depth) of that chain).
A state with a resident deeper state below it (down a single-child chain) referenced by the same
next request is superseded: that request will be served by the deeper state (`supersede`; it
cuts the oracle's SSD writes on multi-round Kimi-K3 from 617 GiB to 0 at equal misses, but on
tiny random caches the deeper state is often evicted first and the oracle loses hits). Likewise an object
whose next reference went by without touching it (a state passed over
because a deeper state served that request) is re-keyed as never used again when the victim is
chosen (`_expire`, O(1) amortized per key). Without these, per-object MIN keeps the KV of
paths whose states it evicted, and dead states, and evicts live states (measured on
multi-round Kimi-K3, 32 GiB DRAM, no SSD: MIN 0.86 token miss vs LRU 0.50; with them 0.27).

**A measured bound, not a proven one.** The γ line is a per-object greedy relaxation of the
offline problem, not its optimum: MIN is not optimal for variable sizes nor for the prefix-tree
hit rule (a block counts as a hit only if all of its prefix does, and a state only with its
KV), choosing what to write under a price or a budget is knapsack-like, and the line is not
monotone in γ (hence the bench's dense grid, ×1.5 steps). `bench/frontier.py` checks it against
every online point and says which frontier dominates each: (1) the γ line alone; (2) plus the
line's points with their dead writes dropped; (3) plus every online point with its dead writes
dropped — `hindsight_filter` below, the stated relaxation where (1) falls short. (3) is an
offline schedule for each online point with the same misses and no more bytes, so it dominates
every point by construction: it says how much of a policy's wear was pure waste, not that the
γ line is optimal. The counts (1) and (2) are the informative ones (README "Frontier"); the γ
line there is `bench/frontier.py`'s `oracle_line`: both γ families (`passes` 1 and 2) with their
cliffs bisected, plus `mode=min,passes=2`. Measured on Weka, Mooncake (first 3,000 requests) and
the multi-round, agentic and trace-a generators, Kimi-K3 and Qwen3.5-27B (DRAM/SSD 1 %/10 % of
each footprint): (1) dominates all 490 online points (and 98 of 98 on the api generator's first
10,000 requests, trivially: no request of it can hit on a hybrid model, README "Frontier").
Its parts miss, of 490 in the same runs: one pass on the old grid (18 γ: what this docstring
recorded before the passes) 6, one pass with its cliffs bisected 5, the two-pass family alone 2, both families 1
(trace-a × Kimi-K3 Gandalf γ = 0, 0.530 at 3,786 GiB, below the families' best miss 0.541: MIN
with its dead writes refused, 0.513 at 451.1 GiB, covers it). On the 6-session agentic workload
of tests/policies/test_oracle_bound.py with Kimi-K3 the line still loses Gandalf γ = 16 (0.278
at 13.4 GB against 0.388 at 15.6 and 0.406 at 12.6: a strict xfail), and the bench's full γ
sweep adds Gandalf γ = 8 (0.169 at 22.1 GiB).

**Why the line has no point there** (issue 11; DRAM 566 MB holds one 449 MB state, the SSD
twelve). Not a grid gap: the two-pass family is continuous across it (γ = 40, 41, 42, 42.5, 43:
0.370, 0.388, 0.397, 0.410, 0.406 at 16.5, 15.6, 15.2, 13.6, 12.6 GB), and a third pass gives the
same points (γ = 41.23 0.388 at 15.6, 43.37 0.406 at 12.4). It is what a per-object rule cannot
choose: a *fallback*. Gandalf γ = 16 writes 20 states (67 % of its bytes) that serve 86 state
hits from SSD (17 of them read, 15 of those 2–10 times), mostly as partial hits at a session's early state
(session ag-1's state at 12,176 tokens serves nine later requests of 14,427–29,560 tokens); it
never writes the later tips, whose marginal tokens do not pay γ. The oracle at about those bytes
(two-pass γ = 41.23) writes 24 states serving 25 SSD hits: each tip written for its one next
hit. Its rule makes a shallow state dead as soon as a deeper resident state will serve its next
request (`supersede`) and for good once passed over (`_expire`), so it never keeps one for the
requests after the deeper tips have left — which depends on its own later choices, and a
hindsight pass cannot learn it because the first pass never keeps one (0 hits served). Tried and
not kept (measured there): pricing a state by its tokens beyond the deepest resident state above
it, as Gandalf's `state_tokens=marginal` (one pass γ = 96, 128: 0.252 at 17.2, 0.275 at 15.2 GB);
that with a passed-over state keyed by its position's next reference, two passes (γ = 64, 96:
0.322 at 13.5, 0.293 at 11.9 GB); no supersede (0.418–0.464 already at γ = 0, ≥ 0.329 at ≤ 16.6 GB);
SSD ties leaf first, or superseding an SSD state only by a deeper SSD state (two-pass γ = 48:
0.602 at 6.1, 0.582 at 9.5 GB). Closest, Gandalf's own strategy made an oracle's: marginal
pricing *and* an SSD state superseded only by a deeper SSD state (a DRAM-only tip may yet be
dropped; the states above re-keyed when one reaches or leaves the SSD), one pass: γ = 64, 96,
128, 150 0.207, 0.238, 0.281, 0.284 at 23.0, 17.0, 14.3, 13.4 GB (two passes, γ = 16: 0.169 at
22.0, which would cover Gandalf γ = 8). None comes within 1 % of 0.278 at 13.4 GB, so none is
in the line; that last pair is the lead for a stronger relaxation. Bounding it needs
a joint choice per session — which checkpoints to keep for which of its later requests, a
knapsack over the path — not a per-object greedy one; kvwear does not compute it.

Memory: beside the simulator's objects, the heaps (a live entry per cached object and tier,
~210 B with its key and seq, up to 4× with the stale ones between `LazyMinHeap`'s compactions)
and `due`, the cached objects listed under their next use for `_expire` (one entry per cached
object — an object leaves it when it leaves every tier — ≤ ~300 B each: a 224 B ordered set
per pending next use, shared by the objects due then); nothing per request or per access of
the trace (the future is streamed: `kvwear.workloads.nextuse`). Before, `due` kept every object keyed
with a future next use until that next use came, cached or not.

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from kvwear.policies._estimators import LazyMinHeap
from kvwear.policies.base import POLICIES, Policy, PolicyParams, PolicySpec, SimContext, param
from kvwear.policies.schema import OPS
from kvwear.policies.tree import DRAM, NEVER, SSD, Obj, Segment, State, depth_blocks


@dataclass(frozen=True)
class BeladyParams(PolicyParams):
    mode: Literal["wear", "min"] = param("wear", sweep=("wear", "min"),
                                         help="wear: the write-filtering oracle; min: MIN + write-back")
    gamma: float = param(1.0, sweep=(0.0, 4096.0), help="weight of the SSD write cost (wear mode)", valid=(0.0, 1e6))
    ssd_evict: Literal["min", "fewest"] = param(
        "min", sweep=("min", "fewest"),
        help="SSD victims (wear mode): fewest future hits per byte, or furthest next use (MIN)")
    ties: Literal["root", "leaf"] = param(
        "root", sweep=("root", "leaf"),
        help="among equal next uses (wear mode): evict KV root-side first and states last, or leaf first")
    bypass: bool = param(True, sweep=(True, False), help="do not cache objects never accessed again (wear)")
    supersede: bool = param(True, sweep=(True, False),
                            help="treat a state as dead when a deeper state serves its next reference")
    dram_copy: Literal["first", "keep"] = param(
        "keep", sweep=("keep", "first"),
        help="an SSD copy of a DRAM-resident object: the SSD's first victim, or keyed by its own next use")
    max_write_bytes: int = param(-1, sweep=None,
                                 help="total SSD write budget in bytes (wear mode); -1 = unlimited", valid=(-1, 2**62))
    passes: int = param(1, sweep=(1, 4),
                        help="hindsight passes: pass k refuses the writes passes 1..k-1 found dead "
                             "(never read before leaving the SSD); 1 = none", valid=(1, 64))

    def __post_init__(self) -> None:
        if self.gamma < 0:
            raise ValueError("gamma must be >= 0")
        if self.passes < 1:
            raise ValueError("passes must be >= 1")


_KV_FIRST = 1 << 40
#: a write's identity across passes: (is a state, hash namespace, the block's (a state: its
#: position's) hash id, the next use it was written for)
WriteId = tuple[int, int, int, int]
_WRITE, _READ, _EVICT = (OPS.index(o) for o in ("write", "read", "evict"))


def _key(obj: Obj, root_first: bool) -> tuple[int, int]:
    """Furthest next access first; among equals the deeper (leaf-side) object first, or with
    `root_first` KV before states and the shallower KV first (the second entry is the tie key)."""
    depth = depth_blocks(obj)
    if root_first and isinstance(obj, Segment):
        return (-obj.next_seq, depth - _KV_FIRST)
    return (-obj.next_seq, -depth)


def _useless(seg: Segment) -> bool:
    """Hybrid models: a segment with no resident state at its end and no resident child can
    never be part of a hit (a hit needs a resident state at or below it), whatever its next use."""
    st = seg.state
    if st is not None and st.tiers:
        return False
    return not any(c.tiers for c in seg.children.values())


def _superseded(st: State, nxt: int) -> bool:
    """A state whose next reference will be served by a deeper state: down the single-child
    chain below it (up to 4 segments) a resident state is referenced by that same request."""
    seg = st.seg
    for _ in range(4):
        if len(seg.children) != 1:
            return False
        seg = next(iter(seg.children.values()))
        d = seg.state
        if d is not None and d.tiers and d.next_seq == nxt:
            return True
    return False


@POLICIES.register("belady")
class BeladyPolicy(Policy[BeladyParams]):
    """Offline oracle: MIN eviction per tier; writes to SSD only what pays for its wear."""

    needs_future = True
    summary = "offline oracle: MIN per tier, SSD writes only when future hits beat wear (mode=min: write-back)"

    def __init__(self, params: BeladyParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        p = self.p
        cfg = ctx.config
        self.c_token = cfg.usd_per_recomputed_token
        self.p_w = cfg.ssd_usd_per_byte_written
        # keys: (-next use, tie key), led by the future-hit density with `ssd_evict=fewest`
        self.heaps: dict[int, LazyMinHeap[Obj, tuple[float, ...]]] = {DRAM: LazyMinHeap(), SSD: LazyMinHeap()}
        self.hybrid = ctx.hybrid
        # next_seq → the resident objects keyed with it, in the order they were last keyed (a
        # dict as an ordered set: an object leaves when it leaves every tier, so this holds one
        # entry per cached object, not one per object the trace ever keyed; `_expire`)
        self.due: dict[int, dict[Obj, None]] = {}
        self._due_seq = 0
        self.written = 0
        self._fewest = p.mode == "wear" and p.ssd_evict == "fewest"
        self._root_first = p.mode == "wear" and p.ties == "root"
        self._dram_copy_first = p.mode == "min" or p.dram_copy == "first"
        self._kv = cfg.kv_bytes_per_token
        self._sb = cfg.state_bytes
        self.served: dict[WriteId, int] = {}  # SSD hits each write served in an earlier pass
        self.write_log: list[WriteId] | None = None  # per written block, when a later pass learns

    @classmethod
    def needs_table(cls, params: PolicyParams) -> bool:
        assert isinstance(params, BeladyParams)
        return params.passes > 1

    def prepare(self, requests: pa.Table) -> None:
        """`passes` > 1: run the oracle (same parameters, one pass) passes − 1 times over the
        whole table, each pricing a write by the SSD hits its copy served in the last pass that
        made it (`served`) instead of f_x, and price this run the same way; stop early once a
        pass learns nothing new."""
        if self.p.passes == 1:
            return
        from kvwear.policies.sim import simulate  # the simulator imports the kvwear.policies, not the reverse

        cfg = dataclasses.replace(self.ctx.config, record_requests=False)
        spec = PolicySpec("belady", dataclasses.replace(self.p, passes=1))
        logs: list[list[WriteId]] = []

        def setup(pol: Policy[Any]) -> None:
            assert isinstance(pol, BeladyPolicy)
            pol.served = self.served
            pol.write_log = []
            logs.append(pol.write_log)

        for _ in range(self.p.passes - 1):
            reads = served_reads(simulate(requests, cfg, spec, setup=setup).ssd_ops)
            log = logs.pop()
            assert len(reads) == len(log), "one logged identity per written block"
            learned = dict(zip(log, reads.tolist(), strict=True))
            if all(self.served.get(w) == n for w, n in learned.items()):
                break
            self.served = {**self.served, **learned}

    def _write_ids(self, obj: Obj) -> list[WriteId]:
        """The identities of `obj`'s blocks (a state: one) as of now, for `passes`."""
        if isinstance(obj, Segment):
            return [(0, obj.ns, k, n) for k, n in zip(obj.keys, self.ctx.next_seqs(obj), strict=True)]
        assert isinstance(obj, State)
        return [(1, obj.seg.ns, obj.seg.keys[-1], obj.next_seq)]

    def future_hits(self, obj: Obj) -> int:
        """f_x: later requests that reference the object's first block (a state: its position),
        streamed with the trace's next-use column (`kvwear.workloads.nextuse`)."""
        return self.ctx.future_refs(obj)

    def _learned(self, obj: Obj) -> float | None:
        """The SSD hits `obj`'s copy served in the last earlier pass that wrote it (a segment:
        the mean over its blocks that pass wrote), or None when no earlier pass wrote it."""
        served = self.served
        known = [served[w] for w in self._write_ids(obj) if w in served]
        return sum(known) / len(known) if known else None

    def _density(self, obj: Obj, hits: float | None = None) -> float:
        """Future hits × tokens saved per byte of the *unit* a hit needs (dead objects: 0).

        A hit at prefix length E saves E tokens and needs the whole unit — E tokens of KV and,
        on a hybrid model, one state — so every part is priced at the unit's density
        f·E/(E·kv + state bytes): pricing a state by f·E/s and its KV by f/kv admits states
        without the KV they need (measured: at high γ the oracle wrote only states)."""
        assert isinstance(obj, (Segment, State))
        e = obj.end_tokens
        f = self.future_hits(obj) if hits is None else hits
        return f * e / (e * self._kv + self._sb) if e else 0.0

    def place(self, obj: Obj) -> int:
        if self.p.mode == "wear" and self.p.bypass and obj.next_seq >= NEVER:
            return 0
        return DRAM

    def _keyof(self, obj: Obj, register: bool = True) -> tuple[int, int]:
        """`obj`'s heap key; with `register`, it is listed under its next use in `due`, to be
        re-keyed when that passes without touching it."""
        k = _key(obj, self._root_first)
        nxt = obj.next_seq
        if nxt < NEVER:
            if nxt < self.ctx.seq and obj.last_seq < nxt:
                # its next reference went by without using it (a deeper state served that
                # request): its next use is unknown, treat it as never
                return (-NEVER, k[1])
            if register and nxt >= self._due_seq:   # `_expire` has passed earlier seqs for good
                d = self.due.setdefault(nxt, {})
                d.pop(obj, None)     # re-keyed: it moves to the end, where the last keying put it
                d[obj] = None
        if self.hybrid:
            if isinstance(obj, Segment):
                if _useless(obj):
                    return (-NEVER, k[1])
            elif self.p.supersede and isinstance(obj, State) and _superseded(obj, nxt):
                return (-NEVER, k[1])
        return k

    def _tier_key(self, obj: Obj, tier: int) -> tuple[float, ...]:
        """The heap key of `obj` in `tier`. An SSD copy of an object that is also in DRAM serves no
        hit while the DRAM copy lives (hits come from DRAM), so it is the SSD's first victim, as
        dead as an object never used again; when its DRAM copy leaves it gets its own key back.
        SSD keys with `ssd_evict=fewest` lead with the future-hit density (ties: MIN's order)."""
        k = self._keyof(obj)
        if tier == SSD:
            if obj.tiers & DRAM and self._dram_copy_first:
                return self._dead_key(SSD, k[1])
            if self._fewest:
                return (0.0 if k[0] == -NEVER else self._density(obj), *k)
        return k

    def _dead_key(self, tier: int, depth_key: int) -> tuple[float, ...]:
        if tier == SSD and self._fewest:
            return (-1.0, -NEVER, depth_key)
        return (-NEVER, depth_key)

    def _rekey(self, obj: Obj) -> None:
        for tier, h in self.heaps.items():
            if obj in h:
                h.set(obj, self._tier_key(obj, tier))

    def _expire(self) -> None:
        """Re-key objects whose next reference has passed without touching them."""
        # strictly before the current request: during its walk (leaf → root) an object due now
        # may still be touched after an admission decision is made for a deeper one
        now = self.ctx.seq
        due = self.due
        while self._due_seq < now:
            for obj in due.pop(self._due_seq, ()):
                if obj.next_seq == self._due_seq and obj.last_seq < obj.next_seq:
                    self._rekey(obj)
            self._due_seq += 1

    def _demote(self, seg: Segment | None) -> None:
        """Re-key the chain of segments above a lost state that no longer lead to any state."""
        while seg is not None and seg.parent is not None and seg.tiers and _useless(seg):
            for tier, h in self.heaps.items():
                if seg in h:
                    h.set(seg, self._dead_key(tier, -seg.start))
            seg = seg.parent

    def added(self, obj: Obj, tier: int) -> None:
        self.heaps[tier].set(obj, self._tier_key(obj, tier))
        if tier == SSD:
            self.written += obj.nbytes
            if self.write_log is not None:
                self.write_log.extend(self._write_ids(obj))
        elif tier == DRAM and obj in self.heaps[SSD]:
            self.heaps[SSD].set(obj, self._tier_key(obj, SSD))

    def removed(self, obj: Obj, tier: int) -> None:
        self.heaps[tier].discard(obj)
        if not obj.tiers & (DRAM | SSD):
            # out of every heap: nothing to re-key when its next use passes
            d = self.due.get(obj.next_seq)
            if d is not None:
                d.pop(obj, None)
                if not d:
                    del self.due[obj.next_seq]
        if tier == DRAM and obj in self.heaps[SSD]:
            self.heaps[SSD].set(obj, self._tier_key(obj, SSD))
        if self.hybrid and not obj.tiers:
            if isinstance(obj, Segment):
                self._demote(obj.parent)
            else:
                assert isinstance(obj, State)
                self._demote(obj.seg)

    def touched(self, obj: Obj) -> None:
        self._rekey(obj)
        if self._fewest and isinstance(obj, Segment):
            st = obj.state
            if st is not None and st.tiers & SSD:
                self._rekey(st)  # a request passed its position: one future hit fewer

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        for tier, h in self.heaps.items():
            if tail in h:
                h.set(tail, self._tier_key(tail, tier))
            if head.tiers & tier:
                h.set(head, self._tier_key(head, tier))

    def victim(self, tier: int, need_bytes: int) -> Obj:
        self._expire()
        top = self.heaps[tier].peek()
        assert top is not None, "victim() called on an empty tier"
        return top[1]

    def admit_to_ssd(self, obj: Obj) -> bool:
        learned = self._learned(obj) if self.served else None
        if learned == 0:
            return False  # an earlier pass wrote it and it was never read (`passes`)
        if self.p.mode == "min":
            return True
        nxt = -self._keyof(obj, register=False)[0]  # its effective next use (dead objects: never)
        if nxt >= NEVER or obj.nbytes > self.ctx.capacity_bytes[SSD]:
            return False
        if 0 <= self.p.max_write_bytes < self.written + obj.nbytes:
            return False
        # the paper's promotion rule: all future hits f_x·n·c against the write fee plus the
        # future hits of the victims it displaces (estimated at the first victim's density)
        value = self._density(obj, learned) * obj.nbytes * self.c_token
        fee = self.p.gamma * self.p_w * obj.nbytes
        over = obj.nbytes - self.ctx.free_bytes(SSD)
        if over > 0:
            self._expire()
            top = self.heaps[SSD].peek()
            if top is not None:
                victim = top[1]
                dead = top[0][0] < 0 if self._fewest else top[0][0] == -NEVER
                if not dead:
                    fee += self._density(victim) * over * self.c_token
        return value > fee


def _next_op(ssd_ops: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Each ssd_ops row's op code (`OPS` index) and the row of the same object's next op (-1:
    none). A copy's ops are its write, its reads, then its evict (none at the trace's end)."""
    n = ssd_ops.num_rows
    op = ssd_ops.column("op").combine_chunks()
    assert isinstance(op, pa.DictionaryArray)
    codes = np.asarray([OPS.index(v) for v in op.dictionary.to_pylist()], dtype=np.int8)[
        np.asarray(op.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
    oid = np.asarray(ssd_ops.column("obj_id").to_numpy(), dtype=np.int64)
    order = np.lexsort((np.arange(n), oid))   # each object's ops, in time order
    nxt = np.full(n, -1, dtype=np.int64)
    if n > 1:
        same = oid[order[1:]] == oid[order[:-1]]
        nxt[order[:-1][same]] = order[1:][same]
    return codes, nxt


def served_reads(ssd_ops: pa.Table) -> np.ndarray:
    """Per SSD write row, in row order: the reads its copy served before it left the SSD."""
    codes, _ = _next_op(ssd_ops)
    oid = np.asarray(ssd_ops.column("obj_id").to_numpy(), dtype=np.int64)
    order = np.lexsort((np.arange(len(oid)), oid))  # each object's ops in time order
    c = codes[order]
    # an object's ops are copies, each a write and then its reads and evict: every row belongs
    # to the latest write before it in this order (an object's first op is always a write)
    copy = np.cumsum(c == _WRITE) - 1
    assert not len(c) or ((copy >= 0).all() and (oid[order][1:] == oid[order][:-1])[
        c[1:] == _READ].all()), "a read follows its copy's write"
    per_copy = np.bincount(copy[c == _READ], minlength=int(copy[-1]) + 1 if len(c) else 0)
    out = np.zeros(len(codes), dtype=np.int64)
    out[order[c == _WRITE]] = per_copy
    return out[codes == _WRITE]


def live_writes(ssd_ops: pa.Table) -> np.ndarray:
    """Which rows are SSD writes whose copy is read before it leaves the SSD (a write whose
    copy's next op is not a read is dead: it served no hit)."""
    codes, nxt = _next_op(ssd_ops)
    return (codes == _WRITE) & (nxt >= 0) & (codes[nxt] == _READ)


def hindsight_filter(ssd_ops: pa.Table) -> pa.Table:
    """The oracle's relaxation for online points (README "Frontier"): a run's ssd_ops without
    its dead writes (`live_writes`) and the evicts that end those copies. Every other decision
    stays, so every read — every SSD hit — is served as before and the SSD holds a subset of
    what it held (never more bytes): the same misses for fewer written bytes, whatever the
    policy. Not an optimum: the space a dead write took is not given to anything else."""
    codes, nxt = _next_op(ssd_ops)
    dead = np.flatnonzero((codes == _WRITE) & ~((nxt >= 0) & (codes[nxt] == _READ)))
    keep = np.ones(ssd_ops.num_rows, dtype=bool)
    keep[dead] = False
    ends = nxt[dead]
    ends = ends[ends >= 0]
    assert (codes[ends] == _EVICT).all(), "a dead copy's next op must be its evict"
    keep[ends] = False
    return ssd_ops.filter(pa.array(keep))
