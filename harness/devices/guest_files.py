"""The fs layout inside the qemu/femu guest: the plan kvwear's guest file player reads, the
settings its /init makes and mounts the file system with, and the counts it returns.

The guest has no Python, so a FILE_OPS plan (kvwear.harness.plan.files) is played there by
kvwear-fs (emulator/kvwear_fs.c, /bin/kvwear-fs in the guest image), which plays each row as the
host's player does (kvwear.harness.devices.fs_player.play_file_ops). This module writes its text
plan (`encode_file_plan`: a first line with the write size, fsync and fstrim interval, then one
`T_S OP LENGTH NAME` line per row, in order), the job's shell settings for the guest's /init
(`job_env`: the mkfs command and mount options of the shared FsParams, so host and guest make and
mount a file system alike), reads the tool's JSON report as a typed `FsReport`
(`parse_fs_report`), and with the drive's block counters that /init read around mkfs and around
the mount fills the same `FileSystemCount` as the host's player (`guest_file_counts`).

Must not: run anything or boot a guest (kvwear.harness.devices.qemu does); it converts bytes.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields

import pyarrow as pa

from kvwear.emulator.guest import GUEST_DEVICE
from kvwear.errors import KvwearError
from kvwear.harness.devices.fs_player import FsParams, delta, parse_block_stat
from kvwear.harness.devices.measurement import FileSystemCount

FS_TOOL = "kvwear-fs"
FS_PLAN_VERSION = 1
_OPS = {"write": "w", "read": "r", "unlink": "u"}
_MAX_NAME = 255          # the tool's (and the file systems') limit on a file name, in bytes


def encode_file_plan(table: pa.Table, write_bytes: int, fs: FsParams, source: str = "file_ops plan") -> bytes:
    """kvwear-fs's plan (module docstring) of a conformed FILE_OPS `table` counted at
    `write_bytes`. A row the tool could not play as the host's player does (an unknown op, a
    name that is not one plain word) is refused naming it."""
    interval = fs.fstrim_interval()
    out = [f"kvwear-fs-plan {FS_PLAN_VERSION} {write_bytes} {int(fs.fsync)} {interval or 0!r} {table.num_rows}\n"]
    row = 0
    for batch in table.select(["t_s", "op", "length_bytes", "name"]).to_batches(max_chunksize=1 << 14):
        ops = batch.column("op").to_pylist()
        for t, op, ln, name in zip(batch.column("t_s").to_pylist(), ops, batch.column("length_bytes").to_pylist(),
                                   batch.column("name").to_pylist(), strict=True):
            row += 1
            code = _OPS.get(op)
            if code is None:
                raise KvwearError(f"{source}: row {row}: op {op!r}, kvwear-fs plays {', '.join(_OPS)}")
            if not name or len(name.encode()) > _MAX_NAME or name in (".", "..") or "/" in name \
                    or any(c.isspace() for c in name):
                raise KvwearError(f"{source}: row {row}: file name {name!r} is not one plain word of at most "
                                  f"{_MAX_NAME} bytes (kvwear-fs reads names up to white space)")
            # repr: the shortest text that reads back as the same double, so the guest's fstrim
            # times fall on the same rows as the host's
            out.append(f"{t!r} {code} {ln} {name}\n")
    return "".join(out).encode()


def job_env(fs: FsParams) -> bytes:
    """The job's settings for the guest's /init (job.env, shell): the mkfs command without the
    device, the file system to mount and the mount options."""
    if fs.filesystem is None:
        raise KvwearError("internal error: a guest file job without a filesystem option")
    lines = [f"KVWEAR_MKFS={shlex.quote(' '.join(fs.mkfs()))}", f"KVWEAR_FS={fs.filesystem}",
             f"KVWEAR_MOUNT_OPTIONS={fs.mount_options()}"]
    return "".join(f"{ln}\n" for ln in lines).encode()


@dataclass(frozen=True)
class FsReport:
    """kvwear-fs's report: what its calls did (each count as the host's player counts it)."""

    rows: int
    file_write_bytes: int
    file_read_bytes: int
    write_calls: int
    files_created: int
    files_unlinked: int
    unlinked_bytes: int
    fsyncs: int
    fstrims: int
    fstrim_bytes: int
    end_files: int
    end_file_bytes: int
    elapsed_s: float


def parse_fs_report(data: bytes, source: str) -> FsReport:
    """The tool's JSON report, every field present and non-negative, of this plan version."""
    try:
        raw = json.loads(data)
    except ValueError:
        raise KvwearError(f"{source}: not JSON (kvwear-fs failed before its report?): {data[:120]!r}") from None
    if not isinstance(raw, dict) or raw.get("tool") != FS_TOOL:
        raise KvwearError(f"{source}: not a kvwear-fs report")
    if raw.get("plan_version") != FS_PLAN_VERSION:
        raise KvwearError(f"{source}: plan version {raw.get('plan_version')!r}, this kvwear writes {FS_PLAN_VERSION}")
    values: dict[str, int | float] = {}
    for f in fields(FsReport):
        v = raw.get(f.name)
        kinds = (int, float) if f.name == "elapsed_s" else (int,)       # every count is an integer
        if isinstance(v, bool) or not isinstance(v, kinds) or v < 0:
            raise KvwearError(f"{source}: field {f.name}: expected a non-negative number, got {v!r}")
        values[f.name] = v
    return FsReport(**values)  # type: ignore[arg-type]


def guest_file_counts(rep: FsReport, stats: Mapping[str, bytes], fs: FsParams, *, object_write_bytes: int,
                      fs_tools: str, kernel: str, source: str) -> FileSystemCount:
    """The file system's counts of a guest replay: the tool's `rep`, and the block counters the
    guest read (`stats`: name → the `stat` text of stat-{mkfs-before,mkfs-after,before,after}.txt;
    mkfs's own writes counted apart, the replay's from before the mount to after the unmount)."""
    def stat(name: str) -> bytes:
        if name not in stats:
            raise KvwearError(f"{source}: the guest returned no {name} (its /init predates the fs layout?)")
        return stats[name]

    read = {k: parse_block_stat(stat(f"stat-{k}.txt").decode(errors="replace"), f"{source}/stat-{k}.txt")
            for k in ("mkfs-before", "mkfs-after", "before", "after")}
    block = delta(read["after"], read["before"])
    assert fs.filesystem is not None
    return FileSystemCount(
        filesystem=fs.filesystem, discard=fs.discard, fsync=fs.fsync, fstrim_interval_s=fs.fstrim_interval(),
        mkfs_command=" ".join((*fs.mkfs(), GUEST_DEVICE)), mount_options=fs.mount_options(), fs_tools=fs_tools,
        kernel=kernel, object_write_bytes=object_write_bytes, file_write_bytes=rep.file_write_bytes,
        file_read_bytes=rep.file_read_bytes, write_calls=rep.write_calls, files_created=rep.files_created,
        files_unlinked=rep.files_unlinked, unlinked_bytes=rep.unlinked_bytes, fsyncs=rep.fsyncs,
        end_files=rep.end_files, end_file_bytes=rep.end_file_bytes, fstrims=rep.fstrims,
        fstrim_bytes=rep.fstrim_bytes, block=block, mkfs_block=delta(read["mkfs-after"], read["mkfs-before"]),
        overhead_bytes=block.write_bytes - rep.file_write_bytes)
