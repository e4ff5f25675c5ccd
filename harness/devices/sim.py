"""The `sim` device backend: plays a BLOCK_OPS plan through the embedded FTL emulator.

No root, no hardware. The drive is built from `DeviceSpec.options` (`SimParams`; other names are
refused with the list):
- `preset` (default `tiny-blocks`; kvwear.emulator.presets: `enterprise-tlc`, `qlc`, `femu`, …): a
  named drive geometry scaled to the exposed capacity `spec.capacity_bytes` (or option
  `capacity_bytes`) by keeping its reclaim unit and using fewer units; `op_ratio`, `victim`,
  `reserve_lines`, `pages_per_block`, `page_bytes` and `separate_gc_line` override the preset's;
- `geometry="femu"`: FEMU's black-box FTL from its -device parameters given as options (`devsz_mb`,
  `pgs_per_blk`, `blks_per_pl`, `pls_per_lun`, `luns_per_ch`, `nchs`, `gc_thres_pcent`,
  `gc_thres_pcent_high`, `secsz`, `secs_per_pg`); capacity is devsz_mb MiB (not with `preset`).
Either takes `ruh` (FDP reclaim unit handles, default 1), `gc_handles` (per-handle | shared),
`open_every_handle` (default true); see kvwear.emulator.ftl.

Preconditioning (`precondition` = none | fill | steady, the vocabulary of every backend): before the
first replay the drive is purged (a new FTL) and, as SNIA's PTS prescribes (kvwear.emulator.precondition),
filled sequentially `fill_loops` (2) times in 128 KiB writes, and with `steady` then written with
random 4 KiB writes in rounds of `ss_round_bytes` (0: 1/4 of the capacity) until the steady-state
criterion holds over `ss_window_rounds` (5) rounds (range ≤ `ss_excursion` 20 %, fitted slope ≤
`ss_slope` 10 % of the mean of 1/WAF) or `ss_max_rounds` (25) pass; `precondition_seed` seeds the
random writes. A preconditioned drive is kept in memory (one, the last one asked for) and copied for
every device that asks for the same drive and preconditioning: a run's policies share it.

The workload (`steady_workload`, default: when preconditioned): the plan is played in whole passes
until the workload's own rounds of the same size reach the same steady-state criterion (PTS's
workload-dependent preconditioning, the test stimulus being the plan), or `ss_max_rounds` rounds
are played; without it, one pass. The rounds are split into the transient (before the first steady
window), the steady state (that window) and what followed (kvwear.emulator.precondition.Phases).

`interval_host_pages` (default: about 1/200 of one pass's written pages, rounded so a round is a
whole number of intervals) sets the WAF-over-time resolution. Each block op becomes one request on
pages ⌊offset/page⌋ … ⌈(offset+length)/page⌉ − 1 (a partially covered page counts as a whole page, as
in FEMU), written with the row's `placement_handle`. The FTL persists across replays of one opened
device, like a real drive. `timed` is ignored: the emulator has no clock. `twin_waf` plays a plan on
an FTL of a known geometry for backends with an FTL twin (femu).

Placement: when the plan uses a handle other than 0, a twin FTL of the same geometry (same raw
NAND, same `ruh`, the same preconditioning) plays the same passes with every write on handle 0
(option `placement_baseline`, default true), so a run measures the device WAF with and without
placement on the same drive; its counts are `ReplayResult.no_placement`. The FDP statistics per
handle are `ReplayResult.handles`: host / media bytes written per handle and media bytes erased (the
FDP statistics log's HBMW / MBMW / MBE), and the plan's write bytes per handle (× passes) beside them.

ReplayResult (the workload only, every pass; preconditioning's bytes are never in these):
write_bytes = host pages × page size (the FTL's own count), read_bytes and trim_bytes = pages the
requests covered × page size, `media` = the FTL's host and (host + GC) pages × page size over all
passes; `phases` (kvwear.harness.devices.measurement.DrivePhases): the preset and how it was
scaled, what preconditioning wrote (its own host, NAND and GC bytes, whether it reached steady
state), the passes and the workload's rounds split into transient and steady state; `details` keeps
the FTL counters (incl. trimmed pages that were mapped), preconditioning's and the phases' full
record for people; the per-interval series, cumulative over the replay and ending at its totals,
is `ftl_intervals.parquet` in the work directory.

Must not: touch files other than its own outputs in the work directory.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kvwear.emulator.ftl import (
    MAX_RUH,
    OP_READ,
    OP_TRIM,
    OP_WRITE,
    Ftl,
    FtlConfig,
    FtlCounters,
    FtlHandleCounters,
    GcHandles,
    Victim,
)
from kvwear.emulator.precondition import (
    Phase,
    Phases,
    PreconditionResult,
    PreconditionSpec,
    SteadyCriterion,
    default_round_pages,
    precondition,
    split_phases,
)
from kvwear.emulator.presets import DriveRatings, FtlOptions, PresetScale, preset
from kvwear.errors import InputError, KvwearError
from kvwear.harness.devices.base import (
    DEVICES,
    Backend,
    Capabilities,
    DeviceParams,
    DeviceSpec,
    FixedCapacity,
    Precondition,
    ReplayProgress,
    option,
)
from kvwear.harness.devices.deferred_trims import PlanSegment
from kvwear.harness.devices.measurement import (
    DrivePhases,
    HandleCount,
    MediaCount,
    ReplayResult,
    Span,
    TrimCount,
)
from kvwear.harness.plan.placement import plan_handles, plan_write_bytes_by_handle
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.harness.wear.identify import DeviceIdentity
from kvwear.memory import short_of_memory
from kvwear.tables import TableSpec, iter_table_batches, write_table

FTL_TOOL = "kvwear-ftl"               # the tool name of every count the embedded FTL makes

FTL_INTERVALS = TableSpec(
    kind="ftl_intervals",
    version=2,
    # one row per interval of the workload (every pass; preconditioning is not in it): the counters
    # from the replay's start at the interval's end, and the bytes written in the interval
    schema=pa.schema([
        pa.field("host_pages", pa.int64(), nullable=False),
        pa.field("gc_pages", pa.int64(), nullable=False),
        pa.field("line_erases", pa.int64(), nullable=False),
        pa.field("host_bytes", pa.int64(), nullable=False),
        pa.field("nand_bytes", pa.int64(), nullable=False),
        pa.field("interval_waf", pa.float64()),
        pa.field("cumulative_waf", pa.float64(), nullable=False),
        pa.field("round", pa.int64(), nullable=False),
    ]),
)

_FEMU_KEYS = ("devsz_mb", "secsz", "secs_per_pg", "pgs_per_blk", "blks_per_pl", "pls_per_lun",
              "luns_per_ch", "nchs", "gc_thres_pcent", "gc_thres_pcent_high")
_OPS = {"write": OP_WRITE, "read": OP_READ, "trim": OP_TRIM}
DEFAULT_PRESET = "tiny-blocks"


@dataclass(frozen=True)
class SimParams(DeviceParams):
    """The `sim` backend's options (module docstring). Geometry fields left None take the preset's
    (or FEMU's defaults, with geometry=femu). Every count has an upper bound a decade or more past
    real drives, so an absurd value is refused by name instead of sizing an array (1e30 pages)."""

    preset: str | None = None
    geometry: Literal["block", "femu"] = "block"       # block: the preset's geometry; femu: FEMU -device options
    interval_host_pages: int = option(0, ge=0, le=2**40)        # 0: about 1/200 of a pass's written pages
    capacity_bytes: int | None = option(None, gt=0)
    # spare at most the user capacity (datasheets: 7-28 %)
    op_ratio: float | None = option(None, ge=0, le=1.0)
    page_bytes: int | None = option(None, gt=0, le=1 << 20)         # NAND pages: 4-16 KiB
    pages_per_block: int | None = option(None, gt=0, le=1 << 16)   # NAND blocks: 256-4096 pages
    reserve_lines: int | None = option(None, ge=0, le=1 << 20)
    victim: Victim | None = None
    separate_gc_line: bool | None = None
    honor_trim: bool = True
    ruh: int = option(1, ge=1, le=MAX_RUH)
    gc_handles: GcHandles = "per-handle"
    open_every_handle: bool = True
    placement_baseline: bool = True
    precondition: Precondition = "none"
    fill_loops: int = option(2, ge=1, le=1000)
    precondition_seed: int = option(1, ge=0)
    ss_round_bytes: int = option(0, ge=0)              # 0: 1/4 of the exposed capacity
    ss_window_rounds: int = option(5, ge=2, le=10_000)
    ss_excursion: float = option(0.20, gt=0, le=10.0)
    ss_slope: float = option(0.10, gt=0, le=10.0)
    ss_max_rounds: int = option(25, ge=2, le=10_000)
    steady_workload: bool | None = None               # None: when preconditioned
    devsz_mb: int | None = option(None, gt=0, le=1 << 30)
    secsz: int | None = option(None, gt=0, le=1 << 16)
    secs_per_pg: int | None = option(None, gt=0, le=1 << 10)
    pgs_per_blk: int | None = option(None, gt=0, le=1 << 16)
    blks_per_pl: int | None = option(None, gt=0, le=1 << 24)
    pls_per_lun: int | None = option(None, gt=0, le=1 << 10)
    luns_per_ch: int | None = option(None, gt=0, le=1 << 10)
    nchs: int | None = option(None, gt=0, le=1 << 10)
    gc_thres_pcent: int | None = option(None, gt=0, le=100)
    gc_thres_pcent_high: int | None = option(None, gt=0, le=100)

    def __post_init__(self) -> None:
        if self.geometry == "femu" and self.preset is not None:
            raise ValueError("option preset and geometry=femu both name the drive: give one (preset=femu is "
                             "FEMU's default geometry scaled to the run; geometry=femu takes FEMU's -device options)")
        if self.ss_max_rounds < self.ss_window_rounds:
            raise ValueError(f"ss_max_rounds ({self.ss_max_rounds}) must be ≥ ss_window_rounds "
                             f"({self.ss_window_rounds})")

    @property
    def criterion(self) -> SteadyCriterion:
        return SteadyCriterion(self.ss_window_rounds, self.ss_excursion, self.ss_slope, self.ss_max_rounds)

    @property
    def plays_until_steady(self) -> bool:
        return self.precondition != "none" if self.steady_workload is None else self.steady_workload


@dataclass(frozen=True)
class SimDrive:
    """The drive a sim spec describes: its FTL geometry, the preset behind it and how it was scaled
    (None with geometry=femu), its rated endurance, and how it is preconditioned."""

    config: FtlConfig
    scale: PresetScale | None
    ratings: DriveRatings | None
    precondition: PreconditionSpec | None
    criterion: SteadyCriterion
    until_steady: bool

    @property
    def round_pages(self) -> int:
        p = self.precondition
        return p.round_pages if p is not None else default_round_pages(self.config.exposed_pages)


def sim_drive(spec: DeviceSpec) -> SimDrive:
    """The emulated drive a `sim` DeviceSpec describes (see the module docstring); unknown
    options and values of the wrong type are refused, naming the option."""
    p = SimParams.of(spec)
    try:
        cfg, scale, ratings = _ftl_config(spec, p)
    except (TypeError, ValueError, ArithmeticError) as exc:
        # a zero that divides, or FtlConfig refusing a geometry
        raise KvwearError(f"device sim options {dict(spec.options)}: {exc}") from None
    round_pages = -(-p.ss_round_bytes // cfg.page_bytes) if p.ss_round_bytes else default_round_pages(
        cfg.exposed_pages)
    pre = None if p.precondition == "none" else PreconditionSpec(
        p.precondition, fill_loops=p.fill_loops, round_pages=round_pages, criterion=p.criterion,
        seed=p.precondition_seed)
    return SimDrive(cfg, scale, ratings, pre, p.criterion, p.plays_until_steady)


def ftl_config_from_spec(spec: DeviceSpec) -> FtlConfig:
    """The FTL geometry of `sim_drive(spec)`."""
    return sim_drive(spec).config


def _ftl_config(spec: DeviceSpec, p: SimParams) -> tuple[FtlConfig, PresetScale | None, DriveRatings | None]:
    if p.geometry == "femu":
        femu = {k: getattr(p, k) for k in _FEMU_KEYS if getattr(p, k) is not None}
        if "devsz_mb" not in femu:
            raise KvwearError("sim geometry=femu needs option devsz_mb (FEMU's exposed size in MiB)")
        cfg = FtlConfig.femu(**femu, victim=p.victim or "greedy", ruh=p.ruh, gc_handles=p.gc_handles,
                             open_every_handle=p.open_every_handle, separate_gc_line=bool(p.separate_gc_line),
                             honor_trim=p.honor_trim, interval_host_pages=p.interval_host_pages)
        if spec.capacity_bytes not in (None, cfg.exposed_bytes):
            raise KvwearError(f"sim femu: capacity {spec.capacity_bytes} ≠ devsz_mb {femu['devsz_mb']} MiB")
        return cfg, None, None
    cap = spec.capacity_bytes if spec.capacity_bytes is not None else p.capacity_bytes
    if cap is None:
        raise KvwearError("sim device needs a capacity (DeviceSpec.capacity_bytes or option capacity_bytes)")
    d = preset(p.preset or DEFAULT_PRESET)
    opts = FtlOptions(op_ratio=p.op_ratio, victim=p.victim, reserve_lines=p.reserve_lines, page_bytes=p.page_bytes,
                      pages_per_block=p.pages_per_block, separate_gc_line=p.separate_gc_line, ruh=p.ruh,
                      gc_handles=p.gc_handles, open_every_handle=p.open_every_handle, honor_trim=p.honor_trim,
                      interval_host_pages=p.interval_host_pages)
    return d.ftl_config(int(cap), opts), d.scale(int(cap), opts), d.ratings


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


# One preconditioned drive, kept for the next device that asks for the same drive and the same
# preconditioning (a run's policies play one after the other on identical drives): preconditioning
# a 268.8 GB drive to steady state takes seconds of CPU, a copy of its state a fraction of that.
_PRECONDITIONED: dict[tuple[FtlConfig, PreconditionSpec], tuple[Ftl, PreconditionResult]] = {}
# Copies of the kept drive that a closed device gave back (at most two: a device's drive and its
# twin without placement): the next copy overwrites one in place instead of allocating hundreds of
# MB anew, which costs more in page faults than the copy itself (default run: 0.3-3 s a copy, 0.1 s
# in place). They are held between device stages, so a run's RSS stays a drive higher; a drive is
# kept only while the machine would not be short of memory with it (kvwear.memory).
_SPARE: list[Ftl] = []
_MAX_SPARE = 2


def preconditioned_drive(config: FtlConfig, spec: PreconditionSpec) -> tuple[Ftl, PreconditionResult, bool]:
    """A drive of `config` preconditioned as `spec` says: a copy of the kept one when it matches
    (the third value: whether it was), else a new one (kept instead of the previous)."""
    key = (config.with_(interval_host_pages=0), spec)
    kept = _PRECONDITIONED.get(key)
    reused = kept is not None
    if kept is None:
        _PRECONDITIONED.clear()                    # one kept drive: memory is hundreds of MB
        _SPARE.clear()
        ftl = Ftl(key[0])
        kept = (ftl, precondition(ftl, spec))
        _PRECONDITIONED[key] = kept
    return kept[0].copy(into=_SPARE.pop() if _SPARE else None), kept[1], reused


def _give_back(ftl: Ftl | None) -> None:
    """A closed device's copy of the kept drive, for the next copy to overwrite."""
    if ftl is None or len(_SPARE) >= _MAX_SPARE or any(s is ftl for s in _SPARE):
        return
    vm = psutil.virtual_memory()
    if short_of_memory(vm.available - ftl.nbytes, vm.total):    # held, it would crowd the next stages
        return
    if any(k[0] == ftl.config and kept is not ftl for k, (kept, _) in _PRECONDITIONED.items()):
        _SPARE.append(ftl)


@dataclass(frozen=True)
class _Requests:
    """One batch of a plan as FTL requests."""

    codes: np.ndarray
    first: np.ndarray
    npages: np.ndarray
    handles: np.ndarray | None
    rows: int


# A plan with at most this many rows is kept as requests in memory for the passes after the first
# (a few hundred MB at most); a larger one is read from its file again on every pass.
_KEEP_ROWS = 4_000_000


class SimDevice:
    """The embedded FTL emulator as a DeviceBackend."""

    def __init__(self, spec: DeviceSpec, workdir: Path) -> None:
        self.spec = spec
        self.workdir = Path(workdir)
        self.drive = sim_drive(spec)
        self.config = self.drive.config
        self.ftl: Ftl | None = None
        self.twin: Ftl | None = None         # the same drive without placement (module docstring)
        self.baseline = SimParams.of(spec).placement_baseline
        self.preconditioning: dict[str, Any] | None = None
        self._precondition_result: PreconditionResult | None = None

    def identity(self) -> DeviceIdentity:
        c = self.config
        scale = self.drive.scale
        return DeviceIdentity(
            kind="sim", path="", model=FTL_TOOL, capacity_bytes=c.exposed_bytes,
            logical_block_bytes=c.page_bytes,
            extra={"description": c.description, "raw_bytes": c.raw_bytes, "lines": c.lines,
                   "pages_per_line": c.pages_per_line, "gc_mode": c.gc_mode, "victim": c.victim,
                   "ruh": c.ruh, "gc_handles": c.gc_handles, "separate_gc_line": c.separate_gc_line,
                   **({"preset": scale.as_dict()} if scale is not None else {}),
                   **({"femu": dict(c.femu_params)} if c.femu_params else {})},
        )

    def capacity_bytes(self) -> int:
        return self.config.exposed_bytes

    def _open(self, write_pages: int) -> Ftl:
        """The drive, purged and preconditioned on first use; its intervals restarted for a replay
        whose passes write `write_pages` pages each."""
        c = self.config
        every, per_round = _intervals(c.interval_host_pages, self.drive.round_pages, write_pages)
        if self.ftl is None:
            pre = self.drive.precondition
            if pre is None:
                self.ftl = Ftl(c.with_(interval_host_pages=0))
            else:
                self.ftl, res, kept = preconditioned_drive(c, pre)
                self._precondition_result = res
                self.preconditioning = {**res.as_dict(), "reused": kept}
        self.ftl.restart_intervals(every)
        self._per_round = per_round
        return self.ftl

    def replay(self, plan: PlanInput, workdir: Path, *, timed: bool = False,
               progress: ReplayProgress | None = None) -> ReplayResult:
        """Play a plan (a table, or a block_ops Parquet file streamed in batches: memory is the
        drive's page maps plus one batch, or the plan's requests when it is small) on the FTL, in
        whole passes until the workload's steady state when the drive plays until steady (module
        docstring)."""
        c = self.config
        tally = _tally(plan, c)
        ftl = self._open(tally.write_pages)
        before = ftl.counters()
        hbefore = ftl.handle_counters()
        if tally.placed and self.baseline and self.twin is None:
            pre = self.drive.precondition
            self.twin = Ftl(c.with_(interval_host_pages=0)) if pre is None else preconditioned_drive(c, pre)[0]
        twin = self.twin if tally.placed and self.baseline else None
        tb = twin.counters() if twin is not None else None
        kept: list[_Requests] | None = [] if tally.rows <= _KEEP_ROWS else None
        crit = self.drive.criterion
        round_pages = self._per_round * max(ftl.interval_every, 1)
        wall = 0.0
        passes = 0
        phases: Phases | None = None
        while True:
            batches = iter(kept) if passes and kept is not None else _requests(plan, c)
            done = 0
            for req in batches:
                if passes == 0 and kept is not None:
                    kept.append(req)
                t = time.perf_counter()
                ftl.apply_ops(req.codes, req.first, req.npages, req.handles)
                wall += time.perf_counter() - t
                if twin is not None:
                    twin.apply_ops(req.codes, req.first, req.npages)
                done += req.rows
                if progress is not None:
                    progress(passes * tally.rows + done, tally.rows * (passes + 1))
            passes += 1
            phases = self._phases(ftl, before, round_pages, crit)
            if (not self.drive.until_steady or phases.reached or tally.write_pages == 0
                    or len(phases.host_per_round) >= crit.max_rounds):
                break
        if progress is not None and tally.rows == 0:
            progress(1, 1)
        no_placement = twin.counters().minus(tb) if twin is not None and tb is not None else None
        d = ftl.counters().minus(before)
        hd = ftl.handle_counters().minus(hbefore)
        out = self._write_intervals(ftl, before, d, Path(workdir))
        erases = ftl.erase_counts()
        pb = c.page_bytes
        trim_bytes = tally.trim_pages * pb * passes
        stop = ("one pass" if not self.drive.until_steady
                else f"steady state at round {phases.steady_round}" if phases.reached
                else f"{crit.max_rounds} rounds without steady state" if len(phases.host_per_round) >= crit.max_rounds
                else "the plan writes nothing")
        return ReplayResult(
            device="sim",
            tool=FTL_TOOL,
            write_bytes=d.host_bytes,
            read_bytes=(d.read_pages + d.unmapped_read_pages) * pb,
            trim_bytes=trim_bytes,
            write_ios=tally.write_ios * passes,
            read_ios=tally.read_ios * passes,
            wall_s=wall,
            trims=TrimCount.native(trim_bytes),
            media=MediaCount(FTL_TOOL, d.host_bytes, d.nand_bytes),
            handles=handle_count(hd, [b * passes for b in tally.write_bytes_by_handle]),
            no_placement=(MediaCount(f"{FTL_TOOL} without handles", no_placement.host_bytes, no_placement.nand_bytes)
                          if no_placement is not None else None),
            tool_output_path=str(out),
            intervals_path=str(out),
            phases=self._drive_phases(phases, passes, stop, pb),
            details={
                "counters": {**asdict(d), "waf": d.waf},
                "interval_host_pages": ftl.interval_every,
                "erase_count_max": int(erases.max()) if erases.size else 0,
                "erase_count_mean": float(erases.mean()) if erases.size else 0.0,
                "trimmed_mapped_bytes": d.trim_pages * pb,
                "unmapped_read_bytes": d.unmapped_read_pages * pb,
                "line_erases_by_handle": list(hd.line_erases),
                "waf_by_handle": [hd.waf(h) for h in range(len(hd.host_pages))],
                **({"no_placement": {**asdict(no_placement), "waf": no_placement.waf}}
                   if no_placement is not None else {}),
                "workload": {"passes": passes, "plan_write_bytes_per_pass": tally.write_pages * pb,
                             "plan_trim_bytes_per_pass": tally.trim_pages * pb, "until_steady": self.drive.until_steady,
                             "stopped": stop, "phases": phases.as_dict(pb)},
                "precondition": self.preconditioning or {"mode": "none"},
                "drive": self._drive_summary(),
            },
        )

    def _drive_summary(self) -> dict[str, Any]:
        s = self.drive.scale
        r = self.drive.ratings
        return {"preset": s.preset if s is not None else None, "scale": s.as_dict() if s is not None else None,
                "ratings": asdict(r) if r is not None else None, "description": self.config.description}

    @staticmethod
    def _phases(ftl: Ftl, before: FtlCounters, round_pages: int, crit: SteadyCriterion) -> Phases:
        iv = ftl.intervals()
        c = ftl.counters()
        per_round = max(1, round_pages // max(ftl.interval_every, 1))
        host = iv.host_pages[per_round - 1::per_round] - before.host_pages
        gc = iv.gc_pages[per_round - 1::per_round] - before.gc_pages
        return split_phases(host, gc, round_pages, crit,
                            end=(c.host_pages - before.host_pages, c.gc_pages - before.gc_pages))

    def _write_intervals(self, ftl: Ftl, before: FtlCounters, d: FtlCounters, workdir: Path) -> Path:
        """The workload's intervals to ftl_intervals.parquet: counts cumulative from the replay's
        start (the FTL's own series runs from its first write), ending at the replay's totals `d`
        (the FTL samples every interval_host_pages; the last interval is partial)."""
        c = self.config
        iv = ftl.intervals()
        host = iv.host_pages - before.host_pages
        gc = iv.gc_pages - before.gc_pages
        er = iv.line_erases - before.line_erases
        if not host.size or host[-1] != d.host_pages or gc[-1] != d.gc_pages:
            host = np.append(host, d.host_pages)
            gc = np.append(gc, d.gc_pages)
            er = np.append(er, d.line_erases)
        dh = np.diff(host, prepend=0)
        dg = np.diff(gc, prepend=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            waf_iv = np.where(dh > 0, (dh + dg) / np.maximum(dh, 1), np.nan)
        return write_table(FTL_INTERVALS, pa.table({
            "host_pages": host, "gc_pages": gc, "line_erases": er,
            "host_bytes": host * c.page_bytes, "nand_bytes": (host + gc) * c.page_bytes,
            "interval_waf": waf_iv,
            "cumulative_waf": np.where(host > 0, (host + gc) / np.maximum(host, 1), 1.0),
            "round": np.arange(host.size, dtype=np.int64) // max(self._per_round, 1),
        }), workdir / "ftl_intervals.parquet")

    def _drive_phases(self, ph: Phases, passes: int, stopped: str, pb: int) -> DrivePhases:
        """The typed record of the drive and the replay's phases (ReplayResult.phases)."""
        s = self.drive.scale
        res = self._precondition_result

        def span(p: Phase) -> Span:
            return Span(p.host_pages * pb, (p.host_pages + p.gc_pages) * pb, p.rounds)

        steady = ph.steady
        return DrivePhases(
            preset=s.preset if s is not None else None,
            drive_note=str(s.note if s is not None else self.config.description),
            precondition=res.mode if res is not None else "none",
            precondition_bytes=(Span(res.counters.host_bytes, res.counters.nand_bytes)
                                if res is not None else None),
            precondition_gc_bytes=res.counters.gc_pages * pb if res is not None else 0,
            precondition_steady=res.steady_state_reached if res is not None else None,
            precondition_rounds=len(res.random.host_per_round) if res is not None and res.random is not None else 0,
            passes=passes, stopped=stopped, rounds=len(ph.host_per_round), round_bytes=ph.round_pages * pb,
            steady_reached=ph.reached, steady_round=ph.steady_round,
            steady_from_round=ph.cut if steady is not None else None, transient=span(ph.transient),
            steady=span(steady) if steady is not None else None, last_window=span(ph.last_window),
            window_rounds=ph.criterion.window)

    def close(self) -> None:
        if self.drive.precondition is not None:     # its drives are copies of the kept one
            _give_back(self.ftl)
            _give_back(self.twin)
        self.ftl = None
        self.twin = None


# At most this many intervals a round: a short plan played for many passes would otherwise keep
# 200 snapshots a pass (a 7 GB plan on a 268.8 GB drive: 54 passes).
_MAX_PER_ROUND = 64


def _intervals(configured: int, round_pages: int, pass_write_pages: int) -> tuple[int, int]:
    """(pages per interval, intervals per round): the configured interval, else about 1/200 of a
    pass's written pages, at most a round and at least 1/64 of one; a round is a whole number of
    intervals (its size rounded up to one, by less than an interval)."""
    if configured > 0:
        return configured, max(1, round(round_pages / configured))
    every = max(min(round_pages, max(1, pass_write_pages // 200)), -(-round_pages // _MAX_PER_ROUND))
    per_round = max(1, round(round_pages / every))
    return -(-round_pages // per_round), per_round


def _requests(plan: PlanInput, c: FtlConfig) -> Iterator[_Requests]:
    done = 0
    for batch in plan_batches(plan, ["op", "offset_bytes", "length_bytes", "placement_handle"]):
        codes, first, npages = plan_to_requests(batch, c.page_bytes, c.exposed_bytes, first_row=done)
        yield _Requests(codes, first, npages, plan_handles(batch), batch.num_rows)
        done += batch.num_rows


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


def segment_requests(segments: list[PlanSegment], page_bytes: int, capacity_bytes: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The requests a deferred-trim replay issues, in its order: per segment, its reads and writes
    (one request per row), then its trims, one request per (offset, length) range."""
    parts = []
    for seg in segments:
        if seg.ops.num_rows:
            parts.append(plan_to_requests(seg.ops, page_bytes, capacity_bytes))
        if seg.trim_offsets.size:
            first = seg.trim_offsets // page_bytes
            last = (seg.trim_offsets + seg.trim_lengths + page_bytes - 1) // page_bytes
            parts.append((np.full(first.size, OP_TRIM, np.int8), first, last - first))
    if not parts:
        return np.zeros(0, np.int8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return (np.concatenate([c for c, _, _ in parts]).astype(np.int8), np.concatenate([f for _, f, _ in parts]),
            np.concatenate([n for _, _, n in parts]))


def split_requests(codes: np.ndarray, first: np.ndarray, npages: np.ndarray, max_pages: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reads and writes longer than `max_pages` cut into consecutive requests of `max_pages` (the
    last one shorter), as a block layer splits an I/O at its largest command; trims stay whole."""
    if max_pages < 1:
        raise KvwearError(f"split_requests: max_pages must be ≥ 1, got {max_pages}")
    k = np.where(codes == OP_TRIM, 1, np.maximum(-(-npages // max_pages), 1))
    if not (k > 1).any():
        return codes, first, npages
    row = np.repeat(np.arange(codes.size), k)
    j = np.arange(row.size) - np.repeat(np.cumsum(k) - k, k)       # piece number inside its row
    step = np.where(codes == OP_TRIM, 0, max_pages)[row]
    return codes[row], first[row] + j * step, np.where(step > 0, np.minimum(step, npages[row] - j * step),
                                                       npages[row])


def twin_waf(ftl_cfg: FtlConfig, plan: pa.Table, *, fill_bytes: int = 0,
             trim_segments: list[PlanSegment] | None = None, max_request_bytes: int | None = None) -> FtlCounters:
    """The counters the embedded FTL of `ftl_cfg` measures playing `plan` on an empty drive, after
    one sequential fill of [0, fill_bytes) in 128 KiB writes (a guest's precondition=fill): one
    request per plan row, in plan order, or in a deferred-trim replay's order when `trim_segments`
    are given (each segment's reads and writes, then its trims); reads and writes longer than
    `max_request_bytes` become several requests (`split_requests`)."""
    if trim_segments is None:
        codes, first, npages = plan_to_requests(plan, ftl_cfg.page_bytes, ftl_cfg.exposed_bytes)
    else:
        codes, first, npages = segment_requests(trim_segments, ftl_cfg.page_bytes, ftl_cfg.exposed_bytes)
    if max_request_bytes is not None:
        codes, first, npages = split_requests(codes, first, npages, max_request_bytes // ftl_cfg.page_bytes)
    ftl = Ftl(ftl_cfg)
    if fill_bytes:
        n = -(-fill_bytes // ftl_cfg.page_bytes)
        per_io = (128 << 10) // ftl_cfg.page_bytes
        starts = np.arange(0, n, per_io, dtype=np.int64)
        ftl.apply_ops(np.full(starts.size, OP_WRITE, dtype=np.int8), starts,
                      np.minimum(per_io, n - starts).astype(np.int64))
    before = ftl.counters()
    ftl.apply_ops(codes, first, npages)
    return ftl.counters().minus(before)


class Sim(Backend):
    """The embedded FTL: no drive to share, no block device to trace; it is its own FTL geometry.
    The main job plays it as a drive in service: the preset the sources support as the typical
    data-center drive (docs/design/drive-presets.md), preconditioned to steady state as SNIA's PTS
    prescribes, the workload played until its own steady state; a bare device (tests, `DeviceSpec`
    without options) is the fresh `tiny-blocks` drive."""

    Params = SimParams
    capabilities = Capabilities(handle_count_option="ruh", streams_plan=True)
    device = SimDevice
    RUN_PRESET = "enterprise-tlc"
    RUN_PRECONDITION: Precondition = "steady"

    @classmethod
    def run_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        # the drive in service (class docstring), unless the config names the drive (a preset or
        # FEMU's -device geometry) or its preconditioning
        out = dict(options)
        if "preset" not in out and out.get("geometry") != "femu":
            out["preset"] = cls.RUN_PRESET
        out.setdefault("precondition", cls.RUN_PRECONDITION)
        return out

    @classmethod
    def ratings(cls, spec: DeviceSpec) -> DriveRatings | None:
        return sim_drive(spec).ratings

    @classmethod
    def fixed_capacity(cls, spec: DeviceSpec) -> FixedCapacity | None:
        # FEMU geometry: devsz_mb is the exposed size, and the FTL refuses any other capacity
        p = SimParams.of(spec)
        return FixedCapacity(p.devsz_mb << 20, whole=True) if p.geometry == "femu" and p.devsz_mb else None

    @classmethod
    def ftl_config(cls, spec: DeviceSpec) -> FtlConfig:
        return ftl_config_from_spec(spec)

    @classmethod
    def precondition_plan(cls, spec: DeviceSpec) -> tuple[PreconditionSpec | None, bool]:
        d = sim_drive(spec)
        return d.precondition, d.until_steady

    @classmethod
    def preflight(cls, spec: DeviceSpec) -> None:
        sim_drive(spec)


DEVICES.add("sim", Sim)
