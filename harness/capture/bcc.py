"""The `bcc` block tracer: a BPF C program on block:block_rq_issue / block_rq_complete.

The device filter runs in the kernel (`args->dev == KVWEAR_DEV`); issue time, bytes and rwbs wait
in a hash keyed by (dev, sector) until the completion arrives; then one 40-byte record per request
(issue time, sector, latency, bytes, dev, rwbs) is appended to a per-CPU batch of 64, and full
batches go to user space through a perf buffer (one wake-up per 64 requests keeps the Python side
off the CPU fio needs; partial batches are read from the per-CPU map on stop). A requeued
request is forgotten (it will be issued again). Requests in flight at the same sector take one of
SLOTS slots of the key; a completion takes the first slot it manages to delete (the delete is the
ownership token, so racing CPUs never emit one request twice); with no free slot the request is
emitted at issue without latency — so a request is never doubled, and lost only when the kernel
skips its issue probe (counted below). On stop, requests still in flight are emitted without
latency. A poll thread copies raw batches and converts them with numpy into BLOCK_TRACE Parquet
(kvwear.tables). Lost samples are counted by the perf buffer's lost callback (× 64 requests
each), plus the kernel's count of probe runs it skipped because another BPF program was running
on that CPU (fdinfo `recursion_misses`; an upper bound, since runs for other devices' requests
are skipped before the filter can drop them).

Needs root, tracefs and kernel headers (bcc compiles at run time; scripts/setup-bcc.sh links
Debian's headers) and Debian's python3-bpfcc made importable from the venv. It must not run fio.
"""

from __future__ import annotations

import ctypes
import threading
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
    classify_rwbs_codes,
    int64_with_nulls,
    op_dictionary,
    require_headers,
    require_root,
    require_tracefs,
)
from kvwear.harness.capture.schema import BLOCK_TRACE
from kvwear.tables import TableWriter

NO_LATENCY = np.uint64(0xFFFFFFFFFFFFFFFF)

BATCH = 64   # requests per perf sample: one user-space wake-up per 64 requests, not per request
SLOTS = 4    # requests in flight at one sector that keep their latency

PROGRAM = r"""
struct key_t { u32 dev; u32 slot; u64 sector; };
struct val_t { u64 ts; u32 bytes; u32 pad; char rwbs[8]; };
struct event_t { u64 ts; u64 sector; u64 lat; u32 bytes; u32 dev; char rwbs[8]; };
struct batch_t { u32 n; u32 pad; struct event_t ev[BATCH]; };

BPF_HASH(inflight, struct key_t, struct val_t, 262144);
BPF_PERCPU_ARRAY(batches, struct batch_t, 1);
BPF_PERF_OUTPUT(events);
BPF_ARRAY(counters, u64, 4);   /* 0 unmatched completions, 1 emitted at issue (no slot), 2 requeues */

static inline void bump(int i) {
    u64 *c = counters.lookup(&i);
    if (c) __sync_fetch_and_add(c, 1);
}

/* Append to this CPU's batch; send it when full. Tracepoint programs never nest on one CPU
   (the kernel skips the inner one and counts a miss), so the per-CPU batch needs no lock. */
static inline void emit(void *ctx, u64 ts, u64 sector, u64 lat, u32 bytes, u32 dev, const char *rwbs) {
    int zero = 0;
    struct batch_t *b = batches.lookup(&zero);
    if (!b) return;
    u32 n = b->n & (BATCH - 1);
    struct event_t *e = &b->ev[n];
    e->ts = ts; e->sector = sector; e->lat = lat; e->bytes = bytes; e->dev = dev;
    __builtin_memcpy(e->rwbs, rwbs, 8);
    n++;
    if (n == BATCH) {
        b->n = BATCH;
        events.perf_submit(ctx, b, sizeof(*b));
        n = 0;
    }
    b->n = n;
}

TRACEPOINT_PROBE(block, block_rq_issue) {
    if (args->dev != KVWEAR_DEV) return 0;
    struct val_t v = {};
    v.ts = bpf_ktime_get_ns();
    v.bytes = args->bytes;
    bpf_probe_read_kernel(&v.rwbs, 8, args->rwbs);
    struct key_t k = {};
    k.dev = args->dev;
    k.sector = args->sector;
    /* Requests in flight at the same sector take the next free slot (insert = BPF_NOEXIST). */
    #pragma unroll
    for (int i = 0; i < SLOTS; i++) {
        k.slot = i;
        if (inflight.insert(&k, &v) == 0) return 0;
    }
    /* No slot (or the map is full): keep the request's bytes, give up its latency. */
    emit(args, v.ts, k.sector, ~0ULL, v.bytes, k.dev, v.rwbs);
    bump(1);
    return 0;
}

TRACEPOINT_PROBE(block, block_rq_requeue) {
    if (args->dev != KVWEAR_DEV) return 0;
    struct key_t k = {};
    k.dev = args->dev;
    k.sector = args->sector;
    #pragma unroll
    for (int i = 0; i < SLOTS; i++) {
        k.slot = i;
        if (inflight.delete(&k) == 0) break;   /* it will be issued again */
    }
    bump(2);
    return 0;
}

TRACEPOINT_PROBE(block, block_rq_complete) {
    if (args->dev != KVWEAR_DEV) return 0;
    u64 now = bpf_ktime_get_ns();
    struct key_t k = {};
    k.dev = args->dev;
    k.sector = args->sector;
    #pragma unroll
    for (int i = 0; i < SLOTS; i++) {
        k.slot = i;
        struct val_t *v = inflight.lookup(&k);
        if (!v) continue;
        struct val_t copy = *v;
        /* Whoever deletes the entry owns it: a request is emitted exactly once even when
           completions at one sector race on two CPUs. */
        if (inflight.delete(&k) != 0) continue;
        emit(args, copy.ts, k.sector, now - copy.ts, copy.bytes, k.dev, copy.rwbs);
        return 0;
    }
    bump(0);
    return 0;
}
"""

EVENT_DTYPE = np.dtype([("t_ns", "<u8"), ("sector", "<u8"), ("lat", "<u8"), ("bytes", "<u4"),
                        ("dev", "<u4"), ("rwbs", "S8")])
VAL_DTYPE = np.dtype([("ts", "<u8"), ("bytes", "<u4"), ("pad", "<u4"), ("rwbs", "S8")])
BATCH_DTYPE = np.dtype([("n", "<u4"), ("pad", "<u4"), ("ev", EVENT_DTYPE, (BATCH,))])


def events_to_table(raw: bytes) -> pa.Table:
    """Packed 40-byte event records → a BLOCK_TRACE table (pure; latency null when unknown)."""
    ev = np.frombuffer(raw, dtype=EVENT_DTYPE)
    lat = ev["lat"]
    lat_arr = int64_with_nulls(lat.astype(np.int64), lat == NO_LATENCY)
    return pa.table({
        "t_ns": pa.array(ev["t_ns"].astype(np.int64)),
        "dev": pa.array(ev["dev"].astype(np.int64)),
        "op": op_dictionary(classify_rwbs_codes(ev["rwbs"])),
        "sector": pa.array(ev["sector"].astype(np.int64)),
        "bytes": pa.array(ev["bytes"].astype(np.int64)),
        "latency_ns": lat_arr,
    })


class BccTracer:
    """See the module docstring. `program` can be replaced (tests prove the fallback on a real
    compile failure)."""

    name = "bcc"

    def __init__(self, *, batch_events: int = 65536, perf_pages: int = 1024, program: str = PROGRAM) -> None:
        self.batch_events = batch_events
        self.perf_pages = perf_pages
        self.program = program
        self._bpf: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._chunks: list[bytes] = []
        self._pending = 0
        self.lost = 0
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
        try:
            self._bpf = BPF(text=self.program.encode(),
                            cflags=[f"-DKVWEAR_DEV={int(dev)}u", f"-DBATCH={BATCH}", f"-DSLOTS={SLOTS}"])
        except Exception as exc:   # bcc raises plain Exception on compile/load failure
            raise TracerUnavailable(f"bcc: the BPF program did not compile or load: {exc}") from None
        self._writer = TableWriter(BLOCK_TRACE, out_path)
        # Wake the poll thread every 8 samples (512 requests) per CPU; stop() consumes the rest.
        self._bpf[b"events"].open_perf_buffer(self._on_event, page_cnt=self.perf_pages, lost_cb=self._on_lost,
                                              wakeup_events=8)
        self._thread = threading.Thread(target=self._poll, name="kvwear-bcc-poll", daemon=True)
        self._thread.start()

    # The callbacks run on the poll thread; they only copy bytes (tight path), batches convert later.
    def _on_event(self, cpu: int, data: Any, size: int) -> None:
        self._chunks.append(ctypes.string_at(data, BATCH_DTYPE.itemsize))
        self._pending += BATCH
        if self._pending >= self.batch_events:
            self._flush()

    def _on_lost(self, count: int) -> None:
        self.lost += int(count) * BATCH   # a lost sample carried (up to) BATCH requests

    def _poll(self) -> None:
        try:
            while not self._stop.is_set():
                self._bpf.perf_buffer_poll(timeout=100)
        except BaseException as exc:   # surfaced by stop()
            self._error = exc

    def _write(self, table: pa.Table) -> None:
        assert self._writer is not None
        if table.num_rows == 0:
            return
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
        self._write(events_to_table(np.frombuffer(raw, dtype=BATCH_DTYPE)["ev"].tobytes()))

    def stop(self) -> CaptureResult:
        assert self._bpf is not None and self._writer is not None, "stop() before start()"
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self._error is not None:
                raise self._error
            # Drain what is still in the buffers, then the requests still in flight.
            self._bpf.perf_buffer_poll(timeout=10)
            self._bpf.perf_buffer_consume()
            self._flush()
            # Partial batches still sitting in the per-CPU buffers.
            partial = [bytes(b)[:BATCH_DTYPE.itemsize] for b in self._bpf[b"batches"][ctypes.c_int(0)]]
            for blob in partial:
                rec = np.frombuffer(blob, dtype=BATCH_DTYPE)[0]
                self._write(events_to_table(rec["ev"][: int(rec["n"])].tobytes()))
            left = [(k.sector, k.dev, bytes(v)) for k, v in self._bpf[b"inflight"].items()]
            if left:
                vals = np.frombuffer(b"".join(v[2] for v in left), dtype=VAL_DTYPE)
                ev = np.zeros(len(left), dtype=EVENT_DTYPE)
                ev["t_ns"], ev["bytes"], ev["rwbs"] = vals["ts"], vals["bytes"], vals["rwbs"]
                ev["sector"] = [s for s, _, _ in left]
                ev["dev"] = [d for _, d, _ in left]
                ev["lat"] = NO_LATENCY
                self._write(events_to_table(ev.tobytes()))
            counters = [int(self._bpf[b"counters"][ctypes.c_int(i)].value) for i in range(4)]
            misses = bpf_prog_misses("self", [f.fd for f in self._bpf.funcs.values()])
            path = self._writer.close()
        except BaseException:
            self._writer.abort()
            raise
        finally:
            self._bpf.cleanup()
        return CaptureResult(
            tracer=self.name, parquet_path=path, events=self._writer.rows, lost_events=self.lost + misses,
            bytes_by_op=dict(self._bytes), requests_by_op=dict(self._reqs),
            unmatched_completions=counters[0], no_completion=self._no_completion,
            extra={"emitted_at_issue": counters[1], "requeues": counters[2],
                   "perf_buffer_lost": self.lost, "bpf_recursion_misses": misses},
        )


TRACERS.add("bcc", BccTracer)
