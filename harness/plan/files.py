"""The `fs` layout: object-granularity `ssd_ops` → file operations (`file_ops`), one file per object.

The raw-block layouts (kvwear.harness.plan.planner: extent, log, slab) decide where an object's
bytes go on the device. A store that keeps KV caches as files leaves that to a file system: it
creates a file per object, writes it, and unlinks it on eviction. This layout plans exactly that
and nothing below it; kvwear's file player (kvwear.harness.devices.fs_player) plays the plan on a
real file system, and the file system's allocation, journal and metadata writes are measured
there, never modelled here.

The store modelled is LMCache's local-disk backend (its documentation, "Local storage", and its
`LocalDiskBackend`, read for the facts only):
- one file per KV chunk, created when the chunk is stored and removed when it is evicted (LRU in
  LMCache; here whatever the simulated policy decided);
- all files in one flat directory (the configured `local_disk` path; no fan-out into
  subdirectories);
- the file's name is the chunk's cache key as text with `/` replaced by `-`, plus `.pt`: the key
  is `fmt@model@world_size@worker_id@chunk_hash` (newer versions append the dtype). Here:
  `kvwear@MODEL@1@0@<obj_id as 16 hex digits>@<obj_kind>.pt` (`file_name`): the same shape and
  length class, so a directory holds the same number of entries of the same size — which is what
  the file system's directory blocks see. MODEL is `FsLayoutConfig.model` ('/' → '-').

Each planned write is one row (`op` write): the player creates (or truncates, for a rewrite of a
live object) the file and writes the object's bytes in pieces of `write_bytes` (the store's chunk
size: LMCache writes a chunk in one call; a bounded buffer is the parameter), then fsyncs it when
the device option `fsync` is on. A read of a resident object is a `read` row (the whole file), an
evict of a resident object an `unlink` row. Reads and evicts of objects not resident are misses,
counted and dropped, as in the block planner. Objects of 0 bytes still create a (empty) file, as a
store would: they cost metadata, not data.

Byte accounting (`FilePlanCounts`): `object_write_bytes` (Σ bytes of the planned writes) is what
the player must write — no alignment here: the file system rounds to its block size, and that
rounding is part of its measured overhead. `peak_live_bytes` is the most object bytes resident at
once; it must fit the device (`capacity_bytes`), else the plan fails naming the ssd_ops row (the
file system's own space — journal, inodes — is the player's to find short: it fails on ENOSPC
naming the file_ops row).

Time: t_s as in the block planner (`time_mode`); the player plays as fast as possible.

This module plans only: it must not touch a file system, open devices or issue I/O. The loop is
plain Python over a dict of live objects: the player beneath it makes several system calls per
row, so planning costs far less than playing: bench/fs_layout.py measured 600k ssd_ops per CPU
second (0.38× the extent layout's numba kernel on the same stream, load 13), where the player
plays a few hundred objects per second on a loop device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.errors import InputError, KvwearError
from kvwear.harness.plan.planner import (
    PLAN_BATCH_ROWS,
    ReplayConfig,
    SsdOps,
    _checked_batches,
    plan_times,
)
from kvwear.tables import CATEGORY, TableSpec

FILE_OP_NAMES: tuple[str, ...] = ("write", "read", "unlink")

FILE_OPS = TableSpec(
    kind="file_ops",
    version=1,
    schema=pa.schema(
        [
            pa.field("t_s", pa.float64(), nullable=False),
            pa.field("op", CATEGORY, nullable=False),          # write (create/truncate + write), read, unlink
            pa.field("name", pa.string(), nullable=False),  # the file's name in the store's directory
            pa.field("length_bytes", pa.int64(), nullable=False),   # the object's bytes (the file's size)
            pa.field("obj_kind", CATEGORY, nullable=False),
            pa.field("obj_id", pa.int64(), nullable=False),
        ]
    ),
)


# The plan's write size (FsLayoutConfig.write_bytes) travels with the plan, in the FILE_OPS file's
# schema metadata (and a planned table's), so the player writes in the pieces the plan counted.
WRITE_BYTES_KEY = b"kvwear.file_ops.write_bytes"


@dataclass(frozen=True)
class FsLayoutConfig:
    """The fs layout's own settings (the rest is the run's ReplayConfig)."""

    model: str = "model"              # the key's model field (the run's model name)
    write_bytes: int = 1 << 20        # the size of one write() call (the store's chunk size, bounded)

    def __post_init__(self) -> None:
        if self.write_bytes <= 0:
            raise KvwearError(f"fs layout: write_bytes must be > 0, got {self.write_bytes}")

    def metadata(self) -> dict[bytes, bytes]:
        """What a FILE_OPS table planned with these settings carries (WRITE_BYTES_KEY)."""
        return {WRITE_BYTES_KEY: str(self.write_bytes).encode()}


def object_write_bytes(file_ops: pa.Table) -> int:
    """Σ bytes of a FILE_OPS plan's writes: what a file player must write (the object level)."""
    w = pc.equal(pc.cast(file_ops.column("op"), pa.string()), "write")
    return int(pc.sum(file_ops.column("length_bytes").filter(w)).as_py() or 0)


def planned_write_bytes(file_ops: pa.Table | pa.Schema, source: str) -> int:
    """The write size a FILE_OPS plan was counted at (WRITE_BYTES_KEY); a plan without it, or with a
    bad one, is refused naming `source`."""
    schema = file_ops if isinstance(file_ops, pa.Schema) else file_ops.schema
    raw = (schema.metadata or {}).get(WRITE_BYTES_KEY)
    if raw is None:
        raise KvwearError(f"{source}: a file_ops plan without its write size (metadata {WRITE_BYTES_KEY.decode()}); "
                          "plan it again")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n <= 0:
        raise KvwearError(f"{source}: file_ops metadata {WRITE_BYTES_KEY.decode()} = {raw!r}, not a byte count > 0")
    return n


def file_name(model: str, obj_id: int, kind: str) -> str:
    """An object's file name, shaped like LMCache's local-disk key file (module docstring)."""
    return f"kvwear@{model}@1@0@{obj_id & 0xFFFFFFFFFFFFFFFF:016x}@{kind}.pt".replace("/", "-")


@dataclass(frozen=True)
class FilePlanCounts:
    """A file plan's accounting (module docstring)."""

    object_write_bytes: int      # Σ bytes of planned writes: what the player must write
    read_bytes: int
    unlink_bytes: int            # Σ sizes of the files unlinked on eviction
    rewrite_bytes: int           # Σ sizes of live files a rewrite truncated
    ssd_ops: int
    writes: int                  # files written (created, or truncated and written again)
    creates: int                 # files created (writes of objects not resident)
    empty_writes: int            # writes of 0 bytes (an empty file: metadata only)
    rewrites: int
    reads: int
    unlinks: int
    read_misses: int
    evict_misses: int
    peak_live_bytes: int         # most object bytes resident at once
    peak_files: int              # most files resident at once
    end_live_bytes: int          # object bytes still resident when the plan ends
    end_files: int
    write_calls: int             # write() calls the player makes (each ≤ write_bytes)
    capacity_bytes: int
    layout: str = "fs"


def stream_file_ops(ssd_ops: SsdOps, config: ReplayConfig, sink: Callable[[pa.Table], None], *,
                    fs: FsLayoutConfig | None = None, source: str = "ssd_ops",
                    batch_rows: int = PLAN_BATCH_ROWS) -> FilePlanCounts:
    """Plan `ssd_ops` (SSD_OPS rows in time order) as FILE_OPS, handing each batch's rows to `sink`.
    Errors name the ssd_ops row (`source`:row) and field. `config.layout` must be `fs`."""
    if config.layout != "fs":
        raise KvwearError(f"stream_file_ops plans the fs layout, not {config.layout!r}")
    fs = fs or FsLayoutConfig()
    cap = config.capacity_bytes
    model = fs.model.replace("/", "-")
    kinds: list[str] = []
    live: dict[int, tuple[int, str]] = {}           # obj_id → (bytes, name)
    live_bytes = peak_bytes = peak_files = 0
    n: dict[str, Any] = {f: 0 for f in ("object_write_bytes", "read_bytes", "unlink_bytes", "rewrite_bytes", "writes",
                        "creates", "empty_writes", "rewrites", "reads", "unlinks", "read_misses",
                        "evict_misses", "write_calls", "ssd_ops")}
    t0: float | None = None
    out_rows = 0
    for b in _checked_batches(ssd_ops, config, source, batch_rows, kinds):
        if t0 is None and len(b.t):
            t0 = float(b.t[0])
        keep: list[int] = []
        codes: list[int] = []
        names: list[str] = []
        lengths: list[int] = []
        for i in range(len(b.ops)):
            op, obj, size = int(b.ops[i]), int(b.obj_id[i]), int(b.nbytes[i])
            have = live.get(obj)
            if op == 0:                              # write: create, or truncate a live copy
                if have is None:
                    name = file_name(model, obj, kinds[int(b.kind[i])])
                    n["creates"] += 1
                else:
                    name = have[1]
                    n["rewrites"] += 1
                    n["rewrite_bytes"] += have[0]
                    live_bytes -= have[0]
                live_bytes += size
                if live_bytes > cap:
                    raise InputError(source, b.base + i + 1, "bytes",
                                     f"fs layout: the live object bytes exceed the device at t_s={b.t[i]}: "
                                     f"writing {size} bytes with {live_bytes - size} live leaves "
                                     f"{live_bytes - cap} bytes short of {cap}")
                live[obj] = (size, name)
                n["writes"] += 1
                n["empty_writes"] += size == 0
                n["object_write_bytes"] += size
                n["write_calls"] += -(-size // fs.write_bytes)
                peak_bytes = max(peak_bytes, live_bytes)
                peak_files = max(peak_files, len(live))
                codes.append(0)
            elif have is None:
                n["read_misses" if op == 1 else "evict_misses"] += 1
                continue
            elif op == 1:
                name, size = have[1], have[0]
                n["reads"] += 1
                n["read_bytes"] += size
                codes.append(1)
            else:
                name, size = have[1], have[0]
                del live[obj]
                live_bytes -= size
                n["unlinks"] += 1
                n["unlink_bytes"] += size
                codes.append(2)
            keep.append(i)
            names.append(name)
            lengths.append(size)
        n["ssd_ops"] += len(b.ops)
        if not keep:
            continue
        idx = np.asarray(keep, np.int64)
        t = plan_times(b.t, idx, config, t0 or 0.0, out_rows)
        sink(pa.table({
            "t_s": pa.array(t, pa.float64()),
            "op": pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), pa.array(FILE_OP_NAMES)),
            "name": pa.array(names, pa.string()),
            "length_bytes": pa.array(lengths, pa.int64()),
            "obj_kind": pa.DictionaryArray.from_arrays(pa.array(b.kind[idx].astype(np.int8)), pa.array(kinds)),
            "obj_id": pa.array(b.obj_id[idx], pa.int64()),
        }, schema=FILE_OPS.schema))
        out_rows += len(keep)
    n.update(peak_live_bytes=peak_bytes, peak_files=peak_files, end_live_bytes=live_bytes,
             end_files=len(live), capacity_bytes=cap)
    return FilePlanCounts(**n)


def plan_file_ops(ssd_ops: SsdOps, config: ReplayConfig, *, fs: FsLayoutConfig | None = None,
                  source: str = "ssd_ops") -> tuple[pa.Table, FilePlanCounts]:
    """`stream_file_ops` collecting the whole FILE_OPS table (carrying its write size, WRITE_BYTES_KEY)."""
    fs = fs or FsLayoutConfig()
    chunks: list[pa.Table] = []
    counts = stream_file_ops(ssd_ops, config, chunks.append, fs=fs, source=source)
    table = pa.concat_tables(chunks) if chunks else FILE_OPS.empty()
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **fs.metadata()}), counts

