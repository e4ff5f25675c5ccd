"""The wear-reader plugin family: pure parsers fed by an injected command runner.

A reader turns one tool's output into a `WearSample`; running the tool is the runner's job
(`CommandRunner`), so parsers are tested on recorded outputs and runners on real devices.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from kvwear.children import system_argv
from kvwear.registry import Registry

NVME_DATA_UNIT_BYTES = 512_000   # NVMe "data unit": 1000 × 512 bytes, counters round up


@dataclass(frozen=True)
class WearSample:
    """One reading of one source. Absent counters are None; bytes are cumulative totals."""

    source: str                               # reader name
    host_bytes_written: int | None = None
    nand_bytes_written: int | None = None
    percentage_used: float | None = None
    data_units_written: int | None = None
    host_write_commands: int | None = None
    raw: str = ""                             # the tool's own output (text, or hex of binary)
    supported: bool = True                    # False: the device/tool refused this source
    note: str = ""                            # why unsupported (the tool's message), or a caveat


# A runner takes argv and returns stdout bytes; it raises on failure.
CommandRunner = Callable[[Sequence[str]], bytes]


def run_command(argv: Sequence[str]) -> bytes:
    """The real runner: subprocess, checked, stdout captured."""
    return subprocess.run(system_argv(argv), check=True, capture_output=True, timeout=120).stdout


# A reader is a plain function: (device path, runner) -> WearSample.
WearReader = Callable[[str, CommandRunner], WearSample]

# Modules that register readers. Adding a reader = its module + one line here.
READERS: Registry[WearReader] = Registry("wear reader", modules=[
    f"kvwear.harness.wear.{m}" for m in ("fdp", "femu", "intel", "nvme_smart", "ocp", "psutil_disk", "smartctl")])


class CounterSource(StrEnum):
    """The log a drive's own host and media byte counts were read from (the source a device
    measurement names, kvwear.harness.devices.measurement): FEMU's SMART vendor bytes or its stats
    log C0h (kvwear.harness.wear.femu), or the NVMe FDP statistics log 22h (kvwear.harness.wear.fdp: an
    FDP drive, FEMU HEAD's FDP FTL, stock QEMU's FDP drive)."""

    SMART_VENDOR_BYTES = "smart-vendor-bytes"
    STATS_LOG_C0H = "stats-log-c0h"
    FDP_STATS_LOG_22H = "fdp-stats-log-22h"
