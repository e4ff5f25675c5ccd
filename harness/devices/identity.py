"""The identity of a plain file or block device from the kernel, for the run manifest: its size
(`os.stat`, the BLKGETSIZE64 ioctl), its logical block size and sysfs model/serial/firmware
(`path_identity`). An NVMe drive's identify data is parsed in `kvwear.harness.wear.identify`.

This module reads only; it never opens a device for writing.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from pathlib import Path
from typing import Any

from kvwear.errors import InputError
from kvwear.harness.wear.identify import DeviceIdentity

BLKGETSIZE64 = 0x80081272   # _IOR(0x12, 114, size_t) on 64-bit Linux


# ---------------------------------------------------------------------------------------------
# plain files and block devices


def _sysfs_block_dir(st: os.stat_result, block_device: bool) -> Path | None:
    dev = st.st_rdev if block_device else st.st_dev
    p = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    return p if p.exists() else None


def _logical_block_size(sysdir: Path | None) -> int | None:
    if sysdir is None:
        return None
    # A partition has no queue/ of its own: its parent disk's applies.
    for q in (sysdir / "queue" / "logical_block_size", sysdir.resolve().parent / "queue" / "logical_block_size"):
        if q.exists():
            return int(q.read_text().strip())
    return None


def path_identity(path: str | os.PathLike[str]) -> DeviceIdentity:
    """Identity of a plain file (kind 'file': its size, the block size of the disk under it) or a
    block device (kind 'block': BLKGETSIZE64, sysfs logical_block_size, sysfs model/serial)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise InputError(str(p), None, None, f"cannot look it up: {exc.strerror}") from None
    if stat.S_ISBLK(st.st_mode):
        try:
            with open(p, "rb") as fh:       # read-only open: the ioctl needs a descriptor
                buf = fcntl.ioctl(fh.fileno(), BLKGETSIZE64, b"\0" * 8)
        except OSError as exc:
            raise InputError(str(p), None, None, f"cannot read its size: {exc.strerror} "
                             f"(run kvwear as root, or as a user with access to the device)") from None
        size = struct.unpack("<Q", buf)[0]
        sysdir = _sysfs_block_dir(st, True)
        extra: dict[str, Any] = {"dev": f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"}
        model = serial = firmware = None
        if sysdir is not None:
            dev_dir = sysdir / "device"
            model = _read_opt(dev_dir / "model")
            serial = _read_opt(dev_dir / "serial")
            firmware = _read_opt(dev_dir / "firmware_rev")
            backing = _read_opt(sysdir / "loop" / "backing_file")
            if backing:
                extra["loop_backing_file"] = backing
        return DeviceIdentity(kind="block", path=str(p), model=model, serial=serial, firmware=firmware,
                              capacity_bytes=size, logical_block_bytes=_logical_block_size(sysdir),
                              extra=extra)
    if stat.S_ISREG(st.st_mode):
        sysdir = _sysfs_block_dir(st, False)
        return DeviceIdentity(kind="file", path=str(p), capacity_bytes=st.st_size,
                              logical_block_bytes=_logical_block_size(sysdir),
                              extra={"dev": f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"})
    raise InputError(str(p), None, None, "neither a regular file nor a block device")


def _read_opt(p: Path) -> str | None:
    try:
        return p.read_text().strip() or None
    except OSError:
        return None
