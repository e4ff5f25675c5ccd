"""The `bpftrace` block tracer: the fallback when bcc cannot import or compile (needs BTF only).

A bpftrace script on block:block_rq_issue / block_rq_requeue / block_rq_complete, filtered by
dev_t in the kernel, prints one compact line per event to a file in the work directory:
`I <t_ns> <sector> <bytes> <rwbs>`, `Q <t_ns> <sector> 0 -`, `C <t_ns> <sector> 0 -`.
bpftrace's own `Lost N events` lines count dropped samples, and the kernel's per-program
`recursion_misses` (read from bpftrace's fdinfo before it exits) count skipped probe runs (an
upper bound: runs for other devices' requests count too).

bpftrace reads its per-CPU perf buffers asynchronously and, once interrupted, drains only the
buffers that still signal readiness, so after a plain SIGINT the last events can be missing from
its output. `stop` therefore first sets a barrier: it runs on each CPU in turn and makes one
getpgid() call there, which a fourth probe (filtered by our pid) turns into a line
`S <t_ns> <cpu> 0 -`; a CPU's buffer is FIFO, so once its `S` line is in the file, every event that
CPU recorded before is too. Only then is bpftrace interrupted. The file is then parsed by the pure
`parse_bpftrace_output`, which matches each issue with the next event at the same sector
(time-ordered: per-CPU buffers interleave lines), and written as BLOCK_TRACE Parquet.

It must not run fio, and it never writes anything but its own output file and Parquet file.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from kvwear.children import die_with_parent
from kvwear.errors import InputError
from kvwear.exclusive import inherited_fds
from kvwear.harness.capture.base import (
    TRACEFS,
    TRACERS,
    CaptureResult,
    TracerUnavailable,
    bpf_prog_misses,
    classify_rwbs,
    int64_with_nulls,
    require_program,
    require_root,
    require_tracefs,
    totals_by_op,
)
from kvwear.harness.capture.schema import BLOCK_TRACE
from kvwear.tables import write_table

SCRIPT = r"""
tracepoint:block:block_rq_issue /args->dev == $1/ {
  printf("I %llu %llu %u %s\n", nsecs, args->sector, args->bytes, args->rwbs);
}
tracepoint:block:block_rq_requeue /args->dev == $1/ {
  printf("Q %llu %llu 0 -\n", nsecs, args->sector);
}
tracepoint:block:block_rq_complete /args->dev == $1/ {
  printf("C %llu %llu 0 -\n", nsecs, args->sector);
}
"""
BARRIER_PROBE = r"""
tracepoint:syscalls:sys_enter_getpgid /pid == $2/ {
  printf("S %llu %d 0 -\n", nsecs, cpu);
}
"""

_LOST = re.compile(rb"^Lost (\d+) events", re.MULTILINE)
_EVENT = re.compile(rb"^[IQC] \d+ \d+ \d+ \S+$", re.MULTILINE)
_MARK = re.compile(rb"^S \d+ (\d+) 0 -$", re.MULTILINE)


@dataclass(frozen=True)
class ParsedTrace:
    table: pa.Table                 # BLOCK_TRACE columns, one row per issued request
    lost_events: int
    unmatched_completions: int
    requeues: int


def parse_bpftrace_output(text: bytes, dev: int, source: str = "bpftrace output") -> ParsedTrace:
    """Turn the script's lines into one row per issue (pure). An issue's latency is the time to
    the next event at its sector when that event is a completion; an issue followed by a requeue
    is dropped (the request is issued again); an issue followed by another issue or by nothing
    keeps a null latency; a completion not preceded by an issue is counted as unmatched."""
    lost = sum(int(m) for m in _LOST.findall(text))
    lines = _EVENT.findall(text)
    junk = [ln for ln in text.splitlines() if ln.strip() and not _EVENT.match(ln) and not _LOST.match(ln)
            and not _MARK.match(ln) and not ln.startswith(b"Attaching ")]
    if junk:
        raise InputError(source, None, None, f"unexpected line {junk[0][:80]!r}")
    if not lines:
        empty = BLOCK_TRACE.empty()
        return ParsedTrace(empty, lost, 0, 0)
    t = pacsv.read_csv(
        io.BytesIO(b"\n".join(lines)),
        read_options=pacsv.ReadOptions(column_names=["kind", "t_ns", "sector", "bytes", "rwbs"]),
        parse_options=pacsv.ParseOptions(delimiter=" "),
        convert_options=pacsv.ConvertOptions(column_types={
            "kind": pa.string(), "t_ns": pa.int64(), "sector": pa.int64(), "bytes": pa.int64(),
            "rwbs": pa.string()}),
    )
    kind = t.column("kind").to_numpy(zero_copy_only=False)
    ts = t.column("t_ns").to_numpy()
    sector = t.column("sector").to_numpy()
    # Order events by (sector, time); on a tie an issue sorts before its own completion.
    rank = np.select([kind == "I", kind == "Q"], [0, 1], 2)
    order = np.lexsort((rank, ts, sector))
    k, s, tt = kind[order], sector[order], ts[order]
    same_next = np.zeros(len(k), dtype=bool)
    same_next[:-1] = s[1:] == s[:-1]
    nxt = np.empty(len(k), dtype=object)
    nxt[:-1] = k[1:]
    nxt[-1] = ""
    nxt[~same_next] = ""
    is_issue = k == "I"
    completed = is_issue & (nxt == "C")
    requeued = is_issue & (nxt == "Q")
    prev_issue = np.zeros(len(k), dtype=bool)
    prev_issue[1:] = is_issue[:-1] & same_next[:-1]
    unmatched = int(((k == "C") & ~prev_issue).sum())
    keep = is_issue & ~requeued
    lat = np.zeros(len(k), dtype=np.int64)
    lat[:-1] = tt[1:] - tt[:-1]
    rows = order[keep]
    back = np.argsort(rows, kind="stable")       # back to time/issue order
    rows = rows[back]
    lat_k = lat[keep][back]
    has_lat = completed[keep][back]
    rwbs = t.column("rwbs").take(pa.array(rows))
    table = pa.table({
        "t_ns": pa.array(ts[rows]),
        "dev": pa.array(np.full(len(rows), dev, dtype=np.int64)),
        "op": classify_rwbs(rwbs),
        "sector": pa.array(sector[rows]),
        "bytes": pa.array(t.column("bytes").to_numpy()[rows]),
        "latency_ns": int64_with_nulls(lat_k, ~has_lat),
    })
    return ParsedTrace(table, lost, unmatched, int(requeued.sum()))


class BpftraceTracer:
    name = "bpftrace"

    def __init__(self, *, perf_rb_pages: int = 4096, attach_timeout_s: float = 60.0) -> None:
        self.perf_rb_pages = perf_rb_pages
        self.attach_timeout_s = attach_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: Path | None = None
        self._err: Path | None = None
        self._dev = 0
        self._parquet: Path | None = None
        self._barrier = False

    def start(self, dev: int, out_path: Path) -> None:
        require_root("bpftrace")
        require_tracefs("bpftrace")
        exe = require_program("bpftrace", "bpftrace")
        if not Path("/sys/kernel/btf/vmlinux").exists():
            raise TracerUnavailable("bpftrace: the kernel exposes no BTF (/sys/kernel/btf/vmlinux)")
        self._dev = int(dev)
        self._parquet = Path(out_path)
        self._parquet.parent.mkdir(parents=True, exist_ok=True)
        self._out = self._parquet.with_suffix(".bpftrace.txt")
        self._err = self._parquet.with_suffix(".bpftrace.err")
        script = self._parquet.with_suffix(".bt")
        # Kernels built without syscall tracepoints get no barrier; stop() then waits for quiet.
        self._barrier = (TRACEFS / "events" / "syscalls" / "sys_enter_getpgid").exists()
        script.write_text(SCRIPT + (BARRIER_PROBE if self._barrier else ""))
        # An interrupted attempt's output holds an 'Attaching' line too: it must not pass for ours.
        self._out.unlink(missing_ok=True)
        env = dict(os.environ, BPFTRACE_PERF_RB_PAGES=str(self.perf_rb_pages))
        # Unbuffered stdout (-B none; -o would buffer): the file shows each line as bpftrace
        # handles it, so the barrier lines can be waited for.
        with open(self._out, "wb") as out, open(self._err, "wb") as err:
            # bpftrace dies with kvwear and holds its device locks (kvwear.exclusive) while it runs
            self._proc = subprocess.Popen(
                die_with_parent([exe, "-B", "none", str(script), str(self._dev), str(os.getpid())]),
                stdout=out, stderr=err, env=env, pass_fds=inherited_fds())
        # bpftrace prints "Attaching N probes..." before it attaches them, in declaration order,
        # so the probes are live once a barrier line (the last probe's) shows up.
        deadline = time.monotonic() + self.attach_timeout_s
        while time.monotonic() < deadline and self._proc.poll() is None:
            if self._barrier:
                os.getpgid(0)
                if self._marks_after(0):
                    return
            elif b"Attaching" in self._out.read_bytes()[:200]:
                return
            time.sleep(0.05)
        msg = self._err.read_text(errors="replace").strip()[-1500:]
        self._kill()
        raise TracerUnavailable(f"bpftrace did not attach its probes: {msg or 'timed out'}")

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def _marks_after(self, offset: int) -> set[int]:
        """The CPUs of the barrier lines written after byte `offset` of the output."""
        assert self._out is not None
        with open(self._out, "rb") as f:
            f.seek(offset)
            return {int(c) for c in _MARK.findall(f.read())}

    def _flush_barrier(self, timeout_s: float = 30.0) -> bool:
        """Wait until bpftrace has written out everything the kernel recorded so far: True when
        every CPU we may run on showed its barrier line (or, with no barrier probe, when the output
        stayed unchanged for half a second) within `timeout_s`."""
        assert self._proc is not None and self._out is not None
        deadline = time.monotonic() + timeout_s
        if not self._barrier:
            size, quiet_since = -1, time.monotonic()
            while time.monotonic() < deadline and self._proc.poll() is None:
                now_size = self._out.stat().st_size
                if now_size != size:
                    size, quiet_since = now_size, time.monotonic()
                elif time.monotonic() - quiet_since >= 0.5:
                    return True
                time.sleep(0.05)
            return False
        start = self._out.stat().st_size     # this barrier's lines can only come after this point
        cpus = sorted(os.sched_getaffinity(0))
        try:
            for cpu in cpus:
                os.sched_setaffinity(0, {cpu})
                os.getpgid(0)              # the barrier probe prints `S <t> <cpu>` on this CPU
        finally:
            os.sched_setaffinity(0, cpus)
        while time.monotonic() < deadline and self._proc.poll() is None:
            if set(cpus) <= self._marks_after(start):
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> CaptureResult:
        assert self._proc is not None and self._out is not None and self._parquet is not None
        flushed = self._flush_barrier()
        misses = bpf_prog_misses(self._proc.pid)   # read before bpftrace exits and closes them
        self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._kill()
        parsed = parse_bpftrace_output(self._out.read_bytes(), self._dev, str(self._out))
        path = write_table(BLOCK_TRACE, parsed.table, self._parquet)
        nb, nr = totals_by_op(parsed.table.column("op").combine_chunks(), parsed.table.column("bytes").to_numpy())
        return CaptureResult(
            tracer=self.name, parquet_path=path, events=parsed.table.num_rows,
            lost_events=parsed.lost_events + misses,
            bytes_by_op={k: v for k, v in nb.items() if v or nr[k]},
            requests_by_op={k: v for k, v in nr.items() if v},
            unmatched_completions=parsed.unmatched_completions,
            no_completion=parsed.table.column("latency_ns").null_count,
            extra={"requeues": parsed.requeues, "raw_output": str(self._out), "flushed": flushed,
                   "perf_buffer_lost": parsed.lost_events, "bpf_recursion_misses": misses},
        )


TRACERS.add("bpftrace", BpftraceTracer)
