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

Streaming: ssd_ops are planned in record batches (a table, or a callable giving a Parquet file's
batches), each layout's kernel carrying its state from one batch to the next. What it keeps per
object is kept only while the object is live on the device (a hash table from obj_id to a recycled
slot, with the object's kind: a relocation's block_ops row carries the moved object's kind), so
memory is bounded by the device and one batch, not by the trace. The slab layout reads the
batches twice: its classes come from every write's size. `plan_block_ops` is the same planner
collecting the whole table.

This module plans only: it must not issue I/O, open devices or know about FTLs. The placement
loop is one numba kernel per layout; everything around it is vectorized numpy/pyarrow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Literal, TypeAlias

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.errors import InputError, KvwearError
from kvwear.harness.plan.schema import BLOCK_OPS

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
# kernels: each walks one batch of ops (its state carried from the batch before) and emits extents
# into `out` (one column per extent: the batch row whose time it takes, the op, offset, length, the
# object id it belongs to and that object's kind — a relocation's row is the write that caused it,
# its object and kind the ones moved)

(_S_EMPTY, _S_REWRITES, _S_READ_MISS, _S_EVICT_MISS, _S_FORCED, _S_FORCED_BYTES, _S_PEAK, _S_WRITES,
 _S_RELOC, _S_RELOC_BYTES, _S_SPLIT, _S_STEPPED, _S_STEPPED_BYTES, _S_EXTENTS) = range(14)
_N_STATS = 16
_LOG_RELOCATE, _LOG_EVICT, _LOG_ERROR = 0, 1, 2
_OUT_FIELDS = 6


@numba.njit(cache=True, inline="always")
def _emit(out, k, row, op, off, ln, obj, kind):
    out[0, k] = row
    out[1, k] = op
    out[2, k] = off
    out[3, k] = ln
    out[4, k] = obj
    out[5, k] = kind
    return k + 1


@numba.njit(cache=True)
def _emit_span(out, k, row, op, pos, ln, cap, obj, kind):
    """An extent at `pos` of `ln` bytes, split in two where it crosses the end of the device."""
    if pos + ln <= cap:
        return _emit(out, k, row, op, pos, ln, obj, kind)
    k = _emit(out, k, row, op, pos, cap - pos, obj, kind)
    return _emit(out, k, row, op, 0, ln - (cap - pos), obj, kind)


@numba.njit(cache=True, inline="always")
def _full(info, i, a, live_bytes):
    info[0] = _ERR_FULL
    info[1] = i
    info[2] = a
    info[3] = live_bytes


@numba.njit(cache=True)
def _room(out, k, need):
    """`out`, or a copy at least twice as wide when fewer than `need` columns are left after k: the
    kernels grow their own output (relocations and split writes make its size unknowable beforehand,
    and a kernel cannot be run again on a batch: its state has moved on)."""
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


# The live objects: what a kernel knows per object is held only while the object is resident on
# the device (a trace writes hundreds of millions of objects; a drive holds a few million at most).
# Each live object has a slot, a column of `obj` (its id, kind, aligned length, position — the
# log's head position, the slab's slot, the extent list's first record — and the slab's class);
# an open-addressing table `ht` (linear probing, a power of two, at most half full) maps an id to
# its slot + 1 (0 = empty); a dead object's slot goes on the `free` stack for the next one. `om`
# holds the slots' high-water mark, the free stack's height and the live count. Every array doubles
# when full, so the state is sized by the peak of live objects, never by the trace.
_O_ID, _O_KIND, _O_LEN, _O_POS, _O_CLS = range(5)
_OBJ_FIELDS = 5


@numba.njit(cache=True, inline="always")
def slot_hash(key, mask):
    """Home slot of an int64 key in a power-of-two open-addressing table (`mask` = size − 1);
    shared by the planner's live-object table and the death summary's line table."""
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)      # Fibonacci hashing: ids are often dense
    return np.int64((h ^ (h >> np.uint64(32))) & np.uint64(mask))


@numba.njit(cache=True)
def _ot_find(ht, obj, key):
    """The live slot of object `key`, or -1."""
    mask = ht.shape[0] - 1
    h = slot_hash(key, mask)
    while True:
        s = ht[h]
        if s == 0:
            return -1
        if obj[_O_ID, s - 1] == key:
            return s - 1
        h = (h + 1) & mask


@numba.njit(cache=True)
def _ot_put(ht, obj, s):
    mask = ht.shape[0] - 1
    h = slot_hash(obj[_O_ID, s], mask)
    while ht[h] != 0:
        h = (h + 1) & mask
    ht[h] = s + 1


@numba.njit(cache=True)
def _ot_add(ht, obj, free, om, key, kind):
    """A slot for object `key` (not live): returns (slot, ht, obj, free), grown when full."""
    if 2 * (om[2] + 1) > ht.shape[0]:
        old = ht
        ht = np.zeros(2 * old.shape[0], np.int64)
        for j in range(old.shape[0]):
            if old[j]:
                _ot_put(ht, obj, old[j] - 1)
    if om[1] > 0:
        om[1] -= 1
        s = free[om[1]]
    else:
        if om[0] == obj.shape[1]:
            bigger = np.zeros((obj.shape[0], 2 * obj.shape[1]), np.int64)
            bigger[:, :om[0]] = obj[:, :om[0]]
            obj = bigger
            free = np.empty(obj.shape[1], np.int64)     # empty: om[1] is 0 here
        s = om[0]
        om[0] += 1
    obj[_O_ID, s] = key
    obj[_O_KIND, s] = kind
    _ot_put(ht, obj, s)
    om[2] += 1
    return s, ht, obj, free


@numba.njit(cache=True)
def _ot_del(ht, obj, free, om, s):
    """Object in slot s is no longer live: its table entry goes (backward-shift deletion, so no
    tombstones accumulate) and its slot on the free stack."""
    mask = ht.shape[0] - 1
    i = slot_hash(obj[_O_ID, s], mask)
    while ht[i] != s + 1:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        if ht[j] == 0:
            break
        h = slot_hash(obj[_O_ID, ht[j] - 1], mask)
        # the entry at j stays unless its home h lies cyclically outside (i, j]
        if (i <= j and (h <= i or h > j)) or (i > j and (h <= i and h > j)):
            ht[i] = ht[j]
            i = j
    ht[i] = 0
    free[om[1]] = s
    om[1] += 1
    om[2] -= 1


def _live_objects() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An empty live-object table: (ht, obj, free, om)."""
    return (np.zeros(1 << 10, np.int64), np.zeros((_OBJ_FIELDS, 1 << 9), np.int64),
            np.empty(1 << 9, np.int64), np.zeros(3, np.int64))


@numba.njit(cache=True)
def _plan_log(ops, ids, alen, kinds, cap, trim, mode, out, stats, info, st, ht, obj, free, om, q_obj, q_cum):
    """One batch on the log; st = (cum, live_bytes, qh, qn) carried across batches. The ring holds
    placements (slot, cumulative head position) in head order; a placement is current while its
    slot's position is that one (a dead object's slot is set to -1, and a later placement of any
    object in that slot starts further on).
    Returns (k, out, ht, obj, free, q_obj, q_cum)."""
    cum = st[0]
    live_bytes = st[1]
    qh = st[2]
    qn = st[3]
    k = 0
    for i in range(ops.shape[0]):
        key = ids[i]
        a = alen[i]
        op = ops[i]
        o = _ot_find(ht, obj, key)
        out = _room(out, k, 4)                  # an op's own rows: a trim and a write, each in ≤ 2 spans
        if op == 0:
            if a == 0:
                stats[_S_EMPTY] += 1
                continue
            stats[_S_WRITES] += 1
            if o >= 0:                          # rewrite: the old copy dies where it is
                stats[_S_REWRITES] += 1
                if trim:
                    k = _emit_span(out, k, i, 2, obj[_O_POS, o] % cap, obj[_O_LEN, o], cap, key, obj[_O_KIND, o])
                live_bytes -= obj[_O_LEN, o]
                obj[_O_POS, o] = -1             # the slot stays, its old placement is no longer current
            if mode == _LOG_RELOCATE and live_bytes + a > cap:
                _full(info, i, a, live_bytes)
                break
            end = cum + a
            # live objects whose first byte the head reaches in this lap: clean (relocate), evict or fail
            failed = False
            while qn > 0 and q_cum[qh] + cap < end:
                v = q_obj[qh]
                s = q_cum[qh]
                qh = (qh + 1) % q_obj.shape[0]
                qn -= 1
                if obj[_O_POS, v] != s:
                    continue                    # a dead or superseded placement: its space is free
                lv = obj[_O_LEN, v]
                if mode == _LOG_ERROR:
                    info[0] = _ERR_LOG_FULL
                    info[1] = i
                    info[2] = obj[_O_ID, v]
                    info[3] = cum % cap
                    info[4] = live_bytes
                    info[5] = a
                    failed = True
                    break
                if mode == _LOG_EVICT:
                    live_bytes -= lv
                    stats[_S_FORCED] += 1
                    stats[_S_FORCED_BYTES] += lv
                    _ot_del(ht, obj, free, om, v)
                    obj[_O_POS, v] = -1
                    continue
                p = s + cap                     # the live copy in this lap's coordinates (p ≥ cum)
                if p == cum:
                    # nothing free before it: the copy already sits where the cleaner would write it
                    stats[_S_STEPPED] += 1
                    stats[_S_STEPPED_BYTES] += lv
                else:
                    out = _room(out, k, 6)      # a read, a trim and a write, each in ≤ 2 spans
                    vid = obj[_O_ID, v]
                    vk = obj[_O_KIND, v]
                    k = _emit_span(out, k, i, 1, s % cap, lv, cap, vid, vk)
                    tail = max(p, cum + lv)     # the part of the old copy the new one does not cover
                    if trim and p + lv > tail:
                        k = _emit_span(out, k, i, 2, tail % cap, p + lv - tail, cap, vid, vk)
                    k = _emit_span(out, k, i, 0, cum % cap, lv, cap, vid, vk)
                    stats[_S_RELOC] += 1
                    stats[_S_RELOC_BYTES] += lv
                    stats[_S_EXTENTS] += 1
                obj[_O_POS, v] = cum
                q_obj, q_cum, qh, qn = _q_push(q_obj, q_cum, qh, qn, v, cum)
                cum += lv
                end = cum + a
            if failed:
                break
            if o < 0:
                o, ht, obj, free = _ot_add(ht, obj, free, om, key, kinds[i])
            obj[_O_KIND, o] = kinds[i]
            out = _room(out, k, 2)
            k = _emit_span(out, k, i, 0, cum % cap, a, cap, key, kinds[i])
            stats[_S_EXTENTS] += 1
            obj[_O_POS, o] = cum
            obj[_O_LEN, o] = a
            q_obj, q_cum, qh, qn = _q_push(q_obj, q_cum, qh, qn, o, cum)
            cum = end
            live_bytes += a
            if live_bytes > stats[_S_PEAK]:
                stats[_S_PEAK] = live_bytes
        elif op == 1:
            if o >= 0:
                k = _emit_span(out, k, i, 1, obj[_O_POS, o] % cap, obj[_O_LEN, o], cap, key, obj[_O_KIND, o])
            else:
                stats[_S_READ_MISS] += 1
        else:
            if o >= 0:
                if trim:
                    k = _emit_span(out, k, i, 2, obj[_O_POS, o] % cap, obj[_O_LEN, o], cap, key, obj[_O_KIND, o])
                live_bytes -= obj[_O_LEN, o]
                _ot_del(ht, obj, free, om, o)
                obj[_O_POS, o] = -1
            else:
                stats[_S_EVICT_MISS] += 1
    st[0] = cum
    st[1] = live_bytes
    st[2] = qh
    st[3] = qn
    return k, out, ht, obj, free, q_obj, q_cum


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
def _slab_io(out, k, row, op, s, ln, c, obj, kind, cls_size, region, reg_tab, reg_base):
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
                k = _emit(out, k, row, op, first, run, obj, kind)
            first = phys
            run = piece
        lo += piece
        ln -= piece
    if first >= 0:
        k = _emit(out, k, row, op, first, run, obj, kind)
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


def _slab_state(cls_size: np.ndarray, slot_cap: np.ndarray, region: int, n_reg: int) -> dict[str, np.ndarray]:
    """The slab layout's arrays (sized by the classes' slot capacities and the device's regions):
    class c's slots are slot_base[c] … slot_base[c+1] − 1 of slot_obj (the live-object slot in each,
    -1 = free), its regions reg_base[c] … of reg_tab; st = (free regions, live bytes)."""
    nc = len(cls_size)
    slot_base = np.zeros(nc + 1, np.int64)
    reg_base = np.zeros(nc + 1, np.int64)
    slot_base[1:] = np.cumsum(slot_cap)
    reg_base[1:] = np.cumsum((slot_cap * cls_size + region - 1) // region + 1)
    n_slots = int(slot_base[nc])
    return {"slot_base": slot_base, "reg_base": reg_base, "slot_obj": np.full(n_slots, -1, np.int64),
            "in_stack": np.zeros(n_slots, np.bool_), "fs": np.empty(n_slots, np.int64),
            "fs_top": np.zeros(nc, np.int64), "hw": np.zeros(nc, np.int64), "n_live": np.zeros(nc, np.int64),
            "n_mapped": np.zeros(nc, np.int64), "reg_tab": np.empty(int(reg_base[nc]), np.int64),
            "free_reg": np.arange(n_reg - 1, -1, -1, dtype=np.int64),  # a stack: the lowest region on top
            "st": np.array([n_reg, 0], np.int64)}


@numba.njit(cache=True)
def _plan_slab(ops, ids, alen, kinds, cls, cls_size, slot_cap, region, n_reg, trim, out, stats, info,
               ht, obj, free, om, slot_base, reg_base, slot_obj, in_stack, fs, fs_top, hw, n_live, n_mapped,
               reg_tab, free_reg, st):
    """One batch on the slabs (the state in _slab_state's arrays); returns (k, out, ht, obj, free)."""
    nc = cls_size.shape[0]
    nfree = st[0]
    live_bytes = st[1]
    k = 0
    for i in range(ops.shape[0]):
        key = ids[i]
        a = alen[i]
        op = ops[i]
        o = _ot_find(ht, obj, key)
        if op == 1:
            if o >= 0:
                k, out = _slab_io(out, k, i, 1, obj[_O_POS, o], obj[_O_LEN, o], obj[_O_CLS, o], key,
                                  obj[_O_KIND, o], cls_size, region, reg_tab, reg_base)
            else:
                stats[_S_READ_MISS] += 1
            continue
        if op == 0 and a == 0:
            stats[_S_EMPTY] += 1
            continue
        if op == 0:
            stats[_S_WRITES] += 1
        if o >= 0:
            if op == 0:
                stats[_S_REWRITES] += 1
            c = obj[_O_CLS, o]
            s = obj[_O_POS, o]
            if trim:
                k, out = _slab_io(out, k, i, 2, s, obj[_O_LEN, o], c, key, obj[_O_KIND, o], cls_size, region,
                                  reg_tab, reg_base)
            b = slot_base[c]
            slot_obj[b + s] = -1
            n_live[c] -= 1
            if not in_stack[b + s]:
                fs[b + fs_top[c]] = s
                fs_top[c] += 1
                in_stack[b + s] = True
            nfree = _slab_shrink(c, hw, slot_obj, slot_base, n_mapped, cls_size, region, reg_tab, reg_base,
                                 free_reg, nfree)
            live_bytes -= obj[_O_LEN, o]
            _ot_del(ht, obj, free, om, o)
        elif op == 2:
            stats[_S_EVICT_MISS] += 1
            continue
        if op == 2:
            continue
        if live_bytes + a > n_reg * region:
            _full(info, i, a, live_bytes)
            break
        c = cls[i]
        size = cls_size[c]
        b = slot_base[c]
        s = _slab_pop(c, hw, slot_obj, slot_base, fs, fs_top, in_stack)
        if s < 0:
            s = hw[c]
            if s >= slot_cap[c]:
                info[0] = _ERR_GROW
                break
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
                    break
                d = best
                bd = slot_base[d]
                before = n_mapped[d]
                while n_mapped[d] == before:
                    t = hw[d] - 1               # live: _slab_shrink keeps the top slot live
                    f = _slab_pop(d, hw, slot_obj, slot_base, fs, fs_top, in_stack)
                    v = slot_obj[bd + t]
                    lv = obj[_O_LEN, v]
                    vid = obj[_O_ID, v]
                    vk = obj[_O_KIND, v]
                    k, out = _slab_io(out, k, i, 1, t, lv, d, vid, vk, cls_size, region, reg_tab, reg_base)
                    if trim:
                        k, out = _slab_io(out, k, i, 2, t, lv, d, vid, vk, cls_size, region, reg_tab, reg_base)
                    k, out = _slab_io(out, k, i, 0, f, lv, d, vid, vk, cls_size, region, reg_tab, reg_base)
                    stats[_S_RELOC] += 1
                    stats[_S_RELOC_BYTES] += lv
                    stats[_S_EXTENTS] += 1
                    slot_obj[bd + f] = v
                    obj[_O_POS, v] = f
                    slot_obj[bd + t] = -1
                    nfree = _slab_shrink(d, hw, slot_obj, slot_base, n_mapped, cls_size, region, reg_tab,
                                         reg_base, free_reg, nfree)
            if info[0]:
                break
            for _ in range(need):
                nfree -= 1
                reg_tab[reg_base[c] + n_mapped[c]] = free_reg[nfree]
                n_mapped[c] += 1
            hw[c] = s + 1
        o, ht, obj, free = _ot_add(ht, obj, free, om, key, kinds[i])
        slot_obj[b + s] = o
        n_live[c] += 1
        k, out = _slab_io(out, k, i, 0, s, a, c, key, kinds[i], cls_size, region, reg_tab, reg_base)
        stats[_S_EXTENTS] += 1
        obj[_O_POS, o] = s
        obj[_O_LEN, o] = a
        obj[_O_CLS, o] = c
        live_bytes += a
        if live_bytes > stats[_S_PEAK]:
            stats[_S_PEAK] = live_bytes
    st[0] = nfree
    st[1] = live_bytes
    return k, out, ht, obj, free


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


def _extent_state(cap: int, units: int) -> dict[str, np.ndarray]:
    """The extent layout's arrays: extent records E (offset, length, next: an object's list, and
    the free ones'), holes H (offset, length, next, prev) and their record pool (pool[0] = count of
    unused records in pool[1:]), the chunks' segment tree and heads; st = (hole list head, first
    free extent record, live bytes). The records start small and double with the live extents
    (_extent_grow): never more holes than live extents + 1."""
    m = 1
    while m < min(units, 1 << 18):
        m *= 2
    ne = min(units + 2, 1 << 12)
    E = np.zeros((3, ne), np.int64)
    E[2] = np.arange(1, ne + 1)
    E[2, ne - 1] = -1
    nh = ne + 2
    H = np.full((4, nh), -1, np.int64)
    H[0:2] = 0
    pool = np.empty(nh + 1, np.int64)
    pool[0] = nh - 1
    pool[1:nh] = np.arange(1, nh)
    H[1, 0] = cap                               # one hole: the whole device
    seg = np.zeros(2 * m, np.int64)
    chunk_head = np.full(m, -1, np.int64)
    chunk_head[0] = 0
    _seg_set(seg, m, 0, cap)
    return {"E": E, "H": H, "pool": pool, "seg": seg, "chunk_head": chunk_head, "m": np.array([m]),
            "st": np.array([0, 0, 0], np.int64)}


@numba.njit(cache=True)
def _extent_grow(E, H, pool):
    """Twice the extent records (the new ones free, chained) and holes to match; returns
    (E, H, pool, first free extent record)."""
    ne = E.shape[1]
    E2 = np.zeros((3, 2 * ne), np.int64)
    E2[:, :ne] = E
    for j in range(ne, 2 * ne):
        E2[2, j] = j + 1
    E2[2, 2 * ne - 1] = -1
    nh = H.shape[1]
    nh2 = 2 * ne + 2
    H2 = np.full((4, nh2), -1, np.int64)
    H2[:, :nh] = H
    H2[0:2, nh:] = 0
    pool2 = np.empty(nh2 + 1, np.int64)
    c = pool[0]
    pool2[:c + 1] = pool[:c + 1]
    for j in range(nh, nh2):
        c += 1
        pool2[c] = j
    pool2[0] = c
    return E2, H2, pool2, ne


@numba.njit(cache=True)
def _plan_extent(ops, ids, alen, kinds, cap, trim, m, out, stats, info, ht, obj, free, om, E, H, pool, seg,
                 chunk_head, st):
    """One batch on the extents (the state in _extent_state's arrays); returns
    (k, out, ht, obj, free, E, H, pool)."""
    e_off, e_len, e_next = E[0], E[1], E[2]
    h_off, h_len, h_next, h_prev = H[0], H[1], H[2], H[3]
    cb = (cap + m - 1) // m                     # chunk bytes
    head = st[0]
    e_free = st[1]
    live_bytes = st[2]
    k = 0
    for i in range(ops.shape[0]):
        key = ids[i]
        a = alen[i]
        op = ops[i]
        o = _ot_find(ht, obj, key)
        if op == 1:
            if o >= 0:
                e = obj[_O_POS, o]
                kd = obj[_O_KIND, o]
                while e >= 0:
                    out = _room(out, k, 1)
                    k = _emit(out, k, i, 1, e_off[e], e_len[e], key, kd)
                    e = e_next[e]
            else:
                stats[_S_READ_MISS] += 1
            continue
        if op == 0:
            if a == 0:
                stats[_S_EMPTY] += 1
                continue
            stats[_S_WRITES] += 1
            if o >= 0:
                stats[_S_REWRITES] += 1
        elif o < 0:
            stats[_S_EVICT_MISS] += 1
            continue
        if o >= 0:
            # trim and free every extent of the old copy
            e = obj[_O_POS, o]
            kd = obj[_O_KIND, o]
            while e >= 0:
                if trim:
                    out = _room(out, k, 1)
                    k = _emit(out, k, i, 2, e_off[e], e_len[e], key, kd)
                head = _hole_free(e_off[e], e_len[e], head, h_off, h_len, h_next, h_prev, pool, chunk_head,
                                  seg, m, cb)
                nx = e_next[e]
                e_next[e] = e_free
                e_free = e
                e = nx
            live_bytes -= obj[_O_LEN, o]
            _ot_del(ht, obj, free, om, o)
        if op != 0:
            continue
        if live_bytes + a > cap:
            _full(info, i, a, live_bytes)
            break
        o, ht, obj, free = _ot_add(ht, obj, free, om, key, kinds[i])
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
                E, H, pool, e_free = _extent_grow(E, H, pool)
                e_off, e_len, e_next = E[0], E[1], E[2]
                h_off, h_len, h_next, h_prev = H[0], H[1], H[2], H[3]
            off, head = _hole_take(h, x, head, h_off, h_len, h_next, h_prev, pool, chunk_head, seg, m, cb)
            e = e_free
            e_free = e_next[e]
            e_off[e] = off
            e_len[e] = x
            e_next[e] = -1
            if last < 0:
                obj[_O_POS, o] = e
            else:
                e_next[last] = e
            last = e
            out = _room(out, k, 1)
            k = _emit(out, k, i, 0, off, x, key, kinds[i])
            pieces += 1
            r -= x
        stats[_S_EXTENTS] += pieces
        if pieces > 1:
            stats[_S_SPLIT] += 1
        obj[_O_LEN, o] = a
        live_bytes += a
        if live_bytes > stats[_S_PEAK]:
            stats[_S_PEAK] = live_bytes
    st[0] = head
    st[1] = e_free
    st[2] = live_bytes
    return k, out, ht, obj, free, E, H, pool
# ----------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _split_ios(out, k, mx):
    """The kernel's first k extents (out: row, op, offset, length, obj, kind) cut into I/Os of at
    most `mx` bytes, in one pass (relocating plans have tens of millions of I/Os; numpy's repeat and
    index arithmetic took several passes and temporaries per column): (rows, codes, offsets,
    lengths, objs, kinds)."""
    n = 0
    for j in range(k):
        n += (out[3, j] + mx - 1) // mx
    rows = np.empty(n, np.int64)
    codes = np.empty(n, np.int8)
    offs = np.empty(n, np.int64)
    lens = np.empty(n, np.int64)
    objs = np.empty(n, np.int64)
    kinds = np.empty(n, np.int8)
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
            kinds[x] = out[5, j]
            off += piece
            ln -= piece
            x += 1
    return rows, codes, offs, lens, objs, kinds


def _column_np(batch: pa.RecordBatch, name: str, source: str, base: int, dtype: type) -> np.ndarray:
    col = batch.column(name)
    if col.null_count:
        row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
        raise InputError(source, base + row + 1, name, "missing value")
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=dtype)


def _decode_ops(batch: pa.RecordBatch, source: str, base: int) -> np.ndarray:
    col = batch.column("op")
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    idx = pc.index_in(col, value_set=pa.array(list(_SSD_OPS)))
    if idx.null_count:
        row = int(np.flatnonzero(pc.is_null(idx).to_numpy(zero_copy_only=False))[0])
        raise InputError(source, base + row + 1, "op",
                         f"unknown op {col[row].as_py()!r}; valid: {', '.join(_SSD_OPS)}")
    return np.asarray(idx.to_numpy(zero_copy_only=False), dtype=np.int8)


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
#: ssd_ops rows the planner takes at a time (a larger batch from the source is sliced to it).
PLAN_BATCH_ROWS = 1 << 16

#: ssd_ops for the planner: a table, or a callable giving its record batches in order afresh on
#: each call (the slab layout reads them twice: its classes come from every write's size).
SsdOps: TypeAlias = "pa.Table | Callable[[], Iterable[pa.RecordBatch]]"


@dataclass(frozen=True)
class _Batch:
    """One batch of ssd_ops, checked: `base` is the global row of its first row."""

    base: int
    ops: np.ndarray
    obj_id: np.ndarray
    nbytes: np.ndarray
    aligned: np.ndarray
    t: np.ndarray
    kind: np.ndarray


def _checked_batches(ssd_ops: SsdOps, config: ReplayConfig, source: str, batch_rows: int,
                     kind_names: list[str]) -> Iterator[_Batch]:
    """The ssd_ops batches in order, each checked (errors name the global row and the field);
    `kind_names` collects the object kinds in order of appearance (a dictionary column's own order
    first), and each batch's `kind` holds indices into it."""
    cap = config.capacity_bytes
    al = config.align_bytes
    kind_index = {v: j for j, v in enumerate(kind_names)}
    batches: Iterable[pa.RecordBatch] = (ssd_ops.to_batches(max_chunksize=batch_rows)
                                         if isinstance(ssd_ops, pa.Table) else ssd_ops())
    base = 0
    last_t: float | None = None
    for whole in batches:
        for at in range(0, whole.num_rows, max(1, batch_rows)):
            batch = whole.slice(at, batch_rows)
            n = batch.num_rows
            ops = _decode_ops(batch, source, base)
            obj_id = _column_np(batch, "obj_id", source, base, np.int64)
            nbytes = _column_np(batch, "bytes", source, base, np.int64)
            t = _column_np(batch, "t_s", source, base, np.float64)
            bad = np.flatnonzero(~np.isfinite(t))
            if len(bad):
                raise InputError(source, base + int(bad[0]) + 1, "t_s", f"not a finite time: {t[bad[0]]}")
            if last_t is not None and t[0] < last_t:
                raise InputError(source, base + 1, "t_s", f"time goes backwards ({t[0]} after {last_t})")
            back = np.flatnonzero(np.diff(t) < 0)
            if len(back):
                r = int(back[0]) + 1
                raise InputError(source, base + r + 1, "t_s", f"time goes backwards ({t[r]} after {t[r - 1]})")
            neg = np.flatnonzero(nbytes < 0)
            if len(neg):
                raise InputError(source, base + int(neg[0]) + 1, "bytes", f"negative size {nbytes[neg[0]]}")
            aligned = (nbytes + (al - 1)) // al * al
            too_big = np.flatnonzero((aligned > cap) & (ops == 0))
            if len(too_big):
                r = int(too_big[0])
                raise InputError(source, base + r + 1, "bytes",
                                 f"object of {nbytes[r]} bytes ({aligned[r]} aligned) exceeds the device "
                                 f"capacity of {cap} bytes")
            col = batch.column("obj_kind")
            if col.null_count:
                row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
                raise InputError(source, base + row + 1, "obj_kind", "missing value")
            enc = col if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)
            for v in enc.dictionary.to_pylist():
                if v not in kind_index:
                    kind_index[v] = len(kind_names)
                    kind_names.append(v)
            remap = np.array([kind_index[v] for v in enc.dictionary.to_pylist()], np.int64)
            kind = remap[np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)] if n else remap[:0]
            yield _Batch(base, ops, obj_id, nbytes, aligned, t, kind)
            base += n
            last_t = float(t[-1]) if n else last_t


def plan_block_ops(ssd_ops: SsdOps, config: ReplayConfig, *, source: str = "ssd_ops",
                   batch_rows: int = PLAN_BATCH_ROWS) -> BlockPlan:
    """Place `ssd_ops` (kvwear.policies.schema.SSD_OPS rows, in time order) on the device; see the module
    docstring for layouts, rounding and time. Errors name the ssd_ops row (`source`:row) and field.
    The whole plan in memory: `stream_block_ops` hands it on in chunks instead."""
    chunks: list[pa.Table] = []
    counts = stream_block_ops(ssd_ops, config, chunks.append, source=source, batch_rows=batch_rows)
    table = pa.concat_tables(chunks) if chunks else BLOCK_OPS.empty()
    return BlockPlan(table=table, **counts.accounting())  # type: ignore[arg-type]


class _Layout:
    """One layout's kernel and the state it carries from batch to batch."""

    def __init__(self, config: ReplayConfig, ssd_ops: SsdOps, source: str, batch_rows: int) -> None:
        self.config = config
        self.source = source
        cap = config.capacity_bytes
        al = config.align_bytes
        units = cap // al
        self.ht, self.obj, self.free, self.om = _live_objects()
        if config.layout == "log":
            self.mode = {"relocate": _LOG_RELOCATE, "evict": _LOG_EVICT, "error": _LOG_ERROR}[config.log_full]
            qsize = min(units + 4, 1 << 12)      # the kernel doubles its ring when this is short
            self.q_obj = np.empty(qsize, np.int64)
            self.q_cum = np.empty(qsize, np.int64)
            self.st = np.zeros(4, np.int64)
        elif config.layout == "slab":
            # the classes come from every write's aligned size: a pass over the sizes first
            counts: dict[int, int] = {}
            for b in _checked_batches(ssd_ops, config, source, batch_rows, []):
                sizes, n = np.unique(b.aligned[b.ops == 0], return_counts=True)
                for s, c in zip(sizes.tolist(), n.tolist(), strict=True):
                    counts[s] = counts.get(s, 0) + c
            sizes = np.array(sorted(counts), np.int64)
            written = sizes[sizes > 0]
            self.classes = np.asarray(config.slab_classes_bytes or default_slab_classes(al, written), np.int64)
            self.region = max(al, config.slab_bytes // al * al)
            self.n_reg = cap // self.region
            if self.n_reg == 0:
                raise KvwearError(f"slab layout: capacity {cap} bytes is smaller than one {self.region}-byte slab")
            cls = np.minimum(np.searchsorted(self.classes, sizes, side="left"), len(self.classes) - 1)
            writes_per_class = np.bincount(cls, weights=[counts[int(s)] for s in sizes],
                                           minlength=len(self.classes)).astype(np.int64)
            self.slot_cap = np.minimum(writes_per_class, self.n_reg * self.region // self.classes + 1) + 1
            self.slab = _slab_state(self.classes, self.slot_cap, self.region, self.n_reg)
        else:
            self.ext = _extent_state(cap, units)
        self.stats = np.zeros(_N_STATS, np.int64)
        self.info = np.zeros(8, np.int64)
        self.out = np.empty((_OUT_FIELDS, 1 << 12), np.int64)

    def place(self, b: _Batch) -> int:
        """Run the kernel over batch b: its extents are self.out[:, :k]; returns k."""
        c = self.config
        cap = c.capacity_bytes
        trim = bool(c.trim_on_evict)
        if c.layout == "log":
            k, self.out, self.ht, self.obj, self.free, self.q_obj, self.q_cum = _plan_log(
                b.ops, b.obj_id, b.aligned, b.kind, cap, trim, self.mode, self.out, self.stats, self.info,
                self.st, self.ht, self.obj, self.free, self.om, self.q_obj, self.q_cum)
        elif c.layout == "slab":
            classes = self.classes
            big = np.flatnonzero((b.aligned > classes[-1]) & (b.ops == 0))
            if len(big):
                r = int(big[0])
                raise InputError(self.source, b.base + r + 1, "bytes",
                                 f"object of {b.aligned[r]} aligned bytes is larger than the largest slab "
                                 f"class ({classes[-1]})")
            cls = np.minimum(np.searchsorted(classes, b.aligned, side="left"), len(classes) - 1).astype(np.int64)
            s = self.slab
            k, self.out, self.ht, self.obj, self.free = _plan_slab(
                b.ops, b.obj_id, b.aligned, b.kind, cls, classes, self.slot_cap, self.region, self.n_reg, trim,
                self.out, self.stats, self.info, self.ht, self.obj, self.free, self.om, s["slot_base"],
                s["reg_base"], s["slot_obj"], s["in_stack"], s["fs"], s["fs_top"], s["hw"], s["n_live"],
                s["n_mapped"], s["reg_tab"], s["free_reg"], s["st"])
            if self.info[0] == _ERR_GROW:
                raise KvwearError("internal error: the slab layout ran out of the slots it sized from the writes")
        else:
            e = self.ext
            k, self.out, self.ht, self.obj, self.free, e["E"], e["H"], e["pool"] = _plan_extent(
                b.ops, b.obj_id, b.aligned, b.kind, cap, trim, int(e["m"][0]), self.out, self.stats, self.info,
                self.ht, self.obj, self.free, self.om, e["E"], e["H"], e["pool"], e["seg"], e["chunk_head"],
                e["st"])
        return int(k)


def stream_block_ops(ssd_ops: SsdOps, config: ReplayConfig, sink: Callable[[pa.Table], None], *,
                     source: str = "ssd_ops", chunk_extents: int = PLAN_CHUNK_EXTENTS,
                     batch_rows: int = PLAN_BATCH_ROWS) -> PlanCounts:
    """`plan_block_ops`, handing the BLOCK_OPS rows to `sink` in order, chunk by chunk (at most
    `chunk_extents` of the kernel's extents each, cut into I/Os). The ssd_ops are read `batch_rows`
    at a time and the layout's state carries over from batch to batch, so memory holds one batch,
    one chunk and the live objects' state (bounded by the device), never the whole trace."""
    cap = config.capacity_bytes
    mx = config.max_io_bytes
    kind_names: list[str] = []
    layout = _Layout(config, ssd_ops, source, batch_rows)
    op_dict = pa.array(list(BLOCK_OP_NAMES))
    parts: list[tuple[np.ndarray, ...]] = []
    pending = 0
    n = obj_bytes = policy_bytes = done = 0
    acc = np.zeros(6, np.int64)              # write, trim, read bytes; write, read, trim I/Os
    t0: float | None = None

    def flush() -> None:
        nonlocal parts, pending
        if not parts:
            return
        ts, codes, offs, lens, objs, kinds = (np.concatenate(c) for c in zip(*parts, strict=True))
        parts, pending = [], 0
        if len(offs) and (offs.min() < 0 or (offs + lens).max() > cap or lens.min() <= 0):
            raise KvwearError("internal error: a planned I/O falls outside [0, capacity_bytes)")
        is_w, is_r, is_t = codes == 0, codes == 1, codes == 2
        acc[:] += (int(lens[is_w].sum()), int(lens[is_t].sum()), int(lens[is_r].sum()),
                   int(is_w.sum()), int(is_r.sum()), int(is_t.sum()))
        sink(BLOCK_OPS.conform(pa.table({
            "t_s": pa.array(ts, pa.float64()),
            "op": pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), op_dict),
            "offset_bytes": pa.array(offs, pa.int64()),
            "length_bytes": pa.array(lens, pa.int64()),
            "obj_kind": pa.DictionaryArray.from_arrays(pa.array(kinds, pa.int8()), pa.array(kind_names, pa.string())),
            "obj_id": pa.array(objs, pa.int64()),
        })))

    for b in _checked_batches(ssd_ops, config, source, batch_rows, kind_names):
        if t0 is None and len(b.t):
            t0 = float(b.t[0])
        k = layout.place(b)
        if layout.info[0]:
            _raise_kernel_error(layout.info, config, source, b, t0 or 0.0)
        n += len(b.ops)
        planned_w = (b.ops == 0) & (b.aligned > 0)
        obj_bytes += int(b.nbytes[planned_w].sum())
        policy_bytes += int(b.aligned[planned_w].sum())
        j = 0
        while j < k:
            take = min(k - j, max(1, chunk_extents) - pending)
            rows, codes, offs, lens, objs, kinds = _split_ios(layout.out[:, j:j + take], take, mx)
            if config.time_mode == "afap":
                ts = np.arange(done, done + len(rows), dtype=np.float64)
            else:
                ts = b.t[rows] - (t0 or 0.0)
                if config.time_mode == "compressed":
                    ts = ts / config.time_compression
            done += len(rows)
            parts.append((ts, codes, offs, lens, objs, kinds))
            pending += take
            j += take
            if pending >= max(1, chunk_extents):
                flush()
    flush()
    stats = layout.stats
    reloc_bytes = int(stats[_S_RELOC_BYTES])
    plan = PlanCounts(
        object_write_bytes=obj_bytes,
        aligned_write_bytes=int(acc[0]),
        trim_bytes=int(acc[1]),
        read_bytes=int(acc[2]),
        write_ios=int(acc[3]),
        read_ios=int(acc[4]),
        trim_ios=int(acc[5]),
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
        policy_write_bytes=policy_bytes,
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


def _raise_kernel_error(info: np.ndarray, config: ReplayConfig, source: str, b: _Batch, t0: float) -> None:
    code, row = int(info[0]), int(info[1])
    cap = config.capacity_bytes
    when = f"t={b.t[row] - t0:.6g} s"
    line = b.base + row + 1
    if code == _ERR_FULL:
        need = int(info[3]) + int(info[2])
        raise InputError(
            source, line, "bytes",
            f"{config.layout} layout: the live bytes exceed the device at {when}: writing {info[2]} bytes "
            f"with {info[3]} live needs {need} of {cap} bytes, short by {need - cap} bytes; give a larger "
            "device (--capacity) or a smaller SSD tier (--ssd)")
    if code == _ERR_LOG_FULL:
        raise InputError(
            source, line, "bytes",
            f"log layout full: writing {info[5]} bytes at head offset {info[3]} would overwrite live "
            f"object {int(info[2])} ({info[4]} bytes live of {cap} capacity); use "
            f"log_full='relocate' or 'evict', or a larger device")
    if code == _ERR_SLAB_FULL:
        region = max(config.align_bytes, config.slab_bytes // config.align_bytes * config.align_bytes)
        raise InputError(
            source, line, "bytes",
            f"slab layout: the live slots do not fit at {when}: writing {info[2]} bytes with {info[3]} live "
            f"needs {info[4]} more {region}-byte slab(s) than the {cap // region} the device holds, after "
            "compacting every class (each class keeps at most one slab partly used); give a larger device "
            "(--capacity) or a smaller SSD tier (--ssd)")
    raise KvwearError(f"replay kernel error code {code} at row {row}")
