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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.config import RunConfig
from harness.devices.base import DeviceSpec, ReplayResult, open_device
from harness.estimate import (
    HOST_BYTES_REL_TOL,
    LIFETIME_REL_TOL,
    SMART_HOST_BYTES_REL_TOL,
    WAF_REL_TOL,
    Check,
    host_bytes_per_day,
    projected_lifetime_days,
    tbw_from_dwpd,
    tbw_from_pe_cycles,
)
from harness.replay import ReplayConfig, plan_block_ops
from harness.rundir import RunDir, build_manifest, input_sha256, write_json
from harness.schema import BLOCK_OPS, WEAR
from harness.wear.base import NVME_DATA_UNIT_BYTES
from harness.wear.snapshot import delta as wear_delta
from harness.wear.snapshot import snapshot, wear_rows, wear_table
from kvwear.errors import KvwearError
from kvwear.tables import TableWriter, atomic_path, read_table, write_table
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
    from workloads.characterize import characterize

    res, _ = characterize(requests, profile, rd.stage_dir("workload") / "characterization")
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
        from policies.base import resolve_spec
        from policies.registry import get_policy_class
        from workloads.nextuse import iter_with_next_use, next_use_file

        sim_cfg = sim_config(cfg, profile)
        workload = rd.stage_dir("workload") / "requests.parquet"
        oracle = get_policy_class(resolve_spec(spec).name).needs_future
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


def device_capacity(cfg: RunConfig) -> int:
    """The exposed capacity the plan is laid out on: the configured one, FEMU's devsz_mb (femu, or sim
    with geometry=femu), else the (scaled) SSD tier plus 5% for the 4 KiB rounding of objects,
    rounded up to the alignment."""
    a = cfg.replay.align_bytes
    if not cfg.device.capacity_bytes and cfg.device.kind == "femu":
        return int(_femu_geometry(cfg).devsz_mb) << 20
    opts = cfg.device.options
    if not cfg.device.capacity_bytes and cfg.device.kind == "sim" and opts.get("geometry") == "femu" \
            and "devsz_mb" in opts:
        return int(opts["devsz_mb"]) << 20        # the sim backend refuses any other capacity
    cap = cfg.device.capacity_bytes or int(cfg.tiers.ssd_bytes * cfg.workload.sample_fraction * 1.05)
    return max(a, -(-cap // a) * a)


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
    plan = plan_block_ops(ops, rc, source=str(rd.stage_dir("policies", label) / "ssd_ops.parquet"))
    write_table(BLOCK_OPS, plan.table, d / "block_ops.parquet")
    accounting = plan.accounting()
    write_json(d / "plan.json", accounting)
    rd.mark_done(stage, {"write_ios": plan.write_ios})
    return accounting


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
    write_json(out_dir / "capture.json", info)


def device_stage(cfg: RunConfig, rd: RunDir, label: str, capacity: int,
                 progress: Progress = _no_progress) -> dict[str, Any]:
    d = rd.stage_dir("device", label)
    stage = f"device/{label}"
    if rd.is_done(stage):
        rd.skip()
        return dict(json.loads((d / "result.json").read_text()))
    plan = read_table(BLOCK_OPS, rd.stage_dir("replay", label) / "block_ops.parquet")
    spec = DeviceSpec(kind=cfg.device.kind, target=cfg.device.target, capacity_bytes=capacity,
                      options={**dict(cfg.device.options),
                               **({"confirm_serial": cfg.device.confirm_serial} if cfg.device.confirm_serial else {})})
    readers = wear_readers(cfg)
    dev = open_device(spec, d)
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


def _write_parquet(table: pa.Table, path: Path) -> None:
    """Atomically (temporary sibling + rename): an interrupted write leaves no truncated file."""
    tmp = atomic_path(path)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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


def _model_waf(cfg: RunConfig, capacity: int) -> tuple[float, str]:
    """The analytical WAF for the device: from the FTL geometry for `sim` and `femu`, else 1."""
    from harness.estimate import ftl_predicted_waf

    if cfg.device.kind == "sim":
        from harness.devices.sim import ftl_config_from_spec

        spec = DeviceSpec("sim", "", capacity, dict(cfg.device.options))
        return ftl_predicted_waf(ftl_config_from_spec(spec)), "analytical"
    if cfg.device.kind == "femu":
        return ftl_predicted_waf(_femu_geometry(cfg).ftl_config()), "analytical (FEMU geometry)"
    return 1.0, "assumed-1"


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
    waf_model, waf_model_src = _model_waf(cfg, capacity)
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
    emulated = emulator_waf(cfg, rd, label)
    # The embedded FTL, configured as the device, on the same plan: its WAF is a prediction too.
    if emulated is not None and measured_waf is not None:
        checks.append(Check.of("WAF (FTL emulator)", emulated, measured_waf, cfg.device.kind, WAF_REL_TOL,
                               kind="model"))
    if measured_waf is not None:
        checks.append(Check.of("WAF", waf_model, measured_waf, device.get("tool") or cfg.device.kind, WAF_REL_TOL,
                               kind="model"))
        notes["WAF"] = notes["lifetime days (model WAF)"] = (
            "the analytical model assumes uniform random overwrites of the whole exposed space; "
            f"the {cfg.replay.layout} layout's write pattern is not that")
    life_waf1 = projected_lifetime_days(tbw, per_day, 1.0)
    life_model = projected_lifetime_days(tbw, per_day, waf_model)
    life_measured = (projected_lifetime_days(tbw, host_bytes_per_day(dev_bytes / f, duration), measured_waf)
                     if measured_waf is not None else None)
    if life_measured is not None:
        # Both projections against the measurement: Gandalf's WAF 1 and the analytical model.
        checks.append(Check.of("lifetime days (WAF 1)", life_waf1, life_measured, "measured host bytes × WAF",
                               LIFETIME_REL_TOL, kind="model"))
        checks.append(Check.of("lifetime days (model WAF)", life_model, life_measured,
                               "measured host bytes × WAF", LIFETIME_REL_TOL, kind="model"))
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
        "waf_model": waf_model,
        "waf_model_source": waf_model_src,
        "tbw_bytes": tbw,
        "host_bytes_per_day": per_day,
        "lifetime_days_waf1": life_waf1,
        "lifetime_days_model": life_model,
        "lifetime_days_measured": life_measured,
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
    """Run every stage of `cfg` into `out` (see the module docstring)."""
    rd = RunDir(out)
    rd.prepare(cfg.to_toml(), resume)
    profile = resolve_profile(cfg.model)
    requests, inputs = workload_stage(cfg, rd)
    progress("workload", 1, 1)
    if report:          # it feeds the report only (sweep points run without one)
        characterize_stage(rd, requests, profile)
        progress("characterize", 1, 1)
    capacity = device_capacity(cfg)
    labels = [policy_label(s) for s in cfg.policies]
    if len(set(labels)) != len(labels):
        raise KvwearError(f"two policies resolve to the same label: {labels}")
    write_json(rd.manifest_path, build_manifest(
        config=cfg.to_dict(), inputs=inputs, seeds={"workload": cfg.workload.seed},
        devices={"kind": cfg.device.kind, "target": cfg.device.target, "capacity_bytes": capacity}))
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
    results = pa.Table.from_pylist([o.row for o in outcomes])
    _write_parquet(results, rd.results_path)
    rd.mark_done("results")
    html = None
    if report:
        from reports.run_report import build_run_report

        html = build_run_report(rd.root).html
        rd.mark_done("report")
    return RunOutcome(rd.root, results, tuple(outcomes), html)


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
    waf_model, _ = _model_waf(cfg, device_capacity(cfg))
    return {"tbw_bytes": tbw, "host_bytes_per_day": per_day, "waf_model": waf_model,
            "lifetime_days_waf1": projected_lifetime_days(tbw, per_day, 1.0),
            "lifetime_days_model": projected_lifetime_days(tbw, per_day, waf_model)}
