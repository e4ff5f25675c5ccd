"""Host-side fallback: the kernel's per-disk write counters (`psutil.disk_io_counters(perdisk=True)`,
i.e. /proc/diskstats sectors written × 512), for devices with no usable SMART source (a loop
device, a plain file's disk).

These count what the block layer completed on the whole disk — every writer's I/O, not only the
benchmark's — so take deltas over a quiet interval. They know nothing of NAND writes. The reader
does not use the command runner (there is no command); the counter source is injectable instead.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kvwear.errors import InputError
from kvwear.harness.wear._decode import ReaderUnavailable
from kvwear.harness.wear.base import READERS, CommandRunner, WearReader, WearSample

CountersFn = Callable[[], Mapping[str, Any]]


def parse_disk_counters(counters: Mapping[str, Any], disk: str,
                        source: str = "psutil.disk_io_counters") -> WearSample:
    """The sample for `disk` (a kernel disk name, e.g. 'nvme0n1', 'loop3') from psutil's
    per-disk mapping of `sdiskio` tuples."""
    if disk not in counters:
        names = ", ".join(sorted(counters)) or "none"
        raise ReaderUnavailable(f"{source}: no counters for disk {disk!r} (known: {names})")
    c = counters[disk]
    try:
        wb, wc = int(c.write_bytes), int(c.write_count)
    except (AttributeError, TypeError, ValueError):
        raise InputError(source, None, f"{disk}.write_bytes", f"not a disk counter record: {c!r}") from None
    if wb < 0 or wc < 0:
        raise InputError(source, None, f"{disk}.write_bytes", f"negative counter: {c!r}")
    return WearSample(source="psutil", host_bytes_written=wb, host_write_commands=wc,
                      raw=f"{disk}: {c!r}", note="block-layer counters of the whole disk (all writers)")


def disk_name_for(path: str | os.PathLike[str]) -> str:
    """Kernel disk name for a block device path (symlinks resolved), or for the disk under a
    regular file (via /sys/dev/block/MAJ:MIN)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise ReaderUnavailable(f"{p}: no such device or file") from None
    if stat.S_ISBLK(st.st_mode):
        dev = st.st_rdev
    elif stat.S_ISREG(st.st_mode):
        dev = st.st_dev
    else:
        raise ReaderUnavailable(f"{p}: neither a block device nor a regular file (psutil counts disks)")
    sysdir = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not sysdir.exists():
        raise ReaderUnavailable(f"{p}: device {os.major(dev)}:{os.minor(dev)} has no block-layer "
                                "entry (tmpfs/overlay?)")
    return sysdir.resolve().name


def psutil_reader(counters_fn: CountersFn | None = None) -> WearReader:
    """The `psutil` reader; `counters_fn` defaults to psutil.disk_io_counters(perdisk=True)."""

    def read(device_path: str, runner: CommandRunner) -> WearSample:
        del runner   # no command: the kernel counters are read in-process
        if counters_fn is None:
            import psutil

            counters: Mapping[str, Any] = psutil.disk_io_counters(perdisk=True, nowrap=True) or {}
        else:
            counters = counters_fn()
        return parse_disk_counters(counters, disk_name_for(device_path))

    return read


READERS.add("psutil", psutil_reader())
