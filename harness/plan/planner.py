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
loop is one numba kernel per layout, split into named steps over named records (see the comment
above the kernels); everything around it is vectorized numpy/pyarrow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Literal, NamedTuple, TypeAlias

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear import jitcache
from kvwear.errors import InputError, KvwearError
from kvwear.harness.plan.schema import BLOCK_OPS

jitcache.install()   # numba's cache saved under a lock: before any cached kernel is defined

Layout = Literal["log", "slab", "extent", "fs"]
TimeMode = Literal["original", "compressed", "afap"]
#: the layouts this module places on blocks; `fs` (one file per object on a real file system) is
#: planned as file operations by kvwear.harness.plan.files
LAYOUTS: tuple[str, ...] = ("log", "slab", "extent")
FILE_LAYOUTS: tuple[str, ...] = ("fs",)
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
        if self.layout not in LAYOUTS + FILE_LAYOUTS:
            raise KvwearError(f"unknown layout {self.layout!r}; valid: {', '.join(LAYOUTS + FILE_LAYOUTS)}")
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
# its object and kind the ones moved). Each step of a layout (read, release an old copy, clean or
# compact, grow a structure, place a write) is a function of its own. State is named, not
# positional: per-item state sits in small structured record arrays (a slab class, a slot, an
# extent, a hole, a log placement: `classes[c].hw`, `holes[h].nxt`), a kernel's scalars in a
# one-row record (`st.live_bytes`), its counts and its fault in records read by field name, and a
# layout's arrays travel between batches as one NamedTuple, unpacked once per batch. The steps take
# the record arrays themselves, not the NamedTuples, and the hot ones are inlined by numba:
# numba takes a reference to every array of a struct it hands to a step, per call (measured on
# bench/layouts.py's stream: steps taking structs planned the slab layout 2.2× slower than the
# positional kernels they replace; with record arrays they are as fast or faster).
# A structure that grows (the live-object table, the log's ring, the extent records) grows in the
# kernel loop before the step that could fill it, so a step returns only `out`.

#: ssd_ops codes (the planner's input) and block op codes (BLOCK_OP_NAMES, its output)
_OP_WRITE, _OP_READ, _OP_EVICT = 0, 1, 2
_IO_WRITE, _IO_READ, _IO_TRIM = 0, 1, 2
_LOG_RELOCATE, _LOG_EVICT, _LOG_ERROR = 0, 1, 2
_OUT_FIELDS = 6

#: what a kernel counts, by name (one record per plan; PlanCounts reads it)
KERNEL_STATS = np.dtype([(f, np.int64) for f in (
    "empty_writes", "rewrites", "read_misses", "evict_misses", "forced_evictions", "forced_evict_bytes",
    "peak_live_bytes", "writes", "relocations", "relocation_bytes", "split_writes", "stepped_over",
    "stepped_over_bytes", "write_extents")])
#: why a kernel stopped (code 0: it did not), at which batch row, and what the error message names
KERNEL_FAULT = np.dtype([(f, np.int64) for f in (
    "code", "row", "write_bytes", "live_bytes", "obj_id", "head_offset", "short_regions")])


class Ops(NamedTuple):
    """One batch of ssd_ops as a kernel reads it: op code, object id, aligned bytes, kind index."""

    op: np.ndarray
    obj_id: np.ndarray
    aligned: np.ndarray
    kind: np.ndarray


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
def _full(fault, i, a, live_bytes):
    f = fault[0]
    f.code = _ERR_FULL
    f.row = i
    f.write_bytes = a
    f.live_bytes = live_bytes


@numba.njit(cache=True, inline="always")
def _peak(stats, live_bytes):
    s = stats[0]
    if live_bytes > s.peak_live_bytes:
        s.peak_live_bytes = live_bytes


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


# The live objects: what a kernel knows per object is held only while the object is resident on
# the device (a trace writes hundreds of millions of objects; a drive holds a few million at most).
# Each live object has a slot, a column of `obj` (its id, kind, aligned length, position — the
# log's head position, the slab's slot, the extent list's first record — and the slab's class);
# an open-addressing table `ht` (linear probing, a power of two, at most half full) maps an id to
# its slot + 1 (0 = empty); a dead object's slot goes on the free stack (obj's last row) for the
# next one. The LIVE_COUNTS record holds the slots' high-water mark, the free stack's height and
# the live count. Both arrays double when full (before an object is added: `_live_full`,
# `_live_grow`), so the state is sized by the peak of live objects, never by the trace. The
# functions take the arrays themselves, not the struct: they run once or more per op, and numba
# counts a reference to every array of a struct it is handed.
_O_ID, _O_KIND, _O_LEN, _O_POS, _O_CLS, _O_FREE = range(6)
_OBJ_FIELDS = 6
LIVE_COUNTS = np.dtype([("slots", np.int64), ("free", np.int64), ("live", np.int64)])


class LiveObjects(NamedTuple):
    ht: np.ndarray
    obj: np.ndarray
    counts: np.ndarray          # one LIVE_COUNTS record


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


@numba.njit(cache=True, inline="always")
def _live_full(ht, obj, counts):
    """Whether one more live object needs a larger table (it would pass half full) or slots."""
    c = counts[0]
    return 2 * (c.live + 1) > ht.shape[0] or (c.free == 0 and c.slots == obj.shape[1])


@numba.njit(cache=True)
def _live_grow(ht, obj, counts):
    """The table with room for one more object: (ht, obj), `ht` twice as large (rehashed) when it
    would pass half full, `obj` twice as wide when no slot is free."""
    c = counts[0]
    if 2 * (c.live + 1) > ht.shape[0]:
        old = ht
        ht = np.zeros(2 * old.shape[0], np.int64)
        for j in range(old.shape[0]):
            if old[j]:
                _ot_put(ht, obj, old[j] - 1)
    if c.free == 0 and c.slots == obj.shape[1]:
        bigger = np.zeros((obj.shape[0], 2 * obj.shape[1]), np.int64)
        bigger[:, :c.slots] = obj[:, :c.slots]
        obj = bigger
    return ht, obj


@numba.njit(cache=True)
def _ot_add(ht, obj, counts, key, kind):
    """A slot for object `key` (not live) in a table with room for it (`_live_full` is false)."""
    c = counts[0]
    if c.free > 0:
        c.free -= 1
        s = obj[_O_FREE, c.free]
    else:
        s = c.slots
        c.slots += 1
    obj[_O_ID, s] = key
    obj[_O_KIND, s] = kind
    _ot_put(ht, obj, s)
    c.live += 1
    return s


@numba.njit(cache=True)
def _ot_del(ht, obj, counts, s):
    """Object in slot s is no longer live: its table entry goes (backward-shift deletion, so no
    tombstones accumulate) and its slot on the free stack."""
    c = counts[0]
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
    obj[_O_FREE, c.free] = s
    c.free += 1
    c.live -= 1


def _live_objects() -> LiveObjects:
    """An empty live-object table."""
    return LiveObjects(np.zeros(1 << 10, np.int64), np.zeros((_OBJ_FIELDS, 1 << 9), np.int64), np.zeros(1, LIVE_COUNTS))


# Log layout. The ring holds placements (PLACEMENT records) in head order; a
# placement is current while its slot's position is that one (a dead object's slot is set to -1,
# and a later placement of any object in that slot starts further on).

LOG_STATE = np.dtype([("cum", np.int64), ("live_bytes", np.int64), ("qh", np.int64), ("qn", np.int64)])


#: a placement on the log: the live-object slot placed, at this cumulative head position
PLACEMENT = np.dtype([("obj", np.int64), ("cum", np.int64)])


@numba.njit(cache=True)
def _ring_grow(ring, st):
    """The ring (PLACEMENT records) twice as long, unrolled from its head (a write pushes at most
    one placement more than it pops: the kernel grows the ring before a write that could fill it)."""
    qsize = ring.shape[0]
    bigger = np.empty(2 * qsize, PLACEMENT)
    for j in range(st.qn):
        bigger[j] = ring[(st.qh + j) % qsize]
    st.qh = 0
    return bigger


@numba.njit(cache=True, inline="always")
def _q_push(ring, st, v, cum):
    """Append a placement to the ring (which has room: `_ring_grow`)."""
    p = ring[(st.qh + st.qn) % ring.shape[0]]
    p.obj = v
    p.cum = cum
    st.qn += 1


@numba.njit(cache=True, inline="always")
def _log_release(out, k, i, o, key, obj, cap, trim):
    """A live object's copy dies where it is (rewritten or evicted): trimmed when trimming."""
    if trim:
        k = _emit_span(out, k, i, _IO_TRIM, obj[_O_POS, o] % cap, obj[_O_LEN, o], cap, key, obj[_O_KIND, o])
    return k


@numba.njit(cache=True, inline="always")
def _log_clean(out, k, i, a, cap, trim, mode, stats, fault, st, ht, obj, counts, ring):
    """Before a write of `a` bytes at the head: every live object whose first byte the head
    reaches in this lap is cleaned (relocated to the head), evicted or refused (`mode`). Returns
    (k, out, failed)."""
    end = st.cum + a
    while st.qn > 0 and ring[st.qh].cum + cap < end:
        v = ring[st.qh].obj
        s = ring[st.qh].cum
        st.qh = (st.qh + 1) % ring.shape[0]
        st.qn -= 1
        if obj[_O_POS, v] != s:
            continue                    # a dead or superseded placement: its space is free
        lv = obj[_O_LEN, v]
        if mode == _LOG_ERROR:
            f = fault[0]
            f.code = _ERR_LOG_FULL
            f.row = i
            f.obj_id = obj[_O_ID, v]
            f.head_offset = st.cum % cap
            f.live_bytes = st.live_bytes
            f.write_bytes = a
            return k, out, True
        if mode == _LOG_EVICT:
            st.live_bytes -= lv
            stats[0].forced_evictions += 1
            stats[0].forced_evict_bytes += lv
            _ot_del(ht, obj, counts, v)
            obj[_O_POS, v] = -1
            continue
        p = s + cap                     # the live copy in this lap's coordinates (p ≥ cum)
        if p == st.cum:
            # nothing free before it: the copy already sits where the cleaner would write it
            stats[0].stepped_over += 1
            stats[0].stepped_over_bytes += lv
        else:
            out = _room(out, k, 6)      # a read, a trim and a write, each in ≤ 2 spans
            vid = obj[_O_ID, v]
            vk = obj[_O_KIND, v]
            k = _emit_span(out, k, i, _IO_READ, s % cap, lv, cap, vid, vk)
            tail = max(p, st.cum + lv)  # the part of the old copy the new one does not cover
            if trim and p + lv > tail:
                k = _emit_span(out, k, i, _IO_TRIM, tail % cap, p + lv - tail, cap, vid, vk)
            k = _emit_span(out, k, i, _IO_WRITE, st.cum % cap, lv, cap, vid, vk)
            stats[0].relocations += 1
            stats[0].relocation_bytes += lv
            stats[0].write_extents += 1
        obj[_O_POS, v] = st.cum
        _q_push(ring, st, v, st.cum)
        st.cum += lv
        end = st.cum + a
    return k, out, False


@numba.njit(cache=True, inline="always")
def _log_place(out, k, i, o, key, a, kind, cap, stats, st, obj, ring):
    """Object `key`, live in slot o, written at the head."""
    obj[_O_KIND, o] = kind
    out = _room(out, k, 2)
    k = _emit_span(out, k, i, _IO_WRITE, st.cum % cap, a, cap, key, kind)
    stats[0].write_extents += 1
    obj[_O_POS, o] = st.cum
    obj[_O_LEN, o] = a
    _q_push(ring, st, o, st.cum)
    st.cum += a
    st.live_bytes += a
    _peak(stats, st.live_bytes)
    return k, out


@numba.njit(cache=True)
def _plan_log(ops, cap, trim, mode, out, stats, fault, state, live, ring):
    """One batch on the log (its LOG_STATE record carried across batches). Returns
    (k, out, live, ring)."""
    st = state[0]
    op_code, obj_id, aligned, kinds = ops
    ht, obj, counts = live
    k = 0
    for i in range(op_code.shape[0]):
        key = obj_id[i]
        op = op_code[i]
        o = _ot_find(ht, obj, key)
        out = _room(out, k, 4)                  # an op's own rows: a trim and a write, each in ≤ 2 spans
        if op == _OP_WRITE:
            a = aligned[i]
            if a == 0:
                stats[0].empty_writes += 1
                continue
            stats[0].writes += 1
            if o >= 0:                          # rewrite: the old copy dies where it is
                stats[0].rewrites += 1
                k = _log_release(out, k, i, o, key, obj, cap, trim)
                st.live_bytes -= obj[_O_LEN, o]
                obj[_O_POS, o] = -1             # the slot stays, its old placement is no longer current
            if mode == _LOG_RELOCATE and st.live_bytes + a > cap:
                _full(fault, i, a, st.live_bytes)
                break
            if st.qn + 1 > ring.shape[0]:
                ring = _ring_grow(ring, st)
            k, out, failed = _log_clean(out, k, i, a, cap, trim, mode, stats, fault, st, ht, obj, counts, ring)
            if failed:
                break
            if o < 0:
                if _live_full(ht, obj, counts):
                    ht, obj = _live_grow(ht, obj, counts)
                o = _ot_add(ht, obj, counts, key, kinds[i])
            k, out = _log_place(out, k, i, o, key, a, kinds[i], cap, stats, st, obj, ring)
        elif op == _OP_READ:
            if o >= 0:
                k = _emit_span(out, k, i, _IO_READ, obj[_O_POS, o] % cap, obj[_O_LEN, o], cap, key, obj[_O_KIND, o])
            else:
                stats[0].read_misses += 1
        elif o >= 0:
            k = _log_release(out, k, i, o, key, obj, cap, trim)
            st.live_bytes -= obj[_O_LEN, o]
            _ot_del(ht, obj, counts, o)
            obj[_O_POS, o] = -1
        else:
            stats[0].evict_misses += 1
    return k, out, LiveObjects(ht, obj, counts), ring

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

SLAB_STATE = np.dtype([("free_regions", np.int64), ("live_bytes", np.int64), ("region", np.int64),
                       ("n_reg", np.int64)])
#: one record per class: its slot size and slot capacity, where its slots and its region table
#: start (in SLAB_SLOT records and in the region table), its free stack's height, high-water
#: mark, live slots and regions mapped
SLAB_CLASS = np.dtype([(f, np.int64) for f in ("size", "slot_cap", "slot_base", "reg_base", "fs_top", "hw",
                                               "n_live", "n_mapped")])
#: one record per slot: the live object in it (-1: free), the class's free stack (its entries
#: stored at the class's slot range) and whether this slot is on it
SLAB_SLOT = np.dtype([("obj", np.int64), ("fs", np.int64), ("in_stack", np.int64)])


class Slabs(NamedTuple):
    """The slab layout's state: its classes and slots (record arrays), the region table (the
    device region backing each class's n-th region) and the stack of free device regions (the
    lowest on top); the SLAB_STATE record holds the rest."""

    classes: np.ndarray
    slots: np.ndarray
    reg_tab: np.ndarray
    free_reg: np.ndarray


@numba.njit(cache=True, inline="always")
def _slab_io(out, k, row, op, s, ln, cls, reg_tab, region, obj, kind):
    """The I/O for `ln` bytes of slot s of class record `cls`, one row per physically contiguous
    piece; returns (k, out), `out` grown when it had no room for them."""
    out = _room(out, k, ln // region + 2)
    lo = s * cls.size
    base = cls.reg_base
    first = -1
    run = 0
    while ln > 0:
        r = lo // region
        within = lo % region
        piece = min(region - within, ln)
        phys = reg_tab[base + r] * region + within
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


@numba.njit(cache=True, inline="always")
def _slab_shrink(cls, slots, reg_tab, free_reg, st):
    """Lower a class's hw over free top slots and return the regions above it to the pool."""
    b = cls.slot_base
    while cls.hw > 0 and slots[b + cls.hw - 1].obj < 0:
        cls.hw -= 1
    need = (cls.hw * cls.size + st.region - 1) // st.region
    while cls.n_mapped > need:
        cls.n_mapped -= 1
        free_reg[st.free_regions] = reg_tab[cls.reg_base + cls.n_mapped]
        st.free_regions += 1


@numba.njit(cache=True, inline="always")
def _slab_pop(cls, slots):
    """A free slot of a class below its hw, or -1; entries made stale by a lower hw are dropped."""
    b = cls.slot_base
    while cls.fs_top > 0:
        cls.fs_top -= 1
        s = slots[b + cls.fs_top].fs
        slots[b + s].in_stack = 0
        if s < cls.hw and slots[b + s].obj < 0:
            return s
    return -1


def _slab_state(cls_size: np.ndarray, slot_cap: np.ndarray, region: int, n_reg: int) -> tuple[Slabs, np.ndarray]:
    """The slab layout's state, sized by the classes' slot capacities and the device's regions,
    and its SLAB_STATE record."""
    nc = len(cls_size)
    classes = np.zeros(nc, SLAB_CLASS)
    classes["size"] = cls_size
    classes["slot_cap"] = slot_cap
    classes["slot_base"][1:] = np.cumsum(slot_cap)[:-1]
    regs = (np.asarray(slot_cap) * np.asarray(cls_size) + region - 1) // region + 1
    classes["reg_base"][1:] = np.cumsum(regs)[:-1]
    slots = np.zeros(int(np.sum(slot_cap)), SLAB_SLOT)
    slots["obj"] = -1
    slabs = Slabs(classes, slots, np.empty(int(np.sum(regs)), np.int64),
                  np.arange(n_reg - 1, -1, -1, dtype=np.int64))     # a stack: the lowest region on top
    st = np.zeros(1, SLAB_STATE)
    st[0] = (n_reg, 0, region, n_reg)
    return slabs, st


@numba.njit(cache=True, inline="always")
def _slab_release(out, k, i, o, key, trim, classes, slots, reg_tab, free_reg, st, obj):
    """Live object o leaves its slot (rewritten or evicted): trimmed when trimming, the slot on its
    class's free stack, the class shrunk over free top slots (the caller drops it from the table)."""
    cls = classes[obj[_O_CLS, o]]
    s = obj[_O_POS, o]
    if trim:
        k, out = _slab_io(out, k, i, _IO_TRIM, s, obj[_O_LEN, o], cls, reg_tab, st.region, key, obj[_O_KIND, o])
    b = cls.slot_base
    slots[b + s].obj = -1
    cls.n_live -= 1
    if not slots[b + s].in_stack:
        slots[b + cls.fs_top].fs = s
        cls.fs_top += 1
        slots[b + s].in_stack = 1
    _slab_shrink(cls, slots, reg_tab, free_reg, st)
    st.live_bytes -= obj[_O_LEN, o]
    return k, out


@numba.njit(cache=True)
def _slab_compact(out, k, i, d, trim, stats, classes, slots, reg_tab, free_reg, st, obj):
    """Move class d's top live slots into its free slots (read, trim, write: relocations) until
    one of its regions is released."""
    cls = classes[d]
    bd = cls.slot_base
    region = st.region
    before = cls.n_mapped
    while cls.n_mapped == before:
        t = cls.hw - 1                  # live: _slab_shrink keeps the top slot live
        f = _slab_pop(cls, slots)
        v = slots[bd + t].obj
        lv = obj[_O_LEN, v]
        vid = obj[_O_ID, v]
        vk = obj[_O_KIND, v]
        k, out = _slab_io(out, k, i, _IO_READ, t, lv, cls, reg_tab, region, vid, vk)
        if trim:
            k, out = _slab_io(out, k, i, _IO_TRIM, t, lv, cls, reg_tab, region, vid, vk)
        k, out = _slab_io(out, k, i, _IO_WRITE, f, lv, cls, reg_tab, region, vid, vk)
        stats[0].relocations += 1
        stats[0].relocation_bytes += lv
        stats[0].write_extents += 1
        slots[bd + f].obj = v
        obj[_O_POS, v] = f
        slots[bd + t].obj = -1
        _slab_shrink(cls, slots, reg_tab, free_reg, st)
    return k, out


@numba.njit(cache=True)
def _slab_slot(out, k, i, a, c, trim, stats, fault, classes, slots, reg_tab, free_reg, st, obj):
    """A slot of class c for a write of `a` bytes: a free one, else a new one at the class's top,
    mapping regions for it (compacting the class with the most regions beyond what its live slots
    need while none is free). Returns (slot, k, out); slot -1 with fault.code set when none fits."""
    cls = classes[c]
    s = _slab_pop(cls, slots)
    if s >= 0:
        return s, k, out
    s = cls.hw
    if s >= cls.slot_cap:
        fault[0].code = _ERR_GROW
        return -1, k, out
    region = st.region
    need = ((s + 1) * cls.size + region - 1) // region - cls.n_mapped
    while st.free_regions < need:
        best = -1
        gain = 0
        for d in range(classes.shape[0]):
            g = classes[d].n_mapped - (classes[d].n_live * classes[d].size + region - 1) // region
            if g > gain:
                gain = g
                best = d
        if best < 0:
            f = fault[0]
            f.code = _ERR_SLAB_FULL
            f.row = i
            f.write_bytes = a
            f.live_bytes = st.live_bytes
            f.short_regions = need - st.free_regions
            return -1, k, out
        k, out = _slab_compact(out, k, i, best, trim, stats, classes, slots, reg_tab, free_reg, st, obj)
    for _ in range(need):
        st.free_regions -= 1
        reg_tab[cls.reg_base + cls.n_mapped] = free_reg[st.free_regions]
        cls.n_mapped += 1
    cls.hw = s + 1
    return s, k, out


@numba.njit(cache=True)
def _plan_slab(ops, cls_of, trim, out, stats, fault, slabs, state, live):
    """One batch on the slabs (its SLAB_STATE record carried across batches); `cls_of` is each
    op's class. Returns (k, out, live)."""
    st = state[0]
    op_code, obj_id, aligned, kinds = ops
    classes, slots, reg_tab, free_reg = slabs
    ht, obj, counts = live
    region = st.region
    k = 0
    for i in range(op_code.shape[0]):
        key = obj_id[i]
        a = aligned[i]
        op = op_code[i]
        o = _ot_find(ht, obj, key)
        if op == _OP_READ:
            if o >= 0:
                k, out = _slab_io(out, k, i, _IO_READ, obj[_O_POS, o], obj[_O_LEN, o], classes[obj[_O_CLS, o]],
                                  reg_tab, region, key, obj[_O_KIND, o])
            else:
                stats[0].read_misses += 1
            continue
        if op == _OP_WRITE and a == 0:
            stats[0].empty_writes += 1
            continue
        if op == _OP_WRITE:
            stats[0].writes += 1
        if o >= 0:
            if op == _OP_WRITE:
                stats[0].rewrites += 1
            k, out = _slab_release(out, k, i, o, key, trim, classes, slots, reg_tab, free_reg, st, obj)
            _ot_del(ht, obj, counts, o)
        elif op == _OP_EVICT:
            stats[0].evict_misses += 1
        if op == _OP_EVICT:
            continue
        if st.live_bytes + a > st.n_reg * region:
            _full(fault, i, a, st.live_bytes)
            break
        c = cls_of[i]
        s, k, out = _slab_slot(out, k, i, a, c, trim, stats, fault, classes, slots, reg_tab, free_reg, st, obj)
        if s < 0:
            break
        if _live_full(ht, obj, counts):
            ht, obj = _live_grow(ht, obj, counts)
        o = _ot_add(ht, obj, counts, key, kinds[i])
        cls = classes[c]
        slots[cls.slot_base + s].obj = o
        cls.n_live += 1
        k, out = _slab_io(out, k, i, _IO_WRITE, s, a, cls, reg_tab, region, key, kinds[i])
        stats[0].write_extents += 1
        obj[_O_POS, o] = s
        obj[_O_LEN, o] = a
        obj[_O_CLS, o] = c
        st.live_bytes += a
        _peak(stats, st.live_bytes)
    return k, out, LiveObjects(ht, obj, counts)

# Extent layout. Holes (free extents) form a doubly linked list in address order. To find the
# first fit and a freed extent's neighbours without walking that list, the address space is cut
# into M chunks (a power of two): chunk_head[c] is the first hole starting in chunk c and a max
# segment tree over chunks holds the longest hole starting in each. First fit = leftmost chunk
# whose max ≥ the size (O(log M)), then a scan of that chunk's few holes. An object that no hole
# holds whole takes the lowest holes in address order (the last one in part), as a file system
# spreads a file over free extents: one extent list per object, one block_ops row per extent.

EXTENT_STATE = np.dtype([(f, np.int64) for f in ("head", "e_free", "e_unused", "live_bytes", "m", "cb")])
#: an extent record: a piece of a live object (its list goes on through nxt), or an unused one
#: (chained from EXTENT_STATE.e_free)
EXTENT = np.dtype([("off", np.int64), ("length", np.int64), ("nxt", np.int64)])
#: a hole record: a free extent in the list in address order (from EXTENT_STATE.head)
HOLE = np.dtype([("off", np.int64), ("length", np.int64), ("nxt", np.int64), ("prev", np.int64)])


class Extents(NamedTuple):
    """The extent layout's state: extent and hole records (record arrays), the pool of unused hole
    records (pool[0] = their count, pool[1:] their indices), the first hole starting in each of the
    m chunks of cb bytes, and the max segment tree over chunks of the longest hole starting in each
    (m and cb in the EXTENT_STATE record, with the list heads and the live bytes)."""

    ext: np.ndarray
    holes: np.ndarray
    pool: np.ndarray
    chunk_head: np.ndarray
    seg: np.ndarray


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
def _chunk_refresh(c, holes, chunk_head, seg, st):
    cb = st.cb
    best = 0
    h = chunk_head[c]
    while h >= 0 and holes[h].off // cb == c:
        if holes[h].length > best:
            best = holes[h].length
        h = holes[h].nxt
    _seg_set(seg, st.m, c, best)


@numba.njit(cache=True)
def _chunk_unhead(h, c, holes, chunk_head, st):
    """Hole h leaves chunk c (removed or moved): its successor in c, if any, heads c."""
    if chunk_head[c] == h:
        nx = holes[h].nxt
        chunk_head[c] = nx if nx >= 0 and holes[nx].off // st.cb == c else -1


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
def _hole_free(off, ln, st, holes, pool, chunk_head, seg):
    """Return [off, off+ln) to the hole list, merging with its neighbours."""
    cb = st.cb
    c = off // cb
    p = -1
    h = chunk_head[c]
    while h >= 0 and holes[h].off // cb == c and holes[h].off < off:
        p = h
        h = holes[h].nxt
    if p < 0:
        cp = _prev_nonempty(seg, st.m, c)
        if cp >= 0:
            p = chunk_head[cp]
            while holes[p].nxt >= 0 and holes[holes[p].nxt].off // cb == cp:
                p = holes[p].nxt
    nx = holes[p].nxt if p >= 0 else st.head
    if p >= 0 and holes[p].off + holes[p].length == off:
        holes[p].length += ln
        if nx >= 0 and off + ln == holes[nx].off:
            cn = holes[nx].off // cb
            _chunk_unhead(nx, cn, holes, chunk_head, st)
            holes[p].length += holes[nx].length
            nn = holes[nx].nxt
            holes[p].nxt = nn
            if nn >= 0:
                holes[nn].prev = p
            pool[0] += 1
            pool[pool[0]] = nx
            _chunk_refresh(cn, holes, chunk_head, seg, st)
        _chunk_refresh(holes[p].off // cb, holes, chunk_head, seg, st)
    elif nx >= 0 and off + ln == holes[nx].off:
        c_old = holes[nx].off // cb
        holes[nx].off = off
        holes[nx].length += ln
        if c != c_old:
            _chunk_unhead(nx, c_old, holes, chunk_head, st)
            _chunk_refresh(c_old, holes, chunk_head, seg, st)
        if chunk_head[c] < 0 or off < holes[chunk_head[c]].off:
            chunk_head[c] = nx
        _chunk_refresh(c, holes, chunk_head, seg, st)
    else:
        n = pool[pool[0]]
        pool[0] -= 1
        holes[n].off = off
        holes[n].length = ln
        holes[n].prev = p
        holes[n].nxt = nx
        if nx >= 0:
            holes[nx].prev = n
        if p >= 0:
            holes[p].nxt = n
        else:
            st.head = n
        if chunk_head[c] < 0 or off < holes[chunk_head[c]].off:
            chunk_head[c] = n
        _chunk_refresh(c, holes, chunk_head, seg, st)


@numba.njit(cache=True)
def _hole_take(h, x, st, holes, pool, chunk_head, seg):
    """Take the first x bytes of hole h; returns their offset."""
    cb = st.cb
    c = holes[h].off // cb
    off = holes[h].off
    holes[h].off += x
    holes[h].length -= x
    if holes[h].length == 0:
        _chunk_unhead(h, c, holes, chunk_head, st)
        hp = holes[h].prev
        hn = holes[h].nxt
        if hp >= 0:
            holes[hp].nxt = hn
        else:
            st.head = hn
        if hn >= 0:
            holes[hn].prev = hp
        pool[0] += 1
        pool[pool[0]] = h
    else:
        c2 = holes[h].off // cb
        if c2 != c:
            if chunk_head[c] == h:
                chunk_head[c] = -1
            chunk_head[c2] = h          # h precedes every later hole, so it heads c2
            _chunk_refresh(c2, holes, chunk_head, seg, st)
    _chunk_refresh(c, holes, chunk_head, seg, st)
    return off


def _extent_state(cap: int, units: int) -> tuple[Extents, np.ndarray]:
    """The extent layout's state and its EXTENT_STATE record. The records start small and double
    with the live extents (_extent_grow): never more holes than live extents + 1, and before each
    write at least as many unused extent records as there are holes (its pieces)."""
    m = 1
    while m < min(units, 1 << 18):
        m *= 2
    ne = min(units + 2, 1 << 12)
    ext = np.zeros(ne, EXTENT)
    ext["nxt"] = np.arange(1, ne + 1)
    ext["nxt"][ne - 1] = -1
    nh = ne + 2
    holes = np.zeros(nh, HOLE)
    holes["nxt"] = holes["prev"] = -1
    holes["length"][0] = cap                    # one hole: the whole device
    pool = np.empty(nh + 1, np.int64)
    pool[0] = nh - 1
    pool[1:nh] = np.arange(1, nh)
    chunk_head = np.full(m, -1, np.int64)
    chunk_head[0] = 0
    seg = np.zeros(2 * m, np.int64)
    _seg_set(seg, m, 0, cap)
    st = np.zeros(1, EXTENT_STATE)
    st[0] = (0, 0, ne, 0, m, (cap + m - 1) // m)
    return Extents(ext, holes, pool, chunk_head, seg), st


@numba.njit(cache=True)
def _extent_grow(ext, holes, pool, st):
    """Twice the extent records (the new ones chained in front of the unused ones) and holes to
    match; returns (ext, holes, pool)."""
    ne = ext.shape[0]
    ext2 = np.empty(2 * ne, EXTENT)
    ext2[:ne] = ext
    for j in range(ne, 2 * ne):
        ext2[j].off = 0
        ext2[j].length = 0
        ext2[j].nxt = j + 1
    ext2[2 * ne - 1].nxt = st.e_free
    st.e_free = ne
    st.e_unused += ne
    nh = holes.shape[0]
    nh2 = 2 * ne + 2
    holes2 = np.empty(nh2, HOLE)
    holes2[:nh] = holes
    for j in range(nh, nh2):
        holes2[j].off = 0
        holes2[j].length = 0
        holes2[j].nxt = -1
        holes2[j].prev = -1
    pool2 = np.empty(nh2 + 1, np.int64)
    c = pool[0]
    pool2[:c + 1] = pool[:c + 1]
    for j in range(nh, nh2):
        c += 1
        pool2[c] = j
    pool2[0] = c
    return ext2, holes2, pool2


@numba.njit(cache=True, inline="always")
def _extent_release(out, k, i, o, key, trim, st, ext, holes, pool, chunk_head, seg, obj):
    """Live object o leaves the device (rewritten or evicted): each of its extents trimmed when
    trimming and returned to the holes, its records to the unused ones (the caller drops it from
    the table)."""
    e = obj[_O_POS, o]
    kd = obj[_O_KIND, o]
    while e >= 0:
        if trim:
            out = _room(out, k, 1)
            k = _emit(out, k, i, _IO_TRIM, ext[e].off, ext[e].length, key, kd)
        _hole_free(ext[e].off, ext[e].length, st, holes, pool, chunk_head, seg)
        nx = ext[e].nxt
        ext[e].nxt = st.e_free
        st.e_free = e
        st.e_unused += 1
        e = nx
    st.live_bytes -= obj[_O_LEN, o]
    return k, out


@numba.njit(cache=True, inline="always")
def _first_fit(r, st, holes, chunk_head, seg):
    """The hole to take from for the next `r` bytes of a write and how much of it: the lowest hole
    that holds them whole, else the lowest hole, whole."""
    m = st.m
    if seg[1] >= r:
        j = 1
        while j < m:
            j = 2 * j if seg[2 * j] >= r else 2 * j + 1
        h = chunk_head[j - m]
        while holes[h].length < r:
            h = holes[h].nxt
        return h, r
    h = st.head
    return h, holes[h].length


@numba.njit(cache=True, inline="always")
def _extent_write(out, k, i, o, key, a, kind, stats, st, ext, holes, pool, chunk_head, seg, obj):
    """Object `key`, just made live in slot o, written: first fit, spread over the lowest holes
    when none holds it whole, one extent record and one block_ops row per piece (the records are
    there: the kernel grows them first). Returns (k, out)."""
    r = a
    last = -1
    pieces = 0
    while r > 0:
        h, x = _first_fit(r, st, holes, chunk_head, seg)
        off = _hole_take(h, x, st, holes, pool, chunk_head, seg)
        e = st.e_free
        st.e_free = ext[e].nxt
        st.e_unused -= 1
        ext[e].off = off
        ext[e].length = x
        ext[e].nxt = -1
        if last < 0:
            obj[_O_POS, o] = e
        else:
            ext[last].nxt = e
        last = e
        out = _room(out, k, 1)
        k = _emit(out, k, i, _IO_WRITE, off, x, key, kind)
        pieces += 1
        r -= x
    stats[0].write_extents += pieces
    if pieces > 1:
        stats[0].split_writes += 1
    obj[_O_LEN, o] = a
    st.live_bytes += a
    _peak(stats, st.live_bytes)
    return k, out


@numba.njit(cache=True, inline="always")
def _read_extent_list(out, k, i, o, key, obj, ext):
    """Read ops for every extent of live object o."""
    e = obj[_O_POS, o]
    kd = obj[_O_KIND, o]
    while e >= 0:
        out = _room(out, k, 1)
        k = _emit(out, k, i, _IO_READ, ext[e].off, ext[e].length, key, kd)
        e = ext[e].nxt
    return k, out


@numba.njit(cache=True)
def _plan_extent(ops, cap, trim, out, stats, fault, state, live, extents):
    """One batch on the extents (its EXTENT_STATE record carried across batches); returns
    (k, out, live, extents)."""
    st = state[0]
    op_code, obj_id, aligned, kinds = ops
    ht, obj, counts = live
    ext, holes, pool, chunk_head, seg = extents
    k = 0
    for i in range(op_code.shape[0]):
        key = obj_id[i]
        a = aligned[i]
        op = op_code[i]
        o = _ot_find(ht, obj, key)
        if op == _OP_READ:
            if o >= 0:
                k, out = _read_extent_list(out, k, i, o, key, obj, ext)
            else:
                stats[0].read_misses += 1
            continue
        if op == _OP_WRITE:
            if a == 0:
                stats[0].empty_writes += 1
                continue
            stats[0].writes += 1
            if o >= 0:
                stats[0].rewrites += 1
        elif o < 0:
            stats[0].evict_misses += 1
            continue
        if o >= 0:
            k, out = _extent_release(out, k, i, o, key, trim, st, ext, holes, pool, chunk_head, seg, obj)
            _ot_del(ht, obj, counts, o)
        if op != _OP_WRITE:
            continue
        if st.live_bytes + a > cap:
            _full(fault, i, a, st.live_bytes)
            break
        if _live_full(ht, obj, counts):
            ht, obj = _live_grow(ht, obj, counts)
        o = _ot_add(ht, obj, counts, key, kinds[i])
        # a write takes at most one extent record per hole (the last in part)
        while st.e_unused < holes.shape[0] - pool[0]:
            ext, holes, pool = _extent_grow(ext, holes, pool, st)
        k, out = _extent_write(out, k, i, o, key, a, kinds[i], stats, st, ext, holes, pool, chunk_head, seg, obj)
    return k, out, LiveObjects(ht, obj, counts), Extents(ext, holes, pool, chunk_head, seg)
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


def plan_times(t: np.ndarray, rows: np.ndarray, config: ReplayConfig, t0: float, row0: int) -> np.ndarray:
    """The plan's t_s for the output rows taken from source rows `rows` of a batch whose source
    times are `t` (module docstring, Time): `original` 0-based at `t0`, `compressed` also divided
    by `time_compression`, `afap` the output row's index from `row0` (then `t` is not read). Shared
    by the block and file layouts; called once per batch, outside the layout kernels."""
    if config.time_mode == "afap":
        return np.arange(row0, row0 + len(rows), dtype=np.float64)
    ts = t[rows] - t0
    return ts / config.time_compression if config.time_mode == "compressed" else ts


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
        self.live = _live_objects()
        if config.layout in FILE_LAYOUTS:
            raise KvwearError(f"the {config.layout} layout places files, not blocks: plan it with "
                              "kvwear.harness.plan.files.stream_file_ops")
        if config.layout == "log":
            self.mode = {"relocate": _LOG_RELOCATE, "evict": _LOG_EVICT, "error": _LOG_ERROR}[config.log_full]
            qsize = min(units + 4, 1 << 12)      # the kernel doubles its ring when this is short
            self.ring = np.empty(qsize, PLACEMENT)
            self.state = np.zeros(1, LOG_STATE)
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
            region = max(al, config.slab_bytes // al * al)
            n_reg = cap // region
            if n_reg == 0:
                raise KvwearError(f"slab layout: capacity {cap} bytes is smaller than one {region}-byte slab")
            cls = np.minimum(np.searchsorted(self.classes, sizes, side="left"), len(self.classes) - 1)
            writes_per_class = np.bincount(cls, weights=[counts[int(s)] for s in sizes],
                                           minlength=len(self.classes)).astype(np.int64)
            slot_cap = np.minimum(writes_per_class, n_reg * region // self.classes + 1) + 1
            self.slabs, self.state = _slab_state(self.classes, slot_cap, region, n_reg)
        else:
            self.extents, self.state = _extent_state(cap, units)
        self.stats = np.zeros(1, KERNEL_STATS)
        self.fault = np.zeros(1, KERNEL_FAULT)
        self.out = np.empty((_OUT_FIELDS, 1 << 12), np.int64)

    def place(self, b: _Batch) -> int:
        """Run the kernel over batch b: its extents are self.out[:, :k]; returns k."""
        c = self.config
        cap = c.capacity_bytes
        trim = bool(c.trim_on_evict)
        ops = Ops(b.ops, b.obj_id, b.aligned, b.kind)
        if c.layout == "log":
            k, self.out, self.live, self.ring = _plan_log(ops, cap, trim, self.mode, self.out, self.stats, self.fault,
                                                          self.state, self.live, self.ring)
        elif c.layout == "slab":
            classes = self.classes
            big = np.flatnonzero((b.aligned > classes[-1]) & (b.ops == 0))
            if len(big):
                r = int(big[0])
                raise InputError(self.source, b.base + r + 1, "bytes",
                                 f"object of {b.aligned[r]} aligned bytes is larger than the largest slab "
                                 f"class ({classes[-1]})")
            cls = np.minimum(np.searchsorted(classes, b.aligned, side="left"), len(classes) - 1).astype(np.int64)
            k, self.out, self.live = _plan_slab(ops, cls, trim, self.out, self.stats, self.fault, self.slabs,
                                                self.state, self.live)
            if self.fault[0]["code"] == _ERR_GROW:
                raise KvwearError("internal error: the slab layout ran out of the slots it sized from the writes")
        else:
            k, self.out, self.live, self.extents = _plan_extent(ops, cap, trim, self.out, self.stats, self.fault,
                                                                self.state, self.live, self.extents)
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
        if layout.fault[0]["code"]:
            _raise_kernel_error(layout.fault[0], config, source, b, t0 or 0.0)
        n += len(b.ops)
        planned_w = (b.ops == 0) & (b.aligned > 0)
        obj_bytes += int(b.nbytes[planned_w].sum())
        policy_bytes += int(b.aligned[planned_w].sum())
        j = 0
        while j < k:
            take = min(k - j, max(1, chunk_extents) - pending)
            rows, codes, offs, lens, objs, kinds = _split_ios(layout.out[:, j:j + take], take, mx)
            ts = plan_times(b.t, rows, config, t0 or 0.0, done)
            done += len(rows)
            parts.append((ts, codes, offs, lens, objs, kinds))
            pending += take
            j += take
            if pending >= max(1, chunk_extents):
                flush()
    flush()
    stats = {name: int(layout.stats[0][name]) for name in KERNEL_STATS.names or ()}
    reloc_bytes = stats["relocation_bytes"]
    plan = PlanCounts(
        object_write_bytes=obj_bytes,
        aligned_write_bytes=int(acc[0]),
        trim_bytes=int(acc[1]),
        read_bytes=int(acc[2]),
        write_ios=int(acc[3]),
        read_ios=int(acc[4]),
        trim_ios=int(acc[5]),
        ssd_ops=n,
        writes=stats["writes"],
        empty_writes=stats["empty_writes"],
        rewrites=stats["rewrites"],
        read_misses=stats["read_misses"],
        evict_misses=stats["evict_misses"],
        forced_evictions=stats["forced_evictions"],
        forced_evict_bytes=stats["forced_evict_bytes"],
        peak_live_bytes=stats["peak_live_bytes"],
        capacity_bytes=cap,
        layout=config.layout,
        policy_write_bytes=policy_bytes,
        relocation_write_bytes=reloc_bytes,
        relocations=stats["relocations"],
        relocation_read_bytes=reloc_bytes,
        stepped_over=stats["stepped_over"],
        stepped_over_bytes=stats["stepped_over_bytes"],
        write_extents=stats["write_extents"],
        split_writes=stats["split_writes"],
    )
    if plan.aligned_write_bytes != plan.policy_write_bytes + reloc_bytes:
        raise KvwearError("internal error: planned write bytes differ from the aligned object bytes + relocations")
    return plan


def _raise_kernel_error(fault: np.void, config: ReplayConfig, source: str, b: _Batch, t0: float) -> None:
    """The InputError for a KERNEL_FAULT record, naming the ssd_ops row and field."""
    code, row = int(fault["code"]), int(fault["row"])
    a, live = int(fault["write_bytes"]), int(fault["live_bytes"])
    cap = config.capacity_bytes
    when = f"t={b.t[row] - t0:.6g} s"
    line = b.base + row + 1
    if code == _ERR_FULL:
        need = live + a
        raise InputError(
            source, line, "bytes",
            f"{config.layout} layout: the live bytes exceed the device at {when}: writing {a} bytes "
            f"with {live} live needs {need} of {cap} bytes, short by {need - cap} bytes; give a larger "
            "device (--capacity) or a smaller SSD tier (--ssd)")
    if code == _ERR_LOG_FULL:
        raise InputError(
            source, line, "bytes",
            f"log layout full: writing {a} bytes at head offset {int(fault['head_offset'])} would overwrite live "
            f"object {int(fault['obj_id'])} ({live} bytes live of {cap} capacity); use "
            f"log_full='relocate' or 'evict', or a larger device")
    if code == _ERR_SLAB_FULL:
        region = max(config.align_bytes, config.slab_bytes // config.align_bytes * config.align_bytes)
        raise InputError(
            source, line, "bytes",
            f"slab layout: the live slots do not fit at {when}: writing {a} bytes with {live} live "
            f"needs {int(fault['short_regions'])} more {region}-byte slab(s) than the {cap // region} the device "
            "holds, after compacting every class (each class keeps at most one slab partly used); give a larger "
            "device (--capacity) or a smaller SSD tier (--ssd)")
    raise KvwearError(f"replay kernel error code {code} at row {row}")
