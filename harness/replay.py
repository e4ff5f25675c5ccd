"""The replayer: object-granularity `ssd_ops` (write/read/evict of obj_id) → LBA-level `block_ops`.

Placement on a device of `capacity_bytes` (ReplayConfig.layout):
- `log`: circular append, like a flash cache. A write goes at the head; the head wraps at the end
  of the device (an object crossing the end gets two extents). Freed space is simply left behind;
  when the head reaches an object that is still live, that object is overwritten: with
  `log_full="evict"` (default) the planner evicts it (counted in `forced_evictions` /
  `forced_evict_bytes`; later reads and evicts of it are misses), with `log_full="error"` the plan
  fails naming the object, the head offset and the capacity. Evicts never move the head.
- `slab`: size classes, in place. Each object goes to the smallest class ≥ its aligned size (default
  classes: powers of two from the alignment up to the largest object). Slabs of
  max(`slab_bytes`, class size) are carved from the device on demand and never returned; a freed
  slot is reused by the next object of its class. No slab left → error naming the numbers.
- `extent`: first fit (lowest-addressed hole that is large enough) over a free list kept in
  address order; freed extents merge with their neighbours. A segment tree over address chunks
  finds the first fit and a freed extent's neighbours in O(log chunks). Each object is one
  contiguous extent; no hole large enough → error naming the request, the largest hole and the
  free total.

Byte accounting and rounding: each object occupies ceil(bytes / align)·align (align = 4 KiB by
default) and that is what is written, read and trimmed; the plan reports the logical object bytes
and the aligned bytes. Objects of 0 bytes produce no I/O (`empty_writes`). A rewrite of a live
object frees its old copy first (trimmed when `trim_on_evict`). Reads of resident objects become
read ops; reads/evicts of objects not resident are counted as misses and produce nothing. Every
extent is split into I/Os of at most `max_io_bytes` (an aligned multiple). No offset ever leaves
[0, capacity_bytes).

Time: `original` keeps t_s (made 0-based), `compressed` divides it by `time_compression`, `afap`
(as fast as possible) sets t_s to the 0-based order of the block op.

This module plans only: it must not issue I/O, open devices or know about FTLs. The placement
loop is one numba kernel per layout; everything around it is vectorized numpy/pyarrow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from harness.schema import BLOCK_OPS
from kvwear.errors import InputError, KvwearError

Layout = Literal["log", "slab", "extent"]
TimeMode = Literal["original", "compressed", "afap"]
LAYOUTS: tuple[str, ...] = ("log", "slab", "extent")
BLOCK_OP_NAMES: tuple[str, ...] = ("write", "read", "trim")
_SSD_OPS = {"write": 0, "read": 1, "evict": 2}

# kernel error codes (info[0]); info[1] is the ssd_ops row
_ERR_LOG_FULL, _ERR_NO_HOLE, _ERR_NO_SLAB = 2, 3, 4


@dataclass(frozen=True)
class ReplayConfig:
    capacity_bytes: int
    layout: Layout = "log"
    align_bytes: int = 4096
    trim_on_evict: bool = True
    max_io_bytes: int = 1 << 20
    time_mode: TimeMode = "original"
    time_compression: float = 1.0
    log_full: Literal["evict", "error"] = "evict"
    slab_classes_bytes: tuple[int, ...] | None = None
    slab_bytes: int = 4 << 20

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise KvwearError(f"unknown layout {self.layout!r}; valid: {', '.join(LAYOUTS)}")
        if self.align_bytes <= 0 or self.capacity_bytes < self.align_bytes:
            raise KvwearError(
                f"capacity_bytes ({self.capacity_bytes}) must be ≥ align_bytes ({self.align_bytes}) > 0")
        if self.capacity_bytes % self.align_bytes:
            raise KvwearError(f"capacity_bytes {self.capacity_bytes} is not a multiple of {self.align_bytes}")
        if self.max_io_bytes < self.align_bytes or self.max_io_bytes % self.align_bytes:
            raise KvwearError(f"max_io_bytes {self.max_io_bytes} must be a multiple of {self.align_bytes}")
        if self.time_mode not in ("original", "compressed", "afap"):
            raise KvwearError(f"time_mode {self.time_mode!r}; valid: original, compressed, afap")
        if not self.time_compression > 0:
            raise KvwearError(f"time_compression must be > 0, got {self.time_compression}")
        if self.log_full not in ("evict", "error"):
            raise KvwearError(f"log_full {self.log_full!r}; valid: evict, error")
        if self.slab_classes_bytes is not None:
            cl = self.slab_classes_bytes
            if not cl or any(c % self.align_bytes or c <= 0 for c in cl) or list(cl) != sorted(set(cl)):
                raise KvwearError(
                    f"slab_classes_bytes must be increasing positive multiples of {self.align_bytes}: {cl}")


@dataclass(frozen=True)
class BlockPlan:
    """The BLOCK_OPS table and its accounting."""

    table: pa.Table
    object_write_bytes: int        # Σ bytes of planned writes, as in ssd_ops
    aligned_write_bytes: int       # Σ write lengths in block_ops (each object rounded up to align)
    trim_bytes: int
    read_bytes: int
    write_ios: int
    read_ios: int
    trim_ios: int
    ssd_ops: int                   # input rows
    writes: int                    # objects written
    empty_writes: int              # writes of 0 bytes (no I/O)
    rewrites: int                  # writes of an object that was still resident
    read_misses: int               # reads of objects not resident
    evict_misses: int              # evicts of objects not resident
    forced_evictions: int          # log layout: live objects the head overwrote
    forced_evict_bytes: int
    peak_live_bytes: int           # most aligned bytes resident at once
    capacity_bytes: int
    layout: str

    @property
    def ios(self) -> int:
        return self.write_ios + self.read_ios + self.trim_ios

    def accounting(self) -> dict[str, int | str]:
        d = asdict(self)
        d.pop("table")
        return d


# ----------------------------------------------------------------------------------------------
# kernels: each walks the ops once and emits extents (row, op, offset, length)


@numba.njit(cache=True, inline="always")
def _emit(out_row, out_op, out_off, out_len, k, row, op, off, ln):
    if k < out_row.shape[0]:
        out_row[k] = row
        out_op[k] = op
        out_off[k] = off
        out_len[k] = ln
    return k + 1


_S_EMPTY, _S_REWRITES, _S_READ_MISS, _S_EVICT_MISS, _S_FORCED, _S_FORCED_BYTES, _S_PEAK, _S_WRITES = range(8)


@numba.njit(cache=True)
def _emit_span(out_row, out_op, out_off, out_len, k, row, op, pos, ln, cap):
    """An extent at `pos` of `ln` bytes, split in two where it crosses the end of the device."""
    if pos + ln <= cap:
        return _emit(out_row, out_op, out_off, out_len, k, row, op, pos, ln)
    k = _emit(out_row, out_op, out_off, out_len, k, row, op, pos, cap - pos)
    return _emit(out_row, out_op, out_off, out_len, k, row, op, 0, ln - (cap - pos))


@numba.njit(cache=True)
def _plan_log(ops, oid, alen, n_obj, cap, trim, error_when_full, out_row, out_op, out_off, out_len,
              stats, info):
    live = np.zeros(n_obj, np.bool_)
    start = np.zeros(n_obj, np.int64)          # cumulative head position of the live copy
    olen = np.zeros(n_obj, np.int64)
    nwr = 0
    for i in range(ops.shape[0]):
        if ops[i] == 0:
            nwr += 1
    q_obj = np.empty(nwr + 1, np.int64)         # writes in head order (FIFO)
    q_cum = np.empty(nwr + 1, np.int64)
    qh = 0
    qt = 0
    cum = 0
    k = 0
    live_bytes = 0
    for i in range(ops.shape[0]):
        o = oid[i]
        a = alen[i]
        op = ops[i]
        if op == 0:
            if a == 0:
                stats[_S_EMPTY] += 1
                continue
            stats[_S_WRITES] += 1
            if live[o]:                         # rewrite: the old copy dies where it is
                stats[_S_REWRITES] += 1
                if trim:
                    k = _emit_span(out_row, out_op, out_off, out_len, k, i, 2, start[o] % cap, olen[o], cap)
                live[o] = False
                live_bytes -= olen[o]
            end = cum + a
            # live objects whose first byte the head reaches in this lap are overwritten
            while qh < qt and q_cum[qh] + cap < end:
                v = q_obj[qh]
                if live[v] and start[v] == q_cum[qh]:
                    if error_when_full:
                        info[0] = _ERR_LOG_FULL
                        info[1] = i
                        info[2] = v
                        info[3] = cum % cap
                        info[4] = live_bytes
                        info[5] = a
                        return k
                    live[v] = False
                    live_bytes -= olen[v]
                    stats[_S_FORCED] += 1
                    stats[_S_FORCED_BYTES] += olen[v]
                qh += 1
            k = _emit_span(out_row, out_op, out_off, out_len, k, i, 0, cum % cap, a, cap)
            live[o] = True
            start[o] = cum
            olen[o] = a
            q_obj[qt] = o
            q_cum[qt] = cum
            qt += 1
            cum = end
            live_bytes += a
            if live_bytes > stats[_S_PEAK]:
                stats[_S_PEAK] = live_bytes
        elif op == 1:
            if live[o]:
                k = _emit_span(out_row, out_op, out_off, out_len, k, i, 1, start[o] % cap, olen[o], cap)
            else:
                stats[_S_READ_MISS] += 1
        else:
            if live[o]:
                if trim:
                    k = _emit_span(out_row, out_op, out_off, out_len, k, i, 2, start[o] % cap, olen[o], cap)
                live[o] = False
                live_bytes -= olen[o]
            else:
                stats[_S_EVICT_MISS] += 1
    return k


@numba.njit(cache=True)
def _plan_slab(ops, oid, alen, cls, n_obj, cls_size, slab_size, cap, trim, out_row, out_op, out_off,
               out_len, stats, info):
    live = np.zeros(n_obj, np.bool_)
    ooff = np.zeros(n_obj, np.int64)
    olen = np.zeros(n_obj, np.int64)
    ocls = np.zeros(n_obj, np.int64)
    nc = cls_size.shape[0]
    free_head = np.full(nc, -1, np.int64)        # per class: stack of freed slots
    cur = np.zeros(nc, np.int64)                # per class: next unused slot of its open slab
    cur_end = np.zeros(nc, np.int64)
    nwr = 0
    for i in range(ops.shape[0]):
        if ops[i] == 0:
            nwr += 1
    pool_off = np.empty(nwr + 1, np.int64)
    pool_next = np.empty(nwr + 1, np.int64)
    pool_free = -1                              # recycled pool entries
    pool_top = 0
    bump = 0
    k = 0
    live_bytes = 0
    for i in range(ops.shape[0]):
        o = oid[i]
        a = alen[i]
        op = ops[i]
        if op == 0:
            if a == 0:
                stats[_S_EMPTY] += 1
                continue
            stats[_S_WRITES] += 1
            if live[o]:
                stats[_S_REWRITES] += 1
                if trim:
                    k = _emit(out_row, out_op, out_off, out_len, k, i, 2, ooff[o], olen[o])
                # push the old slot on its class's free stack
                if pool_free >= 0:
                    e = pool_free
                    pool_free = pool_next[e]
                else:
                    e = pool_top
                    pool_top += 1
                pool_off[e] = ooff[o]
                pool_next[e] = free_head[ocls[o]]
                free_head[ocls[o]] = e
                live[o] = False
                live_bytes -= olen[o]
            c = cls[i]
            size = cls_size[c]
            if free_head[c] >= 0:
                e = free_head[c]
                off = pool_off[e]
                free_head[c] = pool_next[e]
                pool_next[e] = pool_free
                pool_free = e
            elif cur[c] + size <= cur_end[c]:
                off = cur[c]
                cur[c] += size
            else:
                ss = slab_size[c]
                if bump + ss > cap:
                    info[0] = _ERR_NO_SLAB
                    info[1] = i
                    info[2] = size
                    info[3] = ss
                    info[4] = bump
                    info[5] = live_bytes
                    return k
                off = bump
                cur[c] = bump + size
                cur_end[c] = bump + (ss // size) * size
                bump += ss
            k = _emit(out_row, out_op, out_off, out_len, k, i, 0, off, a)
            live[o] = True
            ooff[o] = off
            olen[o] = a
            ocls[o] = c
            live_bytes += a
            if live_bytes > stats[_S_PEAK]:
                stats[_S_PEAK] = live_bytes
        elif op == 1:
            if live[o]:
                k = _emit(out_row, out_op, out_off, out_len, k, i, 1, ooff[o], olen[o])
            else:
                stats[_S_READ_MISS] += 1
        else:
            if live[o]:
                if trim:
                    k = _emit(out_row, out_op, out_off, out_len, k, i, 2, ooff[o], olen[o])
                if pool_free >= 0:
                    e = pool_free
                    pool_free = pool_next[e]
                else:
                    e = pool_top
                    pool_top += 1
                pool_off[e] = ooff[o]
                pool_next[e] = free_head[ocls[o]]
                free_head[ocls[o]] = e
                live[o] = False
                live_bytes -= olen[o]
            else:
                stats[_S_EVICT_MISS] += 1
    return k


# Extent layout. Holes (free extents) form a doubly linked list in address order. To find the
# first fit and a freed extent's neighbours without walking that list, the address space is cut
# into M chunks (a power of two): chunk_head[c] is the first hole starting in chunk c and a max
# segment tree over chunks holds the longest hole starting in each. First fit = leftmost chunk
# whose max ≥ the size (O(log M)), then a scan of that chunk's few holes.


@numba.njit(cache=True)
def _seg_set(seg, m, c, val):
    i = m + c
    seg[i] = val
    i //= 2
    while i >= 1:
        a = seg[2 * i]
        b = seg[2 * i + 1]
        seg[i] = a if a > b else b
        i //= 2


@numba.njit(cache=True)
def _chunk_refresh(c, chunk_head, h_off, h_len, h_next, cb, seg, m):
    best = 0
    h = chunk_head[c]
    while h >= 0 and h_off[h] // cb == c:
        if h_len[h] > best:
            best = h_len[h]
        h = h_next[h]
    _seg_set(seg, m, c, best)


@numba.njit(cache=True)
def _chunk_unhead(h, c, chunk_head, h_off, h_next, cb):
    """Hole h leaves chunk c (removed or moved): its successor in c, if any, heads c."""
    if chunk_head[c] == h:
        nx = h_next[h]
        chunk_head[c] = nx if nx >= 0 and h_off[nx] // cb == c else -1


@numba.njit(cache=True)
def _prev_nonempty(seg, m, c):
    """Rightmost chunk < c holding a hole, or -1."""
    i = m + c
    while i > 1:
        if i & 1 and seg[i - 1] > 0:
            i -= 1
            while i < m:
                i = 2 * i + 1 if seg[2 * i + 1] > 0 else 2 * i
            return i - m
        i //= 2
    return -1


@numba.njit(cache=True)
def _plan_extent(ops, oid, alen, n_obj, cap, trim, m, out_row, out_op, out_off, out_len, stats, info):
    live = np.zeros(n_obj, np.bool_)
    ooff = np.zeros(n_obj, np.int64)
    olen = np.zeros(n_obj, np.int64)
    nwr = 0
    for i in range(ops.shape[0]):
        if ops[i] == 0:
            nwr += 1
    nh = nwr + 2                                # holes ≤ live objects + 1
    h_off = np.zeros(nh, np.int64)
    h_len = np.zeros(nh, np.int64)
    h_next = np.full(nh, -1, np.int64)
    h_prev = np.full(nh, -1, np.int64)
    pool = np.empty(nh + 1, np.int64)           # pool[0] = count of unused records in pool[1:]
    pool[0] = nh - 1
    for j in range(1, nh):
        pool[j] = j
    cb = (cap + m - 1) // m                     # chunk bytes
    seg = np.zeros(2 * m, np.int64)
    chunk_head = np.full(m, -1, np.int64)
    head = 0
    h_off[0] = 0
    h_len[0] = cap
    chunk_head[0] = 0
    _seg_set(seg, m, 0, cap)
    k = 0
    live_bytes = 0
    for i in range(ops.shape[0]):
        o = oid[i]
        a = alen[i]
        op = ops[i]
        free_it = False
        if op == 0:
            if a == 0:
                stats[_S_EMPTY] += 1
                continue
            stats[_S_WRITES] += 1
            if live[o]:
                stats[_S_REWRITES] += 1
                if trim:
                    k = _emit(out_row, out_op, out_off, out_len, k, i, 2, ooff[o], olen[o])
                free_it = True
        elif op == 1:
            if live[o]:
                k = _emit(out_row, out_op, out_off, out_len, k, i, 1, ooff[o], olen[o])
            else:
                stats[_S_READ_MISS] += 1
            continue
        else:
            if not live[o]:
                stats[_S_EVICT_MISS] += 1
                continue
            if trim:
                k = _emit(out_row, out_op, out_off, out_len, k, i, 2, ooff[o], olen[o])
            free_it = True
        if free_it:
            # return [off, off+ln) to the hole list, merging with its neighbours
            off = ooff[o]
            ln = olen[o]
            live[o] = False
            live_bytes -= ln
            c = off // cb
            p = -1
            h = chunk_head[c]
            while h >= 0 and h_off[h] // cb == c and h_off[h] < off:
                p = h
                h = h_next[h]
            if p < 0:
                cp = _prev_nonempty(seg, m, c)
                if cp >= 0:
                    p = chunk_head[cp]
                    while h_next[p] >= 0 and h_off[h_next[p]] // cb == cp:
                        p = h_next[p]
            nx = h_next[p] if p >= 0 else head
            if p >= 0 and h_off[p] + h_len[p] == off:
                h_len[p] += ln
                if nx >= 0 and off + ln == h_off[nx]:
                    cn = h_off[nx] // cb
                    _chunk_unhead(nx, cn, chunk_head, h_off, h_next, cb)
                    h_len[p] += h_len[nx]
                    nn = h_next[nx]
                    h_next[p] = nn
                    if nn >= 0:
                        h_prev[nn] = p
                    pool[0] += 1
                    pool[pool[0]] = nx
                    _chunk_refresh(cn, chunk_head, h_off, h_len, h_next, cb, seg, m)
                _chunk_refresh(h_off[p] // cb, chunk_head, h_off, h_len, h_next, cb, seg, m)
            elif nx >= 0 and off + ln == h_off[nx]:
                c_old = h_off[nx] // cb
                h_off[nx] = off
                h_len[nx] += ln
                if c != c_old:
                    _chunk_unhead(nx, c_old, chunk_head, h_off, h_next, cb)
                    _chunk_refresh(c_old, chunk_head, h_off, h_len, h_next, cb, seg, m)
                if chunk_head[c] < 0 or off < h_off[chunk_head[c]]:
                    chunk_head[c] = nx
                _chunk_refresh(c, chunk_head, h_off, h_len, h_next, cb, seg, m)
            else:
                n = pool[pool[0]]
                pool[0] -= 1
                h_off[n] = off
                h_len[n] = ln
                h_prev[n] = p
                h_next[n] = nx
                if nx >= 0:
                    h_prev[nx] = n
                if p >= 0:
                    h_next[p] = n
                else:
                    head = n
                if chunk_head[c] < 0 or off < h_off[chunk_head[c]]:
                    chunk_head[c] = n
                _chunk_refresh(c, chunk_head, h_off, h_len, h_next, cb, seg, m)
        if op != 0:
            continue
        # first fit
        if seg[1] < a:
            info[0] = _ERR_NO_HOLE
            info[1] = i
            info[2] = a
            info[3] = seg[1]
            info[4] = cap - live_bytes
            return k
        j = 1
        while j < m:
            j = 2 * j if seg[2 * j] >= a else 2 * j + 1
        c = j - m
        h = chunk_head[c]
        while h_len[h] < a:
            h = h_next[h]
        off = h_off[h]
        h_off[h] += a
        h_len[h] -= a
        if h_len[h] == 0:
            _chunk_unhead(h, c, chunk_head, h_off, h_next, cb)
            hp = h_prev[h]
            hn = h_next[h]
            if hp >= 0:
                h_next[hp] = hn
            else:
                head = hn
            if hn >= 0:
                h_prev[hn] = hp
            pool[0] += 1
            pool[pool[0]] = h
        else:
            c2 = h_off[h] // cb
            if c2 != c:
                if chunk_head[c] == h:
                    chunk_head[c] = -1
                chunk_head[c2] = h          # h precedes every later hole, so it heads c2
                _chunk_refresh(c2, chunk_head, h_off, h_len, h_next, cb, seg, m)
        _chunk_refresh(c, chunk_head, h_off, h_len, h_next, cb, seg, m)
        k = _emit(out_row, out_op, out_off, out_len, k, i, 0, off, a)
        live[o] = True
        ooff[o] = off
        olen[o] = a
        live_bytes += a
        if live_bytes > stats[_S_PEAK]:
            stats[_S_PEAK] = live_bytes
    return k


# ----------------------------------------------------------------------------------------------


def _column_np(table: pa.Table, name: str, source: str, dtype: type) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
        raise InputError(source, row + 1, name, "missing value")
    return np.asarray(col.to_numpy(), dtype=dtype)


def _decode_ops(table: pa.Table, source: str) -> np.ndarray:
    col = table.column("op")
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    idx = pc.index_in(col, value_set=pa.array(list(_SSD_OPS)))
    if idx.null_count:
        row = int(np.flatnonzero(pc.is_null(idx).to_numpy(zero_copy_only=False))[0])
        raise InputError(source, row + 1, "op",
                         f"unknown op {col[row].as_py()!r}; valid: {', '.join(_SSD_OPS)}")
    return np.asarray(idx.to_numpy(), dtype=np.int8)


def default_slab_classes(align_bytes: int, max_bytes: int) -> tuple[int, ...]:
    """Powers of two times the alignment, from the alignment up to the first ≥ max_bytes."""
    classes = [align_bytes]
    while classes[-1] < max_bytes:
        classes.append(classes[-1] * 2)
    return tuple(classes)


def plan_block_ops(ssd_ops: pa.Table, config: ReplayConfig, *, source: str = "ssd_ops") -> BlockPlan:
    """Place `ssd_ops` (policies.schema.SSD_OPS rows, in time order) on the device; see the module
    docstring for layouts, rounding and time. Errors name the ssd_ops row (`source`:row) and field."""
    cap = config.capacity_bytes
    al = config.align_bytes
    n = ssd_ops.num_rows
    ops = _decode_ops(ssd_ops, source)
    obj_id = _column_np(ssd_ops, "obj_id", source, np.int64)
    nbytes = _column_np(ssd_ops, "bytes", source, np.int64)
    t = _column_np(ssd_ops, "t_s", source, np.float64)
    if n:
        bad = np.flatnonzero(~np.isfinite(t))
        if len(bad):
            raise InputError(source, int(bad[0]) + 1, "t_s", f"not a finite time: {t[bad[0]]}")
        back = np.flatnonzero(np.diff(t) < 0)
        if len(back):
            r = int(back[0]) + 1
            raise InputError(source, r + 1, "t_s", f"time goes backwards ({t[r]} after {t[r - 1]})")
        neg = np.flatnonzero(nbytes < 0)
        if len(neg):
            raise InputError(source, int(neg[0]) + 1, "bytes", f"negative size {nbytes[neg[0]]}")
    aligned = (nbytes + (al - 1)) // al * al
    too_big = np.flatnonzero((aligned > cap) & (ops == 0))
    if len(too_big):
        r = int(too_big[0])
        raise InputError(source, r + 1, "bytes",
                         f"object of {nbytes[r]} bytes ({aligned[r]} aligned) exceeds the device "
                         f"capacity of {cap} bytes")
    uniq, oid = np.unique(obj_id, return_inverse=True)
    oid = oid.astype(np.int64)
    n_obj = len(uniq)
    # an object's aligned size at reads/evicts is the one of its live copy (kept by the kernels)
    trim = bool(config.trim_on_evict)

    out_size = 2 * n + 16
    while True:
        out_row = np.empty(out_size, np.int64)
        out_op = np.empty(out_size, np.int8)
        out_off = np.empty(out_size, np.int64)
        out_len = np.empty(out_size, np.int64)
        stats = np.zeros(8, np.int64)
        info = np.zeros(8, np.int64)
        if config.layout == "log":
            k = _plan_log(ops, oid, aligned, n_obj, cap, trim, config.log_full == "error",
                          out_row, out_op, out_off, out_len, stats, info)
        elif config.layout == "slab":
            max_w = int(aligned[ops == 0].max()) if (ops == 0).any() else al
            classes = np.asarray(config.slab_classes_bytes or default_slab_classes(al, max_w), np.int64)
            if max_w > classes[-1]:
                r = int(np.flatnonzero((aligned > classes[-1]) & (ops == 0))[0])
                raise InputError(source, r + 1, "bytes",
                                 f"object of {aligned[r]} aligned bytes is larger than the largest slab "
                                 f"class ({classes[-1]})")
            cls = np.searchsorted(classes, aligned, side="left").astype(np.int64)
            cls = np.minimum(cls, len(classes) - 1)
            slab_size = np.maximum(config.slab_bytes // classes, 1) * classes
            k = _plan_slab(ops, oid, aligned, cls, n_obj, classes, slab_size, cap, trim,
                           out_row, out_op, out_off, out_len, stats, info)
        else:
            units = cap // al
            m = 1
            while m < min(units, 1 << 18):
                m *= 2
            k = _plan_extent(ops, oid, aligned, n_obj, cap, trim, m, out_row, out_op, out_off, out_len,
                             stats, info)
        if info[0] == 0 and k > out_size:
            out_size = int(k)             # the kernel counted what it could not store: rerun
            continue
        break
    if info[0]:
        _raise_kernel_error(info, config, source, uniq)
    out_row, out_op, out_off, out_len = out_row[:k], out_op[:k], out_off[:k], out_len[:k]

    # split extents into I/Os of at most max_io_bytes
    mx = config.max_io_bytes
    pieces = (out_len + (mx - 1)) // mx
    rep = np.repeat(np.arange(k), pieces)
    first = np.repeat(np.cumsum(pieces) - pieces, pieces)
    within = (np.arange(len(rep)) - first) * mx
    rows = out_row[rep]
    codes = out_op[rep]
    offs = out_off[rep] + within
    lens = np.minimum(mx, out_len[rep] - within)
    if len(offs) and (offs.min() < 0 or (offs + lens).max() > cap or lens.min() <= 0):
        raise KvwearError("internal error: a planned I/O falls outside [0, capacity_bytes)")

    if config.time_mode == "afap":
        ts = np.arange(len(rows), dtype=np.float64)
    else:
        t0 = t[0] if n else 0.0
        ts = t[rows] - t0
        if config.time_mode == "compressed":
            ts = ts / config.time_compression
    op_arr = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), pa.array(list(BLOCK_OP_NAMES)))
    kind = ssd_ops.column("obj_kind").take(pa.array(rows, pa.int64()))
    table = BLOCK_OPS.conform(pa.table({
        "t_s": pa.array(ts, pa.float64()),
        "op": op_arr,
        "offset_bytes": pa.array(offs, pa.int64()),
        "length_bytes": pa.array(lens, pa.int64()),
        "obj_kind": kind.combine_chunks() if isinstance(kind, pa.ChunkedArray) else kind,
        "obj_id": pa.array(obj_id[rows], pa.int64()),
    }))
    is_w, is_r, is_t = codes == 0, codes == 1, codes == 2
    planned_w = (ops == 0) & (aligned > 0)
    plan = BlockPlan(
        table=table,
        object_write_bytes=int(nbytes[planned_w].sum()),
        aligned_write_bytes=int(lens[is_w].sum()),
        trim_bytes=int(lens[is_t].sum()),
        read_bytes=int(lens[is_r].sum()),
        write_ios=int(is_w.sum()),
        read_ios=int(is_r.sum()),
        trim_ios=int(is_t.sum()),
        ssd_ops=n,
        writes=int(stats[_S_WRITES]),
        empty_writes=int(stats[_S_EMPTY]),
        rewrites=int(stats[_S_REWRITES]),
        read_misses=int(stats[_S_READ_MISS]),
        evict_misses=int(stats[_S_EVICT_MISS]),
        forced_evictions=int(stats[_S_FORCED]),
        forced_evict_bytes=int(stats[_S_FORCED_BYTES]),
        peak_live_bytes=int(stats[_S_PEAK]),
        capacity_bytes=cap,
        layout=config.layout,
    )
    if plan.aligned_write_bytes != int(aligned[planned_w].sum()):
        raise KvwearError("internal error: planned write bytes differ from the aligned object bytes")
    return plan


def _raise_kernel_error(info: np.ndarray, config: ReplayConfig, source: str, uniq: np.ndarray) -> None:
    code, row = int(info[0]), int(info[1])
    cap = config.capacity_bytes
    if code == _ERR_LOG_FULL:
        raise InputError(
            source, row + 1, "bytes",
            f"log layout full: writing {info[5]} bytes at head offset {info[3]} would overwrite live "
            f"object {int(uniq[info[2]])} ({info[4]} bytes live of {cap} capacity); use "
            f"log_full='evict' or a larger device")
    if code == _ERR_NO_SLAB:
        raise InputError(
            source, row + 1, "bytes",
            f"slab layout full: no free slot of class {info[2]} bytes and a new {info[3]}-byte slab does "
            f"not fit ({info[4]} of {cap} bytes already carved into slabs, {info[5]} bytes live)")
    if code == _ERR_NO_HOLE:
        raise InputError(
            source, row + 1, "bytes",
            f"extent layout: no free extent of {info[2]} bytes (largest hole {info[3]} bytes, "
            f"{info[4]} bytes free of {cap})")
    raise KvwearError(f"replay kernel error code {code} at row {row}")

