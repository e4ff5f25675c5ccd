"""The block-tracer plugin family: capture what the block layer issued to one device.

A `Tracer` attaches to the `block:block_rq_issue` / `block:block_rq_complete` tracepoints for one
device (`start(dev_t, out_path)`), streams every request to a BLOCK_TRACE Parquet file, and on
`stop()` reports a `CaptureResult` (events, lost events, which tracer ran, byte and request totals
per op). Tracers: `bcc` (compiled BPF, perf buffer, in-kernel device filter and latency),
`bpftrace` (BTF only, no headers), `auto` (bcc, falling back to bpftrace and saying why).

Pure helpers live here: `kernel_dev_t`, `classify_rwbs`, `totals_by_op`. This module must not
run fio or judge device safety.
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.errors import KvwearError
from kvwear.registry import Registry

TRACEFS = Path("/sys/kernel/tracing")
OPS = ("write", "read", "discard", "flush", "other")


class TracerUnavailable(KvwearError):
    """This tracer cannot run here; the message says what is missing and how to fix it."""


class CountsByOp:
    """The per-op totals of a record that counts block requests by op (its `bytes_by_op` and
    `requests_by_op`, keyed by OPS): a capture's result, and the device stage's record of it."""

    if TYPE_CHECKING:          # fields of the dataclasses this is mixed into, not fields of its own
        bytes_by_op: Mapping[str, int]
        requests_by_op: Mapping[str, int]

    @property
    def write_bytes(self) -> int:
        return int(self.bytes_by_op.get("write", 0))

    @property
    def discard_bytes(self) -> int:
        return int(self.bytes_by_op.get("discard", 0))

    @property
    def write_requests(self) -> int:
        return int(self.requests_by_op.get("write", 0))


@dataclass(frozen=True)
class CaptureResult(CountsByOp):
    tracer: str                       # the tracer that actually ran: "bcc" or "bpftrace"
    parquet_path: Path
    events: int                       # requests recorded (rows in the Parquet file)
    lost_events: int                  # samples the kernel dropped (perf buffer full)
    bytes_by_op: Mapping[str, int]
    requests_by_op: Mapping[str, int]
    unmatched_completions: int = 0    # completions with no issue seen (e.g. issued before start)
    no_completion: int = 0            # issues with no completion seen (latency null)
    extra: Mapping[str, object] = field(default_factory=dict)


class Tracer(Protocol):
    name: str

    def start(self, dev: int, out_path: Path) -> None:
        """Attach to the tracepoints for kernel dev_t `dev`; returns once probes are live."""
        ...

    def stop(self) -> CaptureResult:
        """Detach, flush everything to the Parquet file and report."""
        ...


# A factory takes the buffer-sizing options every tracer accepts: expected_iops (requests per
# second the per-CPU buffers must absorb) and per_cpu_buffer_bytes (a given size instead).
TracerFactory = Callable[..., Tracer]
# Modules that register tracers. Adding a tracer = its module + one line here.
TRACERS: Registry[TracerFactory] = Registry("tracer", modules=[
    "kvwear.harness.capture.auto", "kvwear.harness.capture.bcc", "kvwear.harness.capture.bpftrace"])


def kernel_dev_t(path_or_rdev: str | os.PathLike[str] | int) -> int:
    """The kernel's dev_t (major << 20 | minor) as block tracepoints report it, from a block device
    path or a user-space st_rdev."""
    if isinstance(path_or_rdev, int):
        rdev = path_or_rdev
    else:
        st = os.stat(path_or_rdev)
        if not stat.S_ISBLK(st.st_mode):
            raise KvwearError(f"{path_or_rdev}: not a block device; block tracing needs one "
                              "(a file target can be traced through a loop device)")
        rdev = st.st_rdev
    return (os.major(rdev) << 20) | os.minor(rdev)


def classify_rwbs(rwbs: pa.Array | pa.ChunkedArray) -> pa.Array:
    """blk_fill_rwbs strings → op: 'W' anywhere is a write (a leading 'F' is a preflush, a later
    one FUA), 'D' discard/secure erase, 'R' read, a lone flush 'F...' flush, else other."""
    s = pc.cast(rwbs, pa.string())
    if isinstance(s, pa.ChunkedArray):
        s = s.combine_chunks()
    has = {c: pc.match_substring(s, c).to_numpy(zero_copy_only=False) for c in "WDR"}
    flush = pc.starts_with(s, "F").to_numpy(zero_copy_only=False)
    out = np.select([has["W"], has["D"], has["R"], flush], ["write", "discard", "read", "flush"],
                    default="other")
    return pa.array(out, pa.string())


def classify_rwbs_codes(rwbs: np.ndarray) -> np.ndarray:
    """The same classes as `classify_rwbs`, as int8 indices into OPS, from fixed-width rwbs bytes
    (numpy 'S8' as the kernel hands them over): vectorized over a uint8 matrix, no strings."""
    if len(rwbs) == 0:
        return np.zeros(0, dtype=np.int8)
    m = np.ascontiguousarray(rwbs).view(np.uint8).reshape(len(rwbs), -1)
    has = {c: (m == ord(c)).any(axis=1) for c in "WDR"}
    flush = m[:, 0] == ord("F")
    codes = np.full(len(rwbs), OPS.index("other"), dtype=np.int8)
    # Later assignments win: apply in reverse precedence order.
    codes[flush] = OPS.index("flush")
    codes[has["R"]] = OPS.index("read")
    codes[has["D"]] = OPS.index("discard")
    codes[has["W"]] = OPS.index("write")
    return codes


def int64_with_nulls(values: np.ndarray, null: np.ndarray) -> pa.Array:
    """An int64 Arrow array with nulls where `null` is True, built from buffers (pa.array with a
    mask takes a slow per-element path: 3 µs per value)."""
    vals = np.ascontiguousarray(values, dtype=np.int64)
    n_null = int(null.sum())
    if n_null == 0:
        return pa.array(vals)
    validity = np.packbits(~null, bitorder="little")
    return pa.Array.from_buffers(pa.int64(), len(vals), [pa.py_buffer(validity), pa.py_buffer(vals)], n_null)


def op_dictionary(codes: np.ndarray) -> pa.DictionaryArray:
    """int8 codes into OPS → the dictionary<int8, string> column BLOCK_TRACE stores."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), pa.array(OPS, pa.string()))


def totals_by_op(ops: pa.Array, nbytes: np.ndarray) -> tuple[dict[str, int], dict[str, int]]:
    op_np = ops.to_numpy(zero_copy_only=False)
    by_bytes = {o: int(nbytes[op_np == o].sum()) for o in OPS}
    by_count = {o: int((op_np == o).sum()) for o in OPS}
    return by_bytes, by_count


def parse_fdinfo_misses(text: str) -> int | None:
    """`recursion_misses` of a BPF program's /proc/PID/fdinfo/FD (None if the fd is not a program).
    A tracepoint program is skipped when another BPF program already runs on that CPU (e.g. a
    completion interrupting an issue probe); the kernel counts those skips here (Linux ≥ 5.12)."""
    if "prog_type:" not in text:
        return None
    for line in text.splitlines():
        key, _, val = line.partition(":")
        if key.strip() == "recursion_misses":
            return int(val.strip())
    return 0


def bpf_prog_misses(pid: int | str = "self", fds: list[int] | None = None) -> int:
    """Sum of recursion_misses over the BPF program fds of process `pid` (all of them, or `fds`)."""
    base = Path(f"/proc/{pid}/fdinfo")
    total = 0
    names = [str(f) for f in fds] if fds is not None else [p.name for p in base.iterdir()]
    for name in names:
        try:
            n = parse_fdinfo_misses((base / name).read_text())
        except OSError:
            continue
        total += n or 0
    return total


def require_root(tool: str) -> None:
    if os.geteuid() != 0:
        raise TracerUnavailable(f"{tool}: eBPF tracing needs root (running as uid {os.geteuid()})")


def require_tracefs(tool: str) -> None:
    if not (TRACEFS / "events" / "block" / "block_rq_issue").exists():
        raise TracerUnavailable(
            f"{tool}: tracefs is not mounted at {TRACEFS} (or the kernel lacks block tracepoints); "
            "run `sudo scripts/setup-bcc.sh` or `mount -t tracefs nodev /sys/kernel/tracing`")


def require_headers(tool: str) -> None:
    build = Path(f"/lib/modules/{platform.release()}/build")
    if not (build / "include").exists():
        raise TracerUnavailable(
            f"{tool}: no kernel headers at {build} (bcc compiles at run time); install "
            "linux-headers-amd64 and run `sudo scripts/setup-bcc.sh` to link them")


def require_program(tool: str, program: str) -> str:
    path = shutil.which(program)
    if not path:
        raise TracerUnavailable(f"{tool}: `{program}` not found (Debian package {program})")
    return path


def open_tracer(name: str = "auto", *, expected_iops: float | None = None,
                per_cpu_buffer_bytes: int | None = None) -> Tracer:
    """The tracer registered as `name` (auto, bcc, bpftrace), its per-CPU buffers sized for
    `expected_iops` requests per second, or `per_cpu_buffer_bytes` each (None: its default)."""
    options: dict[str, float | int] = {}
    if expected_iops is not None:
        options["expected_iops"] = expected_iops
    if per_cpu_buffer_bytes is not None:
        options["per_cpu_buffer_bytes"] = per_cpu_buffer_bytes
    return TRACERS.get(name)(**options)
