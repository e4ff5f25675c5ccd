"""Drive presets: the registry, FEMU's default geometry reproduced exactly, the historical default
kept, and scaling that keeps the reclaim unit and the OP and uses fewer units."""

from __future__ import annotations

import math

import pytest

from kvwear.emulator.ftl import FtlConfig
from kvwear.emulator.presets import FEW_UNITS, PRESETS, FtlOptions, preset
from kvwear.errors import KvwearError, UnknownNameError

GB = 10**9


def test_registry_holds_the_four_presets_and_names_them_on_a_typo() -> None:
    assert {"femu", "enterprise-tlc", "qlc", "tiny-blocks"} <= set(PRESETS.names())
    with pytest.raises(UnknownNameError, match="enterprise-tlc"):
        preset("enterprise-mlc")


@pytest.mark.parametrize("cap", [64 * 2**20, 3 * 10**9 + 4096, 268_800_000_000])
def test_tiny_blocks_is_the_historical_default_geometry(cap: int) -> None:
    assert preset("tiny-blocks").ftl_config(cap) == FtlConfig.block_level(cap, 0.07)


def test_femu_preset_at_its_own_size_is_femus_default_device() -> None:
    # FEMU's -device femu defaults with run-blackbox.sh's devsz_mb=12288: 256 lines of 64 blocks
    p = preset("femu")
    assert p.capacity_bytes is not None
    assert p.ftl_config(p.capacity_bytes) == FtlConfig.femu(12288)
    s = p.scale(p.capacity_bytes)
    assert (s.units, s.full_units, s.unit_bytes) == (256, 256, 64 * 2**20)


@pytest.mark.parametrize("name", ["enterprise-tlc", "qlc", "femu"])
@pytest.mark.parametrize("cap", [200 * GB, 268_800_000_000, 1_000 * GB])
def test_scaling_keeps_the_unit_and_the_op_and_uses_fewer_units(name: str, cap: int) -> None:
    p = preset(name)
    cfg = p.ftl_config(cap)
    s = p.scale(cap)
    assert cfg.pages_per_line == p.unit_pages and s.unit_bytes == p.unit_bytes
    assert cfg.exposed_bytes >= cap
    # data units: exactly enough for exposed × (1 + OP), rounded up to a whole unit
    assert s.data_units == math.ceil(cfg.exposed_pages * (1 + p.op_ratio) / p.unit_pages - 1e-9)
    assert p.op_ratio <= s.op_effective < p.op_ratio + p.unit_bytes / cap + 1e-9
    assert p.capacity_bytes is not None and s.full_units is not None
    assert (s.units < s.full_units) == (cap < p.capacity_bytes)        # femu's drive is 12 GiB
    assert s.units == cfg.lines


def test_enterprise_tlc_at_full_size_has_the_drives_unit_count_and_rating() -> None:
    p = preset("enterprise-tlc")
    assert p.capacity_bytes == 3_840_000_000_000
    s = p.scale(p.capacity_bytes)
    assert s.units == s.full_units
    assert p.unit_bytes == 13_079_937_024                      # the PM9D3a's reclaim unit nominal size
    r = p.ratings
    assert r is not None and r.tbw_bytes_per_capacity_byte is not None
    assert p.capacity_bytes * r.tbw_bytes_per_capacity_byte == pytest.approx(7_008e12)   # 7,008 TBW
    q = preset("qlc")
    assert q.unit_bytes == p.unit_bytes * 4 // 3 and q.ratings is not None
    assert q.ratings.rated_pe_cycles is not None and r.rated_pe_cycles is not None
    assert q.ratings.rated_pe_cycles < r.rated_pe_cycles


def test_a_drive_smaller_than_a_few_units_says_so() -> None:
    s = preset("enterprise-tlc").scale(50 * GB)
    assert s.data_units < FEW_UNITS and "fewer than" in s.note and s.op_effective > 0.25
    assert "fewer than" not in preset("enterprise-tlc").scale(268_800_000_000).note


def test_run_options_change_the_drive_not_the_preset() -> None:
    p = preset("enterprise-tlc")
    more_op = p.ftl_config(268_800_000_000, FtlOptions(op_ratio=0.28))
    assert more_op.lines > p.ftl_config(268_800_000_000).lines
    assert p.ftl_config(268_800_000_000, FtlOptions(ruh=4)).ruh == 4
    with pytest.raises(KvwearError, match="exposed capacity"):
        p.ftl_config(0)
