"""`kvwear run`: the whole pipeline for one config, stage by stage, into a run directory.

Stages (each writes its files atomically, then a stage marker; `resume` skips marked stages):
  workload                 generate or load the requests (sampled if asked) → workload/requests.parquet
  characterize             the KVCache-in-the-Wild analyses of those requests → workload/characterization/
                           (for the report: skipped when the run makes none)
  simulate/LABEL           tiered-cache simulation under one policy → policies/LABEL/
  plan/LABEL               ssd_ops → block_ops on the device's capacity → replay/LABEL/
  device/LABEL             play the plan on the device (wear snapshots, eBPF capture) → device/LABEL/
  estimate/LABEL           lifetime projections and predicted-vs-measured checks → estimate/LABEL/
  results, report          results.parquet and report/

Scaling: `workload.sample_fraction` f keeps whole sessions (or, without sessions, whole
root-prefix groups) with probability f and scales the DRAM and SSD tiers by f; lifetime
projections scale the sampled SSD writes back by 1/f against the full-size drive.
This module orchestrates; it must not hold policy logic, parse tool output or lay out reports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from emulator.ftl import FtlConfig
from harness.config import DEFAULT_SSD_BYTES, RunConfig
from harness.devices.base import DeviceSpec, ReplayResult, open_device
from harness.estimate import (
    HOST_BYTES_REL_TOL,
    LIFETIME_REL_TOL,
    SMART_HOST_BYTES_REL_TOL,
    TLC_PE_CYCLES,
    WAF_REL_TOL,
    Check,
    host_bytes_per_day,
    pe_cycles_per_day,
    pe_lifetime_days,
    projected_lifetime_days,
    tbw_from_dwpd,
    tbw_from_pe_cycles,
)
from harness.placement import PlacementConfig, assign_placement
from harness.replay import ReplayConfig, plan_block_ops
from harness.rundir import RunDir, build_manifest, input_sha256, write_json
from harness.schema import BLOCK_OPS, WEAR
from harness.waf_model import PAGE_BYTES, DeathSummary, WafPrediction, death_summary, workload_waf
from harness.wear.base import NVME_DATA_UNIT_BYTES
from harness.wear.snapshot import delta as wear_delta
from harness.wear.snapshot import snapshot, wear_rows, wear_table
from kvwear.errors import InputError, KvwearError
from kvwear.tables import TableWriter, atomic_write, read_table, write_table
from kvwear.units import format_bytes
from workloads.blocks import splitmix64
from workloads.models import ModelProfile, resolve_profile
from workloads.schema import REQUESTS

# Stage progress: (stage name, units done, units total or None). The CLI draws bars from it.
Progress = Callable[[str, int, int | None], None]


def _no_progress(_stage: str, _done: int, _total: int | None) -> None:
    return None


@dataclass(frozen=True)
class PolicyOutcome:
    label: str
    row: dict[str, Any]
    checks: list[dict[str, Any]]


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    results: pa.Table
    outcomes: tuple[PolicyOutcome, ...]
    report_html: Path | None
    tiers: TierSizing | None = None


# -- workload -----------------------------------------------------------------------------------

def sample_groups(table: pa.Table, fraction: float, seed: int) -> pa.Table:
    """Keep whole sessions (or whole root-prefix groups when a row has no session) with
    probability `fraction`; the choice depends only on the group and the seed (stable hashes,
    not Python's per-process string hash)."""
    if fraction >= 1.0:
        return table
    if not 0.0 < fraction < 1.0:
        raise KvwearError(f"workload.sample_fraction must be in (0, 1], got {fraction}")
    sess = pc.dictionary_encode(table.column("session_id")).combine_chunks()
    names = sess.dictionary.to_pylist()
    name_keys = np.array([int.from_bytes(hashlib.blake2b(f"{seed}/{n}".encode(), digest_size=8).digest(), "little")
                          for n in names], dtype=np.uint64)
    idx = sess.indices.to_numpy(zero_copy_only=False)
    has_session = ~np.asarray(pc.is_null(sess.indices).to_numpy(zero_copy_only=False))
    ns = table.column("hash_ns").to_numpy().astype(np.uint64)
    prefix_keys = splitmix64(splitmix64(_group_block(table) ^ np.uint64(seed & 0xFFFFFFFF)) ^ ns)
    keys = np.where(has_session, name_keys[np.where(has_session, idx, 0).astype(np.int64)] if names else 0,
                    prefix_keys)
    keep = (keys >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction
    return table.filter(pa.array(keep))


def _group_block(table: pa.Table, shared_share: float = 0.05, max_depth: int = 8) -> np.ndarray:
    """Per request, the block that names its prefix group when the trace has no sessions: the
    first block position where no single id is shared by more than `shared_share` of requests
    (position 0 is a system prompt in Mooncake, common to every request), clipped to each
    request's length. Requests of one conversation share that block, so they stay together."""
    ids = table.column("hash_ids")
    lengths = np.asarray(pc.fill_null(pc.list_value_length(ids), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    flat_offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = np.asarray(pc.list_flatten(ids).to_numpy(zero_copy_only=False), dtype=np.int64)
    depth = 0
    for d in range(max_depth):
        has = lengths > d
        if not has.any():
            break
        col = values[flat_offsets[:-1][has] + d]
        top = np.unique(col, return_counts=True)[1].max()
        depth = d
        if top <= shared_share * len(lengths):
            break
    pos = np.minimum(depth, np.maximum(lengths - 1, 0))
    out = np.full(len(lengths), np.iinfo(np.int64).max, dtype=np.int64)     # no blocks: one group
    nz = lengths > 0
    out[nz] = values[flat_offsets[:-1][nz] + pos[nz]]
    return out.astype(np.uint64)


def _load_workload(cfg: RunConfig) -> tuple[pa.Table, dict[str, Path]]:
    w = cfg.workload
    if w.trace:
        from workloads.loaders import load_requests

        res = load_requests(w.trace, w.format or None)
        return res.table, {"trace": Path(w.trace)}
    from workloads.synthetic import generate

    params = {"seed": w.seed, **dict(w.params)}
    return generate(w.generator, **params), {}


def workload_stage(cfg: RunConfig, rd: RunDir) -> tuple[pa.Table, dict[str, Path]]:
    path = rd.stage_dir("workload") / "requests.parquet"
    inputs = {"trace": Path(cfg.workload.trace)} if cfg.workload.trace else {}
    if rd.is_done("workload"):
        # Same config, same path: the file behind it may still have changed since the stage ran.
        stored = rd.done_info("workload").get("inputs_sha256", {})
        for k, p in inputs.items():
            if k in stored and stored[k] != input_sha256(p):
                raise KvwearError(f"{p} changed since {rd.root} sampled it; resume only with the same input "
                                  "(or choose another --out)")
        table = read_table(REQUESTS, path)
        rd.skip()
        return table, inputs
    table, inputs = _load_workload(cfg)
    table = sample_groups(table, cfg.workload.sample_fraction, cfg.workload.seed)
    if table.num_rows == 0:
        raise KvwearError("the workload has no requests (after sampling)")
    write_table(REQUESTS, table, path)
    rd.mark_done("workload", {"rows": table.num_rows,
                              "inputs_sha256": {k: input_sha256(p) for k, p in inputs.items()}})
    return read_table(REQUESTS, path), inputs


def characterize_stage(rd: RunDir, requests: pa.Table, profile: ModelProfile) -> None:
    """The workload's characterization (ideal hit ratio, reuse times, lifespans, capacity needed)
    for the report; workloads.characterize does the analyses."""
    if rd.is_done("characterize"):
        rd.skip()
        return
    from reports.characterization import plot_characterization
    from workloads.characterize import characterize

    res, _ = characterize(requests, profile, rd.stage_dir("workload") / "characterization")
    plot_characterization(rd.stage_dir("workload") / "characterization")
    rd.mark_done("characterize", {"token_hit_ratio": res.token_hit_ratio, "capacity_bytes": res.capacity_bytes})


# -- per policy ---------------------------------------------------------------------------------

def policy_label(spec: str) -> str:
    from policies.base import resolve_spec

    return resolve_spec(spec).label


def sim_config(cfg: RunConfig, profile: ModelProfile) -> Any:
    from policies.sim import SimConfig

    f = cfg.workload.sample_fraction
    return SimConfig(
        dram_bytes=int(cfg.tiers.dram_bytes * f), ssd_bytes=int(cfg.tiers.ssd_bytes * f),
        hbm_bytes=int(cfg.tiers.hbm_bytes * f), kv_bytes_per_token=profile.kv_bytes_per_token,
        state_bytes=profile.state_bytes, chunk_tokens=cfg.workload.block_tokens, model=profile.name,
        active_params=profile.active_params, attn_flops_per_token=profile.attn_flops_per_token,
    )


def simulate_stage(cfg: RunConfig, rd: RunDir, spec: str, label: str, requests: pa.Table,
                   profile: ModelProfile, progress: Progress) -> dict[str, Any]:
    from policies.metrics import SIM_REQUESTS, SIM_TIMELINE
    from policies.schema import SSD_OPS
    from policies.sim import simulate

    d = rd.stage_dir("policies", label)
    stage = f"simulate/{label}"
    if not rd.is_done(stage):
        total = requests.num_rows
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            progress(stage, done[0], total)

        # ssd_ops stream to disk batch by batch: they grow with the trace, the cache does not;
        # an oracle reads its future from a next-use column of the workload's Parquet
        from policies.base import POLICIES, resolve_spec
        from workloads.nextuse import iter_with_next_use, next_use_file

        sim_cfg = sim_config(cfg, profile)
        workload = rd.stage_dir("workload") / "requests.parquet"
        ps = resolve_spec(spec)
        oracle = POLICIES.get(ps.name).streams_future(ps.params)
        with next_use_file(workload, d / ".next_use.parquet", sim_cfg.chunk_tokens) if oracle \
                else contextlib.nullcontext() as nu, TableWriter(SSD_OPS, d / "ssd_ops.parquet") as ops_out:
            batches = iter_with_next_use(workload, nu) if nu is not None else requests.to_batches(max_chunksize=2048)
            res = simulate(batches, sim_cfg, spec, progress=tick, ops_sink=ops_out.write)
        write_table(SIM_REQUESTS, res.requests, d / "per_request.parquet")
        write_table(SIM_TIMELINE, res.timeline, d / "timeline.parquet")
        write_json(d / "summary.json", res.summary.as_dict())
        rd.mark_done(stage, {"ssd_ops": ops_out.rows})
    else:
        rd.skip()
    return dict(json.loads((d / "summary.json").read_text()))


# The room a plan gets beyond the (scaled) SSD tier, for the 4 KiB rounding of each object: a
# device sized from the tier is tier × this; a tier sized from a device is device ÷ this.
CAPACITY_HEADROOM = 1.05


def device_capacity(cfg: RunConfig) -> int:
    """The exposed capacity the plan is laid out on: the configured one, FEMU's devsz_mb (femu, or sim
    with geometry=femu), else the (scaled) SSD tier plus 5% for the 4 KiB rounding of objects,
    rounded up to the alignment. Call it on a config `size_tiers` resolved."""
    a = cfg.replay.align_bytes
    if not cfg.device.capacity_bytes and cfg.device.kind == "femu":
        return int(_femu_geometry(cfg).devsz_mb) << 20
    opts = cfg.device.options
    if not cfg.device.capacity_bytes and cfg.device.kind == "sim" and opts.get("geometry") == "femu" \
            and "devsz_mb" in opts:
        return int(opts["devsz_mb"]) << 20        # the sim backend refuses any other capacity
    ssd = cfg.tiers.ssd_bytes or DEFAULT_SSD_BYTES
    cap = cfg.device.capacity_bytes or int(ssd * cfg.workload.sample_fraction * CAPACITY_HEADROOM)
    return max(a, -(-cap // a) * a)


def fixed_device_bytes(cfg: RunConfig) -> int | None:
    """The size of a device the run cannot size itself — a block device, a femu drive (devsz_mb),
    the sim FTL with FEMU geometry and devsz_mb — or None (sim, and the backing files of file: and
    qemu, which the run creates or grows to the capacity it needs)."""
    d = cfg.device
    if d.kind == "block":
        from harness.identity import path_identity

        if not d.target:
            raise KvwearError("device block needs a path: block:/dev/X")
        return int(path_identity(d.target).capacity_bytes or 0)
    if d.kind == "femu" or (d.kind == "sim" and d.options.get("geometry") == "femu" and "devsz_mb" in d.options):
        return device_capacity(dataclasses.replace(cfg, device=dataclasses.replace(d, capacity_bytes=0)))
    return None


@dataclass(frozen=True)
class TierSizing:
    """How `size_tiers` chose the SSD tier and the sample fraction, for the summary and the manifest."""

    ssd_bytes: int
    dram_bytes: int
    sample_fraction: float
    device_bytes: int | None       # the fixed device's usable bytes, None when the run sizes the device
    source: str                    # config | default | device | fit
    note: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def size_tiers(cfg: RunConfig) -> tuple[RunConfig, TierSizing]:
    """Resolve the SSD tier against the device. With a device of fixed size: no SSD tier
    (`tiers.ssd_bytes` 0) → the device's usable bytes ÷ CAPACITY_HEADROOM (÷ the sample fraction:
    the tier is the full-size one); a tier whose plan (tier × fraction × headroom) does not fit →
    an error naming the flags that fix it, or with `device.fit` the workload is scaled instead:
    the sample fraction becomes the share that fits and both tiers scale by it (DESIGN's scaling).
    Without a fixed device, 0 means DEFAULT_SSD_BYTES. Returns the resolved config."""
    w, t, d = cfg.workload, cfg.tiers, cfg.device
    size = fixed_device_bytes(cfg)
    f = w.sample_fraction
    fmt = format_bytes
    if size is None:
        ssd = t.ssd_bytes or DEFAULT_SSD_BYTES
        src = "config" if t.ssd_bytes else "default"
        out = dataclasses.replace(cfg, tiers=dataclasses.replace(t, ssd_bytes=ssd))
        return out, TierSizing(ssd, t.dram_bytes, f, None, src,
                               f"SSD tier {fmt(ssd, False)} ({'configured' if t.ssd_bytes else 'the default'})")
    a = cfg.replay.align_bytes
    if d.capacity_bytes and d.capacity_bytes > size:
        raise KvwearError(f"--capacity {d.capacity_bytes} bytes is larger than {d.target or d.kind}'s "
                          f"{size} bytes; give --capacity {size} or less")
    usable = (d.capacity_bytes or size) // a * a
    fits = int(usable / CAPACITY_HEADROOM)              # the scaled tier the device holds
    dev = d.target or d.kind
    if not t.ssd_bytes:
        ssd = int(fits / f)
        note = (f"SSD tier {fmt(ssd, False)}: {dev}'s usable {fmt(usable, False)} ÷ {CAPACITY_HEADROOM} "
                f"(headroom for 4 KiB rounding)" + (f" ÷ sample fraction {f:g}" if f < 1 else ""))
        out = dataclasses.replace(cfg, tiers=dataclasses.replace(t, ssd_bytes=ssd),
                                  device=dataclasses.replace(d, capacity_bytes=usable))
        return out, TierSizing(ssd, t.dram_bytes, f, usable, "device", note)
    need = int(t.ssd_bytes * f * CAPACITY_HEADROOM)
    if need <= usable:
        return cfg, TierSizing(t.ssd_bytes, t.dram_bytes, f, usable, "config",
                               f"SSD tier {fmt(t.ssd_bytes, False)} (configured) on {dev}'s {fmt(usable, False)}")
    if not d.fit:
        raise KvwearError(
            f"--ssd {fmt(t.ssd_bytes, False)} does not fit {dev}: its plan needs {need:,} bytes "
            f"(tier × sample fraction {f:g} × {CAPACITY_HEADROOM} for 4 KiB rounding), the device has "
            f"{usable:,}; give --ssd {int(fits / f) // 10**6}MB or less, leave --ssd out (the tier becomes "
            "the device's capacity), or pass --fit-device to scale the workload to the device")
    scale = fits / (t.ssd_bytes * f)
    f2 = f * scale
    note = (f"--fit-device: the workload is scaled to {dev}'s usable {fmt(usable, False)}: sample fraction "
            f"{f2:.4g} (sessions sampled), DRAM {fmt(t.dram_bytes, False)} and SSD {fmt(t.ssd_bytes, False)} "
            f"tiers scaled by it to {fmt(int(t.dram_bytes * f2), False)} and {fmt(int(t.ssd_bytes * f2), False)}")
    out = dataclasses.replace(cfg, workload=dataclasses.replace(w, sample_fraction=f2),
                              device=dataclasses.replace(d, capacity_bytes=usable))
    return out, TierSizing(t.ssd_bytes, t.dram_bytes, f2, usable, "fit", note)


def plan_stage(cfg: RunConfig, rd: RunDir, label: str, capacity: int) -> dict[str, Any]:
    """Lay the policy's ssd_ops out as block_ops; returns the plan's accounting (plan.json)."""
    from policies.schema import SSD_OPS

    d = rd.stage_dir("replay", label)
    stage = f"plan/{label}"
    if rd.is_done(stage):
        rd.skip()
        return dict(json.loads((d / "plan.json").read_text()))
    ops = read_table(SSD_OPS, rd.stage_dir("policies", label) / "ssd_ops.parquet")
    r = cfg.replay
    rc = ReplayConfig(capacity_bytes=capacity, layout=r.layout, align_bytes=r.align_bytes,  # type: ignore[arg-type]
                      trim_on_evict=r.trim_on_evict, max_io_bytes=r.max_io_bytes,
                      time_mode=r.time_mode, time_compression=r.time_compression,  # type: ignore[arg-type]
                      log_full=r.log_full)  # type: ignore[arg-type]
    try:
        plan = plan_block_ops(ops, rc, source=str(rd.stage_dir("policies", label) / "ssd_ops.parquet"))
    except InputError as exc:     # name the policy whose plan did not fit
        raise InputError(exc.path, exc.line, exc.field, f"policy {label}: {exc.message}") from None
    # the placement post-pass runs on the laid-out plan: handles never change where data goes
    table, placed = assign_placement(plan.table, _placement(cfg), capacity, r.align_bytes)
    write_table(BLOCK_OPS, table, d / "block_ops.parquet")
    accounting: dict[str, Any] = {**plan.accounting(), "placement": placed.as_dict(),
                                  "death_summary": plan_death_summary(table, capacity).as_dict()}
    write_json(d / "plan.json", accounting)
    rd.mark_done(stage, {"write_ios": plan.write_ios})
    return accounting


def plan_death_summary(block_ops: pa.Table, capacity: int) -> DeathSummary:
    """The plan's page death distances (harness.waf_model), in 4 KiB pages of the device."""
    from harness.devices.sim import plan_to_requests

    codes, first, npages = plan_to_requests(block_ops, PAGE_BYTES, capacity)
    return death_summary(codes, first, npages, -(-capacity // PAGE_BYTES))


def device_spec(cfg: RunConfig, capacity: int) -> DeviceSpec:
    """The backend's spec: the configured options plus the confirmations given as flags."""
    confirm = {k: v for k, v in (("confirm_serial", cfg.device.confirm_serial),
                                 ("confirm_overwrite", cfg.device.confirm_overwrite)) if v}
    return DeviceSpec(kind=cfg.device.kind, target=cfg.device.target, capacity_bytes=capacity,
                      options={**_placement_device_options(cfg), **dict(cfg.device.options), **confirm})


@contextmanager
def _capture(cfg: RunConfig, device_path: str, out_dir: Path) -> Iterator[dict[str, Any]]:
    """eBPF capture around the replay when configured; yields a dict filled on exit."""
    info: dict[str, Any] = {}
    # Only a block device has a dev_t of its own; a file's dev_t is its whole filesystem.
    if cfg.capture.tracer == "none" or cfg.device.kind != "block":
        yield info
        return
    from harness.capture import kernel_dev_t, open_tracer

    name = Path(os.path.realpath(device_path)).name
    if Path(f"/sys/class/block/{name}/partition").exists():
        # the block tracepoints report the whole disk's dev_t, never a partition's
        raise KvwearError(f"{device_path} is a partition: eBPF capture needs a whole-disk device "
                          "(or run with --tracer none)")
    tracer = open_tracer(cfg.capture.tracer)
    tracer.start(kernel_dev_t(device_path), out_dir / "block_trace.parquet")
    try:
        yield info
    except BaseException:
        # the replay failed: detach the probes, but let the replay's error be the one reported
        with contextlib.suppress(Exception):
            tracer.stop()
        raise
    res = tracer.stop()
    info.update({"tracer": res.tracer, "events": res.events, "lost_events": res.lost_events,
                 "write_bytes": res.write_bytes, "write_requests": res.write_requests,
                 "bytes_by_op": dict(res.bytes_by_op), "requests_by_op": dict(res.requests_by_op),
                 "unmatched_completions": res.unmatched_completions, "no_completion": res.no_completion,
                 # bpftrace confirms with its flush barrier that its last events reached the file
                 "drained": bool(res.extra.get("flushed", True)),
                 "parquet_path": str(res.parquet_path)})
    drop = int(os.environ.get(FAULT_DROP_EVENTS_ENV, "0") or 0)
    if drop:
        info.update(_drop_write_events(info, drop))       # in place: the caller holds `info`
    write_json(out_dir / "capture.json", info)


# Test-only fault injection: the capture "loses" this many write events (as a tracer whose ring
# buffer overflowed would), so that tests can show a failed byte-accounting check is a fault.
FAULT_DROP_EVENTS_ENV = "KVWEAR_TEST_DROP_TRACE_EVENTS"


def _drop_write_events(info: dict[str, Any], n: int) -> dict[str, Any]:
    """`info` as if the tracer had missed its first `n` write events (their rows stay in the
    trace file; the counts leave them out), marked as injected."""
    trace = pq.read_table(info["parquet_path"], columns=["op", "bytes"])
    writes = trace.filter(pc.equal(pc.cast(trace.column("op"), pa.string()), "write")).slice(0, n)
    lost = int(pc.sum(writes.column("bytes")).as_py() or 0)
    by_op = {**info["bytes_by_op"], "write": int(info["bytes_by_op"].get("write", 0)) - lost}
    return {**info, "write_bytes": int(info["write_bytes"]) - lost, "bytes_by_op": by_op,
            "write_requests": int(info["write_requests"]) - writes.num_rows,
            "injected_fault": f"{writes.num_rows} write events ({lost:,} bytes) dropped ({FAULT_DROP_EVENTS_ENV})"}


def device_stage(cfg: RunConfig, rd: RunDir, label: str, capacity: int,
                 progress: Progress = _no_progress) -> dict[str, Any]:
    d = rd.stage_dir("device", label)
    stage = f"device/{label}"
    if rd.is_done(stage):
        rd.skip()
        return dict(json.loads((d / "result.json").read_text()))
    plan = read_table(BLOCK_OPS, rd.stage_dir("replay", label) / "block_ops.parquet")
    readers = wear_readers(cfg)
    dev = open_device(device_spec(cfg, capacity), d)
    try:
        before = snapshot(cfg.device.target, readers) if readers else []
        t0 = time.monotonic()
        with _capture(cfg, cfg.device.target, d) as cap:
            res: ReplayResult = dev.replay(plan, d, timed=cfg.replay.time_mode != "afap",
                                           progress=lambda done, total: progress(stage, done, total))
        after = snapshot(cfg.device.target, readers) if readers else []
        ident = dev.identity()
    finally:
        dev.close()
    wear: dict[str, Any] = {}
    if readers:
        rows = wear_rows(before, 0.0, "before", label) + wear_rows(after, time.monotonic() - t0, "after", label)
        write_table(WEAR, wear_table(rows), d / "wear.parquet")
        for b, a in zip(before, after, strict=True):
            if b.supported and a.supported:
                wear[b.source] = dataclasses.asdict(wear_delta(b, a))
            else:
                wear[b.source] = {"unsupported": (b.note or a.note)}
    out = {**dataclasses.asdict(res), "identity": dataclasses.asdict(ident), "capture": cap, "wear": wear}
    out["extra"].pop("intervals", None)           # kept as a table below, not in the JSON
    if res.tool_output_path and Path(res.tool_output_path).name == "ftl_intervals.parquet":
        iv = pq.read_table(res.tool_output_path)
        host = np.cumsum(iv.column("host_bytes").to_numpy())
        nand = np.cumsum(iv.column("nand_bytes").to_numpy())
        _write_parquet(pa.table({"host_bytes": host, "nand_bytes": nand,
                                 "waf_cumulative": nand / np.maximum(host, 1)}), d / "timeline.parquet")
    write_json(d / "result.json", out)
    rd.mark_done(stage, {"write_bytes": res.write_bytes})
    return dict(json.loads((d / "result.json").read_text()))


def _placement(cfg: RunConfig) -> PlacementConfig:
    return PlacementConfig(cfg.replay.placement, cfg.replay.placement_handles)  # type: ignore[arg-type]


def _placement_device_options(cfg: RunConfig) -> dict[str, Any]:
    """The embedded FTL gets as many reclaim unit handles as the placement uses (unless the
    options name `ruh`); the other backends cannot carry handles (fio 3.33's iolog has none)."""
    n = _placement(cfg).handles
    return {"ruh": n} if cfg.device.kind == "sim" and n > 1 else {}


def placement_result(plan: dict[str, Any], device: dict[str, Any], measured_waf: float | None) -> tuple[
        dict[str, Any], list[Check]]:
    """Placement fields of a results row (the device WAF without placement: the sim twin's, or the
    measured one when the plan used no handle) and the per-handle byte-accounting checks."""
    p = plan.get("placement") or {"mode": "none", "write_bytes_by_handle": []}
    fdp = (device.get("extra") or {}).get("fdp")
    twin = (device.get("extra") or {}).get("no_placement")
    used = sum(1 for b in p["write_bytes_by_handle"] if b) > 1
    carried = bool(fdp) and used
    row: dict[str, Any] = {
        "placement": p["mode"],
        "placement_carried": carried or not used,
        # a device that did not play the handles measured the WAF without placement
        "waf_no_placement": twin["waf"] if twin else (None if carried else measured_waf),
    }
    checks = []
    if fdp:
        for h, (want, got) in enumerate(zip(fdp["plan_write_bytes_by_handle"], fdp["host_bytes_by_handle"],
                                            strict=True)):
            checks.append(Check.of(f"host bytes, handle {h}", want, got, f"{fdp.get('measured_by', 'kvwear-ftl')} fdp",
                                   0.0, kind="accounting"))
    return row, checks


def placement_gains(rows: list[dict[str, Any]], reference: str = "lru") -> list[dict[str, Any]]:
    """Each row plus its lifetime gain over `reference` without placement, split as host-write gain
    (reference host bytes ÷ this policy's) × WAF gain (reference WAF without placement ÷ this
    policy's WAF as measured, with its placement): lifetime ∝ 1 / (host bytes × WAF) on one drive."""
    ref = next((r for r in rows if r.get("policy") == reference), None)
    out = []
    for r in rows:
        g: dict[str, Any] = {"host_write_gain_vs_lru": None, "waf_gain_vs_lru": None, "lifetime_gain_vs_lru": None}
        if ref is not None and r.get("plan_write_bytes") and ref.get("waf_no_placement") and r.get("waf_measured"):
            hg = ref["plan_write_bytes"] / r["plan_write_bytes"]
            wg = ref["waf_no_placement"] / r["waf_measured"]
            g = {"host_write_gain_vs_lru": hg, "waf_gain_vs_lru": wg, "lifetime_gain_vs_lru": hg * wg}
        out.append({**r, **g})
    return out


def _write_parquet(table: pa.Table, path: Path) -> None:
    """Atomically (temporary sibling + rename): an interrupted write leaves no truncated file."""
    with atomic_write(path) as tmp:
        pq.write_table(table, tmp)


def wear_readers(cfg: RunConfig) -> list[str]:
    """Wear readers to snapshot around a replay: the configured ones, else for a block device
    psutil's disk counters plus the NVMe logs when it is an NVMe namespace."""
    if cfg.capture.wear_readers:
        return list(cfg.capture.wear_readers)
    if cfg.device.kind != "block":
        return []
    name = Path(cfg.device.target).name
    nvme = ["nvme-smart-binary", "smartctl", "ocp-c0", "intel-ca", "fdp"] if name.startswith("nvme") else []
    return ["psutil", *nvme]


# -- estimate -----------------------------------------------------------------------------------

def duw_check(plan_bytes: int, duw_delta: int, source: str) -> Check:
    """Plan bytes vs an NVMe Data Units Written delta: the counter moves in 512,000-byte units,
    rounded up, so it passes when the plan lies inside the bounds the delta allows
    ((ΔD − 1)·512,000, (ΔD + 1)·512,000) or within the SMART tolerance."""
    from harness.wear.snapshot import duw_bytes_bounds

    measured = duw_delta * NVME_DATA_UNIT_BYTES
    c = Check.of("host bytes", plan_bytes, measured, source, SMART_HOST_BYTES_REL_TOL, kind="accounting")
    lo, hi = duw_bytes_bounds(duw_delta)
    return dataclasses.replace(c, passed=c.passed or lo < plan_bytes < hi or (duw_delta == 0 and plan_bytes == 0))


def _femu_geometry(cfg: RunConfig) -> Any:
    from emulator.guest import FemuGeometry

    opts = dict(cfg.device.options)
    femu = dict(opts.get("femu", {}))
    femu.update({k.removeprefix("femu."): v for k, v in opts.items() if k.startswith("femu.")})
    return FemuGeometry.from_options(femu, "device.options.femu")


def device_ftl_config(cfg: RunConfig, capacity: int) -> FtlConfig | None:
    """The FTL geometry of the device when kvwear knows it (`sim`, and `femu` from its -device
    parameters); None for files, block devices and stock QEMU."""
    if cfg.device.kind == "sim":
        from harness.devices.sim import ftl_config_from_spec

        spec = DeviceSpec("sim", "", capacity, {**_placement_device_options(cfg), **dict(cfg.device.options)})
        return ftl_config_from_spec(spec)
    if cfg.device.kind == "femu":
        return cast(FtlConfig, _femu_geometry(cfg).ftl_config())
    return None


def uniform_waf(cfg: RunConfig, capacity: int) -> tuple[float, str]:
    """The uniform-random reference WAF for the device's geometry (1 where none is known)."""
    from harness.estimate import ftl_predicted_waf

    ftl = device_ftl_config(cfg, capacity)
    if ftl is None:
        return 1.0, "assumed-1 (no FTL geometry)"
    where = " (FEMU geometry)" if cfg.device.kind == "femu" else ""
    return ftl_predicted_waf(ftl), f"uniform random, Lambert W{where}"


def plan_workload_waf(cfg: RunConfig, rd: RunDir, label: str, plan: dict[str, Any],
                      capacity: int) -> WafPrediction | None:
    """The workload model (harness.waf_model) over the plan's death summary, for the device's
    geometry; None where the geometry is unknown. A plan.json written before the summary existed
    gets it from block_ops.parquet."""
    ftl = device_ftl_config(cfg, capacity)
    if ftl is None:
        return None
    path = rd.stage_dir("replay", label) / "plan.json"
    if "death_summary" in plan:
        ds = DeathSummary.from_dict(plan["death_summary"], str(path))
    else:
        ds = plan_death_summary(read_table(BLOCK_OPS, path.with_name("block_ops.parquet")), capacity)
    return workload_waf(ds, ftl)


def emulator_waf(cfg: RunConfig, rd: RunDir, label: str) -> float | None:
    """For a `femu` device: the embedded FTL with FEMU's geometry and GC thresholds plays the same
    plan (after the same sequential fill when the device preconditions) and predicts its WAF."""
    if cfg.device.kind != "femu":
        return None
    from emulator.ftl import OP_WRITE, Ftl
    from harness.devices.sim import plan_to_requests

    ftl_cfg = _femu_geometry(cfg).ftl_config()
    plan = read_table(BLOCK_OPS, rd.stage_dir("replay", label) / "block_ops.parquet")
    codes, first, npages = plan_to_requests(plan, ftl_cfg.page_bytes, ftl_cfg.exposed_bytes)
    ftl = Ftl(ftl_cfg)
    if str(cfg.device.options.get("precondition", "none")) == "fill":
        n = ftl_cfg.exposed_bytes // ftl_cfg.page_bytes
        per_io = (128 << 10) // ftl_cfg.page_bytes          # the guest's fill: 128 KiB sequential writes
        starts = np.arange(0, n, per_io, dtype=np.int64)
        ftl.apply_ops(np.full(starts.size, OP_WRITE, dtype=np.int8), starts,
                      np.minimum(per_io, n - starts).astype(np.int64))
    before = ftl.counters()
    ftl.apply_ops(codes, first, npages)
    return float(ftl.counters().minus(before).waf)


def estimate_stage(cfg: RunConfig, rd: RunDir, label: str, summary: dict[str, Any], plan: dict[str, Any],
                   device: dict[str, Any], capacity: int) -> PolicyOutcome:
    f = cfg.workload.sample_fraction
    tbw, duration = tbw_and_duration(cfg, float(summary["span_s"]))
    plan_bytes = int(plan["aligned_write_bytes"])
    per_day = host_bytes_per_day(plan_bytes / f, duration)
    waf_uniform, waf_uniform_src = uniform_waf(cfg, capacity)
    prediction = plan_workload_waf(cfg, rd, label, plan, capacity)
    waf_workload = prediction.waf if prediction is not None else None
    measured_waf = device.get("waf")
    dev_bytes = int(device["write_bytes"])
    checks: list[Check] = []
    notes: dict[str, str] = {}
    checks.append(Check.of("ssd_ops write bytes → plan", summary["ssd_write_bytes"], plan["object_write_bytes"],
                           "plan", 0.0, kind="accounting"))
    checks.append(Check.of("host bytes", plan_bytes, dev_bytes, device.get("tool") or cfg.device.kind,
                           HOST_BYTES_REL_TOL, kind="accounting"))
    cap = device.get("capture") or {}
    if cap.get("write_bytes") is not None:
        checks.append(Check.of("host bytes", plan_bytes, cap["write_bytes"], f"ebpf:{cap.get('tracer')}",
                               HOST_BYTES_REL_TOL, kind="accounting"))
    extra = device.get("extra") or {}
    if int(plan.get("trim_bytes", 0)) and not extra.get("trims_skipped"):
        # The plan's trims reached the backend: what it issued, or, deferring them, what it read
        # from the plan (harness.deferred_trims: of those, the units rewritten later in their
        # segment are not issued); eBPF then checks the issued bytes.
        issued = int(device.get("trim_bytes") or 0)
        tool = device.get("tool") or cfg.device.kind
        checks.append(Check.of("trim bytes", int(plan["trim_bytes"]), int(extra.get("trim_bytes_planned", issued)),
                               tool, 0.0, kind="accounting"))
        if cap.get("bytes_by_op") is not None:
            checks.append(Check.of("trim bytes", issued, int(cap["bytes_by_op"].get("discard", 0)),
                                   f"ebpf:{cap.get('tracer')}", HOST_BYTES_REL_TOL, kind="accounting"))
        if extra.get("trim_bytes_superseded"):
            notes[f"trim bytes|{tool}"] = (f"deferred trims (fio cannot replay iolog trims): {issued:,} bytes "
                                           f"issued, {int(extra['trim_bytes_superseded']):,} rewritten later in "
                                           "their segment and not trimmed")
    if extra.get("smart_duw_delta") is not None:          # SMART read inside an emulated drive's guest
        checks.append(duw_check(plan_bytes, int(extra["smart_duw_delta"]), "smart-duw (guest)"))
        notes["host bytes"] = "SMART Data Units Written count 512,000-byte units, rounded up"
    for src, w in sorted((device.get("wear") or {}).items()):
        if w.get("host_bytes") is None:
            continue
        if w.get("data_units") is not None:
            checks.append(duw_check(plan_bytes, int(w["data_units"]), f"wear:{src}"))
        else:
            checks.append(Check.of("host bytes", plan_bytes, w["host_bytes"], f"wear:{src}", HOST_BYTES_REL_TOL,
                                   kind="accounting"))
        if measured_waf is None and w.get("nand_bytes") and w["host_bytes"]:
            measured_waf = w["nand_bytes"] / w["host_bytes"]
            device = {**device, "nand_write_bytes": w["nand_bytes"]}
    placement_row, placement_checks = placement_result(plan, device, measured_waf)
    checks.extend(placement_checks)
    emulated = emulator_waf(cfg, rd, label)
    # The embedded FTL, configured as the device, on the same plan: its WAF is a prediction too.
    if emulated is not None and measured_waf is not None:
        checks.append(Check.of("WAF (FTL emulator)", emulated, measured_waf, cfg.device.kind, WAF_REL_TOL,
                               kind="model"))
    tool = device.get("tool") or cfg.device.kind
    if measured_waf is not None:
        if prediction is not None:
            checks.append(Check.of("WAF (workload model)", prediction.waf, measured_waf, tool, WAF_REL_TOL,
                                   kind="model"))
            notes["WAF (workload model)"] = notes["lifetime days (workload model)"] = (
                f"{prediction.model} (harness.waf_model) on {prediction.p_eff_pages * 4096 / 2**20:,.0f} MiB "
                f"of GC space; {prediction.regime} GC"
                + ("; the model plays the plan on an empty drive, this one was filled first (precondition=fill)"
                   if str(cfg.device.options.get("precondition", "none")) == "fill" else ""))
        checks.append(Check.of("WAF (uniform reference)", waf_uniform, measured_waf, tool, WAF_REL_TOL,
                               kind="reference"))
        notes["WAF (uniform reference)"] = notes["lifetime days (uniform reference WAF)"] = (
            "reference only: uniform random overwrites of the whole exposed space; "
            f"the {cfg.replay.layout} layout's write pattern is not that")
        notes["lifetime days (WAF 1)"] = "reference only: Gandalf's assumption"
    life_waf1 = projected_lifetime_days(tbw, per_day, 1.0)
    life_uniform = projected_lifetime_days(tbw, per_day, waf_uniform)
    life_workload = projected_lifetime_days(tbw, per_day, waf_workload) if waf_workload is not None else None
    measured_per_day = host_bytes_per_day(dev_bytes / f, duration)
    life_measured = (projected_lifetime_days(tbw, measured_per_day, measured_waf)
                     if measured_waf is not None else None)
    waf_none = placement_row["waf_no_placement"]
    placement_row["lifetime_days_no_placement"] = (
        projected_lifetime_days(tbw, host_bytes_per_day(dev_bytes / f, duration), waf_none)
        if waf_none is not None else None)
    if life_measured is not None:
        # Each projection against the measurement; only the workload model's counts in the tally.
        if life_workload is not None:
            checks.append(Check.of("lifetime days (workload model)", life_workload, life_measured,
                                   "measured host bytes × WAF", LIFETIME_REL_TOL, kind="model"))
        checks.append(Check.of("lifetime days (WAF 1)", life_waf1, life_measured, "measured host bytes × WAF",
                               LIFETIME_REL_TOL, kind="reference"))
        checks.append(Check.of("lifetime days (uniform reference WAF)", life_uniform, life_measured,
                               "measured host bytes × WAF", LIFETIME_REL_TOL, kind="reference"))
    pe = pe_projections(cfg, capacity, {"waf1": (per_day, 1.0), "uniform": (per_day, waf_uniform),
                                        "workload": (per_day, waf_workload),
                                        "measured": (measured_per_day, measured_waf)})
    check_rows = [{"quantity": c.name, "source": c.source, "predicted": c.predicted, "measured": c.measured,
                   "rel_error": None if math.isinf(c.rel_error) else c.rel_error, "tolerance": c.tolerance,
                   "passed": c.passed, "kind": c.kind,
                   "note": notes.get(f"{c.name}|{c.source}", notes.get(c.name, ""))} for c in checks]
    write_json(rd.stage_dir("estimate", label) / "crossval.json", {"policy": label, "checks": check_rows,
                                                                    "tbw_bytes": tbw, "duration_s": duration})
    n = max(int(summary["requests"]), 1)
    row: dict[str, Any] = {
        "policy": label,
        "model": cfg.model,
        "device": cfg.device.kind,
        "dram_bytes": cfg.tiers.dram_bytes,
        "ssd_bytes": cfg.tiers.ssd_bytes,
        "sample_fraction": f,
        "requests": int(summary["requests"]),
        "span_s": float(summary["span_s"]),
        "miss_ratio_tokens": summary["token_miss_ratio"],
        "miss_ratio_chunks": summary["chunk_miss_ratio"],
        "ssd_write_bytes": summary["ssd_write_bytes"],
        "ssd_write_bytes_full": summary["ssd_write_bytes_full"],
        "ssd_write_bytes_linear": summary["ssd_write_bytes_linear"],
        "ssd_read_bytes": summary["ssd_read_bytes"],
        "linear_share_of_ssd_write_bytes": summary["linear_share_of_ssd_write_bytes"],
        "hits_per_ssd_write": summary["ssd_hits_per_write"],
        "frac_ssd_writes_hit": summary["ssd_written_fraction_hit"],
        "plan_write_bytes": plan_bytes,
        "device_write_bytes": dev_bytes,
        "nand_write_bytes": device.get("nand_write_bytes"),
        "ebpf_write_bytes": cap.get("write_bytes"),
        "smart_write_bytes": extra.get("smart_host_bytes"),
        "waf_measured": measured_waf,
        "waf_emulator": emulated,
        "waf_uniform": waf_uniform,
        "waf_uniform_source": waf_uniform_src,
        "waf_workload": waf_workload,
        "waf_workload_regime": prediction.regime if prediction is not None else None,
        "tbw_bytes": tbw,
        "host_bytes_per_day": per_day,
        "lifetime_days_waf1": life_waf1,
        "lifetime_days_uniform": life_uniform,
        "lifetime_days_workload": life_workload,
        "lifetime_days_measured": life_measured,
        **placement_row,
        **pe,
        "load_latency_mean_s": summary["mean_load_latency_s"],
        "cost_recompute_per_1k": summary["gpu_usd"] / n * 1000.0,
        "cost_wear_per_1k": summary["ssd_wear_usd"] / n * 1000.0,
        "cost_per_1k": summary["cost_per_1k_requests_usd"],
        # Accounting failures are faults; model failures are findings (estimate.Check).
        "accounting_checks_passed": sum(c.passed for c in checks if c.kind == "accounting"),
        "accounting_checks_total": sum(c.kind == "accounting" for c in checks),
        "model_checks_passed": sum(c.passed for c in checks if c.kind == "model"),
        "model_checks_total": sum(c.kind == "model" for c in checks),
    }
    rd.mark_done(f"estimate/{label}")
    return PolicyOutcome(label=label, row=row, checks=check_rows)


# -- the run ------------------------------------------------------------------------------------

def run(cfg: RunConfig, out: str | Path, *, resume: bool = False, replay: bool = True,
        report: bool = True, progress: Progress = _no_progress) -> RunOutcome:
    """Run every stage of `cfg` into `out` (see the module docstring): the tiers resolved against
    the device, the static checks (harness.preflight), then the stages, holding the run directory's
    lock (harness.exclusive)."""
    from harness.exclusive import locked
    from harness.preflight import preflight

    cfg, sizing = size_tiers(cfg)      # the stored config.toml holds the resolved tiers
    preflight(cfg, replay=replay)
    rd = RunDir(out)
    rd.create()
    with locked(rd.lock_path, f"run directory {rd.root}"):
        return _run_stages(cfg, sizing, rd, resume=resume, replay=replay, report=report, progress=progress)


def _run_stages(cfg: RunConfig, sizing: TierSizing, rd: RunDir, *, resume: bool, replay: bool, report: bool,
                progress: Progress) -> RunOutcome:
    rd.prepare(cfg.to_toml(), resume)
    profile = resolve_profile(cfg.model)
    requests, inputs = workload_stage(cfg, rd)
    progress("workload", 1, 1)
    if report:          # it feeds the report only (sweep points run without one)
        characterize_stage(rd, requests, profile)
        progress("characterize", 1, 1)
    capacity = device_capacity(cfg)
    _placement(cfg)                     # a bad placement setting fails before any simulation
    labels = [policy_label(s) for s in cfg.policies]
    if len(set(labels)) != len(labels):
        raise KvwearError(f"two policies resolve to the same label: {labels}")
    write_json(rd.manifest_path, build_manifest(
        config=cfg.to_dict(), inputs=inputs, seeds={"workload": cfg.workload.seed},
        devices={"kind": cfg.device.kind, "target": cfg.device.target, "capacity_bytes": capacity,
                 "tiers": sizing.as_dict()}))
    outcomes = []
    for spec, label in zip(cfg.policies, labels, strict=True):
        summary = simulate_stage(cfg, rd, spec, label, requests, profile, progress)
        if not replay:
            row = {"policy": label, "model": cfg.model, "dram_bytes": cfg.tiers.dram_bytes,
                   "ssd_bytes": cfg.tiers.ssd_bytes, "sample_fraction": cfg.workload.sample_fraction,
                   **_sim_only_row(summary)}
            outcomes.append(PolicyOutcome(label, {**row, **_projections_without_device(cfg, row)}, []))
            continue
        plan = plan_stage(cfg, rd, label, capacity)
        progress(f"plan/{label}", 1, 1)
        device = device_stage(cfg, rd, label, capacity, progress)
        progress(f"device/{label}", 1, 1)
        outcomes.append(estimate_stage(cfg, rd, label, summary, plan, device, capacity))
    results = pa.Table.from_pylist(placement_gains([o.row for o in outcomes]) if replay else [o.row for o in outcomes])
    _write_parquet(results, rd.results_path)
    rd.mark_done("results")
    html = None
    if report:
        from reports.run_report import build_run_report

        html = build_run_report(rd.root).html
        rd.mark_done("report")
    return RunOutcome(rd.root, results, tuple(outcomes), html, sizing)


def accounting_faults(rows: Iterable[Mapping[Any, Any]]) -> list[str]:
    """'POLICY: k of n checks failed' for every row whose byte-accounting checks did not all hold."""
    def count(v: Any) -> int:            # None, or NaN in a table where other rows have the column
        return 0 if v is None or v != v else int(v)

    out = []
    for r in rows:
        total, passed = count(r.get("accounting_checks_total")), count(r.get("accounting_checks_passed"))
        if passed < total:
            out.append(f"{r['policy']}: {total - passed} of {total} checks failed")
    return out


def _sim_only_row(summary: dict[str, Any]) -> dict[str, Any]:
    n = max(int(summary["requests"]), 1)
    return {
        "miss_ratio_tokens": summary["token_miss_ratio"], "miss_ratio_chunks": summary["chunk_miss_ratio"],
        "ssd_write_bytes": summary["ssd_write_bytes"], "ssd_write_bytes_full": summary["ssd_write_bytes_full"],
        "ssd_write_bytes_linear": summary["ssd_write_bytes_linear"],
        "linear_share_of_ssd_write_bytes": summary["linear_share_of_ssd_write_bytes"],
        "hits_per_ssd_write": summary["ssd_hits_per_write"],
        "frac_ssd_writes_hit": summary["ssd_written_fraction_hit"],
        "load_latency_mean_s": summary["mean_load_latency_s"],
        "cost_recompute_per_1k": summary["gpu_usd"] / n * 1000.0,
        "cost_wear_per_1k": summary["ssd_wear_usd"] / n * 1000.0, "cost_per_1k": summary["cost_per_1k_requests_usd"],
        "span_s": float(summary["span_s"]), "requests": int(summary["requests"]),
    }


def run_point(cfg: RunConfig, out: Path, *, replay: bool) -> dict[str, Any]:
    """One sweep point (one policy): run it (resuming whatever a dead worker finished) and return
    its results row. Without `replay`, lifetime uses the WAF-1 and analytical projections only."""
    if len(cfg.policies) != 1:
        raise KvwearError(f"a sweep point has exactly one policy, got {list(cfg.policies)}")
    outcome = run(cfg, out, resume=True, replay=replay, report=False)
    return dict(outcome.outcomes[0].row)


def tbw_and_duration(cfg: RunConfig, span_s: float) -> tuple[float, float]:
    """The full-size drive's endurance budget (TBW) and the seconds the trace stands for (its
    span, or `estimate.trace_day_fraction` of a day; 1 s for a trace of one instant)."""
    e = cfg.estimate
    cap = cfg.tiers.ssd_bytes
    tbw = (tbw_from_pe_cycles(cap, e.rated_pe_cycles) if e.rated_pe_cycles
           else tbw_from_dwpd(cap, e.dwpd, e.warranty_years))
    duration = e.trace_day_fraction * 86_400.0 if e.trace_day_fraction else span_s
    return tbw, duration if duration > 0 else 1.0


def _projections_without_device(cfg: RunConfig, row: dict[str, Any]) -> dict[str, Any]:
    """Lifetime without a block plan. The plan's 4 KiB-aligned bytes are not known here, so the
    policy's object bytes are used (the replay path uses the aligned bytes; they differ only by
    the stated rounding)."""
    f = cfg.workload.sample_fraction
    tbw, duration = tbw_and_duration(cfg, float(row["span_s"]))
    per_day = host_bytes_per_day(row["ssd_write_bytes"] / f, duration)
    waf_uniform, src = uniform_waf(cfg, device_capacity(cfg))
    return {"tbw_bytes": tbw, "host_bytes_per_day": per_day, "waf_uniform": waf_uniform, "waf_uniform_source": src,
            "lifetime_days_waf1": projected_lifetime_days(tbw, per_day, 1.0),
            "lifetime_days_uniform": projected_lifetime_days(tbw, per_day, waf_uniform),
            **pe_projections(cfg, device_capacity(cfg), {"waf1": (per_day, 1.0), "uniform": (per_day, waf_uniform)})}


def pe_projections(cfg: RunConfig, capacity: int,
                   wafs: dict[str, tuple[float, float | None]]) -> dict[str, Any]:
    """P/E cycles the full-size drive consumes per day under each WAF (name → host bytes per day,
    WAF), and the days a drive rated `estimate.rated_pe_cycles` (else TLC's 3,000) lasts. Raw NAND =
    the SSD tier × the device's raw/exposed ratio (1 where its geometry is unknown)."""
    ftl = device_ftl_config(cfg, capacity)
    raw = cfg.tiers.ssd_bytes * (ftl.raw_bytes / ftl.exposed_bytes if ftl is not None else 1.0)
    rating = cfg.estimate.rated_pe_cycles or TLC_PE_CYCLES
    out: dict[str, Any] = {"raw_nand_bytes": raw, "pe_rating_cycles": rating}
    for name, (per_day, waf) in wafs.items():
        cycles = pe_cycles_per_day(per_day, waf, raw) if waf is not None else None
        out[f"pe_cycles_per_day_{name}"] = cycles
        out[f"lifetime_days_pe_{name}"] = pe_lifetime_days(rating, cycles) if cycles is not None else None
    return out
