"""kvwear.harness.devices.safety: pure parsers and verdicts, then real loop devices this test creates over files
in its temp dir (blank: accepted; ext4: refused, accepted with the right serial, refused with a
wrong one; mounted: refused; partitioned: refused). Every loop device is detached on teardown."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kvwear.errors import InputError, SafetyError
from kvwear.harness.devices.fio import loop_device
from kvwear.harness.devices.safety import (
    DeviceFacts,
    assess,
    check_block_device,
    inspect_block_device,
    loop_serial,
    parse_blkid_export,
    parse_mountinfo,
    parse_swaps,
    signatures_from_blkid,
)

root_only = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("losetup") is None,
                               reason="needs root and losetup to create loop devices")

MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
35 22 0:31 / /sys/kernel/tracing rw,nosuid - tracefs nodev rw
40 22 7:3 / /mnt/with\\040space rw - ext4 /dev/loop3 rw
"""


def test_parse_mountinfo() -> None:
    m = parse_mountinfo(MOUNTINFO)
    assert [(e.dev, e.mount_point, e.fstype, e.source) for e in m] == [
        ((254, 0), "/", "ext4", "/dev/vda"), ((0, 31), "/sys/kernel/tracing", "tracefs", "nodev"),
        ((7, 3), "/mnt/with space", "ext4", "/dev/loop3")]
    with pytest.raises(InputError, match=r"mountinfo:2"):
        parse_mountinfo("22 1 254:0 / / rw - ext4 /dev/vda rw\ngarbage\n")


def test_parse_swaps_and_blkid() -> None:
    swaps = "Filename\tType\tSize\tUsed\tPriority\n/dev/sda2 partition 1000 0 -2\n/swap\\040file file 5 0 -3\n"
    assert parse_swaps(swaps) == ["/dev/sda2", "/swap file"]
    probe = parse_blkid_export("DEVNAME=/dev/loop1\nUUID=ab-cd\nBLOCK_SIZE=4096\nTYPE=ext4\nUSAGE=filesystem\n")
    assert signatures_from_blkid(probe) == ["ext4 filesystem"]
    assert signatures_from_blkid(parse_blkid_export("PTUUID=1234\nPTTYPE=dos\n")) == ["dos partition table"]
    assert signatures_from_blkid({}) == []


def test_assess_verdicts() -> None:
    blank = DeviceFacts("/dev/loop9", "loop9", (7, 9), "loop:254:0:42")
    assert assess(blank) is blank
    busy = DeviceFacts("/dev/nvme0n1", "nvme0n1", (259, 0), "S123", partitions=("nvme0n1p1",),
                       mounted=("nvme0n1p1 on /data (xfs)",), signatures=("gpt partition table",))
    with pytest.raises(SafetyError) as err:
        assess(busy)
    msg = str(err.value)
    for part in ("mounted: nvme0n1p1 on /data (xfs)", "has partitions: nvme0n1p1",
                 "gpt partition table", "--confirm-serial S123"):
        assert part in msg
    assert assess(busy, confirm_serial="S123") is busy
    with pytest.raises(SafetyError, match="does not match"):
        assess(busy, confirm_serial="S999")
    noserial = DeviceFacts("/dev/x", "x", (1, 1), None, signatures=("ext4 filesystem",))
    with pytest.raises(SafetyError, match="reports no serial"):
        assess(noserial)


def test_the_running_system_disk_is_refused() -> None:
    st = os.stat("/")
    dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not dev.exists():
        pytest.skip("root filesystem is not on a block device here")
    path = f"/dev/{dev.resolve().name}"
    if not Path(path).exists():
        pytest.skip(f"{path} has no device node")
    with pytest.raises(SafetyError, match=r"root filesystem|mounted"):
        check_block_device(path)


def test_a_regular_file_is_not_a_block_device(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(InputError, match="not a block device"):
        check_block_device(str(tmp_path / "f"))


# -- real loop devices ------------------------------------------------------------------------


@root_only
def test_blank_loop_is_accepted(tmp_path: Path) -> None:
    with loop_device(tmp_path / "blank.img", "16MiB") as dev:
        facts = check_block_device(dev)
        assert facts.problems == []
        st = os.stat(tmp_path / "blank.img")
        assert facts.serial == loop_serial(dev) == f"loop:{os.major(st.st_dev)}:{os.minor(st.st_dev)}:{st.st_ino}"


@root_only
def test_ext4_loop_refused_unless_serial_confirmed(tmp_path: Path) -> None:
    with loop_device(tmp_path / "ext4.img", "32MiB") as dev:
        subprocess.run(["mkfs.ext4", "-q", "-F", dev], check=True, capture_output=True)
        with pytest.raises(SafetyError) as err:
            check_block_device(dev)
        assert "ext4 filesystem" in str(err.value)
        serial = inspect_block_device(dev).serial
        assert serial is not None and f"--confirm-serial {serial}" in str(err.value)
        assert check_block_device(dev, confirm_serial=serial).signatures == ("ext4 filesystem",)
        with pytest.raises(SafetyError, match="does not match"):
            check_block_device(dev, confirm_serial="loop:0:0:1")


@root_only
def test_mounted_loop_is_refused(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with loop_device(tmp_path / "m.img", "32MiB") as dev:
        subprocess.run(["mkfs.ext4", "-q", "-F", dev], check=True, capture_output=True)
        subprocess.run(["mount", dev, str(mnt)], check=True, capture_output=True)
        try:
            with pytest.raises(SafetyError, match=rf"mounted: loop\d+ on {mnt} \(ext4\)"):
                check_block_device(dev)
        finally:
            subprocess.run(["umount", str(mnt)], check=True, capture_output=True)


def write_mbr(path: Path, start_lba: int, sectors: int) -> None:
    """One Linux (0x83) primary partition in a DOS partition table, written into our own file."""
    entry = struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", start_lba, sectors)
    with open(path, "r+b") as fh:
        fh.seek(446)
        fh.write(entry)
        fh.seek(510)
        fh.write(b"\x55\xaa")


@root_only
def test_partitioned_loop_is_refused(tmp_path: Path) -> None:
    img = tmp_path / "p.img"
    with open(img, "wb") as fh:
        fh.truncate(16 << 20)
    write_mbr(img, 2048, 8192)
    with loop_device(img, partscan=True) as dev:
        # The partscan at attach time does not always register the partition here; partx adds it.
        if not list(Path(f"/sys/class/block/{Path(dev).name}").glob("*p1")):
            subprocess.run(["partx", "-a", dev], check=True, capture_output=True)
        facts = inspect_block_device(dev)
        name = Path(dev).name
        assert facts.partitions == (f"{name}p1",)
        assert "dos partition table" in facts.signatures
        with pytest.raises(SafetyError, match=rf"has partitions: {name}p1"):
            check_block_device(dev)
