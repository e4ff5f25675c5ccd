"""The embedded FTL emulator: a page-mapped flash translation layer with garbage collection.

What it models: a NAND device of `lines` erase units ("lines"), each `blocks_per_line` blocks of
`pages_per_block` pages. A line is what GC reclaims and erases as one unit: one block on every
LUN in FEMU's black-box FTL (`FtlConfig.femu`), a single block in the plain block-level mode
(`FtlConfig.block_level`, `blocks_per_line = 1`). Host writes fill the current line page by page;
a physical page is numbered by its line and its write offset in the line. Logical pages map to
physical pages (l2p) and back (p2l).

Line mode is a twin of FEMU's black-box FTL (bbssd, MoatLab/FEMU 99ce4fb2, `hw/femu/bbssd/
ftl-line-gc.c`, `ftl-datapath.c`, `ftl.c`, `lib/pqueue.c`), and reproduces its GC decisions:
- where a page lands: FEMU's write pointer stripes a line's pages over its blocks, channel first,
  then LUN, then the page in the block, so write offset k is on channel k mod `channels`, LUN
  (k div `channels`) mod LUNs per channel, page k div `blocks_per_line` of that block;
- the copy order: do_gc cleans the victim block by block (channel by channel, LUN by LUN inside
  it, each block's pages in order), so runs of pages written together are copied interleaved with
  pages written before and after them, and reach their next line in that order
  (`FtlConfig.gc_copy_order`);
- the victim: FEMU's priority queue on valid pages, its binary heap reproduced slot for slot (the
  kernel comment), so that among lines of equal valid count FEMU's choice is the twin's;
- when GC runs: forced and background exactly where FEMU's request handler runs them (below).
What it does not model: FEMU's timing (latencies, which do not move GC here), its FDP FTL (a
different FTL: the handles below are kvwear's own model), and planes (FEMU's line is one block per
LUN and assumes one plane: `FtlConfig.femu` refuses `pls_per_lun` ≠ 1).

Two GC trigger modes:
- `line` (FEMU): before each write *request*, forced GC (victim rule ignored) runs while free lines
  ≤ `gc_thres_lines_high`; after each request (any kind), one background GC runs if free lines ≤
  `gc_thres_lines` and the victim has ≥ `min_invalid_pages` invalid pages (FEMU: pages/line ÷ 8).
  A line is closed, and the next free line taken, as soon as its last page is written (FEMU
  advances its write pointer right after programming), so free-line counts match FEMU's.
  `apply_ops(joined=...)` marks requests that are further parts of one host request (a request
  split where its addresses are not contiguous): they play as that one request, forced GC before
  its first part and background GC after its last. Unmarked, every request is its own (the sim
  device's plan rows); the workload WAF model marks the parts of the requests it draws.
- `block`: on demand, before each host page: GC while free lines ≤ `reserve_lines`.

Victim selection: `greedy` (fewest valid pages; block mode O(1) through per-valid-count buckets,
line mode FEMU's heap, O(log lines) per invalidation),
`cost-benefit` (max age·(1−u)/(2u), age in line closes — a logical clock), `fifo` (oldest closed
line); line mode scans their candidates in FEMU's heap-slot order, so ties fall as in FEMU (whose
cost-benefit age is wall-clock time, which no replay reproduces). Lines with every page valid are
never victims (FEMU keeps them off its victim queue). GC copies go to the host write pointer
(FEMU's single write pointer) unless `separate_gc_line`.

Flexible Data Placement (NVMe TP4146): `ruh` reclaim unit handles (1–8; a reclaim unit is one
line). Each write request carries a placement handle; each handle has its own host write frontier
(open line), so data of different handles never shares a line. GC keeps a victim's valid pages
apart per handle (`gc_handles="per-handle"`, FDP's persistently isolated handles: copies go to the
victim's own handle, whose lines only ever hold that handle's data) or mixes them
(`gc_handles="shared"`, initially isolated: one GC frontier for every handle). With
`separate_gc_line` the GC frontier(s) are lines of their own; without it GC copies into the host
frontier (of the victim's handle, or of handle 0 when shared), which with `ruh=1` is FEMU's single
write pointer exactly. Victims are chosen over every line whatever its handle (one device-wide
pool, as FDP leaves victim choice to the drive). Every handle holds an open reclaim unit from the
start (`open_every_handle`, default true), written or not: TP4146's reclaim unit handles each
reference a reclaim unit as soon as the FDP configuration is enabled, so the spare room a second
handle's open unit takes is a cost of the drive's FDP configuration, paid the same whether the host
then writes every page on handle 0 (`none`) or spreads them (`kind`); opening a handle's first line
on its first write (false) charges that cost to placement instead; under FEMU's free-line GC
thresholds one line of spare moves WAF by as much as placement does (bench/placement.py: LRU, log
layout, 144 lines of 16 MiB, WAF 1.001 with one handle, 1.128 on the two-handle drive).
With `ruh = 1` both are FEMU's single write pointer. FDP statistics per handle (`handle_counters`):
host pages, media pages (host + GC copies written into the handle's lines; slot `ruh` is the shared
GC frontier) and line erases, from which the FDP statistics log's host / media bytes written and
media bytes erased follow.

Counters: host pages written, GC-copied pages, line and block erases, WAF = (host + GC) / host,
erase count per block, host read pages, trimmed pages; per interval of `interval_host_pages`;
per placement handle (above).

State: `Ftl.copy` gives an independent drive in the same state (a preconditioned drive, played
again by each policy of a run: kvwear.emulator.precondition); `restart_intervals` starts the
per-interval counters afresh where a replay begins. Of the page maps only l2p is initialised at
start-up; p2l (the larger, one entry per physical page) is left untouched until pages are
programmed, which is the only way the kernel reaches an entry (see `Ftl.__init__`).

This module must not read files, time anything or know about block_ops tables: it takes page
numbers (numpy arrays). The hot loop is one numba-jitted kernel (`cache=True`); it prefetches the
maps' entries of requests (and of GC's victim pages) a few steps ahead (`_prefetch`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numba
import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir as _ir
from numba import types as _nbtypes
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic

from kvwear import jitcache
from kvwear.errors import KvwearError

jitcache.install()   # numba's cache saved under a lock: before any cached kernel is defined

GcMode = Literal["line", "block"]
Victim = Literal["greedy", "cost-benefit", "fifo"]
VICTIMS: tuple[str, ...] = ("greedy", "cost-benefit", "fifo")
GcHandles = Literal["per-handle", "shared"]
GC_HANDLES: tuple[str, ...] = ("per-handle", "shared")
MAX_RUH = 8

# op codes of `Ftl.apply_ops` (the sim backend maps block_ops' op column onto these)
OP_WRITE = 0
OP_READ = 1
OP_TRIM = 2

# scalar-state slots (one int64 array, so the kernel keeps everything in registers/arrays)
_FREE_HEAD, _FREE_TAIL, _FREE_CNT = 0, 1, 2
_HOST_PAGES, _GC_PAGES, _LINE_ERASES, _CLOSE_SEQ = 3, 4, 5, 6
_READ_PAGES, _UNMAPPED_READS, _TRIM_PAGES, _GC_RUNS, _FORCED_GC_RUNS = 7, 8, 9, 10, 11
_ERR_REQ, _HEAP_SIZE = 12, 13
# write frontiers follow: frontier f holds (open line, write offset) at _FRONT + 2f, _FRONT + 2f + 1.
# Frontiers 0 … ruh−1 are the handles' host frontiers, then the GC frontier(s) of separate_gc_line.
_FRONT = 14

# params slots
_P_PPL, _P_LINES, _P_NLPN, _P_MODE, _P_BG, _P_HIGH, _P_MININV, _P_VICTIM, _P_RESERVE = range(9)
_P_SEPGC, _P_TRIM, _P_RUH, _P_GCSHARED = 9, 10, 11, 12
_NPARAMS = 13

# `_run`'s per-request join flags (Ftl.apply_ops(joined=...)): the parts of one host request
_JOINS_PREV = 1                    # this request continues the one before it
_JOINED_NEXT = 2                   # the next request continues this one
_NO_JOINS = np.zeros(0, np.int8)   # every request a host request of its own

# line states
_FREE, _OPEN, _CLOSED, _VICTIM = 0, 1, 2, 3


def _open_lines(ruh: int, separate_gc_line: bool, gc_handles: str) -> int:
    """Write frontiers: one host frontier per handle, plus GC's own (separate_gc_line): one per
    handle, or one shared."""
    if not separate_gc_line:
        return ruh
    return ruh + (ruh if gc_handles == "per-handle" else 1)


@dataclass(frozen=True)
class FtlConfig:
    """Geometry and GC rules of one emulated drive. Use `femu(...)` or `block_level(...)`."""

    page_bytes: int
    pages_per_block: int
    blocks_per_line: int
    lines: int
    exposed_pages: int
    gc_mode: GcMode = "block"
    victim: Victim = "greedy"
    gc_thres_lines: int = 0            # line mode: background GC while free lines ≤ this
    gc_thres_lines_high: int = 0       # line mode: forced GC before a write while free ≤ this
    min_invalid_pages: int = 0         # line mode: background victim needs ≥ this many invalid
    reserve_lines: int = 2             # block mode: GC before a host page while free ≤ this
    separate_gc_line: bool = False     # GC copies to their own open line (else FEMU's shared one)
    ruh: int = 1                       # FDP reclaim unit handles: one host write frontier each
    gc_handles: GcHandles = "per-handle"  # GC copies stay in the victim's handle, or share one frontier
    open_every_handle: bool = True     # every handle holds an open line from the start (TP4146), not on first use
    honor_trim: bool = True            # FEMU's bbssd ignored DSM in older releases: set False
    interval_host_pages: int = 0       # per-interval counters every N host pages (0: none)
    description: str = ""
    channels: int = 1                  # line mode: FEMU nchs, the write pointer stripes channels first
    femu_params: dict[str, int] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("page_bytes", "pages_per_block", "blocks_per_line", "lines", "exposed_pages"):
            if getattr(self, name) <= 0:
                raise KvwearError(f"FtlConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.gc_mode not in ("line", "block"):
            raise KvwearError(f"FtlConfig.gc_mode must be 'line' or 'block', got {self.gc_mode!r}")
        if self.victim not in VICTIMS:
            raise KvwearError(f"FtlConfig.victim {self.victim!r}; valid: {', '.join(VICTIMS)}")
        if self.channels < 1 or self.blocks_per_line % self.channels:
            raise KvwearError(f"FtlConfig.channels {self.channels} does not divide the line's "
                              f"{self.blocks_per_line} blocks")
        if not 1 <= self.ruh <= MAX_RUH:
            raise KvwearError(f"FtlConfig.ruh (reclaim unit handles) must be 1–{MAX_RUH}, got {self.ruh}")
        if self.gc_handles not in GC_HANDLES:
            raise KvwearError(f"FtlConfig.gc_handles {self.gc_handles!r}; valid: {', '.join(GC_HANDLES)}")
        open_lines = self.open_lines
        if self.exposed_pages > (self.lines - open_lines) * self.pages_per_line:
            raise KvwearError(
                f"exposed capacity {self.exposed_pages} pages does not fit in {self.lines} lines of "
                f"{self.pages_per_line} pages minus {open_lines} open line(s)"
            )
        if self.gc_mode == "block" and self.reserve_lines < 1:
            raise KvwearError("FtlConfig.reserve_lines must be ≥ 1 in block mode (GC needs a free line)")

    @property
    def open_lines(self) -> int:
        """Lines that can be open at once: one per handle, plus GC's own frontier(s)."""
        return _open_lines(self.ruh, self.separate_gc_line, self.gc_handles)

    @property
    def pages_per_line(self) -> int:
        return self.pages_per_block * self.blocks_per_line

    @property
    def raw_pages(self) -> int:
        return self.lines * self.pages_per_line

    @property
    def raw_bytes(self) -> int:
        return self.raw_pages * self.page_bytes

    @property
    def exposed_bytes(self) -> int:
        return self.exposed_pages * self.page_bytes

    @property
    def blocks(self) -> int:
        return self.lines * self.blocks_per_line

    def gc_copy_order(self) -> np.ndarray:
        """The write offsets of a victim's pages in the order GC copies them. Line mode: FEMU's
        do_gc, block by block (channel outer, LUN inner, clean_one_block's pages in order): block
        (channel c, LUN u) holds the offsets k with k mod blocks_per_line = u·channels + c, its
        page p at k = p·blocks_per_line + u·channels + c. Block mode: write order."""
        ppl = self.pages_per_line
        if self.gc_mode != "line":
            return np.arange(ppl, dtype=np.int64)
        nb = self.blocks_per_line
        ch, lun, pg = np.meshgrid(np.arange(self.channels), np.arange(nb // self.channels),
                                  np.arange(self.pages_per_block), indexing="ij")
        return (pg * nb + lun * self.channels + ch).ravel().astype(np.int64)

    @classmethod
    def femu(
        cls,
        devsz_mb: int,
        secsz: int = 512,
        secs_per_pg: int = 8,
        pgs_per_blk: int = 256,
        blks_per_pl: int = 256,
        pls_per_lun: int = 1,
        luns_per_ch: int = 8,
        nchs: int = 8,
        gc_thres_pcent: int = 75,
        gc_thres_pcent_high: int = 95,
        *,
        victim: Victim = "greedy",
        ruh: int = 1,
        gc_handles: GcHandles = "per-handle",
        open_every_handle: bool = True,
        separate_gc_line: bool = False,
        honor_trim: bool = True,
        interval_host_pages: int = 0,
    ) -> FtlConfig:
        """FEMU's black-box SSD from its `-device femu,...` parameters.

        A line is one block on every LUN (nchs·luns_per_ch blocks; FEMU has one plane); there are
        `blks_per_pl` lines. Thresholds are computed as FEMU does, in C doubles truncated to int:
        lines·(1 − pcent/100)."""
        if pls_per_lun != 1:
            # FEMU's line is one block per LUN on plane 0 (ftl-geom.c: "TODO: to fix under
            # multiplanes"); with more planes its line ids run past a plane's blocks
            raise KvwearError(f"FEMU's black-box FTL assumes one plane per LUN; pls_per_lun={pls_per_lun} "
                              "has no FEMU behaviour to reproduce")
        page_bytes = secsz * secs_per_pg
        blocks_per_line = nchs * luns_per_ch
        lines = blks_per_pl
        exposed = devsz_mb * 2**20
        if exposed % page_bytes:
            raise KvwearError(f"devsz_mb={devsz_mb} is not a whole number of {page_bytes}-byte pages")
        ppl = pgs_per_blk * blocks_per_line
        return cls(
            page_bytes=page_bytes,
            pages_per_block=pgs_per_blk,
            blocks_per_line=blocks_per_line,
            lines=lines,
            exposed_pages=exposed // page_bytes,
            gc_mode="line",
            victim=victim,
            gc_thres_lines=int((1 - gc_thres_pcent / 100.0) * lines),
            gc_thres_lines_high=int((1 - gc_thres_pcent_high / 100.0) * lines),
            min_invalid_pages=ppl // 8,
            channels=nchs,
            separate_gc_line=separate_gc_line,
            ruh=ruh,
            gc_handles=gc_handles,
            open_every_handle=open_every_handle,
            honor_trim=honor_trim,
            interval_host_pages=interval_host_pages,
            description=(
                f"femu devsz_mb={devsz_mb} {nchs}ch×{luns_per_ch}lun, {lines} lines of "
                f"{ppl} pages, gc {gc_thres_pcent}/{gc_thres_pcent_high}%"
            ),
            femu_params=dict(
                devsz_mb=devsz_mb, secsz=secsz, secs_per_pg=secs_per_pg, pgs_per_blk=pgs_per_blk,
                blks_per_pl=blks_per_pl, pls_per_lun=pls_per_lun, luns_per_ch=luns_per_ch, nchs=nchs,
                gc_thres_pcent=gc_thres_pcent, gc_thres_pcent_high=gc_thres_pcent_high,
            ),
        )

    @classmethod
    def block_level(
        cls,
        exposed_bytes: int,
        op_ratio: float,
        *,
        page_bytes: int = 4096,
        pages_per_block: int = 64,
        blocks_per_line: int = 1,
        reserve_lines: int = 2,
        victim: Victim = "greedy",
        separate_gc_line: bool = False,
        ruh: int = 1,
        gc_handles: GcHandles = "per-handle",
        open_every_handle: bool = True,
        honor_trim: bool = True,
        interval_host_pages: int = 0,
    ) -> FtlConfig:
        """A plain block-level FTL with over-provisioning ρ = `op_ratio`, reclaiming units
        ("lines") of `blocks_per_line` erase blocks of `pages_per_block` pages (1: single blocks;
        more: a superblock, one block on each plane of each die, erased together).

        The space GC can use is ⌈exposed·(1+ρ)⌉ rounded up to whole units; the GC reserve
        (`reserve_lines` free units) and the open unit(s) (one per write frontier: `ruh` host
        frontiers plus GC's own) are added on top, so the analytical model's α = 1 + ρ describes
        this drive (see kvwear.harness.estimate.estimator.effective_alpha)."""
        if op_ratio < 0:
            raise KvwearError(f"op_ratio must be ≥ 0, got {op_ratio}")
        if blocks_per_line < 1:
            raise KvwearError(f"blocks_per_line must be ≥ 1, got {blocks_per_line}")
        exposed_pages = -(-exposed_bytes // page_bytes)
        ppl = pages_per_block * blocks_per_line
        data_blocks = math.ceil(exposed_pages * (1.0 + op_ratio) / ppl - 1e-9)
        open_lines = _open_lines(ruh, separate_gc_line, gc_handles)
        unit = (f"{pages_per_block} pages" if blocks_per_line == 1
                else f"{blocks_per_line} blocks of {pages_per_block} pages")
        return cls(
            page_bytes=page_bytes,
            pages_per_block=pages_per_block,
            blocks_per_line=blocks_per_line,
            lines=data_blocks + reserve_lines + open_lines,
            exposed_pages=exposed_pages,
            gc_mode="block",
            victim=victim,
            reserve_lines=reserve_lines,
            separate_gc_line=separate_gc_line,
            ruh=ruh,
            gc_handles=gc_handles,
            open_every_handle=open_every_handle,
            honor_trim=honor_trim,
            interval_host_pages=interval_host_pages,
            description=f"block-level ρ={op_ratio:g}, {data_blocks} data "
                        f"{'blocks' if blocks_per_line == 1 else 'units'} of {unit}"
                        + (f", {ruh} reclaim unit handles (GC {gc_handles})" if ruh > 1 else ""),
        )

    def with_(self, **changes: object) -> FtlConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class FtlCounters:
    """Cumulative counters. WAF = (host + GC pages) / host pages (1.0 before any write)."""

    page_bytes: int
    host_pages: int
    gc_pages: int
    line_erases: int
    block_erases: int
    read_pages: int
    unmapped_read_pages: int
    trim_pages: int
    gc_runs: int
    forced_gc_runs: int
    free_lines: int
    valid_pages: int

    @property
    def nand_pages(self) -> int:
        return self.host_pages + self.gc_pages

    @property
    def host_bytes(self) -> int:
        return self.host_pages * self.page_bytes

    @property
    def nand_bytes(self) -> int:
        return self.nand_pages * self.page_bytes

    @property
    def waf(self) -> float:
        return self.nand_pages / self.host_pages if self.host_pages else 1.0

    def minus(self, before: FtlCounters) -> FtlCounters:
        """Delta between two snapshots (free_lines/valid_pages keep this snapshot's values)."""
        return FtlCounters(
            page_bytes=self.page_bytes,
            host_pages=self.host_pages - before.host_pages,
            gc_pages=self.gc_pages - before.gc_pages,
            line_erases=self.line_erases - before.line_erases,
            block_erases=self.block_erases - before.block_erases,
            read_pages=self.read_pages - before.read_pages,
            unmapped_read_pages=self.unmapped_read_pages - before.unmapped_read_pages,
            trim_pages=self.trim_pages - before.trim_pages,
            gc_runs=self.gc_runs - before.gc_runs,
            forced_gc_runs=self.forced_gc_runs - before.forced_gc_runs,
            free_lines=self.free_lines,
            valid_pages=self.valid_pages,
        )


@dataclass(frozen=True)
class FtlHandleCounters:
    """FDP statistics per reclaim unit handle. `host_pages[h]`: host pages written with handle h;
    `media_pages[h]`: pages programmed into handle h's lines (host + GC copies), the last slot the
    shared GC frontier's; `line_erases[h]`: erased lines that held handle h's data (same slots).
    Totals: host / media bytes written and media bytes erased, the FDP statistics log's HBMW,
    MBMW and MBE (no metadata here)."""

    page_bytes: int
    pages_per_line: int
    host_pages: tuple[int, ...]
    media_pages: tuple[int, ...]
    line_erases: tuple[int, ...]

    @property
    def host_bytes(self) -> int:
        return sum(self.host_pages) * self.page_bytes

    @property
    def media_bytes(self) -> int:
        return sum(self.media_pages) * self.page_bytes

    @property
    def media_bytes_erased(self) -> int:
        return sum(self.line_erases) * self.pages_per_line * self.page_bytes

    def waf(self, handle: int) -> float | None:
        """Media pages ÷ host pages of one handle (None when it wrote nothing)."""
        h = self.host_pages[handle]
        return self.media_pages[handle] / h if h else None

    def minus(self, before: FtlHandleCounters) -> FtlHandleCounters:
        def sub(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(x - y for x, y in zip(a, b, strict=True))

        return FtlHandleCounters(self.page_bytes, self.pages_per_line, sub(self.host_pages, before.host_pages),
                                 sub(self.media_pages, before.media_pages), sub(self.line_erases, before.line_erases))


@dataclass(frozen=True)
class FtlIntervals:
    """Counter snapshots taken every `interval_host_pages` host pages (cumulative values)."""

    host_pages: np.ndarray
    gc_pages: np.ndarray
    line_erases: np.ndarray

    @property
    def interval_waf(self) -> np.ndarray:
        """WAF inside each interval (NaN where no host page was written)."""
        dh = np.diff(self.host_pages, prepend=0).astype(np.float64)
        dg = np.diff(self.gc_pages, prepend=0).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(dh > 0, (dh + dg) / dh, np.nan)


# ----------------------------------------------------------------------------------------------
# the jitted kernel

# Why one flat kernel: a numba call that is not inlined marshals every array argument and
# adjusts its reference count, ~100 ns for a dozen arrays — 20× the cost of programming a page.
# So the per-page paths (host write, trim, GC copy, invalidation) are written inline (numba's
# inline="always" helpers measured 2–24× slower there, block mode, random 4 KiB and sequential
# 64-page writes); only rare events (closing a line, one GC run, picking or removing a victim)
# are calls.
#
# `lhandle[line]` is the handle whose frontier opened the line (ruh: the shared GC frontier);
# `hs` holds the per-handle counters: host pages [0, ruh), media pages [ruh+1, 2·ruh+2) and line
# erases [2·ruh+2, 3·ruh+3), each with one slot per handle plus the shared GC slot.
#
# Victim bookkeeping. Block mode: closed lines sit in per-valid-count buckets (doubly linked
# lists `head`/`nxt`/`prv`, newest first), so greedy takes the head of the lowest bucket in O(1).
# Line mode: FEMU's victim priority queue, the binary min-heap on valid pages of its pqueue
# library, reproduced operation for operation so that ties between equally valid lines fall as
# they fall in FEMU: `hq[1 … size−1]` the heap (slot 0 unused, size in sc[_HEAP_SIZE] counted as
# pqueue counts it, from 1), `hpos[line]` a line's slot (0: not queued). FEMU queues a line when
# it closes with an invalid page, or at the first invalidation of a line that closed full; every
# invalidation of a queued line re-sifts it (pqueue_change_priority). Sifting compares strictly
# (a line moves past another only with strictly fewer / more valid pages), as pqueue's
# `cmppri(next, curr) = next > curr` does.


@numba.njit(cache=True)
def _heap_up(i, hq, hpos, vpc):
    """pqueue's bubble_up: move slot i's line rootwards past every parent with more valid pages."""
    moving = hq[i]
    mp = vpc[moving]
    while i > 1:
        par = hq[i >> 1]
        if vpc[par] <= mp:
            break
        hq[i] = par
        hpos[par] = i
        i >>= 1
    hq[i] = moving
    hpos[moving] = i


@numba.njit(cache=True)
def _heap_down(i, hq, hpos, vpc, size):
    """pqueue's percolate_down: the left child unless the right has fewer valid pages (a tie goes
    left); move down while that child has fewer valid pages than the moving line."""
    moving = hq[i]
    mp = vpc[moving]
    while True:
        c = 2 * i
        if c >= size:
            break
        if c + 1 < size and vpc[hq[c]] > vpc[hq[c + 1]]:
            c += 1
        if mp <= vpc[hq[c]]:
            break
        hq[i] = hq[c]
        hpos[hq[i]] = i
        i = c
    hq[i] = moving
    hpos[moving] = i


@numba.njit(cache=True)
def _heap_insert(line, sc, hq, hpos, vpc):
    """pqueue_insert: append at the last slot and bubble up."""
    i = sc[_HEAP_SIZE]
    sc[_HEAP_SIZE] = i + 1
    hq[i] = line
    _heap_up(i, hq, hpos, vpc)


@numba.njit(cache=True)
def _heap_remove(line, sc, hq, hpos, vpc):
    """pqueue_remove (pqueue_pop is the same for the root): the last slot's line takes the removed
    line's slot and moves up if the removed line had more valid pages than it, else down."""
    posn = hpos[line]
    size = sc[_HEAP_SIZE] - 1
    sc[_HEAP_SIZE] = size
    hq[posn] = hq[size]
    if vpc[line] > vpc[hq[posn]]:
        _heap_up(posn, hq, hpos, vpc)
    else:
        _heap_down(posn, hq, hpos, vpc, size)
    hpos[line] = 0          # FEMU's select_victim_line: victim_line->pos = 0


# LLVM names the prefetch intrinsic by its pointer type: opaque pointers (LLVM ≥ 15) or i8*.
_PREFETCH = "llvm.prefetch.p0" if _llvm.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"


def _prefetch_typer(typingctx, arr, idx):
    """Hint the CPU to fetch `arr[idx]` for writing (no effect on results). The maps are hundreds
    of MB and hit at random; fetching the mappings of requests (and of GC's victim pages) a few steps
    ahead overlaps their cache misses: random 4 KiB writes on a 268.8 GB drive went from 186 to 65 ns
    a page (interleaved, same counters)."""
    sig = _nbtypes.void(arr, idx)

    def codegen(context, builder, signature, args):
        a, i = args
        aty = signature.args[0]
        ptr = _cgutils.get_item_pointer(context, builder, aty, context.make_array(aty)(context, builder, a), [i],
                                        wraparound=False)
        i8p, i32 = _ir.IntType(8).as_pointer(), _ir.IntType(32)
        fn = _cgutils.get_or_insert_function(builder.module, _ir.FunctionType(_ir.VoidType(), [i8p, i32, i32, i32]),
                                            _PREFETCH)
        # rw = 1 (for writing), locality = 3 (keep in all cache levels), cache type = 1 (data)
        builder.call(fn, [builder.bitcast(ptr, i8p), _ir.Constant(i32, 1), _ir.Constant(i32, 3), _ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


# numba's intrinsic object (typed by numba, called only from jitted code)
_prefetch: Any = _intrinsic(_prefetch_typer)

# How many requests (GC: pages) ahead the maps are fetched: far enough to hide a DRAM miss behind
# the work of the requests in between, near enough that the lines are still cached when used.
_AHEAD = 16


@numba.njit(cache=True)
def _frontier_handle(f, pr):
    """The handle a frontier writes for: host frontiers and per-handle GC frontiers their handle,
    the shared GC frontier slot `ruh`."""
    ruh = pr[_P_RUH]
    if f < ruh:
        return f
    return ruh if pr[_P_GCSHARED] == 1 else f - ruh


@numba.njit(cache=True)
def _close_line(line, li, sc, vpc, lstate, head, nxt, prv, hq, hpos, close_seq, free_ring, lhandle, pr):
    """The line at pointer slot `li` is full: close it and take the next free line right away, as
    FEMU's write-pointer advance does (-1 when none is left). Block mode: into its valid-count
    bucket. Line mode (FEMU): onto the victim heap if a page is already invalid, else onto the full
    list (no structure here: a closed line off the heap)."""
    n_lines = pr[_P_LINES]
    lstate[line] = _CLOSED
    close_seq[line] = sc[_CLOSE_SEQ]
    sc[_CLOSE_SEQ] += 1
    v = vpc[line]
    if pr[_P_MODE] == 0:
        if v < pr[_P_PPL]:
            _heap_insert(line, sc, hq, hpos, vpc)
    else:
        h = head[v]
        nxt[line] = h
        prv[line] = -1
        if h >= 0:
            prv[h] = line
        head[v] = line
    sc[li + 1] = 0
    if sc[_FREE_CNT] == 0:
        sc[li] = -1
        return
    nl = free_ring[sc[_FREE_HEAD]]
    sc[_FREE_HEAD] = (sc[_FREE_HEAD] + 1) % (n_lines + 1)
    sc[_FREE_CNT] -= 1
    lstate[nl] = _OPEN
    lhandle[nl] = lhandle[line]
    sc[li] = nl


@numba.njit(cache=True)
def _open_line(li, sc, lstate, free_ring, lhandle, tag, n_lines):
    """Give pointer slot `li` a free line for handle `tag`; False when none is left."""
    if sc[_FREE_CNT] == 0:
        return False
    nl = free_ring[sc[_FREE_HEAD]]
    sc[_FREE_HEAD] = (sc[_FREE_HEAD] + 1) % (n_lines + 1)
    sc[_FREE_CNT] -= 1
    lstate[nl] = _OPEN
    lhandle[nl] = tag
    sc[li] = nl
    sc[li + 1] = 0
    return True


@numba.njit(cache=True)
def _select_victim(sc, vpc, lstate, head, hq, close_seq, pr):
    """The victim GC would take (-1: none), left where it is. Greedy: fewest valid pages (line
    mode: the heap's root, FEMU's pqueue_peek). FIFO: the earliest closed line. Cost-benefit: the
    largest age·(1−u)/(2u). Line mode scans FIFO and cost-benefit candidates in heap-slot order as
    FEMU does (so ties fall as there); block mode scans lines by number."""
    ppl = pr[_P_PPL]
    policy = pr[_P_VICTIM]
    line_mode = pr[_P_MODE] == 0
    size = sc[_HEAP_SIZE]
    if policy == 0:
        if line_mode:
            return hq[1] if size > 1 else -1
        for v in range(ppl):  # a fully valid line (bucket ppl) is never a victim
            if head[v] >= 0:
                return head[v]
        return -1
    n = size - 1 if line_mode else pr[_P_LINES]
    best = -1
    if policy == 2:  # fifo: oldest close
        best_seq = np.int64(1) << 62
        for i in range(n):
            line = hq[i + 1] if line_mode else i
            if not line_mode and (lstate[line] != _CLOSED or vpc[line] >= ppl):
                continue
            if close_seq[line] < best_seq:
                best_seq = close_seq[line]
                best = line
        return best
    # cost-benefit: maximise age·(ppl−v)/(2v), age in line closes (a logical clock; FEMU's is
    # nanoseconds of wall time, which no replay reproduces). An empty line always wins: the first
    # one by number in block mode, the last in heap order in line mode (FEMU's loop re-takes every
    # empty line it meets).
    now = sc[_CLOSE_SEQ]
    b_age = 0
    b_inv = 0
    b_val = 1
    for i in range(n):
        line = hq[i + 1] if line_mode else i
        if not line_mode and (lstate[line] != _CLOSED or vpc[line] >= ppl):
            continue
        val = vpc[line]
        inv = ppl - val
        age = now - close_seq[line]
        if val == 0:
            if line_mode or best < 0 or b_val != 0:
                best = line
                b_age = age
                b_inv = inv
                b_val = 0
            continue
        if b_val == 0 and best >= 0:
            continue
        # age·inv/val > b_age·b_inv/b_val, in float to avoid overflow of the triple product
        if best < 0 or float(age) * inv * b_val > float(b_age) * b_inv * val:
            best = line
            b_age = age
            b_inv = inv
            b_val = val
    return best


@numba.njit(cache=True)
def _gc(force, sc, l2p, p2l, vpc, lstate, head, nxt, prv, hq, hpos, gcord, close_seq, free_ring, line_erases,
        lhandle, hs, pr):
    """One GC run: relocate the victim's valid pages, erase it. 1 done, 0 no victim, -1 no space.
    Pages are copied in `gcord` order of their write offsets: line mode, FEMU's do_gc order (block
    by block: channel, then LUN, then page in the block); block mode, write order."""
    ppl = pr[_P_PPL]
    n_lines = pr[_P_LINES]
    ruh = pr[_P_RUH]
    victim = _select_victim(sc, vpc, lstate, head, hq, close_seq, pr)
    if victim < 0:
        return 0
    if not force and ppl - vpc[victim] < pr[_P_MININV]:
        return 0
    if pr[_P_MODE] == 0:
        _heap_remove(victim, sc, hq, hpos, vpc)
    else:
        v = vpc[victim]
        p = prv[victim]
        n = nxt[victim]
        if p >= 0:
            nxt[p] = n
        else:
            head[v] = n
        if n >= 0:
            prv[n] = p
    lstate[victim] = _VICTIM
    vh = lhandle[victim]
    # the destination frontier: per-handle GC keeps the victim's handle, shared GC has one frontier
    sep = pr[_P_SEPGC] == 1
    f = (ruh if sep else 0) if pr[_P_GCSHARED] == 1 else (vh + ruh if sep else vh)
    li = _FRONT + 2 * f
    tag = _frontier_handle(f, pr)
    base = victim * ppl
    line = sc[li]
    woff = sc[li + 1]
    copied = 0
    for j in range(ppl):
        off = gcord[j]
        if j + _AHEAD < ppl:
            ahead = p2l[base + gcord[j + _AHEAD]]
            if ahead >= 0:
                _prefetch(l2p, ahead)
        lpn = p2l[base + off]
        if lpn < 0:
            continue
        if line < 0:
            if not _open_line(li, sc, lstate, free_ring, lhandle, tag, n_lines):
                sc[_GC_PAGES] += copied
                hs[ruh + 1 + tag] += copied
                return -1
            line = sc[li]
            woff = 0
        # the old copy is in the victim (in no bucket, off the heap): plain decrement
        p2l[base + off] = -1
        vpc[victim] -= 1
        ppn = line * ppl + woff
        p2l[ppn] = lpn
        l2p[lpn] = ppn
        vpc[line] += 1
        woff += 1
        copied += 1
        if woff == ppl:
            _close_line(line, li, sc, vpc, lstate, head, nxt, prv, hq, hpos, close_seq, free_ring, lhandle, pr)
            line = sc[li]
            woff = 0
    sc[li] = line
    sc[li + 1] = woff
    sc[_GC_PAGES] += copied
    hs[ruh + 1 + tag] += copied
    hs[2 * (ruh + 1) + vh] += 1
    vpc[victim] = 0
    lstate[victim] = _FREE
    line_erases[victim] += 1
    sc[_LINE_ERASES] += 1
    free_ring[sc[_FREE_TAIL]] = victim
    sc[_FREE_TAIL] = (sc[_FREE_TAIL] + 1) % (n_lines + 1)
    sc[_FREE_CNT] += 1
    sc[_GC_RUNS] += 1
    if force:
        sc[_FORCED_GC_RUNS] += 1
    return 1


@numba.njit(cache=True)
def _run(ops, starts, npages, handles, joins, sc, l2p, p2l, vpc, lstate, head, nxt, prv, hq, hpos, gcord, close_seq,
         free_ring, line_erases, lhandle, hs, pr):
    """Play requests in order (`handles`: each request's placement handle). `joins` (empty, or one
    flag per request): _JOINS_PREV, the request continues the host request before it (no forced
    GC before it); _JOINED_NEXT, the next request continues this one (no background GC after it).
    Returns -1 when done, else the index of the request that found no free line to write to (the
    device is out of space: GC could not reclaim anything)."""
    line_mode = pr[_P_MODE] == 0
    ppl = pr[_P_PPL]
    high = pr[_P_HIGH]
    bg = pr[_P_BG]
    reserve = pr[_P_RESERVE]
    do_trim = pr[_P_TRIM] == 1
    ruh = pr[_P_RUH]
    n_lines = pr[_P_LINES]
    nops = ops.shape[0]
    joined = joins.shape[0] > 0
    for r in range(nops):
        op = ops[r]
        s = starts[r]
        n = npages[r]
        # fetch the mapping of the request _AHEAD on, and the physical page of the one half as far on
        if r + _AHEAD < nops:
            _prefetch(l2p, starts[r + _AHEAD])
        if r + _AHEAD // 2 < nops:
            ahead = l2p[starts[r + _AHEAD // 2]]
            if ahead >= 0:
                _prefetch(p2l, ahead)
        if op == 1:
            for lpn in range(s, s + n):
                if l2p[lpn] >= 0:
                    sc[_READ_PAGES] += 1
                else:
                    sc[_UNMAPPED_READS] += 1
        elif op == 0 or do_trim:
            # writes and trims share the page loop, so a page stops being valid in one place
            write = op == 0
            if write and line_mode and not (joined and joins[r] & _JOINS_PREV):
                # FEMU's ssd_write: forced GC before the request's first page
                while sc[_FREE_CNT] <= high:
                    if _gc(True, sc, l2p, p2l, vpc, lstate, head, nxt, prv, hq, hpos, gcord, close_seq,
                           free_ring, line_erases, lhandle, hs, pr) != 1:
                        break
            # hot scalars live in locals; sc is synced around the calls that use them
            hd = handles[r] if write else 0
            li = _FRONT + 2 * hd
            line = sc[li]
            off = sc[li + 1]
            fc = sc[_FREE_CNT]
            for lpn in range(s, s + n):
                if write and not line_mode and fc <= reserve:
                    sc[li] = line
                    sc[li + 1] = off
                    while sc[_FREE_CNT] <= reserve:
                        if _gc(True, sc, l2p, p2l, vpc, lstate, head, nxt, prv, hq, hpos, gcord, close_seq,
                               free_ring, line_erases, lhandle, hs, pr) != 1:
                            break
                    line = sc[li]
                    off = sc[li + 1]
                    fc = sc[_FREE_CNT]
                if write and line < 0:
                    if not _open_line(li, sc, lstate, free_ring, lhandle, hd, n_lines):
                        sc[_HOST_PAGES] += lpn - s
                        hs[hd] += lpn - s
                        hs[ruh + 1 + hd] += lpn - s
                        sc[_ERR_REQ] = r
                        return r
                    line = sc[li]
                    off = 0
                    fc = sc[_FREE_CNT]
                old = l2p[lpn]
                if old >= 0:
                    # the old copy stops being valid (FEMU's mark_page_invalid): an open line only
                    # counts; a closed one moves down one valid-count bucket (block mode) or is
                    # re-sifted in the victim heap, joining it if it closed full (line mode: a
                    # key that falls only bubbles up, as pqueue_change_priority moves it)
                    ol = old // ppl
                    p2l[old] = -1
                    v = vpc[ol]
                    vpc[ol] = v - 1
                    if lstate[ol] == _CLOSED:
                        if line_mode:
                            i = hpos[ol]
                            if i == 0:
                                i = sc[_HEAP_SIZE]
                                sc[_HEAP_SIZE] = i + 1
                            while i > 1:
                                par = hq[i >> 1]
                                if vpc[par] < v:
                                    break
                                hq[i] = par
                                hpos[par] = i
                                i >>= 1
                            hq[i] = ol
                            hpos[ol] = i
                        else:
                            p = prv[ol]
                            nx = nxt[ol]
                            if p >= 0:
                                nxt[p] = nx
                            else:
                                head[v] = nx
                            if nx >= 0:
                                prv[nx] = p
                            h = head[v - 1]
                            nxt[ol] = h
                            prv[ol] = -1
                            if h >= 0:
                                prv[h] = ol
                            head[v - 1] = ol
                if not write:
                    if old >= 0:
                        l2p[lpn] = -1
                        sc[_TRIM_PAGES] += 1
                    continue
                ppn = line * ppl + off
                p2l[ppn] = lpn
                l2p[lpn] = ppn
                vpc[line] += 1
                off += 1
                if off == ppl:
                    _close_line(line, li, sc, vpc, lstate, head, nxt, prv, hq, hpos, close_seq, free_ring,
                                lhandle, pr)
                    line = sc[li]
                    off = 0
                    fc = sc[_FREE_CNT]
            if write:
                sc[li] = line
                sc[li + 1] = off
                sc[_HOST_PAGES] += n
                hs[hd] += n
                hs[ruh + 1 + hd] += n
        # background GC: one run after each request of any kind (FEMU's bb_ftl_process_req)
        if line_mode and sc[_FREE_CNT] <= bg and not (joined and joins[r] & _JOINED_NEXT) and _gc(
                False, sc, l2p, p2l, vpc, lstate, head, nxt, prv, hq, hpos, gcord, close_seq, free_ring,
                line_erases, lhandle, hs, pr) < 0:
            sc[_ERR_REQ] = r
            return r
    return -1


# ----------------------------------------------------------------------------------------------


class Ftl:
    """One emulated drive. Entry points take numpy arrays of logical page numbers (LPNs)."""

    def __init__(self, config: FtlConfig) -> None:
        self.config = c = config
        ppl = c.pages_per_line
        # page maps in int32 while page numbers fit (2^31 pages: 8 TiB of 4 KiB pages): they are
        # the drive's memory (8 bytes a page for both), 4.3 GB as int64 for a 1 TB sim drive
        maps = np.dtype(np.int32) if c.raw_pages < 2**31 - 1 else np.dtype(np.int64)
        self._l2p = np.full(c.exposed_pages, -1, dtype=maps)
        # p2l is left uninitialised (the larger map, never written until used: its memory is not
        # touched at start-up): the kernel reads a physical page's entry only once the page has been
        # programmed (GC scans closed lines, invalidation reads the page a mapping points to), and an
        # erased line's entries are all -1 again (GC clears what it moves; invalidation the rest).
        # check_invariants looks only at programmed pages.
        self._p2l = np.empty(c.raw_pages, dtype=maps)
        self._vpc = np.zeros(c.lines, dtype=np.int64)
        self._lstate = np.zeros(c.lines, dtype=np.int8)
        self._head = np.full(ppl + 1, -1, dtype=np.int64)
        self._nxt = np.full(c.lines, -1, dtype=np.int64)
        self._prv = np.full(c.lines, -1, dtype=np.int64)
        # line mode: FEMU's victim heap (kernel comment) and its GC copy order
        self._hq = np.zeros(c.lines + 1, dtype=np.int64)
        self._hpos = np.zeros(c.lines, dtype=np.int64)
        self._gcord = c.gc_copy_order()
        self._close_seq = np.zeros(c.lines, dtype=np.int64)
        self._line_erases = np.zeros(c.lines, dtype=np.int64)
        # free lines as a FIFO ring (FEMU: take the head of the free list, append freed lines)
        self._free_ring = np.zeros(c.lines + 1, dtype=np.int64)
        self._free_ring[: c.lines] = np.arange(c.lines)
        sc = np.zeros(_FRONT + 2 * c.open_lines, dtype=np.int64)
        sc[_FREE_HEAD], sc[_FREE_TAIL], sc[_FREE_CNT] = 0, c.lines, c.lines
        sc[_FRONT::2] = -1                 # every frontier starts without a line
        sc[_ERR_REQ] = -1
        sc[_HEAP_SIZE] = 1                 # pqueue counts its unused slot 0
        self._lhandle = np.zeros(c.lines, dtype=np.int64)
        self._hs = np.zeros(3 * (c.ruh + 1), dtype=np.int64)
        self._sc = sc
        pr = np.zeros(_NPARAMS, dtype=np.int64)
        pr[_P_PPL] = ppl
        pr[_P_LINES] = c.lines
        pr[_P_NLPN] = c.exposed_pages
        pr[_P_MODE] = 0 if c.gc_mode == "line" else 1
        pr[_P_BG] = c.gc_thres_lines
        pr[_P_HIGH] = c.gc_thres_lines_high
        pr[_P_MININV] = c.min_invalid_pages
        pr[_P_VICTIM] = VICTIMS.index(c.victim)
        pr[_P_RESERVE] = c.reserve_lines
        pr[_P_SEPGC] = 1 if c.separate_gc_line else 0
        pr[_P_TRIM] = 1 if c.honor_trim else 0
        pr[_P_RUH] = c.ruh
        pr[_P_GCSHARED] = 1 if c.gc_handles == "shared" else 0
        self._pr = pr
        # FEMU opens its first line at start-up (ssd_init_write_pointer): the free count starts
        # at lines − 1, which matters for the GC thresholds
        sc[_FREE_HEAD], sc[_FREE_CNT] = 1, c.lines - 1
        self._lstate[0] = _OPEN
        sc[_FRONT], sc[_FRONT + 1] = 0, 0  # … as handle 0's host frontier
        if c.open_every_handle:
            # FDP: every reclaim unit handle references a reclaim unit from the moment the
            # configuration is enabled, whether the host writes to it or not (module docstring)
            for h in range(1, c.ruh):
                line = int(self._free_ring[sc[_FREE_HEAD]])
                sc[_FREE_HEAD] += 1
                sc[_FREE_CNT] -= 1
                self._lstate[line] = _OPEN
                self._lhandle[line] = h
                sc[_FRONT + 2 * h], sc[_FRONT + 2 * h + 1] = line, 0
        self._iv_host: list[int] = []
        self._iv_gc: list[int] = []
        self._iv_erase: list[int] = []
        self._every = c.interval_host_pages
        self._next_mark = c.interval_host_pages if c.interval_host_pages > 0 else 0

    def copy(self, into: Ftl | None = None) -> Ftl:
        """An independent drive in this one's exact state (a preconditioned drive, played again).

        `into`, a drive of the same configuration that nobody uses any more, is overwritten and
        returned: its arrays are already the process's memory, where a new copy of a 268.8 GB
        drive's 600 MB of page maps takes the kernel 0.3-3 s of page faults (measured in a VM)."""
        if into is not None and into.config != self.config:
            raise ValueError(f"copy into a drive of another configuration: {into.config.description} "
                             f"for {self.config.description}")
        out = Ftl.__new__(Ftl) if into is None else into
        for k, v in self.__dict__.items():
            if isinstance(v, np.ndarray):
                dst = out.__dict__.get(k) if into is not None else None
                if isinstance(dst, np.ndarray) and dst.shape == v.shape and dst.dtype == v.dtype:
                    np.copyto(dst, v)
                    continue
                v = v.copy()
            elif isinstance(v, list):
                v = list(v)
            out.__dict__[k] = v
        return out

    @property
    def nbytes(self) -> int:
        """The memory of the drive's state (its page maps, line tables and counters)."""
        return sum(v.nbytes for v in self.__dict__.values() if isinstance(v, np.ndarray))

    @property
    def interval_every(self) -> int:
        """Host pages between counter snapshots (0: none)."""
        return self._every

    def restart_intervals(self, every: int) -> None:
        """Take counter snapshots every `every` host pages from now on (0: none), forgetting the
        earlier ones: a replay's intervals then start where the drive's preconditioning ended."""
        self._iv_host, self._iv_gc, self._iv_erase = [], [], []
        self._every = max(0, int(every))
        self._next_mark = int(self._sc[_HOST_PAGES]) + self._every if self._every else 0

    # -- entry points --------------------------------------------------------------------------

    def write(self, lpns: np.ndarray, handle: int = 0) -> None:
        """Write each LPN as its own one-page request, in order, with placement handle `handle`."""
        lpns = np.ascontiguousarray(lpns, dtype=np.int64)
        self.apply_ops(np.zeros(len(lpns), np.int8), lpns, np.ones(len(lpns), np.int64),
                       np.full(len(lpns), handle, np.int64) if handle else None)

    def trim(self, lpns: np.ndarray) -> None:
        lpns = np.ascontiguousarray(lpns, dtype=np.int64)
        self.apply_ops(np.full(len(lpns), OP_TRIM, np.int8), lpns, np.ones(len(lpns), np.int64))

    def read(self, lpns: np.ndarray) -> None:
        lpns = np.ascontiguousarray(lpns, dtype=np.int64)
        self.apply_ops(np.full(len(lpns), OP_READ, np.int8), lpns, np.ones(len(lpns), np.int64))

    def apply_ops(self, op_codes: np.ndarray, start_lpn: np.ndarray, npages: np.ndarray,
                  handles: np.ndarray | None = None, joined: np.ndarray | None = None) -> None:
        """Play requests (OP_WRITE/OP_READ/OP_TRIM, first LPN, page count, placement handle — all
        0 when `handles` is None; reads and trims ignore it) in order.

        `joined` (bool per request, or None: every request its own): request r is a further part
        of the host request that request r − 1 belongs to, as the parts of one request split where
        its addresses are not contiguous. The parts play as one host request in line mode: forced
        GC only before its first part, background GC only after its last (block mode's GC, on
        demand before each page, does not see requests). The first request of a call always
        starts a host request.

        Raises KvwearError on an LPN outside the exposed capacity, a handle outside [0, ruh), or
        when the drive has no free line left (every line full of valid data)."""
        ops = np.ascontiguousarray(op_codes, dtype=np.int8)
        starts = np.ascontiguousarray(start_lpn, dtype=np.int64)
        n = np.ascontiguousarray(npages, dtype=np.int64)
        hd = (np.zeros(len(ops), np.int64) if handles is None
              else np.ascontiguousarray(handles, dtype=np.int64))
        jn = _NO_JOINS
        if joined is not None:
            j = np.asarray(joined, dtype=np.bool_)
            if len(j) != len(ops):
                raise KvwearError("apply_ops: joined and op_codes differ in length")
            if len(j) and j[1:].any():
                jn = np.zeros(len(j), np.int8)
                jn[1:] = np.where(j[1:], _JOINS_PREV, 0)
                jn[:-1] |= np.where(j[1:], _JOINED_NEXT, 0).astype(np.int8)
        if not (len(ops) == len(starts) == len(n) == len(hd)):
            raise KvwearError("apply_ops: op_codes, start_lpn, npages and handles differ in length")
        if len(ops) == 0:
            return
        if handles is not None:
            badh = np.flatnonzero((hd < 0) | (hd >= self.config.ruh))
            if badh.size:
                i = int(badh[0])
                raise KvwearError(f"request {i}: placement handle {int(hd[i])} outside [0, {self.config.ruh}) "
                                  f"(the drive has {self.config.ruh} reclaim unit handle(s))")
        bad = (starts < 0) | (n < 0) | (starts + n > self.config.exposed_pages) | (ops < 0) | (ops > 2)
        if bad.any():
            i = int(np.argmax(bad))
            raise KvwearError(
                f"request {i}: op {int(ops[i])} pages [{int(starts[i])}, {int(starts[i] + n[i])}) "
                f"outside the exposed capacity of {self.config.exposed_pages} pages (or bad op code)"
            )
        every = self._every
        if every <= 0:
            self._run(ops, starts, n, hd, jn)
            return
        # split at request boundaries where the cumulative host pages cross an interval mark
        wpages = np.where(ops == OP_WRITE, n, 0)
        cum = self._sc[_HOST_PAGES] + np.cumsum(wpages)
        lo = 0
        while lo < len(ops):
            hi = int(np.searchsorted(cum, self._next_mark, side="left")) + 1
            hi = max(hi, lo + 1)
            if hi > len(ops):
                self._run(ops[lo:], starts[lo:], n[lo:], hd[lo:], jn[lo:])
                break
            self._run(ops[lo:hi], starts[lo:hi], n[lo:hi], hd[lo:hi], jn[lo:hi])
            lo = hi
            while self._sc[_HOST_PAGES] >= self._next_mark:
                self._iv_host.append(int(self._sc[_HOST_PAGES]))
                self._iv_gc.append(int(self._sc[_GC_PAGES]))
                self._iv_erase.append(int(self._sc[_LINE_ERASES]))
                self._next_mark += every

    def _run(self, ops: np.ndarray, starts: np.ndarray, n: np.ndarray, hd: np.ndarray, jn: np.ndarray) -> None:
        r = _run(ops, starts, n, hd, jn, self._sc, self._l2p, self._p2l, self._vpc, self._lstate, self._head,
                 self._nxt, self._prv, self._hq, self._hpos, self._gcord, self._close_seq, self._free_ring,
                 self._line_erases, self._lhandle, self._hs, self._pr)
        if r >= 0:
            c = self.counters()
            raise KvwearError(
                f"FTL out of space at request {r} of this call: no free line to write to "
                f"({c.valid_pages} valid pages in {self.config.lines} lines of "
                f"{self.config.pages_per_line} pages, {c.free_lines} free; GC found no reclaimable line)"
            )

    # -- state -----------------------------------------------------------------------------------

    def counters(self) -> FtlCounters:
        sc = self._sc
        return FtlCounters(
            page_bytes=self.config.page_bytes,
            host_pages=int(sc[_HOST_PAGES]),
            gc_pages=int(sc[_GC_PAGES]),
            line_erases=int(sc[_LINE_ERASES]),
            block_erases=int(sc[_LINE_ERASES]) * self.config.blocks_per_line,
            read_pages=int(sc[_READ_PAGES]),
            unmapped_read_pages=int(sc[_UNMAPPED_READS]),
            trim_pages=int(sc[_TRIM_PAGES]),
            gc_runs=int(sc[_GC_RUNS]),
            forced_gc_runs=int(sc[_FORCED_GC_RUNS]),
            free_lines=int(sc[_FREE_CNT]),
            valid_pages=int(self._vpc.sum()),
        )

    def handle_counters(self) -> FtlHandleCounters:
        """Cumulative FDP statistics per reclaim unit handle (slot `ruh`: the shared GC frontier)."""
        k = self.config.ruh + 1
        hs = self._hs
        return FtlHandleCounters(
            page_bytes=self.config.page_bytes, pages_per_line=self.config.pages_per_line,
            host_pages=tuple(int(x) for x in hs[:k - 1]),
            media_pages=tuple(int(x) for x in hs[k:2 * k]),
            line_erases=tuple(int(x) for x in hs[2 * k:3 * k]),
        )

    def intervals(self) -> FtlIntervals:
        return FtlIntervals(
            host_pages=np.asarray(self._iv_host, dtype=np.int64),
            gc_pages=np.asarray(self._iv_gc, dtype=np.int64),
            line_erases=np.asarray(self._iv_erase, dtype=np.int64),
        )

    def erase_counts(self) -> np.ndarray:
        """Erase count per block (a line's blocks are erased together)."""
        return np.repeat(self._line_erases, self.config.blocks_per_line)

    def handle_of(self, lpns: np.ndarray) -> np.ndarray:
        """The handle whose line holds each LPN now (-1 where unmapped; `ruh`: the shared GC line)."""
        ppn = self._l2p[np.asarray(lpns, dtype=np.int64)]
        return np.where(ppn >= 0, self._lhandle[np.maximum(ppn, 0) // self.config.pages_per_line], -1)

    def mapped_pages(self) -> int:
        return int((self._l2p >= 0).sum())

    def check_invariants(self) -> None:
        """Cross-check l2p, p2l and the per-line valid counts (for tests; O(capacity)). Only the
        physical pages ever programmed are looked at (p2l starts uninitialised: Ftl.__init__)."""
        l2p = self._l2p
        ppl = self.config.pages_per_line
        programmed = np.repeat((self._lstate != _FREE) | (self._line_erases > 0), ppl)
        for f in range(self.config.open_lines):          # an open line: its pages below the write offset
            line, off = int(self._sc[_FRONT + 2 * f]), int(self._sc[_FRONT + 2 * f + 1])
            if line >= 0:
                programmed[line * ppl + off:(line + 1) * ppl] = False
        p2l = np.where(programmed, self._p2l, -1)
        mapped = np.flatnonzero(l2p >= 0)
        if not np.array_equal(p2l[l2p[mapped]], mapped):
            raise AssertionError("l2p and p2l disagree")
        if int((p2l >= 0).sum()) != len(mapped):
            raise AssertionError("p2l holds pages no LPN maps to")
        per_line = np.bincount(np.flatnonzero(p2l >= 0) // self.config.pages_per_line,
                               minlength=self.config.lines)
        if not np.array_equal(per_line, self._vpc):
            raise AssertionError("per-line valid counts are wrong")
        if self.config.gc_mode == "line":
            self._check_heap()

    def _check_heap(self) -> None:
        """Line mode: the victim heap holds exactly the closed lines with an invalid page, each at
        the slot `hpos` names, and no line has fewer valid pages than its parent."""
        size = int(self._sc[_HEAP_SIZE])
        slots = self._hq[1:size]
        queued = np.flatnonzero((self._lstate == _CLOSED) & (self._vpc < self.config.pages_per_line))
        if not np.array_equal(np.sort(slots), queued):
            raise AssertionError("the victim heap does not hold exactly the closed lines with an invalid page")
        if not np.array_equal(self._hpos[slots], np.arange(1, size)) or (self._hpos > 0).sum() != size - 1:
            raise AssertionError("victim heap positions disagree with its slots")
        if size > 2 and np.any(self._vpc[slots[1:]] < self._vpc[self._hq[np.arange(2, size) >> 1]]):
            raise AssertionError("the victim heap is out of order")
