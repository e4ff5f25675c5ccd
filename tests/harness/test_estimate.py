"""Lifetime estimator: TBW, analytical WAF, effective space, cross-validation records."""

from __future__ import annotations

import dataclasses
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from kvwear.emulator.ftl import Ftl, FtlConfig
from kvwear.errors import KvwearError
from kvwear.harness.devices.measurement import (
    CaptureCount,
    DeviceMeasurement,
    HostCount,
    MediaCount,
    ReplayResult,
    TrimCount,
    TrimMode,
)
from kvwear.harness.estimate.estimator import (
    DUW_NOTE,
    HOST_BYTES_REL_TOL,
    LIFETIME_REL_TOL,
    SMART_HOST_BYTES_REL_TOL,
    WAF_REL_TOL,
    Check,
    EstimateInputs,
    PlanBytes,
    analytical_waf,
    capture_check,
    counter_check,
    estimate_policy,
    ftl_alpha,
    ftl_predicted_waf,
    host_bytes_per_day,
    projected_lifetime_days,
    tbw_from_dwpd,
    tbw_from_pe_cycles,
    waf_from_counters,
)
from kvwear.harness.wear.base import NVME_DATA_UNIT_BYTES
from kvwear.harness.wear.identify import DeviceIdentity
from kvwear.policies.metrics import SimSummary

FEMU = dict(devsz_mb=192, pgs_per_blk=256, blks_per_pl=64, pls_per_lun=1, luns_per_ch=2, nchs=2,
            gc_thres_pcent=75, gc_thres_pcent_high=95)


def test_tbw_formulas() -> None:
    assert tbw_from_dwpd(10**12, 1.0, 5) == 10**12 * 365 * 5
    assert tbw_from_pe_cycles(10**12, 3000) == 3e15
    assert tbw_from_pe_cycles(10**12, 3000, waf=2.0, wlf=1.5) == pytest.approx(1e15)
    with pytest.raises(KvwearError):
        tbw_from_dwpd(10**12, 0, 5)
    with pytest.raises(KvwearError):
        tbw_from_pe_cycles(10**12, 3000, waf=0.5)


def test_analytical_waf_values() -> None:
    assert analytical_waf(256 / 192) == pytest.approx(2.2007, abs=1e-3)   # DESIGN: nominal 2.2
    assert analytical_waf(2.0) == pytest.approx(1.2550, abs=1e-3)
    values = [analytical_waf(a) for a in (1.05, 1.15, 1.28, 1.5, 2.0, 4.0)]
    assert values == sorted(values, reverse=True) and values[-1] > 1.0
    with pytest.raises(KvwearError, match="α > 1"):
        analytical_waf(1.0)


def test_effective_space_block_and_femu() -> None:
    cfg = FtlConfig.block_level(1 << 30, 0.28, pages_per_block=256)
    assert ftl_alpha(cfg) == pytest.approx(1.28, rel=1e-3)
    nominal = FtlConfig.femu(**FEMU)
    assert nominal.raw_bytes / nominal.exposed_bytes == pytest.approx(256 / 192)
    assert ftl_alpha(nominal) == pytest.approx(47 / 48)             # 64 − 16 reserve − 1 open
    assert ftl_predicted_waf(nominal) == 8.0                          # the 1/8 victim rule caps it
    at90 = FtlConfig.femu(**{**FEMU, "gc_thres_pcent": 90})
    assert ftl_alpha(at90) == pytest.approx(57 / 48)
    assert ftl_predicted_waf(at90) == pytest.approx(3.353, abs=1e-3)  # FEMU measured 3.3


def _femu_pages(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    return struct.unpack_from("<Q", raw, 200)[0], struct.unpack_from("<Q", raw, 208)[0]


def test_femu_prediction_vs_recorded_and_emulated(fixtures_dir: Path) -> None:
    d = fixtures_dir / "femu-bbssd"
    h1, g1 = _femu_pages(d / "smart-log-1.bin")
    h2, g2 = _femu_pages(d / "smart-log-2.bin")
    recorded = waf_from_counters(h2 - h1, g2 - g1)                     # random phase only
    assert recorded == pytest.approx(7.763, abs=1e-3)
    cfg = FtlConfig.femu(**FEMU)
    ftl = Ftl(cfg)
    n = cfg.exposed_pages
    starts = np.arange(0, n, 32)
    ftl.apply_ops(np.zeros(len(starts), np.int8), starts, np.full(len(starts), 32))
    before = ftl.counters()
    ftl.write(np.random.default_rng(4).integers(0, n, 2 * n))
    emulated = ftl.counters().minus(before).waf
    waf = Check.of("WAF", ftl_predicted_waf(cfg), recorded, "femu-vendor", WAF_REL_TOL, kind="model")
    assert waf.passed and waf.rel_error == pytest.approx(1 - recorded / 8)
    assert emulated == pytest.approx(recorded, rel=0.05)


def test_lifetime_arithmetic() -> None:
    per_day = host_bytes_per_day(10**9, 3600)                          # 1 GB in an hour → 24 GB/day
    assert per_day == 24 * 10**9
    tbw = tbw_from_dwpd(10**12, 1, 5)
    assert projected_lifetime_days(tbw, per_day, 2.0) == pytest.approx(tbw / (24e9 * 2))
    with pytest.raises(KvwearError):
        projected_lifetime_days(tbw, per_day, 0.9)
    assert projected_lifetime_days(tbw, 0.0, 1.0) == math.inf
    with pytest.raises(KvwearError):
        host_bytes_per_day(1, 0)


def test_check_records() -> None:
    """The predicted-vs-measured record kvwear run writes for every check (pipeline.run.estimate_stage)."""
    host = Check.of("host bytes", 1e9, 1e9 * 1.004, "fio", HOST_BYTES_REL_TOL, kind="accounting")
    assert host.passed and host.rel_error == pytest.approx(0.004)
    assert not Check.of("host bytes", 1e9, 1e9 * 1.015, "fio", HOST_BYTES_REL_TOL, kind="accounting").passed
    assert Check.of("host bytes", 1e9, 1e9 * 1.015, "smart", SMART_HOST_BYTES_REL_TOL, kind="accounting").passed
    waf = Check.of("WAF", 2.0, 2.1, "sim", WAF_REL_TOL, kind="model")
    assert waf.passed and waf.rel_error == pytest.approx(0.05)
    assert not Check.of("WAF", 1.0, 1.0 + 2 * WAF_REL_TOL, "femu", WAF_REL_TOL, kind="model").passed
    life = Check.of("lifetime days", 100.0, 100.0 / (1.004 * 1.05), "fio", LIFETIME_REL_TOL, kind="model")
    assert life.passed and LIFETIME_REL_TOL == HOST_BYTES_REL_TOL + WAF_REL_TOL
    # Nothing written: zero against zero passes, zero against bytes cannot; infinite lifetimes agree.
    assert Check.of("host bytes", 0, 0, "fio", 0.0, kind="accounting").passed
    nothing = Check.of("host bytes", 0, 4096, "fio", 0.5, kind="accounting")
    assert not nothing.passed and math.isinf(nothing.rel_error)
    assert Check.of("lifetime days", math.inf, math.inf, "x", 0.0, kind="model").passed


def test_pe_cycles_per_day_and_rated_lifetime() -> None:
    from kvwear.harness.estimate.estimator import TLC_PE_CYCLES, pe_cycles_per_day, pe_lifetime_days

    # 1 TB of host writes a day at WAF 2 on 2 TB of raw NAND: one full-drive program a day
    assert pe_cycles_per_day(1e12, 2.0, 2e12) == 1.0
    assert pe_lifetime_days(TLC_PE_CYCLES, 1.0) == 3000.0
    assert pe_lifetime_days(3000, 0.0) == math.inf
    with pytest.raises(KvwearError, match="raw capacity"):
        pe_cycles_per_day(1e12, 2.0, 0)


def test_a_drives_own_host_counts_are_checked_against_the_plan() -> None:
    """A drive's own counter of the host bytes is one more point of the byte accounting, checked by
    its unit, whoever counted (numbers of the FEMU HEAD run in tests/harness/fixtures/femu-head-fdp):
    a page counter within the host-bytes tolerance, NVMe Data Units Written within its rounding."""
    plan = 502_530_048
    ok = counter_check(plan, HostCount("femu smart-vendor-bytes", plan, unit_bytes=4096))
    assert ok.passed and ok.source == "femu smart-vendor-bytes" and ok.kind == "accounting" and ok.note == ""
    assert not counter_check(plan, HostCount("femu smart-vendor-bytes", plan - 8 * 2**20, unit_bytes=4096)).passed
    units = -(-plan // NVME_DATA_UNIT_BYTES)                     # the counter rounds up
    duw = counter_check(plan, HostCount("smart-duw (guest)", units * NVME_DATA_UNIT_BYTES, NVME_DATA_UNIT_BYTES))
    assert duw.passed and duw.note == DUW_NOTE
    off = counter_check(plan, HostCount("smart-duw (guest)", (units + 40) * NVME_DATA_UNIT_BYTES,
                                        NVME_DATA_UNIT_BYTES))
    assert not off.passed


def test_a_drive_that_received_nothing_lasts_for_ever() -> None:
    """A policy that wrote nothing (the oracle without a write budget, Gandalf at a large γ): the
    drive measures no WAF (no host byte to divide by), and its measured lifetime is unbounded, not
    missing (sweep figures pick the measured lifetime)."""
    summary = SimSummary(**{f.name: 0 for f in dataclasses.fields(SimSummary)} | {"label": "belady"})
    replay = ReplayResult("sim", "kvwear-ftl", 0, 0, 0, 0, 0, 0.0, TrimCount(TrimMode.NONE, 0),
                          media=MediaCount("kvwear-ftl", 0, 0))
    est = estimate_policy(EstimateInputs(
        label="belady", model="kimi-k3", device_kind="sim", dram_bytes=1, ssd_bytes=1, sample_fraction=1.0,
        summary=summary, plan=PlanBytes(0, 0, 0, "none", (0,)),
        device=DeviceMeasurement(replay, DeviceIdentity("sim", "")),
        tbw_bytes=1e15, duration_s=3600.0, waf_uniform=2.0, waf_uniform_source="-", prediction=None,
        waf_emulator=None, preconditioned=False, layout="extent", raw_nand_bytes=1e12, pe_rating_cycles=3000))
    assert est.row.waf_measured is None and est.row.lifetime_days_measured == math.inf
    assert all(c.passed for c in est.checks if c.kind == "accounting")


def _capture(tracer: str, write_bytes: int, lost: int = 0, drained: bool = True) -> CaptureCount:
    return CaptureCount(tracer, 10, lost, {"write": write_bytes}, {"write": 10}, 0, 0, drained, "trace.parquet")


def test_a_capture_that_lost_events_or_was_not_drained_fails_its_byte_check() -> None:
    exact = capture_check("host bytes", 1_000_000, 1_000_000, _capture("bcc", 1_000_000))
    assert exact.passed and not exact.note
    # within the 1 % tolerance, but events were lost: the counts are incomplete, the check fails
    c = capture_check("host bytes", 1_000_000, 999_000, _capture("bpftrace", 999_000, lost=3))
    assert not c.passed and c.rel_error <= c.tolerance and c.kind == "accounting"
    assert "lost up to 3 events" in c.note and c.source == "ebpf:bpftrace"
    undrained = capture_check("trim bytes", 1_000_000, 1_000_000, _capture("bpftrace", 1_000_000, drained=False))
    assert not undrained.passed and "flush barrier" in undrained.note


def test_per_handle_bytes_are_checked_against_the_plan_record() -> None:
    """Each handle's host bytes at the drive are checked against the plan record's bytes for that
    handle, not only against what the player says it read from the plan: a player that misread the
    plan (and wrote what it misread) fails both checks."""
    from kvwear.harness.devices.measurement import HandleCount, ReplayResult, TrimCount, TrimMode
    from kvwear.harness.estimate.estimator import PlanBytes, placement_result

    plan = PlanBytes(object_write_bytes=12, aligned_write_bytes=12, trim_bytes=0, placement="kind",
                     write_bytes_by_handle=(8, 4))
    ident = DeviceIdentity("sim", "")

    def checks(read: tuple[int, ...], host: tuple[int, ...]) -> list[tuple[str, bool]]:
        replay = ReplayResult("sim", "kvwear-ftl", sum(host), 0, 0, 2, 0, 0.1, TrimCount(TrimMode.NONE, 0),
                              handles=HandleCount("kvwear-ftl", read, host, host, 0))
        return [(c.name, c.passed) for c in placement_result(plan, DeviceMeasurement(replay, ident), 1.0)[1]]

    assert checks((8, 4), (8, 4)) == [("host bytes, handle 0", True), ("host bytes, handle 1", True)]
    assert checks((8, 5), (8, 5)) == [("host bytes, handle 0", True), ("host bytes, handle 1", False),
                                      ("plan bytes read, handle 1", False)]
