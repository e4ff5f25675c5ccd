"""The `bcc` block tracer: a BPF C program on the block layer's raw tracepoints.

Probes: `block_rq_issue`, `block_rq_requeue` and `block_rq_complete` as raw tracepoints, whose
argument is the kernel's `struct request *`. Not the classic tracepoints: those format a record for
every request of every device before a program sees it, and they share one per-CPU guard with every
kprobe and tracepoint program on the machine, so a completion interrupting an issue probe (or
another user's BPF program running on that CPU) makes the kernel skip ours — the lost events of
issue #31 (up to 2,826 per run). A raw tracepoint program is only skipped when *it* is already
running on that CPU. The request's fields are read at their offsets in the running kernel, taken
from its BTF (kvwear.harness.capture.btf: the headers bcc compiles against may be another
kernel's), and its op from `cmd_flags` with this kernel's REQ_OP_* values.

The device filter runs in the kernel (the request's queue → disk → major, first_minor against
KVWEAR_DEV; the matching queue is remembered, so later requests of the device take one read).
Issue time, sector, bytes and flags wait in a hash keyed by the request's address until its final
completion (a partial completion, nr_bytes below what is left, is only counted); then one 32-byte
record (issue time, sector, latency, bytes, flags) is appended to a per-CPU batch of 64 (one per
program: a completion may interrupt an issue on the same CPU), and full batches go to user space
through a per-CPU perf buffer (one wake-up per 64 requests keeps the Python side off the CPU fio
needs; partial batches are read from the per-CPU map on stop). A requeued request is forgotten
(it is issued again). A completion whose issue was not seen (issued before the capture started,
or its issue probe skipped) is emitted from the request itself without latency, and a request
still in flight at stop is emitted without latency: a request is lost only when the kernel skipped
both its issue and its completion probe, or when the perf buffer overflowed.

`lost_events` is therefore: requests in samples the perf buffer dropped (64 per sample, an upper
bound) plus min(issue probe runs skipped, completion probe runs skipped) as the kernel counts them
(fdinfo `recursion_misses`; an upper bound too, since runs for other devices' requests are counted
before the filter drops them). Per-CPU perf buffers are sized from the expected I/O rate
(`expected_iops` × 32 B × `BUFFER_HEADROOM_S`), or given (`per_cpu_buffer_bytes`).

Needs root, tracefs, BTF and kernel headers (bcc compiles at run time; scripts/setup-bcc.sh links
Debian's headers) and Debian's python3-bpfcc made importable from the venv. It must not run fio.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kvwear.harness.capture.base import (
    OPS,
    TRACERS,
    CaptureResult,
    TracerUnavailable,
    bpf_prog_misses,
    int64_with_nulls,
    op_dictionary,
    require_headers,
    require_root,
    require_tracefs,
)
from kvwear.harness.capture.btf import BtfError, enum_value, kernel_btf, member_offset
from kvwear.harness.capture.schema import BLOCK_TRACE
from kvwear.tables import TableWriter

NO_LATENCY = np.uint64(0xFFFFFFFFFFFFFFFF)

BATCH = 64   # requests per perf sample: one user-space wake-up per 64 requests, not per request
#: the in-flight table's size: requests issued and not yet completed (a device's queue depth is
#: at most a few thousand; a full table emits the request at issue, without latency)
INFLIGHT = 65536
#: expected requests per second when the caller gives none: above what one fio job reaches on a
#: loop device or an emulated drive here (~50 k), at the level of a fast NVMe drive at depth 16
DEFAULT_EXPECTED_IOPS = 250_000
#: the longest the poll thread may be kept off the CPU (a loaded 2-core machine) while the perf
#: buffers still hold everything recorded meanwhile
BUFFER_HEADROOM_S = 1.0
#: REQ_OP_BITS (include/linux/blk_types.h, a #define BTF does not carry): the op is cmd_flags' low 8 bits
REQ_OP_MASK = 0xFF

PROGRAM = r"""
struct val_t { u64 ts; u64 sector; u32 bytes; u32 flags; };
struct event_t { u64 ts; u64 sector; u64 lat; u32 bytes; u32 flags; };
struct batch_t { u32 n; u32 pad; struct event_t ev[BATCH]; };

BPF_HASH(inflight, u64, struct val_t, INFLIGHT);
BPF_PERCPU_ARRAY(batches, struct batch_t, 2);   /* 0: the completion program's, 1: the issue program's */
BPF_PERF_OUTPUT(events);
/* 0 emitted at completion (no issue seen), 1 emitted at issue, 2 requeues, 3 partial completions */
BPF_PERCPU_ARRAY(counters, u64, 4);
BPF_ARRAY(target_q, u64, 1);

static __always_inline void bump(int i) {
    u64 *c = counters.lookup(&i);
    if (c) (*c)++;
}

static __always_inline int ours(void *rq) {
    void *q = 0, *disk = 0;
    int major = 0, minor = 0, zero = 0;
    bpf_probe_read_kernel(&q, sizeof(q), (char *)rq + OFF_RQ_Q);
    if (!q) return 0;
    u64 *known = target_q.lookup(&zero);
    if (known && *known == (u64)q) return 1;
    bpf_probe_read_kernel(&disk, sizeof(disk), (char *)q + OFF_Q_DISK);
    if (!disk) return 0;
    bpf_probe_read_kernel(&major, sizeof(major), (char *)disk + OFF_DISK_MAJOR);
    bpf_probe_read_kernel(&minor, sizeof(minor), (char *)disk + OFF_DISK_FIRST_MINOR);
    if (((((u32)major) << 20) | (u32)minor) != KVWEAR_DEV) return 0;
    if (known) *known = (u64)q;
    return 1;
}

/* Append to batch `slot` of this CPU; send it when full. A raw tracepoint program never nests in
   itself on one CPU (the kernel skips the inner run and counts it), and each program has its own
   slot, so the batch needs no lock. */
static __always_inline void emit(void *ctx, int slot, u64 ts, u64 sector, u64 lat, u32 bytes, u32 flags) {
    struct batch_t *b = batches.lookup(&slot);
    if (!b) return;
    u32 n = b->n & (BATCH - 1);
    struct event_t *e = &b->ev[n];
    e->ts = ts; e->sector = sector; e->lat = lat; e->bytes = bytes; e->flags = flags;
    n++;
    if (n == BATCH) {
        b->n = BATCH;
        events.perf_submit(ctx, b, sizeof(*b));
        n = 0;
    }
    b->n = n;
}

RAW_TRACEPOINT_PROBE(block_rq_issue) {
    void *rq = (void *)ctx->args[0];
    if (!ours(rq)) return 0;
    struct val_t v = {};
    v.ts = bpf_ktime_get_ns();
    bpf_probe_read_kernel(&v.sector, sizeof(v.sector), (char *)rq + OFF_RQ_SECTOR);
    bpf_probe_read_kernel(&v.bytes, sizeof(v.bytes), (char *)rq + OFF_RQ_DATA_LEN);
    bpf_probe_read_kernel(&v.flags, sizeof(v.flags), (char *)rq + OFF_RQ_CMD_FLAGS);
    u64 key = (u64)rq;
    if (inflight.insert(&key, &v) == 0) return 0;
    /* Issued again without a completion or requeue seen: the earlier issue goes out without
       latency and this one takes its place; or the table is full: this one goes out now. */
    struct val_t *old = inflight.lookup(&key);
    if (old) {
        emit(ctx, 1, old->ts, old->sector, ~0ULL, old->bytes, old->flags);
        inflight.update(&key, &v);
    } else {
        emit(ctx, 1, v.ts, v.sector, ~0ULL, v.bytes, v.flags);
    }
    bump(1);
    return 0;
}

RAW_TRACEPOINT_PROBE(block_rq_requeue) {
    void *rq = (void *)ctx->args[0];
    if (!ours(rq)) return 0;
    u64 key = (u64)rq;
    inflight.delete(&key);   /* it will be issued again */
    bump(2);
    return 0;
}

RAW_TRACEPOINT_PROBE(block_rq_complete) {
    void *rq = (void *)ctx->args[0];
    if (!ours(rq)) return 0;
    u64 now = bpf_ktime_get_ns();
    u32 nr_bytes = (u32)ctx->args[2];
    u32 left = 0;
    bpf_probe_read_kernel(&left, sizeof(left), (char *)rq + OFF_RQ_DATA_LEN);
    if (nr_bytes < left) { bump(3); return 0; }   /* a partial completion: the request goes on */
    u64 key = (u64)rq;
    struct val_t *v = inflight.lookup(&key);
    if (v) {
        struct val_t copy = *v;
        /* Whoever deletes the entry owns it: a request is emitted exactly once. */
        if (inflight.delete(&key) == 0) {
            emit(ctx, 0, copy.ts, copy.sector, now - copy.ts, copy.bytes, copy.flags);
            return 0;
        }
    }
    /* No issue seen: the request as it completes, without latency. */
    struct val_t c = {};
    bpf_probe_read_kernel(&c.sector, sizeof(c.sector), (char *)rq + OFF_RQ_SECTOR);
    bpf_probe_read_kernel(&c.flags, sizeof(c.flags), (char *)rq + OFF_RQ_CMD_FLAGS);
    emit(ctx, 0, now, c.sector, ~0ULL, nr_bytes, c.flags);
    bump(0);
    return 0;
}
"""

EVENT_DTYPE = np.dtype([("t_ns", "<u8"), ("sector", "<u8"), ("lat", "<u8"), ("bytes", "<u4"), ("flags", "<u4")])
VAL_DTYPE = np.dtype([("ts", "<u8"), ("sector", "<u8"), ("bytes", "<u4"), ("flags", "<u4")])
BATCH_DTYPE = np.dtype([("n", "<u4"), ("pad", "<u4"), ("ev", EVENT_DTYPE, (BATCH,))])
#: the programs' names as bcc loads them (fdinfo misses are read per program)
_PROGS = {p: f"raw_tracepoint__block_rq_{p}".encode() for p in ("issue", "complete", "requeue")}


@dataclass(frozen=True)
class RequestOps:
    """This kernel's op values (enum req_op) and the preflush flag's bit (enum req_flag_bits)."""

    read: int
    write: int
    flush: int
    discard: int
    secure_erase: int
    preflush_bit: int

    def classify(self, flags: np.ndarray) -> np.ndarray:
        """cmd_flags → int8 indices into OPS, as blk_fill_rwbs and classify_rwbs would class them:
        write, discard (secure erase too), read, flush (an empty flush or a preflush), else other."""
        f = np.asarray(flags, dtype=np.uint32)
        op = f & REQ_OP_MASK
        codes = np.full(len(f), OPS.index("other"), dtype=np.int8)
        codes[((f >> self.preflush_bit) & 1).astype(bool) | (op == self.flush)] = OPS.index("flush")
        codes[op == self.read] = OPS.index("read")
        codes[(op == self.discard) | (op == self.secure_erase)] = OPS.index("discard")
        codes[op == self.write] = OPS.index("write")
        return codes


def events_to_table(raw: bytes, dev: int, ops: RequestOps) -> pa.Table:
    """Packed 32-byte event records → a BLOCK_TRACE table (pure; latency null when unknown)."""
    ev = np.frombuffer(raw, dtype=EVENT_DTYPE)
    lat = ev["lat"]
    return pa.table({
        "t_ns": pa.array(ev["t_ns"].astype(np.int64)),
        "dev": pa.array(np.full(len(ev), dev, dtype=np.int64)),
        "op": op_dictionary(ops.classify(ev["flags"])),
        "sector": pa.array(ev["sector"].astype(np.int64)),
        "bytes": pa.array(ev["bytes"].astype(np.int64)),
        "latency_ns": int64_with_nulls(lat.astype(np.int64), lat == NO_LATENCY),
    })


def perf_pages(expected_iops: float, per_cpu_buffer_bytes: int | None = None) -> int:
    """Pages per CPU of the perf buffer (a power of two, as the kernel requires): the bytes given,
    or what `expected_iops` fills in BUFFER_HEADROOM_S; at least 1 page (a 2,056-byte sample fits)."""
    want = per_cpu_buffer_bytes if per_cpu_buffer_bytes is not None else \
        expected_iops * EVENT_DTYPE.itemsize * BUFFER_HEADROOM_S
    pages = max(1, -(-int(want) // 4096))
    return 1 << (pages - 1).bit_length()


def kernel_layout() -> tuple[dict[str, int], RequestOps]:
    """The struct offsets the program reads and the op values, from this kernel's BTF; raises
    TracerUnavailable when the kernel lacks them (no BTF, or a block layer that changed shape)."""
    try:
        btf = kernel_btf(frozenset({"request", "request_queue", "gendisk"}))
        for tp in ("block_rq_issue", "block_rq_requeue", "block_rq_complete"):
            if btf.tracepoint_args(tp)[:1] != ("request",):
                raise BtfError(f"BTF: raw tracepoint {tp}'s first argument is not a struct request *")
        offsets = {
            "OFF_RQ_Q": member_offset(btf, "request", "q"),
            "OFF_RQ_CMD_FLAGS": member_offset(btf, "request", "cmd_flags"),
            "OFF_RQ_SECTOR": member_offset(btf, "request", "__sector"),
            "OFF_RQ_DATA_LEN": member_offset(btf, "request", "__data_len"),
            "OFF_Q_DISK": member_offset(btf, "request_queue", "disk"),
            "OFF_DISK_MAJOR": member_offset(btf, "gendisk", "major"),
            "OFF_DISK_FIRST_MINOR": member_offset(btf, "gendisk", "first_minor"),
        }
        op = {n: enum_value(btf, f"REQ_OP_{n.upper()}") for n in ("read", "write", "flush", "discard", "secure_erase")}
        ops = RequestOps(**op, preflush_bit=enum_value(btf, "__REQ_PREFLUSH"))
    except BtfError as exc:
        raise TracerUnavailable(f"bcc: {exc}") from None
    return offsets, ops


class BccTracer:
    """See the module docstring. `program` can be replaced (tests prove the fallback on a real
    compile failure)."""

    name = "bcc"

    def __init__(self, *, batch_events: int = 65536, expected_iops: float = DEFAULT_EXPECTED_IOPS,
                 per_cpu_buffer_bytes: int | None = None, program: str = PROGRAM) -> None:
        self.batch_events = batch_events
        self.perf_pages = perf_pages(expected_iops, per_cpu_buffer_bytes)
        self.program = program
        self._bpf: Any = None
        self._dev = 0
        self._ops: RequestOps | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._chunks: list[bytes] = []
        self._pending = 0
        self.lost_samples = 0
        self._writer: TableWriter | None = None
        self._bytes: dict[str, int] = {}
        self._reqs: dict[str, int] = {}
        self._no_completion = 0
        self._error: BaseException | None = None

    def start(self, dev: int, out_path: Path) -> None:
        require_root("bcc")
        require_tracefs("bcc")
        require_headers("bcc")
        try:
            from bcc import BPF  # Debian's python3-bpfcc, linked into the venv by setup-bcc.sh
        except ImportError as exc:
            raise TracerUnavailable(
                f"bcc: cannot import the bcc Python module ({exc}); install python3-bpfcc and run "
                "`sudo scripts/setup-bcc.sh .venv` to make it importable from the venv") from None
        offsets, self._ops = kernel_layout()
        self._dev = int(dev)
        defines = {"KVWEAR_DEV": f"{self._dev}u", "BATCH": BATCH, "INFLIGHT": INFLIGHT, **offsets}
        try:
            self._bpf = BPF(text=self.program.encode(), cflags=[f"-D{k}={v}" for k, v in defines.items()])
        except Exception as exc:   # bcc raises plain Exception on compile/load failure
            raise TracerUnavailable(f"bcc: the BPF program did not compile or load: {exc}") from None
        self._writer = TableWriter(BLOCK_TRACE, out_path)
        # Wake the poll thread every 8 samples (512 requests) per CPU, or when half a smaller buffer
        # is full; stop() consumes the rest.
        wakeup = min(8, max(1, self.perf_pages * 4096 // BATCH_DTYPE.itemsize // 2))
        self._bpf[b"events"].open_perf_buffer(self._on_event, page_cnt=self.perf_pages, lost_cb=self._on_lost,
                                              wakeup_events=wakeup)
        self._thread = threading.Thread(target=self._poll, name="kvwear-bcc-poll", daemon=True)
        self._thread.start()

    # The callbacks run on the poll thread; they only copy bytes (tight path), batches convert later.
    def _on_event(self, cpu: int, data: Any, size: int) -> None:
        self._chunks.append(ctypes.string_at(data, BATCH_DTYPE.itemsize))
        self._pending += BATCH
        if self._pending >= self.batch_events:
            self._flush()

    def _on_lost(self, count: int) -> None:
        self.lost_samples += int(count)

    def _poll(self) -> None:
        try:
            while not self._stop.is_set():
                self._bpf.perf_buffer_poll(timeout=100)
        except BaseException as exc:   # surfaced by stop()
            self._error = exc

    def _write(self, raw: bytes) -> None:
        assert self._writer is not None and self._ops is not None
        if not raw:
            return
        table = events_to_table(raw, self._dev, self._ops)
        self._writer.write(table)
        codes = table.column("op").combine_chunks().indices.to_numpy()
        nbytes = table.column("bytes").to_numpy()
        by_bytes = np.bincount(codes, weights=nbytes, minlength=len(OPS))
        by_reqs = np.bincount(codes, minlength=len(OPS))
        for i, o in enumerate(OPS):
            if by_reqs[i]:
                self._bytes[o] = self._bytes.get(o, 0) + int(by_bytes[i])
                self._reqs[o] = self._reqs.get(o, 0) + int(by_reqs[i])
        self._no_completion += table.column("latency_ns").null_count

    def _flush(self) -> None:
        raw = b"".join(self._chunks)
        self._chunks.clear()
        self._pending = 0
        self._write(np.frombuffer(raw, dtype=BATCH_DTYPE)["ev"].tobytes())

    def stop(self) -> CaptureResult:
        assert self._bpf is not None and self._writer is not None, "stop() before start()"
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self._error is not None:
                raise self._error
            # Drain what is still in the buffers, then the partial batches, then what is in flight.
            self._bpf.perf_buffer_poll(timeout=10)
            self._bpf.perf_buffer_consume()
            self._flush()
            for slot in (0, 1):
                for blob in self._bpf[b"batches"][ctypes.c_int(slot)]:
                    rec = np.frombuffer(bytes(blob)[:BATCH_DTYPE.itemsize], dtype=BATCH_DTYPE)[0]
                    self._write(rec["ev"][: int(rec["n"])].tobytes())
            left = [bytes(v) for v in self._bpf[b"inflight"].values()]
            in_flight = len(left)
            if left:
                vals = np.frombuffer(b"".join(left), dtype=VAL_DTYPE)
                ev = np.zeros(len(left), dtype=EVENT_DTYPE)
                for dst, src in (("t_ns", "ts"), ("sector", "sector"), ("bytes", "bytes"), ("flags", "flags")):
                    ev[dst] = vals[src]
                ev["lat"] = NO_LATENCY
                self._write(np.sort(ev, order="t_ns").tobytes())
            counters = [sum(int(c) for c in self._bpf[b"counters"][ctypes.c_int(i)]) for i in range(4)]
            misses = {p: bpf_prog_misses("self", [self._bpf.funcs[name].fd])
                      for p, name in _PROGS.items() if name in self._bpf.funcs}
            path = self._writer.close()
        except BaseException:
            self._writer.abort()
            raise
        finally:
            self._bpf.cleanup()
        # A request is lost only when both its probes were skipped (or its sample dropped).
        both = min(misses.get("issue", 0), misses.get("complete", 0))
        return CaptureResult(
            tracer=self.name, parquet_path=path, events=self._writer.rows,
            lost_events=self.lost_samples * BATCH + both,
            bytes_by_op=dict(self._bytes), requests_by_op=dict(self._reqs),
            unmatched_completions=counters[0], no_completion=self._no_completion,
            extra={"emitted_at_issue": counters[1], "requeues": counters[2], "partial_completions": counters[3],
                   "in_flight_at_stop": in_flight, "perf_buffer_lost": self.lost_samples * BATCH,
                   "perf_pages_per_cpu": self.perf_pages,
                   "bpf_recursion_misses": sum(misses.values()),
                   **{f"recursion_misses_{p}": n for p, n in misses.items()}},
        )


TRACERS.add("bcc", BccTracer)
