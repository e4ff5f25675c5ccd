"""The qemu/femu backends with kvwear's directive-write tool (kvwear-dw): the FDP command lines
(pure), the refusal of a plan with placement handles on an emulator without FDP, and real TCG
guests: kvwear-dw issues exactly the plan's bytes on Debian's QEMU 7.2 (plain writes; SMART Data
Units Written and write commands match), and — where the QEMU here has FDP (≥ 8.0) — the pages
land on the handle each write asked for (FDP statistics, reclaim unit handle status)."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear.emulator.guest import (
    SUBSYS_ID,
    DriveConfig,
    FdpConfig,
    FemuGeometry,
    GuestConfig,
    GuestImage,
    build_guest,
    emulator_version,
    fdp_qemu_binary,
    qemu_argv,
    supports_fdp,
)
from kvwear.errors import KvwearError
from kvwear.harness.devices.base import DeviceSpec, open_device
from kvwear.harness.devices.measurement import DeviceMeasurement
from kvwear.harness.devices.qemu import QEMU_BINARY_ENV, GuestDevice, stock_qemu_fdp_media_bytes
from kvwear.harness.estimate.estimator import Estimate, PlanRecord
from kvwear.harness.plan.placement import plan_write_bytes_by_handle
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.harness.wear.base import NVME_DATA_UNIT_BYTES

MiB = 2**20
K = 4096
QEMU = os.environ.get(QEMU_BINARY_ENV, "qemu-system-x86_64")     # the backend's default too
# a QEMU with FDP for the placement tests: QEMU itself if ≥ 8.0, else scripts/fetch-qemu-fdp.sh's
FDP_QEMU = fdp_qemu_binary(QEMU) if shutil.which(QEMU) else None
NO_FDP_QEMU = (f"{QEMU} (QEMU {emulator_version(QEMU) if shutil.which(QEMU) else 'missing'}) has no NVMe FDP "
               f"(nvme-subsys fdp needs QEMU ≥ 8.0) and scripts/fetch-qemu-fdp.sh fetched none (Debian 12 only)")
IMAGE = GuestImage(kernel=Path("/g/vmlinuz"), initrd=Path("/g/initrd.img"), stamp="")


def _plan(rows: list[tuple[str, int, int, int]]) -> pa.Table:
    """rows: (op, offset, length, placement handle)."""
    return BLOCK_OPS.conform(pa.table({
        "t_s": pa.array(np.arange(len(rows)) * 1e-3, pa.float64()),
        "op": pa.array([r[0] for r in rows]).dictionary_encode(),
        "offset_bytes": pa.array([r[1] for r in rows], pa.int64()),
        "length_bytes": pa.array([r[2] for r in rows], pa.int64()),
        "obj_kind": pa.array(["full" if r[3] == 0 else "linear" for r in rows]).dictionary_encode(),
        "obj_id": pa.array(range(len(rows)), pa.int64()),
        "placement_handle": pa.array([r[3] for r in rows], pa.int8()),
    }))


def _sums(plan: pa.Table) -> dict[str, int]:
    ops = plan.column("op").cast(pa.string()).to_pylist()
    lens = plan.column("length_bytes").to_pylist()
    return {o: sum(n for p, n in zip(ops, lens, strict=True) if p == o) for o in ("write", "read", "trim")}


# A placed plan: handle 1 gets 1 MiB in 256 KiB rows, handle 2 gets 12 KiB, handle 0 the rest.
PLACED = [("write", 0, 2 * MiB, 0)] + [("write", 4 * MiB + i * 256 * 1024, 256 * 1024, 1) for i in range(4)] \
    + [("write", 8 * MiB + i * K, K, 2) for i in range(3)] + [("read", 0, 512 * 1024, 0), ("trim", 0, MiB, 0)]


# ---------------------------------------------------------------------------------------------
# command lines (pure)


def test_fdp_command_line_on_stock_qemu() -> None:
    cfg = GuestConfig(drive=DriveConfig(image=Path("/i/d.img"), serial="s1", fdp=FdpConfig(nruh=4, runs_bytes=MiB)))
    argv = qemu_argv(cfg, IMAGE, Path("/i/initrd"), Path("/c"), Path("/r"))
    devs = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
    assert devs == [f"nvme-subsys,id={SUBSYS_ID},nqn={SUBSYS_ID},fdp=on,fdp.nrg=1,fdp.nruh=4,fdp.runs=1048576",
                    f"nvme,serial=s1,subsys={SUBSYS_ID}", "nvme-ns,drive=nvm,nsid=1,fdp.ruhs=0-3"]
    assert "file=/i/d.img,if=none,id=nvm" in argv[argv.index("-drive") + 1]


def test_fdp_command_line_on_femu() -> None:
    femu = FemuGeometry()
    cfg = GuestConfig(drive=DriveConfig(femu=femu, fdp=FdpConfig(nruh=2, nru=32)), qemu_binary="/femu/qemu")
    argv = qemu_argv(cfg, IMAGE, Path("/i/initrd"), Path("/c"), Path("/r"))
    devs = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
    # the subsystem first: the controller names it
    assert devs == [f"femu-subsys,id={SUBSYS_ID},nqn={SUBSYS_ID},fdp=on,fdp.nrg=1,fdp.nruh=2,fdp.nru=32",
                    f"{femu.device_arg()},subsys={SUBSYS_ID}"]
    plain = qemu_argv(GuestConfig(drive=DriveConfig(femu=femu)), IMAGE, Path("/i"), Path("/c"), Path("/r"))
    assert [plain[i + 1] for i, a in enumerate(plain) if a == "-device"] == [femu.device_arg()]


def test_stock_qemu_counts_a_filled_reclaim_units_tail_twice() -> None:
    """Reclaim units of 16 blocks, commands of ≤ 8 blocks: handle 1's commands end at blocks 8, 16
    (fills its first unit: the command's 8 blocks count again), 24, 28; handle 0's 12 KiB row is 3
    commands ending at 8, 16 (fills a unit: 8 blocks again), 24; a read counts nothing."""
    plan = _plan([("write", 0, 4 * K, 1), ("write", 8 * K, 4 * K, 1), ("write", 16 * K, 12 * K, 0),
                  ("write", 32 * K, 4 * K, 1), ("read", 0, 4 * K, 0), ("write", 64 * K, 2 * K, 1)])
    host = 26 * K
    assert stock_qemu_fdp_media_bytes(plan, max_io_bytes=4 * K, ru_bytes=8 * K) == host + 4 * K + 4 * K
    # one unit larger than everything: nothing fills, media = host (the recorded PLACED run)
    assert stock_qemu_fdp_media_bytes(_plan(PLACED), max_io_bytes=512 * 1024, ru_bytes=96 * MiB) == \
        _sums(_plan(PLACED))["write"]
    # a command longer than two units counts each unit it fills
    assert stock_qemu_fdp_media_bytes(_plan([("write", 0, 5 * K, 0)]), max_io_bytes=8 * K, ru_bytes=2 * K) == \
        5 * K + 2 * K + 2 * K


@pytest.mark.parametrize("bad", [{"nruh": 0}, {"nruh": 2, "runs_bytes": 0}, {"nruh": 2, "nru": -1}])
def test_fdp_config_rejects(bad: dict[str, int]) -> None:
    with pytest.raises(KvwearError, match="FDP"):
        FdpConfig(**bad)


def test_the_emulators_fdp_support_is_probed() -> None:
    version = emulator_version(QEMU)
    major = int(version.split(".")[0])
    assert supports_fdp(QEMU, femu=False) == (major >= 8)
    assert not supports_fdp(QEMU, femu=True)              # no femu-subsys device in stock QEMU


# ---------------------------------------------------------------------------------------------
# guests


@pytest.fixture(scope="module")
def guest_image() -> GuestImage:
    return build_guest()


def _keep_kinds_apart(tmp_path: Path) -> str:
    """A run config that keeps `kind`'s two handles whatever the kinds' lifetimes: the tiny
    workloads below evict both kinds alike, which would put every write on handle 0."""
    path = tmp_path / "apart.toml"
    path.write_text("[replay]\nplacement_kind_min_separation = 0.0\n")
    return str(path)


def _device(tmp_path: Path, **options: object) -> GuestDevice:
    dev = open_device(DeviceSpec("qemu", target=str(tmp_path / "d.img"), capacity_bytes=16 * MiB,
                                 options={"drive_options": "discard=unmap", **options}), tmp_path)
    assert isinstance(dev, GuestDevice)
    return dev


@pytest.mark.guest  # needs the built guest image (nothing boots)
def test_handles_on_a_qemu_without_fdp_are_refused_naming_its_version(guest_image: GuestImage,
                                                                       tmp_path: Path) -> None:
    if supports_fdp(QEMU, femu=False):
        pytest.skip(f"QEMU {emulator_version(QEMU)} has FDP: nothing to refuse")
    dev = _device(tmp_path)
    with pytest.raises(KvwearError, match=rf"3 FDP handles.*\(QEMU {emulator_version(QEMU)}\).*drop_handles=true"):
        dev.replay(_plan(PLACED), tmp_path / "r")
    with pytest.raises(KvwearError, match="player: must be one of auto, fio, kvwear-dw"):
        _device(tmp_path, player="nvme-cli")


@pytest.mark.guest
def test_kvwear_dw_issues_exactly_the_plans_bytes_on_qemu(guest_image: GuestImage, tmp_path: Path) -> None:
    """Plain writes (no handles): the tool's bytes = the plan's = SMART Data Units Written within
    rounding, one write command per ≤ max-transfer piece; its trims leave holes in the image."""
    plan = _plan([(o, off, n, 0) for o, off, n, _ in PLACED])
    sums = _sums(plan)
    dev = _device(tmp_path, player="kvwear-dw")
    res = dev.replay(plan, tmp_path / "r")
    e = res.details
    assert (e["player"], res.tool, res.placement_unavailable) == ("kvwear-dw", "kvwear-dw 1", None)
    assert (res.write_bytes, res.read_bytes, res.trim_bytes) == (sums["write"], sums["read"], sums["trim"])
    assert e["dw_directive_writes"] == 0 and res.handles is None and res.fdp_log is None
    # every row fits one command of the queue's transfer limit except the 2 MiB one
    assert res.write_ios == math.ceil(2 * MiB / e["dw_max_io_bytes"]) + 7
    assert e["smart"]["smart_host_write_commands_delta"] == res.write_ios
    assert abs(e["smart"]["smart_duw_delta"] - math.ceil(sums["write"] / NVME_DATA_UNIT_BYTES)) <= 1
    lo, hi = e["smart"]["smart_duw_bytes_bounds"]
    assert lo < sums["write"] < hi
    with open(tmp_path / "d.img", "rb") as fh:          # the trim of 0..1 MiB deallocated it (discard=unmap)
        fd = fh.fileno()
        assert os.lseek(fd, 0, os.SEEK_DATA) == MiB
        assert os.lseek(fd, MiB, os.SEEK_HOLE) == 2 * MiB
        assert os.lseek(fd, 8 * MiB, os.SEEK_DATA) == 8 * MiB and os.lseek(fd, 8 * MiB, os.SEEK_HOLE) == 8 * MiB + 3 * K


@pytest.mark.guest
def test_kvwear_dw_stays_within_the_queues_segments_on_a_large_mdts(guest_image: GuestImage, tmp_path: Path) -> None:
    """A controller whose MDTS allows more than Linux 6.1's 128 segments of 4 KiB (FEMU's MDTS 10;
    here stock QEMU's nvme with mdts=9, 2 MiB): a 1 MiB passthrough command from a page-mapped
    buffer is refused (EINVAL) where the block layer would split it, so kvwear-dw caps its commands
    at max_segments pages (127 on the guest's 6.1 kernel: 508 KiB) and each 1 MiB row goes through
    as three commands."""
    plan = _plan([("write", 0, MiB, 0), ("write", 4 * MiB, MiB, 0), ("read", 0, MiB, 0)])
    res = _device(tmp_path, player="kvwear-dw", qemu_args="-global nvme.mdts=9").replay(plan, tmp_path / "r")
    e = res.details
    per_row = math.ceil(MiB / e["dw_max_io_bytes"])
    assert e["dw_max_io_bytes"] <= 512 * 1024 and e["dw_max_io_bytes"] % 4096 == 0
    assert (res.write_bytes, res.write_ios, res.read_bytes, e["dw_read_cmds"]) == (2 * MiB, 2 * per_row, MiB, per_row)


@pytest.mark.guest
def test_dropped_handles_and_skipped_trims_say_so(guest_image: GuestImage, tmp_path: Path) -> None:
    """drop_handles (asked for): the placed plan plays with plain writes; skip_trims: kvwear-dw
    leaves the trims out and the result counts them as skipped."""
    if supports_fdp(QEMU, femu=False):
        pytest.skip(f"QEMU {emulator_version(QEMU)} has FDP: handles are not dropped")
    plan = _plan(PLACED)
    res = _device(tmp_path, drop_handles="true", skip_trims="true", player="kvwear-dw").replay(plan, tmp_path / "r")
    e = res.details
    assert (e["player"], e["dw_directive_writes"]) == ("kvwear-dw", 0) and res.placement_unavailable
    assert (res.trims.mode, res.trims.skipped_ops, res.trim_bytes) == ("skipped", 1, 0)
    assert res.write_bytes == _sums(plan)["write"] and res.handles is None
    with open(tmp_path / "d.img", "rb") as fh:                  # nothing deallocated
        assert os.lseek(fh.fileno(), 0, os.SEEK_HOLE) == 2 * MiB


@pytest.mark.guest
@pytest.mark.skipif(FDP_QEMU is None, reason=NO_FDP_QEMU + "; the FTL model's unit tests "
                    "(tests/emulator/test_ftl.py) cover placement instead")
def test_kvwear_dw_places_pages_on_the_handle_asked(guest_image: GuestImage, tmp_path: Path) -> None:
    plan = _plan(PLACED)
    dev = _device(tmp_path, qemu_binary=FDP_QEMU)
    res = dev.replay(plan, tmp_path / "r")
    e = res.details
    assert dev.identity().extra["fdp_supported"]                # CTRATT bit 19, read in the guest
    want = tuple(plan_write_bytes_by_handle(plan))
    assert e["player"] == "kvwear-dw" and e["dw_directive_writes"] == res.write_ios
    assert res.handles is not None and res.handles.plan_write_bytes == res.handles.host_bytes == want
    assert e["fdp_nruh"] == 3
    log = res.fdp_log
    assert log is not None and log.host_bytes == res.write_bytes          # no metadata on this namespace
    assert log.media_bytes == log.media_bytes_expected == res.write_bytes
    # each handle's open reclaim unit lost exactly the blocks written through it (reclaim units of
    # 96 MiB: none fills up here)
    used = {s["placement_id"]: s["ruamw_blocks_before"] - s["ruamw_blocks_after"] for s in e["fdp_ruh_status"]}
    assert used == {h: b // 512 for h, b in enumerate(want)}


@pytest.mark.guest
def test_kvwear_run_with_placement_on_a_qemu_without_fdp(guest_image: GuestImage, tmp_path: Path) -> None:
    """`kvwear run --placement kind` on QEMU 7.2: refused naming the version; with drop_handles
    (and kvwear-dw as the player) the run completes and the tool's bytes match the plan."""
    if supports_fdp(QEMU, femu=False):
        pytest.skip(f"QEMU {emulator_version(QEMU)} has FDP: nothing to refuse")
    from typer.testing import CliRunner

    from kvwear.harness.cli.main import app

    args = ["run", _keep_kinds_apart(tmp_path), "--device", "qemu", "--policy", "lru", "--placement", "kind",
            "--param", "sessions=2",
            "--param", "turns=3", "--param", "system_prompt_tokens=256", "--model", "qwen3-next-80b-a3b",
            "--dram", "200MB", "--ssd", "300MB"]
    res = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "refused")])
    assert res.exit_code != 0
    assert f"(QEMU {emulator_version(QEMU)}) has no NVMe Flexible Data Placement" in res.output + str(res.exception)
    out = tmp_path / "dropped"
    res = CliRunner().invoke(app, [*args, "-o", str(out), "--device-option", "drop_handles=true",
                                   "--device-option", "player=kvwear-dw"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    plan = PlanRecord.load(out / "plan" / "lru" / "plan.json")
    device = DeviceMeasurement.load(out / "device" / "lru" / "result.json").replay
    assert plan.placement.mode == "kind" and plan.placement.write_bytes_by_handle[1] > 0
    assert device.tool == "kvwear-dw 1" and device.placement_unavailable and device.handles is None
    assert device.write_bytes == plan.counts.aligned_write_bytes
    checks = Estimate.load(out / "estimate" / "lru" / "crossval.json").checks
    host = [c for c in checks if c.name == "host bytes" and c.source == "kvwear-dw 1"]
    smart = [c for c in checks if c.source == "smart-duw (guest)"]
    assert host and host[0].passed and smart and smart[0].passed


@pytest.mark.guest
@pytest.mark.skipif(FDP_QEMU is None, reason=NO_FDP_QEMU)
def test_kvwear_run_with_placement_on_an_fdp_qemu(guest_image: GuestImage, tmp_path: Path) -> None:
    """`kvwear run --placement kind` on a QEMU with FDP: kvwear-dw writes each handle's bytes, the
    FDP log's host bytes are the plan's, its media bytes what QEMU's reclaim unit accounting makes of
    them (handle 1 fills some 96 MiB units), every accounting check passes."""
    from typer.testing import CliRunner

    from kvwear.harness.cli.main import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", _keep_kinds_apart(tmp_path), "--device", "qemu", "--policy", "lru",
                                   "--placement", "kind",
                                   "--param", "sessions=2", "--param", "turns=3", "--param",
                                   "system_prompt_tokens=256", "--model", "qwen3-next-80b-a3b", "--dram", "200MB",
                                   "--ssd", "300MB", "-o", str(out), "--device-option", f"qemu_binary={FDP_QEMU}"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    plan = PlanRecord.load(out / "plan" / "lru" / "plan.json")
    device = DeviceMeasurement.load(out / "device" / "lru" / "result.json").replay
    want = plan.placement.write_bytes_by_handle
    assert device.tool == "kvwear-dw 1" and device.placement_unavailable is None and len(want) == 2 and min(want) > 0
    assert device.handles is not None and device.fdp_log is not None
    assert device.handles.host_bytes == want and device.fdp_log.host_bytes == sum(want)
    assert device.fdp_log.media_bytes == device.fdp_log.media_bytes_expected > sum(want)
    # each handle's pages landed in its own reclaim units: its open unit (96 MiB, started full) has
    # what its bytes leave after filling whole units (a unit filled to its end is replaced at once)
    ru = 96 * MiB // 512
    assert [(s["ruamw_blocks_before"], s["ruamw_blocks_after"]) for s in device.details["fdp_ruh_status"]] == \
        [(ru, ru - (b // 512) % ru) for b in want]
    checks = Estimate.load(out / "estimate" / "lru" / "crossval.json").checks
    acc = {(c.name, c.source): c.passed for c in checks if c.kind == "accounting"}
    assert {("host bytes, handle 0", "kvwear-dw fdp"), ("host bytes, handle 1", "kvwear-dw fdp"),
            ("host bytes", "fdp-stats-log-22h"), ("media bytes", "fdp-stats-log-22h (no FTL)")} <= set(acc)
    assert all(acc.values()), acc
