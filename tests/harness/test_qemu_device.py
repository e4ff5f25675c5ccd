"""kvwear.harness.devices.qemu: the `qemu` backend replays a block plan in a real TCG guest and its SMART
deltas match fio's counts; the `femu` backend's set-up and refusals (no FEMU binary exists here,
so its replay is not run); the host-side observation note."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear.emulator.guest import FemuGeometry, GuestImage, GuestNotBuiltError, build_guest
from kvwear.errors import InputError, KvwearError
from kvwear.harness.devices import fio_runner as fiolib
from kvwear.harness.devices.base import DEVICES, DeviceSpec, open_device
from kvwear.harness.devices.measurement import HostCount, ReplayResult
from kvwear.harness.devices.qemu import (
    GUEST_SMART_SOURCE,
    GuestDevice,
    femu_deltas,
    host_observation_note,
    smart_deltas,
)
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.harness.wear.base import NVME_DATA_UNIT_BYTES

MiB = 2**20


def _plan(ops: list[tuple[str, int, int]]) -> pa.Table:
    return BLOCK_OPS.conform(pa.table({
        "t_s": pa.array(np.arange(len(ops)) * 1e-3, pa.float64()),
        "op": pa.array([o for o, _, _ in ops]).dictionary_encode(),
        "offset_bytes": pa.array([off for _, off, _ in ops], pa.int64()),
        "length_bytes": pa.array([n for _, _, n in ops], pa.int64()),
        "obj_kind": pa.array(["full"] * len(ops)).dictionary_encode(),
        "obj_id": pa.array(range(len(ops)), pa.int64()),
    }))


def _mixed_plan(seed: int = 7) -> pa.Table:
    """~5 MiB: 128 KiB sequential writes, then 4 KiB random writes, a few reads, in the first 24 MiB of 32."""
    rng = np.random.default_rng(seed)
    ops = [("write", i * 128 * 1024, 128 * 1024) for i in range(24)]                    # 3 MiB
    ops += [("write", int(o) * 4096, 4096) for o in rng.integers(1024, 6144, 500)]     # ~2 MiB
    ops += [("read", i * 128 * 1024, 128 * 1024) for i in range(4)]
    return _plan(ops)


@pytest.fixture(scope="module")
def guest_image() -> GuestImage:
    return build_guest()


def test_qemu_and_femu_are_registered() -> None:
    assert "qemu" in DEVICES and "femu" in DEVICES


def test_femu_deltas_on_recorded_femu_logs(fixtures_dir: Path) -> None:
    # Recorded FEMU run (fixtures README): snapshot 1 after a sequential fill, 2 after random 4 KiB
    # writes of 2 × the namespace — FEMU counted 98,304 more host pages and 664,832 GC pages.
    f = fixtures_dir / "femu-bbssd"
    d = femu_deltas((f / "smart-log-1.bin").read_bytes(), (f / "smart-log-2.bin").read_bytes())
    fio_rand = json.loads((f / "fio_rand_json.json").read_text())["jobs"][0]["write"]["io_bytes"]
    assert d["femu_host_pages_delta"] == 98_304 and d["femu_gc_pages_delta"] == 664_832
    assert d["femu_host_bytes_delta"] == fio_rand                      # exact: pages, no rounding
    assert d["femu_nand_bytes_delta"] == (98_304 + 664_832) * 4096
    assert d["femu_waf"] == pytest.approx((98_304 + 664_832) / 98_304)
    assert d["femu_waf_word_after"] == 5508                             # FEMU's cumulative word
    s = smart_deltas((f / "smart-log-1.bin").read_bytes(), (f / "smart-log-2.bin").read_bytes(),
                     (f / "smart_json_1.json").read_bytes(), (f / "smart_json_2.json").read_bytes())
    assert abs(s["smart_duw_delta"] - math.ceil(fio_rand / NVME_DATA_UNIT_BYTES)) <= 1
    with pytest.raises(KvwearError, match="disagree"):                 # JSON of another snapshot
        smart_deltas((f / "smart-log-1.bin").read_bytes(), (f / "smart-log-2.bin").read_bytes(),
                     (f / "smart_json_0.json").read_bytes(), (f / "smart_json_2.json").read_bytes())


def _stats_log(waf_milli: int, host: int, gc: int, programmed: int) -> bytes:
    """A FEMU stats log page C0h laid out as newer FEMU documents it (FemuStatsLog)."""
    return (struct.pack("<I4xQQQ", waf_milli, host, gc, programmed)).ljust(512, b"\0")


def test_femu_deltas_prefer_the_stats_log_of_newer_femu(fixtures_dir: Path) -> None:
    f = fixtures_dir / "femu-bbssd"
    smart = (f / "smart-log-1.bin").read_bytes(), (f / "smart-log-2.bin").read_bytes()
    # Newer FEMU: the SMART vendor bytes hold thermal fields (zero here), the stats log counts.
    zero = bytes(512)
    before, after = _stats_log(1000, 100, 0, 100), _stats_log(2500, 300, 250, 250)   # a buffer absorbed 50
    d = femu_deltas(zero, zero, stats_before=before, stats_after=after)
    assert d["femu_counter_source"] == "stats-log-c0h"
    assert (d["femu_host_pages_delta"], d["femu_gc_pages_delta"]) == (200, 250)
    assert d["femu_host_bytes_delta"] == 200 * 4096
    assert d["femu_nand_bytes_delta"] == (150 + 250) * 4096          # programmed + relocated pages
    assert d["femu_waf"] == pytest.approx(400 / 200)
    # FEMU of the fixtures' generation refuses C0h (the guest keeps an empty file): SMART bytes.
    old = femu_deltas(*smart, stats_before=b"", stats_after=b"")
    assert old["femu_counter_source"] == "smart-vendor-bytes" and old["femu_gc_pages_delta"] == 664_832
    # A C0h page that counted no host write (not FEMU's, or FEMU idle) is not taken either.
    assert femu_deltas(*smart, stats_before=zero, stats_after=zero)["femu_counter_source"] == "smart-vendor-bytes"


def test_smart_deltas_on_recorded_qemu_logs(fixtures_dir: Path) -> None:
    # Stock QEMU: snapshot 0 → 1 spans the sequential fill; one write command per 128 KiB I/O.
    q = fixtures_dir / "qemu-7.2-nvme"
    fill = json.loads((q / "fio_fill_json.json").read_text())["jobs"][0]["write"]
    s = smart_deltas((q / "smart-log-0.bin").read_bytes(), (q / "smart-log-1.bin").read_bytes())
    assert s["smart_duw_delta"] == math.ceil(fill["io_bytes"] / NVME_DATA_UNIT_BYTES)
    assert s["smart_host_write_commands_delta"] == fill["total_ios"]
    lo, hi = s["smart_duw_bytes_bounds"]
    assert lo < fill["io_bytes"] < hi


def test_missing_guest_names_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(GuestNotBuiltError, match=r"build it with: bash \S*scripts/build-guest.sh \S*nowhere"):
        open_device(DeviceSpec("qemu", options={"guest_dir": str(tmp_path / "nowhere")}), tmp_path)
    assert not (tmp_path / "qemu-nvme.img").exists()


def test_host_observation_note_depends_on_cache_mode() -> None:
    wb, direct, femu = host_observation_note("writeback"), host_observation_note("none"), host_observation_note(
        "none", femu=True)
    assert "page cache" in wb and "merged" in wb
    assert "O_DIRECT" in direct and "1:1" in direct
    assert "nothing" in femu and "O_DIRECT" not in femu


@pytest.mark.guest  # needs the built guest image (nothing boots)
def test_femu_needs_a_binary(guest_image: GuestImage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVWEAR_FEMU_BINARY", raising=False)
    with pytest.raises(KvwearError, match=r"femu_binary \(--femu-binary\) or \$KVWEAR_FEMU_BINARY"):
        open_device(DeviceSpec("femu"), tmp_path)
    not_exec = tmp_path / "femu-qemu"
    not_exec.write_text("")
    monkeypatch.setenv("KVWEAR_FEMU_BINARY", str(not_exec))
    with pytest.raises(KvwearError, match="not an executable"):
        open_device(DeviceSpec("femu"), tmp_path)


@pytest.mark.guest  # needs the built guest image (nothing boots)
def test_femu_backend_configuration(guest_image: GuestImage, tmp_path: Path) -> None:
    # Any executable stands in for the path check; nothing is launched here.
    geo = {"devsz_mb": 96, "blks_per_pl": 32, "luns_per_ch": 2, "nchs": 2, "gc_thres_pcent": 80}
    dev = open_device(DeviceSpec("femu", options={"femu_binary": "/bin/true", "femu": geo}), tmp_path)
    assert isinstance(dev, GuestDevice)
    assert dev.capacity_bytes() == 96 * MiB and dev.drive_image is None
    assert dev.config.qemu_binary == "/bin/true"
    with_l = open_device(DeviceSpec("femu", options={"femu_binary": "/bin/true", "qemu_args": "-L '/opt/femu bios'"}),
                         tmp_path)
    assert isinstance(with_l, GuestDevice) and with_l.config.extra_args == ("-L", "/opt/femu bios")
    assert dev.config.drive.femu == FemuGeometry(**geo)
    ident = dev.identity()
    assert ident.kind == "femu" and ident.extra["femu_device"] == FemuGeometry(**geo).device_arg()
    assert not list(tmp_path.iterdir())                       # no image: FEMU keeps data in memory
    with pytest.raises(KvwearError, match="unknown FEMU geometry"):
        open_device(DeviceSpec("femu", options={"femu_binary": "/bin/true", "femu": {"chans": 2}}), tmp_path)
    # Flat keys, as `--device-option femu.nchs=4` gives them, merge over the table.
    flat = open_device(DeviceSpec("femu", options={"femu_binary": "/bin/true", "femu": geo, "femu.nchs": "4",
                                                   "femu.devsz_mb": 160}), tmp_path)
    assert isinstance(flat, GuestDevice) and flat.femu is not None
    assert flat.femu.nchs == 4 and flat.capacity_bytes() == 160 * MiB
    with pytest.raises(KvwearError, match="need --device femu"):
        open_device(DeviceSpec("qemu", options={"femu.nchs": 4}), tmp_path)


@pytest.mark.guest  # needs the built guest image (nothing boots)
def test_refusals_before_any_boot(guest_image: GuestImage, tmp_path: Path) -> None:
    with pytest.raises(KvwearError, match=r"unknown option depth \(valid: .*iodepth"):
        open_device(DeviceSpec("qemu", options={"depth": 4}), tmp_path)
    with pytest.raises(KvwearError, match="iodepth: expected an integer"):
        open_device(DeviceSpec("qemu", options={"iodepth": "deep"}), tmp_path)
    with pytest.raises(KvwearError, match="cache must be 'none' or 'writeback'"):
        open_device(DeviceSpec("qemu", capacity_bytes=MiB, options={"cache": "unsafe"}), tmp_path)
    assert not (tmp_path / "qemu-nvme.img").exists()          # nothing created for a refused config
    with pytest.raises(KvwearError, match="regular image file"):
        open_device(DeviceSpec("qemu", target="/dev/null", capacity_bytes=MiB), tmp_path)
    dev = open_device(DeviceSpec("qemu", capacity_bytes=8 * MiB), tmp_path)
    img = tmp_path / "qemu-nvme.img"
    assert img.stat().st_size == 8 * MiB and img.stat().st_blocks == 0      # sparse, created by us
    with pytest.raises(InputError, match="beyond the configured range"):
        dev.replay(_plan([("write", 8 * MiB - 4096, 8192)]), tmp_path / "r1")
    with pytest.raises(KvwearError, match=r"unknown option trim_segments \(valid: "):
        open_device(DeviceSpec("qemu", capacity_bytes=MiB, options={"trim_segments": 3}), tmp_path)


@pytest.mark.guest
def test_qemu_replays_trims_through_the_guests_blkdiscard(guest_image: GuestImage, tmp_path: Path) -> None:
    # The guest's fio 3.33 drops iolog trims: the plan runs in segments of 3 rows, each followed by
    # blkdiscard. QEMU passes deallocations on to the image (discard=unmap), so holes show them.
    K = 64 * 1024
    img = tmp_path / "t.img"
    dev = open_device(DeviceSpec("qemu", target=str(img), capacity_bytes=8 * MiB, options={
        "drive_options": "discard=unmap", "trim_segment_ops": 3}), tmp_path)
    plan = _plan([("write", 0, K), ("write", MiB, K), ("trim", 0, K),
                  ("write", 2 * MiB, 4096), ("trim", MiB, K), ("write", MiB, 4096)])
    # Timed: the second segment's rows are 4 s after the first's, and the guest waits for them
    # (untimed, both segments take ~1.6 s here).
    plan = plan.set_column(0, "t_s", pa.array([0.0, 0.001, 0.002, 4.0, 4.001, 4.002]))
    res = dev.replay(plan, tmp_path / "r", timed=True)
    if fiolib.fio_replays_trim(res.tool):
        pytest.skip(f"the guest's {res.tool} replays trims itself")
    e = res.details
    assert (res.trims.mode, e["segments"], e["fio_runs"]) == ("deferred", 2, 2)
    # The second trim lost its first 4 KiB to the write after it: superseded, not issued.
    assert (res.trim_bytes, res.trims.superseded_bytes, res.trims.planned_bytes) == (2 * K - 4096, 4096, 2 * K)
    assert (res.write_bytes, res.write_ios) == (2 * K + 8192, 4)
    codes = dev.last_run.exit_codes
    assert codes["discard-00000"] == codes["discard-00001"] == 0 and codes["fio-00000"] == 0
    assert e["timed"] and e["guest_fio_s"] >= 4.0
    with open(img, "rb") as fh:
        fd = fh.fileno()
        assert os.lseek(fd, 0, os.SEEK_DATA) == MiB                # 0-64K written, then discarded
        assert os.lseek(fd, MiB, os.SEEK_HOLE) == MiB + 4096       # rewritten 4K kept, the rest discarded
        assert os.lseek(fd, MiB + 4096, os.SEEK_DATA) == 2 * MiB


@pytest.fixture(scope="module")
def replayed(guest_image: GuestImage, tmp_path_factory: pytest.TempPathFactory) -> tuple[GuestDevice, pa.Table,
                                                                                          ReplayResult, Path]:
    d = tmp_path_factory.mktemp("qemu-dev")
    dev = open_device(DeviceSpec("qemu", capacity_bytes=32 * MiB,
                                 options={"serial": "kvwdev01", "precondition": "fill"}), d)
    assert isinstance(dev, GuestDevice)
    plan = _mixed_plan()
    return dev, plan, dev.replay(plan, d / "replay"), d


@pytest.mark.guest
def test_qemu_replay_smart_deltas_match_fio(replayed: tuple[GuestDevice, pa.Table, ReplayResult, Path]) -> None:
    _, plan, res, _ = replayed
    ops = plan.column("op").cast(pa.string()).to_pylist()
    lens = plan.column("length_bytes").to_pylist()
    plan_write = sum(n for o, n in zip(ops, lens, strict=True) if o == "write")
    plan_write_ios = ops.count("write")
    assert res.write_bytes == plan_write and res.write_ios == plan_write_ios
    assert res.read_ios == ops.count("read") and res.details["fio_io_bytes"]["write"] == plan_write
    # Stock QEMU: Data Units Written = ceil(bytes / 512,000) (within one unit), one write command per I/O.
    expected_units = math.ceil(plan_write / NVME_DATA_UNIT_BYTES)
    smart = res.details["smart"]
    assert abs(smart["smart_duw_delta"] - expected_units) <= 1
    lo, hi = smart["smart_duw_bytes_bounds"]
    assert lo < plan_write < hi
    assert res.host_counts == (HostCount(GUEST_SMART_SOURCE, smart["smart_duw_delta"] * NVME_DATA_UNIT_BYTES,
                                         NVME_DATA_UNIT_BYTES),)
    assert smart["smart_host_write_commands_delta"] == res.write_ios
    assert res.media is None and res.nand_write_bytes is None and res.waf is None        # no FTL in stock QEMU
    assert res.details["iodepth"] == 1 and res.details["accel"] == "tcg"


@pytest.mark.guest
def test_qemu_replay_lands_in_the_image_and_keeps_outputs(
        replayed: tuple[GuestDevice, pa.Table, ReplayResult, Path]) -> None:
    dev, _, res, d = replayed
    ident = dev.identity()
    assert ident.serial == "kvwdev01" and ident.capacity_bytes == 32 * MiB and ident.logical_block_bytes == 512
    assert ident.model and "QEMU" in ident.model
    outdir = Path(res.details["guest_outputs"])
    for name in ("fio.json", "smart-before.bin", "smart-after.bin", "smartctl-after.json", "dmesg.txt", "rc.txt"):
        assert (outdir / name).is_file(), name
    assert res.tool_output_path == str(outdir / "fio.json") and res.tool.startswith("fio-3")
    # The precondition fill (one sequential pass over the 32 MiB drive) ran before the first SMART
    # snapshot: the running total includes it, the delta does not (checked in the test above).
    fill = json.loads((outdir / "precondition.json").read_bytes())
    assert fill["jobs"][0]["write"]["io_bytes"] == 32 * MiB
    total = 32 * MiB + res.write_bytes
    assert abs(res.details["smart"]["smart_data_units_written_after"] - math.ceil(total / NVME_DATA_UNIT_BYTES)) <= 1
    # The guest's writes reached the host file backing the drive: the sparse image is now fully
    # allocated and holds fio's (non-zero) buffers.
    img = d / "qemu-nvme.img"
    assert os.path.getsize(img) == 32 * MiB and os.stat(img).st_blocks * 512 >= 32 * MiB
    with open(img, "rb") as fh:
        head = fh.read(MiB)
    assert head.count(0) < len(head) // 2
