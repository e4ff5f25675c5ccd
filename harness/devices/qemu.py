"""The `qemu` and `femu` device backends: play a block_ops plan inside a QEMU guest on an emulated
NVMe drive, with fio at iodepth 1, and read the drive's SMART log before and after.

`qemu`: Debian's QEMU with `-device nvme` backed by a raw file this backend creates (`spec.target`,
or `qemu-nvme.img` in the work directory). Stock QEMU counts host writes (SMART Data Units
Written, host write commands; both start at zero in every QEMU process and ignore Write Zeroes
and Deallocate) but has no FTL: its WAF is 1 by construction, so `nand_write_bytes`/`waf` stay None.

`femu`: a FEMU binary the user supplies (option `femu_binary`, else $KVWEAR_FEMU_BINARY) in
black-box mode with a `FemuGeometry` (option `femu`, a table of its fields). FEMU keeps the data in
its own memory, so every replay starts on an empty FTL (one FEMU process per replay); its vendor
SMART counters (host / GC-relocated 4 KiB pages) give `nand_write_bytes` and `waf` exactly, and
with FDP on, where FEMU HEAD's FDP FTL leaves them at zero, its FDP statistics log (media / host
bytes; `femu_counter_source` names which).

Each replay boots one guest (kvwear.emulator.guest.run_guest): the plan becomes a fio iolog v3
(kvwear.harness.devices.fio_iolog.export_iolog_v3), fio replays it on /dev/nvme0n1 with direct I/O. A plan that
places writes on placement handles (`[replay] placement` other than none, some write on a handle
> 0) is played instead by kvwear's directive-write tool kvwear-dw (emulator/kvwear_dw.c, plan
format kvwear.harness.devices.directive_plan) with each write's handle in its data placement directive, on a
drive with NVMe Flexible Data Placement on (kvwear.emulator.guest.FdpConfig; `fdp_nruh` handles, default
the plan's largest handle + 1): stock QEMU ≥ 8.0 (`nvme-subsys` with `fdp`) or a FEMU build with
`femu-subsys`. The tool plays trims itself (Dataset Management), so no deferred segments. Before and
after, the guest reads the FDP statistics log (22h: host / media bytes written → DLWA,
`ReplayResult.fdp_log`) and the reclaim unit handle status (RUAMW per handle, in `details`);
`ReplayResult.handles` holds the plan's and the tool's write bytes per handle (the estimator's
per-handle accounting checks). An emulator without FDP (Debian 12's QEMU 7.2) refuses such a plan,
naming its version, unless `drop_handles` is set: then fio plays the plan with plain writes and the
result says so (`placement_unavailable`). Option `player`: auto (the tool
when the plan carries handles, else fio), fio, or kvwear-dw (the tool even without handles: plain
writes). iodepth defaults to
1 because Debian's QEMU 7.2 NVMe controller can stall at iodepth > 1; a run whose guest kernel
logged NVMe timeouts raises (kvwear.emulator.guest.GuestIOTimeoutError) and is never reported. Every
guest output (fio JSON, SMART json/binary/smartctl, dmesg, exit codes) is kept under
`<workdir>/guest/`.

The fs layout (option `filesystem` = ext4 | xfs | f2fs, with discard, fstrim_interval_s, fsync:
the shared kvwear.harness.devices.fs_player.FsParams): the replay's plan is a FILE_OPS plan. The
guest makes the file system on its drive with the host player's mkfs command (counting mkfs's own
writes apart from its block counters around it), takes the first SMART snapshot, reads the drive's
block counters (/sys/block/nvme0n1/stat), mounts it with the host player's options, and kvwear's
guest file player kvwear-fs (emulator/kvwear_fs.c; plan and report:
kvwear.harness.devices.guest_files) plays the rows as the host's player does; then it unmounts,
reads the counters again and takes the second snapshot. `ReplayResult.files` is the same
FileSystemCount as on the host (object → file → block bytes; kvwear.harness.estimate.fs_checks),
and the drive's SMART host bytes, one level below, are checked against the block bytes. An image
without kvwear-fs or the file system's mkfs is refused before anything is created
(kvwear.emulator.guest.require_tool). No eBPF capture sees the guest's block layer, so no block
trace is played on the embedded FTL; FEMU's own counters give the NAND bytes.

Options (`GuestParams`, DeviceSpec.options; other names are refused with the list): serial, cache
(none|writeback), drive_options (extra QEMU -drive options, e.g. throttling.bps-write=… to give the
drive a real drive's speed), qemu_args (extra QEMU arguments, shell-quoted, e.g. "-L
/opt/femu/pc-bios"), accel (tcg|kvm|auto), cpus, memory_mib, boot_timeout_s, job_timeout_s,
io_timeout_s, iodepth (1), ioengine (libaio), trim_segment_ops / trim_segment_bytes (a plan with
TRIM on the guest's fio 3.33, which drops iolog trims, runs in segments: fio per segment, then the
guest's blkdiscard per trim range, as in kvwear.harness.devices.fio; `timed` holds across segments too:
each waits for its plan time), skip_trims (False: drop the plan's trims knowingly), precondition
(none|fill: one sequential pass over the drive before the first snapshot; not steady, whose minutes
of random writes run only on the host's fio), guest_dir, qemu_binary (else $KVWEAR_QEMU_BINARY, else
qemu-system-x86_64 on PATH), femu_binary, femu (a table of
FemuGeometry fields, or flat `femu.<field>` keys as `--device-option femu.nchs=4` gives them),
player (auto|fio|kvwear-dw), drop_handles (False), fdp_nruh, fdp_runs_bytes (stock QEMU's reclaim
unit size), fdp_nru (FEMU's reclaim units), keep_image (False), filesystem, discard,
fstrim_interval_s, fsync (the fs layout, above). Text values from the command line are accepted.

Never fills the host: a stock QEMU drive's image is created sparse; before the guest boots, the host
file system must have room for every byte the plan writes (the union of its write extents; the
whole drive with precondition=fill or a file system) beyond what the image already allocates, else the replay is
refused with the numbers (kvwear.harness.devices.fio.check_host_room). An image this backend created is
deleted when the device closes (the device stage ends, finished or failed) unless keep_image=true.
A FEMU drive keeps its data in FEMU's memory and has no image.

This module never writes outside the drive image it created (or was pointed at as a regular
file) and never parses tool output itself (kvwear.harness.devices.fio_runner and kvwear.harness.wear
do).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.emulator.guest import (
    FDP_QEMU_SCRIPT,
    GUEST_DEVICE,
    GUEST_DW_MAX_IO_BYTES,
    GUEST_MAX_IO_BYTES,
    Accel,
    CacheMode,
    DriveConfig,
    FdpConfig,
    FemuGeometry,
    GuestConfig,
    GuestJob,
    GuestRun,
    emulator_version,
    fdp_qemu_prefix,
    find_guest,
    require_tool,
    run_guest,
    supports_fdp,
)
from kvwear.errors import KvwearError
from kvwear.exclusive import claim_file
from kvwear.harness.devices import fio_runner as fiolib
from kvwear.harness.devices.base import (
    DEVICES,
    Backend,
    Capabilities,
    DeviceSpec,
    FixedCapacity,
    ReplayProgress,
    mark_created,
    option,
    transient_image,
)
from kvwear.harness.devices.deferred_trims import DEFAULT_SEGMENT_OPS, PlanSegment, device_segments, trim_accounting
from kvwear.harness.devices.directive_plan import (
    DW_TOOL,
    DwReport,
    encode_plan,
    handle_accounting,
    parse_report,
    report_details,
)
from kvwear.harness.devices.fio import ROOM_FIX, check_host_room, plan_written_bytes, remove_created
from kvwear.harness.devices.fio_iolog import export_iolog_v3
from kvwear.harness.devices.fs_player import FsParams, fs_drive_bytes
from kvwear.harness.devices.guest_files import (
    FS_TOOL,
    encode_file_plan,
    guest_file_counts,
    job_env,
    parse_fs_report,
)
from kvwear.harness.devices.measurement import (
    FdpLogCount,
    HandleCount,
    HostCount,
    MediaCount,
    ReplayResult,
    TrimCount,
    TrimMode,
)
from kvwear.harness.devices.safety import check_file_target
from kvwear.harness.plan.files import FILE_OPS, object_write_bytes, planned_write_bytes
from kvwear.harness.plan.placement import plan_handles
from kvwear.harness.wear._decode import hexdump
from kvwear.harness.wear.base import NVME_DATA_UNIT_BYTES, CounterSource
from kvwear.harness.wear.fdp import parse_fdp_stats_binary, parse_ruh_status_binary
from kvwear.harness.wear.femu import (
    FEMU_PAGE_BYTES,
    STATS_LOG_BYTES,
    is_femu,
    parse_femu_counters,
    parse_femu_stats_log,
    sample_from_femu,
    sample_from_femu_stats_log,
)
from kvwear.harness.wear.identify import DeviceIdentity, identity_from_nvme, parse_id_ctrl_json, parse_id_ns_json
from kvwear.harness.wear.nvme_smart import parse_smart_log_binary, parse_smart_log_json, sample_from_smart_log
from kvwear.harness.wear.snapshot import delta
from kvwear.tables import read_table

if TYPE_CHECKING:
    from kvwear.emulator.ftl import FtlConfig, FtlCounters

DEFAULT_QEMU_BYTES = 256 * 2**20
BLOCK_BYTES = 512
FEMU_BINARY_ENV = "KVWEAR_FEMU_BINARY"
QEMU_BINARY_ENV = "KVWEAR_QEMU_BINARY"     # a stock QEMU other than the one on PATH (e.g. ≥ 8.0 for FDP)


@dataclass(frozen=True)
class GuestParams(FsParams):
    """The `qemu` and `femu` backends' options (module docstring); the fs layout's are FsParams',
    shared with the block backend."""

    serial: str = "kvwear0001"
    cache: str = "none"                    # none | writeback (kvwear.emulator.guest.DriveConfig checks)
    accel: str = "tcg"                     # tcg | kvm | auto (kvwear.emulator.guest.GuestConfig checks)
    cpus: int = option(1, ge=1)
    memory_mib: int = option(512, ge=1)
    boot_timeout_s: float = option(120.0, gt=0)
    job_timeout_s: float = option(600.0, gt=0)
    io_timeout_s: int = option(15, ge=1)
    iodepth: int = option(1, ge=1)
    ioengine: str = option("libaio", choices=fiolib.IOENGINES)
    skip_trims: bool = False
    trim_segment_ops: int = option(DEFAULT_SEGMENT_OPS, ge=1)
    trim_segment_bytes: int | None = option(None, gt=0)
    keep_image: bool = False
    # the guest's fill only: fio's steady-state detector runs minutes of random writes on the host
    precondition: Literal["none", "fill"] = "none"
    guest_dir: str | None = None
    qemu_binary: str | None = None         # None: $KVWEAR_QEMU_BINARY, else qemu-system-x86_64
    femu_binary: str | None = None
    # confirm_serial: `kvwear run` passes it to every backend; a drive we create needs none
    confirm_serial: str | None = None
    confirm_overwrite: str | None = None
    drive_options: str = ""
    qemu_args: str = ""
    player: Literal["auto", "fio", "kvwear-dw"] = "auto"
    drop_handles: bool = False
    fdp_nruh: int | None = option(None, ge=0)      # None or 0: the plan's largest handle + 1
    fdp_runs_bytes: int | None = option(None, gt=0)
    fdp_nru: int | None = option(None, ge=0)
    femu: Mapping[str, Any] = option(default_factory=dict)    # FemuGeometry fields (also femu.FIELD=…)


QEMU_FDP_RUNS_BYTES = 96 * 2**20     # nvme-subsys fdp.runs default (QEMU 8.0 … 10.0)


def stock_qemu_fdp_media_bytes(plan: pa.Table, *, max_io_bytes: int, ru_bytes: int,
                               lba_bytes: int = BLOCK_BYTES) -> int:
    """The media bytes stock QEMU's FDP statistics (log 22h MBMW) count for `plan` played by
    kvwear-dw in commands of at most `max_io_bytes`. QEMU has no FTL: MBMW is the host bytes, plus,
    each time a write command reaches the end of its handle's open reclaim unit of `ru_bytes`, the
    part of that unit the command filled once more (QEMU's handle update counts the unit's remaining
    RUAMW as unwritten media before the write's consumption of it is subtracted; measured on QEMU
    10.0.2, tests/harness/test_qemu_dw.py). Exact, so its DLWA above 1 is accounted, not a finding."""
    w = pc.equal(plan.column("op").cast(pa.string()), "write").to_numpy(zero_copy_only=False)
    h = plan_handles(plan)[w]
    ln = plan.column("length_bytes").to_numpy(zero_copy_only=False)[w].astype(np.int64)
    # the commands kvwear-dw issues: each row in max_io pieces, the last one shorter
    pieces = -(-ln // max_io_bytes)
    row = np.repeat(np.arange(ln.size), pieces)
    k = np.arange(row.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    cmd = np.minimum(ln[row] - k * max_io_bytes, max_io_bytes) // lba_bytes
    ru = ru_bytes // lba_bytes
    extra = 0
    for handle in np.unique(h):
        c = cmd[h[row] == handle]
        end = np.cumsum(c)
        start = end - c
        crossed = end // ru - start // ru
        hit = crossed > 0
        extra += int(((start[hit] // ru + 1) * ru - start[hit]).sum() + ((crossed[hit] - 1) * ru).sum())
    return int(ln.sum()) + extra * lba_bytes


# the source name of the SMART Data Units Written the guest reads around the replay
GUEST_SMART_SOURCE = "smart-duw (guest)"


def host_observation_note(cache: str, femu: bool = False) -> str:
    """What host-side eBPF on the block device holding the drive image can and cannot see."""
    if femu:
        return ("FEMU keeps the emulated drive's data in its own memory: no host block device sees the "
                "guest's writes, so host-side eBPF observes nothing of them. Use the guest's fio counts and "
                "FEMU's SMART counters (host and GC pages) instead.")
    common = ("Host-side eBPF on the device backing the image sees QEMU's writes to a file, not the "
              "guest's NVMe commands: the host filesystem adds its own metadata and journal writes, first "
              "writes into the sparse image allocate extents, and guest Deallocate (TRIM) is not passed "
              "down (QEMU's default discard=ignore). ")
    if cache == "writeback":
        return common + ("With cache=writeback QEMU writes into the host page cache: the block layer sees "
                         "the kernel's later writeback, merged into large requests, reordered, delayed by "
                         "seconds, and rewrites of a still-dirty page collapse into one write. Request "
                         "counts, sizes and timing at the host do not match the guest's; only long-run byte "
                         "totals approach the guest's (minus collapsed rewrites, plus filesystem overhead).")
    return common + ("With cache=none QEMU opens the image with O_DIRECT: each guest write becomes one "
                     "host write of the same size and offset within the file, so host request counts and "
                     "bytes map about 1:1 to the guest's (iodepth 1 leaves nothing to merge); exceptions are "
                     "splits at the host queue's max_sectors_kb and the filesystem's own writes.")


def smart_deltas(before_bin: bytes, after_bin: bytes, before_json: bytes | None = None,
                 after_json: bytes | None = None, source: str = "guest") -> dict[str, Any]:
    """SMART before → after from the binary logs: Data Units Written (with the byte bounds that
    rounding allows), host write commands, percentage used. nvme-cli's JSON of the same snapshots,
    when given, must agree with the binary log on those counters."""
    samples = []
    for phase, raw, js in (("before", before_bin, before_json), ("after", after_bin, after_json)):
        log = parse_smart_log_binary(raw, f"{source}/smart-{phase}.bin")
        if js is not None:
            j = parse_smart_log_json(js, f"{source}/smart-{phase}.json")
            if (j.data_units_written, j.host_write_commands) != (log.data_units_written, log.host_write_commands):
                raise KvwearError(f"SMART {phase}: nvme-cli JSON and binary logs disagree ({source})")
        samples.append(sample_from_smart_log(log, "nvme-smart-binary", hexdump(raw)))
    d = delta(samples[0], samples[1])
    return {"smart_duw_delta": d.data_units, "smart_duw_bytes_bounds": d.host_bytes_bounds,
            "smart_host_write_commands_delta": d.host_write_commands,
            "smart_percentage_used_delta": d.percentage_used,
            "smart_data_units_written_after": samples[1].data_units_written}


def femu_deltas(before_bin: bytes, after_bin: bytes, source: str = "guest", *,
                stats_before: bytes | None = None, stats_after: bytes | None = None,
                fdp_log: FdpLogCount | None = None) -> dict[str, Any]:
    """FEMU's FTL counters before → after (exact 4 KiB pages): host and GC-relocated pages, NAND
    bytes and the WAF of this interval (None if no host page). From the stats log page C0h when
    both snapshots have it and it counted host pages (newer FEMU), else from the SMART log's
    vendor bytes (FEMU HEAD and the fixtures' generation). With FDP on, FEMU HEAD's FDP FTL counts
    neither (its vendor bytes stay at zero, tests/harness/fixtures/femu-head-fdp) but its FDP
    statistics log (22h, `fdp_log`: this replay's host / media byte deltas) does: media bytes are
    the host bytes plus every GC-relocated page, so they are its NAND bytes and DLWA its WAF."""
    use_stats = False
    if stats_before is not None and stats_after is not None \
            and len(stats_before) == len(stats_after) == STATS_LOG_BYTES:
        before, after = parse_femu_stats_log(stats_before), parse_femu_stats_log(stats_after)
        use_stats = after.host_pages > before.host_pages
    if use_stats:
        assert stats_before is not None and stats_after is not None
        d = delta(sample_from_femu_stats_log(stats_before, f"{source}/femu-stats-before.bin"),
                  sample_from_femu_stats_log(stats_after, f"{source}/femu-stats-after.bin"))
    else:
        before, after = parse_femu_counters(before_bin), parse_femu_counters(after_bin)
        d = delta(sample_from_femu(before_bin, f"{source}/smart-before.bin"),
                  sample_from_femu(after_bin, f"{source}/smart-after.bin"))
    host_pages, gc_pages = after.host_pages - before.host_pages, after.gc_pages - before.gc_pages
    host_bytes, nand_bytes, waf = d.host_bytes, d.nand_bytes, d.waf
    counter_source = CounterSource.STATS_LOG_C0H if use_stats else CounterSource.SMART_VENDOR_BYTES
    if not host_pages and fdp_log is not None and fdp_log.host_bytes > 0:
        host_bytes, nand_bytes = fdp_log.host_bytes, fdp_log.media_bytes
        host_pages, gc_pages = host_bytes // FEMU_PAGE_BYTES, (nand_bytes - host_bytes) // FEMU_PAGE_BYTES
        waf, counter_source = nand_bytes / host_bytes, CounterSource.FDP_STATS_LOG_22H
    return {"femu_host_pages_delta": host_pages, "femu_gc_pages_delta": gc_pages,
            "femu_host_bytes_delta": host_bytes, "femu_nand_bytes_delta": nand_bytes, "femu_waf": waf,
            "femu_waf_word_after": after.waf_milli, "femu_page_bytes": FEMU_PAGE_BYTES,
            "femu_counter_source": counter_source}


def drive_counts(files: Mapping[str, bytes], source: str, *, femu: bool, fdp_log: FdpLogCount | None = None,
                 ) -> tuple[tuple[HostCount, ...], MediaCount | None, dict[str, Any]]:
    """The emulated drive's own counts around one guest replay, from the files the guest returned:
    SMART Data Units Written (every drive), and on FEMU its FTL's host and media pages (its SMART
    vendor bytes or stats log C0h; with FDP on, its FDP statistics log `fdp_log`). FEMU's host count
    is checked against the plan unless it was read from the FDP log, whose own check covers it.
    Returns (host counts, media count, what the reads found, for `details`)."""
    smart = smart_deltas(files["smart-before.bin"], files["smart-after.bin"], files.get("smart-before.json"),
                         files.get("smart-after.json"), source)
    counts = [HostCount(GUEST_SMART_SOURCE, smart["smart_duw_delta"] * NVME_DATA_UNIT_BYTES,
                        unit_bytes=NVME_DATA_UNIT_BYTES)]
    found: dict[str, Any] = {"smart": smart}
    media: MediaCount | None = None
    if femu:
        fd = femu_deltas(files["smart-before.bin"], files["smart-after.bin"], source,
                         stats_before=files.get("femu-stats-before.bin"), stats_after=files.get("femu-stats-after.bin"),
                         fdp_log=fdp_log)
        found["femu"] = fd
        src = f"femu {fd['femu_counter_source']}"
        if fd["femu_host_bytes_delta"]:
            media = MediaCount(src, fd["femu_host_bytes_delta"], fd["femu_nand_bytes_delta"])
        if fd["femu_counter_source"] != CounterSource.FDP_STATS_LOG_22H:
            counts.append(HostCount(src, fd["femu_host_bytes_delta"], unit_bytes=FEMU_PAGE_BYTES))
    return tuple(counts), media, found


def guest_protocol(run: GuestRun) -> int:
    """The protocol version the guest's /init announced (emulator/guest_init.sh: 2 deferred trims,
    3 kvwear-dw, 4 the fs layout); 1 for an /init that announced none."""
    value = run.events.get("protocol", "1")
    if not value.isdigit():
        raise KvwearError(f"the guest announced protocol {value!r}, not a number (outputs in {run.result_log})")
    return int(value)


def _fio_version_from_stamp(stamp: str) -> str:
    """The guest's fio version from the image stamp ('fio=3.33-3' → 'fio-3.33')."""
    m = re.search(r"^fio=(?:\d+:)?(\d+(?:\.\d+)*)", stamp, re.MULTILINE)
    return f"fio-{m.group(1)}" if m else "fio-0"


class GuestDevice:
    """A QEMU or FEMU emulated NVMe drive. Construct through `open_device(DeviceSpec)`."""

    def __init__(self, spec: DeviceSpec, workdir: Path) -> None:
        if spec.kind not in ("qemu", "femu"):
            raise KvwearError(f"GuestDevice handles kinds qemu and femu, not {spec.kind!r}")
        self.p = p = GuestParams.of(spec)
        femu_opts = dict(p.femu)
        self.spec = spec
        self.workdir = Path(workdir)
        self.fdp_nruh = p.fdp_nruh or None
        self.fdp_nru = p.fdp_nru or None
        if self.fdp_nruh is not None:
            FdpConfig(self.fdp_nruh, self.p.fdp_runs_bytes, self.fdp_nru)     # validates now, not at replay
        guest_folder = Path(p.guest_dir) if p.guest_dir else None
        self.image = find_guest(guest_folder)     # fails early, naming the build command
        # the fs layout: an image without the file player or this file system's mkfs is refused
        # now, before a drive image is created or a guest boots
        self.fs: FsParams | None = p if p.filesystem is not None else None
        if self.fs is not None:
            require_tool(self.image, FS_TOOL)
            require_tool(self.image, self.fs.mkfs()[0])
        self.femu: FemuGeometry | None = None
        if spec.kind == "femu":
            self.femu = FemuGeometry.from_options(femu_opts, "device.options.femu")
            binary = p.femu_binary or os.environ.get(FEMU_BINARY_ENV, "")
            if not binary:
                raise KvwearError(f"device femu needs a FEMU binary: device option femu_binary (--femu-binary) "
                                  f"or ${FEMU_BINARY_ENV}")
            if not os.access(binary, os.X_OK):
                raise KvwearError(f"FEMU binary {binary} is not an executable file")
            qemu_binary = binary
            size = self.femu.exposed_bytes
            cap = size if spec.capacity_bytes is None else int(spec.capacity_bytes)
            self.drive_image: Path | None = None
        else:
            if femu_opts:
                raise KvwearError(f"device qemu: FEMU geometry options {sorted(femu_opts)} need --device femu")
            qemu_binary = p.qemu_binary or os.environ.get(QEMU_BINARY_ENV, "qemu-system-x86_64")
            cap = int(spec.capacity_bytes) if spec.capacity_bytes is not None else DEFAULT_QEMU_BYTES
            # the fs layout: the plan's capacity holds the live objects; the drive also holds the
            # file system's own space, as a tier sized from a device of fixed size leaves it
            size = fs_drive_bytes(cap) if self.fs is not None else cap
            self.drive_image = Path(spec.target) if spec.target else self.workdir / "qemu-nvme.img"
        if cap <= 0 or cap > size:
            raise KvwearError(f"device {spec.kind}: capacity {cap} bytes outside the drive's {size} bytes")
        self._capacity = cap - cap % BLOCK_BYTES
        self._size = size
        if self.fs is not None:      # the guest makes the file system on the whole drive
            self.fs.check_device_bytes(size, f"device {spec.kind}")
        self.config = GuestConfig(
            # DriveConfig and GuestConfig check cache and accel, naming the valid words
            drive=DriveConfig(image=self.drive_image, serial=p.serial, cache=cast(CacheMode, p.cache),
                              femu=self.femu, drive_options=p.drive_options),
            qemu_binary=qemu_binary, accel=cast(Accel, p.accel), cpus=p.cpus,
            memory_mib=p.memory_mib, boot_timeout_s=p.boot_timeout_s,
            job_timeout_s=p.job_timeout_s, io_timeout_s=p.io_timeout_s,
            guest_folder=guest_folder, extra_args=tuple(shlex.split(p.qemu_args)))
        self.created_image: Path | None = None     # the image this backend created (deleted on close)
        self._claim = contextlib.ExitStack()
        if self.drive_image is not None:     # only once every setting has been accepted
            # a drive image kvwear did not create is refused unless confirmed; held exclusively
            if self.drive_image.is_file():       # not a file: _prepare_image refuses it
                check_file_target(str(self.drive_image), p.confirm_overwrite)
            created = self._prepare_image(self.drive_image, size)
            mark_created(self.drive_image)
            # an image a killed run created (and would have deleted) is this run's to delete
            if transient_image(self.drive_image, created, p.keep_image) or created:
                self.created_image = self.drive_image
            self._claim.enter_context(claim_file(str(self.drive_image)))
        self.fio_version = _fio_version_from_stamp(self.image.stamp)
        self._identity: DeviceIdentity | None = None
        self.last_run: GuestRun | None = None

    @staticmethod
    def _prepare_image(path: Path, size: int) -> bool:
        """Create the sparse raw image, or grow an existing regular file; never a device, never shrink.
        Returns whether it created the image."""
        if path.exists():
            if not stat.S_ISREG(path.stat().st_mode):
                raise KvwearError(f"{path}: the qemu backend needs a regular image file, not a device")
            if path.stat().st_size < size:
                os.truncate(path, size)
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "xb") as fh:
            fh.truncate(size)
        return True

    # -- DeviceBackend ----------------------------------------------------------------------

    def identity(self) -> DeviceIdentity:
        """From the guest's Identify Controller/Namespace after a replay; before, what was configured."""
        if self._identity is not None:
            return self._identity
        return DeviceIdentity(kind=self.spec.kind, path=self._path(), serial=self.config.drive.serial,
                              capacity_bytes=self._size, logical_block_bytes=BLOCK_BYTES, extra=self._extra_identity())

    def _path(self) -> str:
        return str(self.drive_image) if self.drive_image is not None else f"femu:{self.config.qemu_binary}"

    def _extra_identity(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"configured_capacity_bytes": self._capacity, "accel": self.config.accel,
                                 "guest": self.image.stamp, "emulator": self.config.qemu_binary}
        if self.femu is not None:
            extra["femu_device"] = self.femu.device_arg()
        else:
            extra["cache"] = self.config.drive.cache
        return extra

    def capacity_bytes(self) -> int:
        return self._capacity

    def host_observation_note(self) -> str:
        return host_observation_note(self.config.drive.cache, femu=self.femu is not None)

    def _placement(self, plan: pa.Table) -> tuple[bool, FdpConfig | None, bool]:
        """(play with kvwear-dw, the FDP drive to play on or None, handles dropped). Refuses a plan
        with handles on an emulator without FDP unless `drop_handles`; see the module docstring."""
        ops = plan.column("op").cast(pa.string()).to_numpy(zero_copy_only=False)
        handles = plan_handles(plan)[ops == "write"]
        placed = bool(handles.size and handles.max() > 0)
        if not placed or self.p.drop_handles:
            return self.p.player == "kvwear-dw", None, placed
        binary = self.config.qemu_binary
        if not supports_fdp(binary, self.femu is not None):
            what = ("femu-subsys" if self.femu is not None else "nvme-subsys") + " takes no fdp"
            raise KvwearError(
                f"device {self.spec.kind}: the plan places writes on {int(handles.max()) + 1} FDP handles, but "
                f"{binary} (QEMU {emulator_version(binary)}) has no NVMe Flexible Data Placement ({what}; stock "
                f"QEMU has it from 8.0, FEMU in builds with femu-subsys): use such a build (qemu_binary / "
                f"femu_binary; on Debian 12, bash {FDP_QEMU_SCRIPT} unpacks Debian's backports QEMU 10 into "
                f"{fdp_qemu_prefix()}), or set device option drop_handles=true to play the plan with plain writes "
                f"(its WAF is then the WAF without placement)")
        if self.p.player == "fio":
            raise KvwearError(f"device {self.spec.kind}: player fio cannot carry placement handles (the guest's "
                              f"{self.fio_version} has no FDP); use player auto or kvwear-dw")
        nruh = self.fdp_nruh or int(handles.max()) + 1
        if int(handles.max()) >= nruh:
            raise KvwearError(f"device {self.spec.kind}: the plan uses placement handle {int(handles.max())} but "
                              f"fdp_nruh is {nruh}")
        return True, FdpConfig(nruh, self.p.fdp_runs_bytes, self.fdp_nru), False

    def replay(self, plan: pa.Table | Path, workdir: Path, *, timed: bool = False,
               progress: ReplayProgress | None = None) -> ReplayResult:
        """Boot the guest, replay `plan` with fio at `iodepth` (or kvwear-dw, see the module
        docstring), read SMART (and FDP logs) before and after. With option `filesystem`, `plan`
        is a FILE_OPS plan (a table or its Parquet) played on a file system (`_replay_files`)."""
        workdir = Path(workdir)
        if self.fs is not None:
            return self._replay_files(plan, workdir, timed=timed, progress=progress)
        if isinstance(plan, Path):
            raise KvwearError(f"device {self.spec.kind}: {plan} is a plan file; block plans come as tables")
        fiolib.validate_plan(plan, self._capacity, block_bytes=BLOCK_BYTES)
        use_dw, fdp, dropped = self._placement(plan)
        if self.drive_image is not None:      # the guest writes into a sparse image on the host
            need = self._capacity if self.p.precondition == "fill" else plan_written_bytes(plan)
            check_host_room(self.drive_image, need, what="drive image", fix=ROOM_FIX)
        trims = fiolib.plan_lengths(plan, "trim")
        can_trim = fiolib.fio_replays_trim(self.fio_version)
        deferred = defers_trims(plan, self.p, self.fio_version, use_dw)
        logs: dict[str, fiolib.IologStats] = {}      # guest fio output name → the iolog it replayed
        segments: list[PlanSegment] = []
        settings: dict[str, int] = {}
        dw_plan = plan
        if use_dw:
            require_tool(self.image, "kvwear-dw")    # a stale image is refused by name, before booting
            # the tool plays trims itself; skip_trims drops them knowingly, as with fio
            if self.p.skip_trims and trims.size:
                dw_plan = plan.filter(pc.not_equal(plan.column("op").cast(pa.string()), "trim"))
            files = {"dw.plan": encode_plan(dw_plan, directives=fdp is not None, timed=timed)}
            if fdp is not None:
                files["job.env"] = b"KVWEAR_FDP=1\nKVWEAR_ENDGID=1\n"
        elif deferred:
            # The guest's fio drops iolog trims: per segment, fio plays the reads and writes and
            # the guest's blkdiscard then issues the trims (kvwear.harness.devices.deferred_trims).
            segments, settings = guest_trim_segments(plan, self.p, self._capacity)
            files, lines = {}, []
            t_s = plan.column("t_s").to_numpy(zero_copy_only=False)
            for k, seg in enumerate(segments):
                name = f"{k:05d}"
                if seg.ops.num_rows:
                    logs[f"fio-{name}.json"] = log = export_iolog_v3(
                        seg.ops, workdir / f"seg-{name}.iolog", include_trims=False)
                    job = fiolib.replay_job(f"seg-{name}.iolog", GUEST_DEVICE, ioengine=self.p.ioengine,
                                            iodepth=self.p.iodepth, timed=timed)
                    files[f"seg-{name}.fio"] = fiolib.render_job_file([job]).encode()
                    files[f"seg-{name}.iolog"] = log.path.read_bytes()
                if seg.trim_offsets.size:
                    files[f"trims-{name}.txt"] = "".join(
                        f"{o} {n}\n" for o, n in zip(seg.trim_offsets.tolist(), seg.trim_lengths.tolist(),
                                                      strict=True)).encode()
                start_s = float(t_s[seg.first_row] - t_s[0])
                lines.append(f"{name} {int(seg.ops.num_rows > 0)} {int(seg.trim_offsets.size > 0)} {start_s:.6f}\n")
            files["segments.txt"] = "".join(lines).encode()
            if timed:      # the guest keeps the plan's clock across segments (fio keeps it inside one)
                files["job.env"] = b"KVWEAR_TIMED=1\n"
        elif plan.num_rows == 0:
            # A policy that never touched the SSD: fio refuses an empty iolog, so the guest gets no
            # job and only takes its SMART snapshots (their delta is the measurement: zero).
            files = {}
        else:
            logs["fio.json"] = log = export_iolog_v3(plan, workdir / "replay.iolog", include_trims=can_trim)
            job = fiolib.replay_job("replay.iolog", GUEST_DEVICE, ioengine=self.p.ioengine, iodepth=self.p.iodepth,
                                    timed=timed)
            files = {"job.fio": fiolib.render_job_file([job]).encode(), "replay.iolog": log.path.read_bytes()}
        if self.p.precondition == "fill":
            fill = fiolib.seq_fill_job(GUEST_DEVICE, self._capacity, loops=1, ioengine=self.p.ioengine,
                                       iodepth=self.p.iodepth, name="precondition")
            files["precondition.fio"] = fiolib.render_job_file([fill]).encode()
        config = replace(self.config, drive=replace(self.config.drive, fdp=fdp))
        t0 = time.perf_counter()
        run = run_guest(config, GuestJob(files), workdir / "guest")
        wall = time.perf_counter() - t0
        if progress is not None:           # one guest boot plays the whole plan
            progress(1, 1)
        self.last_run = run
        outdir = workdir / "guest"
        for name, data in run.files.items():
            (outdir / name).write_bytes(data)
        # smartctl's status is a bit mask; only newer FEMU answers the stats log C0h.
        failed = {k: v for k, v in run.exit_codes.items()
                  if v != 0 and not k.startswith(("smartctl", "femu-stats"))}
        if failed:
            stderr = "".join(run.files.get(f, b"").decode(errors="replace")[-500:]
                             for f in ("fio-stderr.txt", "dw-stderr.txt", "stderr.txt"))
            raise KvwearError(f"guest commands failed {failed} (outputs in {outdir}): {stderr}")
        self._identity = self._identity_from_run(run)
        if fdp is not None and not self._identity.extra.get("fdp_supported"):
            raise KvwearError(f"{self.config.qemu_binary} took fdp=on but its controller does not report FDP "
                              f"(Identify Controller CTRATT bit 19; outputs in {outdir}): its FDP logs cannot be read")
        if deferred and guest_protocol(run) < 2:
            raise KvwearError(f"the guest image in {self.image.kernel.parent} predates deferred trims (its /init "
                              "ignored segments.txt): rebuild it with scripts/build-guest.sh")
        details: dict[str, Any] = {"player": "kvwear-dw" if use_dw else "fio"}
        handles: HandleCount | None = None
        fdp_log: FdpLogCount | None = None
        if use_dw:
            if "dw.json" not in run.files:
                raise KvwearError(f"the guest returned no dw.json (outputs in {outdir}; its /init predates "
                                  f"kvwear-dw: rebuild it with scripts/build-guest.sh)")
            rep = parse_report(run.files["dw.json"], str(outdir / "dw.json"))
            counts = (rep.write_bytes, rep.read_bytes, rep.trim_bytes, rep.write_cmds, rep.read_cmds)
            tool, tool_output = DW_TOOL, str(outdir / "dw.json")
            details.update(report_details(rep))
            if fdp is not None:
                handles = handle_accounting(plan, rep)
                fdp_log, ruh_status = self._fdp_log(plan, rep, fdp, run, str(outdir))
                details.update({"fdp_nruh": fdp.nruh, "fdp_ruh_status": ruh_status})
            planned_trim = int(trims.sum())
            trim_count = (TrimCount(TrimMode.SKIPPED, planned_trim, skipped_ops=int(trims.size))
                          if dw_plan is not plan else TrimCount.native(rep.trim_bytes))
        else:
            parts = []
            for name, log in logs.items():
                if name not in run.files:
                    raise KvwearError(f"the guest returned no {name} (outputs in {outdir})")
                s = fiolib.parse_fio_json(run.files[name], str(outdir / name))
                if s.errors:
                    raise fiolib.FioError(f"fio reported errors {s.errors} in the guest (report {outdir / name})")
                parts.append((s, log, str(outdir / name)))
            fio = fiolib.combine_segment_replays(parts, iodepth=self.p.iodepth,
                                                 max_io_bytes=fiolib.plan_max_length(plan))
            if deferred:
                trim_bytes = sum(seg.issued_trim_bytes for seg in segments)
                trim_count, trim_details = trim_accounting(segments)
                details.update({**trim_details, **settings})
            elif not parts:                # the empty plan: nothing was played
                trim_bytes = 0
                trim_count = TrimCount(TrimMode.NONE, 0)
                details["empty_plan"] = True
            else:
                trim_bytes = fiolib.issued_log_bytes(parts[0][0], parts[0][1], parts[0][2], iodepth=self.p.iodepth,
                                                     max_io_bytes=fiolib.plan_max_length(plan))[2]
                planned_trim = int(trims.sum())
                trim_count = (TrimCount(TrimMode.NONE, 0) if not trims.size
                              else TrimCount(TrimMode.NATIVE, planned_trim) if can_trim
                              else TrimCount(TrimMode.SKIPPED, planned_trim, skipped_ops=int(trims.size)))
            counts = (fio.write_bytes, fio.read_bytes, trim_bytes, fio.write_ios, fio.read_ios)
            tool = parts[0][0].fio_version if parts else self.fio_version
            tool_output = fio.json_paths[0] if fio.json_paths else str(outdir)
            details.update({**fio.details(), "ioengine": self.p.ioengine})
        host_counts, media, counted = drive_counts(run.files, str(outdir), femu=self.femu is not None,
                                                   fdp_log=fdp_log)
        details.update({"iodepth": self.p.iodepth, "timed": timed, "boot_s": run.boot_s, "guest_wall_s": run.wall_s,
                        "guest_fio_s": run.fio_s, "accel": run.accel, "guest_outputs": str(outdir), **counted})
        if self.femu is None and fdp_log is not None:
            # stock QEMU's FDP drive has no FTL: its media bytes must be what its reclaim-unit accounting
            # makes of this plan (stock_qemu_fdp_media_bytes)
            assert fdp is not None and use_dw
            fdp_log = replace(fdp_log, media_bytes_expected=stock_qemu_fdp_media_bytes(
                plan, max_io_bytes=rep.max_io_bytes, ru_bytes=fdp.runs_bytes or QEMU_FDP_RUNS_BYTES,
                lba_bytes=rep.lba_bytes))
        write_bytes, read_bytes, trim_bytes, write_ios, read_ios = counts
        return ReplayResult(
            device=f"{self.spec.kind}:{self._path()}", tool=tool, write_bytes=write_bytes, read_bytes=read_bytes,
            trim_bytes=trim_bytes, write_ios=write_ios, read_ios=read_ios, wall_s=wall, trims=trim_count,
            media=media, host_counts=host_counts, handles=handles, fdp_log=fdp_log,
            placement_unavailable=("device option drop_handles=true: the plan's handles were dropped knowingly"
                                   if dropped else None),
            notes=(f"Host-side observation: {self.host_observation_note()}",),
            tool_output_path=tool_output, details=details)

    def _replay_files(self, plan: pa.Table | Path, workdir: Path, *, timed: bool,
                      progress: ReplayProgress | None) -> ReplayResult:
        """One guest boot: make the file system, play the FILE_OPS `plan` with kvwear-fs between
        the SMART snapshots and the block counters, unmount (the module docstring). Written in the
        pieces the plan was counted at (its metadata's write size); `timed` is not honoured, as
        on the host."""
        fs = self.fs
        assert fs is not None
        source = str(plan) if isinstance(plan, Path) else "file_ops plan"
        raw = read_table(FILE_OPS, plan) if isinstance(plan, Path) else plan
        write_bytes = planned_write_bytes(raw, source)
        table = FILE_OPS.conform(raw)
        if self.drive_image is not None:      # a file system may write anywhere on its drive
            check_host_room(self.drive_image, self._size, what="drive image", fix=ROOM_FIX)
        files = {"fs.plan": encode_file_plan(table, write_bytes, fs, source), "job.env": job_env(fs)}
        if self.p.precondition == "fill":
            fill = fiolib.seq_fill_job(GUEST_DEVICE, self._capacity, loops=1, ioengine=self.p.ioengine,
                                       iodepth=self.p.iodepth, name="precondition")
            files["precondition.fio"] = fiolib.render_job_file([fill]).encode()
        t0 = time.perf_counter()
        run = run_guest(self.config, GuestJob(files), workdir / "guest")
        wall = time.perf_counter() - t0
        if progress is not None:           # one guest boot plays the whole plan
            progress(table.num_rows, table.num_rows)
        self.last_run = run
        outdir = workdir / "guest"
        for name, data in run.files.items():
            (outdir / name).write_bytes(data)
        if guest_protocol(run) < 4:
            raise KvwearError(f"the guest image in {self.image.kernel.parent} predates the fs layout (its /init "
                              "ignored fs.plan): rebuild it with scripts/build-guest.sh")
        # smartctl's status is a bit mask; only newer FEMU answers the stats log C0h
        failed = {k: v for k, v in run.exit_codes.items()
                  if v != 0 and not k.startswith(("smartctl", "femu-stats"))}
        if failed:
            # each tool says why first (mkfs then prints its usage): the head of each output
            said = "".join(f"\n  {f}: " + run.files.get(f, b"").decode(errors="replace").strip()[:400]
                           for f in ("mkfs.txt", "mount.txt", "fs-stderr.txt") if run.files.get(f, b"").strip())
            raise KvwearError(f"guest commands failed {failed} (outputs in {outdir}; {fs.filesystem} by "
                              f"`{' '.join(fs.mkfs())}`, mounted -o {fs.mount_options()}):{said}")
        self._identity = self._identity_from_run(run)
        rep = parse_fs_report(run.files["fs.json"], str(outdir / "fs.json"))
        mkfs_version = run.text("mkfs-version.txt").strip().splitlines()
        fs_tools = mkfs_version[0] if mkfs_version else f"{fs.mkfs()[0]} (version unknown)"
        counts = guest_file_counts(rep, run.files, fs,
                                   object_write_bytes=object_write_bytes(table),
                                   fs_tools=fs_tools, kernel=run.events.get("kernel", "?"), source=str(outdir))
        host_counts, media, counted = drive_counts(run.files, str(outdir), femu=self.femu is not None)
        block = counts.block
        details = {"player": FS_TOOL, "guest_player_s": rep.elapsed_s, "boot_s": run.boot_s,
                   "guest_wall_s": run.wall_s, "guest_fio_s": run.fio_s, "accel": run.accel,
                   "guest_outputs": str(outdir), **counted}
        notes = [f"Host-side observation: {self.host_observation_note()}"]
        if timed:
            notes.append("the file player plays as fast as possible: t_s is not honoured")
        return ReplayResult(
            device=f"{self.spec.kind}:{self._path()}", tool=f"{FS_TOOL} {fs.filesystem} ({fs_tools})",
            write_bytes=block.write_bytes, read_bytes=block.read_bytes, trim_bytes=block.discard_bytes,
            write_ios=block.write_ios, read_ios=block.read_ios, wall_s=wall,
            trims=TrimCount(TrimMode.NATIVE if block.discard_bytes else TrimMode.NONE, 0),
            media=media, host_counts=host_counts, files=counts, notes=tuple(notes),
            tool_output_path=str(outdir / "fs.json"), details=details)

    def _fdp_log(self, plan: pa.Table, rep: DwReport, fdp: FdpConfig, run: GuestRun,
                 outdir: str) -> tuple[FdpLogCount, list[dict[str, int]]]:
        """The FDP statistics log (22h) around the replay (DLWA = media ÷ host bytes of this replay)
        and the reclaim unit handle status before and after."""
        src = f"{outdir}/fdp-stats"
        before = parse_fdp_stats_binary(run.files["fdp-stats-before.bin"], f"{src}-before.bin")
        after = parse_fdp_stats_binary(run.files["fdp-stats-after.bin"], f"{src}-after.bin")
        host = after.host_bytes_with_metadata_written - before.host_bytes_with_metadata_written
        media = after.media_bytes_with_metadata_written - before.media_bytes_with_metadata_written
        rb = parse_ruh_status_binary(run.files["ruh-status-before.bin"], f"{outdir}/ruh-status-before.bin")
        ra = parse_ruh_status_binary(run.files["ruh-status-after.bin"], f"{outdir}/ruh-status-after.bin")
        status = [{"placement_id": a.placement_id, "ruh_id": a.ruh_id, "ruamw_blocks_before": b.ruamw_blocks,
                   "ruamw_blocks_after": a.ruamw_blocks} for b, a in zip(rb, ra, strict=True)]
        return FdpLogCount(host, media, after.media_bytes_erased - before.media_bytes_erased), status

    def _identity_from_run(self, run: GuestRun) -> DeviceIdentity:
        ctrl = parse_id_ctrl_json(run.files["id-ctrl.json"], "guest nvme id-ctrl -o json")
        ns = parse_id_ns_json(run.files["id-ns.json"], "guest nvme id-ns -o json")
        if self.femu is None and ctrl.serial != self.config.drive.serial:
            raise KvwearError(f"the guest's NVMe controller has serial {ctrl.serial!r}, expected "
                              f"{self.config.drive.serial!r}: not the drive this backend created")
        if self.femu is not None and not is_femu(ctrl):
            raise KvwearError(f"{self.config.qemu_binary} presented controller {ctrl.model!r}, not FEMU: "
                              "its SMART vendor bytes cannot be read as FTL counters")
        ident = identity_from_nvme(ctrl, ns, self._path(), kind=self.spec.kind)
        return DeviceIdentity(kind=ident.kind, path=ident.path, model=ident.model, serial=ident.serial,
                              firmware=ident.firmware, capacity_bytes=ident.capacity_bytes,
                              logical_block_bytes=ident.logical_block_bytes,
                              extra={**ident.extra, **self._extra_identity(), "fdp_supported": ctrl.fdp_supported})

    def close(self) -> None:
        """Delete the drive image this backend created unless keep_image=true, then release it (each
        replay's QEMU process is reaped before replay returns)."""
        remove_created(self.created_image, self.p.keep_image)
        self._claim.close()


def defers_trims(plan: pa.Table, p: GuestParams, fio_version: str, use_dw: bool) -> bool:
    """Does the guest play `plan`'s trims deferred (fio per segment, then blkdiscard per range)?
    Yes when it has trims that fio cannot replay (the guest's fio version), that are not skipped
    and that no kvwear-dw plays in order."""
    has_trims = bool(fiolib.plan_lengths(plan, "trim").size)
    return has_trims and not fiolib.fio_replays_trim(fio_version) and not p.skip_trims and not use_dw


def guest_trim_segments(plan: pa.Table, p: GuestParams, capacity_bytes: int
                        ) -> tuple[list[PlanSegment], dict[str, int]]:
    """The segments of a deferred-trim replay in the guest, and their settings."""
    return device_segments(plan, capacity_bytes=capacity_bytes, block_bytes=BLOCK_BYTES,
                           max_ops=p.trim_segment_ops, max_bytes=p.trim_segment_bytes)


def femu_geometry(spec: DeviceSpec) -> FemuGeometry:
    """The FEMU drive a `femu` spec describes (option `femu`, or flat `femu.FIELD` keys)."""
    return FemuGeometry.from_options(GuestParams.of(spec).femu, "device.options.femu")


class Qemu(Backend):
    """Stock QEMU's NVMe drive in an image the run creates: a drive to hold, no FTL (WAF 1)."""

    Params = GuestParams
    capabilities = Capabilities(drive_resource=True)
    device = GuestDevice


class Femu(Backend):
    """A FEMU black-box drive: its size is devsz_mb, its FTL geometry is known, so the embedded FTL
    plays each plan as its twin."""

    Params = GuestParams
    capabilities = Capabilities(drive_resource=True, fixed_size=True, ftl_twin=True, geometry_note="FEMU geometry")
    device = GuestDevice

    @classmethod
    def fixed_capacity(cls, spec: DeviceSpec) -> FixedCapacity:
        # a block plan spans the whole drive its geometry fixes; a file plan leaves the file
        # system its share of it (the tier is sized from the drive with that share kept back)
        files = GuestParams.of(spec).filesystem is not None
        return FixedCapacity(femu_geometry(spec).devsz_mb << 20, whole=not files)

    @classmethod
    def ftl_config(cls, spec: DeviceSpec) -> FtlConfig:
        return femu_geometry(spec).ftl_config()

    @classmethod
    def twin_waf(cls, spec: DeviceSpec, plan: pa.Table) -> float:
        return cls.twin_counters(spec, plan).waf

    @classmethod
    def twin_counters(cls, spec: DeviceSpec, plan: pa.Table, fio_version: str | None = None) -> FtlCounters:
        """FEMU's geometry and GC thresholds in the embedded FTL (its line mode is FEMU's line GC),
        playing the requests FEMU receives, as the guest issues them: after the same sequential
        fill when the drive preconditions; each read or write row as the guest's commands (whole up
        to GUEST_MAX_IO_BYTES, kvwear-dw's GUEST_DW_MAX_IO_BYTES); trims dropped when skipped, and
        in a deferred-trim replay's order when the guest defers them, one command per range
        (`fio_version`: the guest's fio, by default the guest image's)."""
        from kvwear.harness.devices.sim import twin_waf

        p = GuestParams.of(spec)
        ops = plan.column("op").cast(pa.string())
        placed = bool(plan_handles(plan)[pc.equal(ops, "write").to_numpy(zero_copy_only=False)].max(initial=0) > 0)
        use_dw = p.player == "kvwear-dw" or (placed and not p.drop_handles)
        size = femu_geometry(spec).exposed_bytes
        cap = size if spec.capacity_bytes is None else int(spec.capacity_bytes)
        cap -= cap % BLOCK_BYTES               # the guest's capacity, as GuestDevice sets it
        segments = None
        if bool(pc.any(pc.equal(ops, "trim")).as_py()):
            # as replay plays them: kvwear-dw in order unless skipped; fio in its iolog when it can,
            # else deferred unless skipped
            if fio_version is None and not use_dw:
                fio_version = _fio_version_from_stamp(find_guest(Path(p.guest_dir) if p.guest_dir else None).stamp)
            if defers_trims(plan, p, fio_version or "", use_dw):
                segments, _ = guest_trim_segments(plan, p, cap)
            elif p.skip_trims and (use_dw or not fiolib.fio_replays_trim(fio_version or "")):
                plan = plan.filter(pc.not_equal(ops, "trim"))
        return twin_waf(cls.ftl_config(spec), plan, fill_bytes=cap if p.precondition == "fill" else 0,
                        trim_segments=segments,
                        max_request_bytes=GUEST_DW_MAX_IO_BYTES if use_dw else GUEST_MAX_IO_BYTES)

    @classmethod
    def preflight(cls, spec: DeviceSpec) -> None:
        femu_geometry(spec)


DEVICES.add("qemu", Qemu)
DEVICES.add("femu", Femu)
