"""The plan format of kvwear-dw, kvwear's directive-write tool (emulator/kvwear_dw.c), and its report.

kvwear-dw replays a block_ops plan inside the guest with NVMe passthrough and puts each write's
placement handle in the command's data placement directive (Directive Type 2, Directive Specific =
placement identifier), which the guest's fio 3.33 cannot. `encode_plan` writes the plan it reads;
`parse_report` reads the JSON it prints. The layout (little-endian, version 1) is documented in
the C source and mirrored by `HEADER` / `RECORD` here; the two must change together (bump
`PLAN_VERSION`, which the tool checks).

Rows keep the plan's order, offsets and lengths exactly (the tool splits a row longer than the
device's transfer limit into several commands, never merges rows), so the tool's bytes per op and
per handle equal the plan's. `directives=False` writes every row without the directive flag: plain
writes, what a drive without FDP gets.

This module encodes and parses only (pure functions); it never runs the tool or touches a device.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kvwear.errors import InputError, KvwearError
from kvwear.harness.devices.measurement import HandleCount
from kvwear.harness.plan.placement import plan_handles, plan_write_bytes_by_handle

DW_TOOL = "kvwear-dw 1"          # the tool name of what kvwear-dw issued (its plan format's version)

PLAN_MAGIC = b"KVWDPLAN"
PLAN_VERSION = 1
HEADER = np.dtype([("magic", "S8"), ("version", "<u4"), ("record_bytes", "<u4"), ("records", "<u8"),
                   ("flags", "<u4"), ("reserved", "<u4")])
RECORD = np.dtype([("t_s", "<f8"), ("offset_bytes", "<u8"), ("length_bytes", "<u8"), ("handle", "<u2"),
                   ("op", "u1"), ("flags", "u1"), ("reserved", "<u4")])
OP_CODES = {"write": 0, "read": 1, "trim": 2}
FLAG_TIMED = 1            # header: honour t_s
FLAG_DIRECTIVE = 1        # record: the write carries its handle as a data placement directive
MAX_HANDLE = 0xFFFF       # Directive Specific is 16 bits
assert HEADER.itemsize == 32 and RECORD.itemsize == 32


def encode_plan(plan: pa.Table, *, directives: bool, timed: bool = False, source: str = "block_ops") -> bytes:
    """The kvwear-dw plan for a BLOCK_OPS table (op, offset_bytes, length_bytes, t_s and
    placement_handle if present). A handle outside 0…65535, an unknown op, or a negative offset or
    non-positive length is an InputError naming the row."""
    n = plan.num_rows
    ops = plan.column("op").cast(pa.string()).to_numpy(zero_copy_only=False) if n else np.array([], object)
    codes = np.full(n, 255, np.uint8)
    for name, code in OP_CODES.items():
        codes[ops == name] = code
    bad = np.flatnonzero(codes == 255)
    if bad.size:
        raise InputError(source, int(bad[0]) + 1, "op", f"{ops[bad[0]]!r}; valid: {', '.join(OP_CODES)}")
    offset = plan.column("offset_bytes").to_numpy(zero_copy_only=False).astype(np.int64)
    length = plan.column("length_bytes").to_numpy(zero_copy_only=False).astype(np.int64)
    for name, col, ok in (("offset_bytes", offset, offset >= 0), ("length_bytes", length, length > 0)):
        if not ok.all():
            i = int(np.argmin(ok))
            raise InputError(source, i + 1, name, f"{int(col[i])} (kvwear-dw needs offset ≥ 0, length > 0)")
    handles = plan_handles(plan)
    writes = codes == OP_CODES["write"]
    handles = np.where(writes, handles, 0)       # a handle steers writes only (kvwear.harness.plan.placement)
    if handles.size and (handles.min() < 0 or handles.max() > MAX_HANDLE):
        i = int(np.argmax((handles < 0) | (handles > MAX_HANDLE)))
        raise InputError(source, i + 1, "placement_handle", f"{int(handles[i])} outside 0…{MAX_HANDLE}")
    recs = np.zeros(n, RECORD)
    recs["t_s"] = plan.column("t_s").to_numpy(zero_copy_only=False) if n else 0.0
    recs["offset_bytes"] = offset
    recs["length_bytes"] = length
    recs["op"] = codes
    if directives:
        recs["handle"] = handles
        recs["flags"] = np.where(writes, FLAG_DIRECTIVE, 0)
    header = np.array([(PLAN_MAGIC, PLAN_VERSION, RECORD.itemsize, n, FLAG_TIMED if timed else 0, 0)], HEADER)
    return header.tobytes() + recs.tobytes()


@dataclass(frozen=True)
class DwReport:
    """What kvwear-dw issued (bytes of commands the device completed with status 0)."""

    write_bytes: int
    read_bytes: int
    trim_bytes: int
    write_cmds: int
    read_cmds: int
    trim_cmds: int
    directive_writes: int
    write_bytes_by_handle: tuple[int, ...]
    write_cmds_by_handle: tuple[int, ...]
    records: int
    lba_bytes: int
    max_io_bytes: int
    elapsed_s: float
    dry_run: bool


def parse_report(data: bytes | str, source: str = "kvwear-dw report") -> DwReport:
    """The tool's JSON report; a missing or mistyped field is a KvwearError naming it."""
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise KvwearError(f"{source}: not JSON ({exc})") from None
    if not isinstance(obj, dict) or obj.get("tool") != "kvwear-dw":
        raise KvwearError(f"{source}: not a kvwear-dw report")
    if obj.get("plan_version") != PLAN_VERSION:
        raise KvwearError(f"{source}: plan version {obj.get('plan_version')!r}, expected {PLAN_VERSION}")

    def uint(key: str) -> int:
        v = obj.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise KvwearError(f"{source}: field {key}: expected a non-negative integer, got {v!r}")
        return v

    def uints(key: str) -> tuple[int, ...]:
        v = obj.get(key)
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in v):
            raise KvwearError(f"{source}: field {key}: expected a list of non-negative integers, got {v!r}")
        return tuple(v)

    elapsed = obj.get("elapsed_s")
    if not isinstance(elapsed, int | float) or isinstance(elapsed, bool):
        raise KvwearError(f"{source}: field elapsed_s: expected a number, got {elapsed!r}")
    rep = DwReport(
        write_bytes=uint("write_bytes"), read_bytes=uint("read_bytes"), trim_bytes=uint("trim_bytes"),
        write_cmds=uint("write_cmds"), read_cmds=uint("read_cmds"), trim_cmds=uint("trim_cmds"),
        directive_writes=uint("directive_writes"), write_bytes_by_handle=uints("write_bytes_by_handle"),
        write_cmds_by_handle=uints("write_cmds_by_handle"), records=uint("records"), lba_bytes=uint("lba_bytes"),
        max_io_bytes=uint("max_io_bytes"), elapsed_s=float(elapsed), dry_run=obj.get("dry_run") is True)
    if sum(rep.write_bytes_by_handle) != rep.write_bytes:
        raise KvwearError(f"{source}: write bytes per handle sum to {sum(rep.write_bytes_by_handle)}, "
                          f"not the {rep.write_bytes} written")
    return rep


def report_details(rep: DwReport) -> dict[str, object]:
    """What kvwear-dw issued, for a result's `details` (people read them; no stage does)."""
    return {"dw_write_cmds": rep.write_cmds, "dw_read_cmds": rep.read_cmds, "dw_trim_cmds": rep.trim_cmds,
            "dw_directive_writes": rep.directive_writes, "dw_max_io_bytes": rep.max_io_bytes,
            "dw_elapsed_s": rep.elapsed_s}


def handle_accounting(plan: pa.Table, rep: DwReport) -> HandleCount:
    """The plan's and kvwear-dw's write bytes per handle, padded to one length (the estimator's
    per-handle accounting checks compare them)."""
    want = plan_write_bytes_by_handle(plan)
    n = max(len(want), len(rep.write_bytes_by_handle))
    return HandleCount(measured_by="kvwear-dw", plan_write_bytes=tuple(want + [0] * (n - len(want))),
                       host_bytes=tuple(list(rep.write_bytes_by_handle) + [0] * (n - len(rep.write_bytes_by_handle))))
