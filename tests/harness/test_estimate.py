"""Lifetime estimator: TBW, analytical WAF, effective space, cross-validation records."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest

from emulator.ftl import Ftl, FtlConfig
from harness.estimate import (
    HOST_BYTES_REL_TOL,
    LIFETIME_REL_TOL,
    SMART_HOST_BYTES_REL_TOL,
    WAF_REL_TOL,
    analytical_waf,
    cross_validate,
    estimate_lifetime,
    ftl_alpha,
    ftl_predicted_waf,
    host_bytes_per_day,
    projected_lifetime_days,
    tbw_from_dwpd,
    tbw_from_pe_cycles,
    waf_from_counters,
)
from kvwear.errors import KvwearError

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
    cv = cross_validate("femu-fixture", predicted_host_bytes=(h2 - h1) * 4096, trace_duration_s=3600,
                        tbw_bytes=tbw_from_dwpd(cfg.exposed_bytes, 1, 5),
                        measured_host_bytes=(h2 - h1) * 4096, host_source="femu-vendor",
                        predicted_waf=ftl_predicted_waf(cfg), measured_waf=recorded, waf_source="femu-vendor")
    assert cv.waf is not None and cv.waf.passed and cv.waf.rel_error == pytest.approx(1 - recorded / 8)
    assert emulated == pytest.approx(recorded, rel=0.05)
    assert cv.passed


def test_lifetime_arithmetic() -> None:
    per_day = host_bytes_per_day(10**9, 3600)                          # 1 GB in an hour → 24 GB/day
    assert per_day == 24 * 10**9
    tbw = tbw_from_dwpd(10**12, 1, 5)
    est = estimate_lifetime(tbw, 10**9, 3600, waf=2.0, waf_source="analytical")
    assert est.lifetime_days == pytest.approx(tbw / (24e9 * 2))
    assert est.lifetime_years == pytest.approx(est.lifetime_days / 365)
    assert projected_lifetime_days(tbw, 0.0, 1.0) == math.inf
    with pytest.raises(KvwearError):
        host_bytes_per_day(1, 0)


def test_cross_validation_records() -> None:
    tbw = tbw_from_dwpd(10**12, 1, 5)
    ok = cross_validate("lru", predicted_host_bytes=1e9, trace_duration_s=600, tbw_bytes=tbw,
                        measured_host_bytes=1e9 * 1.004, host_source="fio", predicted_waf=2.0,
                        measured_waf=2.1, waf_source="sim")
    assert ok.passed and [c.name for c in ok.checks] == ["host_bytes", "waf", "lifetime_days"]
    assert ok.host_bytes is not None and ok.host_bytes.tolerance == HOST_BYTES_REL_TOL
    assert ok.waf is not None and ok.waf.rel_error == pytest.approx(0.05)
    assert ok.lifetime is not None and ok.lifetime.tolerance == LIFETIME_REL_TOL
    assert ok.lifetime.measured == pytest.approx(ok.lifetime.predicted / (1.004 * 1.05))
    assert ok.lifetime.source == "fio+sim"
    bad = cross_validate("gandalf", predicted_host_bytes=1e9, trace_duration_s=600, tbw_bytes=tbw,
                         predicted_waf=1.0, measured_waf=1.0 + 2 * WAF_REL_TOL, waf_source="femu")
    assert not bad.passed and bad.host_bytes is None and bad.waf is not None and not bad.waf.passed
    smart = cross_validate("x", predicted_host_bytes=1e9, trace_duration_s=1, tbw_bytes=tbw,
                           measured_host_bytes=1.015e9, host_source="nvme-smart")
    assert smart.host_bytes is not None and smart.host_bytes.tolerance == SMART_HOST_BYTES_REL_TOL
    assert smart.host_bytes.passed
    assert cross_validate("none", predicted_host_bytes=1, trace_duration_s=1, tbw_bytes=tbw).checks == ()
    rows = ok.rows()
    assert rows[0]["policy"] == "lru" and set(rows[0]) >= {"predicted", "measured", "rel_error", "passed"}
