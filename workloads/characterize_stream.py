"""Trace characterization in one streamed pass, with memory bounded by distinct blocks, not accesses.

The analyses and their definitions are `workloads.characterize`'s (its module docstring); this
module computes the same numbers from requests arriving in record batches (sorted by arrival),
without the flattened per-access arrays of `workloads.characterize.flatten` (~134 B per block
access: 50 GB for a 380 M-access trace). Every structure here is exact; none is a sketch:

- **Per distinct block** (one numba pass over each batch's accesses): an open-addressing hash
  table from `(hash_ns, hash_id)` to a dense code numbered in order of first appearance (as
  `flatten`'s codes), and per code its key, first and last access position, access count, last
  accessing request and LRU stack position: 52 bytes of arrays per block of capacity (grown by
  1.5×) plus 8–16 of hash slots (at most half full) and ~8 of LRU tree; `bench/scale.py` measures
  ~90–120 B of peak RSS per distinct block with the allocator's slack.
- **Per request** (bounded by requests, thousands of times fewer than accesses): hits, hit
  tokens, the source request and position of the deepest hit (request reuse times, reuse-point
  states), and the block reuse times as (request, source request, count) triples — a request's
  hits come from a few source requests, so the triples are few, and `characterize.weighted_stats`
  turns them into the same mean and quantiles as one value per access.
- **LRU stack distances** with a Fenwick tree over stack positions that holds one mark per distinct
  block: when positions run out, the marks are renumbered 0…D−1 in order (distances only count
  marks between two positions, so renumbering keeps every distance), so the tree has about 2·D
  slots instead of one per access.
- **Live blocks over time** (capacity): a block is live from its first access to its last, so the
  live count at position i is (#first accesses ≤ i) − (#last accesses ≤ i); after the pass, both
  position lists are known per block and the series is swept in chunks of whole requests (one
  chunk's positions in memory at a time), reduced to one row per request as in `characterize`.

The per-distinct-block tables (`lifespans`) are written in chunks straight to Parquet. Results are
bit-identical to `workloads.characterize.analyze` (a test compares every table and the JSON).
This module must not load traces, draw, or import policies, harness, emulator or reports.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from kvwear.errors import KvwearError
from kvwear.tables import TableWriter, atomic_write, write_table
from workloads.characterize import (
    LIFESPANS,
    TABLES,
    Characterization,
    ProfileLike,
    _quantile_table,
    assemble,
    category_table,
    lru_table,
    request_reuse_table,
)
from workloads.schema import REQUESTS, list_parts

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

#: Positions of the live series (and distinct blocks of the lifespans table) handled at once.
SWEEP_CHUNK = 1 << 20

#: Distinct blocks room is first made for (grown by 1.5x as needed).
INITIAL_BLOCKS = 1 << 16

_EMPTY = np.int32(-1)


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
def _compact(lru_last: I64, n_keys: int, clock: int, tree: I32) -> int:  # pragma: no cover
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
def _feed(  # pragma: no cover - compiled; tested against characterize.analyze
    offsets: I64, ids: I64, ns_req: I32, bt_req: I64, hashed_req: I64, g0: int, pos0: int,
    slots: I32, key_ns: I32, key_id: I64, first_pos: I64, last_pos: I64, count: I32, last_req: I32,
    lru_last: I64, tree: I32, hist: I64, n_keys: int, clock: int,
    hits: I64, hit_tokens: I64, src_req: I64, deep_pos: I64, deep_code: I64,
    tri_req: I64, tri_src: I64, tri_cnt: I64, codes: I64, srcbuf: I64,
) -> tuple[int, int, int, int]:
    """Feed one batch of requests (global request index g0 + r, first access position pos0).

    Returns (n_keys, clock, triples written, largest stack distance + 1)."""
    n_tri = 0
    max_d = 0
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
        deep_code[r] = -1
        ns = ns_req[r]
        for j in range(s, e):
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
                lru_last[c] = -1
            else:
                count[c] += 1
                src = last_req[c]
                srcbuf[nh] = src
                nh += 1
                ht += last_w if j == e - 1 else bt
                src_req[r] = src
                deep_pos[r] = pos
                deep_code[r] = c
            last_pos[c] = pos
            last_req[c] = g
            codes[j] = c
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
        # LRU: the request's blocks are touched tail first (characterize.lru_curve)
        for j in range(e - 1, s - 1, -1):
            c = codes[j]
            p = lru_last[c]
            if p >= 0:
                d = _fenwick_prefix(tree, clock) - _fenwick_prefix(tree, p + 1)
                hist[d] += 1
                if d + 1 > max_d:
                    max_d = d + 1
                _fenwick_add(tree, p, -1)
            _fenwick_add(tree, clock, 1)
            lru_last[c] = clock
            clock += 1
    return n_keys, clock, n_tri, max_d


def _write_text(path: Path, text: str) -> Path:
    with atomic_write(path) as tmp:
        tmp.write_text(text)
    return path


def _grown(a: np.ndarray, n: int, fill: int = 0) -> np.ndarray:
    out = np.full(n, fill, dtype=a.dtype)
    out[: a.size] = a
    return out


class _Blocks:
    """The per-distinct-block state and the LRU tree (module docstring), grown as blocks appear."""

    def __init__(self) -> None:
        cap = INITIAL_BLOCKS
        self.n = 0
        self.clock = 0
        self.max_d = 0
        self.slots = np.full(2 * cap, _EMPTY, dtype=np.int32)
        self.key_ns = np.zeros(cap, dtype=np.int32)
        self.key_id = np.zeros(cap, dtype=np.int64)
        self.first_pos = np.zeros(cap, dtype=np.int64)
        self.last_pos = np.zeros(cap, dtype=np.int64)
        self.count = np.zeros(cap, dtype=np.int32)
        self.last_req = np.zeros(cap, dtype=np.int32)
        self.lru_last = np.zeros(cap, dtype=np.int64)
        self.hist = np.zeros(cap, dtype=np.int64)
        self.tree = np.zeros(2 * cap + 1, dtype=np.int32)

    def drop_pass_state(self) -> None:
        """Free what only the pass needs (the hash table, the LRU tree, positions and histogram)."""
        empty32, empty64 = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        self.slots, self.tree, self.last_req = empty32, empty32, empty32
        self.lru_last, self.hist = empty64, empty64

    def reserve(self, accesses: int) -> None:
        """Room for `accesses` more accesses, all of them possibly new blocks."""
        need = self.n + accesses
        cap = self.key_id.size
        if need > cap:
            cap = max(need, cap + cap // 2)
            for name in ("key_ns", "key_id", "first_pos", "last_pos", "count", "last_req", "lru_last",
                         "hist"):
                setattr(self, name, _grown(getattr(self, name), cap))
        if 2 * need > self.slots.size:  # at most half full: short probe runs
            size = self.slots.size
            while size < 2 * need:
                size *= 2
            self.slots = np.full(size, _EMPTY, dtype=np.int32)
            _rehash(self.slots, self.key_ns, self.key_id, self.n)
        if self.clock + accesses > self.tree.size - 1:  # stack positions run out: renumber
            size = max(self.tree.size - 1, 2 * (self.n + accesses))
            if size > self.tree.size - 1:
                self.tree = np.zeros(size + 1, dtype=np.int32)
            self.clock = _compact(self.lru_last, self.n, self.clock, self.tree)


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
    hits: list[I64] = field(default_factory=list)
    hit_tokens: list[I64] = field(default_factory=list)
    src_req: list[I64] = field(default_factory=list)
    deep_pos: list[I64] = field(default_factory=list)
    deep_code: list[I64] = field(default_factory=list)
    tri: list[tuple[I64, I64, I64]] = field(default_factory=list)

    def cat(self, name: str) -> np.ndarray:
        parts = getattr(self, name)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _category_codes(col: pa.ChunkedArray | pa.Array, names: dict[str, int]) -> I64:
    """Global category codes, numbered in order of first appearance over the whole stream."""
    codes, uniques = pd.factorize(np.asarray(col.to_numpy(zero_copy_only=False), dtype=object))
    glob = np.array([names.setdefault(str(u), len(names)) for u in uniques], dtype=np.int64)
    return glob[codes] if codes.size else np.zeros(0, dtype=np.int64)


def _req_of(starts: I64, pos: I64) -> I64:
    """The request holding each access position (a request with no blocks holds none)."""
    return np.searchsorted(starts, pos, side="right").astype(np.int64) - 1


def _live(blocks: _Blocks, starts: I64, n_blocks: I64, key_bytes: F64 | float,
          points: tuple[I64, I64], state_bytes: float) -> tuple[pd.DataFrame, int, float, float, float, float]:
    """The live series swept in chunks of whole requests: (one row per request with blocks, peak
    position, live blocks / states / bytes there, max live blocks)."""
    first = blocks.first_pos[: blocks.n]  # ascending: codes follow first appearance
    order = np.argsort(blocks.last_pos[: blocks.n], kind="stable")
    last = blocks.last_pos[: blocks.n][order]
    last_w = key_bytes[order] if isinstance(key_bytes, np.ndarray) else key_bytes
    first_w = key_bytes
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
        f0, f1 = np.searchsorted(first, [a, b])
        l0, l1 = np.searchsorted(last, [a, b])
        fw = first_w[f0:f1] if isinstance(first_w, np.ndarray) else None
        lw = last_w[l0:l1] if isinstance(last_w, np.ndarray) else None
        d_blocks = (np.bincount(first[f0:f1] - a, minlength=m + 1)
                    - np.bincount(last[l0:l1] - a, minlength=m + 1))
        live_b = carry_b + np.cumsum(d_blocks[:m]).astype(np.float64)
        if fw is None:  # one block size: every block weighs the same
            d_bytes = np.asarray(d_blocks * float(first_w), dtype=np.float64)
        else:
            d_bytes = np.asarray(np.bincount(first[f0:f1] - a, weights=fw, minlength=m + 1)
                                 - np.bincount(last[l0:l1] - a, weights=lw, minlength=m + 1), dtype=np.float64)
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


def characterize_batches(
    batches: Iterable[pa.RecordBatch], profile: ProfileLike, out_dir: str | Path
) -> tuple[Characterization, list[Path]]:
    """Characterize requests arriving in batches sorted by `arrival_s` (ties in table order) and
    write the tables and `summary.json` under `out_dir`, as `characterize.characterize` does.

    The result holds every table but `lifespans` (one row per distinct block: written, not kept;
    its field is None)."""
    blocks = _Blocks()
    reqs = _Requests()
    names: dict[str, int] = {}
    g = pos = 0
    last_arrival = -math.inf
    for batch in batches:
        if not batch.num_rows:
            continue
        batch = REQUESTS.conform(pa.Table.from_batches([batch])).combine_chunks().to_batches()[0]
        arrival = np.asarray(batch.column("arrival_s").to_numpy(), dtype=np.float64)
        if arrival[0] < last_arrival or (arrival.size > 1 and bool((arrival[1:] < arrival[:-1]).any())):
            raise KvwearError("requests are not sorted by arrival_s: a streamed characterization needs them "
                              "in arrival order (kvwear trace convert writes them so)")
        last_arrival = float(arrival[-1])
        offsets, ids = list_parts(batch.column("hash_ids"))
        n_req, n_acc = batch.num_rows, int(ids.size)
        bt = np.asarray(batch.column("block_tokens").to_numpy(), dtype=np.int64)
        if (bt <= 0).any():
            raise KvwearError("requests table has a block_tokens ≤ 0")
        hashed = np.asarray(batch.column("hashed_tokens").to_numpy(), dtype=np.int64)
        n_blocks = np.diff(offsets)
        blocks.reserve(n_acc)
        out = [np.zeros(n_req, dtype=np.int64) for _ in range(5)]
        tri = [np.zeros(n_acc, dtype=np.int64) for _ in range(3)]
        blocks.n, blocks.clock, n_tri, max_d = _feed(
            offsets, ids, np.asarray(batch.column("hash_ns").to_numpy(), dtype=np.int32), bt, hashed, g, pos,
            blocks.slots, blocks.key_ns, blocks.key_id, blocks.first_pos, blocks.last_pos, blocks.count,
            blocks.last_req, blocks.lru_last, blocks.tree, blocks.hist, blocks.n, blocks.clock,
            out[0], out[1], out[2], out[3], out[4], tri[0], tri[1], tri[2],
            np.zeros(n_acc, dtype=np.int64), np.zeros(n_acc, dtype=np.int64))
        blocks.max_d = max(blocks.max_d, max_d)
        last_w = np.clip(hashed - (n_blocks - 1) * bt, 0, bt)
        reqs.tokens.append(np.where(n_blocks > 0, (n_blocks - 1) * bt + last_w, 0))
        reqs.request_id.append(np.asarray(batch.column("request_id").to_numpy(), dtype=np.int64))
        reqs.arrival_s.append(arrival)
        reqs.session.append(np.asarray(batch.column("session_id").to_numpy(zero_copy_only=False), dtype=object))
        reqs.category.append(_category_codes(batch.column("category"), names))
        reqs.block_tokens.append(bt)
        reqs.n_blocks.append(n_blocks)
        reqs.input_tokens.append(np.asarray(batch.column("input_tokens").to_numpy(), dtype=np.int64))
        for name, arr in zip(("hits", "hit_tokens", "src_req", "deep_pos", "deep_code"), out, strict=True):
            getattr(reqs, name).append(arr)
        reqs.tri.append((tri[0][:n_tri].copy(), tri[1][:n_tri].copy(), tri[2][:n_tri].copy()))
        g += n_req
        pos += n_acc
    if g == 0:
        raise KvwearError("requests table is empty: nothing to characterize")
    return _finish(blocks, reqs, names, pos, profile, Path(out_dir))


def _finish(blocks: _Blocks, reqs: _Requests, names: dict[str, int], n: int, profile: ProfileLike,
            out: Path) -> tuple[Characterization, list[Path]]:
    arrival = reqs.cat("arrival_s").astype(np.float64)
    cat = reqs.cat("category")
    bt = reqs.cat("block_tokens")
    n_blocks = reqs.cat("n_blocks")
    hits = reqs.cat("hits")
    hit_tokens = reqs.cat("hit_tokens")
    tokens = reqs.cat("tokens")
    input_tokens = reqs.cat("input_tokens")
    request_id = reqs.cat("request_id")
    session = np.concatenate(reqs.session)
    src = reqs.cat("src_req")
    deep_pos = reqs.cat("deep_pos")
    deep_code = reqs.cat("deep_code")
    cat_names = np.array(list(names), dtype=object)
    n_cat = len(cat_names)
    starts = np.zeros(arrival.size, dtype=np.int64)
    np.cumsum(n_blocks[:-1], out=starts[1:])
    d = blocks.n

    mn = {"minlength": n_cat}
    by_cat = category_table(cat_names, np.bincount(cat, **mn), np.bincount(cat, weights=n_blocks, **mn),
                            np.bincount(cat, weights=hits, **mn), np.bincount(cat, weights=tokens, **mn),
                            np.bincount(cat, weights=hit_tokens, **mn), np.bincount(cat, weights=input_tokens, **mn))

    # request reuse times (one row per request with a hit)
    rr_reqs = np.flatnonzero(src >= 0)
    rr = request_reuse_table(request_id, arrival, session, cat_names, cat, rr_reqs, src[rr_reqs], hits[rr_reqs])

    # block reuse times from the (request, source, count) triples
    tri_req = np.concatenate([t[0] for t in reqs.tri]) if reqs.tri else np.zeros(0, np.int64)
    tri_src = np.concatenate([t[1] for t in reqs.tri]) if reqs.tri else np.zeros(0, np.int64)
    tri_cnt = np.concatenate([t[2] for t in reqs.tri]) if reqs.tri else np.zeros(0, np.int64)
    bq = _quantile_table(arrival[tri_req] - arrival[tri_src], tri_cnt, cat[tri_req], cat_names, "block_reuse")

    # LRU curve from the stack-distance histogram
    lru = lru_table(blocks.hist[: blocks.max_d], n, int(profile.chunk_bytes(int(bt[0]))))

    blocks.drop_pass_state()  # the hash table and LRU state are done with: room for the sweep

    # capacity: chunk bytes per block (by the block size of the request that first accessed it)
    out.mkdir(parents=True, exist_ok=True)
    sizes = np.unique(bt[n_blocks > 0]) if n else np.zeros(0, np.int64)
    key_bytes: F64 | float
    if sizes.size <= 1:
        key_bytes = float(profile.chunk_bytes(int(sizes[0]))) if sizes.size else 0.0
    else:
        size_bytes = np.array([float(profile.chunk_bytes(int(b))) for b in sizes])
        key_bytes = np.empty(d, dtype=np.float64)
        for lo in range(0, d, SWEEP_CHUNK):
            fr = _req_of(starts, blocks.first_pos[lo:min(d, lo + SWEEP_CHUNK)])
            key_bytes[lo:lo + fr.size] = size_bytes[np.searchsorted(sizes, bt[fr])]
    hybrid = bool(profile.is_hybrid)
    if hybrid and (deep_code >= 0).any():
        has_p = deep_code >= 0
        k, pp = deep_code[has_p], deep_pos[has_p]
        order = np.argsort(k, kind="stable")
        ks = k[order]
        end_run = np.ones(ks.size, dtype=np.bool_)
        end_run[:-1] = ks[1:] != ks[:-1]
        points = (blocks.first_pos[ks[end_run]], pp[order][end_run])
    else:
        points = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    live, peak_pos, peak_b, peak_s, peak_y, max_b = _live(
        blocks, starts, n_blocks, key_bytes, points, float(profile.state_bytes) if hybrid else 0.0)
    live.insert(0, "arrival_s", arrival[n_blocks > 0])
    peak_s_time = float(arrival[_req_of(starts, np.array([peak_pos]))[0]]) if peak_pos >= 0 else math.nan

    # lifespans: written in chunks of distinct blocks; the reused blocks' lifespans kept for quantiles
    written: list[Path] = []
    reused_life: list[F64] = []
    dictionary = pa.array(cat_names.astype(str).tolist(), pa.string())
    with TableWriter(LIFESPANS, out / "lifespans.parquet") as w:
        for lo in range(0, max(d, 1), SWEEP_CHUNK):
            hi = min(d, lo + SWEEP_CHUNK)
            fr = _req_of(starts, blocks.first_pos[lo:hi])
            first_s = arrival[fr]
            last_s = arrival[_req_of(starts, blocks.last_pos[lo:hi])]
            life = last_s - first_s
            cnt = blocks.count[lo:hi].astype(np.int64)
            reused_life.append(life[cnt > 1])
            w.write(pa.table({
                "hash_ns": pa.array(blocks.key_ns[lo:hi]), "hash_id": pa.array(blocks.key_id[lo:hi]),
                "category": pa.DictionaryArray.from_arrays(pa.array(cat[fr].astype(np.int32)), dictionary)
                .cast(pa.string()),
                "first_s": pa.array(first_s), "last_s": pa.array(last_s), "lifespan_s": pa.array(life),
                "accesses": pa.array(cnt),
            }))
    written.append(out / "lifespans.parquet")

    res = assemble(
        profile, requests=int(arrival.size), block_accesses=n, block_tokens=int(bt[0]),
        block_hits=int(hits.sum()), hashed_tokens=int(tokens.sum()), hit_tokens=int(hit_tokens.sum()),
        input_tokens=int(input_tokens.sum()), count=blocks.count[:d],
        reused_life=np.concatenate(reused_life) if reused_life else np.zeros(0),
        by_category=by_cat, request_reuse=rr, block_reuse_quantiles=bq,
        capacity=(round(peak_b), round(peak_s), round(peak_y), peak_s_time, round(max_b)) if n else
        (0, 0, 0, math.nan, 0),
        live=live, lru=lru, lifespans=None,
    )
    for name, spec, attr in TABLES:
        if name != "lifespans":  # written above, in chunks
            df = getattr(res, attr)
            written.append(write_table(spec, pa.Table.from_pandas(df, preserve_index=False), out / f"{name}.parquet"))
    written.append(_write_text(out / "summary.json", json.dumps(res.summary(), indent=2) + "\n"))
    return res, written
