"""The `sim` device backend: plays a BLOCK_OPS plan through the embedded FTL emulator.

No root, no hardware. The drive is built from `DeviceSpec.options`:
- `geometry="block"` (default): a block-level FTL (`FtlConfig.block_level`) of exposed capacity
  `spec.capacity_bytes` (or option `capacity_bytes`), options `op_ratio` (default 0.07),
  `pages_per_block` (64), `page_bytes` (4096), `victim` (greedy), `reserve_lines` (2);
- `geometry="femu"`: FEMU's black-box FTL from its -device parameters given as options (`devsz_mb`,
  `pgs_per_blk`, `blks_per_pl`, `pls_per_lun`, `luns_per_ch`, `nchs`, `gc_thres_pcent`,
  `gc_thres_pcent_high`, `secsz`, `secs_per_pg`); capacity is devsz_mb MiB.
Either geometry takes `ruh` (FDP reclaim unit handles, default 1), `gc_handles` (per-handle |
shared), `open_every_handle` (default true) and `separate_gc_line` (default false); see kvwear.emulator.ftl.
`interval_host_pages` (default: about 1/200 of the plan's written pages)
sets the WAF-over-time resolution. Each block op becomes one request on pages ⌊offset/page⌋ … ⌈(offset+length)/page⌉ − 1
(a partially covered page counts as a whole page, as in FEMU), written with the row's
`placement_handle`. The FTL persists across replays of one opened device, like a real drive.
`timed` is ignored: the emulator has no clock. The options are `SimParams` (typed; other names are
refused with this list). `twin_waf` plays a plan on an FTL of a known geometry for backends with an
FTL twin (femu).

Placement: when the plan uses a handle other than 0, a twin FTL of the same geometry (same raw
NAND, same `ruh`) plays the same plan with every write on handle 0 (option
`placement_baseline`, default true), so a run measures the device WAF with and without placement
on the same drive; its counts are `ReplayResult.no_placement`. The FDP statistics per handle are
`ReplayResult.handles`: host / media bytes written per handle and media bytes erased (the FDP
statistics log's HBMW / MBMW / MBE), and the plan's write bytes per handle beside them.

ReplayResult: write_bytes = host pages × page size (the FTL's own count), read_bytes and trim_bytes
= pages the requests covered × page size, `media` = the FTL's host and (host + GC) pages × page
size; `details` keeps the FTL counters (incl. trimmed pages that were mapped); the per-interval
series, cumulative over the replay, is `ftl_intervals.parquet` in the work directory.

Must not: touch files other than its own outputs in the work directory.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kvwear.emulator.ftl import (
    OP_READ,
    OP_TRIM,
    OP_WRITE,
    Ftl,
    FtlConfig,
    FtlHandleCounters,
    GcHandles,
    Victim,
)
from kvwear.errors import InputError, KvwearError
from kvwear.harness.devices.base import (
    DEVICES,
    Backend,
    Capabilities,
    DeviceParams,
    DeviceSpec,
    FixedCapacity,
    ReplayProgress,
    option,
)
from kvwear.harness.devices.measurement import HandleCount, MediaCount, ReplayResult, TrimCount
from kvwear.harness.plan.placement import plan_handles, plan_write_bytes_by_handle
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.harness.wear.identify import DeviceIdentity
from kvwear.tables import TableSpec, iter_table_batches, write_table

FTL_TOOL = "kvwear-ftl"               # the tool name of every count the embedded FTL makes

FTL_INTERVALS = TableSpec(
    kind="ftl_intervals",
    version=1,
    schema=pa.schema([
        pa.field("host_pages", pa.int64(), nullable=False),
        pa.field("gc_pages", pa.int64(), nullable=False),
        pa.field("line_erases", pa.int64(), nullable=False),
        pa.field("host_bytes", pa.int64(), nullable=False),
        pa.field("nand_bytes", pa.int64(), nullable=False),
        pa.field("interval_waf", pa.float64()),
        pa.field("cumulative_waf", pa.float64(), nullable=False),
    ]),
)

_FEMU_KEYS = ("devsz_mb", "secsz", "secs_per_pg", "pgs_per_blk", "blks_per_pl", "pls_per_lun",
              "luns_per_ch", "nchs", "gc_thres_pcent", "gc_thres_pcent_high")
_OPS = {"write": OP_WRITE, "read": OP_READ, "trim": OP_TRIM}


@dataclass(frozen=True)
class SimParams(DeviceParams):
    """The `sim` backend's options (module docstring). FEMU fields left None take FEMU's defaults."""

    geometry: Literal["block", "femu"] = "block"
    interval_host_pages: int = option(0, ge=0)        # 0: about 1/200 of the plan's written pages
    capacity_bytes: int | None = option(None, gt=0)
    op_ratio: float = option(0.07, ge=0, le=1.0)     # spare at most the user capacity (datasheets: 7-28%)
    page_bytes: int = option(4096, gt=0)
    pages_per_block: int = option(64, gt=0)
    reserve_lines: int = option(2, ge=0)
    victim: Victim = "greedy"
    separate_gc_line: bool = False
    honor_trim: bool = True
    ruh: int = option(1, ge=1)
    gc_handles: GcHandles = "per-handle"
    open_every_handle: bool = True
    placement_baseline: bool = True
    devsz_mb: int | None = option(None, gt=0)
    secsz: int | None = option(None, gt=0)
    secs_per_pg: int | None = option(None, gt=0)
    pgs_per_blk: int | None = option(None, gt=0)
    blks_per_pl: int | None = option(None, gt=0)
    pls_per_lun: int | None = option(None, gt=0)
    luns_per_ch: int | None = option(None, gt=0)
    nchs: int | None = option(None, gt=0)
    gc_thres_pcent: int | None = option(None, gt=0)
    gc_thres_pcent_high: int | None = option(None, gt=0)


def ftl_config_from_spec(spec: DeviceSpec) -> FtlConfig:
    """The emulated drive a `sim` DeviceSpec describes (see the module docstring); unknown
    options and values of the wrong type are refused, naming the option."""
    p = SimParams.of(spec)
    try:
        return _ftl_config(spec, p)
    except (TypeError, ValueError, ArithmeticError) as exc:
        # a zero that divides, or FtlConfig refusing a geometry
        raise KvwearError(f"device sim options {dict(spec.options)}: {exc}") from None


def _ftl_config(spec: DeviceSpec, p: SimParams) -> FtlConfig:
    if p.geometry == "femu":
        femu = {k: getattr(p, k) for k in _FEMU_KEYS if getattr(p, k) is not None}
        if "devsz_mb" not in femu:
            raise KvwearError("sim geometry=femu needs option devsz_mb (FEMU's exposed size in MiB)")
        cfg = FtlConfig.femu(**femu, victim=p.victim, ruh=p.ruh, gc_handles=p.gc_handles,
                             open_every_handle=p.open_every_handle, separate_gc_line=p.separate_gc_line,
                             honor_trim=p.honor_trim, interval_host_pages=p.interval_host_pages)
        if spec.capacity_bytes not in (None, cfg.exposed_bytes):
            raise KvwearError(f"sim femu: capacity {spec.capacity_bytes} ≠ devsz_mb {femu['devsz_mb']} MiB")
        return cfg
    cap = spec.capacity_bytes if spec.capacity_bytes is not None else p.capacity_bytes
    if cap is None:
        raise KvwearError("sim device needs a capacity (DeviceSpec.capacity_bytes or option capacity_bytes)")
    return FtlConfig.block_level(
        int(cap), p.op_ratio,
        page_bytes=p.page_bytes,
        pages_per_block=p.pages_per_block,
        reserve_lines=p.reserve_lines,
        victim=p.victim,
        separate_gc_line=p.separate_gc_line,
        ruh=p.ruh,
        gc_handles=p.gc_handles,
        open_every_handle=p.open_every_handle,
        honor_trim=p.honor_trim,
        interval_host_pages=p.interval_host_pages,
    )


def plan_to_requests(plan: pa.Table | pa.RecordBatch, page_bytes: int, capacity_bytes: int,
                     source: str = "block_ops", first_row: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BLOCK_OPS rows → (op codes, first page, page count); refuses I/O outside [0, capacity)
    (errors count rows from `first_row`: a batch's place in its file)."""
    ops_s = pc.cast(plan.column("op"), pa.string())
    idx = pc.index_in(ops_s, value_set=pa.array(list(_OPS)))
    if idx.null_count:
        i = int(np.flatnonzero(pc.is_null(idx).to_numpy(zero_copy_only=False))[0])
        raise InputError(source, first_row + i + 1, "op", f"unknown op {ops_s[i].as_py()!r}; valid: {', '.join(_OPS)}")
    codes = np.asarray(idx.to_numpy(zero_copy_only=False), dtype=np.int8)
    off = plan.column("offset_bytes").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    ln = plan.column("length_bytes").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    bad = np.flatnonzero((off < 0) | (ln <= 0) | (off + ln > capacity_bytes))
    if bad.size:
        i = int(bad[0])
        raise InputError(source, first_row + i + 1, "offset_bytes",
                         f"I/O [{off[i]}, {off[i] + ln[i]}) is outside the device [0, {capacity_bytes})")
    first = off // page_bytes
    last = (off + ln + page_bytes - 1) // page_bytes
    return codes, first, last - first


PlanInput: TypeAlias = pa.Table | Path      # a block_ops table, or its Parquet file


def plan_batches(plan: PlanInput, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """A plan's rows in bounded batches: a block_ops Parquet file read batch by batch, or a table's
    own batches (`columns`: only those, from a file)."""
    if isinstance(plan, pa.Table):
        return iter(plan.to_batches())
    names = pq.read_schema(plan).names        # a plan of before placement_handle has none
    return iter_table_batches(BLOCK_OPS, plan, columns=None if columns is None else [c for c in columns if c in names])


@dataclass(frozen=True)
class _PlanTally:
    """What the replay needs from the whole plan before its first request (one pass over the op,
    offset, length and handle columns): the interval default, whether writes carry handles."""

    rows: int
    write_pages: int
    write_ios: int
    read_ios: int
    trim_pages: int
    placed: bool
    write_bytes_by_handle: tuple[int, ...]


def _tally(plan: PlanInput, c: FtlConfig) -> _PlanTally:
    rows = wpages = wios = rios = tpages = 0
    by_handle = np.zeros(c.ruh, np.int64)
    for batch in plan_batches(plan, ["op", "offset_bytes", "length_bytes", "placement_handle"]):
        codes, _, npages = plan_to_requests(batch, c.page_bytes, c.exposed_bytes, first_row=rows)
        handles = plan_handles(batch)
        if handles.size and int(handles.max()) >= c.ruh:
            i = int(np.argmax(handles >= c.ruh))
            raise InputError("block_ops", rows + i + 1, "placement_handle",
                             f"handle {int(handles[i])} but the sim drive has {c.ruh} reclaim unit handle(s) "
                             f"(device option ruh)")
        w = codes == OP_WRITE
        wpages += int(npages[w].sum())
        wios += int(w.sum())
        rios += int((codes == OP_READ).sum())
        tpages += int(npages[codes == OP_TRIM].sum())
        by_handle += np.asarray(plan_write_bytes_by_handle(batch, c.ruh), np.int64)
        rows += batch.num_rows
    return _PlanTally(rows, wpages, wios, rios, tpages, bool(by_handle[1:].any()),
                      tuple(int(x) for x in by_handle))


class SimDevice:
    """The embedded FTL emulator as a DeviceBackend."""

    def __init__(self, spec: DeviceSpec, workdir: Path) -> None:
        self.spec = spec
        self.workdir = Path(workdir)
        self.config = ftl_config_from_spec(spec)
        self.ftl: Ftl | None = None
        self.twin: Ftl | None = None         # the same drive without placement (module docstring)
        self.baseline = SimParams.of(spec).placement_baseline

    def identity(self) -> DeviceIdentity:
        c = self.config
        return DeviceIdentity(
            kind="sim", path="", model=FTL_TOOL, capacity_bytes=c.exposed_bytes,
            logical_block_bytes=c.page_bytes,
            extra={"description": c.description, "raw_bytes": c.raw_bytes, "lines": c.lines,
                   "pages_per_line": c.pages_per_line, "gc_mode": c.gc_mode, "victim": c.victim,
                   "ruh": c.ruh, "gc_handles": c.gc_handles,
                   **({"femu": dict(c.femu_params)} if c.femu_params else {})},
        )

    def capacity_bytes(self) -> int:
        return self.config.exposed_bytes

    def replay(self, plan: PlanInput, workdir: Path, *, timed: bool = False,
               progress: ReplayProgress | None = None) -> ReplayResult:
        """Play a plan (a table, or a block_ops Parquet file streamed in batches: memory is the
        drive's page maps plus one batch) on the FTL."""
        c = self.config
        tally = _tally(plan, c)
        placed = tally.placed
        if self.ftl is None:
            if c.interval_host_pages <= 0:
                c = c.with_(interval_host_pages=max(1, tally.write_pages // 200))
                self.config = c
            self.ftl = Ftl(c)
        ftl = self.ftl
        before = ftl.counters()
        hbefore = ftl.handle_counters()
        n_iv = len(ftl.intervals().host_pages)
        if placed and self.baseline and self.twin is None:
            self.twin = Ftl(c.with_(interval_host_pages=0))
        twin = self.twin if placed and self.baseline else None
        tb = twin.counters() if twin is not None else None
        wall = 0.0
        done = 0
        for batch in plan_batches(plan, ["op", "offset_bytes", "length_bytes", "placement_handle"]):
            codes, first, npages = plan_to_requests(batch, c.page_bytes, c.exposed_bytes, first_row=done)
            t = time.perf_counter()
            ftl.apply_ops(codes, first, npages, plan_handles(batch))
            wall += time.perf_counter() - t
            if twin is not None:
                twin.apply_ops(codes, first, npages)
            done += batch.num_rows
            if progress is not None:
                progress(done, tally.rows)
        no_placement = twin.counters().minus(tb) if twin is not None and tb is not None else None
        if progress is not None and tally.rows == 0:
            progress(1, 1)
        d = ftl.counters().minus(before)
        hd = ftl.handle_counters().minus(hbefore)
        iv = ftl.intervals()
        # cumulative over this replay (the FTL's own series runs from its first replay), ending at
        # the replay's totals: the FTL samples every interval_host_pages, the last interval is partial
        host = iv.host_pages[n_iv:] - before.host_pages
        gc = iv.gc_pages[n_iv:] - before.gc_pages
        er = iv.line_erases[n_iv:] - before.line_erases
        waf_iv = iv.interval_waf[n_iv:]
        if not host.size or host[-1] != d.host_pages or gc[-1] != d.gc_pages:
            dh = d.host_pages - (int(host[-1]) if host.size else 0)
            dg = d.gc_pages - (int(gc[-1]) if gc.size else 0)
            host = np.append(host, d.host_pages)
            gc = np.append(gc, d.gc_pages)
            er = np.append(er, d.line_erases)
            waf_iv = np.append(waf_iv, (dh + dg) / dh if dh > 0 else np.nan)
        workdir = Path(workdir)
        out = write_table(FTL_INTERVALS, pa.table({
            "host_pages": host, "gc_pages": gc, "line_erases": er,
            "host_bytes": host * c.page_bytes, "nand_bytes": (host + gc) * c.page_bytes,
            "interval_waf": waf_iv,
            "cumulative_waf": np.where(host > 0, (host + gc) / np.maximum(host, 1), 1.0),
        }), workdir / "ftl_intervals.parquet")
        erases = ftl.erase_counts()
        trim_bytes = tally.trim_pages * c.page_bytes
        return ReplayResult(
            device="sim",
            tool=FTL_TOOL,
            write_bytes=d.host_bytes,
            read_bytes=(d.read_pages + d.unmapped_read_pages) * c.page_bytes,
            trim_bytes=trim_bytes,
            write_ios=tally.write_ios,
            read_ios=tally.read_ios,
            wall_s=wall,
            trims=TrimCount.native(trim_bytes),
            media=MediaCount(FTL_TOOL, d.host_bytes, d.nand_bytes),
            handles=handle_count(hd, list(tally.write_bytes_by_handle)),
            no_placement=(MediaCount(f"{FTL_TOOL} without handles", no_placement.host_bytes, no_placement.nand_bytes)
                          if no_placement is not None else None),
            tool_output_path=str(out),
            intervals_path=str(out),
            details={
                "counters": {**asdict(d), "waf": d.waf},
                "interval_host_pages": c.interval_host_pages,
                "erase_count_max": int(erases.max()) if erases.size else 0,
                "erase_count_mean": float(erases.mean()) if erases.size else 0.0,
                "trimmed_mapped_bytes": d.trim_pages * c.page_bytes,
                "unmapped_read_bytes": d.unmapped_read_pages * c.page_bytes,
                "line_erases_by_handle": list(hd.line_erases),
                "waf_by_handle": [hd.waf(h) for h in range(len(hd.host_pages))],
                **({"no_placement": {**asdict(no_placement), "waf": no_placement.waf}}
                   if no_placement is not None else {}),
            },
        )

    def close(self) -> None:
        self.ftl = None
        self.twin = None


def handle_count(hc: FtlHandleCounters, plan_write_bytes_by_handle: list[int]) -> HandleCount:
    """The FTL's FDP statistics of one replay per handle (host / media bytes written, media bytes
    erased: the FDP statistics log's HBMW / MBMW / MBE), beside the plan's write bytes per handle
    (they must be equal: a page-aligned plan)."""
    pb = hc.page_bytes
    return HandleCount(
        measured_by=FTL_TOOL,
        plan_write_bytes=tuple(int(b) for b in plan_write_bytes_by_handle),
        host_bytes=tuple(x * pb for x in hc.host_pages),
        # the last slot is the shared GC frontier's (0 unless gc_handles = shared)
        media_bytes=tuple(x * pb for x in hc.media_pages),
        media_bytes_erased=hc.media_bytes_erased,
    )


def twin_waf(ftl_cfg: FtlConfig, plan: pa.Table, *, fill_first: bool) -> float:
    """The WAF the embedded FTL of `ftl_cfg` measures playing `plan` on an empty drive, after one
    sequential fill of 128 KiB writes (a guest's precondition=fill) when `fill_first`."""
    codes, first, npages = plan_to_requests(plan, ftl_cfg.page_bytes, ftl_cfg.exposed_bytes)
    ftl = Ftl(ftl_cfg)
    if fill_first:
        n = ftl_cfg.exposed_bytes // ftl_cfg.page_bytes
        per_io = (128 << 10) // ftl_cfg.page_bytes
        starts = np.arange(0, n, per_io, dtype=np.int64)
        ftl.apply_ops(np.full(starts.size, OP_WRITE, dtype=np.int8), starts,
                      np.minimum(per_io, n - starts).astype(np.int64))
    before = ftl.counters()
    ftl.apply_ops(codes, first, npages)
    return float(ftl.counters().minus(before).waf)


class Sim(Backend):
    """The embedded FTL: no drive to share, no block device to trace; it is its own FTL geometry."""

    Params = SimParams
    capabilities = Capabilities(handle_count_option="ruh", streams_plan=True)
    device = SimDevice

    @classmethod
    def fixed_capacity(cls, spec: DeviceSpec) -> FixedCapacity | None:
        # FEMU geometry: devsz_mb is the exposed size, and the FTL refuses any other capacity
        p = SimParams.of(spec)
        return FixedCapacity(p.devsz_mb << 20, whole=True) if p.geometry == "femu" and p.devsz_mb else None

    @classmethod
    def ftl_config(cls, spec: DeviceSpec) -> FtlConfig:
        return ftl_config_from_spec(spec)

    @classmethod
    def preflight(cls, spec: DeviceSpec) -> None:
        ftl_config_from_spec(spec)


DEVICES.add("sim", Sim)
