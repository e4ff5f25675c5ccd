"""OCP C0h, Intel/Solidigm CAh and FDP statistics parsers, and the decoding of a tool's refusal.

The OCP refusals are the recorded ones (fixtures/*/ocp_c0.txt); the FDP logs are also recorded on
QEMU 10's FDP drive (tests/harness/fixtures/qemu-10-fdp); for the logs no device here has, inputs
are built byte by byte from the documented layouts (nvme-cli's structs, NVMe/OCP specs)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kvwear.errors import InputError
from kvwear.harness.devices.directive_plan import parse_report
from kvwear.harness.wear._decode import LogUnsupported, describe_nvme_status, parse_nvme_refusal
from kvwear.harness.wear.fdp import (
    FdpConfiguration,
    FdpStats,
    RuhStatus,
    parse_fdp_configs_binary,
    parse_fdp_stats_binary,
    parse_fdp_stats_json,
    parse_ruh_status_binary,
)
from kvwear.harness.wear.identify import parse_id_ctrl_json
from kvwear.harness.wear.intel import (
    INTEL_CA_UNIT_BYTES,
    IntelCaLog,
    parse_intel_ca_binary,
    parse_intel_ca_json,
)
from kvwear.harness.wear.ocp import OCP_C0_GUID, OcpC0Log, parse_ocp_c0_binary, parse_ocp_c0_json

# --- OCP C0h ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dev", "status", "reason"),
    [("femu-bbssd", 0x4109, "Invalid Log Page"), ("qemu-7.2-nvme", 0x4002, "Invalid Field in Command")],
)
def test_recorded_ocp_refusal_is_not_supported(fixtures_dir: Path, dev: str, status: int, reason: str) -> None:
    path = fixtures_dir / dev / "ocp_c0.txt"
    for parse in (parse_nvme_refusal, parse_ocp_c0_json):
        r = parse(path.read_text(), str(path))
        assert isinstance(r, LogUnsupported)
        assert (r.status, r.reason, r.not_supported) == (status, reason, True)
        assert "Failure reading the C0 Log Page" in r.message and "rc=" not in r.message
        assert r.source == str(path)


def test_nvme_status_decoding() -> None:
    assert describe_nvme_status(0x4109) == ("Invalid Log Page", True)
    assert describe_nvme_status(0x0001) == ("Invalid Command Opcode", True)
    name, unsupported = describe_nvme_status(0x0286)      # SCT 2 (media error), SC 0x86
    assert not unsupported and "SCT 2" in name
    r = parse_nvme_refusal("NVMe status: Access Denied: ...(0x286)\n", "x")
    assert r.status == 0x286 and not r.not_supported
    r = parse_nvme_refusal("ERROR : OCP : Unknown GUID in C0 Log Page data\n...ret = -1", "x")
    assert r.not_supported and "GUID" in r.reason
    with pytest.raises(InputError, match="empty refusal"):
        parse_nvme_refusal("rc=1\n", "x")


def _c0_page(pmuw: int, pmur: int, guid: bytes = OCP_C0_GUID, version: int = 4) -> bytes:
    page = bytearray(512)
    page[0:16] = pmuw.to_bytes(16, "little")
    page[16:32] = pmur.to_bytes(16, "little")
    page[494:496] = version.to_bytes(2, "little")
    page[496:512] = guid
    return bytes(page)


def test_ocp_c0_binary() -> None:
    big = (3 << 64) + 12_345          # beyond 64 bits: the counter is 128-bit
    log = parse_ocp_c0_binary(_c0_page(big, 7))
    assert log == OcpC0Log(physical_media_bytes_written=big, physical_media_bytes_read=7, log_page_version=4)
    other = parse_ocp_c0_binary(_c0_page(1, 1, guid=bytes(range(16))))
    assert isinstance(other, LogUnsupported) and "GUID" in other.reason
    with pytest.raises(InputError, match="expected 512 bytes, got 500"):
        parse_ocp_c0_binary(_c0_page(1, 1)[:500], "c0.bin")


def test_ocp_c0_json() -> None:
    doc = {"Physical media units written": {"hi": 1, "lo": 42}, "Physical media units read": {"hi": 0, "lo": 9},
           "Bad user nand blocks - Raw": 0}
    log = parse_ocp_c0_json(json.dumps(doc))
    assert log == OcpC0Log((1 << 64) + 42, 9)
    doc["Physical media units written"] = {"lo": 42}
    with pytest.raises(InputError, match=r"'Physical media units written'.*hi"):
        parse_ocp_c0_json(json.dumps(doc), "c0.json")
    with pytest.raises(InputError, match=r"c0\.json:1: not valid JSON"):
        parse_ocp_c0_json('{"Physical media units written": {"hi": 0,', "c0.json")


# --- Intel / Solidigm CAh --------------------------------------------------------------------

# nvme-cli's struct order; F4h (NAND bytes written) is the 12th item, F5h (host) the 13th.
_CA_KEYS = [0xAB, 0xAC, 0xAD, 0xB8, 0xC7, 0xE2, 0xE3, 0xE4, 0xEA, 0xF0, 0xF3, 0xF4, 0xF5, 0xF6,
            0xF7, 0x05, 0x0D, 0xAE, 0xF8, 0xF9]


def _ca_item(key: int, norm: int, raw: int) -> bytes:
    return struct.pack("<B2xBx6sx", key, norm, raw.to_bytes(6, "little"))


def _ca_log(values: dict[int, int], keys: list[int] = _CA_KEYS) -> bytes:
    return b"".join(_ca_item(k, 100, values.get(k, 0)) for k in keys)


def test_intel_ca_binary() -> None:
    data = _ca_log({0xF4: 0x0000_1234_5678, 0xF5: 777})
    assert len(data) == 240
    log = parse_intel_ca_binary(data)
    assert log == IntelCaLog(0x1234_5678, 777, 100, 100)
    assert log.nand_bytes() == 0x1234_5678 * INTEL_CA_UNIT_BYTES
    # Found by key, not position: a model that orders the items differently still parses.
    shuffled = _ca_log({0xF4: 5, 0xF5: 3}, list(reversed(_CA_KEYS)))
    assert parse_intel_ca_binary(shuffled).nand_bytes_written_raw == 5
    with pytest.raises(InputError, match="not a positive multiple of 12"):
        parse_intel_ca_binary(data[:-1], "ca.bin")
    with pytest.raises(InputError, match="no item with key 0xf4"):
        parse_intel_ca_binary(_ca_log({}, [0xAB, 0xAC]), "ca.bin")


def test_intel_ca_json() -> None:
    doc = {"Intel Smart log": "nvme0", "Device stats": {
        "program_fail_count": {"normalized": 100, "raw": 0},
        "nand_bytes_written": {"normalized": 100, "raw": 5230},
        "host_bytes_written": {"normalized": 100, "raw": 4100}}}
    log = parse_intel_ca_json(json.dumps(doc))
    assert (log.nand_bytes_written_raw, log.host_bytes_written_raw) == (5230, 4100)
    assert log.host_bytes(4096) == 4100 * 4096
    del doc["Device stats"]["nand_bytes_written"]  # type: ignore[attr-defined]
    with pytest.raises(InputError, match="'nand_bytes_written'"):
        parse_intel_ca_json(json.dumps(doc), "ca.json")


# --- FDP statistics ---------------------------------------------------------------------------


def test_fdp_stats_binary_and_json() -> None:
    hbmw, mbmw, mbe = 10 * 2**30, (1 << 70) + 5, 3 * 2**30
    page = hbmw.to_bytes(16, "little") + mbmw.to_bytes(16, "little") + mbe.to_bytes(16, "little") + bytes(16)
    stats = parse_fdp_stats_binary(page)
    assert stats == FdpStats(hbmw, mbmw, mbe)
    # nvme-cli prints the 128-bit values as strings.
    assert parse_fdp_stats_json(json.dumps({"hbmw": str(hbmw), "mbmw": str(mbmw), "mbe": mbe})) == stats
    assert FdpStats(100, 250, 0).waf == 2.5 and FdpStats(0, 0, 0).waf is None
    with pytest.raises(InputError, match="expected 64 bytes, got 48 \\(truncated\\)"):
        parse_fdp_stats_binary(page[:48], "fdp.bin")
    with pytest.raises(InputError, match="field 'mbe': missing"):
        parse_fdp_stats_json('{"hbmw": "1", "mbmw": "2"}', "fdp.json")


def test_ruh_status_binary_layout() -> None:
    # NVMe 2.1 Reclaim Unit Handle Status: 14 reserved bytes, NRUHSD (u16), then 32-byte
    # descriptors: PID u16, RUHID u16, EARUTR u32, RUAMW u64, 16 reserved bytes.
    def desc(pid: int, ruhid: int, earutr: int, ruamw: int) -> bytes:
        return (pid.to_bytes(2, "little") + ruhid.to_bytes(2, "little") + earutr.to_bytes(4, "little")
                + ruamw.to_bytes(8, "little") + bytes(16))

    page = bytes(14) + (2).to_bytes(2, "little") + desc(0, 0, 0, 196_608) + desc(1, 5, 7, (1 << 40) + 3)
    assert parse_ruh_status_binary(page) == (RuhStatus(0, 0, 0, 196_608), RuhStatus(1, 5, 7, (1 << 40) + 3))
    assert parse_ruh_status_binary(bytes(16)) == ()
    with pytest.raises(InputError, match=r"2 descriptors.*expected 80 bytes, got 79"):
        parse_ruh_status_binary(page[:-1], "ruhs.bin")


# --- FDP, recorded on QEMU 10 (tests/harness/fixtures/qemu-10-fdp/README.md) ------------------

QEMU10 = Path(__file__).parent / "fixtures" / "qemu-10-fdp"


def test_recorded_fdp_statistics_count_the_plans_writes() -> None:
    before = parse_fdp_stats_binary((QEMU10 / "fdp-stats-before.bin").read_bytes())
    after = parse_fdp_stats_binary((QEMU10 / "fdp-stats-after.bin").read_bytes())
    rep = parse_report((QEMU10 / "dw.json").read_bytes())
    assert before == FdpStats(0, 0, 0)
    # QEMU has no FTL: media bytes = host bytes (DLWA 1), nothing erased; no metadata on the namespace
    assert after == FdpStats(rep.write_bytes, rep.write_bytes, 0) and after.waf == 1.0
    assert rep.write_bytes_by_handle == (2 * 2**20, 2**20, 3 * 4096)


def test_recorded_ruh_status_short_read_and_per_handle_usage() -> None:
    """nvme-cli 2.3 prints NRUHSD × 32 bytes (the header forgotten): accepted, every field read;
    each handle's RUAMW fell by exactly the 512-byte blocks kvwear-dw wrote through it."""
    before = parse_ruh_status_binary((QEMU10 / "ruh-status-before.bin").read_bytes())
    after = parse_ruh_status_binary((QEMU10 / "ruh-status-after.bin").read_bytes())
    full = json.loads((QEMU10 / "ruh-status.json").read_text())
    assert [(s.placement_id, s.ruh_id, s.earutr_s, s.ruamw_blocks) for s in before] == \
        [(d["pid"], d["ruhid"], d["earutr"], d["ruamw"]) for d in full["ruhss"]]
    assert [s.ruamw_blocks for s in before] == [96 * 2**20 // 512] * 3
    rep = parse_report((QEMU10 / "dw.json").read_bytes())
    assert [b.ruamw_blocks - a.ruamw_blocks for b, a in zip(before, after, strict=True)] == \
        [n // 512 for n in rep.write_bytes_by_handle]
    with pytest.raises(InputError, match=r"3 descriptors.*expected 112 bytes, got 95"):
        parse_ruh_status_binary((QEMU10 / "ruh-status-after.bin").read_bytes()[:-1], "ruhs.bin")


def test_recorded_fdp_configurations_and_ctratt() -> None:
    cfgs = parse_fdp_configs_binary((QEMU10 / "fdp-configs.bin").read_bytes())
    js = json.loads((QEMU10 / "fdp-configs.json").read_text())["configs"][0]
    assert cfgs == (FdpConfiguration(index=0, valid=True, reclaim_groups=1, reclaim_unit_handles=3,
                                     max_placement_ids=127, namespaces=256, reclaim_unit_bytes=96 * 2**20,
                                     ruh_types=(1, 1, 1)),)
    assert (js["fdpa"] >> 7, js["nrg"], js["nruh"], js["nnss"], js["runs"]) == (1, 1, 3, 256, 96 * 2**20)
    raw = (QEMU10 / "fdp-configs.bin").read_bytes()
    with pytest.raises(InputError, match=r"FDP configuration 0 \(80 bytes\).*got 95"):
        parse_fdp_configs_binary(raw[:-1], "cfg.bin")
    with pytest.raises(InputError, match=r"DSZE.*cannot hold its 3 reclaim unit handle"):
        parse_fdp_configs_binary(raw[:16] + (70).to_bytes(2, "little") + raw[18:], "cfg.bin")
    # CTRATT bit 19: QEMU 10's FDP subsystem has it, Debian 12's QEMU 7.2 (recorded in ../shared) not
    assert parse_id_ctrl_json((QEMU10 / "id-ctrl.json").read_text()).fdp_supported


def test_ctratt_without_fdp(shared: Path) -> None:
    ctrl = parse_id_ctrl_json((shared / "fixtures" / "qemu-7.2-nvme" / "id_ctrl_json.json").read_text())
    assert ctrl.ctratt == 0x8000 and not ctrl.fdp_supported
