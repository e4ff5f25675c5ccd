"""The run's plan and device stages stream (issue #16) with the in-memory path's results: the
planner's chunks make the whole plan, the death summary fed in batches is the one of the whole
plan, the sim device's replay of the block_ops Parquet in batches counts what the whole table's
replay counts, and a run writes the block_ops and plan.json the in-memory stages wrote."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear.emulator.ftl import OP_WRITE
from kvwear.errors import KvwearError
from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.sim import SimDevice, plan_to_requests
from kvwear.harness.estimate.estimator import PlanRecord
from kvwear.harness.estimate.waf_model import DeathCounter, death_summary
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.run import replay_config, run
from kvwear.harness.plan.placement import PlacementConfig, assign_placement
from kvwear.harness.plan.planner import ReplayConfig, plan_block_ops, stream_block_ops
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.policies.schema import SSD_OPS
from kvwear.tables import read_table, write_table

U = 4096


def test_sim_streams_a_plan_file_in_batches_with_the_table_replay_s_result(tmp_path: Path) -> None:
    """FTL counters, intervals, FDP bytes per handle and the no-placement twin, batch by batch."""
    rng = np.random.default_rng(5)
    n, pages = 150_000, 4096                    # > two 65,536-row batches; a 16 MiB drive
    op = np.where(rng.random(n) < 0.85, 0, np.where(rng.random(n) < 0.5, 1, 2)).astype(np.int8)
    first = rng.integers(0, pages - 4, n)
    npg = rng.integers(1, 4, n)
    plan = BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(n, dtype=np.float64),
        "op": pa.DictionaryArray.from_arrays(pa.array(op), pa.array(["write", "read", "trim"])),
        "offset_bytes": first * U, "length_bytes": npg * U,
        "obj_kind": pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 2, n).astype(np.int8)),
                                                   pa.array(["full", "linear"])),
        "obj_id": np.arange(n, dtype=np.int64),
        "placement_handle": pa.array(np.where(op == 0, rng.integers(0, 2, n), 0).astype(np.int8)),
    }))
    path = write_table(BLOCK_OPS, plan, tmp_path / "block_ops.parquet")
    spec = DeviceSpec("sim", "", pages * U, {"op_ratio": 0.2, "ruh": 2})
    ticks: list[tuple[int, int]] = []
    streamed = SimDevice(spec, tmp_path / "a").replay(path, tmp_path / "a", progress=lambda d, t: ticks.append((d, t)))
    whole = SimDevice(spec, tmp_path / "b").replay(plan, tmp_path / "b")
    assert len(ticks) >= 3 and ticks[-1] == (n, n)                  # batch by batch
    a, b = dataclasses.asdict(streamed), dataclasses.asdict(whole)
    for r in (a, b):
        for k in ("wall_s", "tool_output_path", "intervals_path"):
            r.pop(k)
    assert a == b
    assert streamed.details["counters"]["gc_pages"] > 0              # the drive collected garbage
    assert streamed.no_placement is not None and streamed.no_placement.host_bytes > 0
    assert streamed.handles is not None and len(streamed.handles.host_bytes) == 2


def _ssd_ops(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    op = rng.choice(np.array([0, 0, 1, 2], np.int8), n)
    return SSD_OPS.conform(pa.table({
        "t_s": np.sort(rng.random(n)) * 100, "op": pa.DictionaryArray.from_arrays(pa.array(op), pa.array(
            ["write", "read", "evict"])),
        "obj_id": rng.integers(0, 300, n), "obj_kind": pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 2, n).astype(np.int8)), pa.array(["full", "linear"])),
        "bytes": rng.choice(np.array([5000, 3 * U, 9 * U + 1, 40 * U]), n), "session_id": pa.nulls(n, pa.string()),
        "cause": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["evict"]))}))


@pytest.mark.parametrize("layout", ["extent", "log", "slab"])
def test_the_planner_s_chunks_make_the_whole_plan(layout: str) -> None:
    ops = _ssd_ops(4000, 1)
    rc = ReplayConfig(capacity_bytes=16_000 * U, layout=layout, max_io_bytes=8 * U)  # type: ignore[arg-type]
    whole = plan_block_ops(ops, rc)
    chunks: list[pa.Table] = []
    counts = stream_block_ops(ops, rc, chunks.append, chunk_extents=97)
    assert len(chunks) > 10
    assert pa.concat_tables(chunks).equals(whole.table)
    assert counts.accounting() == whole.accounting() and whole.write_ios > 1000


def test_the_death_summary_fed_in_batches_is_the_whole_plan_s() -> None:
    rng = np.random.default_rng(3)
    pages = 2048
    ops = rng.choice(np.array([0, 0, 0, 1, 2], np.int8), 30_000)
    first = rng.integers(0, pages - 8, len(ops))
    n = rng.integers(1, 8, len(ops))
    acc = DeathCounter(int(n[ops == OP_WRITE].sum()), pages)
    for part in np.array_split(np.arange(len(ops)), 7):
        acc.feed(ops[part], first[part], n[part])
    assert acc.summary() == death_summary(ops, first, n, pages)


def test_a_run_writes_the_in_memory_stages_block_ops_and_death_summary(tmp_path: Path) -> None:
    cfg = config_from_mapping({
        "name": "s", "model": "kimi-k3", "policies": ["lru"], "tiers": {"dram": "2GB", "ssd": "12GB"},
        "workload": {"generator": "multi-round", "params": {"sessions": 6, "turns": 6}, "seed": 3}})
    out = run(cfg, tmp_path / "r", report=False)
    r = out.run_dir
    cap = json.loads((r / "manifest.json").read_text())["devices"]["capacity_bytes"]
    whole = plan_block_ops(read_table(SSD_OPS, r / "policies/lru/ssd_ops.parquet"), replay_config(cfg, cap))
    table, _ = assign_placement(whole.table, PlacementConfig("none"), cap)
    got = read_table(BLOCK_OPS, r / "plan/lru/block_ops.parquet")
    assert got.num_rows > 100 and got.equals(BLOCK_OPS.conform(table))
    acc = PlanRecord.load(r / "plan/lru/plan.json")
    ref = death_summary(*plan_to_requests(table, 4096, cap), -(-cap // 4096))
    assert acc.death_summary == ref and ref.host_pages > 0
    assert acc.counts.write_ios == whole.write_ios
    assert acc.placement.write_bytes_by_handle == (whole.aligned_write_bytes,)


def test_the_death_counter_holds_lines_with_a_live_page_only() -> None:
    """A plan ~500× the device (some pages trimmed): the line table holds the lines that still have
    a live page and a dead one, at most one per live page and line size, never one entry per line
    of the plan (16,000 lines of 64 pages alone here) — and the summary is the one-batch one."""
    rng = np.random.default_rng(9)
    pages = 2048
    n = 40_000
    ops = rng.choice(np.array([0, 0, 0, 0, 2], np.int8), n)
    first = rng.integers(0, pages // 64, n) * 64 + rng.integers(0, 8, n)
    npg = np.minimum(rng.integers(1, 64, n), pages - first)
    total = int(npg[ops == OP_WRITE].sum())
    assert total // 64 > 15_000
    acc = DeathCounter(total, pages)
    for part in np.array_split(np.arange(n), 50):
        acc.feed(ops[part], first[part], npg[part])
        assert int(acc.lines_n[0]) <= pages * len(acc.sizes) < total // 64
    assert acc.summary() == death_summary(ops, first, npg, pages)


def test_the_death_counter_times_pages_past_two_to_the_32() -> None:
    """A plan past 2³² − 2 written pages keeps each page's host time in 40 bits (uint32 + uint8):
    the same requests fed at host time 2³² − 300 (crossing the boundary) and at 0 die at the same
    distances; a plan past 2⁴⁰ pages is refused."""
    rng = np.random.default_rng(4)
    pages = 1024
    ops = rng.choice(np.array([0, 0, 0, 2], np.int8), 3000)
    first = rng.integers(0, pages - 4, ops.size)
    n = rng.integers(1, 4, ops.size)
    total = (1 << 32) + 10_000
    late, early = DeathCounter(total, pages), DeathCounter(total, pages)
    assert late.last_hi.size == pages                   # the fifth byte is kept for such a plan
    late.now = (1 << 32) - 300
    late.feed(ops, first, n)
    early.feed(ops, first, n)
    assert late.now - ((1 << 32) - 300) == early.now > 300
    assert np.array_equal(late.hist, early.hist) and late.hist.sum() > 1000
    assert np.array_equal(late.counts, early.counts)
    assert DeathCounter(5000, pages).last_hi.size == 0  # 4 B a page below 2³² pages
    with pytest.raises(KvwearError, match="exceeds"):
        DeathCounter(1 << 40, pages)
