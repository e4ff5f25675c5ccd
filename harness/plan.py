"""The planner: object-granularity `ssd_ops` (write/read/evict of obj_id) → LBA-level `block_ops`.

Placement on a device of `capacity_bytes` (ReplayConfig.layout). Every layout places each write
while the live (aligned) bytes fit the device; a plan fails only when they do not, and the error
names the ssd_ops row, its time and the shortfall.
- `log`: circular append, like a flash cache. A write goes at the head; the head wraps at the end
  of the device (an object crossing the end gets two extents). Freed space is simply left behind.
  When the head reaches an object that is still live, `log_full` decides:
  `relocate` (default) cleans, as a log-structured cache's cleaner does: the live object is read
  and written again at the head (trimming the part of its old copy the new one does not cover,
  when trimming), which makes room behind it; those writes are host writes in the plan, counted
  apart (`relocations`, `relocation_write_bytes`; the reads in `relocation_read_bytes`). A live
  object with no free byte before it already sits where the cleaner would copy it: the head steps
  over it without I/O (`stepped_over`). `evict` drops it instead (`forced_evictions`; later reads
  and evicts of it are misses — the plan then diverges from the simulation), `error` fails
  naming the object, the head offset and the capacity. Evicts never move the head.
- `slab`: size classes, in place (see the comment above `_plan_slab`). Each object goes to the
  smallest class ≥ its aligned size (default_slab_classes: the few sizes the stream writes, else
  memcached's ×1.25 classes). Slabs of `slab_bytes` are shared by all classes: a class takes one
  when it runs out of slots, an emptied slab returns to the pool at once, and when no slab is free
  the class with the most slack is compacted (its top live slots move into its free slots —
  relocation writes, counted as for `log`) until a slab is released.
- `extent`: first fit (lowest-addressed hole that is large enough) over a free list kept in
  address order; freed extents merge with their neighbours. A segment tree over address chunks
  finds the first fit and a freed extent's neighbours in O(log chunks). An object no hole holds
  whole is spread over the lowest holes in address order (`split_writes`), one block_ops row per
  extent (`write_extents` counts them).

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

from collections.abc import Callable
from dataclasses import dataclass, field, fields
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

# kernel error codes (info[0]); info[1] is the ssd_ops row. _ERR_GROW: a pool sized by a guess ran
# out; the caller doubles it and runs the kernel again.
_ERR_FULL, _ERR_LOG_FULL, _ERR_SLAB_FULL, _ERR_GROW = 1, 2, 3, 4
LOG_FULL_MODES: tuple[str, ...] = ("relocate", "evict", "error")
# default_slab_classes: exact sizes up to this many distinct ones, else memcached's growth factor
SLAB_EXACT_CLASSES = 32
SLAB_GROWTH_FACTOR = 1.25


@dataclass(frozen=True)
class ReplayConfig:
    capacity_bytes: int
    layout: Layout = "log"
    align_bytes: int = 4096
    trim_on_evict: bool = True
    max_io_bytes: int = 1 << 20
    time_mode: TimeMode = "original"
    time_compression: float = 1.0
    log_full: Literal["relocate", "evict", "error"] = "relocate"
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
        if self.log_full not in LOG_FULL_MODES:
            raise KvwearError(f"log_full {self.log_full!r}; valid: {', '.join(LOG_FULL_MODES)}")
        if self.slab_classes_bytes is not None:
            cl = self.slab_classes_bytes
            if not cl or any(c % self.align_bytes or c <= 0 for c in cl) or list(cl) != sorted(set(cl)):
                raise KvwearError(
                    f"slab_classes_bytes must be increasing positive multiples of {self.align_bytes}: {cl}")


@dataclass(frozen=True)
class PlanCounts:
    """A plan's accounting (what `stream_block_ops` returns; `BlockPlan` adds the table)."""

    object_write_bytes: int        # Σ bytes of planned writes, as in ssd_ops
    aligned_write_bytes: int       # Σ write lengths in block_ops: policy_write_bytes + relocation_write_bytes
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
    # host writes by cause: the policy's objects (each rounded up to align) and the layout's cleaning
    policy_write_bytes: int = 0
    relocation_write_bytes: int = 0
    relocations: int = 0           # live objects the log cleaner or the slab compactor moved
    relocation_read_bytes: int = 0
    stepped_over: int = 0          # log: live objects the head stepped over in place (no I/O)
    stepped_over_bytes: int = 0
    write_extents: int = 0         # extents written (an object crossing the device end or split: several)
    split_writes: int = 0          # extent: objects spread over more than one hole

    @property
    def ios(self) -> int:
        return self.write_ios + self.read_ios + self.trim_ios

    def accounting(self) -> dict[str, int | str]:
        return {f.name: getattr(self, f.name) for f in fields(PlanCounts)}


@dataclass(frozen=True)
class BlockPlan(PlanCounts):
    """The BLOCK_OPS table and its accounting."""

    table: pa.Table = field(kw_only=True)


# ----------------------------------------------------------------------------------------------
# kernels: each walks the ops once and emits extents into `out` (one column per extent: the ssd_ops
# row whose time it takes, the op, offset, length, and the object index it belongs to — a
# relocation's row is the write that caused it, its object the one moved)

(_S_EMPTY, _S_REWRITES, _S_READ_MISS, _S_EVICT_MISS, _S_FORCED, _S_FORCED_BYTES, _S_PEAK, _S_WRITES,
 _S_RELOC, _S_RELOC_BYTES, _S_SPLIT, _S_STEPPED, _S_STEPPED_BYTES, _S_EXTENTS) = range(14)
_N_STATS = 16
_LOG_RELOCATE, _LOG_EVICT, _LOG_ERROR = 0, 1, 2


@numba.njit(cache=True, inline="always")
def _emit(out, k, row, op, off, ln, obj):
    if k < out.shape[1]:
        out[0, k] = row
        out[1, k] = op
        out[2, k] = off
        out[3, k] = ln
        out[4, k] = obj
    return k + 1


@numba.njit(cache=True)
def _emit_span(out, k, row, op, pos, ln, cap, obj):
    """An extent at `pos` of `ln` bytes, split in two where it crosses the end of the device."""
    if pos + ln <= cap:
        return _emit(out, k, row, op, pos, ln, obj)
    k = _emit(out, k, row, op, pos, cap - pos, obj)
    return _emit(out, k, row, op, 0, ln - (cap - pos), obj)


@numba.njit(cache=True, inline="always")
def _full(info, i, a, live_bytes):
    info[0] = _ERR_FULL
    info[1] = i
    info[2] = a
    info[3] = live_bytes


@numba.njit(cache=True)
def _room(out, k, need):
    """`out`, or a copy at least twice as wide when fewer than `need` columns are left after k: the
    log and slab kernels grow their own output (relocations make its size unknowable beforehand)
    instead of being run a second time with the size the first run counted."""
    if k + need <= out.shape[1]:
        return out
    bigger = np.empty((out.shape[0], max(2 * out.shape[1], k + need)), out.dtype)
    bigger[:, :k] = out[:, :k]
    return bigger


@numba.njit(cache=True)
def _q_push(q_obj, q_cum, qh, qn, v, cum):
    """Append a placement to the ring, doubling it (unrolled from its head) when full; returns
    (q_obj, q_cum, qh, qn)."""
    qsize = q_obj.shape[0]
    if qn == qsize:
        idx = (qh + np.arange(qn)) % qsize
        obj = np.empty(2 * qsize, np.int64)
        cm = np.empty(2 * qsize, np.int64)
        obj[:qn] = q_obj[idx]
        cm[:qn] = q_cum[idx]
        q_obj, q_cum, qh, qsize = obj, cm, 0, 2 * qsize
    q_obj[(qh + qn) % qsize] = v
    q_cum[(qh + qn) % qsize] = cum
    return q_obj, q_cum, qh, qn + 1


@numba.njit(cache=True)
def _plan_log(ops, oid, alen, n_obj, cap, trim, mode, qsize, out, stats, info):
    live = np.zeros(n_obj, np.bool_)
    start = np.zeros(n_obj, np.int64)          # cumulative head position of the live copy
    olen = np.zeros(n_obj, np.int64)
    q_obj = np.empty(qsize, np.int64)           # placements in head order: a ring (FIFO)
    q_cum = np.empty(qsize, np.int64)
    qh = 0
    qn = 0
    cum = 0
    k = 0
    live_bytes = 0
    for i in range(ops.shape[0]):
        o = oid[i]
        a = alen[i]
        op = ops[i]
        out = _room(out, k, 4)                  # an op's own rows: a trim and a write, each in ≤ 2 spans
        if op == 0:
            if a == 0:
                stats[_S_EMPTY] += 1
                continue
            stats[_S_WRITES] += 1
            if live[o]:                         # rewrite: the old copy dies where it is
                stats[_S_REWRITES] += 1
                if trim:
                    k = _emit_span(out, k, i, 2, start[o] % cap, olen[o], cap, o)
                live[o] = False
                live_bytes -= olen[o]
            if mode == _LOG_RELOCATE and live_bytes + a > cap:
                _full(info, i, a, live_bytes)
                return k, out
            end = cum + a
            # live objects whose first byte the head reaches in this lap: clean (relocate), evict or fail
            while qn > 0 and q_cum[qh] + cap < end:
                v = q_obj[qh]
                s = q_cum[qh]
                qh = (qh + 1) % q_obj.shape[0]
                qn -= 1
                if not (live[v] and start[v] == s):
                    continue                    # a dead or superseded placement: its space is free
                lv = olen[v]
                if mode == _LOG_ERROR:
                    info[0] = _ERR_LOG_FULL
                    info[1] = i
                    info[2] = v
                    info[3] = cum % cap
                    info[4] = live_bytes
                    info[5] = a
                    return k, out
                if mode == _LOG_EVICT:
                    live[v] = False
                    live_bytes -= lv
                    stats[_S_FORCED] += 1
                    stats[_S_FORCED_BYTES] += lv
                    continue
                p = s + cap                     # the live copy in this lap's coordinates (p ≥ cum)
                if p == cum:
                    # nothing free before it: the copy already sits where the cleaner would write it
                    stats[_S_STEPPED] += 1
                    stats[_S_STEPPED_BYTES] += lv
                else:
                    out = _room(out, k, 6)      # a read, a trim and a write, each in ≤ 2 spans
                    k = _emit_span(out, k, i, 1, s % cap, lv, cap, v)
                    tail = max(p, cum + lv)     # the part of the old copy the new one does not cover
                    if trim and p + lv > tail:
                        k = _emit_span(out, k, i, 2, tail % cap, p + lv - tail, cap, v)
                    k = _emit_span(out, k, i, 0, cum % cap, lv, cap, v)
                    stats[_S_RELOC] += 1
                    stats[_S_RELOC_BYTES] += lv
                    stats[_S_EXTENTS] += 1
                start[v] = cum
                q_obj, q_cum, qh, qn = _q_push(q_obj, q_cum, qh, qn, v, cum)
                cum += lv
                end = cum + a
            out = _room(out, k, 2)
            k = _emit_span(out, k, i, 0, cum % cap, a, cap, o)
            stats[_S_EXTENTS] += 1
            live[o] = True
            start[o] = cum
            olen[o] = a
            q_obj, q_cum, qh, qn = _q_push(q_obj, q_cum, qh, qn, o, cum)
            cum = end
            live_bytes += a
            if live_bytes > stats[_S_PEAK]:
                stats[_S_PEAK] = live_bytes
        elif op == 1:
            if live[o]:
                k = _emit_span(out, k, i, 1, start[o] % cap, olen[o], cap, o)
            else:
                stats[_S_READ_MISS] += 1
        else:
            if live[o]:
                if trim:
                    k = _emit_span(out, k, i, 2, start[o] % cap, olen[o], cap, o)
                live[o] = False
                live_bytes -= olen[o]
            else:
                stats[_S_EVICT_MISS] += 1
    return k, out


# Slab layout. The device is cut into regions of `region` bytes (slab_bytes); a size class lays its
# slots out back to back in a logical space of its own, mapped region by region onto the device
# (like a file's blocks), so a slot may cross a region boundary (one block_ops row per physical
# piece; neighbouring regions are usually adjacent and the pieces merge). A class's slots are
# [0, hw): a freed slot goes on the class's free stack; a freed top slot lowers hw and the regions
# above it go back to the shared pool at once (empty slabs return). When a class needs a region
# and none is free, the class with the most reclaimable regions is compacted: its top live slot
# is moved into one of its free slots (read, trim when trimming, write: relocation writes), until
# a region is released. So a plan fails only when Σ_classes ⌈live slots·class / region⌉ exceeds
# the device's regions: at most one partly used region per class plus the device's tail
# (capacity mod region) are lost to the layout.


@numba.njit(cache=True)
def _slab_io(out, k, row, op, s, ln, c, obj, cls_size, region, reg_tab, reg_base):
    """The I/O for `ln` bytes of slot s of class c, one row per physically contiguous piece;
    returns (k, out), `out` grown when it had no room for them."""
    out = _room(out, k, ln // region + 2)
    lo = s * cls_size[c]
    first = -1
    run = 0
    while ln > 0:
        r = lo // region
        within = lo % region
        piece = min(region - within, ln)
        phys = reg_tab[reg_base[c] + r] * region + within
        if first >= 0 and first + run == phys:
            run += piece
        else:
            if first >= 0:
                k = _emit(out, k, row, op, first, run, obj)
            first = phys
            run = piece
        lo += piece
        ln -= piece
    if first >= 0:
        k = _emit(out, k, row, op, first, run, obj)
    return k, out


@numba.njit(cache=True)
def _slab_shrink(c, hw, slot_obj, slot_base, n_mapped, cls_size, region, reg_tab, reg_base, free_reg, nfree):
    """Lower class c's hw over free top slots and return the regions above it; returns nfree."""
    b = slot_base[c]
    while hw[c] > 0 and slot_obj[b + hw[c] - 1] < 0:
        hw[c] -= 1
    need = (hw[c] * cls_size[c] + region - 1) // region
    while n_mapped[c] > need:
        n_mapped[c] -= 1
        free_reg[nfree] = reg_tab[reg_base[c] + n_mapped[c]]
        nfree += 1
    return nfree


@numba.njit(cache=True)
def _slab_pop(c, hw, slot_obj, slot_base, fs, fs_top, in_stack):
    """A free slot of class c below hw, or -1; entries made stale by a lower hw are dropped."""
    b = slot_base[c]
    while fs_top[c] > 0:
        fs_top[c] -= 1
        s = fs[b + fs_top[c]]
        in_stack[b + s] = False
        if s < hw[c] and slot_obj[b + s] < 0:
            return s
    return -1


@numba.njit(cache=True)
def _plan_slab(ops, oid, alen, cls, n_obj, cls_size, slot_cap, region, n_reg, trim, out, stats, info):
    nc = cls_size.shape[0]
    live = np.zeros(n_obj, np.bool_)
    oslot = np.zeros(n_obj, np.int64)
    olen = np.zeros(n_obj, np.int64)
    ocls = np.zeros(n_obj, np.int64)
    slot_base = np.zeros(nc + 1, np.int64)
    reg_base = np.zeros(nc + 1, np.int64)
    for c in range(nc):
        slot_base[c + 1] = slot_base[c] + slot_cap[c]
        reg_base[c + 1] = reg_base[c] + (slot_cap[c] * cls_size[c] + region - 1) // region + 1
    slot_obj = np.full(slot_base[nc], -1, np.int64)
    in_stack = np.zeros(slot_base[nc], np.bool_)
    fs = np.empty(slot_base[nc], np.int64)        # per class: stack of freed slots
    fs_top = np.zeros(nc, np.int64)
    hw = np.zeros(nc, np.int64)
    n_live = np.zeros(nc, np.int64)
    n_mapped = np.zeros(nc, np.int64)
    reg_tab = np.empty(reg_base[nc], np.int64)
    free_reg = np.empty(n_reg, np.int64)          # a stack: the lowest region on top
    for j in range(n_reg):
        free_reg[j] = n_reg - 1 - j
    nfree = n_reg
    k = 0
    live_bytes = 0
    for i in range(ops.shape[0]):
        o = oid[i]
        a = alen[i]
        op = ops[i]
        if op == 1:
            if live[o]:
                c = ocls[o]
                k, out = _slab_io(out, k, i, 1, oslot[o], olen[o], c, o, cls_size, region, reg_tab, reg_base)
            else:
                stats[_S_READ_MISS] += 1
            continue
        if op == 0 and a == 0:
            stats[_S_EMPTY] += 1
            continue
        if op == 0:
            stats[_S_WRITES] += 1
        if live[o]:
            if op == 0:
                stats[_S_REWRITES] += 1
            c = ocls[o]
            s = oslot[o]
            if trim:
                k, out = _slab_io(out, k, i, 2, s, olen[o], c, o, cls_size, region, reg_tab, reg_base)
            b = slot_base[c]
            slot_obj[b + s] = -1
            n_live[c] -= 1
            if not in_stack[b + s]:
                fs[b + fs_top[c]] = s
                fs_top[c] += 1
                in_stack[b + s] = True
            nfree = _slab_shrink(c, hw, slot_obj, slot_base, n_mapped, cls_size, region, reg_tab, reg_base,
                                 free_reg, nfree)
            live[o] = False
            live_bytes -= olen[o]
        elif op == 2:
            stats[_S_EVICT_MISS] += 1
            continue
        if op == 2:
            continue
        if live_bytes + a > n_reg * region:
            _full(info, i, a, live_bytes)
            return k, out
        c = cls[i]
        size = cls_size[c]
        b = slot_base[c]
        s = _slab_pop(c, hw, slot_obj, slot_base, fs, fs_top, in_stack)
        if s < 0:
            s = hw[c]
            if s >= slot_cap[c]:
                info[0] = _ERR_GROW
                return k, out
            need = ((s + 1) * size + region - 1) // region - n_mapped[c]
            while nfree < need:
                # compact the class with the most regions beyond what its live slots need
                best = -1
                gain = 0
                for d in range(nc):
                    g = n_mapped[d] - (n_live[d] * cls_size[d] + region - 1) // region
                    if g > gain:
                        gain = g
                        best = d
                if best < 0:
                    info[0] = _ERR_SLAB_FULL
                    info[1] = i
                    info[2] = a
                    info[3] = live_bytes
                    info[4] = need - nfree
                    return k, out
                d = best
                bd = slot_base[d]
                before = n_mapped[d]
                while n_mapped[d] == before:
                    t = hw[d] - 1               # live: _slab_shrink keeps the top slot live
                    f = _slab_pop(d, hw, slot_obj, slot_base, fs, fs_top, in_stack)
                    v = slot_obj[bd + t]
                    k, out = _slab_io(out, k, i, 1, t, olen[v], d, v, cls_size, region, reg_tab, reg_base)
                    if trim:
                        k, out = _slab_io(out, k, i, 2, t, olen[v], d, v, cls_size, region, reg_tab, reg_base)
                    k, out = _slab_io(out, k, i, 0, f, olen[v], d, v, cls_size, region, reg_tab, reg_base)
                    stats[_S_RELOC] += 1
                    stats[_S_RELOC_BYTES] += olen[v]
                    stats[_S_EXTENTS] += 1
                    slot_obj[bd + f] = v
                    oslot[v] = f
                    slot_obj[bd + t] = -1
                    nfree = _slab_shrink(d, hw, slot_obj, slot_base, n_mapped, cls_size, region, reg_tab,
                                         reg_base, free_reg, nfree)
            for _ in range(need):
                nfree -= 1
                reg_tab[reg_base[c] + n_mapped[c]] = free_reg[nfree]
                n_mapped[c] += 1
            hw[c] = s + 1
        slot_obj[b + s] = o
        n_live[c] += 1
        k, out = _slab_io(out, k, i, 0, s, a, c, o, cls_size, region, reg_tab, reg_base)
        stats[_S_EXTENTS] += 1
        live[o] = True
        oslot[o] = s
        olen[o] = a
        ocls[o] = c
        live_bytes += a
        if live_bytes > stats[_S_PEAK]:
            stats[_S_PEAK] = live_bytes
    return k, out


# Extent layout. Holes (free extents) form a doubly linked list in address order. To find the
# first fit and a freed extent's neighbours without walking that list, the address space is cut
# into M chunks (a power of two): chunk_head[c] is the first hole starting in chunk c and a max
# segment tree over chunks holds the longest hole starting in each. First fit = leftmost chunk
# whose max ≥ the size (O(log M)), then a scan of that chunk's few holes. An object that no hole
# holds whole takes the lowest holes in address order (the last one in part), as a file system
# spreads a file over free extents: one extent list per object, one block_ops row per extent.


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
def _hole_free(off, ln, head, h_off, h_len, h_next, h_prev, pool, chunk_head, seg, m, cb):
    """Return [off, off+ln) to the hole list, merging with its neighbours; returns the list head."""
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
    return head


@numba.njit(cache=True)
def _hole_take(h, x, head, h_off, h_len, h_next, h_prev, pool, chunk_head, seg, m, cb):
    """Take the first x bytes of hole h; returns (their offset, the list head)."""
    c = h_off[h] // cb
    off = h_off[h]
    h_off[h] += x
    h_len[h] -= x
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
    return off, head


@numba.njit(cache=True)
def _plan_extent(ops, oid, alen, n_obj, cap, trim, m, ne, out, stats, info):
    live = np.zeros(n_obj, np.bool_)
    ofirst = np.full(n_obj, -1, np.int64)       # the object's extent list
    olen = np.zeros(n_obj, np.int64)
    e_off = np.zeros(ne, np.int64)              # extent records; e_next chains an object's (and the free ones)
    e_len = np.zeros(ne, np.int64)
    e_next = np.empty(ne, np.int64)
    for j in range(ne):
        e_next[j] = j + 1
    e_next[ne - 1] = -1
    e_free = 0
    nh = ne + 2                                 # holes ≤ live extents + 1
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
        if op == 1:
            if live[o]:
                e = ofirst[o]
                while e >= 0:
                    k = _emit(out, k, i, 1, e_off[e], e_len[e], o)
                    e = e_next[e]
            else:
                stats[_S_READ_MISS] += 1
            continue
        if op == 0:
            if a == 0:
                stats[_S_EMPTY] += 1
                continue
            stats[_S_WRITES] += 1
            if live[o]:
                stats[_S_REWRITES] += 1
        elif not live[o]:
            stats[_S_EVICT_MISS] += 1
            continue
        if live[o]:
            # trim and free every extent of the old copy
            e = ofirst[o]
            while e >= 0:
                if trim:
                    k = _emit(out, k, i, 2, e_off[e], e_len[e], o)
                head = _hole_free(e_off[e], e_len[e], head, h_off, h_len, h_next, h_prev, pool, chunk_head,
                                  seg, m, cb)
                nx = e_next[e]
                e_next[e] = e_free
                e_free = e
                e = nx
            ofirst[o] = -1
            live[o] = False
            live_bytes -= olen[o]
        if op != 0:
            continue
        if live_bytes + a > cap:
            _full(info, i, a, live_bytes)
            return k
        r = a
        last = -1
        pieces = 0
        while r > 0:
            if seg[1] >= r:                     # first fit: the lowest hole that holds the rest whole
                j = 1
                while j < m:
                    j = 2 * j if seg[2 * j] >= r else 2 * j + 1
                h = chunk_head[j - m]
                while h_len[h] < r:
                    h = h_next[h]
                x = r
            else:                               # none does: the lowest hole, whole
                h = head
                x = h_len[h]
            if e_free < 0:
                info[0] = _ERR_GROW
                return k
            off, head = _hole_take(h, x, head, h_off, h_len, h_next, h_prev, pool, chunk_head, seg, m, cb)
            e = e_free
            e_free = e_next[e]
            e_off[e] = off
            e_len[e] = x
            e_next[e] = -1
            if last < 0:
                ofirst[o] = e
            else:
                e_next[last] = e
            last = e
            k = _emit(out, k, i, 0, off, x, o)
            pieces += 1
            r -= x
        stats[_S_EXTENTS] += pieces
        if pieces > 1:
            stats[_S_SPLIT] += 1
        live[o] = True
        olen[o] = a
        live_bytes += a
        if live_bytes > stats[_S_PEAK]:
            stats[_S_PEAK] = live_bytes
    return k
# ----------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _split_ios(out, k, mx):
    """The kernel's first k extents (out: row, op, offset, length, obj) cut into I/Os of at most
    `mx` bytes, in one pass (relocating plans have tens of millions of I/Os; numpy's repeat and
    index arithmetic took several passes and temporaries per column): (rows, codes, offsets,
    lengths, objs)."""
    n = 0
    for j in range(k):
        n += (out[3, j] + mx - 1) // mx
    rows = np.empty(n, np.int64)
    codes = np.empty(n, np.int8)
    offs = np.empty(n, np.int64)
    lens = np.empty(n, np.int64)
    objs = np.empty(n, np.int64)
    x = 0
    for j in range(k):
        ln = out[3, j]
        off = out[2, j]
        while ln > 0:
            piece = min(mx, ln)
            rows[x] = out[0, j]
            codes[x] = out[1, j]
            offs[x] = off
            lens[x] = piece
            objs[x] = out[4, j]
            off += piece
            ln -= piece
            x += 1
    return rows, codes, offs, lens, objs


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


def default_slab_classes(align_bytes: int, sizes_bytes: np.ndarray) -> tuple[int, ...]:
    """The slab classes for objects of these aligned sizes: the sizes themselves when there are
    at most SLAB_EXACT_CLASSES of them (a simulator writes a few sizes: one KV chunk, one state,
    so no slot wastes a byte), else memcached's classes — from the alignment, each
    SLAB_GROWTH_FACTOR × the last (rounded up to the alignment), up to the largest size."""
    sizes = np.unique(np.asarray(sizes_bytes, np.int64))
    sizes = sizes[sizes > 0]
    if len(sizes) == 0:
        return (align_bytes,)
    if len(sizes) <= SLAB_EXACT_CLASSES:
        return tuple(int(s) for s in sizes)
    classes = [align_bytes]
    top = int(sizes[-1])
    while classes[-1] < top:
        nxt = -(-int(classes[-1] * SLAB_GROWTH_FACTOR) // align_bytes) * align_bytes
        classes.append(min(max(nxt, classes[-1] + align_bytes), top))
    return tuple(classes)


#: `stream_block_ops` builds block_ops rows and hands them on in chunks of this many extents.
PLAN_CHUNK_EXTENTS = 1 << 20


def plan_block_ops(ssd_ops: pa.Table, config: ReplayConfig, *, source: str = "ssd_ops") -> BlockPlan:
    """Place `ssd_ops` (policies.schema.SSD_OPS rows, in time order) on the device; see the module
    docstring for layouts, rounding and time. Errors name the ssd_ops row (`source`:row) and field.
    The whole table in memory: `stream_block_ops` hands it on in chunks instead."""
    chunks: list[pa.Table] = []
    counts = stream_block_ops(ssd_ops, config, chunks.append, source=source)
    table = pa.concat_tables(chunks) if chunks else BLOCK_OPS.empty()
    return BlockPlan(table=table, **counts.accounting())  # type: ignore[arg-type]


def stream_block_ops(ssd_ops: pa.Table, config: ReplayConfig, sink: Callable[[pa.Table], None], *,
                     source: str = "ssd_ops", chunk_extents: int = PLAN_CHUNK_EXTENTS) -> PlanCounts:
    """`plan_block_ops`, handing the BLOCK_OPS rows to `sink` in order, chunk by chunk (at most
    `chunk_extents` of the kernel's extents each, cut into I/Os): memory holds the ssd_ops columns
    and the kernel's extents (~1 per ssd_ops row), never the I/O rows (several per extent)."""
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
    is_write = ops == 0
    too_big = np.flatnonzero((aligned > cap) & is_write)
    if len(too_big):
        r = int(too_big[0])
        raise InputError(source, r + 1, "bytes",
                         f"object of {nbytes[r]} bytes ({aligned[r]} aligned) exceeds the device "
                         f"capacity of {cap} bytes")
    uniq, first_row, oid = np.unique(obj_id, return_index=True, return_inverse=True)
    oid = oid.astype(np.int64)
    n_obj = len(uniq)
    # an object's aligned size at reads/evicts is the one of its live copy (kept by the kernels)
    trim = bool(config.trim_on_evict)
    nwr = int(is_write.sum())
    units = cap // al

    # kernel(out, stats, info) → (rows, out): log and slab grow `out` (and log its ring) themselves;
    # extent counts the rows it could not store and is run again with room for them (or a larger
    # pool, grow[0], on _ERR_GROW)
    grow = [0]
    if config.layout == "log":
        mode = {"relocate": _LOG_RELOCATE, "evict": _LOG_EVICT, "error": _LOG_ERROR}[config.log_full]
        qsize = min(units + 4, 2 * nwr + 16)     # the kernel doubles its ring when this is short

        def kernel(out: np.ndarray, stats: np.ndarray, info: np.ndarray) -> tuple[int, np.ndarray]:
            return _plan_log(ops, oid, aligned, n_obj, cap, trim, mode, qsize, out, stats, info)
    elif config.layout == "slab":
        written = aligned[is_write & (aligned > 0)]
        classes = np.asarray(config.slab_classes_bytes or default_slab_classes(al, written), np.int64)
        if len(written) and written.max() > classes[-1]:
            r = int(np.flatnonzero((aligned > classes[-1]) & is_write)[0])
            raise InputError(source, r + 1, "bytes",
                             f"object of {aligned[r]} aligned bytes is larger than the largest slab "
                             f"class ({classes[-1]})")
        cls = np.minimum(np.searchsorted(classes, aligned, side="left"), len(classes) - 1).astype(np.int64)
        region = max(al, config.slab_bytes // al * al)
        n_reg = cap // region
        if n_reg == 0:
            raise KvwearError(f"slab layout: capacity {cap} bytes is smaller than one {region}-byte slab")
        writes_per_class = np.bincount(cls[is_write], minlength=len(classes)).astype(np.int64)
        slot_cap = np.minimum(writes_per_class, n_reg * region // classes + 1) + 1

        def kernel(out: np.ndarray, stats: np.ndarray, info: np.ndarray) -> tuple[int, np.ndarray]:
            return _plan_slab(ops, oid, aligned, cls, n_obj, classes, slot_cap, region, n_reg, trim, out, stats, info)
    else:
        m = 1
        while m < min(units, 1 << 18):
            m *= 2
        grow[0] = min(units + 2, 2 * nwr + 16)

        def kernel(out: np.ndarray, stats: np.ndarray, info: np.ndarray) -> tuple[int, np.ndarray]:
            return _plan_extent(ops, oid, aligned, n_obj, cap, trim, m, grow[0], out, stats, info), out

    out_size = 2 * n + 16
    while True:
        out = np.empty((5, out_size), np.int64)        # one row per field: contiguous columns below
        stats = np.zeros(_N_STATS, np.int64)
        info = np.zeros(8, np.int64)
        k, out = kernel(out, stats, info)
        if info[0] == _ERR_GROW:
            if not grow[0]:
                raise KvwearError(f"internal error: the {config.layout} layout ran out of a pool it sizes itself")
            grow[0] *= 2                  # a pool of the kernel's ran out (its size is a guess): rerun
            continue
        if info[0] == 0 and k > out.shape[1]:
            out_size = int(k)             # the kernel counted what it could not store: rerun
            continue
        break
    if info[0]:
        _raise_kernel_error(info, config, source, uniq, t)
    # an object keeps its kind; a relocation's row is the write that caused it, not the object's own
    kinds = ssd_ops.column("obj_kind")
    op_dict = pa.array(list(BLOCK_OP_NAMES))
    t0 = t[0] if n else 0.0
    w_bytes = t_bytes = r_bytes = w_ios = r_ios = t_ios = done = 0
    for a in range(0, k, max(1, chunk_extents)):
        b = min(k, a + max(1, chunk_extents))
        rows, codes, offs, lens, objs = _split_ios(out[:, a:b], b - a, config.max_io_bytes)
        if len(offs) and (offs.min() < 0 or (offs + lens).max() > cap or lens.min() <= 0):
            raise KvwearError("internal error: a planned I/O falls outside [0, capacity_bytes)")
        if config.time_mode == "afap":
            ts = np.arange(done, done + len(rows), dtype=np.float64)
        else:
            ts = t[rows] - t0
            if config.time_mode == "compressed":
                ts = ts / config.time_compression
        done += len(rows)
        kind = kinds.take(pa.array(first_row[objs], pa.int64()))
        sink(BLOCK_OPS.conform(pa.table({
            "t_s": pa.array(ts, pa.float64()),
            "op": pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), op_dict),
            "offset_bytes": pa.array(offs, pa.int64()),
            "length_bytes": pa.array(lens, pa.int64()),
            "obj_kind": kind.combine_chunks() if isinstance(kind, pa.ChunkedArray) else kind,
            "obj_id": pa.array(uniq[objs], pa.int64()),
        })))
        is_w, is_r, is_t = codes == 0, codes == 1, codes == 2
        w_bytes += int(lens[is_w].sum())
        t_bytes += int(lens[is_t].sum())
        r_bytes += int(lens[is_r].sum())
        w_ios += int(is_w.sum())
        r_ios += int(is_r.sum())
        t_ios += int(is_t.sum())
        del rows, codes, offs, lens, objs, ts, kind
    planned_w = is_write & (aligned > 0)
    reloc_bytes = int(stats[_S_RELOC_BYTES])
    plan = PlanCounts(
        object_write_bytes=int(nbytes[planned_w].sum()),
        aligned_write_bytes=w_bytes,
        trim_bytes=t_bytes,
        read_bytes=r_bytes,
        write_ios=w_ios,
        read_ios=r_ios,
        trim_ios=t_ios,
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
        policy_write_bytes=int(aligned[planned_w].sum()),
        relocation_write_bytes=reloc_bytes,
        relocations=int(stats[_S_RELOC]),
        relocation_read_bytes=reloc_bytes,
        stepped_over=int(stats[_S_STEPPED]),
        stepped_over_bytes=int(stats[_S_STEPPED_BYTES]),
        write_extents=int(stats[_S_EXTENTS]),
        split_writes=int(stats[_S_SPLIT]),
    )
    if plan.aligned_write_bytes != plan.policy_write_bytes + reloc_bytes:
        raise KvwearError("internal error: planned write bytes differ from the aligned object bytes + relocations")
    return plan


def _raise_kernel_error(info: np.ndarray, config: ReplayConfig, source: str, uniq: np.ndarray,
                        t: np.ndarray) -> None:
    code, row = int(info[0]), int(info[1])
    cap = config.capacity_bytes
    when = f"t={t[row] - t[0]:.6g} s"
    if code == _ERR_FULL:
        need = int(info[3]) + int(info[2])
        raise InputError(
            source, row + 1, "bytes",
            f"{config.layout} layout: the live bytes exceed the device at {when}: writing {info[2]} bytes "
            f"with {info[3]} live needs {need} of {cap} bytes, short by {need - cap} bytes; give a larger "
            "device (--capacity) or a smaller SSD tier (--ssd)")
    if code == _ERR_LOG_FULL:
        raise InputError(
            source, row + 1, "bytes",
            f"log layout full: writing {info[5]} bytes at head offset {info[3]} would overwrite live "
            f"object {int(uniq[info[2]])} ({info[4]} bytes live of {cap} capacity); use "
            f"log_full='relocate' or 'evict', or a larger device")
    if code == _ERR_SLAB_FULL:
        region = max(config.align_bytes, config.slab_bytes // config.align_bytes * config.align_bytes)
        raise InputError(
            source, row + 1, "bytes",
            f"slab layout: the live slots do not fit at {when}: writing {info[2]} bytes with {info[3]} live "
            f"needs {info[4]} more {region}-byte slab(s) than the {cap // region} the device holds, after "
            "compacting every class (each class keeps at most one slab partly used); give a larger device "
            "(--capacity) or a smaller SSD tier (--ssd)")
    raise KvwearError(f"replay kernel error code {code} at row {row}")
