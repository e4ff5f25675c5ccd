"""Never fill the host: backing files are sparse, a replay whose writes cannot fit the host file
system is refused before any write with the numbers, and the backing file the run created is gone
when the device stage ends (kept only with keep_image=true) — on a small tmpfs the test mounts."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from kvwear.errors import KvwearError
from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.fio import FioDevice, plan_written_bytes
from kvwear.harness.pipeline.config import config_from_mapping
from kvwear.harness.pipeline.run import run
from kvwear.harness.plan.schema import BLOCK_OPS

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("fio") is None, reason="needs root and fio")


def block_ops(rows: list[tuple[str, int, int]]) -> pa.Table:
    n = len(rows)
    return BLOCK_OPS.conform(pa.table({
        "t_s": [float(i) for i in range(n)], "op": [r[0] for r in rows],
        "offset_bytes": pa.array([r[1] for r in rows], pa.int64()),
        "length_bytes": pa.array([r[2] for r in rows], pa.int64()),
        "obj_kind": ["full"] * n, "obj_id": pa.array(range(n), pa.int64())}))


def test_plan_written_bytes_is_the_union_of_write_extents() -> None:
    k = 4096
    plan = block_ops([("write", 0, 4 * k), ("write", 2 * k, 4 * k), ("read", 20 * k, 8 * k), ("write", 10 * k, k),
                      ("trim", 0, 4 * k), ("write", 10 * k, k), ("write", 6 * k, k)])
    assert plan_written_bytes(plan) == 7 * k + k          # [0, 7) and [10, 11) pages
    assert plan_written_bytes(block_ops([("read", 0, k)])) == 0


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


@needs_root
def test_a_run_that_cannot_fit_the_host_is_refused_before_writing(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "16m") as small:
        img = small / "drive.img"
        cfg = config_from_mapping({
            "model": "kimi-k3", "policies": ["lru"], "tiers": {"dram": "1GB", "ssd": "400MB"},
            "workload": {"generator": "multi-round", "params": {"sessions": 3, "turns": 3}, "seed": 3},
            "device": {"kind": "file", "target": str(img)}})
        t0 = time.monotonic()
        with pytest.raises(KvwearError, match=r"drive.img: refusing to write: the plan writes [\d,]+ bytes of this "
                                              r"sparse file \(0 already allocated\) and its file system has [\d,]+ "
                                              r"bytes free, short by [\d,]+; free space there"):
            run(cfg, tmp_path / "run", report=False)
        assert time.monotonic() - t0 < 60
        assert not img.exists() and list(small.iterdir()) == []          # nothing left behind
        assert not (tmp_path / "run" / "device" / "lru" / "result.json").exists()


@needs_root
def test_the_backing_file_goes_when_the_device_closes_unless_kept(tmp_path: Path) -> None:
    plan = block_ops([("write", 0, 1 << 20), ("write", 3 << 20, 1 << 20)])
    for keep in (False, True):
        img = tmp_path / f"d{keep}.img"
        dev = FioDevice(DeviceSpec("file", str(img), capacity_bytes=8 << 20,
                                   options={"keep_image": keep}), tmp_path)
        assert img.stat().st_size == 8 << 20 and img.stat().st_blocks == 0          # sparse
        res = dev.replay(plan, tmp_path)
        assert res.write_bytes == 2 << 20 and img.stat().st_blocks * 512 <= 2 << 20
        dev.close()
        assert img.exists() == keep
    # a file that was there before is the user's: never deleted
    mine = tmp_path / "mine.img"
    os.truncate(mine, 8 << 20) if mine.exists() else mine.write_bytes(b"\0" * (8 << 20))
    dev = FioDevice(DeviceSpec("file", str(mine), capacity_bytes=8 << 20,
                               options={"confirm_overwrite": str(mine)}), tmp_path)
    dev.close()
    assert mine.exists()


@needs_root
def test_a_qemu_drive_that_cannot_fit_is_refused_before_the_guest_boots(tmp_path: Path) -> None:
    from kvwear.emulator.guest import GuestNotBuiltError, find_guest
    from kvwear.harness.devices.qemu import GuestDevice

    try:
        find_guest()
    except GuestNotBuiltError:
        pytest.skip("no guest image (scripts/build-guest.sh)")
    plan = block_ops([("write", i << 20, 1 << 20) for i in range(32)])
    with tmpfs(tmp_path / "small", "16m") as small:
        dev = GuestDevice(DeviceSpec("qemu", capacity_bytes=64 << 20), small)
        img = small / "qemu-nvme.img"
        assert img.stat().st_size == 64 << 20 and img.stat().st_blocks == 0
        t0 = time.monotonic()
        with pytest.raises(KvwearError, match=r"refusing to write: the plan writes 33,554,432 bytes of this sparse "
                                              r"drive image"):
            dev.replay(plan, small)
        assert time.monotonic() - t0 < 5 and dev.last_run is None        # no guest was started
        dev.close()
        assert list(small.iterdir()) == []


@needs_root
def test_an_empty_plan_issues_nothing(tmp_path: Path) -> None:
    """A policy that never wrote to the SSD plans no I/O; fio would refuse the empty iolog."""
    dev = FioDevice(DeviceSpec("file", str(tmp_path / "e.img"), capacity_bytes=1 << 20), tmp_path)
    res = dev.replay(block_ops([]), tmp_path)
    assert res.write_bytes == res.read_bytes == res.write_ios == 0 and res.details["empty_plan"]
    dev.close()
    assert not (tmp_path / "e.img").exists()
