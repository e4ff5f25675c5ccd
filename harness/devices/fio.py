"""The `file` and `block` device backends: play a block_ops plan with fio, direct I/O.

`file:PATH` writes into a regular file (created at `capacity_bytes` if absent, and marked as
kvwear's; an existing non-empty file kvwear did not create is refused unless confirmed:
kvwear.harness.devices.safety.check_file_target); `block:/dev/X` writes to a block device (a loop device, a raw
NVMe namespace) after `kvwear.harness.devices.safety` has accepted it. From the checks to `close()` the backend
holds the device exclusively (kvwear.exclusive: a lock keyed by the device's identity, and
O_EXCL on a block device). Both turn the plan into a fio iolog v3 file, replay it with `replay_redirect` to the
target (libaio or io_uring, `iodepth`, as fast as possible or timed), keep fio's job file and
JSON in the work directory, and report what fio issued. Optional SNIA-style preconditioning
(precondition=steady): sequential fill of 2× the range, then random 4 KiB writes until fio's
steady-state detector is satisfied.

Never issues I/O outside [0, capacity_bytes): the plan is validated before fio starts, and
preconditioning jobs are bounded by `size=capacity_bytes`. This module does not parse fio's
output (kvwear.harness.devices.fio_runner does) or decide what is safe (kvwear.harness.devices.safety does).

TRIM: on a block device, a fio that replays iolog trims (3.39 does) gets them in the iolog as
BLKDISCARD. Older ones (Debian 12's 3.33 drops them), and every fio on a file (3.39 replays an
iolog trim as BLKDISCARD there too, which a regular file refuses: ENOTTY), get the plan in
segments (kvwear.harness.devices.deferred_trims): fio plays a segment's reads and writes,
then this backend issues the segment's trims itself — BLKDISCARD on a block device, a punched
hole on a file, `iodepth` at a time — so the device still sees every
trim the plan's end states need, each at most one segment late. A segment ends after
`trim_segment_ops` rows or `trim_segment_bytes` written + trimmed bytes (default 1% of the
capacity, at least 64 MiB), whichever comes first: the bytes bound keeps the stale data a late
trim leaves for GC small against the drive; the ops bound amortizes fio's start (~0.3 s here).

Placement handles: fio cannot take a handle per I/O from an iolog (fio ≥ 3.34's FDP takes a fixed
list per job), so a plan whose writes name handles is played on a `block:` NVMe namespace that
passes the FDP gate (kvwear.harness.devices.fdp_host: CTRATT bit 19, an FDP configuration with enough
handles) by the host build of kvwear-dw on its generic device /dev/ngXnY, each write with its
handle as data placement directive, FDP statistics (log 22h) read before and after (`waf` = their
DLWA), bytes per handle in `ReplayResult.handles`. Elsewhere (a file, a loop device, a drive
without FDP) fio plays it with plain writes, and `ReplayResult.placement_unavailable` says why (the
gate's reason), which the report prints.

Device options (`FioParams`, DeviceSpec.options): ioengine (libaio), iodepth (16), confirm_serial,
confirm_overwrite (a file: path to write to although kvwear did not create it), precondition
(none | fill: `fill_loops` sequential passes | steady: the fill, then random 4 KiB writes until
fio's steady-state detector is satisfied), ss_criterion ("iops_slope:10%"), ss_dur_s (60),
ss_ramp_s (10), fill_loops (2), ss_max_runtime_s (3600), trim_segment_ops (50000),
trim_segment_bytes (1% of the capacity, ≥ 64 MiB), skip_trims (False: drop the plan's trims
knowingly; they are reported as trims_skipped), keep_image (False); on `block:` only, for the fs
layout: filesystem (None: raw replay | ext4 | xfs | f2fs: the file player instead of fio,
kvwear.harness.devices.fs_player), discard (online | none | fstrim), fstrim_interval_s (60),
fsync (true). Other names are refused with this list.

Never fills the host: a `file:` target the backend creates is sparse (a truncate, no byte written),
and before fio writes anything the file system holding it must have room for every byte the plan
writes (the union of its write extents, or the whole capacity when preconditioning) beyond what
the file already allocates (`check_host_room`), else the replay is refused with the numbers and
the fix. A file the backend created is deleted when the device closes (the device stage ends,
finished or failed) unless `keep_image=true`; it is never larger than the capacity.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import os
import stat
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.errors import KvwearError
from kvwear.exclusive import (
    block_identity,
    check_free,
    claim_block_device,
    claim_file,
    device_lock_path,
    file_identity,
)
from kvwear.harness.devices import fio_runner as fiolib
from kvwear.harness.devices.base import (
    DEVICES,
    Backend,
    Capabilities,
    DeviceBackend,
    DeviceSpec,
    FixedCapacity,
    Precondition,
    ReplayProgress,
    mark_created,
    option,
    transient_image,
)
from kvwear.harness.devices.deferred_trims import DEFAULT_SEGMENT_OPS, device_segments, trim_accounting
from kvwear.harness.devices.directive_plan import DW_TOOL, encode_plan, handle_accounting, parse_report, report_details
from kvwear.harness.devices.fdp_host import FdpGate, fdp_capability, host_dw_binary
from kvwear.harness.devices.fio_iolog import export_iolog_v3
from kvwear.harness.devices.fs_player import FsDevice, FsParams, block_counters
from kvwear.harness.devices.identity import path_identity
from kvwear.harness.devices.measurement import (
    BlockDelta,
    FdpLogCount,
    MediaCount,
    ReplayResult,
    TrimCount,
    TrimMode,
)
from kvwear.harness.devices.safety import (
    DeviceFacts,
    check_block_device,
    check_block_path,
    check_file_target,
    loop_serial,
)
from kvwear.harness.plan.placement import plan_handles
from kvwear.harness.wear.base import CommandRunner, CounterSource, run_command
from kvwear.harness.wear.fdp import FdpStats, parse_fdp_stats_binary
from kvwear.harness.wear.identify import DeviceIdentity
from kvwear.units import parse_size

CHUNKED_IOLOG_ROWS = 1_000_000   # above this, fio reads the iolog in pieces
BLKDISCARD = 0x1277              # _IO(0x12, 119), linux/fs.h: discard a (start, length) byte range
_FALLOC_PUNCH = 0x01 | 0x02      # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def punch_hole(fd: int, offset: int, length: int) -> None:
    """Deallocate [offset, offset + length) of a file, keeping its size (os has no fallocate modes)."""
    if _libc.fallocate(fd, _FALLOC_PUNCH, offset, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def plan_written_bytes(plan: pa.Table) -> int:
    """Bytes of the device the plan writes at least once: the union of its write extents — what a
    sparse backing file allocates (vectorized: sort, running maximum of ends, merge)."""
    w = pc.equal(pc.cast(plan.column("op"), pa.string()), "write")
    off = plan.column("offset_bytes").filter(w).to_numpy(zero_copy_only=False).astype(np.int64)
    if not off.size:
        return 0
    end = off + plan.column("length_bytes").filter(w).to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.argsort(off, kind="stable")
    off, end = off[order], np.maximum.accumulate(end[order])
    starts = np.concatenate([[True], off[1:] > end[:-1]])
    last = np.concatenate([starts[1:], [True]])
    return int((end[last] - off[starts]).sum())


def check_host_room(path: Path, need_bytes: int, *, what: str, fix: str, writer: str = "the plan",
                    sparse: bool = True) -> None:
    """Refuse before writing when the file system holding `path` cannot take `need_bytes` more than
    `path` already allocates (st_blocks; 0 for a new sparse file); the error gives the numbers
    (`writer` writes them; `sparse` for a backing file)."""
    path = Path(path)
    allocated = path.stat().st_blocks * 512 if path.exists() else 0
    st = os.statvfs(path.parent if not path.is_dir() else path)
    free = st.f_bavail * st.f_frsize
    new = max(0, int(need_bytes) - allocated)
    if new > free:
        raise KvwearError(
            f"{path}: refusing to write: {writer} writes {int(need_bytes):,} bytes of this "
            f"{'sparse ' if sparse else ''}{what} "
            f"({allocated:,} already allocated) and its file system has {free:,} bytes free, short by "
            f"{new - free:,}; {fix}")


ROOM_FIX = ("free space there, put the backing file on a larger file system (--out, or file:PATH), or plan "
            "fewer bytes (a smaller --ssd or --capacity, --sample-fraction, --fit-device)")


def remove_created(path: Path | None, keep: bool) -> None:
    """Delete a backing file this run created (unless kept): a run leaves no image behind."""
    if path is not None and not keep:
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class PreconditionResult:
    """What preconditioning wrote and whether fio judged the device steady."""

    seq_fill_bytes: int
    random_bytes: int
    steady_state_attained: bool
    criterion: str
    random_runtime_ms: int
    json_paths: tuple[str, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FioParams(FsParams):
    """The `file` and `block` backends' options (module docstring); the fs layout's (filesystem,
    discard, fstrim_interval_s, fsync) are FsParams', which the guest backends share."""

    ioengine: str = option("libaio", choices=fiolib.IOENGINES)
    iodepth: int = option(16, ge=1, le=65536)
    confirm_serial: str | None = None
    confirm_overwrite: str | None = None
    precondition: Precondition = "none"
    fill_loops: int = option(2, ge=1, le=1000)
    ss_criterion: str = "iops_slope:10%"
    ss_dur_s: int = option(60, ge=1, le=366 * 86400)
    ss_ramp_s: int = option(10, ge=1, le=366 * 86400)
    ss_max_runtime_s: int = option(3600, ge=1, le=366 * 86400)
    trim_segment_ops: int = option(DEFAULT_SEGMENT_OPS, ge=1, le=2**40)
    trim_segment_bytes: int | None = option(None, gt=0, le=2**62)
    skip_trims: bool = False
    keep_image: bool = False



def _diskstats_details(before: BlockDelta | None, after: BlockDelta | None) -> dict[str, int]:
    """The kernel's own count of the device's writes over a replay (any other writer included), for
    the replay's details; empty for a file."""
    if before is None or after is None:
        return {}
    return {"diskstats_write_bytes": after.write_bytes - before.write_bytes,
            "diskstats_write_ios": after.write_ios - before.write_ios}

class FioDevice:
    """A file or block device played with fio. Construct through `open_device(DeviceSpec)`."""

    def __init__(self, spec: DeviceSpec, workdir: Path, runner: fiolib.FioRunner = fiolib.run_fio,
                 nvme_runner: CommandRunner = run_command) -> None:
        if not spec.target:
            raise KvwearError(f"device {spec.kind!r} needs a path: {spec.kind}:/path")
        self.spec = spec
        self.workdir = Path(workdir)
        self.runner = runner
        self.nvme_runner = nvme_runner      # nvme-cli, for the FDP gate and statistics
        self.path = spec.target
        self.p = p = FioParams.of(spec)
        self.safety: DeviceFacts | None = None
        self.created: Path | None = None           # the backing file this backend created
        self._claim = contextlib.ExitStack()
        if p.filesystem is not None and spec.kind != "block":
            raise KvwearError(f"device {spec.kind}: option filesystem={p.filesystem} needs a block: device "
                              "(kvwear makes the file system on it)")
        if spec.kind == "block":
            self.safety = check_block_device(self.path, p.confirm_serial)
            self._claim.enter_context(claim_block_device(self.path, self.safety.serial, self.safety.dev))
        else:
            check_file_target(self.path, p.confirm_overwrite)
            self._prepare_file()
            self._claim.enter_context(claim_file(self.path))
        try:
            self._init_claimed(spec, runner)
        except BaseException:
            remove_created(self.created, keep=False)    # a failed open leaves no file behind
            self._claim.close()
            raise

    def _init_claimed(self, spec: DeviceSpec, runner: fiolib.FioRunner) -> None:
        self._identity = path_identity(self.path)
        size = int(self._identity.capacity_bytes or 0)
        cap = int(spec.capacity_bytes) if spec.capacity_bytes is not None else size
        if cap <= 0 or cap > size:
            raise KvwearError(f"{self.path}: capacity {cap} bytes outside the device's {size} bytes")
        self.block_bytes = int(self._identity.logical_block_bytes or 512)
        self._capacity = cap - cap % self.block_bytes
        self.fio_version = fiolib.fio_version(runner)
        # fio replays an iolog's trims as BLKDISCARD, which only a block device takes (module docstring)
        self.fio_replays_trims = (fiolib.fio_replays_trim(self.fio_version)
                                  and stat.S_ISBLK(os.stat(self.path).st_mode))
        self.precondition_result: PreconditionResult | None = None
        if self.p.precondition != "none":
            self._check_room(self._capacity)
            self.precondition_result = self.precondition(self.workdir, steady=self.p.precondition == "steady")

    def _prepare_file(self) -> None:
        """Create the file (sparse, at the capacity) or grow it; mark it as kvwear's either way
        (check_file_target has accepted it), so later runs need no confirmation."""
        p = Path(self.path)
        cap = self.spec.capacity_bytes
        if not p.exists():
            if cap is None:
                raise KvwearError(f"{p} does not exist: give a capacity to create it")
            p.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(p, "xb"):
                    self.created = p
            except FileExistsError:
                pass                  # O_EXCL: of two runs creating it at once, one creates it
        if not stat.S_ISREG(p.stat().st_mode):
            raise KvwearError(f"{p}: file: backend needs a regular file (use block: for devices)")
        mark_created(p)
        # a file a killed run created (and would have deleted) is this run's to delete
        if transient_image(p, self.created is not None, self.p.keep_image):
            self.created = p
        if cap is not None and p.stat().st_size < cap:
            os.truncate(p, cap)   # grow (sparse) to the configured size; never shrink

    def _check_room(self, need_bytes: int) -> None:
        if self.spec.kind == "file":
            check_host_room(Path(self.path), need_bytes, what="file", fix=ROOM_FIX)

    # -- DeviceBackend ----------------------------------------------------------------------

    def identity(self) -> DeviceIdentity:
        ident = self._identity
        extra = dict(ident.extra)
        serial = ident.serial
        if self.spec.kind == "block" and serial is None:
            serial = loop_serial(self.path)
        if self.safety is not None:
            extra["safety_problems_overridden"] = self.safety.problems
        extra["configured_capacity_bytes"] = self._capacity
        return DeviceIdentity(kind=self.spec.kind, path=ident.path, model=ident.model, serial=serial,
                              firmware=ident.firmware, capacity_bytes=ident.capacity_bytes,
                              logical_block_bytes=ident.logical_block_bytes, extra=extra)

    def capacity_bytes(self) -> int:
        return self._capacity

    def replay(self, plan: pa.Table, workdir: Path, *, timed: bool = False,
               progress: ReplayProgress | None = None) -> ReplayResult:
        """Validate `plan` against [0, capacity), write it as an iolog, replay it with fio
        (`progress` steps: one per deferred-trim segment, else the one fio run). A plan with
        placement handles goes to kvwear-dw on an NVMe namespace that passes the FDP gate
        (module docstring); elsewhere fio plays it with plain writes and the result says why."""
        workdir = Path(workdir)
        fiolib.validate_plan(plan, self._capacity, block_bytes=self.block_bytes)
        self._check_room(plan_written_bytes(plan))
        ops = plan.column("op").cast(pa.string()).to_numpy(zero_copy_only=False)
        handles = plan_handles(plan)[ops == "write"]
        if not (handles.size and handles.max() > 0):
            return self._replay_fio(plan, workdir, timed=timed, progress=progress)
        gate = (fdp_capability(self.path, int(handles.max()) + 1, self.nvme_runner) if self.spec.kind == "block"
                else FdpGate(False, "a file: target has no placement handles"))
        if gate.ok:
            return self._replay_dw(plan, workdir, gate, timed=timed, progress=progress)
        res = self._replay_fio(plan, workdir, timed=timed, progress=progress)
        return dataclasses.replace(res, placement_unavailable=gate.reason)

    def _replay_dw(self, plan: pa.Table, workdir: Path, gate: FdpGate, *, timed: bool,
                   progress: ReplayProgress | None) -> ReplayResult:
        """kvwear-dw (host build) plays the plan on the namespace's generic device with each write's
        handle as its placement directive; the FDP statistics log is read before and after."""
        assert gate.generic is not None and gate.controller is not None and gate.configuration is not None
        workdir.mkdir(parents=True, exist_ok=True)
        plan_path = workdir / "dw.plan"
        plan_path.write_bytes(encode_plan(plan, directives=True, timed=timed))
        stats_argv = ["nvme", "fdp", "stats", gate.controller, "--endgrp-id=1", "-o", "binary"]

        def stats() -> FdpStats:
            try:
                return parse_fdp_stats_binary(self.nvme_runner(stats_argv), " ".join(stats_argv))
            except subprocess.CalledProcessError as exc:
                raise KvwearError(f"{' '.join(stats_argv)} failed (exit {exc.returncode}): the FDP drive's "
                                  f"statistics log is needed for its WAF") from None

        before = stats()
        t0 = time.perf_counter()
        proc = subprocess.run([str(host_dw_binary()), gate.generic, str(plan_path)], capture_output=True,
                              check=False)
        wall = time.perf_counter() - t0
        (workdir / "dw.json").write_bytes(proc.stdout)
        if proc.returncode != 0:
            raise KvwearError(f"kvwear-dw failed on {gate.generic} (exit {proc.returncode}): "
                              f"{proc.stderr.decode(errors='replace').strip()[-500:]}")
        after = stats()
        if progress is not None:
            progress(1, 1)
        rep = parse_report(proc.stdout, str(workdir / "dw.json"))
        host = after.host_bytes_with_metadata_written - before.host_bytes_with_metadata_written
        media = after.media_bytes_with_metadata_written - before.media_bytes_with_metadata_written
        return ReplayResult(
            device=f"{self.spec.kind}:{self.path}", tool=DW_TOOL, write_bytes=rep.write_bytes,
            read_bytes=rep.read_bytes, trim_bytes=rep.trim_bytes, write_ios=rep.write_cmds, read_ios=rep.read_cmds,
            wall_s=wall, trims=TrimCount.native(rep.trim_bytes),
            media=MediaCount(CounterSource.FDP_STATS_LOG_22H, host, media),
            handles=handle_accounting(plan, rep),
            fdp_log=FdpLogCount(host, media, after.media_bytes_erased - before.media_bytes_erased),
            tool_output_path=str(workdir / "dw.json"),
            details={**report_details(rep), "timed": timed,
                     "reclaim_unit_handles": gate.configuration.reclaim_unit_handles})

    def _replay_fio(self, plan: pa.Table, workdir: Path, *, timed: bool,
                    progress: ReplayProgress | None) -> ReplayResult:
        if plan.num_rows == 0:        # a policy that never touched the SSD: fio refuses an empty iolog
            return self._empty_replay()
        trims = fiolib.plan_lengths(plan, "trim")
        can_trim = self.fio_replays_trims
        if trims.size and not can_trim and not self.p.skip_trims:
            return self._replay_deferring_trims(plan, workdir, timed=timed, progress=progress)
        log = export_iolog_v3(plan, workdir / "replay.iolog", include_trims=can_trim)
        job = fiolib.replay_job(log.path, self.path, ioengine=self.p.ioengine, iodepth=self.p.iodepth,
                                timed=timed, chunked=plan.num_rows > CHUNKED_IOLOG_ROWS)
        stat_before = self._diskstats()
        t0 = time.perf_counter()
        run = fiolib.run_jobs([job], workdir, "replay", runner=self.runner)
        wall = time.perf_counter() - t0
        if progress is not None:
            progress(1, 1)
        stat_after = self._diskstats()
        s = run.summary
        # fio 3.33 leaves the last iodepth-1 completions out of io_bytes (fio_runner's module doc).
        write_bytes, read_bytes, trim_bytes = fiolib.issued_log_bytes(
            s, log, str(run.json_path), iodepth=self.p.iodepth, max_io_bytes=fiolib.plan_max_length(plan))
        planned_trim = int(trims.sum())
        trim_count = (TrimCount(TrimMode.NONE, 0) if not trims.size else TrimCount(TrimMode.NATIVE, planned_trim)
                      if can_trim else TrimCount(TrimMode.SKIPPED, planned_trim, skipped_ops=int(trims.size)))
        return ReplayResult(
            device=f"{self.spec.kind}:{self.path}", tool=s.fio_version,
            write_bytes=write_bytes, read_bytes=read_bytes, trim_bytes=trim_bytes,
            write_ios=s.write.total_ios, read_ios=s.read.total_ios, wall_s=wall, trims=trim_count,
            tool_output_path=str(run.json_path),
            details={
                "fio_io_bytes": {"write": s.write.io_bytes, "read": s.read.io_bytes, "trim": s.trim.io_bytes},
                "fio_runtime_ms": s.runtime_ms,
                "write_iops": s.write.iops, "read_iops": s.read.iops,
                "write_bw_bytes_per_s": s.write.bw_bytes_per_s,
                "write_clat_percentiles_ns": dict(s.write.clat_percentiles_ns),
                "ioengine": self.p.ioengine, "iodepth": self.p.iodepth, "timed": timed,
                "iolog": str(log.path), "job_file": str(run.job_path),
                # The kernel's own count for the device over the replay (any other writer included).
                **_diskstats_details(stat_before, stat_after),
                **({"precondition": dataclasses.asdict(self.precondition_result)}
                   if self.precondition_result else {}),
            },
        )

    def _empty_replay(self) -> ReplayResult:
        """The result of a plan without rows: nothing issued, fio not started."""
        return ReplayResult(device=f"{self.spec.kind}:{self.path}", tool=self.fio_version, write_bytes=0,
                            read_bytes=0, trim_bytes=0, write_ios=0, read_ios=0, wall_s=0.0,
                            trims=TrimCount(TrimMode.NONE, 0),
                            details={"empty_plan": True, "ioengine": self.p.ioengine, "iodepth": self.p.iodepth})

    def _replay_deferring_trims(self, plan: pa.Table, workdir: Path, *, timed: bool,
                                progress: ReplayProgress | None) -> ReplayResult:
        """Replay where fio cannot issue the plan's trims (a fio that drops iolog trims, or a file):
        per segment, fio plays the reads and writes, then the segment's trims are issued here
        (module docstring)."""
        segments, settings = device_segments(plan, capacity_bytes=self._capacity, block_bytes=self.block_bytes,
                                             max_ops=self.p.trim_segment_ops, max_bytes=self.p.trim_segment_bytes)
        t_s = plan.column("t_s").to_numpy(zero_copy_only=False)
        stat_before = self._diskstats()
        parts: list[tuple[fiolib.FioSummary, fiolib.IologStats, str]] = []
        jobs: list[str] = []
        t0 = time.perf_counter()
        fd = os.open(self.path, os.O_WRONLY)
        # Discards run iodepth at a time, like fio's I/O (a BLKDISCARD ioctl blocks its thread
        # and releases the GIL; one segment's ranges are disjoint, so their order is free).
        pool = ThreadPoolExecutor(max_workers=max(self.p.iodepth, 1), thread_name_prefix="kvwear-discard")
        try:
            for k, seg in enumerate(segments):
                if timed:   # keep the plan's clock across segments (fio keeps it inside one)
                    time.sleep(max(0.0, float(t_s[seg.first_row] - t_s[0]) - (time.perf_counter() - t0)))
                if seg.ops.num_rows:
                    log = export_iolog_v3(seg.ops, workdir / f"replay-{k:05d}.iolog", include_trims=False)
                    job = fiolib.replay_job(log.path, self.path, ioengine=self.p.ioengine, iodepth=self.p.iodepth,
                                            timed=timed, chunked=seg.ops.num_rows > CHUNKED_IOLOG_ROWS)
                    run = fiolib.run_jobs([job], workdir, f"replay-{k:05d}", runner=self.runner)
                    log.path.unlink()        # derived from block_ops.parquet; the JSON and job file stay
                    parts.append((run.summary, log, str(run.json_path)))
                    jobs.append(str(run.job_path))
                self._discard(pool, fd, seg.trim_offsets, seg.trim_lengths)
                if progress is not None:
                    progress(k + 1, len(segments))
        finally:
            pool.shutdown(cancel_futures=True)     # on an error, queued discards are dropped
            os.close(fd)
        wall = time.perf_counter() - t0
        stat_after = self._diskstats()
        fio = fiolib.combine_segment_replays(parts, iodepth=self.p.iodepth, max_io_bytes=fiolib.plan_max_length(plan))
        trim_count, trim_details = trim_accounting(segments)
        return ReplayResult(
            device=f"{self.spec.kind}:{self.path}", tool=self.fio_version,
            write_bytes=fio.write_bytes, read_bytes=fio.read_bytes,
            trim_bytes=sum(seg.issued_trim_bytes for seg in segments),
            write_ios=fio.write_ios, read_ios=fio.read_ios, wall_s=wall, trims=trim_count,
            tool_output_path=fio.json_paths[0] if fio.json_paths else "",
            details={
                **fio.details(), **trim_details, **settings,
                "ioengine": self.p.ioengine, "iodepth": self.p.iodepth, "timed": timed,
                "job_file": jobs[0] if jobs else "",
                **_diskstats_details(stat_before, stat_after),
                **({"precondition": dataclasses.asdict(self.precondition_result)}
                   if self.precondition_result else {}),
            },
        )

    def _discard(self, pool: ThreadPoolExecutor, fd: int, offsets: np.ndarray, lengths: np.ndarray) -> None:
        """Trim byte ranges: BLKDISCARD on a block device, a punched hole in a file (as fio does)."""

        def one(o: int, n: int) -> None:
            try:
                if self.spec.kind == "block":
                    fcntl.ioctl(fd, BLKDISCARD, struct.pack("QQ", o, n))
                else:
                    punch_hole(fd, o, n)
            except OSError as exc:
                raise KvwearError(
                    f"{self.path}: discarding {n} bytes at {o} failed ({exc}); the device may not support "
                    "TRIM: plan without it (kvwear run --no-trim) or drop the trims knowingly "
                    "(--device-option skip_trims=true)") from exc

        for _ in pool.map(one, offsets.tolist(), lengths.tolist(), chunksize=64):
            pass                   # re-raises the first failure

    def _diskstats(self) -> BlockDelta | None:
        """The device's own counters now (fs_player.block_counters: /sys/dev/block/M:m/stat); None
        for a file, or when the kernel's counters cannot be read (they are a detail, not a check)."""
        if self.spec.kind != "block":
            return None
        try:
            return block_counters(str(self._identity.extra.get("dev")))
        except KvwearError:
            return None

    def precondition(self, workdir: Path, *, steady: bool = True) -> PreconditionResult:
        """A sequential fill of `fill_loops` × the range, then (`steady`, SNIA-style) random 4 KiB
        writes until fio's steady-state detector (`ss=`) is satisfied or the time cap passes."""
        p = self.p
        cap = self._capacity
        fill = fiolib.seq_fill_job(self.path, cap, loops=p.fill_loops, ioengine=self.p.ioengine, iodepth=self.p.iodepth)
        a = fiolib.run_jobs([fill], workdir, "precondition-fill", runner=self.runner)
        if not steady:
            return PreconditionResult(seq_fill_bytes=a.summary.write.io_bytes, random_bytes=0,
                                      steady_state_attained=False, criterion="", random_runtime_ms=0,
                                      json_paths=(str(a.json_path),))
        rand = fiolib.steady_state_job(
            self.path, cap, criterion=p.ss_criterion, ss_dur_s=p.ss_dur_s, ss_ramp_s=p.ss_ramp_s,
            max_runtime_s=p.ss_max_runtime_s, ioengine=self.p.ioengine, iodepth=self.p.iodepth)
        b = fiolib.run_jobs([rand], workdir, "precondition-steady", runner=self.runner)
        ss = b.summary.jobs[0].steady_state
        return PreconditionResult(
            seq_fill_bytes=a.summary.write.io_bytes, random_bytes=b.summary.write.io_bytes,
            steady_state_attained=bool(ss and ss.attained), criterion=ss.criterion if ss else "",
            random_runtime_ms=b.summary.runtime_ms, json_paths=(str(a.json_path), str(b.json_path)),
            extra={"ss_measured": ss.measured if ss else "", "ss_iops_mean": ss.iops_mean if ss else 0.0},
        )

    def close(self) -> None:
        """Delete the backing file this backend created, unless keep_image=true, then release it
        (in that order: once released, another run may claim the path)."""
        remove_created(self.created, self.p.keep_image)
        self._claim.close()


class File(Backend):
    """`file:PATH`: a regular file the run creates at the capacity it needs, or an existing one."""

    Params = FioParams
    capabilities = Capabilities(drive_resource=True)
    device = FioDevice

    @classmethod
    def preflight(cls, spec: DeviceSpec) -> None:
        """The target passes check_file_target, its folder is writable, no other kvwear holds it."""
        p = FioParams.of(spec)
        target = _target(spec)
        check_file_target(target, p.confirm_overwrite)
        folder = Path(target).resolve().parent
        if not Path(target).exists():
            # try it: permission bits do not say whether a file system takes new files (/proc, a
            # read-only mount, or root, for whom access() allows everything)
            # (the nearest folder that exists: the replay makes the missing ones)
            probe = next(f for f in (folder, *folder.parents) if f.exists())
            try:
                tempfile.TemporaryFile(dir=probe).close()
            except OSError as exc:
                raise KvwearError(f"device.target {target}: cannot create a file in {probe} ({exc.strerror}); "
                                  "give a path in a writable folder of a regular file system") from None
        if Path(target).exists():
            if not os.access(target, os.W_OK):
                raise KvwearError(f"device.target {target}: not writable")
            check_free(device_lock_path("file", file_identity(target)), target)


class Block(Backend):
    """`block:/dev/X`: a whole block device of fixed size, traced by eBPF, with NVMe wear logs."""

    Params = FioParams
    capabilities = Capabilities(block_tracer=True, drive_resource=True, fixed_size=True)
    device = FioDevice

    @classmethod
    def open(cls, spec: DeviceSpec, workdir: Path) -> DeviceBackend:
        """fio's raw replay, or with option `filesystem` the file player on a file system kvwear
        makes on the device (kvwear.harness.devices.fs_player.FsDevice)."""
        params = FioParams.of(spec)
        if params.filesystem is not None:
            return FsDevice(spec, workdir, params, params.confirm_serial)
        return FioDevice(spec, workdir)

    @classmethod
    def fixed_capacity(cls, spec: DeviceSpec) -> FixedCapacity:
        target = _target(spec)
        check_block_path(target)
        return FixedCapacity(int(path_identity(target).capacity_bytes or 0), whole=False)

    @classmethod
    def default_wear_readers(cls, spec: DeviceSpec) -> tuple[str, ...]:
        """psutil's disk counters, plus the NVMe logs when it is an NVMe namespace."""
        nvme = ("nvme-smart-binary", "smartctl", "ocp-c0", "intel-ca", "fdp")
        return ("psutil", *(nvme if Path(spec.target).name.startswith("nvme") else ()))

    @classmethod
    def preflight(cls, spec: DeviceSpec) -> None:
        """The safety guard accepts it, it is writable, and no other kvwear holds it."""
        p = FioParams.of(spec)
        check_block_path(_target(spec))
        facts = check_block_device(_target(spec), p.confirm_serial)
        ro = Path(f"/sys/class/block/{facts.name}/ro")
        if not os.access(spec.target, os.W_OK) or (ro.exists() and ro.read_text().strip() == "1"):
            raise KvwearError(f"device.target {spec.target}: not writable (read-only, or not root)")
        ident = block_identity(facts.serial, facts.dev)
        check_free(device_lock_path("block", ident), f"{spec.target} ({ident})")


def _target(spec: DeviceSpec) -> str:
    if not spec.target:
        raise KvwearError(f"--device {spec.kind} needs a path: {spec.kind}:/path")
    return spec.target


DEVICES.add("file", File)
DEVICES.add("block", Block)


# ---------------------------------------------------------------------------------------------
# loop devices over files (tests, benchmarks, and users who want a block-layer path for a file)


@contextlib.contextmanager
def loop_device(backing: Path, size_bytes: int | str | None = None, *, direct_io: bool = False,
                nomerges: bool = False, partscan: bool = False) -> Iterator[str]:
    """Attach a loop device over `backing` (created or grown to `size_bytes`), yield its path,
    detach it on exit. `nomerges` stops the block layer merging adjacent requests, so request
    counts at the device equal the I/Os issued; `partscan` makes the kernel read a partition table.
    Needs root."""
    backing = Path(backing)
    if size_bytes is not None:
        size = parse_size(size_bytes)
        with open(backing, "ab") as fh:
            if fh.tell() < size:
                fh.truncate(size)
    argv = ["losetup", "--find", "--show", *(["--direct-io=on"] if direct_io else []),
            *(["--partscan"] if partscan else []), str(backing)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise KvwearError(f"losetup failed: {proc.stderr.strip()} (loop devices need root)")
    dev = proc.stdout.strip()
    try:
        if nomerges:
            Path(f"/sys/block/{Path(dev).name}/queue/nomerges").write_text("2")
        yield dev
    finally:
        subprocess.run(["losetup", "--detach", dev], capture_output=True, check=False)
