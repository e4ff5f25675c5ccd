"""The `bpftrace` block tracer: the fallback when bcc cannot import or compile (needs BTF only).

A bpftrace script on block:block_rq_issue / block_rq_requeue / block_rq_complete, filtered by
dev_t in the kernel, prints one compact line per event to a file in the work directory:
`I <t_ns> <sector> <bytes> <rwbs>`, `Q <t_ns> <sector> 0 -`, `C <t_ns> <sector> <bytes> <rwbs>`.
Issues and completions are paired afterwards, in user space (`parse_bpftrace_output`), not in a
bpftrace map: a map's read and delete are not one step, so an issue on one CPU and a completion on
another at the same sector could both take the same entry (tried: 122 of 3,000 requests counted
twice with 8 sectors in flight at depth 16).

These are classic tracepoints (bpftrace 0.17 has no raw tracepoints): the kernel skips a probe run
when another kprobe or tracepoint BPF program is running on that CPU and counts it in the
program's `recursion_misses` (read from bpftrace's fdinfo before it exits; runs for other devices'
requests count too). A completion whose issue was not seen (skipped, or issued before the capture
started) is kept as a row from its own line, without latency; an issue whose completion was not
seen is kept without latency. A request whose two probes were both skipped leaves nothing, so
`lost_events` is the lines bpftrace reported lost (`Lost N events`) plus ⌊(misses − completions
without issue − issues without completion) / 2⌋, an upper bound. Per-CPU perf buffers are sized
from the expected I/O rate (BPFTRACE_PERF_RB_PAGES).

bpftrace reads its per-CPU perf buffers asynchronously and, once interrupted, drains only the
buffers that still signal readiness, so after a plain SIGINT the last events can be missing from
its output. `stop` therefore first sets a barrier: it runs on each CPU in turn and makes one
getpgid() call there, which a fourth probe (filtered by our pid) turns into a line
`S <t_ns> <cpu> 0 -`; a CPU's buffer is FIFO, so once its `S` line is in the file, every event that
CPU recorded before is too. A CPU whose line does not show (its full buffer dropped it) gets it
again until it does. Only then is bpftrace interrupted.

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
  printf("C %llu %llu %u %s\n", nsecs, args->sector, args->nr_sector * 512, args->rwbs);
}
"""
BARRIER_PROBE = r"""
tracepoint:syscalls:sys_enter_getpgid /pid == $2/ {
  printf("S %llu %d 0 -\n", nsecs, cpu);
}
"""
#: bytes one line takes in bpftrace's perf buffer (its printf record: an id and the arguments, 8 B
#: each, plus the 64-byte rwbs string and the sample header), for sizing the buffers
LINE_BUFFER_BYTES = 128
#: the expected requests per second when the caller gives none (two lines each), and the seconds
#: of them a per-CPU buffer holds while bpftrace is kept off the CPU (kvwear.harness.capture.bcc's)
DEFAULT_EXPECTED_IOPS = 250_000
BUFFER_HEADROOM_S = 1.0

_LOST = re.compile(rb"^Lost (\d+) events", re.MULTILINE)
_EVENT = re.compile(rb"^[IQC] \d+ \d+ \d+ \S+$", re.MULTILINE)
_MARK = re.compile(rb"^S \d+ (\d+) 0 -$", re.MULTILINE)
_ISSUE, _REQUEUE, _COMPLETE = 0, 1, 2


def rb_pages(expected_iops: float, per_cpu_buffer_bytes: int | None = None) -> int:
    """BPFTRACE_PERF_RB_PAGES: the bytes given, or what `expected_iops` requests' two lines fill in
    BUFFER_HEADROOM_S, in pages (a power of two, as the kernel requires)."""
    want = per_cpu_buffer_bytes if per_cpu_buffer_bytes is not None else \
        2 * expected_iops * LINE_BUFFER_BYTES * BUFFER_HEADROOM_S
    pages = max(1, -(-int(want) // 4096))
    return 1 << (pages - 1).bit_length()


@dataclass(frozen=True)
class ParsedTrace:
    table: pa.Table                 # BLOCK_TRACE columns, one row per request
    lost_lines: int                 # lines bpftrace reported lost (`Lost N events`)
    unmatched_completions: int      # completions whose issue was not seen (kept as rows)
    no_completion: int              # issues whose completion was not seen (kept as rows)
    requeues: int


def _pair(kind: np.ndarray, sector: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Events sorted by (sector, time) → for each event, the completion that closes it (an issue's:
    the sector's completions close its open issues first in, first out) or -1, and whether it is a
    row (an issue not requeued, or a completion that found no open issue: it stands for its
    request). A requeue drops the oldest open issue (it is issued again). Vectorized: per sector,
    the open issues are a walk reflected at 0, so a close finds none exactly when the unreflected
    walk reaches a new low; the m-th close that finds one takes the sector's m-th issue."""
    n = len(kind)
    step = np.where(kind == _ISSUE, 1, -1)
    start = np.flatnonzero(np.r_[True, sector[1:] != sector[:-1]])
    group = np.repeat(np.arange(len(start)), np.diff(np.r_[start, n]))
    walk = np.cumsum(step)
    walk = walk - (walk[start] - step[start])[group]               # the walk from 0 in each sector
    # the lowest point so far within the sector (0 before its first event): groups pushed apart so
    # one running minimum never carries over from the sector before
    far = 2 * n + 2
    low = np.minimum.accumulate(walk - group * far) + group * far
    low_before = np.minimum(0, np.r_[0, low[:-1]])
    low_before[start] = 0
    closes = step < 0
    unmatched = closes & (walk < low_before)
    took = closes & ~unmatched
    issues = kind == _ISSUE
    issue_index = np.flatnonzero(issues)                           # in (sector, time) order
    first_issue = np.searchsorted(issue_index, start)              # each sector's first issue among them
    rank = np.cumsum(took) - 1
    rank_in_sector = rank - (np.cumsum(took)[start] - took[start])[group]
    opened = issue_index[first_issue[group[took]] + rank_in_sector[took]]
    done = np.full(n, -1, np.int64)
    is_row = issues | (unmatched & (kind == _COMPLETE))   # a requeue with no open issue is nothing
    closing = np.flatnonzero(took)
    completes = kind[closing] == _COMPLETE
    done[opened[completes]] = closing[completes]
    is_row[opened[~completes]] = False                             # requeued: issued again
    return done, is_row


def parse_bpftrace_output(text: bytes, dev: int, source: str = "bpftrace output") -> ParsedTrace:
    """Turn the script's lines into one row per request (pure), in time order. Per sector, in
    time order, a completion closes the oldest open issue (its latency) and a requeue drops it (the
    request is issued again); a completion with no open issue is a row of its own, without
    latency; an issue never closed keeps a null latency."""
    lost = sum(int(m) for m in _LOST.findall(text))
    lines = _EVENT.findall(text)
    junk = [ln for ln in text.splitlines() if ln.strip() and not _EVENT.match(ln) and not _LOST.match(ln)
            and not _MARK.match(ln) and not ln.startswith(b"Attaching ")]
    if junk:
        raise InputError(source, None, None, f"unexpected line {junk[0][:80]!r}")
    if not lines:
        return ParsedTrace(BLOCK_TRACE.empty(), lost, 0, 0, 0)
    t = pacsv.read_csv(
        io.BytesIO(b"\n".join(lines)),
        read_options=pacsv.ReadOptions(column_names=["kind", "t_ns", "sector", "bytes", "rwbs"]),
        parse_options=pacsv.ParseOptions(delimiter=" "),
        convert_options=pacsv.ConvertOptions(column_types={
            "kind": pa.string(), "t_ns": pa.int64(), "sector": pa.int64(), "bytes": pa.int64(),
            "rwbs": pa.string()}),
    )
    kind_s = t.column("kind").to_numpy(zero_copy_only=False)
    kind = np.select([kind_s == "I", kind_s == "Q"], [_ISSUE, _REQUEUE], _COMPLETE).astype(np.int8)
    ts = t.column("t_ns").to_numpy()
    sector = t.column("sector").to_numpy()
    # by sector, then time; on a tie an issue before a requeue before a completion
    order = np.lexsort((kind, ts, sector))
    done, is_row = _pair(kind[order], sector[order])
    rows = order[is_row]
    closed = done[is_row]
    lat = np.where(closed >= 0, ts[order][np.maximum(closed, 0)] - ts[rows], 0)
    back = np.argsort(ts[rows], kind="stable")      # back to time order
    rows, lat, closed = rows[back], lat[back], closed[back]
    is_issue = kind[rows] == _ISSUE
    table = pa.table({
        "t_ns": pa.array(ts[rows]),
        "dev": pa.array(np.full(len(rows), dev, dtype=np.int64)),
        "op": classify_rwbs(t.column("rwbs").take(pa.array(rows))),
        "sector": pa.array(sector[rows]),
        "bytes": pa.array(t.column("bytes").to_numpy()[rows]),
        "latency_ns": int64_with_nulls(lat, closed < 0),
    })
    return ParsedTrace(table, lost, int((~is_issue).sum()), int((is_issue & (closed < 0)).sum()),
                       int((kind == _REQUEUE).sum()))


class BpftraceTracer:
    name = "bpftrace"

    def __init__(self, *, expected_iops: float = DEFAULT_EXPECTED_IOPS, per_cpu_buffer_bytes: int | None = None,
                 attach_timeout_s: float = 60.0) -> None:
        self.perf_rb_pages = rb_pages(expected_iops, per_cpu_buffer_bytes)
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

    @property
    def pid(self) -> int | None:
        """The bpftrace process while it runs (its CPU is the capture's cost in user space)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

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
        # A CPU's line is re-sent until it shows: a full buffer drops it (and then reports the
        # drop, with the next line it can hold: the line re-sent after bpftrace has read it).
        while time.monotonic() < deadline and self._proc.poll() is None:
            missing = set(cpus) - self._marks_after(start)
            if not missing:
                return True
            try:
                for cpu in sorted(missing):
                    os.sched_setaffinity(0, {cpu})
                    os.getpgid(0)          # the barrier probe prints `S <t> <cpu>` on this CPU
            finally:
                os.sched_setaffinity(0, cpus)
            retry = time.monotonic() + 0.25
            while time.monotonic() < min(retry, deadline) and not set(cpus) <= self._marks_after(start):
                time.sleep(0.02)
        return not (set(cpus) - self._marks_after(start))

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
        # a request with both probes skipped takes two of the misses the kernel counted; the
        # misses seen as a completion without issue or an issue without completion took one each
        both = max(0, misses - parsed.unmatched_completions - parsed.no_completion) // 2
        return CaptureResult(
            tracer=self.name, parquet_path=path, events=parsed.table.num_rows,
            lost_events=parsed.lost_lines + both,
            bytes_by_op={k: v for k, v in nb.items() if v or nr[k]},
            requests_by_op={k: v for k, v in nr.items() if v},
            unmatched_completions=parsed.unmatched_completions,
            no_completion=parsed.table.column("latency_ns").null_count,
            extra={"requeues": parsed.requeues, "raw_output": str(self._out), "flushed": flushed,
                   "issues_without_completion": parsed.no_completion, "perf_buffer_lost": parsed.lost_lines,
                   "perf_rb_pages_per_cpu": self.perf_rb_pages, "bpf_recursion_misses": misses},
        )


TRACERS.add("bpftrace", BpftraceTracer)
