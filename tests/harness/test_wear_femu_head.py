"""FEMU HEAD's own outputs, recorded in kvwear's guest on a real FEMU build
(tests/harness/fixtures/femu-head-fdp/README.md): the SMART log's vendor counters without FDP,
the C0h refusal, and with FDP on the statistics log (22h), the reclaim unit handle status and the
SMART log whose vendor counters FEMU's FDP FTL leaves at zero. Every expected number is one FEMU or
kvwear-dw printed in that run, so a parser reading the wrong offset or width fails here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvwear.harness.devices.directive_plan import parse_report
from kvwear.harness.devices.measurement import (
    DeviceMeasurement,
    FdpLogCount,
    HandleCount,
    MediaCount,
    ReplayResult,
    TrimCount,
    TrimMode,
)
from kvwear.harness.devices.qemu import GUEST_SMART_SOURCE, drive_counts, femu_deltas, smart_deltas
from kvwear.harness.estimate.estimator import DUW_NOTE, EstimateInputs, PlanBytes, estimate_policy
from kvwear.harness.wear._decode import parse_nvme_refusal
from kvwear.harness.wear.base import CounterSource
from kvwear.harness.wear.fdp import FdpStats, parse_fdp_stats_binary, parse_ruh_status_binary
from kvwear.harness.wear.femu import (
    femu_counters_from_nvme_json,
    femu_counters_from_smartctl_json,
    is_femu,
    parse_femu_counters,
)
from kvwear.harness.wear.identify import DeviceIdentity, parse_id_ctrl_json
from kvwear.harness.wear.nvme_smart import parse_smart_log_binary, sample_from_smart_log
from kvwear.harness.wear.snapshot import WearDelta, delta
from kvwear.policies.metrics import SimSummary

HEAD = Path(__file__).parent / "fixtures" / "femu-head-fdp"
PLAN_WRITE_BYTES = 502_530_048          # the run's plan (aligned write bytes), fio's and kvwear-dw's count


def _b(name: str) -> bytes:
    return (HEAD / name).read_bytes()


def _stats(phase: str) -> FdpStats:
    return parse_fdp_stats_binary(_b(f"fdp-stats-{phase}.bin"))


def test_vendor_counters_without_fdp() -> None:
    before, after = parse_femu_counters(_b("nofdp-smart-before.bin")), parse_femu_counters(_b("nofdp-smart-after.bin"))
    assert (before.waf_milli, before.host_pages, before.gc_pages) == (1000, 0, 0)
    # 122,688 host pages = the plan's bytes ÷ 4 KiB exactly; 432 pages relocated by GC; word 1003
    assert (after.waf_milli, after.host_pages, after.gc_pages) == (1003, 122_688, 432)
    assert after.host_bytes_written == PLAN_WRITE_BYTES
    assert after.waf_milli == int(1000 * (after.host_pages + after.gc_pages) / after.host_pages)
    # nvme-cli's and smartctl's mislabelled thermal fields reassemble to the same counters
    assert femu_counters_from_nvme_json(_b("nofdp-smart-after.json")) == after
    assert femu_counters_from_smartctl_json(_b("nofdp-smartctl-after.json")) == after
    smart = parse_smart_log_binary(_b("nofdp-smart-after.bin"))
    assert (smart.data_units_written, smart.host_write_commands) == (982, 543)


def test_femu_head_refuses_c0h_and_the_smart_bytes_count() -> None:
    refusal = parse_nvme_refusal(_b("nofdp-c0h-refusal.txt"), "nofdp-c0h-refusal.txt")
    assert refusal.status == 0x4109 and refusal.not_supported
    # the guest keeps an empty C0h file: the SMART vendor bytes are the source
    d = femu_deltas(_b("nofdp-smart-before.bin"), _b("nofdp-smart-after.bin"), stats_before=b"", stats_after=b"")
    assert d["femu_counter_source"] == "smart-vendor-bytes"
    assert (d["femu_host_bytes_delta"], d["femu_gc_pages_delta"]) == (PLAN_WRITE_BYTES, 432)
    assert d["femu_nand_bytes_delta"] == (122_688 + 432) * 4096
    lo, hi = smart_deltas(_b("nofdp-smart-before.bin"), _b("nofdp-smart-after.bin"),
                          _b("nofdp-smart-before.json"), _b("nofdp-smart-after.json"))["smart_duw_bytes_bounds"]
    assert lo <= PLAN_WRITE_BYTES <= hi


def test_identity_femu_and_fdp_capability() -> None:
    plain, fdp = parse_id_ctrl_json(_b("nofdp-id-ctrl.json")), parse_id_ctrl_json(_b("fdp-id-ctrl.json"))
    assert is_femu(plain) and is_femu(fdp)
    assert plain.model == fdp.model == "FEMU BlackBox-SSD Controller"
    # femu-subsys,fdp=on: CTRATT 0x80010 (bit 19 FDPS, bit 4 endurance groups); 0 without
    assert json.loads(_b("fdp-id-ctrl.json"))["ctratt"] == 0x80010 and fdp.fdp_supported
    assert not plain.fdp_supported


def test_fdp_statistics_log_counts_host_and_gc_bytes() -> None:
    before, after = _stats("before"), _stats("after")
    rep = parse_report(_b("fdp-dw.json"))
    assert before == FdpStats(0, 0, 0)
    # host bytes = kvwear-dw's writes; media bytes add FEMU's GC-relocated pages (4,988 of them)
    assert after == FdpStats(PLAN_WRITE_BYTES, 522_960_896, 331_350_016)
    assert rep.write_bytes == after.host_bytes_with_metadata_written
    assert (after.media_bytes_with_metadata_written - PLAN_WRITE_BYTES) == 4988 * 4096
    assert after.media_bytes_erased % (256 * 4096) == 0          # whole 1 MiB blocks (256 pages of 4 KiB)
    assert rep.write_bytes_by_handle == (38_928_384, 463_601_664)


def test_ruh_status_on_femu() -> None:
    before = parse_ruh_status_binary(_b("fdp-ruh-status-before.bin"))
    after = parse_ruh_status_binary(_b("fdp-ruh-status-after.bin"))
    assert [(s.placement_id, s.ruh_id) for s in before] == [(0, 0), (1, 1)]
    # FEMU reports RUAMW against the nominal reclaim unit (fdp.runs 96 MiB = 196,608 blocks) while
    # its reclaim unit is one 4 MiB line: the value restarts with each unit, it is no byte count
    assert [s.ruamw_blocks for s in before] == [196_608, 196_608]
    assert [s.ruamw_blocks for s in after] == [196_608, 196_064]


def _fdp_log() -> FdpLogCount:
    before, after = _stats("before"), _stats("after")
    return FdpLogCount(after.host_bytes_with_metadata_written - before.host_bytes_with_metadata_written,
                       after.media_bytes_with_metadata_written - before.media_bytes_with_metadata_written,
                       after.media_bytes_erased - before.media_bytes_erased)


def _files(prefix: str) -> dict[str, bytes]:
    """The guest's SMART outputs of one run, under the names the guest returns them by."""
    return {f"smart-{p}.bin": _b(f"{prefix}-smart-{p}.bin") for p in ("before", "after")}


def test_femu_fdp_waf_comes_from_the_fdp_log() -> None:
    # FEMU's FDP FTL leaves the SMART vendor counters at zero (host pages 0, word 1000) …
    assert parse_femu_counters(_b("fdp-smart-after.bin")).host_pages == 0
    smart = smart_deltas(_b("fdp-smart-before.bin"), _b("fdp-smart-after.bin"))
    assert smart["smart_host_write_commands_delta"] == parse_report(_b("fdp-dw.json")).write_cmds == 987
    # … so the replay's NAND bytes and WAF are the FDP log's media and host bytes
    d = femu_deltas(_b("fdp-smart-before.bin"), _b("fdp-smart-after.bin"), stats_before=b"", stats_after=b"",
                    fdp_log=_fdp_log())
    assert d["femu_counter_source"] == CounterSource.FDP_STATS_LOG_22H
    assert (d["femu_host_bytes_delta"], d["femu_nand_bytes_delta"]) == (PLAN_WRITE_BYTES, 522_960_896)
    assert (d["femu_host_pages_delta"], d["femu_gc_pages_delta"]) == (122_688, 4988)
    assert d["femu_waf"] == pytest.approx(522_960_896 / PLAN_WRITE_BYTES)
    # the drive's counts: the FDP log's media bytes give the WAF; its host count is left to the FDP
    # log's own check (not a second "femu" host count)
    counts, media, _ = drive_counts(_files("fdp"), "guest", femu=True, fdp_log=_fdp_log())
    assert media == MediaCount(f"femu {CounterSource.FDP_STATS_LOG_22H}", PLAN_WRITE_BYTES, 522_960_896)
    assert [c.source for c in counts] == [GUEST_SMART_SOURCE]
    # without the FDP log the vendor bytes say nothing was written: no WAF rather than a wrong one
    assert femu_deltas(_b("fdp-smart-before.bin"), _b("fdp-smart-after.bin"))["femu_waf"] is None
    assert drive_counts(_files("fdp"), "guest", femu=True)[1] is None


def test_the_smart_rounding_note_is_on_the_smart_rows_only() -> None:
    """The estimate of the FEMU HEAD runs' device records (their recorded SMART logs and FDP
    statistics): "host bytes" is measured by fio, FEMU's vendor counters or its FDP log, SMART Data
    Units Written (in the guest, and by an nvme-smart wear reader) and psutil; only the SMART rows
    carry the note on SMART's 512,000-byte rounding."""
    samples = [sample_from_smart_log(parse_smart_log_binary(_b(f"nofdp-smart-{p}.bin")), "nvme-smart", "")
               for p in ("before", "after")]
    psutil = WearDelta("psutil", PLAN_WRITE_BYTES, None, None, None, None, None)
    by_handle = tuple(parse_report(_b("fdp-dw.json")).write_bytes_by_handle)
    summary = SimSummary(**{f.name: 0 for f in dataclasses.fields(SimSummary)}
                         | {"label": "lru", "ssd_write_bytes": PLAN_WRITE_BYTES})
    notes: dict[str, str] = {}
    for prefix, placement in (("nofdp", "none"), ("fdp", "kind")):
        log = _fdp_log() if prefix == "fdp" else None
        counts, media, _ = drive_counts(_files(prefix), "guest", femu=True, fdp_log=log)
        replay = ReplayResult("femu", "fio-3.33", PLAN_WRITE_BYTES, 0, 0, 1, 0, 1.0, TrimCount(TrimMode.NONE, 0),
                              media=media, host_counts=counts, fdp_log=log,
                              handles=HandleCount("kvwear-dw", by_handle, by_handle) if log else None)
        device = DeviceMeasurement(replay, DeviceIdentity("femu", ""), wear=(delta(*samples), psutil))
        plan = PlanBytes(PLAN_WRITE_BYTES, PLAN_WRITE_BYTES, 0, placement, by_handle)
        est = estimate_policy(EstimateInputs(
            label="lru", model="qwen3-next-80b-a3b", device_kind="femu", dram_bytes=200_000_000, ssd_bytes=1,
            sample_fraction=1.0, summary=summary, plan=plan, device=device, tbw_bytes=1e15, duration_s=1.0,
            waf_uniform=1.0, waf_uniform_source="-", prediction=None, waf_emulator=None, preconditioned=False,
            layout="log", raw_nand_bytes=1.0, pe_rating_cycles=3000))
        assert all(c.passed for c in est.checks if c.kind == "accounting"), est.checks
        notes |= {c.source: c.note for c in est.checks if c.name == "host bytes"}
    assert notes == {"fio-3.33": "", GUEST_SMART_SOURCE: DUW_NOTE, "wear:nvme-smart": DUW_NOTE, "wear:psutil": "",
                     "femu smart-vendor-bytes": "", CounterSource.FDP_STATS_LOG_22H: ""}
