"""The tiered KV-cache simulator: streams a `requests` table through HBM/DRAM/SSD under a policy.

`simulate(requests, config, policy) -> SimResult` is the library entry point (the CLI and the
harness call it). It returns the `ssd_ops` table (policies/schema.py), per-request records, a
summary and a timeline (policies/metrics.py).

Semantics (docs/design/simulator.md), exactly:

* **Objects.** Full-attention KV lives in a prefix tree per hash namespace, one block per key
  `(hash_ns, hash_id)` of the trace's source block size B. The simulator's chunk is S tokens
  (`chunk_tokens`, default 16): when B > S (Mooncake: 512 at 16), one source block is one cache
  object of k = B/S chunks — hit ratios are then exact at granularity B, not S (a reused prefix
  that ends inside a block is not seen); when B < S the batch is first regrouped with
  `kvwear.workloads.blocks.convert_block_size`. Block bytes = k·S·kv_bytes_per_token; a trace's partial
  last block holds ⌈tokens/S⌉ chunks; ids beyond ⌈hashed_tokens/B⌉ cover nothing and are
  ignored. The tree is kept as segments (runs of blocks with one fate, `kvwear.policies.tree`), and
  every operation works on segments, never one Python step per chunk.
* **States** (hybrid models, `state_bytes > 0`): one checkpoint per request, at the end of the
  request's hashed prefix — precisely after its last *full* hashed block, because a partial last
  block's key never recurs on a later request's path (the next turn hashes that block full), so a
  checkpoint after it could never be hit; a request with no full block gets no checkpoint. It is
  attached to the segment ending there (the simulator splits a segment to make that boundary).
* **Hit rule.** A request hits up to the longest prefix p (on its own block boundaries) such that
  every block up to p is resident in some tier and — hybrid models only — a resident state sits
  at p. Hit tokens = tokens of those blocks (capped at `hashed_tokens`); everything else of the
  input is recomputed. Blocks beyond p that are resident are *touched* (their recency updated,
  the engine dedups them), not counted as hits.
* **Tiers.** A hit is served by the fastest tier holding the object (HBM > DRAM > SSD). SSD hits
  stage through DRAM: an ssd_ops `read` (cause `hit`), then the object is also placed in DRAM
  (its SSD copy is kept, so evicting that DRAM copy later costs no write). New objects (missed
  blocks, re-inserted ghosts, the request's new state) are placed where `policy.place` says;
  an SSD placement is an ssd_ops `write` (cause `insert`). After the request is walked, tiers
  are brought back within capacity: SSD writes first make room on the SSD (`evict` rows, cause
  `capacity`, precede the write that needs the room — the replayer never sees an over-full
  device); DRAM victims without an SSD copy are written (cause `dram_evict`) or dropped as
  `policy.admit_to_ssd` decides; HBM (optional, `hbm_bytes > 0`) is an LRU the simulator runs
  itself: every object a request uses or creates is placed there, and an HBM eviction only drops
  the HBM copy. An object larger than a tier's capacity is never placed there.
* **ssd_ops rows** are per SSD object — one row per block of a segment (`obj_id` = segment
  base id + i; ids are contiguous in a segment) and one per state — in time order (`t_s` =
  arrival of the request that caused it; within a request: reads, then for each write the
  evictions that make room, then the write). An object re-inserted after leaving every tier
  gets new ids.
* **Latency and cost per request.** transfer = SSD bytes read / `ssd_read_bytes_per_s` +
  (bytes served from DRAM or staged from SSD) / `dram_to_hbm_bytes_per_s`; recompute =
  recomputed tokens / `recompute_tokens_per_s`; load latency = max(transfer, recompute).
  Cost = recompute seconds · `gpu_usd_per_hour`/3600 + SSD bytes written · `ssd_usd_per_tb_written`
  /10^12 (the drive price divided by its TBW).
* **Clock.** `seq` (the request's index) is the logical clock policies use for recency;
  `arrival_s` is simulated time (decay, windows). Requests must come sorted by arrival.

Streaming: record batches are consumed one at a time, each cut to at most `BATCH_HASH_IDS` hash
ids; memory grows with what the tiers hold (ghost segments are pruned), plus the outputs — and
not with the ssd_ops when an `ops_sink` takes them batch by batch, nor with the per-request
records when a `requests_sink` takes them (`kvwear.policies.metrics`: else 105 bytes a request; they
can be switched off with `record_requests=False`). The tree costs ~40 bytes per block (its key
in the segment's list) plus ~1 KB per segment or state (the objects, their children dicts and
the policy's list entries), measured with tracemalloc on the shared Weka traces at Kimi-K3 (lru:
2.7 MiB for 42,852 blocks in 594 segments and 463 states; gandalf 2.1 MiB for 24,986 in 340 and
124, its ghost table apart: `kvwear.policies._history.GhostTable`, ~150 bytes an entry); a batch's ids
as Python ints add ~45 bytes each, at most `BATCH_HASH_IDS` of them. Oracle policies
(`needs_future`) get the future from `next_use` and `future_refs` columns the batches carry
(written in one backward pass by `kvwear.workloads.nextuse`); batches without them are gathered into
the whole table for the in-memory pre-pass. Each request's future is one (2, ids) array: row
0 the next-use seq of each of its ids, row 1 the number of later accesses of it; an object
keeps (array, index) of the access that last touched it (`Obj._fut`), so `next_seqs` and
`future_refs` read it there.

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.errors import KvwearError
from kvwear.policies.base import POLICIES, Policy, PolicySpec, RequestInfo, resolve_spec
from kvwear.policies.config import SimConfig
from kvwear.policies.metrics import (
    CAUSES,
    OP_EVICT,
    OP_READ,
    OP_WRITE,
    Accumulator,
    SimSummary,
)
from kvwear.policies.schema import SSD_OPS
from kvwear.policies.tree import DRAM, FULL, HBM, LINEAR, NEVER, SSD, Obj, Segment, State
from kvwear.workloads.schema import list_parts

CAUSE_INSERT = CAUSES.index("insert")
CAUSE_DRAM_EVICT = CAUSES.index("dram_evict")
CAUSE_HIT = CAUSES.index("hit")
CAUSE_CAPACITY = CAUSES.index("capacity")
CAUSE_PROMOTE = CAUSES.index("promote")
_POLICY_TIERS = DRAM | SSD
# Simulator._visit's result (its docstring names the fields)
_VisitResult = tuple[int, int, list[int], int, int, int, list[Obj], list[Obj]]


@dataclass(frozen=True)
class SimResult:
    """Outputs of one simulation: tables and the summary."""

    label: str
    config: SimConfig
    ssd_ops: pa.Table
    requests: pa.Table
    timeline: pa.Table
    summary: SimSummary


class Simulator:
    """One simulation run; implements `kvwear.policies.base.SimContext` for its policy."""

    def __init__(self, config: SimConfig, spec: str | PolicySpec,
                 ops_sink: Callable[[pa.Table], None] | None = None,
                 requests_sink: Callable[[pa.Table], None] | None = None) -> None:
        self.spec = resolve_spec(spec)
        self.config = config
        self.capacity_bytes = {HBM: config.hbm_bytes, DRAM: config.dram_bytes, SSD: config.ssd_bytes}
        self.used_bytes = {HBM: 0, DRAM: 0, SSD: 0}
        self.chunk_tokens = config.chunk_tokens
        self.state_bytes = config.state_bytes
        self.hybrid = config.state_bytes > 0
        self.tokens_per_s = config.recompute_tokens_per_s
        self.now_s = 0.0
        self.seq = -1
        self.req = RequestInfo(-1, -1, None, "", None, 0.0, 0, 0)
        self.hit_state: State | None = None
        self.hit_blocks = 0
        self.roots: dict[int, Segment] = {}
        self.hbm_lru: OrderedDict[Obj, None] = OrderedDict()
        self._next_oid = 0
        self.acc = Accumulator(config, self.used_bytes, requests_sink)
        cls = POLICIES.get(self.spec.name)
        self.policy: Policy[Any] = cls(self.spec.params, self)
        self._future: np.ndarray | None = None  # (2, ids): next use, future refs (oracles)
        self._fut_base = 0
        # ssd op runs (expanded to per-object rows by _flush_ops)
        self._op_t: list[float] = []
        self._op_code: list[int] = []
        self._op_oid: list[int] = []
        self._op_n: list[int] = []
        self._op_bb: list[int] = []
        self._op_lb: list[int] = []
        self._op_kind: list[int] = []
        self._op_sess: list[int] = []
        self._op_cause: list[int] = []
        self._sessions: list[str | None] = [None]
        self._sess_index: dict[str | None, int] = {None: 0}
        self._cur_sess = 0
        self._ops_tables: list[pa.Table] = []
        self._ops_sink = ops_sink
        self._promote: list[Obj] = []
        self._ghosts: list[Obj] = []

    # --- context helpers --------------------------------------------------------------------
    def free_bytes(self, tier: int) -> int:
        return self.capacity_bytes[tier] - self.used_bytes[tier]

    def write_to_ssd(self, obj: Obj) -> None:
        """Queue an SSD write (cause `promote`) of a resident object that has no SSD copy; it
        happens with this request's other SSD writes, before DRAM is brought within capacity."""
        if not obj.tiers & SSD and obj not in self._promote:
            self._promote.append(obj)

    def next_seqs(self, seg: Segment) -> list[int]:
        """Per-block next-access request seq of `seg` (oracle policies only)."""
        fut = seg._fut
        if fut is None:
            return [seg.next_seq] * seg.n
        arr, i = fut
        return [int(x) for x in arr[0, i:i + seg.n]]

    def future_refs(self, obj: Obj) -> int:
        """Later requests that reference the object's first block (a state: its position), as
        of the current request: the count after the last request that referenced it (a state
        passed over included), less the current request when it references the object and has
        not reached it yet (oracle policies only; else 0)."""
        fut = obj._fut
        if fut is None:
            return 0
        arr, i = fut
        return int(arr[1, i]) - (int(arr[0, i]) == self.seq)

    # --- ops --------------------------------------------------------------------------------
    def _op(self, code: int, obj: Obj, cause: int) -> None:
        self._op_t.append(self.now_s)
        self._op_code.append(code)
        self._op_oid.append(obj.oid)
        self._op_cause.append(cause)
        self._op_sess.append(self._cur_sess)
        if isinstance(obj, Segment):
            seg = obj
            self._op_n.append(seg.n)
            self._op_bb.append(seg.block_bytes)
            self._op_lb.append(seg.last_bytes)
            self._op_kind.append(FULL)
        else:
            self._op_n.append(1)
            self._op_bb.append(obj.nbytes)
            self._op_lb.append(obj.nbytes)
            self._op_kind.append(LINEAR)

    def _flush_ops(self) -> None:
        if not self._op_n:
            return
        n = np.asarray(self._op_n, dtype=np.int64)
        total = int(n.sum())
        starts = np.cumsum(n) - n
        obj_id = np.repeat(np.asarray(self._op_oid, dtype=np.int64) - starts, n) + np.arange(total)
        nbytes = np.repeat(np.asarray(self._op_bb, dtype=np.int64), n)
        nbytes[starts + n - 1] = np.asarray(self._op_lb, dtype=np.int64)

        def dict_col(codes: list[int], names: tuple[str, ...]) -> pa.Array:
            idx = np.repeat(np.asarray(codes, dtype=np.int8), n)
            return pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(names, pa.string()))

        from kvwear.policies.metrics import KIND_NAMES, OP_NAMES

        if len(self._sessions) == 1:  # no session seen: all null
            sess = pa.nulls(total, pa.string())
        else:
            idx = np.repeat(np.asarray(self._op_sess, dtype=np.int32), n)
            sess = pa.array(self._sessions, pa.string()).take(pa.array(idx))
        table = pa.table({
            "t_s": pa.array(np.repeat(np.asarray(self._op_t, dtype=np.float64), n)),
            "op": dict_col(self._op_code, OP_NAMES),
            "obj_id": pa.array(obj_id),
            "obj_kind": dict_col(self._op_kind, KIND_NAMES),
            "bytes": pa.array(nbytes),
            "session_id": sess,
            "cause": dict_col(self._op_cause, CAUSES),
        })
        if self._ops_sink is not None:
            self._ops_sink(SSD_OPS.conform(table))
        else:
            self._ops_tables.append(SSD_OPS.conform(table))
        for lst in (self._op_t, self._op_code, self._op_oid, self._op_n, self._op_bb, self._op_lb,
                    self._op_kind, self._op_sess, self._op_cause):
            lst.clear()

    # --- residency --------------------------------------------------------------------------
    def _add(self, obj: Obj, tier: int) -> None:
        obj.tiers |= tier
        self.used_bytes[tier] += obj.nbytes
        if tier == HBM:
            self.hbm_lru[obj] = None
        else:
            self.policy.added(obj, tier)

    def _remove(self, obj: Obj, tier: int, cause: int = CAUSE_CAPACITY) -> None:
        obj.tiers &= ~tier
        self.used_bytes[tier] -= obj.nbytes
        if tier == HBM:
            del self.hbm_lru[obj]
        else:
            self.policy.removed(obj, tier)
            if tier == SSD:
                self._op(OP_EVICT, obj, cause)
                self.acc.ssd_evict(obj)
        if not obj.tiers:
            self._gone(obj)

    def _gone(self, obj: Obj) -> None:
        """`obj` left every tier: queue it for `_bury` at the end of the request (not now: an
        object waiting for its SSD write has no tier yet and must not leave the tree)."""
        self._ghosts.append(obj)

    def _bury(self) -> None:
        """Detach states and prune ghost leaves among the objects that left every tier."""
        for obj in self._ghosts:
            if not obj.tiers:
                self._bury_one(obj)
        self._ghosts.clear()

    def _bury_one(self, obj: Obj) -> None:
        if isinstance(obj, State):
            st = obj
            if st.seg.state is st:
                st.seg.state = None
            self._prune(st.seg)
        else:
            assert isinstance(obj, Segment)
            self._prune(obj)

    def _prune(self, seg: Segment | None) -> None:
        while (seg is not None and seg.parent is not None and not seg.tiers and not seg.children
               and seg.state is None):
            parent = seg.parent
            if parent.children.get(seg.keys[0]) is seg:
                del parent.children[seg.keys[0]]
            seg.parent = None
            seg = parent

    def _split(self, seg: Segment, m: int, evicting_tier: int) -> Segment:
        """Cut `seg` after m blocks; returns the new root-side head, `seg` becomes the tail."""
        parent = seg.parent
        assert parent is not None and 0 < m < seg.n
        keys = seg.keys
        head = Segment(seg.oid, seg.ns, keys[:m], seg.start, seg.block_tokens, seg.block_tokens,
                       seg.block_bytes, seg.block_bytes, parent)
        head.tiers = seg.tiers
        head.last_seq = seg.last_seq
        head.last_s = seg.last_s
        head.refs = seg.refs
        head.created_s = seg.created_s
        head.ssd_hit = seg.ssd_hit
        head.next_seq = seg.next_seq
        head.pdata = seg.pdata
        fut = seg._fut
        if fut is not None:
            head._fut = fut
            seg._fut = (fut[0], fut[1] + m)
            seg.next_seq = int(fut[0][0, fut[1] + m])
        head.children = {keys[m]: seg}
        parent.children[keys[0]] = head
        seg.keys = keys[m:]
        seg.oid += m
        seg.n -= m
        seg.start += m
        seg.nbytes -= head.nbytes
        seg.parent = head
        if head.tiers & HBM:
            self.hbm_lru[head] = None
            if evicting_tier == HBM:
                self.hbm_lru.move_to_end(head, last=False)
        self.policy.split(head, seg, evicting_tier)
        return head

    def _evict_one(self, tier: int, need: int) -> None:
        if tier == HBM:
            v: Obj = next(iter(self.hbm_lru))
        else:
            v = self.policy.victim(tier, need)
            if not v.tiers & tier:
                raise KvwearError(f"policy {self.spec.name!r} chose a victim not resident in tier {tier}")
        if (isinstance(v, Segment) and v.tiers == tier and v.nbytes > need
                and (tier == HBM or self.policy.split_victims)):
            seg = v
            if seg.n > 1:
                k = 1 if need <= seg.last_bytes else 1 + -(-(need - seg.last_bytes) // seg.block_bytes)
                if k < seg.n:
                    self._split(seg, seg.n - k, tier)
        self._leave(v, tier)
        if tier != HBM:  # HBM is the simulator's own LRU, not the policy's
            for o in self.policy.evict_with(v, tier):
                if o.tiers & tier:
                    self._leave(o, tier)

    def _leave(self, v: Obj, tier: int) -> None:
        """`v` leaves `tier`: a DRAM victim without an SSD copy is written or dropped first."""
        if tier == DRAM and not v.tiers & SSD and not (
                self.policy.admit_to_ssd(v) and self._ssd_write(v, CAUSE_DRAM_EVICT)):
            self.acc.dropped(v)
        self._remove(v, tier)

    def _ssd_write(self, obj: Obj, cause: int) -> bool:
        cap = self.capacity_bytes[SSD]
        if obj.nbytes > cap:
            return False
        used = self.used_bytes
        while used[SSD] + obj.nbytes > cap:
            self._evict_one(SSD, used[SSD] + obj.nbytes - cap)
        self._op(OP_WRITE, obj, cause)
        self.acc.ssd_write(obj)
        obj.ssd_hit = False
        self._add(obj, SSD)
        return True

    def _fit(self, tier: int) -> None:
        used = self.used_bytes
        cap = self.capacity_bytes[tier]
        while used[tier] > cap:
            self._evict_one(tier, used[tier] - cap)

    # --- one request --------------------------------------------------------------------------
    def _place_new(self, obj: Obj, pending_ssd: list[Obj]) -> None:
        mask = self.policy.place(obj)
        if mask & DRAM and obj.nbytes <= self.capacity_bytes[DRAM]:
            self._add(obj, DRAM)
        elif mask & DRAM and not mask & SSD:
            # cannot fit DRAM at all: it is a DRAM victim at once (written or dropped)
            if self.policy.admit_to_ssd(obj) and obj.nbytes <= self.capacity_bytes[SSD]:
                pending_ssd.append(obj)
            else:
                self.acc.dropped(obj)
        if mask & SSD:
            pending_ssd.append(obj)

    def request(self, seq: int, request_id: int, session: str | None, category: str,
                turn: int | None, t: float, input_tokens: int, block_tokens: int, ns: int,
                keys: list[int], hashed_tokens: int, fut: np.ndarray | None = None) -> None:
        """Simulate one request (keys: its hash ids, root first), step by step: start the clock
        and tell the policy; walk the prefix tree to the request's path; find where its state
        goes and where its hit ends; visit the path (hits, touches, new objects); write what must
        go to the SSD and bring the tiers within capacity; account the request."""
        req = self._begin(seq, request_id, session, category, turn, t, input_tokens, hashed_tokens)
        acc = self.acc
        before = acc.request_begin()
        # ids beyond the hashed tokens cover nothing (as in kvwear.workloads.blocks: hashed_tokens
        # decides; an AIPerf/Qwen row may list more ids than its input has blocks)
        nk = len(keys)
        covered = -(-hashed_tokens // block_tokens)
        if nk > covered:
            nk = max(covered, 0)
            keys = keys[:nk]
        if nk == 0:
            acc.request_end(req, before, 0, 0, 0, 0, -1, 0, 0, 0, 0)
            return
        path = self._walk(request_id, ns, keys, block_tokens, hashed_tokens)
        state_seg = self._state_segment(path, nk, block_tokens) if self.hybrid else None
        p, hit_state = self._hit_point(path, fut)
        hit_tokens, hit_chunks, tt, dram_bytes, ssd_bytes, state_tier, pending_ssd, used = self._visit(
            path, p, hit_state, state_seg, fut, block_tokens)
        self._settle(pending_ssd, used)
        k_chunks = block_tokens // self.chunk_tokens
        if hit_tokens > hashed_tokens:
            hit_tokens = hashed_tokens
        total_chunks = (nk - 1) * k_chunks + -(-(hashed_tokens - (nk - 1) * block_tokens) // self.chunk_tokens)
        # a cached full block hit by a request whose copy is partial counts no more than it covers
        if hit_chunks > total_chunks:
            hit_chunks = total_chunks
        acc.request_end(req, before, hit_tokens, tt[HBM], tt[DRAM], tt[SSD], state_tier,
                        dram_bytes, ssd_bytes, hit_chunks, total_chunks)

    def _begin(self, seq: int, request_id: int, session: str | None, category: str,
               turn: int | None, t: float, input_tokens: int, hashed_tokens: int) -> RequestInfo:
        """Advance the clock to the request's arrival, index its session, tell the policy."""
        if t < self.now_s - 1e-9:
            raise KvwearError(
                f"request {request_id}: arrival_s {t} is before the previous request's "
                f"{self.now_s}; the requests table must be sorted by arrival_s")
        self.now_s = t
        self.seq = seq
        si = self._sess_index.get(session)
        if si is None:
            si = self._sess_index[session] = len(self._sessions)
            self._sessions.append(session)
        self._cur_sess = si
        req = RequestInfo(seq, request_id, session, category, turn, t, input_tokens, hashed_tokens)
        self.req = req
        self.policy.begin_request(req)
        return req

    def _walk(self, request_id: int, ns: int, keys: list[int], B: int, hashed_tokens: int) -> list[Segment]:
        """The request's path of segments, root side first: the existing segments its keys
        follow (the last one split where the keys leave it), then one new segment for the keys
        the tree does not have."""
        nk = len(keys)
        root = self.roots.get(ns)
        if root is None:
            root = self.roots[ns] = Segment(-1, ns, [], 0, B, B, 0, 0, None)
        node = root
        path: list[Segment] = []
        i = 0
        while i < nk:
            child = node.children.get(keys[i])
            if child is None:
                break
            L = child.n
            rem = nk - i
            ck = child.keys
            if rem >= L and ck == keys[i:i + L]:
                m = L
            else:
                end = min(L, rem)
                m = 1
                while m < end and ck[m] == keys[i + m]:
                    m += 1
            if m < L:
                child = self._split(child, m, 0)
            path.append(child)
            i += m
            node = child
            if m < L:
                break
        if i < nk:
            last_tokens = hashed_tokens - (nk - 1) * B
            if not 0 < last_tokens <= B:
                raise KvwearError(
                    f"request {request_id}: hashed_tokens {hashed_tokens} does not fit {nk} blocks "
                    f"of {B} tokens")
            kv = self.config.kv_bytes_per_token
            new = Segment(self._next_oid, ns, keys[i:], i, B, last_tokens, B * kv,
                          -(-last_tokens // self.chunk_tokens) * self.chunk_tokens * kv, node)
            self._next_oid += nk - i
            new.created_s = self.now_s
            node.children[keys[i]] = new
            path.append(new)
        return path

    def _state_segment(self, path: list[Segment], nk: int, B: int) -> Segment | None:
        """The segment the request's state checkpoint ends: after its last *full* block (a
        partial last block's key never recurs on the next turn's path, so a checkpoint after it
        could never be hit), splitting the last segment there if needed; None when the request
        has no full block."""
        last = path[-1]
        if last.last_tokens >= B:
            return last
        pos = nk - 1
        if last.start < pos:
            head = self._split(last, pos - last.start, 0)
            path.insert(len(path) - 1, head)
        return path[-2] if len(path) >= 2 else None

    def _hit_point(self, path: list[Segment], fut: np.ndarray | None) -> tuple[int, State | None]:
        """(p, the state serving the hit): the hit covers path[:p], the longest resident prefix
        (hybrid models: ending at a resident state). Sets what the policy reads about the hit."""
        r = 0
        npath = len(path)  # a new segment is not resident, so it stops the scan
        while r < npath and path[r].tiers:
            r += 1
        p = r
        hybrid = self.hybrid
        if hybrid:
            while p > 0:
                st = path[p - 1].state
                if st is not None and st.tiers:
                    break
                p -= 1
        hit_state = path[p - 1].state if (hybrid and p > 0) else None
        # what serves this request, for policies that credit reuse only to the serving objects
        self.hit_state = hit_state
        self.hit_blocks = path[p - 1].start + path[p - 1].n if p else 0
        if fut is not None and hybrid:
            # every state on the path is referenced by this request, whether it serves it or is
            # passed over: its future-refs pointer moves here (only a touch sets next_seq)
            for seg in path:
                st = seg.state
                if st is not None:
                    st._fut = (fut, seg.start + seg.n - 1)
        return p, hit_state

    def _visit(self, path: list[Segment], p: int, hit_state: State | None, state_seg: Segment | None,
               fut: np.ndarray | None, B: int) -> _VisitResult:
        """Visit the request's objects: its state (placed new, or touched), then the path leaf →
        root — hits served from their fastest tier up to p, resident segments beyond it touched,
        missing ones (new, or ghosts coming back) placed where the policy says. Returns (hit
        tokens, hit chunks, hit tokens by tier bit, bytes served from DRAM and from SSD, the
        state's tier or −1, what goes to the SSD, what the request used): a plain tuple, as a
        record object a request made the split request() measurably slower than the unsplit one
        (docs/results/2026-12-03-simulator-speed.md)."""
        pending_ssd: list[Obj] = []
        used: list[Obj] = []
        state_tier = -1
        t = self.now_s
        seq = self.seq
        if state_seg is not None:
            spos = state_seg.start + state_seg.n - 1
            st = state_seg.state
            if st is None:
                st = State(self._next_oid, self.state_bytes, state_seg)
                self._next_oid += 1
                state_seg.state = st
                st.created_s = t
                st.last_seq = seq
                st.last_s = t
                st.refs = 1
                if fut is not None:
                    st.next_seq = int(fut[0, spos])
                    st._fut = (fut, spos)
                self._place_new(st, pending_ssd)
                used.append(st)
            elif st is not hit_state:
                self._touch(st, fut, spos)
                used.append(st)
        k_chunks = B // self.chunk_tokens
        S = self.chunk_tokens
        tok_tier = [0, 0, 0, 0, 0]  # index by tier bit: 1 hbm, 2 dram, 4 ssd (sparse)
        hit_tokens = hit_chunks = dram_bytes = ssd_bytes = 0
        for j in range(len(path) - 1, -1, -1):
            seg = path[j]
            if j == p - 1 and hit_state is not None:
                tier, nb = self._hit(hit_state, fut, seg.start + seg.n - 1)
                state_tier = tier
                if tier == DRAM:
                    dram_bytes += nb
                elif tier == SSD:
                    ssd_bytes += nb
                used.append(hit_state)
            if j < p:
                tier, nb = self._hit(seg, fut, seg.start)
                tokens = seg.tokens
                hit_tokens += tokens
                tok_tier[tier] += tokens
                hit_chunks += (seg.n - 1) * k_chunks + -(-seg.last_tokens // S)
                if tier == DRAM:
                    dram_bytes += nb
                elif tier == SSD:
                    ssd_bytes += nb
            elif seg.tiers:
                self._touch(seg, fut, seg.start)
            else:
                if seg.last_seq >= 0:
                    # a ghost coming back: new SSD identity
                    seg.oid = self._next_oid
                    self._next_oid += seg.n
                    seg.created_s = t
                    seg.refs = 0
                seg.last_seq = seq
                seg.last_s = t
                seg.refs += 1
                if fut is not None:
                    seg._fut = (fut, seg.start)
                    seg.next_seq = int(fut[0, seg.start])
                self._place_new(seg, pending_ssd)
            used.append(seg)
        return hit_tokens, hit_chunks, tok_tier, dram_bytes, ssd_bytes, state_tier, pending_ssd, used

    def _settle(self, pending_ssd: list[Obj], used: list[Obj]) -> None:
        """Write what this request sends to the SSD (placements, then the policy's promotions),
        give the GPU what it used (HBM, when configured), bring DRAM within capacity, and bury
        what left every tier."""
        for obj in pending_ssd:
            if not obj.tiers & SSD:
                self._ssd_write(obj, CAUSE_INSERT)
        if self._promote:
            for obj in self._promote:
                if obj.tiers and not obj.tiers & SSD:
                    self._ssd_write(obj, CAUSE_PROMOTE)
            self._promote.clear()
        if self.capacity_bytes[HBM] > 0:
            # the GPU holds everything this request used or computed (MRU order: root last)
            hl = self.hbm_lru
            for obj in used:
                if obj.tiers & HBM:
                    hl.move_to_end(obj)
                elif obj.nbytes <= self.capacity_bytes[HBM]:
                    self._add(obj, HBM)
            self._fit(HBM)
        self._fit(DRAM)
        # ghosts left on the path (placed nowhere) and evicted objects go away
        self._ghosts.extend(used)
        self._bury()

    def _touch(self, obj: Obj, fut: np.ndarray | None, pos: int) -> None:
        obj.last_seq = self.seq
        obj.last_s = self.now_s
        obj.refs += 1
        if fut is not None:
            obj.next_seq = int(fut[0, pos])
            obj._fut = (fut, pos)
        if obj.tiers & _POLICY_TIERS:  # an HBM-only object is not in any policy structure
            self.policy.touched(obj)

    def _hit(self, obj: Obj, fut: np.ndarray | None, pos: int) -> tuple[int, int]:
        """Serve `obj` from its fastest tier; stage SSD hits into DRAM. Returns (tier, bytes)."""
        t = obj.tiers
        if not t:
            raise KvwearError(f"internal error: hit on non-resident {obj!r}")
        if t & HBM:
            tier = HBM
        elif t & DRAM:
            tier = DRAM
        else:
            tier = SSD
            self._op(OP_READ, obj, CAUSE_HIT)
            self.acc.ssd_read(obj)
            if obj.nbytes <= self.capacity_bytes[DRAM]:
                self._add(obj, DRAM)
        self._touch(obj, fut, pos)
        return tier, obj.nbytes

    # --- batches ------------------------------------------------------------------------------
    def set_future(self, table: pa.Table) -> None:
        """Pre-pass for oracle policies: next request seq using each (ns, hash id) again."""
        self._future = np.stack(next_use(table, refs=True))
        self._fut_base = 0
        self.policy.prepare(table)

    def run_batch(self, batch: pa.RecordBatch | pa.Table, first_seq: int) -> None:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        if batch.num_rows == 0:
            return
        S = self.chunk_tokens
        btok = np.asarray(batch.column("block_tokens").to_numpy(), dtype=np.int64)
        if (btok < S).any():
            from kvwear.workloads.blocks import convert_block_size

            batch = convert_block_size(batch, S)
            btok = np.asarray(batch.column("block_tokens").to_numpy(), dtype=np.int64)
        bad = np.flatnonzero(btok % S)
        if len(bad):
            raise KvwearError(
                f"request {batch.column('request_id')[int(bad[0])].as_py()}: block_tokens "
                f"{btok[bad[0]]} is not a multiple of the simulator chunk ({S} tokens)")
        offs_np, values_np = list_parts(batch.column("hash_ids"))
        values = values_np.tolist()
        offs = offs_np.tolist()
        rid = batch.column("request_id").to_pylist()
        sess = batch.column("session_id").to_pylist()
        cat = batch.column("category").to_pylist()
        turn = batch.column("turn").to_pylist()
        arr_s = batch.column("arrival_s").to_pylist()
        inp = batch.column("input_tokens").to_pylist()
        ns = batch.column("hash_ns").to_pylist()
        hashed = batch.column("hashed_tokens").to_pylist()
        bt = btok.tolist()
        fut_all = self._future
        base = self._fut_base
        req = self.request
        # input streaming: a batch may carry its next-use and future-refs columns
        # (kvwear.workloads.nextuse, aligned with hash_ids); each request then gets its own copy, so a
        # resident segment keeps only its request's array alive, not the batch's
        col = (np.stack((list_parts(batch.column("next_use"))[1], list_parts(batch.column("future_refs"))[1]))
               if "next_use" in batch.column_names else None)
        for r in range(batch.num_rows):
            o0 = offs[r]
            o1 = offs[r + 1]
            fut = (col[:, o0:o1].copy() if col is not None
                   else None if fut_all is None else fut_all[:, base + o0: base + o1])
            req(first_seq + r, rid[r], sess[r], cat[r], turn[r], arr_s[r], inp[r], bt[r], ns[r],
                values[o0:o1], hashed[r], fut)
        if col is None:
            self._fut_base = base + offs[-1]
        self._flush_ops()

    def finish(self) -> SimResult:
        self._flush_ops()
        ops = (pa.concat_tables(self._ops_tables) if self._ops_tables else SSD_OPS.empty())
        return SimResult(
            label=self.spec.label, config=self.config, ssd_ops=ops,
            requests=self.acc.requests_table(), timeline=self.acc.timeline_table(),
            summary=self.acc.summary(self.spec.label, self.used_bytes),
        )


@overload
def next_use(table: pa.Table, refs: Literal[False] = False) -> np.ndarray: ...


@overload
def next_use(table: pa.Table, refs: Literal[True]) -> tuple[np.ndarray, np.ndarray]: ...


def next_use(table: pa.Table, refs: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """For every flat hash id of `table` (row order), the row index of the next row holding the
    same (hash_ns, hash_id), or `tree.NEVER`; with `refs`, also how many later accesses hold it
    (ids of later rows, or later in the same row). Vectorized (one sort)."""
    offs, vals = list_parts(table.column("hash_ids"))
    lengths = np.diff(offs)
    rows = np.repeat(np.arange(table.num_rows, dtype=np.int64), lengths)
    ns = np.repeat(np.asarray(table.column("hash_ns").to_numpy(), dtype=np.int64), lengths)
    order = np.lexsort((rows, vals, ns))
    out = np.full(len(vals), NEVER, dtype=np.int64)
    same = np.zeros(max(len(order) - 1, 0), dtype=bool)
    if len(order) > 1:
        a, b = order[:-1], order[1:]
        same = (vals[a] == vals[b]) & (ns[a] == ns[b])
        out[a[same]] = rows[b[same]]
    if not refs:
        return out
    # the distance, in sorted order, to the key's last access
    last_pos = np.flatnonzero(np.append(~same, True)) if len(order) else np.zeros(0, dtype=np.int64)
    count = np.zeros(len(vals), dtype=np.int64)
    count[order] = np.repeat(last_pos, np.diff(last_pos, prepend=-1)) - np.arange(len(order))
    return out, count


#: Input streaming: a batch is cut so that it holds at most this many hash ids, because
#: `run_batch` turns a batch's ids into Python ints (~36 B each) — a row-count bound alone lets
#: one batch of long-context rows hold a whole trace (65,536 Weka rows are ~120 M ids).
BATCH_HASH_IDS = 1 << 20


def _batches(requests: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch],
             max_ids: int = BATCH_HASH_IDS) -> Iterator[pa.RecordBatch]:
    if isinstance(requests, pa.Table):
        requests = requests.to_batches(max_chunksize=65_536)
    elif isinstance(requests, pa.RecordBatch):
        requests = [requests]
    for batch in requests:
        lengths = pc.list_value_length(batch.column("hash_ids")).fill_null(0)
        cum = np.cumsum(np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64))
        if not len(cum) or cum[-1] <= max_ids:
            yield batch
            continue
        start = 0
        while start < batch.num_rows:
            base = int(cum[start - 1]) if start else 0
            end = max(int(np.searchsorted(cum, base + max_ids, side="right")), start + 1)
            yield batch.slice(start, end - start)
            start = end


def simulate(requests: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], config: SimConfig,
             policy: str | PolicySpec,
             progress: Callable[[int], None] | None = None,
             ops_sink: Callable[[pa.Table], None] | None = None,
             setup: Callable[[Policy[Any]], None] | None = None,
             requests_sink: Callable[[pa.Table], None] | None = None) -> SimResult:
    """Run `requests` (a REQUESTS table or a stream of its record batches, sorted by arrival)
    through the tiered cache under `policy` ('lru', 'lru-k:k=3', or a PolicySpec).

    `progress(n)` is called after each batch with the number of requests it held. With
    `ops_sink`, each batch's ssd_ops rows are handed to it (in time order) instead of being kept,
    and `SimResult.ssd_ops` is empty; likewise `requests_sink` takes the per-request table in
    chunks (`kvwear.policies.metrics.REQUEST_CHUNK` rows) and `SimResult.requests` is empty.
    `setup(policy)` is called once, before the first request (an oracle's later pass hands its
    policy what an earlier pass learned: `kvwear.policies.belady`).
    """
    sim = Simulator(config, policy, ops_sink, requests_sink)
    if setup is not None:
        setup(sim.policy)
    if sim.policy.needs_future and not isinstance(requests, pa.Table):
        stream = _batches(requests)
        head = next(stream, None)
        if head is not None and "next_use" in head.schema.names and not sim.policy.needs_table(sim.policy.p):
            requests = chain([head], stream)  # batches carrying their next-use column stream
        else:
            batches = ([head] if head is not None else []) + list(stream)
            requests = pa.Table.from_batches(batches) if batches else pa.table({})
            if "next_use" in requests.column_names:   # the in-memory pre-pass computes it again
                requests = requests.drop_columns(["next_use"])
    if sim.policy.needs_future and isinstance(requests, pa.Table) and requests.num_rows:
        requests = _convert_if_needed(requests, config.chunk_tokens)
        sim.set_future(requests)
    seq = 0
    for batch in _batches(requests):
        sim.run_batch(batch, seq)
        seq += batch.num_rows
        if progress is not None:
            progress(batch.num_rows)
    return sim.finish()


def _convert_if_needed(table: pa.Table, chunk_tokens: int) -> pa.Table:
    btok = np.asarray(table.column("block_tokens").to_numpy(), dtype=np.int64)
    if (btok < chunk_tokens).any():
        from kvwear.workloads.blocks import convert_block_size

        return convert_block_size(table, chunk_tokens)
    return table


def chunks_of(hashed_tokens: np.ndarray, chunk_tokens: int) -> np.ndarray:
    """Chunks of S tokens covering each request's hashed prefix (equivalent chunk accesses)."""
    return -(-np.asarray(hashed_tokens, dtype=np.int64) // chunk_tokens)


__all__ = ["SimConfig", "SimResult", "Simulator", "chunks_of", "next_use", "simulate"]
