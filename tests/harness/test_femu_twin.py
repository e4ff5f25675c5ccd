"""The embedded FTL's FEMU twin against counters a real FEMU recorded on GC-heavy plans.

Each case under fixtures/femu-head-gc/ (its README: FEMU commit, QEMU version, commands) holds the
block_ops plan kvwear replayed on FEMU, the run's config.toml, the device result and FEMU's SMART
log before and after (its vendor bytes: host and GC-relocated pages). The twin is configured from
the recorded config as the run configured it (kvwear.harness.devices.qemu.Femu) and plays the plan
as the guest played it; it must reproduce FEMU's host and GC page counts exactly, so WAF too.
These tests read only the fixtures: no FEMU, no guest.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kvwear.emulator.ftl import Ftl, FtlConfig
from kvwear.harness.devices.qemu import Femu
from kvwear.harness.devices.sim import plan_to_requests
from kvwear.harness.pipeline.config import load_config
from kvwear.harness.pipeline.sizing import device_spec
from kvwear.harness.wear.femu import parse_femu_counters

FIXTURES = Path(__file__).parent / "fixtures" / "femu-head-gc"
CASES = ("lru-52-lines", "gandalf4-52-lines", "lru-60-lines")


def _femu_pages(d: Path) -> tuple[int, int]:
    """FEMU's host and GC-relocated pages over the replay (SMART vendor bytes, after − before)."""
    before = parse_femu_counters((d / "smart-before.bin").read_bytes())
    after = parse_femu_counters((d / "smart-after.bin").read_bytes())
    return after.host_pages - before.host_pages, after.gc_pages - before.gc_pages


@pytest.mark.parametrize("name", CASES)
def test_twin_reproduces_femu_gc_pages(name: str) -> None:
    d = FIXTURES / name
    cfg = load_config(d / "config.toml")
    result = json.loads((d / "result.json").read_text())
    plan = pq.read_table(d / "block_ops.parquet")
    femu_host, femu_gc = _femu_pages(d)
    # the recorded result is FEMU's own count, and the plan's bytes are what FEMU received
    assert result["extra"]["femu_host_pages_delta"] == femu_host
    assert result["extra"]["femu_gc_pages_delta"] == femu_gc
    assert result["write_bytes"] == femu_host * 4096
    assert femu_gc > femu_host                       # GC-heavy: WAF > 2 on every case

    twin = Femu.twin_counters(device_spec(cfg, None), plan, fio_version=result["tool"])
    assert (twin.host_pages, twin.gc_pages) == (femu_host, femu_gc)
    assert twin.waf == pytest.approx((femu_host + femu_gc) / femu_host, rel=1e-12)


def test_trim_case_is_replayed_in_the_guests_order() -> None:
    """The TRIM plan ran with deferred trims (the guest's fio 3.33 drops iolog trims): the twin
    must play each segment's reads and writes, then its trims, as the guest did; in plan order
    its GC count differs from FEMU's."""
    d = FIXTURES / "lru-52-lines-trim"
    result = json.loads((d / "result.json").read_text())
    assert result["extra"]["trim_mode"] == "deferred"
    cfg = load_config(d / "config.toml")
    plan = pq.read_table(d / "block_ops.parquet")
    spec = device_spec(cfg, None)
    femu_host, femu_gc = _femu_pages(d)
    ftl = Ftl(Femu.ftl_config(spec))
    ftl.apply_ops(*plan_to_requests(plan, 4096, Femu.ftl_config(spec).exposed_bytes))
    in_plan_order = ftl.counters()
    assert in_plan_order.host_pages == femu_host
    assert in_plan_order.gc_pages != femu_gc


def test_gc_copy_order_is_femus_block_by_block() -> None:
    """do_gc cleans channel 0's LUNs, then channel 1's, each block page by page; the write pointer
    put offset k on channel k mod 2, LUN (k div 2) mod 2, page k div 4 (2 channels × 2 LUNs)."""
    cfg = FtlConfig.femu(192, pgs_per_blk=256, blks_per_pl=64, luns_per_ch=2, nchs=2)
    order = cfg.gc_copy_order()
    assert sorted(order.tolist()) == list(range(1024))
    assert order[:3].tolist() == [0, 4, 8]           # channel 0, LUN 0: pages 0, 1, 2
    assert order[256:259].tolist() == [2, 6, 10]     # channel 0, LUN 1
    assert order[512:515].tolist() == [1, 5, 9]      # channel 1, LUN 0
    assert order[768:771].tolist() == [3, 7, 11]     # channel 1, LUN 1
    assert np.array_equal(FtlConfig.block_level(1 << 20, 0.1, pages_per_block=64).gc_copy_order(), np.arange(64))
