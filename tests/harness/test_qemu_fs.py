"""The fs layout inside the qemu guest: kvwear-fs (emulator/kvwear_fs.c) plays a file plan as the
host's Python player does (compared on the host, no boot), and real TCG guest boots — ext4 and xfs
each with discard online and none, f2fs with periodic fstrim — show every identity: object bytes =
file bytes, block bytes ≥ file bytes (the overhead reported), the drive's SMART host bytes = the
block bytes within one SMART unit. One boot per file system and discard mode, shared by the tests
that read it, and one `kvwear run` of one policy (one boot) through preflight, plan, device,
estimate and report; skipped with the reason when QEMU or the guest image cannot be had. The refusals
(an unknown file system, a drive too small for xfs, an image without the tools) boot nothing.
The measured levels are printed (`pytest -s`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear.emulator.guest import FS_SOURCE, GuestError, GuestImage, build_guest, tool_stamp_line
from kvwear.errors import KvwearError
from kvwear.harness.devices.base import DeviceSpec, open_device
from kvwear.harness.devices.fs_player import FsParams, play_file_ops
from kvwear.harness.devices.guest_files import encode_file_plan, parse_fs_report
from kvwear.harness.devices.measurement import HostCount, ReplayResult
from kvwear.harness.devices.qemu import GUEST_SMART_SOURCE, GuestDevice
from kvwear.harness.estimate.estimator import counter_check
from kvwear.harness.estimate.fs_checks import fs_checks
from kvwear.harness.plan.files import FilePlanCounts, FsLayoutConfig, plan_file_ops
from kvwear.harness.plan.planner import ReplayConfig
from kvwear.harness.wear.base import NVME_DATA_UNIT_BYTES
from tests.harness.cbuild import build_static
from tests.harness.test_fs_player import store_stream

MiB = 1 << 20
CAPACITY_BYTES = 256 * MiB       # the plan's; the drive adds the file system's share: 320 MiB
DRIVE_BYTES = 320 * MiB          # (mkfs.xfs refuses file systems below 300 MB)
LIVE_BYTES = 12 * MiB            # the store's budget: it evicts its oldest objects beyond it
FSTRIM_INTERVAL_S = 40.0         # f2fs's boot: a trim every 40 rows of the plan's clock (t_s = row)


def workload(n: int = 150, seed: int = 11) -> pa.Table:
    """A store's stream (tests/harness/test_fs_player.py's store_stream): objects of 16 – 256 KiB (some
    not a page multiple), the oldest evicted beyond LIVE_BYTES, a read of a recent one now and then."""
    rng = np.random.default_rng(seed)
    return store_stream((rng.integers(4, 65, n) * 4096 + rng.integers(0, 2, n) * 100).tolist(), LIVE_BYTES, 8)


def file_plan(write_bytes: int = 64 * 1024) -> tuple[pa.Table, FilePlanCounts]:
    return plan_file_ops(workload(), ReplayConfig(capacity_bytes=CAPACITY_BYTES, layout="fs"),
                         fs=FsLayoutConfig(model="test-model", write_bytes=write_bytes))


# ---------------------------------------------------------------------------------------------
# kvwear-fs against the host's player, and the plan and report formats (nothing boots)


@pytest.fixture(scope="module")
def kvwear_fs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kvwear-fs built on the host as scripts/build-guest.sh builds it for the guest."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: kvwear-fs cannot be built")
    return build_static(FS_SOURCE, tmp_path_factory.mktemp("kvwear-fs") / "kvwear-fs")


def test_kvwear_fs_plays_a_plan_as_the_host_player_does(kvwear_fs: Path, tmp_path: Path) -> None:
    plan, counts = file_plan(write_bytes=48 * 1024)      # objects of several pieces, some with a short last one
    fs = FsParams(filesystem="ext4", discard="none")
    encoded = tmp_path / "fs.plan"
    encoded.write_bytes(encode_file_plan(plan, 48 * 1024, fs))
    (tmp_path / "c").mkdir()
    (tmp_path / "py").mkdir()
    proc = subprocess.run([str(kvwear_fs), str(tmp_path / "c"), str(encoded)], capture_output=True, check=True)
    c = parse_fs_report(proc.stdout, "kvwear-fs")
    py = play_file_ops(plan, tmp_path / "py", fsync=True, write_bytes=48 * 1024, fstrim_interval_s=None,
                       mount_point=tmp_path)
    want = {k: v for k, v in asdict(py).items() if not k.startswith("fstrim")}
    assert {k: getattr(c, k) for k in want} == want
    assert (c.rows, c.fstrims, c.end_file_bytes, c.end_files) == (plan.num_rows, 0, counts.end_live_bytes,
                                                                   counts.end_files)
    assert (c.write_calls, c.files_created, c.unlinked_bytes) == (counts.write_calls, counts.creates,
                                                                  counts.unlink_bytes)
    left = {p.name: p.stat().st_size for p in (tmp_path / "c").iterdir()}
    assert left == {p.name: p.stat().st_size for p in (tmp_path / "py").iterdir()} and len(left) == counts.end_files
    data = next((tmp_path / "c").iterdir()).read_bytes()
    assert len(set(data[:4096])) > 200                     # pseudo-random bytes, not zeros or a short pattern


def test_kvwear_fs_names_the_row_it_failed_on(kvwear_fs: Path, tmp_path: Path) -> None:
    plan = tmp_path / "bad.plan"
    plan.write_text("kvwear-fs-plan 1 4096 1 0 2\n0.0 w 10 a.pt\n1.0 u 0 gone.pt\n")
    proc = subprocess.run([str(kvwear_fs), str(tmp_path), str(plan)], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and proc.stdout == ""      # no report: a run is complete or it is not
    assert "row 2 (u gone.pt, 0 bytes): stat: No such file or directory" in proc.stderr
    plan.write_text("kvwear-fs-plan 2 4096 1 0 0\n")
    proc = subprocess.run([str(kvwear_fs), str(tmp_path), str(plan)], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "plan version 2, this tool plays version 1" in proc.stderr


def test_the_plan_and_report_formats() -> None:
    plan, _ = file_plan()
    text = encode_file_plan(plan, 65536, FsParams(filesystem="xfs", discard="fstrim", fstrim_interval_s=30.0,
                                                  fsync=False)).decode()
    first, *rows = text.splitlines()
    assert first == f"kvwear-fs-plan 1 65536 0 30.0 {plan.num_rows}" and len(rows) == plan.num_rows
    assert rows[0].split()[1:3] == ["w", str(plan.column("length_bytes")[0].as_py())]
    spaced = plan.set_column(plan.schema.get_field_index("name"), "name",
                             pa.array(["a b.pt"] * plan.num_rows))
    with pytest.raises(KvwearError, match=r"row 1: file name 'a b.pt' is not one plain word"):
        encode_file_plan(spaced, 65536, FsParams(filesystem="ext4"))
    good = {"tool": "kvwear-fs", "plan_version": 1, "rows": 1, "file_write_bytes": 5, "file_read_bytes": 0,
            "write_calls": 1, "files_created": 1, "files_unlinked": 0, "unlinked_bytes": 0, "fsyncs": 1,
            "fstrims": 0, "fstrim_bytes": 0, "end_files": 1, "end_file_bytes": 5, "elapsed_s": 0.1}
    assert parse_fs_report(json.dumps(good).encode(), "r").file_write_bytes == 5
    with pytest.raises(KvwearError, match="field fsyncs: expected a non-negative number"):
        parse_fs_report(json.dumps({**good, "fsyncs": -1}).encode(), "r")
    with pytest.raises(KvwearError, match="not JSON"):
        parse_fs_report(b"kvwear-fs: plan: row 3: ...", "r")


# ---------------------------------------------------------------------------------------------
# refusals, before anything is created or booted


def test_an_unknown_or_unsupported_file_system_is_refused_naming_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(KvwearError, match=r"device qemu: option filesystem: must be one of ext4, xfs, f2fs, "
                                          r"got 'btrfs'"):
        open_device(DeviceSpec("qemu", options={"filesystem": "btrfs"}), tmp_path)
    with pytest.raises(KvwearError, match=r"device femu: option discard: must be one of online, none, fstrim"):
        open_device(DeviceSpec("femu", options={"filesystem": "ext4", "discard": "async"}), tmp_path)
    assert not list(tmp_path.iterdir())


def test_an_image_without_the_tools_or_a_drive_too_small_is_refused(tmp_path: Path) -> None:
    """A guest image built before the fs layout (no kvwear-fs, no mkfs tools) is refused naming the
    tool and the command that rebuilds it; xfs on a drive below 300 MiB is refused naming the sizes."""
    old = tmp_path / "old-guest"
    old.mkdir()
    for name in ("vmlinuz", "initrd.img"):
        (old / name).write_bytes(b"")
    (old / "stamp").write_text(f"fio=3.33-3\n{tool_stamp_line('kvwear-dw')}\n")
    work = tmp_path / "work"
    with pytest.raises(GuestError, match=rf"has no kvwear-fs .*build-guest.sh {old}"):
        open_device(DeviceSpec("qemu", options={"filesystem": "ext4", "guest_dir": str(old)}), work)
    (old / "stamp").write_text(f"{tool_stamp_line('kvwear-fs')}\ntools mkfs.ext4 mkfs.xfs\n")
    with pytest.raises(GuestError, match=r"has no mkfs.f2fs \(its tools: mkfs.ext4, mkfs.xfs\): install it"):
        open_device(DeviceSpec("qemu", options={"filesystem": "f2fs", "guest_dir": str(old)}), work)
    # the drive: the plan's 200 MiB and the file system's share beside it, 250 MiB
    with pytest.raises(KvwearError, match=r"filesystem=xfs needs a device of at least 314,572,800 bytes "
                                          r".*this one has 262,144,000"):
        open_device(DeviceSpec("qemu", capacity_bytes=200 * MiB, options={"filesystem": "xfs", "guest_dir": str(old)}),
                    work)
    assert not work.exists()                                # no drive image made for a refused device


def test_preflight_takes_the_fs_layout_on_the_guest_backends() -> None:
    from kvwear.harness.pipeline.config import DeviceConfig, ReplaySettings, RunConfig
    from kvwear.harness.pipeline.preflight import preflight

    cfg = RunConfig()
    cfg = replace(cfg, tiers=replace(cfg.tiers, ssd_bytes=1 << 30), replay=ReplaySettings(layout="fs"))
    for kind in ("qemu", "femu"):
        preflight(replace(cfg, device=DeviceConfig(kind=kind, options={"filesystem": "ext4"})), replay=True)
    with pytest.raises(KvwearError, match=r"replay\.layout fs: the device must make a file system .*qemu, femu"):
        preflight(replace(cfg, device=DeviceConfig(kind="qemu")), replay=True)


# ---------------------------------------------------------------------------------------------
# real guest boots


@pytest.fixture(scope="module")
def guest_image() -> GuestImage:
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not found (Debian package qemu-system-x86)")
    try:
        return build_guest()
    except GuestError as exc:
        pytest.skip(f"the guest image cannot be built: {exc}")


BOOTS = [("ext4", "online"), ("ext4", "none"), ("xfs", "online"), ("xfs", "none"), ("f2fs", "fstrim")]


@pytest.fixture(scope="module", params=BOOTS, ids=[f"{f}-{d}" for f, d in BOOTS])
def played(request: pytest.FixtureRequest, guest_image: GuestImage,
           tmp_path_factory: pytest.TempPathFactory) -> tuple[ReplayResult, FilePlanCounts, pa.Table]:
    """One guest boot per (file system, discard): the workload's file plan on a fresh drive."""
    filesystem, discard = request.param
    d = tmp_path_factory.mktemp(f"qemu-{filesystem}-{discard}")
    dev = open_device(DeviceSpec("qemu", capacity_bytes=CAPACITY_BYTES, options={
        "filesystem": filesystem, "discard": discard, "fstrim_interval_s": FSTRIM_INTERVAL_S}), d)
    assert isinstance(dev, GuestDevice)
    plan, counts = file_plan()
    try:
        res = dev.replay(plan, d / "replay")
        # the guest's namespace: the plan's capacity and the file system's share beside it
        assert dev.capacity_bytes() == CAPACITY_BYTES and dev.identity().capacity_bytes == DRIVE_BYTES
    finally:
        dev.close()
    return res, counts, plan


@pytest.mark.guest
def test_identities_at_every_level(played: tuple[ReplayResult, FilePlanCounts, pa.Table]) -> None:
    res, counts, plan = played
    f = res.files
    assert f is not None
    checks = fs_checks(f, counts)
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert f.file_write_bytes == f.object_write_bytes == counts.object_write_bytes > 0
    assert f.fsyncs == counts.writes and f.mkfs_block.write_bytes > 0
    # fsync on: every file byte reached the drive, plus the file system's journal and metadata
    assert f.block.write_bytes >= f.file_write_bytes and f.overhead_bytes == f.block.write_bytes - f.file_write_bytes
    assert res.write_bytes == f.block.write_bytes and f.kernel.startswith("6.") and f.mkfs_command.endswith("nvme0n1")
    assert f.mount_options == ("discard" if f.discard == "online" else "nodiscard")
    if f.discard == "online":
        assert f.block.discard_bytes > 0                  # unlinking freed blocks: the drive was told
    elif f.discard == "none":
        assert f.block.discard_bytes == 0
    else:
        # a trim before the first row at or past each multiple of the interval (t_s = row index)
        t = plan.column("t_s").to_pylist()
        assert f.fstrims == len({int(x // FSTRIM_INTERVAL_S) for x in t if x >= FSTRIM_INTERVAL_S}) > 0
        assert f.fstrim_interval_s == FSTRIM_INTERVAL_S and f.fstrim_bytes > 0
    print(f"\n{f.filesystem} discard={f.discard}: object {f.object_write_bytes:,} B → file {f.file_write_bytes:,} B "
          f"→ block {f.block.write_bytes:,} B (overhead {f.overhead_bytes:,} B = "
          f"{f.overhead_bytes / f.file_write_bytes:+.2%}; discarded {f.block.discard_bytes:,} B; mkfs wrote "
          f"{f.mkfs_block.write_bytes:,} B) → SMART {res.host_counts[0].bytes:,} B")


@pytest.mark.guest
def test_smart_host_bytes_are_the_block_bytes_within_one_unit(
        played: tuple[ReplayResult, FilePlanCounts, pa.Table]) -> None:
    res, _, _ = played
    f = res.files
    assert f is not None
    smart = res.details["smart"]
    assert res.host_counts[0] == HostCount(GUEST_SMART_SOURCE, smart["smart_duw_delta"] * NVME_DATA_UNIT_BYTES,
                                           NVME_DATA_UNIT_BYTES)
    # Data Units Written count 512,000-byte units, rounded up: the block bytes lie within one unit
    assert abs(res.host_counts[0].bytes - f.block.write_bytes) < NVME_DATA_UNIT_BYTES, (smart, f.block)
    assert counter_check(f.block.write_bytes, res.host_counts[0]).passed      # the estimator's check
    assert res.media is None and res.details["accel"] == "tcg"               # stock QEMU: no FTL


@pytest.mark.guest
def test_kvwear_run_with_the_fs_layout_in_the_guest(guest_image: GuestImage, tmp_path: Path) -> None:
    """`kvwear run --device qemu --layout fs --device-option filesystem=ext4` on one policy (one
    boot): the plan is files, the device measurement carries the file system's counts, every
    accounting check passes — the drive's SMART host bytes against the block bytes among them — and
    the results row and the report's file-system table have them."""
    from typer.testing import CliRunner

    from kvwear.harness.cli.main import app
    from kvwear.harness.devices.measurement import DeviceMeasurement
    from kvwear.harness.estimate.estimator import Estimate, PlanRecord
    from kvwear.harness.estimate.schema import read_results

    out = tmp_path / "run"
    # a tier smaller than what LRU writes, so the store evicts: files are unlinked and discarded
    res = CliRunner().invoke(app, [
        "run", "-o", str(out), "--device", "qemu", "--layout", "fs", "--device-option", "filesystem=ext4",
        "--policy", "lru", "--param", "sessions=3", "--param", "turns=3", "--dram", "1GB", "--ssd", "30MB"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    plan = PlanRecord.load(out / "plan" / "lru" / "plan.json")
    m = DeviceMeasurement.load(out / "device" / "lru" / "result.json")
    f = m.replay.files
    assert plan.files is not None and f is not None and plan.files.unlinks > 0
    assert f.file_write_bytes == plan.files.object_write_bytes > 0 and f.block.discard_bytes > 0
    assert m.capture is None and m.trace_on_ftl is None          # no capture of the guest's block layer
    checks = Estimate.load(out / "estimate" / "lru" / "crossval.json").checks
    acc = [c for c in checks if c.kind == "accounting"]
    assert acc and all(c.passed for c in acc), [c for c in acc if not c.passed]
    smart = [c for c in acc if c.source == GUEST_SMART_SOURCE]
    assert len(smart) == 1 and smart[0].predicted == f.block.write_bytes
    row = read_results(out / "results.parquet")[0]
    assert (row.fs_filesystem, row.fs_discard, row.fs_block_write_bytes) == ("ext4", "online", f.block.write_bytes)
    assert row.smart_write_bytes == m.replay.host_counts[0].bytes
    assert "| lru | ext4 | online | yes |" in (out / "report" / "report.md").read_text()
