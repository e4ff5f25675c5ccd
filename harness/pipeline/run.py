"""`kvwear run`: the whole pipeline for one config, stage by stage, into a run directory.

Stages (kvwear.harness.pipeline.rundir.Stage: each writes its files atomically, then a stage marker; `resume`
skips marked stages and reads their records back), with the typed record each hands on:
  workload                 generate or load the requests (sampled if asked) → workload/requests.parquet
                           (Workload: the file; later stages stream it)
  characterize             the KVCache-in-the-Wild analyses of those requests → workload/characterization/
                           (for the report: skipped when the run makes none)
  simulate/LABEL           tiered-cache simulation under one policy (kvwear.harness.pipeline.simulate, the function
                           `kvwear simulate` calls) → policies/LABEL/ (SimOutput)
  plan/LABEL               ssd_ops → block_ops on the device's capacity (harness.plan) → plan/LABEL/ (Plan)
  device/LABEL             play the plan on the device (wear snapshots, eBPF capture) → device/LABEL/
                           (estimate.DeviceBytes); the sim drive in service preconditions first and
                           plays the plan until the workload's steady state (kvwear.harness.devices.sim)
  estimate/LABEL           lifetime projections and predicted-vs-measured checks (estimate.estimate_policy)
                           → estimate/LABEL/crossval.json, which keeps the results row
  results, report          results.parquet (schema.RESULTS) and report/

Ratings: the lifetime's DWPD, warranty years and P/E cycles are the config's where it names them,
else the device's own (`drive_rating`: a sim drive preset's), else 1 DWPD, 5 years, 3,000 P/E.

Scaling: `workload.sample_fraction` f keeps whole sessions (or, without sessions, whole
root-prefix groups) with probability f and scales the DRAM and SSD tiers by f; lifetime
projections scale the sampled SSD writes back by 1/f against the full-size drive.
This module orchestrates; it must not hold policy logic, parse tool output or lay out reports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kvwear.emulator.ftl import OP_WRITE
from kvwear.errors import InputError, KvwearError
from kvwear.harness.capture.schema import BLOCK_TRACE
from kvwear.harness.devices.base import open_device
from kvwear.harness.devices.fs_player import read_fs_trace, replay_trace_on_ftl, write_fs_trace
from kvwear.harness.devices.measurement import (
    CaptureCount,
    DeviceMeasurement,
    MediaCount,
    ReplayResult,
    TraceOnFtlCount,
)
from kvwear.harness.estimate.estimator import (
    TLC_PE_CYCLES,
    Check,
    Estimate,
    EstimateInputs,
    PlanBytes,
    PlanRecord,
    estimate_policy,
    host_bytes_per_day,
    pe_projections,
    projected_lifetime_days,
    sim_fields,
    tbw_from_dwpd,
    tbw_from_pe_cycles,
)
from kvwear.harness.estimate.fs_checks import fs_checks
from kvwear.harness.estimate.schema import RESULTS, ResultsRow
from kvwear.harness.estimate.waf_model import PAGE_BYTES, DeathCounter, DeathSummary, WafPrediction, workload_waf
from kvwear.harness.pipeline.config import RunConfig
from kvwear.harness.pipeline.rundir import ResumeRefused, RunDir, Stage, build_manifest, input_sha256, write_json
from kvwear.harness.pipeline.simulate import SimOutput, parquet_source, read_output, sim_config, simulate_policy
from kvwear.harness.pipeline.sizing import (
    TierSizing,
    device_backend,
    device_capacity,
    device_ftl_config,
    device_spec,
    placement_config,
    size_tiers,
    wear_readers,
    with_run_options,
)
from kvwear.harness.plan.files import FILE_OPS, FsLayoutConfig, stream_file_ops
from kvwear.harness.plan.placement import PlacementConfig, PlacementStats, assign_placement
from kvwear.harness.plan.planner import FILE_LAYOUTS, PlanCounts, ReplayConfig, plan_block_ops, stream_block_ops
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.harness.wear.schema import WEAR
from kvwear.harness.wear.snapshot import WearDelta, snapshot, wear_rows, wear_table
from kvwear.harness.wear.snapshot import delta as wear_delta
from kvwear.policies.metrics import SimSummary
from kvwear.records import encode
from kvwear.tables import TableWriter, atomic_write, iter_table_batches, read_table, write_table
from kvwear.workloads.models import ModelProfile, resolve_profile
from kvwear.workloads.sampling import check_fraction, sample_groups, sampled_batches
from kvwear.workloads.schema import REQUESTS

# Stage progress: (stage name, units done, units total or None). The CLI draws bars from it.
Progress = Callable[[str, int, int | None], None]


def _no_progress(_stage: str, _done: int, _total: int | None) -> None:
    return None


class StageTicks:
    """One stage's progress: announced when it starts (its clock starts then, not when it ends),
    advanced in the stage's own units (requests, plan rows, models, figures), and complete when
    it finishes — also when a resume found it finished and did not run it."""

    def __init__(self, progress: Progress, stage: str, total: int | None = None) -> None:
        self.progress, self.stage, self.total, self.done = progress, stage, total, 0
        progress(stage, 0, total)

    def __call__(self, done: int, total: int | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        self.progress(self.stage, done, self.total)

    def add(self, n: int) -> None:
        self(self.done + n)

    def finish(self) -> None:
        n = self.total if self.total else max(self.done, 1)
        self.progress(self.stage, n, n)


def counted(batches: Iterator[pa.RecordBatch], tick: StageTicks) -> Iterator[pa.RecordBatch]:
    """`batches`, advancing `tick` by each batch's rows as it is handed on (one pass: the count
    starts again at 0)."""
    tick(0)
    for b in batches:
        yield b
        tick.add(b.num_rows)


@dataclass(frozen=True)
class PolicyOutcome:
    label: str
    row: ResultsRow
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    results: pa.Table
    outcomes: tuple[PolicyOutcome, ...]
    rows: tuple[ResultsRow, ...]           # the results table's rows (gains over LRU included)
    report_html: Path | None
    tiers: TierSizing | None = None
    reruns: tuple[str, ...] = ()       # finished stages a resume ran again, and why (rundir.Stage)


# -- workload -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """The workload stage's record: the requests Parquet every later stage reads."""

    path: Path
    rows: int
    inputs: Mapping[str, Path]        # input files, for the manifest's checksums


def _write_workload(cfg: RunConfig, path: Path) -> int:
    """Write the (sampled) requests to `path`; returns its rows (never 0: an empty workload is
    refused, no file left). A trace streams (memory bounded by batches, issue #16): `convert_trace`
    straight to `path` when nothing is sampled, else a temporary conversion beside it read back
    through `sampled_batches`. A generator's table is built in memory (its size is the
    generator's parameters) and sampled with `sample_groups`."""
    w = cfg.workload
    check_fraction(w.sample_fraction)
    empty = KvwearError("the workload has no requests (after sampling)")
    if not w.trace:
        from kvwear.workloads.synthetic import generate

        table = sample_groups(generate(w.generator, **{"seed": w.seed, **dict(w.params)}), w.sample_fraction, w.seed)
        if table.num_rows == 0:
            raise empty
        write_table(REQUESTS, table, path)
        return table.num_rows
    from kvwear.workloads.loaders import convert_trace, stream_requests

    if w.sample_fraction >= 1.0:
        rows = convert_trace(w.trace, path, w.format or None).rows
        if rows == 0:
            path.unlink()
            raise empty
        return rows
    with stream_requests(w.trace, w.format or None, tmp_dir=path.parent) as src, TableWriter(REQUESTS, path) as out:
        for batch in sampled_batches(src.result.path, w.sample_fraction, w.seed):
            out.write(batch)
        if out.rows == 0:
            raise empty                  # the writer removes its partial file
        return out.rows


def workload_stage(cfg: RunConfig, rd: RunDir) -> Workload:
    """Load or generate the requests, sample them, write workload/requests.parquet (`_write_workload`).
    Only its record goes on: the stages after it stream the file (issue #16)."""
    path = rd.stage_dir("workload") / "requests.parquet"
    inputs = {"trace": Path(cfg.workload.trace)} if cfg.workload.trace else {}

    def load() -> Workload:
        # Same config, same path: the file behind it may still have changed since the stage ran.
        stored = rd.done_info("workload").get("inputs_sha256", {})
        for k, p in inputs.items():
            if k in stored and stored[k] != input_sha256(p):
                raise ResumeRefused(f"{p} changed since {rd.root} sampled it; resume only with the same input "
                                  "(or choose another --out)")
        return Workload(path, pq.ParquetFile(path).metadata.num_rows, inputs)

    def compute() -> tuple[Workload, Mapping[str, Any]]:
        rows = _write_workload(cfg, path)
        return Workload(path, rows, inputs), {
            "rows": rows, "inputs_sha256": {k: input_sha256(p) for k, p in inputs.items()}}

    return Stage("workload", compute, load, outputs=(path,)).run(rd)


def characterize_stage(rd: RunDir, workload: Workload, profile: ModelProfile,
                       progress: Progress = _no_progress) -> None:
    """The workload's characterization (ideal hit ratio, reuse times, lifespans, capacity needed)
    for the report; kvwear.workloads.characterize does the analyses, streamed over the run's requests
    table in bounded batches (kvwear.workloads.characterize_stream), which is in arrival order."""
    folder = rd.stage_dir("workload") / "characterization"
    tick = StageTicks(progress, "characterize", workload.rows)

    def compute() -> tuple[None, Mapping[str, Any]]:
        from kvwear.reports.characterization import plot_characterization
        from kvwear.workloads.characterize_stream import characterize_batches

        arrival = pq.read_table(workload.path, columns=["arrival_s"]).column(0).to_numpy()
        if arrival.size > 1 and bool((arrival[1:] < arrival[:-1]).any()):
            i = int(np.flatnonzero(arrival[1:] < arrival[:-1])[0]) + 1
            raise KvwearError(f"{workload.path}: row {i:,} arrives before row {i - 1:,} (arrival_s "
                              f"{arrival[i]} < {arrival[i - 1]}): the run's requests table must be in arrival order")
        del arrival
        res, _ = characterize_batches(lambda: counted(iter_table_batches(REQUESTS, workload.path), tick), profile,
                                      folder)
        plot_characterization(folder)
        return None, {"token_hit_ratio": res.token_hit_ratio, "capacity_bytes": res.capacity_bytes}

    Stage("characterize", compute, lambda: None, outputs=(folder,), after=("workload",)).run(rd)
    tick.finish()


# -- per policy ---------------------------------------------------------------------------------

def policy_label(spec: str) -> str:
    from kvwear.policies.base import resolve_spec

    return resolve_spec(spec).label


def simulate_stage(cfg: RunConfig, rd: RunDir, spec: str, label: str, workload: Workload,
                   profile: ModelProfile, progress: Progress) -> SimOutput:
    """The policy's simulation (kvwear.harness.pipeline.simulate, as `kvwear simulate`) into policies/LABEL/,
    streaming the workload's Parquet."""
    d = rd.stage_dir("policies", label)
    stage = f"simulate/{label}"
    tick = StageTicks(progress, stage, workload.rows)

    def compute() -> tuple[SimOutput, Mapping[str, Any]]:
        out = simulate_policy(parquet_source(workload.path), sim_config(cfg, profile), spec, d, progress=tick.add)
        return out, {"ssd_ops": out.ssd_ops_rows}

    sim = Stage(stage, compute, lambda: read_output(d, label), outputs=(d,), after=("workload",)).run(rd)
    tick.finish()
    return sim


@dataclass(frozen=True)
class Plan:
    """The plan stage's record: plan/LABEL/ (block_ops.parquet, plan.json) and its accounting."""

    label: str
    dir: Path
    record: PlanRecord

    @property
    def bytes(self) -> PlanBytes:
        return self.record.bytes

    @property
    def death_summary(self) -> DeathSummary:
        return self.record.death_summary

    @property
    def block_ops_path(self) -> Path:
        return self.dir / "block_ops.parquet"

    @property
    def file_ops_path(self) -> Path | None:
        """The fs layout's plan (FILE_OPS), or None for a block plan."""
        return self.dir / "file_ops.parquet" if self.record.files is not None else None

    @classmethod
    def read(cls, label: str, d: Path) -> Plan:
        return cls(label, d, PlanRecord.load(d / "plan.json"))


# The ssd_ops columns the planner reads (session_id and cause, strings of every row, are left on disk).
PLAN_COLUMNS = ["t_s", "op", "obj_id", "obj_kind", "bytes"]


def plan_stage(cfg: RunConfig, rd: RunDir, sim: SimOutput, capacity: int,
               progress: Progress = _no_progress) -> Plan:
    """Lay the policy's ssd_ops out as block_ops on the device's capacity (kvwear.harness.plan.planner), then the
    placement post-pass; plan.json holds the plan's accounting. The planner reads ssd_ops.parquet
    in record batches (its state is the live objects', bounded by the device). Without placement
    the block_ops rows stream to their Parquet chunk by chunk (`stream_block_ops`) and the death
    summary reads them back in batches; the placement modes that look at a write's future take the
    whole plan: `lifetime` ranks each write by it, and `kind`, whose handles need only each row's
    kind, records the kinds' separation over those same lifetime buckets."""
    from kvwear.policies.schema import SSD_OPS

    label = sim.label
    d = rd.stage_dir("plan", label)
    tick = StageTicks(progress, f"plan/{label}", sim.ssd_ops_rows)

    def compute() -> tuple[Plan, Mapping[str, Any]]:
        def ops() -> Iterator[pa.RecordBatch]:      # the planner's progress: the ssd_ops rows it read
            return counted(iter_table_batches(SSD_OPS, sim.ssd_ops_path, columns=PLAN_COLUMNS), tick)

        r = cfg.replay
        rc = replay_config(cfg, capacity)
        placement = placement_config(cfg)
        if rc.layout in FILE_LAYOUTS:
            return _plan_files(cfg, d, sim, rc, ops, label)
        path = d / "block_ops.parquet"
        try:
            if placement.mode == "none":
                # the placement post-pass runs on the laid-out plan: handles never change where data goes
                stats: list[PlacementStats] = []
                with TableWriter(BLOCK_OPS, path) as out:
                    def sink(chunk: pa.Table) -> None:
                        table, placed = assign_placement(chunk, placement, capacity, r.align_bytes)
                        stats.append(placed)
                        out.write(table)
                    plan: PlanCounts = stream_block_ops(ops, rc, sink, source=str(sim.ssd_ops_path))
                placed = _merged_stats(stats, placement)
            else:
                whole = plan_block_ops(ops, rc, source=str(sim.ssd_ops_path))
                table, placed = assign_placement(whole.table, placement, capacity, r.align_bytes)
                plan = whole
                del whole
                write_table(BLOCK_OPS, table, path)
                del table
        except InputError as exc:     # name the policy whose plan did not fit
            raise InputError(exc.path, exc.line, exc.field, f"policy {label}: {exc.message}") from None
        counts = PlanCounts(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(PlanCounts)})
        PlanRecord(counts, placed, plan_death_summary(path, capacity)).dump(d / "plan.json")
        return Plan.read(label, d), {"write_ios": plan.write_ios}

    plan = Stage(f"plan/{label}", compute, lambda: Plan.read(label, d), outputs=(d,),
                 after=(f"simulate/{label}",)).run(rd)
    tick.finish()
    return plan


def _plan_files(cfg: RunConfig, d: Path, sim: SimOutput, rc: ReplayConfig,
                ops: Callable[[], Iterator[pa.RecordBatch]], label: str) -> tuple[Plan, Mapping[str, Any]]:
    """The fs layout's plan (kvwear.harness.plan.files): file_ops.parquet, and plan.json with the
    file plan's counts (its bytes also in the block plan's terms, for the stages that read those).
    Placement other than `none` was refused by preflight, before the simulation."""
    fs = FsLayoutConfig(model=cfg.model, write_bytes=cfg.replay.max_io_bytes)
    try:
        with TableWriter(FILE_OPS, d / "file_ops.parquet", metadata=fs.metadata()) as out:
            files = stream_file_ops(ops, rc, out.write, fs=fs, source=str(sim.ssd_ops_path))
    except InputError as exc:
        raise InputError(exc.path, exc.line, exc.field, f"policy {label}: {exc.message}") from None
    counts = PlanCounts(
        object_write_bytes=files.object_write_bytes, aligned_write_bytes=files.object_write_bytes, trim_bytes=0,
        read_bytes=files.read_bytes, write_ios=files.write_calls, read_ios=files.reads, trim_ios=0,
        ssd_ops=files.ssd_ops, writes=files.writes, empty_writes=files.empty_writes, rewrites=files.rewrites,
        read_misses=files.read_misses, evict_misses=files.evict_misses, forced_evictions=0,
        forced_evict_bytes=0, peak_live_bytes=files.peak_live_bytes, capacity_bytes=files.capacity_bytes,
        layout=files.layout, policy_write_bytes=files.object_write_bytes)
    placed = _merged_stats([], placement_config(cfg))
    PlanRecord(counts, placed, plan_death_summary(BLOCK_OPS.empty(), rc.capacity_bytes), files).dump(d / "plan.json")
    return Plan.read(label, d), {"write_calls": files.write_calls}


def replay_config(cfg: RunConfig, capacity: int) -> ReplayConfig:
    """The planner's settings: the run's `[replay]` on the device's capacity."""
    r = cfg.replay
    return ReplayConfig(capacity_bytes=capacity, layout=r.layout, align_bytes=r.align_bytes,  # type: ignore[arg-type]
                        trim_on_evict=r.trim_on_evict, max_io_bytes=r.max_io_bytes,
                        time_mode=r.time_mode, time_compression=r.time_compression,  # type: ignore[arg-type]
                        log_full=r.log_full)  # type: ignore[arg-type]


def _merged_stats(chunks: list[PlacementStats], config: PlacementConfig) -> PlacementStats:
    """One placement's stats over a plan placed chunk by chunk (`none`: nothing depends on other
    chunks): the bytes and I/Os per handle summed."""
    if not chunks:
        return PlacementStats(config.mode, config.handles, (0,) * config.handles, (0,) * config.handles)
    first = chunks[0]
    by_bytes = tuple(sum(c.write_bytes_by_handle[h] for c in chunks) for h in range(len(first.write_bytes_by_handle)))
    by_ios = tuple(sum(c.write_ios_by_handle[h] for c in chunks) for h in range(len(first.write_ios_by_handle)))
    return dataclasses.replace(first, write_bytes_by_handle=by_bytes, write_ios_by_handle=by_ios)


def plan_death_summary(block_ops: pa.Table | Path, capacity: int) -> DeathSummary:
    """The plan's page death distances (kvwear.harness.estimate.waf_model), in 4 KiB pages of the device; a
    block_ops Parquet is read in batches, twice (its written pages first: the summary's grid)."""
    from kvwear.harness.devices.sim import plan_batches, plan_to_requests

    cols = ["op", "offset_bytes", "length_bytes"]

    def requests() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        done = 0
        for batch in plan_batches(block_ops, cols):
            yield plan_to_requests(batch, PAGE_BYTES, capacity, first_row=done)
            done += batch.num_rows

    total = sum(int(n[c == OP_WRITE].sum()) for c, _, n in requests())
    acc = DeathCounter(total, -(-capacity // PAGE_BYTES))
    for codes, first, npages in requests():
        acc.feed(codes, first, npages)
    return acc.summary()


@contextmanager
def _capture(cfg: RunConfig, device_path: str, out_dir: Path) -> Iterator[list[CaptureCount]]:
    """eBPF capture around the replay when configured; yields a list that holds the capture's
    counts on exit (empty: no capture)."""
    got: list[CaptureCount] = []
    # Only a block device has a dev_t of its own; a file's dev_t is its whole filesystem.
    if cfg.capture.tracer == "none" or not device_backend(cfg).capabilities.block_tracer:
        yield got
        return
    from kvwear.harness.capture import kernel_dev_t, open_tracer  # bcc's module is imported on use only

    name = Path(os.path.realpath(device_path)).name
    if Path(f"/sys/class/block/{name}/partition").exists():
        # the block tracepoints report the whole disk's dev_t, never a partition's
        raise KvwearError(f"{device_path} is a partition: eBPF capture needs a whole-disk device "
                          "(or run with --tracer none)")
    c = cfg.capture
    tracer = open_tracer(c.tracer, expected_iops=c.expected_iops or None,
                         per_cpu_buffer_bytes=c.per_cpu_buffer_bytes or None)
    tracer.start(kernel_dev_t(device_path), out_dir / "block_trace.parquet")
    try:
        yield got
    except BaseException:
        # the replay failed: detach the probes, but let the replay's error be the one reported
        with contextlib.suppress(Exception):
            tracer.stop()
        raise
    res = tracer.stop()
    count = CaptureCount(
        tracer=res.tracer, events=res.events, lost_events=res.lost_events, bytes_by_op=dict(res.bytes_by_op),
        requests_by_op=dict(res.requests_by_op), unmatched_completions=res.unmatched_completions,
        no_completion=res.no_completion,
        # bpftrace confirms with its flush barrier that its last events reached the file
        drained=bool(res.extra.get("flushed", True)), parquet_path=str(res.parquet_path))
    got.append(count)
    write_json(out_dir / "capture.json", encode(count))


def device_stage(cfg: RunConfig, rd: RunDir, plan: Plan, capacity: int,
                 progress: Progress = _no_progress) -> DeviceMeasurement:
    label = plan.label
    d = rd.stage_dir("device", label)
    stage = f"device/{label}"

    def load() -> DeviceMeasurement:
        return DeviceMeasurement.load(d / "result.json")

    tick = StageTicks(progress, stage)

    def compute() -> tuple[DeviceMeasurement, Mapping[str, Any]]:
        res = _replay_on_device(cfg, d, plan, label, capacity, tick)
        return res, {"write_bytes": res.replay.write_bytes}

    measurement = Stage(stage, compute, load, outputs=(d,), after=(f"plan/{label}",)).run(rd)
    tick.finish()
    return measurement


def _replay_on_device(cfg: RunConfig, d: Path, plan: Plan, label: str, capacity: int,
                      tick: StageTicks) -> DeviceMeasurement:
    """Play the plan on the device with wear snapshots and the eBPF capture around it; writes
    result.json (the DeviceMeasurement), wear.parquet and (where the backend counts intervals)
    timeline.parquet."""
    streams = device_backend(cfg).capabilities.streams_plan
    block_ops: pa.Table | Path
    if plan.file_ops_path is not None:      # a file player reads its plan itself
        block_ops = plan.file_ops_path
    else:
        block_ops = plan.block_ops_path if streams else read_table(BLOCK_OPS, plan.block_ops_path)
    readers = wear_readers(cfg)
    dev = open_device(device_spec(cfg, capacity), d)
    try:
        before = snapshot(cfg.device.target, readers) if readers else []
        t0 = time.monotonic()
        with _capture(cfg, cfg.device.target, d) as cap:
            res: ReplayResult = dev.replay(block_ops, d, timed=cfg.replay.time_mode != "afap",
                                           progress=tick)
        after = snapshot(cfg.device.target, readers) if readers else []
        ident = dev.identity()
    finally:
        dev.close()
    deltas: list[WearDelta] = []
    unsupported: dict[str, str] = {}
    if readers:
        rows = wear_rows(before, 0.0, "before", label) + wear_rows(after, time.monotonic() - t0, "after", label)
        write_table(WEAR, wear_table(rows), d / "wear.parquet")
        for b, a in zip(before, after, strict=True):
            if b.supported and a.supported:
                deltas.append(wear_delta(b, a))
            else:
                unsupported[b.source] = b.note or a.note or "unsupported"
    if res.intervals_path:     # the backend counted host and NAND bytes per interval, cumulatively
        iv = pq.read_table(res.intervals_path, columns=["host_bytes", "nand_bytes"])
        host = iv.column("host_bytes").to_numpy()
        nand = iv.column("nand_bytes").to_numpy()
        _write_parquet(pa.table({"host_bytes": host, "nand_bytes": nand,
                                 "waf_cumulative": nand / np.maximum(host, 1)}), d / "timeline.parquet")
    on_ftl = None
    if res.files is not None and cap:
        # what the file system sent the device, kept with its provenance (fs_trace.parquet: replayable
        # on any FTL drive without hardware), and played on the embedded FTL (the sim drive of the
        # device's size)
        size = int(ident.capacity_bytes or capacity)
        trace_path = write_fs_trace(read_table(BLOCK_TRACE, cap[0].parquet_path), size, res.files,
                                    shlex.join(sys.argv), d / "fs_trace.parquet")
        got = replay_trace_on_ftl(read_fs_trace(trace_path)[0], size, d / "trace-on-ftl")
        on_ftl = TraceOnFtlCount(got.drive, got.replay.media or MediaCount("kvwear-ftl", 0, 0),
                                 got.expected_host_bytes)
    measurement = DeviceMeasurement(res, ident, cap[0] if cap else None, tuple(deltas), unsupported, on_ftl)
    measurement.dump(d / "result.json")
    return measurement


def placement_gains(rows: list[ResultsRow], reference: str = "lru") -> list[ResultsRow]:
    """Each row with its lifetime gain over `reference` without placement, split as host-write gain
    (reference host bytes ÷ this policy's) × WAF gain (reference WAF without placement ÷ this
    policy's WAF as measured, with its placement): lifetime ∝ 1 / (host bytes × WAF) on one drive."""
    ref = next((r for r in rows if r.policy == reference), None)
    out = []
    for r in rows:
        # the twin without placement plays the whole replay: compare it with the whole replay's WAF
        waf = r.waf_replay or r.waf_measured
        if ref is not None and r.plan_write_bytes and ref.plan_write_bytes and ref.waf_no_placement and waf:
            hg = ref.plan_write_bytes / r.plan_write_bytes
            wg = ref.waf_no_placement / waf
            r = dataclasses.replace(r, host_write_gain_vs_lru=hg, waf_gain_vs_lru=wg, lifetime_gain_vs_lru=hg * wg)
        out.append(r)
    return out


def _write_parquet(table: pa.Table, path: Path) -> None:
    """Atomically (temporary sibling + rename): an interrupted write leaves no truncated file."""
    with atomic_write(path) as tmp:
        pq.write_table(table, tmp)


# -- estimate -----------------------------------------------------------------------------------


def uniform_waf(cfg: RunConfig, capacity: int) -> tuple[float, str]:
    """The uniform-random reference WAF for the device's geometry (1 where none is known)."""
    from kvwear.harness.estimate.estimator import ftl_predicted_waf

    ftl = device_ftl_config(cfg, capacity)
    if ftl is None:
        return 1.0, "assumed-1 (no FTL geometry)"
    note = device_backend(cfg).capabilities.geometry_note
    where = f" ({note})" if note else ""
    return ftl_predicted_waf(ftl), f"uniform random, Lambert W{where}"


def plan_workload_waf(cfg: RunConfig, plan: Plan, capacity: int) -> WafPrediction | None:
    """The workload model (kvwear.harness.estimate.waf_model) over the plan's death summary, for the device's
    geometry; None where the geometry is unknown."""
    if plan.record.files is not None:       # the file system places the pages: no death summary
        return None
    ftl = device_ftl_config(cfg, capacity)
    if ftl is None:
        return None
    pre, until_steady = device_backend(cfg).precondition_plan(device_spec(cfg, capacity))
    return workload_waf(plan.death_summary, ftl, pre, until_steady)


def emulator_waf(cfg: RunConfig, rd: RunDir, label: str) -> float | None:
    """For a device with an FTL twin (`Capabilities.ftl_twin`: femu), the WAF the embedded FTL
    predicts playing the same block plan on its geometry (Backend.twin_waf); else None, and None
    for the fs layout's file plan (the file system, not the plan, decides what reaches the drive)."""
    b = device_backend(cfg)
    if not b.capabilities.ftl_twin or cfg.replay.layout in FILE_LAYOUTS:
        return None
    plan = read_table(BLOCK_OPS, rd.stage_dir("plan", label) / "block_ops.parquet")
    return b.twin_waf(device_spec(cfg, None), plan)


def _file_checks(plan: Plan, device: DeviceMeasurement) -> tuple[Check, ...]:
    """A file-layout replay's identities (kvwear.harness.estimate.fs_checks); none for a block plan."""
    files = device.replay.files
    if files is None:
        return ()
    t = device.trace_on_ftl
    return tuple(fs_checks(files, plan.record.files, device.capture, t.media if t else None,
                           t.expected_host_bytes if t else None))


def estimate_stage(cfg: RunConfig, rd: RunDir, sim: SimOutput, plan: Plan, device: DeviceMeasurement,
                   capacity: int, progress: Progress = _no_progress) -> PolicyOutcome:
    """The estimator (kvwear.harness.estimate.estimator.estimate_policy) on what the policy's stages counted, with
    the device's models (uniform WAF, workload model, FTL twin); writes crossval.json, which also
    keeps the results row, so a resumed run does not run the models (the twin's replay) again."""
    label = sim.label
    path = rd.stage_dir("estimate", label) / "crossval.json"

    def load() -> PolicyOutcome:
        est = Estimate.load(path)
        return PolicyOutcome(label, est.row, est.checks)

    # the estimate's steps: the uniform reference, the workload model, the FTL twin's replay, the checks
    tick = StageTicks(progress, f"estimate/{label}", 4)

    def compute() -> tuple[PolicyOutcome, Mapping[str, Any]]:
        tbw, duration = tbw_and_duration(cfg, sim.summary.span_s, capacity)
        waf_uniform, waf_uniform_src = uniform_waf(cfg, capacity)
        raw, rating = pe_rating(cfg, capacity)
        tick(1)
        prediction = plan_workload_waf(cfg, plan, capacity)
        tick(2)
        twin = emulator_waf(cfg, rd, label)
        tick(3)
        est = estimate_policy(EstimateInputs(
            label=label, model=cfg.model, device_kind=cfg.device.kind, dram_bytes=cfg.tiers.dram_bytes,
            ssd_bytes=cfg.tiers.ssd_bytes, sample_fraction=cfg.workload.sample_fraction, summary=sim.summary,
            plan=plan.bytes, device=device, tbw_bytes=tbw, duration_s=duration, waf_uniform=waf_uniform,
            waf_uniform_source=waf_uniform_src, prediction=prediction, waf_emulator=twin,
            preconditioned=device_backend(cfg).preconditioned(device_spec(cfg, capacity)),
            layout=cfg.replay.layout, raw_nand_bytes=raw, pe_rating_cycles=rating,
            rating_source=drive_rating(cfg, capacity).source,
            file_checks=_file_checks(plan, device)))
        est.dump(path)
        return PolicyOutcome(label, est.row, est.checks), {}

    outcome = Stage(f"estimate/{label}", compute, load, outputs=(path,),
                    after=(f"simulate/{label}", f"plan/{label}", f"device/{label}")).run(rd)
    tick.finish()
    return outcome


# -- the run ------------------------------------------------------------------------------------

def run(cfg: RunConfig, out: str | Path, *, resume: bool = False, replay: bool = True,
        report: bool = True, progress: Progress = _no_progress) -> RunOutcome:
    """Run every stage of `cfg` into `out` (see the module docstring): the tiers resolved against
    the device, the static checks (kvwear.harness.pipeline.preflight), then the stages, holding the run directory's
    lock (kvwear.exclusive)."""
    from kvwear.exclusive import locked
    from kvwear.harness.pipeline.preflight import preflight

    cfg, sizing = size_tiers(with_run_options(cfg))   # config.toml holds the resolved tiers and drive
    preflight(cfg, replay=replay)
    rd = RunDir(out)
    rd.create()
    with locked(rd.lock_path, f"run directory {rd.root}"):
        return _run_stages(cfg, sizing, rd, resume=resume, replay=replay, report=report, progress=progress)


def _run_stages(cfg: RunConfig, sizing: TierSizing, rd: RunDir, *, resume: bool, replay: bool, report: bool,
                progress: Progress) -> RunOutcome:
    rd.prepare(cfg.to_toml(), resume)
    profile = resolve_profile(cfg.model)
    tick = StageTicks(progress, "workload")
    workload = workload_stage(cfg, rd)
    tick.finish()
    if report:          # it feeds the report only (sweep points run without one)
        characterize_stage(rd, workload, profile, progress)
    capacity = device_capacity(cfg)
    placement_config(cfg)                     # a bad placement setting fails before any simulation
    labels = [policy_label(s) for s in cfg.policies]
    if len(set(labels)) != len(labels):
        raise KvwearError(f"two policies resolve to the same label: {labels}")
    write_json(rd.manifest_path, build_manifest(
        config=cfg.to_dict(), inputs=workload.inputs, seeds={"workload": cfg.workload.seed},
        devices={"kind": cfg.device.kind, "target": cfg.device.target, "capacity_bytes": capacity,
                 "tiers": sizing.as_dict()}))
    outcomes = []
    for spec, label in zip(cfg.policies, labels, strict=True):
        sim = simulate_stage(cfg, rd, spec, label, workload, profile, progress)
        if not replay:
            outcomes.append(PolicyOutcome(label, _row_without_device(cfg, label, sim.summary), ()))
            continue
        plan = plan_stage(cfg, rd, sim, capacity, progress)
        device = device_stage(cfg, rd, plan, capacity, progress)
        outcomes.append(estimate_stage(cfg, rd, sim, plan, device, capacity, progress))
    rows = placement_gains([o.row for o in outcomes]) if replay else [o.row for o in outcomes]
    results = results_table(rows)
    write_table(RESULTS, results, rd.results_path)
    rd.mark_done("results")
    html = None
    if report:
        from kvwear.reports.run_report import build_run_report

        tick = StageTicks(progress, "report")
        html = build_run_report(rd.root, progress=tick).html
        tick.finish()
        rd.mark_done("report")
    return RunOutcome(rd.root, results, tuple(outcomes), tuple(rows), html, sizing, tuple(rd.reruns))


def results_table(rows: Iterable[ResultsRow]) -> pa.Table:
    """The rows as a RESULTS table (a run without replay has no device fields: null)."""
    return RESULTS.conform(pa.Table.from_pylist([r.as_dict() for r in rows], schema=RESULTS.schema))


def accounting_faults(rows: Iterable[ResultsRow | Mapping[str, Any]]) -> list[str]:
    """'POLICY: k of n checks failed' for every row whose byte-accounting checks did not all hold
    (typed rows, or a sweep's stored rows as mappings)."""
    def count(v: Any) -> int:            # None, or NaN in a table where other rows have the column
        return 0 if v is None or v != v else int(v)

    out = []
    for r in rows:
        d = r.as_dict() if isinstance(r, ResultsRow) else r
        total, passed = count(d.get("accounting_checks_total")), count(d.get("accounting_checks_passed"))
        if passed < total:
            out.append(f"{d['policy']}: {total - passed} of {total} checks failed")
    return out


def run_point(cfg: RunConfig, out: Path, *, replay: bool) -> ResultsRow:
    """One sweep point (one policy): run it (resuming whatever a dead worker finished) and return
    its results row. Without `replay`, lifetime uses the WAF-1 and analytical projections only."""
    if len(cfg.policies) != 1:
        raise KvwearError(f"a sweep point has exactly one policy, got {list(cfg.policies)}")
    outcome = run(cfg, out, resume=True, replay=replay, report=False)
    return outcome.outcomes[0].row


DEFAULT_DWPD = 1.0
DEFAULT_WARRANTY_YEARS = 5.0


@dataclass(frozen=True)
class DriveRating:
    """The ratings a run's lifetime uses and where each came from (`drive_rating`)."""

    dwpd: float
    warranty_years: float
    pe_cycles: int
    tbw_from_pe: bool                  # the config named P/E cycles: TBW from them instead of DWPD
    source: str


def drive_rating(cfg: RunConfig, capacity: int | None) -> DriveRating:
    """Each rating from the config where it names one (non-zero), else from the device's own rating
    (`Backend.ratings`: a sim drive preset's datasheet figures), else the defaults (1 DWPD, 5 years,
    TLC's 3,000 P/E cycles)."""
    e = cfg.estimate
    r = device_backend(cfg).ratings(device_spec(cfg, capacity)) if capacity is not None else None
    rated = f"rated: {r.source}" if r is not None else ""

    def pick(configured: float, own: float | None, default: float) -> tuple[float, str]:
        if configured:
            return configured, "config"
        if own:
            return own, rated
        return default, "default"

    dwpd, s1 = pick(e.dwpd, r.dwpd if r else None, DEFAULT_DWPD)
    years, s2 = pick(e.warranty_years, r.warranty_years if r else None, DEFAULT_WARRANTY_YEARS)
    pe, s3 = pick(e.rated_pe_cycles, r.rated_pe_cycles if r else None, TLC_PE_CYCLES)
    by_source: dict[str, list[str]] = {}
    for text, src in ((f"{dwpd:g} DWPD", s1), (f"{years:g} years", s2), (f"{int(pe):,} P/E cycles", s3)):
        by_source.setdefault(src, []).append(text)
    return DriveRating(dwpd, years, int(pe), bool(e.rated_pe_cycles),
                       "; ".join(f"{', '.join(t)} ({src})" for src, t in by_source.items())
                       + ("; TBW from the P/E cycles" if e.rated_pe_cycles else ""))


def tbw_and_duration(cfg: RunConfig, span_s: float, capacity: int | None = None) -> tuple[float, float]:
    """The full-size drive's endurance budget (TBW: `drive_rating`'s DWPD × 365 × years × the SSD
    tier, or the tier × the configured P/E cycles) and the seconds the trace stands for (its span,
    or `estimate.trace_day_fraction` of a day; 1 s for a trace of one instant)."""
    e = cfg.estimate
    cap = cfg.tiers.ssd_bytes
    r = drive_rating(cfg, capacity)
    tbw = tbw_from_pe_cycles(cap, r.pe_cycles) if r.tbw_from_pe else tbw_from_dwpd(cap, r.dwpd, r.warranty_years)
    duration = e.trace_day_fraction * 86_400.0 if e.trace_day_fraction else span_s
    return tbw, duration if duration > 0 else 1.0


def _row_without_device(cfg: RunConfig, label: str, summary: SimSummary) -> ResultsRow:
    """A policy's row without a block plan: lifetime from the policy's object bytes (the plan's
    4 KiB-aligned bytes are not known here; the replay path uses them: they differ only by the
    stated rounding), under WAF 1 and the uniform reference."""
    f = cfg.workload.sample_fraction
    tbw, duration = tbw_and_duration(cfg, float(summary.span_s), device_capacity(cfg))
    per_day = host_bytes_per_day(summary.ssd_write_bytes / f, duration)
    waf_uniform, src = uniform_waf(cfg, device_capacity(cfg))
    return ResultsRow(
        policy=label, model=cfg.model, dram_bytes=cfg.tiers.dram_bytes, ssd_bytes=cfg.tiers.ssd_bytes,
        sample_fraction=f, **sim_fields(summary), tbw_bytes=tbw, host_bytes_per_day=per_day,
        waf_uniform=waf_uniform, waf_uniform_source=src, rating_source=drive_rating(cfg, device_capacity(cfg)).source,
        lifetime_days_waf1=projected_lifetime_days(tbw, per_day, 1.0),
        lifetime_days_uniform=projected_lifetime_days(tbw, per_day, waf_uniform),
        **pe_projections(*pe_rating(cfg, device_capacity(cfg)),
                         {"waf1": (per_day, 1.0), "uniform": (per_day, waf_uniform)}))


def pe_rating(cfg: RunConfig, capacity: int) -> tuple[float, float]:
    """The full-size drive's raw NAND (the SSD tier × the device's raw/exposed ratio; 1 where its
    geometry is unknown) and its P/E rating (`drive_rating`: the config's, the drive's, else TLC's 3,000)."""
    ftl = device_ftl_config(cfg, capacity)
    raw = cfg.tiers.ssd_bytes * (ftl.raw_bytes / ftl.exposed_bytes if ftl is not None else 1.0)
    return raw, drive_rating(cfg, capacity).pe_cycles
