"""Trace characterization streamed over record batches, with memory bounded by a budget.

The analyses and their definitions are `kvwear.workloads.characterize`'s (its module docstring); this
module computes the same numbers from requests arriving in record batches (sorted by arrival),
without the flattened per-access arrays of `kvwear.workloads.characterize.flatten` (~134 B per block
access: 50 GB for a 380 M-access trace), in at most `memory_budget_bytes` (default 1 GiB) of
per-block state:

- **Per distinct block** (one numba pass over each batch's accesses): an open-addressing hash
  table from `(hash_ns, hash_id)` to a dense code numbered in order of first appearance (as
  `flatten`'s codes), and per code its key, first and last access position, access count and last
  accessing request: 36 bytes of arrays per block of capacity (grown by 1.5×) plus 8–16 of hash
  slots (at most half full), ~44–70 B per distinct block (`BLOCK_STATE_BYTES` budgets 64).
- **Per request** (bounded by requests, thousands of times fewer than accesses): hits, hit
  tokens, the source request and position of the deepest hit (request reuse times, reuse-point
  states), and the block reuse times as (request, source request, count) triples — a request's
  hits come from a few source requests, so the triples are few, and `characterize.weighted_stats`
  turns them into the same mean and quantiles as one value per access.
- **The partition rule.** Everything per block is exactly decomposable by a hash partition of the
  block key (a hash independent of the table's slot hash, `_part_hash`): pass p of P keeps the
  state of the blocks whose hash is p mod P only, and the passes combine exactly — per request,
  hits and hit tokens add, the deepest hit is the one at the largest position (its source request
  and block come with it), the reuse-time triples and lifespan rows are unions, the access-count
  histograms (reuse skew) add, and the live-block series adds (each pass's first/last-access
  events are spilled sorted to a temporary file and merged position by position in the sweep).
  The first pass tries P = 1 beside the LRU pass; when the per-block state would exceed the budget
  left by the LRU state it is dropped, and P = ⌈distinct blocks × `BLOCK_STATE_BYTES` / budget⌉
  further passes follow (distinct blocks known from the LRU pass: exactly, or as its SHARDS
  sample / rate, below). Only the lifespans table's row
  order shows P: by partition, then first access (P = 1: by first access, as `analyze`).
- **LRU stack distances** are not decomposable: a Fenwick tree over stack positions holds one mark
  per (sampled) block — when positions run out the marks are renumbered 0…D−1 in order (distances
  only count marks between two positions, so renumbering keeps every distance), so the tree has
  about 2·D slots instead of one per access; ~44–56 B per block (`LRU_STATE_BYTES`) with half the
  budget. While the distinct blocks fit, this is the exact pass (`lru_sampling_rate` 1). Above, it
  is fixed-size SHARDS (Waldspurger et al., FAST'15): a block is sampled iff its 64-bit key hash
  h ≤ T; when the sample would exceed s_max blocks, T is lowered to keep the 7/8·s_max smallest
  hashes (the others leave the tree), so the rate R = (T+1)/2⁶⁴ falls as the trace grows; a
  sampled re-access at sampled distance d counts 1/R at distance d/R (the paper's rescaling of the
  histogram when R falls gives the same weights), binned exactly below 4,096 blocks and in
  log bins of 2^(1/4096) above; the hit ratio is the sample's (hits / sampled accesses, both
  weighted). The rate reached is `lru_sampling_rate` in summary.json (v2). Measured against the
  exact pass on the shared Weka traces (638,438 accesses, 42,852 distinct blocks; tested in
  tests/workloads/test_characterize_stream.py), the hit ratio's absolute error over the curve's
  capacities (mean / max): s_max 1,024 (R = 0.021) 0.008 / 0.106; s_max 4,096 (R = 0.090)
  0.006 / 0.100; s_max 16,384 (R = 0.344) 0.002 / 0.041 — the max sits at the curve's steepest
  rise (1.5–4 k blocks, where one long shared prefix is reused); the distinct-block estimate was
  within 0.6 %. The default budget samples ~9.6 M blocks.
- **Live blocks over time** (capacity): a block is live from its first access to its last, so the
  live count at position i is (#first accesses ≤ i) − (#last accesses ≤ i) over reused blocks;
  the events are swept in chunks of whole requests (one chunk's positions in memory at a time),
  reduced to one row per request as in `characterize`.

The per-distinct-block tables (`lifespans`) are written in chunks straight to Parquet. Results are
bit-identical to `kvwear.workloads.characterize.analyze` with the exact LRU pass, for any P (a test
compares every table and the JSON). Not bounded by the budget: the per-request columns and the
lifespans of reused blocks (8 B each, for their median and p90).
This module must not load traces, draw, or import policies, harness, emulator or reports.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numba
import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from kvwear import jitcache
from kvwear.errors import KvwearError
from kvwear.tables import TableWriter, atomic_write, write_table
from kvwear.units import check_budget
from kvwear.workloads.characterize import (
    LIFESPANS,
    TABLES,
    Characterization,
    ProfileLike,
    _quantile_table,
    assemble,
    category_table,
    lru_frame,
    lru_table,
    request_reuse_table,
)
from kvwear.workloads.schema import REQUESTS, list_parts

jitcache.install()   # numba's cache saved under a lock: before any cached kernel is defined

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U64 = npt.NDArray[np.uint64]

#: Positions of the live series (and distinct blocks of the lifespans table) handled at once.
SWEEP_CHUNK = 1 << 20

#: Distinct blocks room is first made for (grown by 1.5x as needed).
INITIAL_BLOCKS = 1 << 16

#: Default bound of the per-block state (the per-block pass and the LRU pass).
DEFAULT_MEMORY_BUDGET_BYTES = 1 << 30
#: Budgeted bytes per distinct block of the per-block pass (module docstring), and per sampled
#: block of the LRU pass (with the transient hashes of a threshold lowering).
BLOCK_STATE_BYTES = 64
LRU_STATE_BYTES = 56

#: Exact histogram bins below this scaled distance, then _BIN_STEPS log bins per doubling.
_BIN_EXACT = 4096
_BIN_STEPS = 4096
_BINS = _BIN_EXACT + 54 * _BIN_STEPS
_TWO64 = 18446744073709551616.0

_EMPTY = np.int32(-1)

Batches = Iterable[pa.RecordBatch] | Callable[[], Iterable[pa.RecordBatch]]


@numba.njit(cache=True, nogil=True)
def _slot(slots: I32, key_ns: I32, key_id: I64, ns: np.int32, hid: np.int64) -> np.int64:  # pragma: no cover
    """The slot holding (ns, hid), or the empty slot where it belongs (linear probing)."""
    mask = np.int64(slots.size - 1)
    h = (np.uint64(hid) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(ns) * np.uint64(0xC2B2AE3D27D4EB4F))
    i = np.int64((h ^ (h >> np.uint64(29))) & np.uint64(mask))
    while True:
        c = slots[i]
        if c < 0 or (key_id[c] == hid and key_ns[c] == ns):
            return i
        i = (i + 1) & mask


@numba.njit(cache=True, nogil=True)
def _part_hash(ns: np.int32, hid: np.int64) -> np.uint64:  # pragma: no cover
    """A 64-bit hash of the key independent of `_slot`'s (splitmix64's finalizer, as
    `kvwear.workloads.blocks.splitmix64` but scalar, for the kernels), for the partitions and the SHARDS
    sample: a partition's keys must not share slot-hash bits (long probe runs)."""
    z = np.uint64(hid) ^ (np.uint64(np.int64(ns) + 1) * np.uint64(0xD6E8FEB86659FD93))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, nogil=True)
def _rehash(slots: I32, key_ns: I32, key_id: I64, n_keys: int) -> None:  # pragma: no cover
    for c in range(n_keys):
        slots[_slot(slots, key_ns, key_id, key_ns[c], key_id[c])] = c


@numba.njit(cache=True, nogil=True)
def _fenwick_add(tree: I32, i: int, v: int) -> None:  # pragma: no cover
    j = i + 1
    while j < tree.size:
        tree[j] += v
        j += j & -j


@numba.njit(cache=True, nogil=True)
def _fenwick_prefix(tree: I32, i: int) -> int:  # pragma: no cover
    """Marks at positions 0 … i−1."""
    s = 0
    j = i
    while j > 0:
        s += tree[j]
        j -= j & -j
    return s


@numba.njit(cache=True, nogil=True)
def _compact(lru_last: I32, n_keys: int, clock: int, tree: I32) -> int:  # pragma: no cover
    """Renumber the marks (each block's latest stack position) to 0 … n_keys−1 in order and
    rebuild the tree with exactly those marks; returns the new clock (n_keys)."""
    rank = np.zeros(clock, dtype=np.int32)
    for c in range(n_keys):
        rank[lru_last[c]] = 1
    r = 0
    for p in range(clock):
        if rank[p]:
            rank[p] = r
            r += 1
    for c in range(n_keys):
        lru_last[c] = rank[lru_last[c]]
    for j in range(1, tree.size):  # tree[j] covers positions (j − lowbit(j), j], 1-based
        lo = j - (j & -j)
        tree[j] = max(0, min(j, n_keys) - lo)
    return n_keys


@numba.njit(cache=True, nogil=True)
def _bin(x: float) -> int:  # pragma: no cover
    """Histogram bin of a scaled stack distance x ≥ 0 (exact below _BIN_EXACT, then log)."""
    if x < _BIN_EXACT:
        return int(x)
    return min(_BIN_EXACT + int((math.log2(x) - 12.0) * _BIN_STEPS), _BINS - 1)


def _bin_lower_edges() -> F64:
    b = np.arange(_BINS, dtype=np.float64)
    return np.where(b < _BIN_EXACT, b, 2.0 ** (12.0 + (b - _BIN_EXACT) / _BIN_STEPS))


@numba.njit(cache=True, nogil=True)
def _feed_blocks(  # pragma: no cover - compiled; tested against characterize.analyze
    offsets: I64, ids: I64, ns_req: I32, bt_req: I64, hashed_req: I64, g0: int, pos0: int,
    parts: int, part: int,
    slots: I32, key_ns: I32, key_id: I64, first_pos: I64, last_pos: I64, count: I32, last_req: I32,
    n_keys: int, hits: I64, hit_tokens: I64, src_req: I64, deep_pos: I64, deep_first: I64,
    tri_req: I64, tri_src: I64, tri_cnt: I64, srcbuf: I64,
) -> tuple[int, int]:
    """Feed one batch of requests (global request index g0 + r, first access position pos0) to
    the state of partition `part` of `parts` (accesses of other partitions are skipped).

    Returns (n_keys, triples written)."""
    n_tri = 0
    for r in range(offsets.size - 1):
        g = g0 + r
        s = offsets[r]
        e = offsets[r + 1]
        n = e - s
        bt = bt_req[r]
        last_w = min(max(hashed_req[r] - (n - 1) * bt, 0), bt)
        nh = 0
        ht = 0
        src_req[r] = -1
        deep_pos[r] = -1
        deep_first[r] = -1
        ns = ns_req[r]
        for j in range(s, e):
            if parts > 1 and np.int64((_part_hash(ns, ids[j]) >> np.uint64(1)) % np.uint64(parts)) != part:
                continue
            pos = pos0 + j
            i = _slot(slots, key_ns, key_id, ns, ids[j])
            c = slots[i]
            if c < 0:
                c = n_keys
                n_keys += 1
                slots[i] = c
                key_ns[c] = ns
                key_id[c] = ids[j]
                first_pos[c] = pos
                count[c] = 1
            else:
                count[c] += 1
                src = last_req[c]
                srcbuf[nh] = src
                nh += 1
                ht += last_w if j == e - 1 else bt
                src_req[r] = src
                deep_pos[r] = pos
                deep_first[r] = first_pos[c]
            last_pos[c] = pos
            last_req[c] = g
        hits[r] = nh
        hit_tokens[r] = ht
        if nh:
            buf = np.sort(srcbuf[:nh])
            k = 0
            while k < nh:
                m = k
                while m < nh and buf[m] == buf[k]:
                    m += 1
                tri_req[n_tri] = g
                tri_src[n_tri] = buf[k]
                tri_cnt[n_tri] = m - k
                n_tri += 1
                k = m
    return n_keys, n_tri


@numba.njit(cache=True, nogil=True)
def _lower(keep: int, n_keys: int, slots: I32, key_ns: I32, key_id: I64, lru_last: I32, tree: I32,
           thr: U64) -> int:  # pragma: no cover
    """SHARDS: lower the threshold to keep the `keep` smallest key hashes; the other blocks leave
    the sample (their marks leave the tree). Returns the blocks kept."""
    hs = np.empty(n_keys, dtype=np.uint64)
    for c in range(n_keys):
        hs[c] = _part_hash(key_ns[c], key_id[c])
    t = np.sort(hs)[keep - 1]
    w = 0
    for c in range(n_keys):
        if hs[c] <= t:
            key_ns[w] = key_ns[c]
            key_id[w] = key_id[c]
            lru_last[w] = lru_last[c]
            w += 1
        else:
            _fenwick_add(tree, lru_last[c], -1)
    slots[:] = -1
    _rehash(slots, key_ns, key_id, w)
    thr[0] = t
    return w


@numba.njit(cache=True, nogil=True)
def _feed_lru(  # pragma: no cover - compiled; tested against characterize.analyze
    offsets: I64, ids: I64, ns_req: I32, slots: I32, key_ns: I32, key_id: I64, lru_last: I32,
    tree: I32, hist: I64, binned: F64, st: F64, thr: U64, n_keys: int, clock: int, cap: int,
) -> tuple[int, int]:
    """Feed one batch to the LRU stack (module docstring): exact while `thr` is 2⁶⁴−1 and the
    blocks fit `cap` (distances counted in `hist`), SHARDS after the first lowering (weighted
    distances in `binned`). `st` = [weighted accesses, largest scaled distance, exact: largest
    distance + 1, sampled blocks ever lowered away]. Returns (n_keys, clock)."""
    exact = st[3] == 0.0  # no block lowered away yet (thr is still 2⁶⁴−1)
    inv = 1.0 if exact else _TWO64 / (float(thr[0]) + 1.0)
    for r in range(offsets.size - 1):
        ns = ns_req[r]
        # the request's blocks are touched tail first (characterize.lru_curve)
        for j in range(offsets[r + 1] - 1, offsets[r] - 1, -1):
            hid = ids[j]
            if not exact and _part_hash(ns, hid) > thr[0]:
                continue
            i = _slot(slots, key_ns, key_id, ns, hid)
            c = slots[i]
            if c < 0:
                if n_keys == cap:  # the sample is full: lower the threshold
                    if exact:  # the exact histogram so far becomes the first weighted bins
                        for d in range(int(st[2])):
                            if hist[d]:
                                binned[_bin(float(d))] += float(hist[d])
                        st[1] = st[2] - 1.0
                        exact = False
                    kept = _lower((cap * 7) // 8, n_keys, slots, key_ns, key_id, lru_last, tree, thr)
                    st[3] += n_keys - kept
                    n_keys = kept
                    inv = _TWO64 / (float(thr[0]) + 1.0)
                    if _part_hash(ns, hid) > thr[0]:
                        continue
                    i = _slot(slots, key_ns, key_id, ns, hid)
                c = n_keys
                n_keys += 1
                slots[i] = c
                key_ns[c] = ns
                key_id[c] = hid
                lru_last[c] = -1
            st[0] += inv
            p = lru_last[c]
            if p >= 0:
                d = _fenwick_prefix(tree, clock) - _fenwick_prefix(tree, p + 1)
                if exact:
                    hist[d] += 1
                    if d + 1 > st[2]:
                        st[2] = d + 1
                else:
                    x = d * inv
                    binned[_bin(x)] += inv
                    if x > st[1]:
                        st[1] = x
                _fenwick_add(tree, p, -1)
            _fenwick_add(tree, clock, 1)
            lru_last[c] = clock
            clock += 1
    return n_keys, clock


def _write_text(path: Path, text: str) -> Path:
    with atomic_write(path) as tmp:
        tmp.write_text(text)
    return path


def _grown(a: np.ndarray, n: int, fill: int = 0) -> np.ndarray:
    out = np.full(n, fill, dtype=a.dtype)
    out[: a.size] = a
    return out


def _slots_for(n: int, size: int) -> int:
    """Hash slots for n keys: at most half full (short probe runs), a power of two."""
    while size < 2 * n:
        size *= 2
    return size


class _Keys:
    """A hash table of block keys numbered 0 … n−1 (`_slot`), room made for `cap` keys."""

    def __init__(self, cap: int) -> None:
        self.n = 0
        self.slots = np.full(_slots_for(cap, 2), _EMPTY, dtype=np.int32)
        self.key_ns = np.zeros(cap, dtype=np.int32)
        self.key_id = np.zeros(cap, dtype=np.int64)

    def grow_slots(self, keys: int) -> None:
        """Slots for `keys` keys (at most half full), rehashed if they had to grow."""
        size = _slots_for(keys, self.slots.size)
        if size > self.slots.size:
            self.slots = np.full(size, _EMPTY, dtype=np.int32)
            _rehash(self.slots, self.key_ns, self.key_id, self.n)


class _Blocks(_Keys):
    """The per-distinct-block state of one partition (module docstring), grown as blocks appear."""

    NAMES = ("key_ns", "key_id", "first_pos", "last_pos", "count", "last_req")

    def __init__(self, parts: int, part: int, cap: int) -> None:
        self.parts, self.part = parts, part
        cap = max(cap, 1)
        super().__init__(cap)
        self.first_pos = np.zeros(cap, dtype=np.int64)
        self.last_pos = np.zeros(cap, dtype=np.int64)
        self.count = np.zeros(cap, dtype=np.int32)
        self.last_req = np.zeros(cap, dtype=np.int32)

    def free(self) -> None:
        """Drop the state (written out)."""
        for name in ("slots", *self.NAMES):
            setattr(self, name, np.zeros(0, dtype=getattr(self, name).dtype))

    def nbytes_for(self, accesses: int) -> int:
        """Bytes of the state after `reserve(accesses)`."""
        cap = self.key_id.size
        need = self.n + accesses
        if need > cap:
            cap = max(need, cap + cap // 2)
        return 36 * cap + 4 * _slots_for(need, self.slots.size)

    def reserve(self, accesses: int) -> None:
        """Room for `accesses` more accesses, all of them possibly new blocks."""
        need = self.n + accesses
        cap = self.key_id.size
        if need > cap:
            cap = max(need, cap + cap // 2)
            for name in self.NAMES:
                setattr(self, name, _grown(getattr(self, name), cap))
        self.grow_slots(need)


class _Lru(_Keys):
    """The LRU stack: exact, then fixed-size SHARDS past `s_max` sampled blocks (module docstring)."""

    def __init__(self, s_max: int) -> None:
        self.s_max = s_max
        cap = min(INITIAL_BLOCKS, s_max)
        super().__init__(cap)
        self.clock = 0
        self.lru_last = np.zeros(cap, dtype=np.int32)
        self.hist = np.zeros(cap, dtype=np.int64)
        self.tree = np.zeros(2 * cap + 1, dtype=np.int32)
        self.binned = np.zeros(0, dtype=np.float64)
        self.st = np.zeros(4, dtype=np.float64)
        self.thr = np.full(1, np.iinfo(np.uint64).max, dtype=np.uint64)

    @property
    def exact(self) -> bool:
        return bool(self.thr[0] == np.iinfo(np.uint64).max)

    @property
    def rate(self) -> float:
        return 1.0 if self.exact else (float(self.thr[0]) + 1.0) / _TWO64

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.slots, self.key_ns, self.key_id, self.lru_last, self.hist,
                                      self.tree, self.binned))

    def distinct_blocks(self) -> int:
        """Distinct blocks seen: exact while exact, else the sample over the rate."""
        return self.n if self.exact else round(self.n / self.rate)

    def reserve(self, accesses: int) -> None:
        need = min(self.n + accesses, self.s_max)
        cap = self.key_id.size
        if need > cap:
            cap = min(max(need, cap + cap // 2), self.s_max)
            for name in ("key_ns", "key_id", "lru_last") + (("hist",) if self.exact else ()):
                setattr(self, name, _grown(getattr(self, name), cap))
        if need == self.s_max and not self.binned.size:  # a lowering may come in this batch
            self.binned = np.zeros(_BINS, dtype=np.float64)
        self.grow_slots(cap)
        if self.clock + accesses > self.tree.size - 1:  # stack positions run out: renumber
            size = max(self.tree.size - 1, 2 * (self.n + accesses))
            if size > self.tree.size - 1:
                self.tree = np.zeros(size + 1, dtype=np.int32)
            self.clock = _compact(self.lru_last, self.n, self.clock, self.tree)

    def feed(self, offsets: I64, ids: I64, ns: I32) -> None:
        self.reserve(int(ids.size))
        self.n, self.clock = _feed_lru(offsets, ids, ns, self.slots, self.key_ns, self.key_id, self.lru_last,
                                       self.tree, self.hist, self.binned, self.st, self.thr, self.n, self.clock,
                                       int(self.key_id.size))
        if not self.exact and self.hist.size:
            self.hist = np.zeros(0, dtype=np.int64)

    def table(self, n: int, chunk_bytes: int) -> tuple[pd.DataFrame, int]:
        """The LRU curve over `n` accesses (characterize.lru_table; weighted bins for SHARDS)."""
        if self.exact:
            return lru_table(self.hist[: int(self.st[2])], n, chunk_bytes)
        cw = np.cumsum(self.binned)
        lo = _bin_lower_edges()
        # the sample's hit ratio (hits over sampled accesses, both weighted) times n
        scale = n / self.st[0]

        def hits_below(caps: I64) -> F64:
            i = np.searchsorted(lo, caps, side="left") - 1
            return np.where(i >= 0, cw[np.maximum(i, 0)], 0.0) * scale

        return lru_frame(math.floor(self.st[1]) + 1, hits_below, n, chunk_bytes)


@dataclass
class _Requests:
    """Per-request columns gathered batch by batch (bounded by requests, not accesses)."""

    request_id: list[I64] = field(default_factory=list)
    arrival_s: list[F64] = field(default_factory=list)
    session: list[npt.NDArray[np.object_]] = field(default_factory=list)
    category: list[I64] = field(default_factory=list)
    block_tokens: list[I64] = field(default_factory=list)
    n_blocks: list[I64] = field(default_factory=list)
    input_tokens: list[I64] = field(default_factory=list)
    tokens: list[I64] = field(default_factory=list)

    def cat(self, name: str) -> np.ndarray:
        parts = getattr(self, name)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


@dataclass
class _Hits:
    """Per request, what the per-block passes find: hits, hit tokens, the deepest hit (position,
    the source request, the first access of its block) and the block reuse-time triples."""

    hits: I64
    hit_tokens: I64
    src_req: I64
    deep_pos: I64
    deep_first: I64
    tri: tuple[I64, I64, I64]

    def merge(self, o: _Hits) -> None:
        """Add another partition's (module docstring: the partition rule)."""
        self.hits += o.hits
        self.hit_tokens += o.hit_tokens
        deeper = o.deep_pos > self.deep_pos
        for name in ("src_req", "deep_pos", "deep_first"):
            getattr(self, name)[deeper] = getattr(o, name)[deeper]
        self.tri = tuple(np.concatenate([a, b]) for a, b in zip(self.tri, o.tri, strict=True))  # type: ignore[assignment]


class _HitsBuilder:
    """One partition's `_Hits`, batch by batch."""

    def __init__(self) -> None:
        self.parts: list[list[I64]] = [[] for _ in range(8)]

    def add(self, arrays: Iterable[I64]) -> None:
        for lst, a in zip(self.parts, arrays, strict=True):
            lst.append(a)

    def build(self) -> _Hits:
        c = [np.concatenate(p) if p else np.zeros(0, np.int64) for p in self.parts]
        return _Hits(c[0], c[1], c[2], c[3], c[4], (c[5], c[6], c[7]))


@dataclass(frozen=True)
class _Batch:
    offsets: I64
    ids: I64
    ns: I32
    bt: I64
    hashed: I64


def _arrays(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, _Batch]:
    batch = REQUESTS.conform(pa.Table.from_batches([batch])).combine_chunks().to_batches()[0]
    offsets, ids = list_parts(batch.column("hash_ids"))
    bt = np.asarray(batch.column("block_tokens").to_numpy(), dtype=np.int64)
    if (bt <= 0).any():
        raise KvwearError("requests table has a block_tokens ≤ 0")
    return batch, _Batch(offsets, ids, np.asarray(batch.column("hash_ns").to_numpy(), dtype=np.int32), bt,
                         np.asarray(batch.column("hashed_tokens").to_numpy(), dtype=np.int64))


def _feed(blocks: _Blocks, b: _Batch, g: int, pos: int, out: _HitsBuilder) -> None:
    n_req, n_acc = int(b.offsets.size - 1), int(b.ids.size)
    blocks.reserve(n_acc)
    res = [np.zeros(n_req, dtype=np.int64) for _ in range(5)]
    tri = [np.zeros(n_acc, dtype=np.int64) for _ in range(3)]
    blocks.n, n_tri = _feed_blocks(
        b.offsets, b.ids, b.ns, b.bt, b.hashed, g, pos, blocks.parts, blocks.part,
        blocks.slots, blocks.key_ns, blocks.key_id, blocks.first_pos, blocks.last_pos, blocks.count,
        blocks.last_req, blocks.n, res[0], res[1], res[2], res[3], res[4], tri[0], tri[1], tri[2],
        np.zeros(n_acc, dtype=np.int64))
    out.add([*res, *(t[:n_tri].copy() for t in tri)])


def _category_codes(col: pa.ChunkedArray | pa.Array, names: dict[str, int]) -> I64:
    """Global category codes, numbered in order of first appearance over the whole stream."""
    codes, uniques = pd.factorize(np.asarray(col.to_numpy(zero_copy_only=False), dtype=object))
    glob = np.array([names.setdefault(str(u), len(names)) for u in uniques], dtype=np.int64)
    return glob[codes] if codes.size else np.zeros(0, dtype=np.int64)


def _req_of(starts: I64, pos: I64) -> I64:
    """The request holding each access position (a request with no blocks holds none)."""
    return np.searchsorted(starts, pos, side="right").astype(np.int64) - 1


class _Events:
    """Ascending event positions (with weights, or None: all weigh the same), read in order from
    memory or from a spill file of (int64 positions, float64 weights) records."""

    READ = 1 << 20

    def __init__(self, pos: I64, w: F64 | None, spill: Path | None = None) -> None:
        self.w_none = w is None
        self._file: BinaryIO | None = None
        if spill is not None:
            with spill.open("wb") as f:
                for lo in range(0, pos.size, self.READ):  # records a slice at a time: no full copy
                    hi = min(pos.size, lo + self.READ)
                    rec = np.empty(hi - lo, dtype=[("p", np.int64), ("w", np.float64)])
                    rec["p"] = pos[lo:hi]
                    rec["w"] = 0.0 if w is None else w[lo:hi]
                    rec.tofile(f)
            self._file = spill.open("rb")
            self.pos, self.w = np.zeros(0, np.int64), np.zeros(0)
        else:
            self.pos, self.w = pos, (np.zeros(0) if w is None else w)
        self.i = 0

    def _refill(self) -> bool:
        if self._file is None:
            return False
        rec = np.fromfile(self._file, dtype=[("p", np.int64), ("w", np.float64)], count=self.READ)
        if not rec.size:
            self._file.close()
            self._file = None
            return False
        self.pos, self.w, self.i = rec["p"].copy(), rec["w"].copy(), 0
        return True

    def below(self, b: int) -> tuple[I64, F64]:
        """The next events at positions < b."""
        ps: list[I64] = []
        ws: list[F64] = []
        while True:
            if self.i == self.pos.size and not self._refill():
                break
            k = self.i + int(np.searchsorted(self.pos[self.i:], b, side="left"))
            ps.append(self.pos[self.i:k])
            ws.append(self.w[self.i:k] if not self.w_none else np.zeros(0))
            self.i = k
            if k < self.pos.size:
                break
        if len(ps) == 1:
            return ps[0], ws[0]
        return (np.concatenate(ps) if ps else np.zeros(0, np.int64)), (np.concatenate(ws) if ws else np.zeros(0))


def _sum_events(events: list[_Events], a: int, b: int, m: int, weighted: bool) -> tuple[I64, F64 | None]:
    """Counts (and weights) of every stream's events at positions a … b−1, per position."""
    got = [e.below(b) for e in events]
    p = np.concatenate([g[0] for g in got]) - a if len(got) > 1 else got[0][0] - a
    cnt = np.asarray(np.bincount(p, minlength=m + 1), dtype=np.int64)
    if not weighted:
        return cnt, None
    w = np.concatenate([g[1] for g in got]) if len(got) > 1 else got[0][1]
    return cnt, np.asarray(np.bincount(p, weights=w, minlength=m + 1), dtype=np.float64)


def _live(firsts: list[_Events], lasts: list[_Events], starts: I64, n_blocks: I64, block_w: float | None,
          points: tuple[I64, I64], state_bytes: float) -> tuple[pd.DataFrame, int, float, float, float, float]:
    """The live series swept in chunks of whole requests from the partitions' first- and
    last-access events of reused blocks: (one row per request with blocks, peak position, live
    blocks / states / bytes there, max live blocks). `block_w`: every block's bytes, or None when
    the events carry them."""
    ok = points[1] > points[0]  # a state live over no position counts nowhere (as _live_counts)
    p_start, p_end = np.sort(points[0][ok]), np.sort(points[1][ok])
    has = np.flatnonzero(n_blocks > 0)
    rows_b: list[I64] = []
    rows_s: list[I64] = []
    rows_y: list[F64] = []
    carry_b = carry_y = carry_s = 0.0
    best_y, best_pos, best_b, best_s, max_b = -math.inf, -1, 0.0, 0.0, 0.0
    k = 0
    while k < has.size:
        # whole requests, about SWEEP_CHUNK positions (one longer request alone)
        a = int(starts[has[k]])
        stop = int(np.searchsorted(starts[has], a + SWEEP_CHUNK, side="left"))
        stop = max(stop, k + 1)
        reqs = has[k:stop]
        b = int(starts[reqs[-1]] + n_blocks[reqs[-1]])
        m = b - a
        f_cnt, f_w = _sum_events(firsts, a, b, m, block_w is None)
        l_cnt, l_w = _sum_events(lasts, a, b, m, block_w is None)
        d_blocks = f_cnt - l_cnt
        live_b = carry_b + np.cumsum(d_blocks[:m]).astype(np.float64)
        if block_w is not None:  # one block size: every block weighs the same
            d_bytes = np.asarray(d_blocks * block_w, dtype=np.float64)
        else:
            d_bytes = np.asarray(f_w, dtype=np.float64) - np.asarray(l_w, dtype=np.float64)
        live_y = carry_y + np.cumsum(d_bytes[:m]).astype(np.float64)
        s0, s1 = np.searchsorted(p_start, [a, b])
        e0, e1 = np.searchsorted(p_end, [a, b])
        d_states = (np.bincount(p_start[s0:s1] - a, minlength=m + 1)
                    - np.bincount(p_end[e0:e1] - a, minlength=m + 1))
        live_s = carry_s + np.cumsum(d_states[:m]).astype(np.float64)
        carry_b, carry_y, carry_s = float(live_b[-1]), float(live_y[-1]), float(live_s[-1])
        if state_bytes:
            live_y = live_y + live_s * state_bytes
        i = int(np.argmax(live_y))
        if live_y[i] > best_y:
            best_y, best_pos, best_b, best_s = float(live_y[i]), a + i, float(live_b[i]), float(live_s[i])
        max_b = max(max_b, float(live_b.max()))
        cuts = starts[reqs] - a
        rows_b.append(np.maximum.reduceat(live_b, cuts).astype(np.int64))
        rows_s.append(np.maximum.reduceat(live_s, cuts).astype(np.int64))
        rows_y.append(np.maximum.reduceat(live_y, cuts))
        k = stop
    live = pd.DataFrame({
        "live_blocks": np.concatenate(rows_b) if rows_b else np.zeros(0, np.int64),
        "live_states": np.concatenate(rows_s) if rows_s else np.zeros(0, np.int64),
        "live_bytes": np.concatenate(rows_y) if rows_y else np.zeros(0),
    })
    return live, best_pos, best_b, best_s, best_y, max_b


@dataclass
class _Context:
    """The per-request columns the per-block results are turned into times, categories and
    bytes with (known after the first pass)."""

    arrival: F64
    starts: I64
    cat: I64
    bt: I64
    cat_names: npt.NDArray[np.object_]
    sizes: I64            # block sizes of the requests with blocks, ascending
    size_bytes: F64       # chunk bytes of each


@dataclass
class _Blockwise:
    """What the partitions' per-block states leave once written out: access-count histograms,
    the lifespans of reused blocks and the live-series events."""

    counts: list[tuple[I64, I64]] = field(default_factory=list)
    reused_life: list[F64] = field(default_factory=list)
    firsts: list[_Events] = field(default_factory=list)
    lasts: list[_Events] = field(default_factory=list)

    def count_histogram(self) -> tuple[I64, I64]:
        v = np.concatenate([c[0] for c in self.counts])
        n = np.concatenate([c[1] for c in self.counts])
        values, inv = np.unique(v, return_inverse=True)
        return values, np.bincount(inv, weights=n).astype(np.int64)


def _write_blocks(blocks: _Blocks, ctx: _Context, writer: TableWriter, dictionary: pa.Array, out: _Blockwise,
                  spill_dir: Path | None) -> None:
    """Write one partition's lifespans rows (chunks of distinct blocks, in first-access order) and
    keep its count histogram, reused lifespans and live events (spilled when `spill_dir`)."""
    d = blocks.n
    multi = ctx.sizes.size > 1
    f_pos: list[I64] = []
    l_pos: list[I64] = []
    weights: list[F64] = []
    for lo in range(0, max(d, 1), SWEEP_CHUNK):
        hi = min(d, lo + SWEEP_CHUNK)
        fr = _req_of(ctx.starts, blocks.first_pos[lo:hi])
        first_s = ctx.arrival[fr]
        last_s = ctx.arrival[_req_of(ctx.starts, blocks.last_pos[lo:hi])]
        life = last_s - first_s
        cnt = blocks.count[lo:hi].astype(np.int64)
        reused = cnt > 1
        out.reused_life.append(life[reused])
        f_pos.append(blocks.first_pos[lo:hi][reused])
        l_pos.append(blocks.last_pos[lo:hi][reused])
        if multi:  # a block's bytes follow the block size of the request that first accessed it
            weights.append(ctx.size_bytes[np.searchsorted(ctx.sizes, ctx.bt[fr[reused]])])
        writer.write(pa.table({
            "hash_ns": pa.array(blocks.key_ns[lo:hi]), "hash_id": pa.array(blocks.key_id[lo:hi]),
            "category": pa.DictionaryArray.from_arrays(pa.array(ctx.cat[fr].astype(np.int32)), dictionary)
            .cast(pa.string()),
            "first_s": pa.array(first_s), "last_s": pa.array(last_s), "lifespan_s": pa.array(life),
            "accesses": pa.array(cnt),
        }))
    per_count = np.bincount(blocks.count[:d])  # counts are at most the requests: small
    values = np.flatnonzero(per_count)
    out.counts.append((values.astype(np.int64), per_count[values].astype(np.int64)))
    tag = f"{blocks.part}-{blocks.parts}"
    blocks.free()  # room for the events' sort
    first = np.concatenate(f_pos) if f_pos else np.zeros(0, np.int64)  # ascending: codes follow first access
    del f_pos
    w = np.concatenate(weights) if multi and weights else None
    out.firsts.append(_Events(first, w, spill_dir / f"first-{tag}.bin" if spill_dir else None))
    del first
    last = np.concatenate(l_pos) if l_pos else np.zeros(0, np.int64)
    del l_pos
    if w is None:
        last.sort()
    else:
        order = np.argsort(last, kind="stable")
        last, w = last[order], w[order]
        del order
    out.lasts.append(_Events(last, w, spill_dir / f"last-{tag}.bin" if spill_dir else None))


def characterize_batches(
    batches: Batches, profile: ProfileLike, out_dir: str | Path, *,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES, partitions: int | None = None,
) -> tuple[Characterization, list[Path]]:
    """Characterize requests arriving in batches sorted by `arrival_s` (ties in table order) and
    write the tables and `summary.json` under `out_dir`, as `characterize` does.

    `batches` is the batches, or a function returning them afresh for each pass (needed when the
    per-block state does not fit `memory_budget_bytes`: one pass per partition follows the
    first). `partitions` forces P (tests; default from the budget). The result holds every table
    but `lifespans` (one row per distinct block: written, not kept; its field is None)."""
    budget = check_budget(memory_budget_bytes)
    if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int)
                                   or partitions < 1):
        raise KvwearError(f"partitions must be a whole number ≥ 1, not {partitions!r}")
    passes = [0]

    def source() -> Iterator[pa.RecordBatch]:
        if passes[0] and not callable(batches) and iter(batches) is batches:
            raise KvwearError("the per-block state does not fit memory_budget_bytes and the batches can be "
                              "read only once: pass a function returning them afresh for each pass")
        passes[0] += 1
        return iter(batches() if callable(batches) else batches)

    lru = _Lru(max(budget // 2 // LRU_STATE_BYTES, 1024))
    blocks: _Blocks | None = _Blocks(1, 0, INITIAL_BLOCKS) if partitions in (None, 1) else None
    hits = _HitsBuilder()
    reqs = _Requests()
    names: dict[str, int] = {}
    g = pos = 0
    last_arrival = -math.inf
    for raw in source():
        if not raw.num_rows:
            continue
        batch, b = _arrays(raw)
        arrival = np.asarray(batch.column("arrival_s").to_numpy(), dtype=np.float64)
        if arrival[0] < last_arrival or (arrival.size > 1 and bool((arrival[1:] < arrival[:-1]).any())):
            raise KvwearError("requests are not sorted by arrival_s: a streamed characterization needs them "
                              "in arrival order (kvwear trace convert writes them so)")
        last_arrival = float(arrival[-1])
        lru.feed(b.offsets, b.ids, b.ns)
        if blocks is not None and blocks.nbytes_for(int(b.ids.size)) + lru.nbytes() > budget:
            blocks, hits = None, _HitsBuilder()  # does not fit: per-block passes by partition follow
        if blocks is not None:
            _feed(blocks, b, g, pos, hits)
        n_blocks = np.diff(b.offsets)
        last_w = np.clip(b.hashed - (n_blocks - 1) * b.bt, 0, b.bt)
        reqs.tokens.append(np.where(n_blocks > 0, (n_blocks - 1) * b.bt + last_w, 0))
        reqs.request_id.append(np.asarray(batch.column("request_id").to_numpy(), dtype=np.int64))
        reqs.arrival_s.append(arrival)
        reqs.session.append(np.asarray(batch.column("session_id").to_numpy(zero_copy_only=False), dtype=object))
        reqs.category.append(_category_codes(batch.column("category"), names))
        reqs.block_tokens.append(b.bt)
        reqs.n_blocks.append(n_blocks)
        reqs.input_tokens.append(np.asarray(batch.column("input_tokens").to_numpy(), dtype=np.int64))
        g += batch.num_rows
        pos += int(b.ids.size)
    if g == 0:
        raise KvwearError("requests table is empty: nothing to characterize")

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bt = reqs.cat("block_tokens")
    lru_res = lru.table(pos, int(profile.chunk_bytes(int(bt[0]))))
    rate, distinct = lru.rate, lru.distinct_blocks()
    del lru  # done with: room for the per-block passes
    n_blocks = reqs.cat("n_blocks")
    starts = np.zeros(n_blocks.size, dtype=np.int64)
    np.cumsum(n_blocks[:-1], out=starts[1:])
    sizes = np.unique(bt[n_blocks > 0]) if pos else np.zeros(0, np.int64)
    ctx = _Context(reqs.cat("arrival_s").astype(np.float64), starts, reqs.cat("category"), bt,
                   np.array(list(names), dtype=object), sizes,
                   np.array([float(profile.chunk_bytes(int(s))) for s in sizes]))
    dictionary = pa.array(ctx.cat_names.astype(str).tolist(), pa.string())
    blockwise = _Blockwise()
    with TableWriter(LIFESPANS, out / "lifespans.parquet") as writer, \
            tempfile.TemporaryDirectory(prefix=".kvwear-characterize-", dir=out) as tmp:
        if blocks is not None:  # P = 1: the first pass did it all
            merged = hits.build()
            _write_blocks(blocks, ctx, writer, dictionary, blockwise, None)
            del blocks
        else:
            n_parts = partitions or max(2, math.ceil(distinct * BLOCK_STATE_BYTES / budget))
            merged_or_none: _Hits | None = None
            for part in range(n_parts):
                blocks = _Blocks(n_parts, part, math.ceil(distinct / n_parts * 1.05) + 1024)
                hits = _HitsBuilder()
                g2 = pos2 = 0
                for raw in source():
                    if raw.num_rows:
                        _, b = _arrays(raw)
                        _feed(blocks, b, g2, pos2, hits)
                        g2 += raw.num_rows
                        pos2 += int(b.ids.size)
                if (g2, pos2) != (g, pos):
                    raise KvwearError(f"the batches changed between passes ({g2:,} requests, {pos2:,} accesses "
                                      f"after {g:,} and {pos:,}): the source must give the same batches each time")
                h = hits.build()
                if merged_or_none is None:
                    merged_or_none = h
                else:
                    merged_or_none.merge(h)
                _write_blocks(blocks, ctx, writer, dictionary, blockwise, Path(tmp))
                del blocks
            assert merged_or_none is not None
            merged = merged_or_none
        res = _finish(reqs, ctx, merged, blockwise, pos, profile, lru_res, rate)
    written = [out / "lifespans.parquet"]
    for name, spec, attr in TABLES:
        if name != "lifespans":  # written above, in chunks
            df = getattr(res, attr)
            written.append(write_table(spec, pa.Table.from_pandas(df, preserve_index=False), out / f"{name}.parquet"))
    written.append(_write_text(out / "summary.json", json.dumps(res.summary(), indent=2) + "\n"))
    return res, written


def _finish(reqs: _Requests, ctx: _Context, h: _Hits, blockwise: _Blockwise, n: int, profile: ProfileLike,
            lru: tuple[pd.DataFrame, int], rate: float) -> Characterization:
    arrival, cat, bt, starts = ctx.arrival, ctx.cat, ctx.bt, ctx.starts
    n_blocks = reqs.cat("n_blocks")
    tokens = reqs.cat("tokens")
    input_tokens = reqs.cat("input_tokens")
    request_id = reqs.cat("request_id")
    session = np.concatenate(reqs.session)
    cat_names = ctx.cat_names
    n_cat = len(cat_names)

    mn = {"minlength": n_cat}
    by_cat = category_table(cat_names, np.bincount(cat, **mn), np.bincount(cat, weights=n_blocks, **mn),
                            np.bincount(cat, weights=h.hits, **mn), np.bincount(cat, weights=tokens, **mn),
                            np.bincount(cat, weights=h.hit_tokens, **mn), np.bincount(cat, weights=input_tokens, **mn))

    # request reuse times (one row per request with a hit)
    rr_reqs = np.flatnonzero(h.src_req >= 0)
    rr = request_reuse_table(request_id, arrival, session, cat_names, cat, rr_reqs, h.src_req[rr_reqs],
                             h.hits[rr_reqs])

    # block reuse times from the (request, source, count) triples
    tri_req, tri_src, tri_cnt = h.tri
    bq = _quantile_table(arrival[tri_req] - arrival[tri_src], tri_cnt, cat[tri_req], cat_names, "block_reuse")

    # capacity: chunk bytes per block (by the block size of the request that first accessed it)
    block_w = float(ctx.size_bytes[0]) if ctx.sizes.size == 1 else 0.0 if not ctx.sizes.size else None
    hybrid = bool(profile.is_hybrid)
    if hybrid and (h.deep_first >= 0).any():
        has_p = h.deep_first >= 0
        k, pp = h.deep_first[has_p], h.deep_pos[has_p]  # a block is named by its first access
        order = np.argsort(k, kind="stable")
        ks = k[order]
        end_run = np.ones(ks.size, dtype=np.bool_)
        end_run[:-1] = ks[1:] != ks[:-1]
        points = (ks[end_run], pp[order][end_run])
    else:
        points = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    live, peak_pos, peak_b, peak_s, peak_y, max_b = _live(
        blockwise.firsts, blockwise.lasts, starts, n_blocks, block_w, points,
        float(profile.state_bytes) if hybrid else 0.0)
    live.insert(0, "arrival_s", arrival[n_blocks > 0])
    peak_s_time = float(arrival[_req_of(starts, np.array([peak_pos]))[0]]) if peak_pos >= 0 else math.nan

    return assemble(
        profile, requests=int(arrival.size), block_accesses=n, block_tokens=int(bt[0]),
        block_hits=int(h.hits.sum()), hashed_tokens=int(tokens.sum()), hit_tokens=int(h.hit_tokens.sum()),
        input_tokens=int(input_tokens.sum()), count_histogram=blockwise.count_histogram(),
        reused_life=np.concatenate(blockwise.reused_life) if blockwise.reused_life else np.zeros(0),
        by_category=by_cat, request_reuse=rr, block_reuse_quantiles=bq,
        capacity=(round(peak_b), round(peak_s), round(peak_y), peak_s_time, round(max_b)) if n else
        (0, 0, 0, math.nan, 0),
        live=live, lru=lru, lifespans=None, lru_sampling_rate=rate,
    )


def characterize(
    table: pa.Table, profile: ProfileLike, out_dir: str | Path
) -> tuple[Characterization, list[Path]]:
    """Analyze `table` for `profile` and write its tables and `summary.json` under `out_dir`
    (`kvwear.reports.characterization.plot_characterization` draws the figures from them), through the
    streamed engine (`kvwear.workloads.characterize_stream`): the same numbers as `analyze`, without its
    per-access arrays. The result's `lifespans` is None (written, not held).

    Returns the result and every path written.
    """
    table = REQUESTS.conform(table)
    arrival = table.column("arrival_s").to_numpy()
    if arrival.size > 1 and bool((arrival[1:] < arrival[:-1]).any()):
        table = table.take(pa.array(np.argsort(arrival, kind="stable")))
    return characterize_batches(table.to_batches(max_chunksize=1 << 14), profile, out_dir)
