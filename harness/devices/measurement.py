"""What a device stage measured: one typed record every backend fills and the estimator reads.

A backend's `replay` returns a `ReplayResult`: what its player issued (write, read and trim bytes
and I/Os), how it handled the plan's trims (`TrimCount`), the drive's own counts where the drive
has them — its media (NAND) writes and so its WAF (`MediaCount`), other counters of the host bytes
it received (`HostCount`: SMART Data Units Written read inside a guest, an emulator's page
counter), the bytes per placement handle (`HandleCount`) and an FDP statistics log's deltas
(`FdpLogCount`) — the drive behind the counts and the replay's phases where the backend
preconditions and plays until steady state (`DrivePhases`) — and notes for the report. The
device stage adds the identity, the eBPF capture's counts (`CaptureCount`) and the wear readers'
deltas, and writes the whole as `DeviceMeasurement`
(device/LABEL/result.json, a versioned record, kvwear.records).

The estimator checks each count against the plan by what the record says about it (its source
name, its unit), never by the backend's name: a new backend fills these fields and gets its checks.
`details` holds what a backend reports for people only (fio's rates and latencies, a guest's boot
time, an FTL's erase counts): no stage reads it.

Must not: run anything or parse tool output (the backends and kvwear.harness.wear do).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from kvwear.harness.capture.base import CountsByOp
from kvwear.harness.wear.identify import DeviceIdentity
from kvwear.harness.wear.snapshot import WearDelta
from kvwear.records import dump, load


class TrimMode(StrEnum):
    """How a player handled the plan's trims."""

    NONE = "none"            # the plan had none
    NATIVE = "native"        # issued in their place (the FTL, kvwear-dw, a fio that replays iolog trims)
    DEFERRED = "deferred"    # after each segment's reads and writes (fio 3.33 drops iolog trims)
    SKIPPED = "skipped"      # dropped knowingly (skip_trims, or a player that cannot trim)


@dataclass(frozen=True)
class TrimCount:
    """The plan's trims at the player: what it read from the plan and what it did with them (the
    bytes it issued are `ReplayResult.trim_bytes`)."""

    mode: TrimMode
    planned_bytes: int               # trim bytes the player read from the plan
    superseded_bytes: int = 0        # deferred: planned bytes rewritten later in their segment, not issued
    skipped_ops: int = 0             # plan trims not issued (mode skipped)

    @classmethod
    def native(cls, trim_bytes: int) -> TrimCount:
        return cls(TrimMode.NATIVE if trim_bytes else TrimMode.NONE, trim_bytes)


@dataclass(frozen=True)
class HostCount:
    """The host bytes one of the drive's own counters saw, besides what the player issued."""

    source: str                      # e.g. "smart-duw (guest)", "femu smart-vendor-bytes"
    bytes: int
    unit_bytes: int = 1              # the counter's unit; NVMe Data Units Written: 512,000 B, rounded up


@dataclass(frozen=True)
class MediaCount:
    """The drive's own count of what it received and what it wrote to its media over the replay."""

    source: str                      # e.g. "kvwear-ftl", "femu smart-vendor-bytes", "fdp-stats-log-22h"
    host_bytes: int
    media_bytes: int

    @property
    def relocated_bytes(self) -> int:
        return self.media_bytes - self.host_bytes

    @property
    def waf(self) -> float | None:
        return self.media_bytes / self.host_bytes if self.host_bytes else None


@dataclass(frozen=True)
class HandleCount:
    """Write bytes per placement handle: the plan's, and the device's (or its player's) count."""

    measured_by: str
    plan_write_bytes: tuple[int, ...]
    host_bytes: tuple[int, ...]
    media_bytes: tuple[int, ...] | None = None       # with a last slot for a shared GC frontier
    media_bytes_erased: int | None = None


@dataclass(frozen=True)
class FdpLogCount:
    """An FDP statistics log (22h) around the replay."""

    host_bytes: int
    media_bytes: int
    media_bytes_erased: int
    # what a drive without an FTL (stock QEMU's reclaim-unit accounting) must count for this plan
    media_bytes_expected: int | None = None


@dataclass(frozen=True)
class Span:
    """Host and NAND bytes of a stretch of a replay (or of preconditioning)."""

    host_bytes: int
    nand_bytes: int
    rounds: int = 0

    @property
    def waf(self) -> float | None:
        return self.nand_bytes / self.host_bytes if self.host_bytes else None


@dataclass(frozen=True)
class BlockDelta:
    """A block device's own counters (/sys/dev/block/M:m/stat) over a stretch: bytes and requests
    per direction, as the kernel counted them at completion (sectors of 512 B)."""

    write_bytes: int
    write_ios: int
    read_bytes: int
    read_ios: int
    discard_bytes: int
    discard_ios: int
    flush_ios: int


@dataclass(frozen=True)
class FileSystemCount:
    """A file-layout replay on a real file system (kvwear.harness.devices.fs_player), one level
    below the objects: what the plan asked (object bytes), what the player's write() calls wrote
    (file bytes), what the block device received over the mount (block bytes, from its own
    counters), and the difference — the file system's overhead (journal, metadata, allocation
    rounding; negative when files were unlinked before their data was written back)."""

    filesystem: str                  # ext4 | xfs | f2fs
    discard: str                     # online (mount -o discard) | none | fstrim (periodic)
    fsync: bool                      # each file fsync'ed after its writes
    fstrim_interval_s: float | None  # discard=fstrim: the interval on the plan's clock (t_s)
    mkfs_command: str
    mount_options: str
    fs_tools: str                    # the mkfs tool's version line
    kernel: str
    object_write_bytes: int          # the plan's (FilePlanCounts.object_write_bytes)
    file_write_bytes: int            # what the player's write() calls wrote
    file_read_bytes: int
    write_calls: int
    files_created: int               # files the player created (a rewrite truncates its file)
    files_unlinked: int
    unlinked_bytes: int              # sizes of the files unlinked
    fsyncs: int
    end_files: int                   # files in the store's directory at unmount
    end_file_bytes: int              # their sizes
    fstrims: int
    fstrim_bytes: int                # what fstrim reported it trimmed
    block: BlockDelta                # mount → unmount (the replay: the capture's window)
    mkfs_block: BlockDelta           # what making the file system wrote and discarded (not in `block`)
    overhead_bytes: int              # block.write_bytes − file_write_bytes

    @property
    def overhead_ratio(self) -> float | None:
        """Block bytes written per file byte (1 + overhead share)."""
        return self.block.write_bytes / self.file_write_bytes if self.file_write_bytes else None


@dataclass(frozen=True)
class TraceOnFtlCount:
    """A file-layout replay's captured block trace played on the embedded FTL (the `sim` drive
    `drive`): the NAND bytes the file system's writes and discards cost there, and the host bytes
    the FTL's page accounting must show for the trace (its writes' pages × page size)."""

    drive: str
    media: MediaCount
    expected_host_bytes: int


@dataclass(frozen=True)
class DrivePhases:
    """The drive behind a replay's counts and the phases of the replay, from a backend that
    preconditions the drive and plays the plan in passes until the workload's own steady state (the
    sim backend). Every count of the ReplayResult covers all `passes`; preconditioning's bytes are
    in none of them, only here."""

    preset: str | None                 # the drive preset (None: a geometry given by options)
    drive_note: str                    # how the preset was scaled to the run's capacity
    precondition: str                  # none | fill | steady
    precondition_bytes: Span | None    # everything preconditioning wrote (host, NAND)
    precondition_gc_bytes: int
    precondition_steady: bool | None   # steady: whether its random rounds reached PTS's steady state
    precondition_rounds: int
    passes: int                        # whole passes of the plan the workload played
    stopped: str                       # why the replay stopped (steady state, max rounds, one pass)
    rounds: int                        # whole rounds of the workload
    round_bytes: int
    steady_reached: bool               # PTS's criterion held (kvwear.emulator.precondition)
    steady_round: int | None           # 0-based round closing the first window where it held
    steady_from_round: int | None      # the steady state's first round: the transient cut by MSER
    transient: Span                    # the rounds before steady_from_round
    steady: Span | None                # every whole round from it on (None: fewer rounds than a window)
    last_window: Span
    window_rounds: int


@dataclass(frozen=True)
class ReplayResult:
    """What a backend issued for one plan and what the drive counted. Bytes are what the backend
    itself counted (fio's io_bytes, the FTL's host pages × page size), not the plan's numbers."""

    device: str
    tool: str                                    # e.g. "fio-3.33", "kvwear-ftl", "kvwear-dw 1"
    write_bytes: int
    read_bytes: int
    trim_bytes: int                              # issued
    write_ios: int
    read_ios: int
    wall_s: float
    trims: TrimCount
    media: MediaCount | None = None              # where the drive counts its media writes
    host_counts: tuple[HostCount, ...] = ()
    handles: HandleCount | None = None
    fdp_log: FdpLogCount | None = None
    no_placement: MediaCount | None = None       # the same plan on the same drive without handles
    placement_unavailable: str | None = None     # why handles the plan carries were not played
    phases: DrivePhases | None = None            # preconditioning and passes (None: one pass as is)
    files: FileSystemCount | None = None         # a file-layout replay: files → file system → blocks
    notes: tuple[str, ...] = ()                  # for the report, verbatim
    tool_output_path: str | None = None          # raw output kept in the run directory
    # host and NAND bytes per interval (cumulative host_bytes, nand_bytes), where the backend counts them
    intervals_path: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)   # for people only (module docstring)

    @property
    def nand_write_bytes(self) -> int | None:
        return self.media.media_bytes if self.media is not None else None

    @property
    def waf(self) -> float | None:
        return self.media.waf if self.media is not None else None


@dataclass(frozen=True)
class CaptureCount(CountsByOp):
    """What the eBPF capture counted around the replay."""

    tracer: str
    events: int
    lost_events: int
    bytes_by_op: Mapping[str, int]
    requests_by_op: Mapping[str, int]
    unmatched_completions: int
    no_completion: int
    drained: bool                    # the tracer confirmed its last events reached the file
    parquet_path: str


@dataclass(frozen=True)
class DeviceMeasurement:
    """device/LABEL/result.json: the replay, who the device is, the capture and the wear deltas."""

    KIND: ClassVar[str] = "device_result"
    VERSION: ClassVar[int] = 3     # 3: DrivePhases.steady is every round after an MSER-cut transient

    replay: ReplayResult
    identity: DeviceIdentity
    capture: CaptureCount | None = None
    wear: tuple[WearDelta, ...] = ()
    wear_unsupported: Mapping[str, str] = field(default_factory=dict)   # reader → why it had no sample
    trace_on_ftl: TraceOnFtlCount | None = None   # a file-layout replay's block trace on the embedded FTL

    def measured_waf(self) -> tuple[float | None, int | None, str | None]:
        """(WAF, media bytes, source): the drive's own media count, else the first wear reader that
        counts both host and media bytes, else nothing."""
        m = self.replay.media
        if m is not None and m.waf is not None:
            return m.waf, m.media_bytes, m.source
        for w in self.wear:
            if w.nand_bytes and w.host_bytes:
                return w.nand_bytes / w.host_bytes, w.nand_bytes, f"wear:{w.source}"
        return None, None, None

    def dump(self, path: Path) -> Path:
        return dump(self, path)

    @classmethod
    def load(cls, path: Path) -> DeviceMeasurement:
        return load(cls, path)
