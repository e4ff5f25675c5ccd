"""kvwear's file player: a `file_ops` plan (the `fs` layout) played on a real file system that
kvwear makes on a `block:` device.

fio cannot unlink a file, and a KV-cache store that keeps objects as files frees space by unlinking
them, so kvwear plays file plans itself. `FsDevice` is what the `block` backend opens when its
device option `filesystem` is set (kvwear.harness.devices.fio.Block):

1. Safety: the device passes the same guard as a raw replay (kvwear.harness.devices.safety:
   refused when mounted, partitioned, carrying a file system or signature, or backing the system,
   unless `confirm_serial` names it) — making a file system is as destructive as writing blocks.
   The device's identity lock is held from then to `close()`. It is not held open with O_EXCL as a
   raw replay's is: mkfs and the kernel's mount take the device exclusively themselves.
2. `mkfs` (`filesystem` = ext4 | xfs | f2fs, forced: the guard has decided). ext4 initialises its
   inode tables and journal at mkfs time (`lazy_itable_init=0,lazy_journal_init=0`), so no
   background initialisation writes during the replay are counted as the workload's overhead.
   What mkfs wrote and discarded is counted apart (`FileSystemCount.mkfs_block`).
3. Each `replay` mounts the file system on a private temporary mount point (mode 0700, removed
   after), with `-o discard` when `discard=online` and `-o nodiscard` otherwise (f2fs discards
   unless told not to), makes the store's directory (`local_disk`, as
   LMCache's flat directory), plays the rows in order as fast as possible — write: open with
   O_CREAT|O_TRUNC, write() the object's bytes in pieces of the plan's write size, fsync when
   `fsync=true`, close; read: read the whole file; unlink — runs `fstrim` on the mount each time
   the plan's clock (t_s) passes a multiple of `fstrim_interval_s` when `discard=fstrim`, and
   unmounts (always, also on failure). The device's own counters are read just before the mount
   and just after the unmount: `FileSystemCount.block` is everything the file system wrote for
   the plan, including the unmount's writeback.
4. `close()` erases the file system's signatures (`wipefs -a`), so the device is blank again to
   the guard — the next policy of the run makes its own file system on it, as a raw replay's next
   policy writes over the last one's blocks — and releases the lock.

Data: every write() writes from one buffer of random bytes (drawn once per device), so no layer
below can shortcut zeros. Reads may be served by the page cache; they are counted as the player
read them.

Accounting (typed, kvwear.harness.devices.measurement.FileSystemCount): object bytes (the plan) →
file bytes (what write() returned) → block bytes (the device's counters; the eBPF capture around
the replay sees the same requests) → NAND bytes (`sim`: the block trace replayed on the embedded
FTL, `block_trace_plan`). The identities are checked by kvwear.harness.estimate.fs_checks.

The file-system options (`FsParams`: filesystem, discard, fstrim_interval_s, fsync) are one typed
record that the block backend's options and the qemu/femu backends' options both extend, so one
parser reads and checks them and one place says how each file system is made (`FsParams.mkfs`)
and mounted (`FsParams.mount_options`), on the host and in the guest (kvwear.harness.devices.qemu,
whose guest plays the same plan with kvwear-fs, kvwear.harness.devices.guest_files).

Must not: write to anything but the device it checked and the mount it made; leave a mount behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.children import find_program, system_argv
from kvwear.errors import KvwearError
from kvwear.exclusive import block_identity, device_lock_path, locked
from kvwear.harness.devices.base import DeviceParams, DeviceSpec, ReplayProgress, option
from kvwear.harness.devices.identity import path_identity
from kvwear.harness.devices.measurement import (
    BlockDelta,
    FileSystemCount,
    ReplayResult,
    TrimCount,
    TrimMode,
)
from kvwear.harness.devices.safety import DeviceFacts, check_block_device, loop_serial
from kvwear.harness.plan.files import FILE_OPS, object_write_bytes, planned_write_bytes
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.harness.wear.identify import DeviceIdentity
from kvwear.records import decode, encode
from kvwear.tables import TableSpec, read_table, write_table

FILESYSTEMS: tuple[str, ...] = ("ext4", "xfs", "f2fs")
DISCARD_MODES: tuple[str, ...] = ("online", "none", "fstrim")
STORE_DIR = "local_disk"
SECTOR = 512

# mkfs per file system: forced (the safety guard has decided), quiet. ext4 does its inode-table
# and journal initialisation now, not lazily after the first mount (see the module docstring), and
# uses 4 KiB blocks as on any device above 512 MB (mke2fs's "small" type gives a smaller device —
# a test's loop device — 1 KiB blocks, whose sub-page writes a drive's 4 KiB pages round up).
_MKFS: dict[str, tuple[str, ...]] = {
    "ext4": ("mkfs.ext4", "-F", "-q", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0"),
    "xfs": ("mkfs.xfs", "-f", "-q"),
    "f2fs": ("mkfs.f2fs", "-f", "-q"),
}
_PACKAGE = {"ext4": "e2fsprogs", "xfs": "xfsprogs", "f2fs": "f2fs-tools"}
# The smallest device each mkfs accepts: xfsprogs ≥ 5.19 refuses a file system below 300 MB.
_MIN_DEVICE_BYTES = {"xfs": 300 << 20}
# A file layout's objects live in a file system kvwear makes on the device (the file player), whose
# journal or log, inode tables and allocation groups take part of it: after the player's mkfs, a
# 512 MiB device left ext4 95.2 % free (88.2 % outside root's reserve; kvwear writes as root) and xfs
# 81.8 %; a 4 GiB one 96.5 % and 97.0 %. A tier sized from such a device keeps this share back
# beyond the rounding headroom (kvwear.harness.pipeline.sizing), and a drive kvwear makes for a
# plan is that much larger than the plan's capacity (`fs_drive_bytes`), so that the largest loss
# (xfs on a small device) still fits.
FS_RESERVE = 0.20


def fs_drive_bytes(capacity_bytes: int) -> int:
    """The size of a drive kvwear makes for a file plan laid out on `capacity_bytes`: the plan's
    capacity and the file system's own share (FS_RESERVE) beside it, rounded up to a MiB."""
    return -(-int(capacity_bytes / (1 - FS_RESERVE)) // (1 << 20)) * (1 << 20)


@dataclass(frozen=True)
class FsParams(DeviceParams):
    """The fs layout's device options, shared by every backend that makes a file system and plays
    file plans on it (the block backend on the host, the qemu/femu backends in their guest): the
    file system (None: the device plays block plans), how freed blocks are discarded, whether each
    file is fsync'ed. A backend's options record extends this one, so the options are parsed and
    checked by one parser (DeviceParams.parse) and named the same everywhere."""

    filesystem: str | None = option(None, choices=FILESYSTEMS)
    discard: str = option("online", choices=DISCARD_MODES)     # online | none | fstrim (periodic)
    fstrim_interval_s: float = option(60.0, gt=0)              # discard=fstrim, on the plan's clock
    fsync: bool = True                                         # fsync each file after its writes

    def mkfs(self) -> tuple[str, ...]:
        """The mkfs command (without the device) of `filesystem` (module docstring, step 2)."""
        if self.filesystem is None:
            raise KvwearError("internal error: mkfs without a filesystem option")
        return _MKFS[self.filesystem]

    def check_device_bytes(self, size: int, where: str) -> None:
        """Refuse, before mkfs, a device smaller than the file system's mkfs accepts."""
        least = _MIN_DEVICE_BYTES.get(self.filesystem or "", 0)
        if size < least:
            raise KvwearError(f"{where}: filesystem={self.filesystem} needs a device of at least {least:,} bytes "
                              f"({_MKFS[str(self.filesystem)][0]} refuses smaller ones), this one has {size:,}")

    def mount_options(self) -> str:
        """`discard` for discard=online, else `nodiscard`: f2fs discards by default since Linux 4.19
        (ext4 and xfs do not), so without it discard=none would not hold on f2fs; all three accept it."""
        return "discard" if self.discard == "online" else "nodiscard"

    def fstrim_interval(self) -> float | None:
        """The fstrim interval on the plan's clock with discard=fstrim, else None (no fstrim)."""
        return self.fstrim_interval_s if self.discard == "fstrim" else None


def kernel_filesystems(proc: Path = Path("/proc/filesystems")) -> set[str]:
    """The file systems the running kernel can mount now (built in or loaded)."""
    try:
        return {line.split()[-1] for line in proc.read_text().splitlines() if line.strip()}
    except OSError:
        return set()


def missing_for(filesystem: str) -> str | None:
    """Why `filesystem` cannot be made and mounted here (the tool or the kernel's support), or None."""
    tool = _MKFS[filesystem][0]
    if find_program(tool) is None:
        return f"{tool} not found (install the Debian package {_PACKAGE[filesystem]})"
    if filesystem not in kernel_filesystems():
        return f"the running kernel ({platform.release()}) has no {filesystem} (not in /proc/filesystems)"
    return None


def _run(argv: Sequence[str], what: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(system_argv(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise KvwearError(f"{what}: {argv[0]} not found") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise KvwearError(f"{what}: `{' '.join(argv)}` exited {proc.returncode}: {msg[-1] if msg else ''}")
    return proc


def tool_version(filesystem: str) -> str:
    """The mkfs tool's version line (mke2fs 1.47.0 (5-Feb-2023), mkfs.xfs version 6.1.0, …)."""
    tool = _MKFS[filesystem][0]
    proc = subprocess.run(system_argv([tool, "-V"]), capture_output=True, text=True, check=False)
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    return lines[0] if lines else f"{tool} (version unknown)"


def block_counters(dev: str) -> BlockDelta:
    """The device's cumulative counters now (/sys/dev/block/M:m/stat, `dev` = "M:m")."""
    path = Path(f"/sys/dev/block/{dev}/stat")
    try:
        text = path.read_text()
    except OSError as exc:
        raise KvwearError(f"{path}: cannot read the device's counters: {exc.strerror}") from None
    return parse_block_stat(text, str(path))


def parse_block_stat(text: str, source: str) -> BlockDelta:
    """A block device's `stat` file (Documentation/block/stat.rst) as cumulative counters; the
    host's own device, or one a guest read and returned (`source` names it in errors)."""
    try:
        f = [int(x) for x in text.split()]
    except ValueError:
        raise KvwearError(f"{source}: not a block device's stat line: {text.strip()[:80]!r}") from None
    if len(f) < 11:
        raise KvwearError(f"{source}: {len(f)} fields, a block device's stat line has at least 11")
    f += [0] * (17 - len(f))       # discard (kernel 4.18+) and flush (5.5+) fields
    return BlockDelta(write_bytes=f[6] * SECTOR, write_ios=f[4], read_bytes=f[2] * SECTOR, read_ios=f[0],
                      discard_bytes=f[13] * SECTOR, discard_ios=f[11], flush_ios=f[15])


def delta(after: BlockDelta, before: BlockDelta) -> BlockDelta:
    return BlockDelta(**{k: getattr(after, k) - getattr(before, k) for k in BlockDelta.__dataclass_fields__})


@contextlib.contextmanager
def mounted(device: str, filesystem: str, options: str) -> Iterator[Path]:
    """`device` mounted on a private temporary mount point (0700) with `options`; unmounted and the
    mount point removed on exit, also when the body fails (an unmount failure is raised, naming the
    mount; when the body's own error is on its way, that error carries it as a note instead)."""
    point = Path(tempfile.mkdtemp(prefix="kvwear-fs-"))
    try:
        _run(["mount", "-t", filesystem, *(["-o", options] if options else []), device, str(point)],
             f"mounting {device} ({filesystem})")
    except BaseException:
        point.rmdir()
        raise
    failed: BaseException | None = None
    try:
        yield point
    except BaseException as exc:
        failed = exc
        raise
    finally:
        proc = subprocess.run(["umount", str(point)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            time.sleep(1)           # a reader of the mount that just ended: once more
            proc = subprocess.run(["umount", str(point)], capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            point.rmdir()
        else:
            left = f"cannot unmount {point} ({device}): {proc.stderr.strip()}; unmount it by hand"
            if failed is None:
                raise KvwearError(left)
            failed.add_note(left)   # the body's error stays the one raised, and says a mount is left


@dataclass
class _Tally:
    file_write_bytes: int = 0
    file_read_bytes: int = 0
    write_calls: int = 0
    files_created: int = 0
    files_unlinked: int = 0
    unlinked_bytes: int = 0
    fsyncs: int = 0
    fstrims: int = 0
    fstrim_bytes: int = 0


_FSTRIM_BYTES = re.compile(r"\((\d+) bytes\) trimmed")


def fstrim(point: Path) -> int:
    """Trim the free space of the file system at `point`; the bytes fstrim says it trimmed."""
    out = _run(["fstrim", "-v", str(point)], f"fstrim {point}").stdout
    m = _FSTRIM_BYTES.search(out)
    if m is None:
        raise KvwearError(f"fstrim {point}: no trimmed byte count in its output {out.strip()!r}")
    return int(m.group(1))


def play_file_ops(plan: pa.Table, root: Path, *, fsync: bool, write_bytes: int,
                  fstrim_interval_s: float | None, mount_point: Path,
                  progress: ReplayProgress | None = None) -> _Tally:
    """Play FILE_OPS rows in `root` (the store's directory on the file system mounted at
    `mount_point`, which fstrim trims), as fast as possible (module docstring). An error names the
    plan row, its op and file."""
    tally = _Tally()
    buf = memoryview(np.random.default_rng(0x6B76).integers(0, 256, write_bytes, np.uint8).tobytes())
    next_trim = fstrim_interval_s
    total = plan.num_rows
    done = 0
    for batch in plan.to_batches(max_chunksize=1 << 14):
        ops = batch.column("op").to_pylist()
        names = batch.column("name").to_pylist()
        lens = batch.column("length_bytes").to_pylist()
        ts = batch.column("t_s").to_pylist()
        for op, name, ln, t in zip(ops, names, lens, ts, strict=True):
            done += 1
            path = root / name
            try:
                if next_trim is not None and t >= next_trim:
                    tally.fstrim_bytes += fstrim(mount_point)
                    tally.fstrims += 1
                    assert fstrim_interval_s is not None
                    next_trim = (t // fstrim_interval_s + 1) * fstrim_interval_s
                if op == "write":
                    existed = path.exists()
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                    try:
                        left = ln
                        while left:
                            n = os.write(fd, buf[:min(left, write_bytes)])
                            left -= n
                            tally.file_write_bytes += n
                            tally.write_calls += 1
                        if fsync:
                            os.fsync(fd)
                            tally.fsyncs += 1
                    finally:
                        os.close(fd)
                    tally.files_created += not existed
                elif op == "read":
                    with open(path, "rb", buffering=0) as fh:
                        while chunk := fh.read(write_bytes):
                            tally.file_read_bytes += len(chunk)
                elif op == "unlink":
                    tally.unlinked_bytes += path.stat().st_size
                    path.unlink()
                    tally.files_unlinked += 1
                else:
                    raise KvwearError(f"file_ops row {done}: unknown op {op!r}")
            except OSError as exc:
                raise KvwearError(f"file_ops row {done} ({op} {name}, {ln} bytes): {exc.strerror}"
                                  + (" — the file system is full: its own metadata and journal need room "
                                     "beside the live objects (a larger device, or fewer live bytes)"
                                     if exc.errno == 28 else "")) from None
        if progress is not None:
            progress(done, total)
    return tally


def block_trace_plan(trace: pa.Table, capacity_bytes: int) -> pa.Table:
    """A captured BLOCK_TRACE (kvwear.harness.capture.schema) as a BLOCK_OPS plan: its writes and
    discards, in issue order, as writes and trims (afap time), for replaying what a file system
    sent to the device on the embedded FTL. Reads, flushes, other requests and requests of 0 bytes
    (a journal commit's empty pre-flush write) are left out."""
    op = pc.cast(trace.column("op"), pa.string())
    keep = pc.and_(pc.is_in(op, pa.array(["write", "discard"])), pc.greater(trace.column("bytes"), 0))
    t = trace.filter(keep)
    order = pc.sort_indices(t, [("t_ns", "ascending")])
    t = t.take(order)
    off = pc.multiply(t.column("sector"), SECTOR)
    end = pc.add(off, t.column("bytes"))
    if len(t) and pc.max(end).as_py() > capacity_bytes:
        raise KvwearError(f"block trace reaches byte {pc.max(end).as_py()}, beyond the device's {capacity_bytes}")
    names = pc.if_else(pc.equal(pc.cast(t.column("op"), pa.string()), "write"), "write", "trim")
    n = len(t)
    return BLOCK_OPS.conform(pa.table({
        "t_s": pa.array(np.arange(n, dtype=np.float64)),
        "op": names,
        "offset_bytes": off,
        "length_bytes": t.column("bytes"),
        "obj_kind": pa.array(["fs"] * n),
        "obj_id": pa.array(np.zeros(n, np.int64)),
        "placement_handle": pa.array(np.zeros(n, np.int8)),
    }))


# A file-system run's block trace kept for replaying on any FTL drive without hardware: the
# BLOCK_OPS columns (writes and trims in issue order, `block_trace_plan`), and in the file's
# metadata (FS_TRACE_PROVENANCE_KEY) the typed record of what made it (FsTraceProvenance).
FS_TRACE = TableSpec(kind="fs_trace", version=1, schema=BLOCK_OPS.schema)
FS_TRACE_PROVENANCE_KEY = b"kvwear.fs_trace.provenance"


@dataclass(frozen=True)
class FsTraceProvenance:
    """What recorded a file-system block trace: the file system and how it was made and mounted,
    the tool and kernel versions, the device's size and the kvwear command."""

    VERSION: ClassVar[int] = 1

    filesystem: str
    discard: str
    fsync: bool
    fstrim_interval_s: float | None
    mkfs_command: str
    mount_options: str
    fs_tools: str
    kernel: str
    device_bytes: int
    command: str
    version: int = 1


def write_fs_trace(trace: pa.Table, device_bytes: int, files: FileSystemCount, command: str, path: Path) -> Path:
    """Keep a captured BLOCK_TRACE of a file-layout replay as FS_TRACE with its provenance."""
    prov = FsTraceProvenance(files.filesystem, files.discard, files.fsync, files.fstrim_interval_s,
                             files.mkfs_command, files.mount_options, files.fs_tools, files.kernel,
                             device_bytes, command)
    return write_table(FS_TRACE, block_trace_plan(trace, device_bytes), path,
                       metadata={FS_TRACE_PROVENANCE_KEY: json.dumps(encode(prov)).encode()})


def read_fs_trace(path: Path) -> tuple[pa.Table, FsTraceProvenance]:
    """An FS_TRACE file and its provenance, validated (one line naming the file and field)."""
    table = read_table(FS_TRACE, path)
    raw = (table.schema.metadata or {}).get(FS_TRACE_PROVENANCE_KEY)
    if raw is None:
        raise KvwearError(f"{path}: an fs_trace without its provenance (metadata {FS_TRACE_PROVENANCE_KEY.decode()})")
    try:
        data = json.loads(raw)
    except ValueError:
        raise KvwearError(f"{path}: its provenance is not JSON (damaged metadata)") from None
    prov = decode(FsTraceProvenance, data, str(path), "provenance")
    if prov.version > FsTraceProvenance.VERSION:
        raise KvwearError(f"{path}: provenance version {prov.version}, this kvwear reads {FsTraceProvenance.VERSION}")
    return FS_TRACE.conform(table), prov


@dataclass(frozen=True)
class TraceOnFtl:
    """A block trace replayed on the embedded FTL: the drive's counts, and the host bytes its page
    accounting must show for the trace (the pages its writes cover × page size)."""

    replay: ReplayResult
    expected_host_bytes: int
    drive: str


def replay_trace_on_ftl(trace: pa.Table, capacity_bytes: int, workdir: Path, *,
                        options: dict[str, object] | None = None) -> TraceOnFtl:
    """Play the writes and discards of a captured BLOCK_TRACE (or a recorded FS_TRACE) on the `sim`
    drive of `capacity_bytes` (its `options`: a preset, a geometry; kvwear.harness.devices.sim) —
    what the file system sent the device, as the embedded FTL would store it: NAND bytes and WAF."""
    from kvwear.emulator.ftl import OP_WRITE
    from kvwear.harness.devices.base import open_device
    from kvwear.harness.devices.sim import plan_to_requests

    plan = FS_TRACE.conform(trace) if "offset_bytes" in trace.column_names else block_trace_plan(trace, capacity_bytes)
    dev = open_device(DeviceSpec("sim", capacity_bytes=capacity_bytes, options=dict(options or {})), workdir)
    try:
        page = int(dev.identity().logical_block_bytes or 4096)
        codes, _, npages = plan_to_requests(plan, page, capacity_bytes)
        expected = int(npages[codes == OP_WRITE].sum()) * page
        res = dev.replay(plan, workdir)
        drive = str(dev.identity().extra.get("description", "sim"))
    finally:
        dev.close()
    return TraceOnFtl(res, expected, drive)


class FsDevice:
    """A `block:` device holding a file system kvwear made, playing FILE_OPS plans (module docstring)."""

    def __init__(self, spec: DeviceSpec, workdir: Path, options: FsParams, confirm_serial: str | None) -> None:
        if not spec.target:
            raise KvwearError("device block needs a path: block:/dev/X")
        self.spec = spec
        self.path = spec.target
        self.p = p = options
        if p.filesystem is None:
            raise KvwearError("internal error: FsDevice without a filesystem option")
        self.filesystem = p.filesystem
        why = missing_for(p.filesystem)
        if why:
            raise KvwearError(f"device block:{self.path}: filesystem={p.filesystem}: {why}")
        self._claim = contextlib.ExitStack()
        self._made = False
        self.last_mount_point: Path | None = None
        # the safety guard first: mkfs destroys what is on the device, as a raw replay would
        self.safety: DeviceFacts = check_block_device(self.path, confirm_serial)
        ident = block_identity(self.safety.serial, self.safety.dev)
        self._claim.enter_context(locked(device_lock_path("block", ident), f"{self.path} ({ident})"))
        try:
            self._identity = path_identity(self.path)
            size = int(self._identity.capacity_bytes or 0)
            if spec.capacity_bytes is not None and not 0 < spec.capacity_bytes <= size:
                raise KvwearError(f"{self.path}: capacity {spec.capacity_bytes} bytes outside the device's {size}")
            # the file system spans the whole device (kvwear makes no partition); the capacity is what
            # the plan's live bytes were sized to fit
            self._capacity = int(spec.capacity_bytes or size)
            p.check_device_bytes(size, f"device block:{self.path}")
            self.dev = str(self._identity.extra.get("dev"))
            self.mkfs_argv = (*p.mkfs(), self.path)
            before = block_counters(self.dev)
            self._made = True          # from here on the device may carry kvwear's file system
            _run(self.mkfs_argv, f"making {p.filesystem} on {self.path}")
            _run(["sync"], "sync")
            self.mkfs_block = delta(block_counters(self.dev), before)
            self.fs_tools = tool_version(p.filesystem)
        except BaseException:
            self.close()
            raise

    def identity(self) -> DeviceIdentity:
        ident = self._identity
        extra = dict(ident.extra)
        extra["safety_problems_overridden"] = self.safety.problems
        extra["filesystem"] = self.filesystem
        return DeviceIdentity(kind=self.spec.kind, path=ident.path, model=ident.model,
                              serial=ident.serial or loop_serial(self.path), firmware=ident.firmware,
                              capacity_bytes=ident.capacity_bytes,
                              logical_block_bytes=ident.logical_block_bytes, extra=extra)

    def capacity_bytes(self) -> int:
        return self._capacity

    def replay(self, plan: pa.Table | Path, workdir: Path, *, timed: bool = False,
               progress: ReplayProgress | None = None) -> ReplayResult:
        """Mount, play the FILE_OPS `plan` (a table or its Parquet), unmount; the counts (module
        docstring). It writes in the pieces the plan was counted at (its write size, carried in its
        metadata: kvwear.harness.plan.files.planned_write_bytes). `timed` is not honoured: the player
        plays as fast as possible (said in the notes)."""
        raw = read_table(FILE_OPS, plan) if isinstance(plan, Path) else plan
        write_bytes = planned_write_bytes(raw, str(plan) if isinstance(plan, Path) else "file_ops plan")
        table = FILE_OPS.conform(raw)
        p = self.p
        interval = p.fstrim_interval()
        opts = p.mount_options()
        t0 = time.monotonic()
        before = block_counters(self.dev)
        with mounted(self.path, self.filesystem, opts) as point:
            self.last_mount_point = point          # (gone after the replay: the tests check)
            root = point / STORE_DIR
            root.mkdir()
            tally = play_file_ops(table, root, fsync=p.fsync, write_bytes=write_bytes,
                                  fstrim_interval_s=interval, mount_point=point, progress=progress)
            left = list(root.iterdir())
            end_bytes = sum(f.stat().st_size for f in left)
        block = delta(block_counters(self.dev), before)
        wall = time.monotonic() - t0
        planned = object_write_bytes(table)
        files = FileSystemCount(
            filesystem=self.filesystem, discard=p.discard, fsync=p.fsync, fstrim_interval_s=interval,
            mkfs_command=" ".join(self.mkfs_argv), mount_options=opts, fs_tools=self.fs_tools,
            kernel=platform.release(), object_write_bytes=planned, file_write_bytes=tally.file_write_bytes,
            file_read_bytes=tally.file_read_bytes, write_calls=tally.write_calls,
            files_created=tally.files_created, files_unlinked=tally.files_unlinked,
            unlinked_bytes=tally.unlinked_bytes, fsyncs=tally.fsyncs, end_files=len(left),
            end_file_bytes=end_bytes, fstrims=tally.fstrims, fstrim_bytes=tally.fstrim_bytes,
            block=block, mkfs_block=self.mkfs_block,
            overhead_bytes=block.write_bytes - tally.file_write_bytes)
        notes = [] if not timed else ["the file player plays as fast as possible: t_s is not honoured"]
        return ReplayResult(
            device=self.path, tool=f"kvwear-fs {self.filesystem} ({self.fs_tools})",
            write_bytes=block.write_bytes, read_bytes=block.read_bytes, trim_bytes=block.discard_bytes,
            write_ios=block.write_ios, read_ios=block.read_ios, wall_s=wall,
            trims=TrimCount(TrimMode.NATIVE if block.discard_bytes else TrimMode.NONE, 0),
            files=files, notes=tuple(notes))

    def close(self) -> None:
        """Erase the signatures of the file system kvwear made (`wipefs -a`: its superblocks' magic,
        not its data), so the device is as blank to the safety guard as a raw replay leaves it and
        the next policy's device makes its own file system without a confirmation; then release it."""
        try:
            if self._made:
                _run(["wipefs", "-a", "-q", self.path],
                     f"erasing the {self.filesystem} signature kvwear made on {self.path}")
        finally:
            self._claim.close()
