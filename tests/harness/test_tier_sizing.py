"""Tiers sized to the device (kvwear.harness.pipeline.sizing.size_tiers): a device of fixed size gives the SSD tier its
usable capacity when none is configured, refuses a tier that does not fit naming the flags that fix
it, and with `device.fit` scales the workload instead — on the shared Weka traces the scaled run
keeps the full-size run's miss ratio and linear write share within the tolerances below."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from kvwear.errors import KvwearError
from kvwear.harness.pipeline.config import DEFAULT_SSD_BYTES, config_from_mapping
from kvwear.harness.pipeline.run import run, sim_config
from kvwear.harness.pipeline.sizing import CAPACITY_HEADROOM, device_capacity, size_tiers
from kvwear.workloads.models import resolve_profile

GEO = {"geometry": "femu", "pgs_per_blk": 256, "blks_per_pl": 64, "luns_per_ch": 2, "nchs": 2}
# Absolute tolerances for a session-sampled run against the full-size one, median over 5 seeds:
# the Weka sample has 6 sessions, so one seed's draw of ~3 moves the miss ratio by up to ±0.06.
MISS_RATIO_TOL = 0.03
LINEAR_SHARE_TOL = 0.03


def fixed_device(devsz_mb: int, **extra: object) -> dict:
    lines = max(64, -(-devsz_mb * 4 // 3 // 4))        # 4 MiB lines, a quarter of the NAND spare
    return {"device": {"kind": "sim", "options": {**GEO, "blks_per_pl": lines, "devsz_mb": devsz_mb}, **extra}}


def test_no_ssd_tier_takes_the_device_capacity() -> None:
    cfg, sizing = size_tiers(config_from_mapping(fixed_device(192)))
    assert cfg.tiers.ssd_bytes == int((192 << 20) / CAPACITY_HEADROOM) == sizing.ssd_bytes
    assert sizing.source == "device" and sizing.device_bytes == 192 << 20
    assert device_capacity(cfg) == 192 << 20
    assert "usable 201.33 MB ÷ 1.05" in sizing.note
    # a quarter of the sessions: the full-size tier is four times what the device holds
    cfg, sizing = size_tiers(config_from_mapping({**fixed_device(192), "workload": {"sample_fraction": 0.25}}))
    assert cfg.tiers.ssd_bytes == int(int((192 << 20) / CAPACITY_HEADROOM) / 0.25)
    # no fixed device: the default tier, the device sized from it
    cfg, sizing = size_tiers(config_from_mapping({}))
    assert cfg.tiers.ssd_bytes == DEFAULT_SSD_BYTES and sizing.source == "default" and sizing.device_bytes is None


def test_ssd_tier_larger_than_the_device_names_the_flags() -> None:
    with pytest.raises(KvwearError, match=r"--ssd 1.00 GB does not fit .*needs 1,050,000,000 bytes .*the device "
                                          r"has 201,326,592; give --ssd 191MB or less, leave --ssd out .* "
                                          r"--fit-device"):
        size_tiers(config_from_mapping({**fixed_device(192), "tiers": {"ssd": "1GB"}}))
    cfg, sizing = size_tiers(config_from_mapping({**fixed_device(192), "tiers": {"ssd": "100MB"}}))
    assert sizing.source == "config" and cfg.tiers.ssd_bytes == 10**8
    with pytest.raises(KvwearError, match=r"--capacity 300000000 bytes is larger"):
        size_tiers(config_from_mapping({**fixed_device(192, capacity="300MB"), "tiers": {"ssd": "100MB"}}))


def test_fit_device_scales_both_tiers_by_one_factor() -> None:
    base = {**fixed_device(192, fit=True), "tiers": {"ssd": "1TB", "dram": "100GB"}}
    cfg, sizing = size_tiers(config_from_mapping(base))
    f = cfg.workload.sample_fraction
    assert sizing.source == "fit" and f == pytest.approx((192 << 20) / CAPACITY_HEADROOM / 10**12)
    sc = sim_config(cfg, resolve_profile(cfg.model))
    assert sc.ssd_bytes == int(10**12 * f) and sc.dram_bytes == int(100 * 10**9 * f)
    assert sc.ssd_bytes * CAPACITY_HEADROOM <= device_capacity(cfg) == 192 << 20
    assert "--fit-device" in sizing.note and "sample fraction" in sizing.note


def test_fit_device_preserves_miss_ratio_and_write_shares_on_weka(weka_dir: Path, tmp_path: Path) -> None:
    """Full size: DRAM 2 GB + SSD 20 GB. Fit: the same tiers on a device that holds half the SSD tier."""
    tiers = {"dram": "2GB", "ssd": "20GB"}
    common = {"policies": ["lru"], "workload": {"trace": str(weka_dir)}, "tiers": tiers}
    full = run(config_from_mapping(common), tmp_path / "full", replay=False, report=False).results.to_pylist()[0]
    devsz_mb = int(20e9 * 0.5 * CAPACITY_HEADROOM) >> 20
    rows = []
    for seed in range(1, 6):
        c = {**common, **fixed_device(devsz_mb, fit=True), "workload": {"trace": str(weka_dir), "seed": seed}}
        out = run(config_from_mapping(c), tmp_path / f"fit{seed}", replay=False, report=False)
        assert out.tiers is not None and out.tiers.source == "fit"
        assert out.tiers.sample_fraction == pytest.approx(0.5, rel=0.01)
        rows.append(out.results.to_pylist()[0])
    miss = statistics.median(r["miss_ratio_tokens"] for r in rows)
    share = statistics.median(r["linear_share_of_ssd_write_bytes"] for r in rows)
    assert abs(miss - full["miss_ratio_tokens"]) <= MISS_RATIO_TOL, (miss, full["miss_ratio_tokens"])
    assert abs(share - full["linear_share_of_ssd_write_bytes"]) <= LINEAR_SHARE_TOL, (
        share, full["linear_share_of_ssd_write_bytes"])


def test_a_file_layout_keeps_the_file_systems_share_of_the_device_back() -> None:
    """With the fs layout the objects live in a file system on the device: a tier sized from the
    device leaves FS_RESERVE of it to the file system (the docs' 512 MiB ext4 example filled the
    file system at the rounding headroom alone), and a configured tier is checked against the same."""
    from kvwear.harness.pipeline.sizing import FS_RESERVE

    fs = {**fixed_device(192), "replay": {"layout": "fs"}}
    cfg, sizing = size_tiers(config_from_mapping(fs))
    assert cfg.tiers.ssd_bytes == int((192 << 20) / (CAPACITY_HEADROOM / (1 - FS_RESERVE)))
    assert "for the file system's own space" in sizing.note
    raw, _ = size_tiers(config_from_mapping(fixed_device(192)))
    assert cfg.tiers.ssd_bytes < raw.tiers.ssd_bytes * (1 - FS_RESERVE) + 1
    # 180 MB fits the raw device but not the file system's share of it
    size_tiers(config_from_mapping({**fixed_device(192), "tiers": {"ssd": "180MB"}}))
    with pytest.raises(KvwearError, match=r"--ssd 180.00 MB does not fit .*for the file system's own space"):
        size_tiers(config_from_mapping({**fs, "tiers": {"ssd": "180MB"}}))
