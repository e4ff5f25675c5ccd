"""Placement handles: the post-pass over a laid-out plan, and the embedded FTL playing them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear.errors import InputError, KvwearError
from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.sim import SimDevice
from kvwear.harness.estimate.estimator import Estimate, PlanRecord
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.run import run
from kvwear.harness.plan.placement import PlacementConfig, assign_placement, plan_handles, residency_bytes
from kvwear.harness.plan.planner import ReplayConfig, plan_block_ops
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.policies.schema import SSD_OPS

U = 4096
FEMU_SMALL = {"geometry": "femu", "devsz_mb": 192, "pgs_per_blk": 256, "blks_per_pl": 64, "luns_per_ch": 2,
              "nchs": 2, "gc_thres_pcent": 75, "gc_thres_pcent_high": 95}


def _plan(rows: list[tuple[str, int, int, str, int]]) -> pa.Table:
    return BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(len(rows), dtype=np.float64),
        "op": [r[0] for r in rows], "offset_bytes": [r[1] * U for r in rows],
        "length_bytes": [r[2] * U for r in rows], "obj_kind": [r[3] for r in rows],
        "obj_id": [r[4] for r in rows]}))


def _kv_ssd_ops(steps: int, seed: int) -> pa.Table:
    """A hybrid model's SSD traffic in miniature: every step writes a 1 MiB linear state that is
    superseded two steps later and a 256 KiB KV chunk that lives until a random eviction keeps
    the KV at ~120 MiB."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[str, int, str, int]] = []
    live_kv: list[int] = []
    for s in range(steps):
        rows.append(("write", 2 * s, "linear", 1 << 20))
        if s >= 2:
            rows.append(("evict", 2 * (s - 2), "linear", 1 << 20))
        rows.append(("write", 2 * s + 1, "full", 256 << 10))
        live_kv.append(2 * s + 1)
        if len(live_kv) > 480:
            rows.append(("evict", live_kv.pop(int(rng.integers(0, len(live_kv)))), "full", 256 << 10))
    n = len(rows)
    return SSD_OPS.conform(pa.table({
        "t_s": np.arange(n, dtype=np.float64), "op": [r[0] for r in rows], "obj_id": [r[1] for r in rows],
        "obj_kind": [r[2] for r in rows], "bytes": [r[3] for r in rows],
        "session_id": pa.nulls(n, pa.string()), "cause": ["test"] * n}))


def test_kind_tags_writes_by_object_kind_only() -> None:
    plan = _plan([("write", 0, 4, "full", 1), ("write", 4, 2, "linear", 2), ("read", 0, 4, "full", 1),
                  ("trim", 4, 2, "linear", 2)])
    # both writes never die (one lifetime bucket): separated only when asked to at any distance
    out, st = assign_placement(plan, PlacementConfig("kind", kind_min_separation=0.0), 64 * U)
    assert plan_handles(out).tolist() == [0, 1, 0, 0]
    assert st.write_bytes_by_handle == (4 * U, 2 * U) and st.write_ios_by_handle == (1, 1)
    none, st0 = assign_placement(out, PlacementConfig("none"), 64 * U)
    assert plan_handles(none).tolist() == [0, 0, 0, 0] and st0.write_bytes_by_handle == (6 * U,)
    with pytest.raises(InputError, match=r"block_ops:1: field 'obj_kind': unknown object kind 'sliding'"):
        assign_placement(_plan([("write", 0, 1, "sliding", 1)]), PlacementConfig("kind"), 64 * U)
    with pytest.raises(KvwearError, match="unknown placement 'stream'"):
        PlacementConfig("stream")  # type: ignore[arg-type]


def test_kind_keeps_one_handle_when_the_kinds_die_alike_only_when_asked() -> None:
    """The kinds' lifetime buckets (C/4, C/2, C of 64 units): full KV never dies, linear state
    dies after 1 unit: TVD 1, apart; both never die: TVD 0, one handle at kind_min_separation 0.5,
    and the plan says so; the default (0) separates the kinds whatever their TVD, and records it."""
    apart = _plan([("write", 0, 4, "full", 1), ("write", 8, 1, "linear", 2), ("write", 8, 1, "linear", 3),
                   ("write", 30, 1, "full", 4)])
    out, st = assign_placement(apart, PlacementConfig("kind", kind_min_separation=0.5), 64 * U)
    assert plan_handles(out).tolist() == [0, 1, 1, 0]
    # the second state row never dies: half the state bytes share the KV's bucket
    assert (st.kind_separation, st.kind_fallback) == (0.5, False)
    alike = _plan([("write", 0, 4, "full", 1), ("write", 8, 2, "linear", 2)])
    out, st = assign_placement(alike, PlacementConfig("kind", kind_min_separation=0.5), 64 * U)
    assert plan_handles(out).tolist() == [0, 0] and st.write_bytes_by_handle == (6 * U, 0)
    assert (st.kind_separation, st.kind_fallback) == (0.0, True)
    assert st.as_dict()["kind_fallback"] is True
    out, st = assign_placement(alike, PlacementConfig("kind"), 64 * U)
    assert plan_handles(out).tolist() == [0, 1] and st.write_bytes_by_handle == (4 * U, 2 * U)
    assert (st.kind_separation, st.kind_fallback) == (0.0, False)
    with pytest.raises(KvwearError, match="kind_min_separation must be 0–1"):
        PlacementConfig("kind", kind_min_separation=1.5)


def test_lifetime_oracle_reads_page_deaths_from_the_plan() -> None:
    # row 0 (2 units): row 2 trims its first unit, row 3's write kills its second as it is issued,
    # so its last page dies after the 1 unit row 1 wrote; rows 1 and 3 never die
    plan = _plan([("write", 0, 2, "full", 1), ("write", 10, 1, "full", 2), ("trim", 0, 1, "full", 1),
                  ("write", 1, 1, "full", 3)])
    d = residency_bytes(plan, 64 * U)
    assert d[0] == 1 * U and np.isinf(d[1]) and np.isnan(d[2]) and np.isinf(d[3])
    cfg = PlacementConfig("lifetime", lifetime_handles=4)
    assert cfg.lifetime_edges_bytes(64 * U).tolist() == [16 * U, 32 * U, 64 * U]
    out, st = assign_placement(plan, cfg, 64 * U)
    assert plan_handles(out).tolist() == [3, 0, 0, 0]       # handle 0: the longest-lived
    assert st.write_bytes_by_handle == (2 * U, 0, 0, 2 * U)
    assert st.as_dict()["lifetime_edges_bytes"] == [16.0 * U, 32.0 * U, 64.0 * U]


def test_a_plan_without_the_column_means_handle_zero() -> None:
    old = pa.table({"t_s": [0.0], "op": ["write"], "offset_bytes": [0], "length_bytes": [U],
                    "obj_kind": ["full"], "obj_id": [1]})
    t = BLOCK_OPS.conform(old)
    assert t.column("placement_handle").to_pylist() == [0]
    assert plan_handles(old).tolist() == [0]


def test_sim_keeps_kinds_apart_lowers_waf_and_accounts_bytes_per_handle(tmp_path: Path) -> None:
    cap = 192 << 20
    laid = plan_block_ops(_kv_ssd_ops(2500, 1), ReplayConfig(capacity_bytes=cap, layout="extent"))
    plan, st = assign_placement(laid.table, PlacementConfig("kind"), cap)
    dev = SimDevice(DeviceSpec("sim", "", cap, {**FEMU_SMALL, "ruh": 2}), tmp_path)
    res = dev.replay(plan, tmp_path)
    fdp = res.handles
    assert fdp is not None and fdp.media_bytes is not None
    # byte accounting per handle: the plan's write bytes per handle = the FTL's host bytes per handle
    assert fdp.plan_write_bytes == fdp.host_bytes == tuple(st.write_bytes_by_handle)
    assert sum(fdp.host_bytes) == res.write_bytes == laid.aligned_write_bytes
    assert sum(fdp.media_bytes) == res.nand_write_bytes
    twin = res.no_placement
    assert twin is not None and twin.waf is not None
    assert twin.host_bytes == res.write_bytes
    # GC-heavy without placement; with it the superseded states empty whole lines
    assert twin.waf > 1.3
    assert res.waf is not None and res.waf < 0.9 * twin.waf, (res.waf, twin.waf)
    assert dev.ftl is not None
    assert dev.ftl.handle_counters().media_pages[1] > 0
    dev.ftl.check_invariants()
    # the lifetime oracle separates by death time directly: no worse than no placement here
    plan_l, st_l = assign_placement(laid.table, PlacementConfig("lifetime"), cap)
    dev_l = SimDevice(DeviceSpec("sim", "", cap, {**FEMU_SMALL, "ruh": 4}), tmp_path / "l")
    res_l = dev_l.replay(plan_l, tmp_path / "l")
    assert res_l.handles is not None and res_l.handles.host_bytes == tuple(st_l.write_bytes_by_handle)
    assert res_l.waf is not None and res_l.waf < twin.waf, (res_l.waf, twin.waf)


def test_sim_refuses_a_handle_the_drive_lacks(tmp_path: Path) -> None:
    plan, _ = assign_placement(_plan([("write", 0, 1, "linear", 1)]), PlacementConfig("kind"), 64 * U)
    dev = SimDevice(DeviceSpec("sim", "", 64 * U * 16, {"op_ratio": 0.2}), tmp_path)
    with pytest.raises(InputError, match="field 'placement_handle': handle 1 but the sim drive has 1"):
        dev.replay(plan, tmp_path)


def test_sim_plays_the_twin_only_when_asked(tmp_path: Path) -> None:
    plan, _ = assign_placement(_plan([("write", 0, 4, "full", 1), ("write", 8, 2, "linear", 2)]),
                               PlacementConfig("kind", kind_min_separation=0.0), 64 * U)
    for flag, twin in (("true", True), ("false", False)):
        dev = SimDevice(DeviceSpec("sim", "", 64 * U * 16, {"op_ratio": 0.2, "ruh": 2, "placement_baseline": flag}),
                        tmp_path / flag)
        assert (dev.replay(plan, tmp_path / flag).no_placement is not None) is twin


def test_run_with_kind_placement_reports_both_wafs(tmp_path: Path) -> None:
    cfg = config_from_mapping({
        "name": "p", "model": "kimi-k3", "policies": ["lru", "gandalf:budget=fixed,gamma=0"],
        "workload": {"generator": "multi-round", "params": {"sessions": 6, "turns": 6}, "seed": 3},
        "tiers": {"dram": "2GB", "ssd": "12GB"}, "replay": {"placement": "kind"}})
    out = run(cfg, tmp_path / "r")
    row, gandalf = out.rows
    assert row.placement == "kind" and row.placement_carried
    assert row.waf_no_placement is not None and row.lifetime_days_no_placement is not None
    assert row.waf_measured is not None
    assert row.lifetime_gain_vs_lru == pytest.approx(row.waf_no_placement / row.waf_measured)
    assert gandalf.host_write_gain_vs_lru is not None and gandalf.waf_gain_vs_lru is not None
    assert gandalf.lifetime_gain_vs_lru == pytest.approx(gandalf.host_write_gain_vs_lru * gandalf.waf_gain_vs_lru)
    assert row.plan_write_bytes is not None and gandalf.plan_write_bytes is not None
    assert gandalf.host_write_gain_vs_lru == pytest.approx(row.plan_write_bytes / gandalf.plan_write_bytes)
    assert out.results.to_pylist()[1]["lifetime_gain_vs_lru"] == gandalf.lifetime_gain_vs_lru
    md = (tmp_path / "r" / "report" / "report.md").read_text()
    assert "## Physical placement (FDP reclaim unit handles)" in md
    assert f"| {gandalf.policy} | kind | {gandalf.waf_no_placement:,.3f} |" in md
    assert "Physical placement" in (tmp_path / "r" / "report" / "report.html").read_text()
    plan = PlanRecord.load(tmp_path / "r" / "plan" / "lru" / "plan.json")
    assert plan.placement.mode == "kind"
    assert sum(plan.placement.write_bytes_by_handle) == plan.counts.aligned_write_bytes
    checks = Estimate.load(tmp_path / "r" / "estimate" / "lru" / "crossval.json").checks
    per_handle = [c for c in checks if c.name.startswith("host bytes, handle")]
    assert len(per_handle) == 2 and all(c.passed for c in per_handle)
