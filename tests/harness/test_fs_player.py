"""kvwear's file player on real file systems on loop devices this test creates: ext4 and xfs, each
with and without online discard (and ext4 with periodic fstrim); object → file → block bytes
(the device's counters and the eBPF capture) → NAND bytes (the trace on the embedded FTL), every
identity asserted; the file system's overhead and the FTL's WAF printed (`pytest -s`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kvwear.errors import KvwearError, SafetyError
from kvwear.harness.capture import TracerUnavailable, kernel_dev_t, open_tracer
from kvwear.harness.capture.schema import BLOCK_TRACE
from kvwear.harness.devices.base import DeviceSpec, open_device
from kvwear.harness.devices.fio import FioParams, loop_device
from kvwear.harness.devices.fs_player import FsDevice, missing_for, mounted, read_fs_trace, replay_trace_on_ftl
from kvwear.harness.devices.measurement import CaptureCount, ReplayResult
from kvwear.harness.devices.safety import loop_serial
from kvwear.harness.estimate.fs_checks import fs_checks
from kvwear.harness.plan.files import FsLayoutConfig, plan_file_ops
from kvwear.harness.plan.planner import ReplayConfig
from kvwear.tables import read_table
from tests.harness.test_plan import ssd_ops

MiB = 1 << 20
DEVICE_BYTES = 320 * MiB          # mkfs.xfs refuses file systems below 300 MB
LIVE_BYTES = 120 * MiB            # the store's budget: it evicts its oldest objects beyond it

_not_root = pytest.mark.skipif(os.geteuid() != 0, reason="mkfs, mount and loop devices need root")


def root_only(test: Callable[..., None]) -> Callable[..., None]:
    """Marked `root` (pyproject's markers) and skipped, with the reason, when not root."""
    return pytest.mark.root(_not_root(test))


def needs(filesystem: str) -> pytest.MarkDecorator:
    why = missing_for(filesystem)
    return pytest.mark.skipif(why is not None, reason=f"{filesystem}: {why}")


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[str]:
    """A loop device over a sparse file of DEVICE_BYTES, detached and removed afterwards (the
    player unmounts what it mounts, also when it fails)."""
    free = shutil.disk_usage(tmp_path).free
    if free < 4 * DEVICE_BYTES:
        pytest.skip(f"{tmp_path}: {free:,} bytes free, the test wants {4 * DEVICE_BYTES:,}")
    backing = tmp_path / "fs.img"
    try:
        with loop_device(backing, DEVICE_BYTES) as dev:
            yield dev
    finally:
        backing.unlink(missing_ok=True)


def store_stream(sizes: list[int], live_budget_bytes: int, read_every: int) -> pa.Table:
    """A store's stream of objects of `sizes` written in turn, the oldest evicted while the live
    bytes exceed the budget, a read of a recent object after every `read_every`-th write."""
    rows: list[tuple[str, int, int]] = []
    live: list[int] = []
    live_bytes = 0
    for i, size in enumerate(sizes):
        while live_bytes + size > live_budget_bytes:
            old = live.pop(0)
            live_bytes -= sizes[old]
            rows.append(("evict", old, 0))
        rows.append(("write", i, size))
        live.append(i)
        live_bytes += size
        if i % read_every == read_every - 1:
            rows.append(("read", live[-2], 0))
    return ssd_ops(rows)


def workload(n: int = 600, seed: int = 7) -> pa.Table:
    """Objects of 64 KiB – 1 MiB within LIVE_BYTES (store_stream)."""
    rng = np.random.default_rng(seed)
    return store_stream((rng.integers(16, 257, n) * 4096).tolist(), LIVE_BYTES, 10)


def play(dev: str, tmp_path: Path, filesystem: str, discard: str, *, fsync: bool = True,
         capture: bool = False, write_bytes: int = MiB, n: int = 600,
         **extra: object) -> tuple[ReplayResult, CaptureCount | None, pa.Table | None]:
    options = {"filesystem": filesystem, "discard": discard, "fsync": fsync, **extra}
    device = open_device(DeviceSpec("block", dev, options=options), tmp_path)
    assert isinstance(device, FsDevice)
    try:
        plan, _ = plan_file_ops(workload(n), ReplayConfig(capacity_bytes=device.capacity_bytes(), layout="fs"),
                                fs=FsLayoutConfig(model="test-model", write_bytes=write_bytes))
        tracer = None
        if capture:
            tracer = open_tracer("auto")
            try:
                tracer.start(kernel_dev_t(dev), tmp_path / "trace.parquet")
            except TracerUnavailable as exc:
                pytest.skip(f"eBPF capture unavailable: {exc}")
        try:
            res = device.replay(plan, tmp_path)
        finally:
            c = tracer.stop() if tracer is not None else None
    finally:
        device.close()
    if c is None:
        return res, None, None
    count = CaptureCount(tracer=c.tracer, events=c.events, lost_events=c.lost_events,
                         bytes_by_op=dict(c.bytes_by_op), requests_by_op=dict(c.requests_by_op),
                         unmatched_completions=c.unmatched_completions, no_completion=c.no_completion,
                         drained=bool(c.extra.get("flushed", True)), parquet_path=str(c.parquet_path))
    return res, count, read_table(BLOCK_TRACE, c.parquet_path)


def assert_identities(res: ReplayResult, capture: CaptureCount | None, trace: pa.Table | None,
                      tmp_path: Path, label: str) -> None:
    f = res.files
    assert f is not None
    _, plan = plan_file_ops(workload(), ReplayConfig(capacity_bytes=DEVICE_BYTES, layout="fs"))
    nand = None
    if trace is not None:
        on_ftl = replay_trace_on_ftl(trace, DEVICE_BYTES, tmp_path / "ftl")
        nand = on_ftl.replay.media
    checks = fs_checks(f, plan, capture, nand, on_ftl.expected_host_bytes if trace is not None else None)
    failed = [c for c in checks if not c.passed]
    assert not failed, failed
    assert capture is None or (len(checks) >= 8 and nand is not None)
    waf = f"{nand.waf:.3f}" if nand is not None and nand.waf else "-"
    print(f"\n{label}: object {f.object_write_bytes:,} B → file {f.file_write_bytes:,} B → block "
          f"{f.block.write_bytes:,} B (overhead {f.overhead_bytes:,} B = "
          f"{f.overhead_bytes / f.file_write_bytes:+.2%}; discarded {f.block.discard_bytes:,} B, "
          f"fstrim {f.fstrims}×) → NAND {nand.media_bytes if nand else '-'} B, FTL WAF {waf}; "
          f"checks {len(checks)} passed")


@root_only
@pytest.mark.parametrize("filesystem", [pytest.param("ext4", marks=needs("ext4")),
                                        pytest.param("xfs", marks=needs("xfs")),
                                        pytest.param("f2fs", marks=needs("f2fs"))])
@pytest.mark.parametrize("discard", ["online", "none"])
def test_identities_at_every_level(loop: str, tmp_path: Path, filesystem: str, discard: str) -> None:
    res, capture, trace = play(loop, tmp_path, filesystem, discard, capture=True)
    f = res.files
    assert f is not None and f.filesystem == filesystem and f.discard == discard
    assert f.mount_options == ("discard" if discard == "online" else "nodiscard")   # f2fs discards by default
    assert f.files_created == f.fsyncs == 600 and f.mkfs_block.write_bytes > 0
    assert f.block.write_bytes > f.file_write_bytes            # fsync: data plus journal/metadata
    if discard == "online":
        # unlinking freed every evicted file's blocks: the device was told of (nearly) all of them
        assert f.block.discard_bytes >= 0.9 * f.unlinked_bytes
    assert_identities(res, capture, trace, tmp_path, f"{filesystem} discard={discard}")


@root_only
@needs("ext4")
def test_periodic_fstrim_and_no_fsync(loop: str, tmp_path: Path) -> None:
    res, _, _ = play(loop, tmp_path, "ext4", "fstrim", fsync=False, fstrim_interval_s=200.0)
    f = res.files
    assert f is not None and f.fsyncs == 0
    # afap time: t_s is the row, so fstrim runs before rows 200, 400, …
    rows = plan_file_ops(workload(), ReplayConfig(capacity_bytes=DEVICE_BYTES, layout="fs"))[0].num_rows
    assert f.fstrims == (rows - 1) // 200 and f.fstrim_interval_s == 200.0
    assert f.fstrim_bytes > 0 and f.block.discard_bytes > 0
    assert_identities(res, None, None, tmp_path, "ext4 fstrim/200 rows, no fsync")


@root_only
@needs("ext4")
def test_the_player_writes_in_the_pieces_the_plan_counted(loop: str, tmp_path: Path) -> None:
    """The plan's write size (its metadata) is the player's: 64 KiB pieces give the plan's write calls."""
    res, _, _ = play(loop, tmp_path, "ext4", "none", write_bytes=64 << 10, n=60)
    _, plan = plan_file_ops(workload(60), ReplayConfig(capacity_bytes=DEVICE_BYTES, layout="fs"),
                            fs=FsLayoutConfig(write_bytes=64 << 10))
    f = res.files
    assert f is not None and f.write_calls == plan.write_calls > 2 * plan.writes


@root_only
@needs("ext4")
def test_mkfs_goes_through_the_safety_guard(loop: str, tmp_path: Path) -> None:
    import subprocess

    subprocess.run(["mkfs.ext4", "-q", "-F", loop], check=True)          # somebody's file system
    with pytest.raises(SafetyError, match=r"ext4 filesystem.*--confirm-serial"):
        open_device(DeviceSpec("block", loop, options={"filesystem": "ext4"}), tmp_path)
    res, _, _ = play(loop, tmp_path, "ext4", "none", confirm_serial=loop_serial(loop))
    assert res.files is not None and res.files.file_write_bytes > 0
    # what kvwear made it erased on close: the device is blank to the guard again
    probe = subprocess.run(["blkid", "-p", loop], capture_output=True, text=True, check=False)
    assert probe.returncode == 2 and not probe.stdout, probe.stdout
    dev = open_device(DeviceSpec("block", loop, options={"filesystem": "ext4"}), tmp_path)
    dev.close()


def test_filesystem_options_read_by_the_one_parser() -> None:
    p = FioParams.parse({"filesystem": "xfs", "discard": "fstrim", "fstrim_interval_s": "10min",
                         "fsync": "off"}, "device block")
    assert (p.filesystem, p.discard, p.fstrim_interval_s, p.fsync) == ("xfs", "fstrim", 600.0, False)
    with pytest.raises(KvwearError, match="option filesystem: must be one of ext4, xfs, f2fs"):
        FioParams.parse({"filesystem": "btrfs"}, "device block")
    with pytest.raises(KvwearError, match="option discard: must be one of online, none, fstrim"):
        FioParams.parse({"discard": "async"}, "device block")
    assert FioParams.parse({}, "device block").filesystem is None     # raw replay stays the default


@root_only
@pytest.mark.slow
@needs("ext4")
def test_kvwear_run_with_the_fs_layout(tmp_path: Path) -> None:
    """`kvwear run --layout fs --device block:LOOP --device-option filesystem=ext4 --tracer auto`: per
    policy, the plan is files, the device measurement carries the file system's counts and the trace
    on the embedded FTL, every identity passes, the results row has the fs fields and the report
    its file-system table."""
    from typer.testing import CliRunner

    from kvwear.harness.cli.main import app
    from kvwear.harness.devices.measurement import DeviceMeasurement
    from kvwear.harness.estimate.estimator import Estimate, PlanRecord
    from kvwear.harness.estimate.schema import read_results

    out = tmp_path / "run"
    backing = tmp_path / "drive.img"
    try:
        with loop_device(backing, DEVICE_BYTES) as dev:
            res = CliRunner().invoke(app, [
                "run", "-o", str(out), "--device", f"block:{dev}", "--layout", "fs",
                "--device-option", "filesystem=ext4", "--device-option", "discard=online", "--tracer", "auto",
                "--policy", "lru", "--policy", "type-aware", "--param", "sessions=3", "--param", "turns=3",
                "--dram", "1GB", "--ssd", "250MB"])
            assert res.exit_code == 0, res.output + repr(res.exception)
    finally:
        backing.unlink(missing_ok=True)
    rows = {r.policy: r for r in read_results(out / "results.parquet")}
    blocks: dict[str, int] = {}
    for label in ("lru", "type-aware"):
        plan = PlanRecord.load(out / "plan" / label / "plan.json")
        assert plan.files is not None and (out / "plan" / label / "file_ops.parquet").exists()
        m = DeviceMeasurement.load(out / "device" / label / "result.json")
        f = m.replay.files
        assert f is not None and m.trace_on_ftl is not None and m.capture is not None
        assert f.file_write_bytes == plan.files.object_write_bytes > 0
        checks = Estimate.load(out / "estimate" / label / "crossval.json").checks
        acc = [c for c in checks if c.kind == "accounting"]
        assert acc and all(c.passed for c in acc), [c for c in acc if not c.passed]
        names = {c.name for c in acc}
        assert {"file bytes = object bytes", "capture write bytes = device counters",
                "FTL host bytes = trace pages", "block bytes ≥ file bytes (fsync)"} <= names
        row = rows[label]
        assert row.fs_filesystem == "ext4" and row.fs_discard == "online"
        assert row.file_write_bytes == f.file_write_bytes and row.fs_overhead_bytes == f.overhead_bytes
        assert row.fs_ftl_waf is not None and row.fs_ftl_waf >= 1.0
        assert f"| {label} | ext4 | online | yes |" in (out / "report" / "report.md").read_text()
        # the recorded trace: versioned, with what made it, replayable on other drives without hardware
        trace, prov = read_fs_trace(out / "device" / label / "fs_trace.parquet")
        assert (prov.filesystem, prov.discard, prov.fsync, prov.device_bytes) == ("ext4", "online", True, DEVICE_BYTES)
        assert prov.kernel == os.uname().release and prov.fs_tools.startswith("mke2fs ")
        assert "-b 4096" in prov.mkfs_command and prov.mount_options == "discard"
        writes = trace.filter(pc.equal(pc.cast(trace.column("op"), pa.string()), "write"))
        assert pc.sum(writes.column("length_bytes")).as_py() == f.block.write_bytes      # the trace is whole
        again = replay_trace_on_ftl(trace, DEVICE_BYTES, tmp_path / f"again-{label}")
        assert again.replay.media == m.trace_on_ftl.media                                 # deterministic
        roomy = replay_trace_on_ftl(trace, DEVICE_BYTES, tmp_path / f"roomy-{label}", options={"op_ratio": 0.28})
        assert roomy.replay.media is not None and roomy.replay.media.host_bytes == again.replay.media.host_bytes
        blocks[label] = f.block.write_bytes
        print(f"\n{label}: file {f.file_write_bytes:,} B, block {f.block.write_bytes:,} B, overhead "
              f"{f.overhead_bytes / f.file_write_bytes:+.2%}, FTL WAF {row.fs_ftl_waf:.3f}")
    # the projections are of the bytes the drive receives: the block bytes, file-system overhead included
    per_day = {k: rows[k].host_bytes_per_day for k in blocks}
    assert per_day["lru"] and per_day["type-aware"]
    assert per_day["lru"] / per_day["type-aware"] == pytest.approx(blocks["lru"] / blocks["type-aware"], rel=1e-9)


def test_preflight_pairs_the_fs_layout_with_a_file_system() -> None:
    from dataclasses import replace

    from kvwear.harness.pipeline.config import DeviceConfig, ReplaySettings, RunConfig
    from kvwear.harness.pipeline.preflight import preflight

    cfg = RunConfig()
    cfg = replace(cfg, tiers=replace(cfg.tiers, ssd_bytes=1 << 30))
    with pytest.raises(KvwearError, match=r"replay\.layout fs: the device must make a file system"):
        preflight(replace(cfg, replay=ReplaySettings(layout="fs")), replay=True)
    blk = DeviceConfig(kind="block", target="/dev/kvwear-no-such-device", options={"filesystem": "xfs"})
    with pytest.raises(KvwearError, match="filesystem=xfs plays file plans: add --layout fs"):
        preflight(replace(cfg, device=blk), replay=True)
    with pytest.raises(KvwearError, match="no such device"):      # paired: on to the device's own checks
        preflight(replace(cfg, device=blk, replay=ReplaySettings(layout="fs")), replay=True)
    # placement handles are the file system's business: refused before the simulation, not after it
    with pytest.raises(KvwearError, match=r"replay\.placement kind: the fs layout leaves placement"):
        preflight(replace(cfg, device=blk, replay=ReplaySettings(layout="fs", placement="kind")), replay=True)


@root_only
@needs("ext4")
def test_a_full_file_system_fails_naming_the_row_and_leaves_no_mount(loop: str, tmp_path: Path) -> None:
    """Live objects the device holds but its file system (journal, inode tables) does not: ENOSPC
    names the file_ops row and says why; the mount is gone and the device closes clean."""
    rows = [("write", i, 8 * MiB) for i in range(DEVICE_BYTES // (8 * MiB) - 1)]       # 312 MiB live
    plan, _ = plan_file_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=DEVICE_BYTES, layout="fs"))
    device = open_device(DeviceSpec("block", loop, options={"filesystem": "ext4"}), tmp_path)
    try:
        with pytest.raises(KvwearError, match=r"file_ops row \d+ \(write kvwear@.*No space left.*file system is full"):
            device.replay(plan, tmp_path)
        assert isinstance(device, FsDevice) and device.last_mount_point is not None
        point = str(device.last_mount_point)
        assert point not in Path("/proc/self/mountinfo").read_text()
        assert not device.last_mount_point.exists()                           # the mount point is removed too
    finally:
        device.close()


def test_a_recorded_trace_without_or_with_bad_provenance_is_refused(tmp_path: Path) -> None:
    import json

    import pyarrow.parquet as pq

    from kvwear.errors import InputError
    from kvwear.harness.devices.fs_player import FS_TRACE, FS_TRACE_PROVENANCE_KEY
    from kvwear.tables import write_table

    rows = FS_TRACE.conform(pa.table({"t_s": [0.0], "op": ["write"], "offset_bytes": [0], "length_bytes": [4096],
                                      "obj_kind": ["fs"], "obj_id": [0], "placement_handle": pa.array([0], pa.int8())}))
    bare = write_table(FS_TRACE, rows, tmp_path / "bare.parquet")
    with pytest.raises(KvwearError, match=r"bare\.parquet: an fs_trace without its provenance"):
        read_fs_trace(bare)
    meta = {**(rows.schema.metadata or {}), FS_TRACE_PROVENANCE_KEY: json.dumps({"filesystem": "ext4"}).encode()}
    pq.write_table(rows.replace_schema_metadata(meta), tmp_path / "half.parquet")
    with pytest.raises((KvwearError, InputError), match=r"half\.parquet: field provenance\.discard: missing"):
        read_fs_trace(tmp_path / "half.parquet")


@root_only
@needs("ext4")
def test_a_mount_left_behind_is_named_on_the_bodys_error(loop: str, tmp_path: Path) -> None:
    """The body fails while a file on the mount is open: the unmount fails too, and the body's error
    carries a note naming the mount to unmount by hand (the test then unmounts it)."""
    import subprocess

    subprocess.run(["mkfs.ext4", "-F", "-q", loop], check=True)
    busy = None
    point: Path | None = None
    try:
        with pytest.raises(RuntimeError, match="body failed") as failed, mounted(loop, "ext4", "nodiscard") as point:
            busy = (point / "open-file").open("w")
            raise RuntimeError("body failed")
        assert point is not None
        assert [n for n in failed.value.__notes__ if f"cannot unmount {point}" in n and "unmount it by hand" in n]
    finally:
        if busy is not None:
            busy.close()
        if point is not None and point.exists():
            subprocess.run(["umount", str(point)], check=False)
            point.rmdir()
