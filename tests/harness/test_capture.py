"""kvwear.harness.capture: pure parts (rwbs classes, dev_t, bpftrace line matching, bcc record decoding,
fdinfo misses) and, as root, the real thing: a BLOCK_OPS plan replayed by the block backend on a
loop device this test creates, with bcc and with bpftrace capturing; plan write bytes = fio-issued
write bytes = eBPF-observed write bytes, and the same for request counts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kvwear.errors import InputError
from kvwear.harness.capture import TRACERS, TracerUnavailable, kernel_dev_t, open_tracer
from kvwear.harness.capture.auto import AutoTracer
from kvwear.harness.capture.base import OPS, CaptureResult, classify_rwbs, parse_fdinfo_misses
from kvwear.harness.capture.bcc import EVENT_DTYPE, NO_LATENCY, BccTracer, RequestOps, events_to_table, perf_pages
from kvwear.harness.capture.bpftrace import parse_bpftrace_output
from kvwear.harness.capture.schema import BLOCK_TRACE
from kvwear.harness.devices import fio_runner as fiolib
from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.fio import FioDevice, loop_device
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.tables import read_table

DEV = (7 << 20) | 3


def test_registry_lists_the_tracers() -> None:
    assert {"auto", "bcc", "bpftrace"} <= set(TRACERS)
    with pytest.raises(Exception, match="valid: auto, bcc, bpftrace"):
        open_tracer("blktrace")


def test_classify_rwbs() -> None:
    got = classify_rwbs(pa.array(["W", "WS", "FWS", "WFS", "R", "RA", "RM", "D", "DE", "F", "FF", "N", "FN"]))
    assert got.to_pylist() == ["write", "write", "write", "write", "read", "read", "read", "discard",
                               "discard", "flush", "flush", "other", "flush"]


def test_kernel_dev_t(tmp_path: Path) -> None:
    assert kernel_dev_t(os.makedev(7, 3)) == DEV
    assert kernel_dev_t(os.makedev(259, 1)) == (259 << 20) | 1
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(Exception, match="not a block device"):
        kernel_dev_t(tmp_path / "f")


def test_parse_bpftrace_output_pairs_issues_and_completions() -> None:
    text = b"\n".join([
        b"Attaching 4 probes...",
        b"I 100 8 4096 WS",
        b"I 105 16 8192 W",
        b"C 160 16 8192 W",         # completion lines of different CPUs may come out of order
        b"C 150 8 4096 WS",
        b"C 170 999 4096 W",        # no issue seen: a row of its own, without latency
        b"I 200 24 4096 R",
        b"Q 210 24 0 -",            # requeued: dropped, the re-issue counts
        b"I 220 24 4096 R",
        b"C 300 24 4096 R",
        b"I 400 8 4096 FWS",
        b"I 410 8 4096 W",          # same sector still in flight: first in, first out
        b"C 450 8 4096 FWS",
        b"C 470 8 4096 W",
        b"Lost 5 events",
        b"I 500 32 0 FN",           # an empty flush, never completed in this capture
        b"S 600 0 0 -",             # stop()'s flush barrier, one line per CPU (and again): not a request
        b"S 601 1 0 -",
        b"S 650 1 0 -",
        b"",
    ])
    p = parse_bpftrace_output(text, DEV)
    t = p.table
    assert t.column("t_ns").to_pylist() == [100, 105, 170, 220, 400, 410, 500]
    assert t.column("sector").to_pylist() == [8, 16, 999, 24, 8, 8, 32]
    assert t.column("bytes").to_pylist() == [4096, 8192, 4096, 4096, 4096, 4096, 0]
    assert t.column("op").to_pylist() == ["write", "write", "write", "read", "write", "write", "flush"]
    assert t.column("latency_ns").to_pylist() == [50, 55, None, 80, 50, 60, None]
    assert set(t.column("dev").to_pylist()) == {DEV}
    assert (p.lost_lines, p.unmatched_completions, p.no_completion, p.requeues) == (5, 1, 1, 1)
    BLOCK_TRACE.conform(t)


def test_pairing_is_first_in_first_out_per_sector() -> None:
    """The vectorized pairing against a plain queue per sector, on random event sequences."""
    from kvwear.harness.capture.bpftrace import _pair

    rng = np.random.default_rng(8)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        sector = np.sort(rng.integers(0, 4, n))
        kind = rng.choice(np.array([0, 1, 2], np.int8), n, p=[0.5, 0.1, 0.4])
        done, is_row = _pair(kind, sector)
        want_done = np.full(n, -1)
        want_row = np.zeros(n, bool)
        queues: dict[int, list[int]] = {}
        for j in range(n):
            q = queues.setdefault(int(sector[j]), [])
            if kind[j] == 0:
                q.append(j)
                want_row[j] = True
            elif q:
                i = q.pop(0)
                if kind[j] == 2:
                    want_done[i] = j
                else:
                    want_row[i] = False
            elif kind[j] == 2:
                want_row[j] = True
        assert done.tolist() == want_done.tolist() and is_row.tolist() == want_row.tolist(), (kind, sector)


def test_parse_bpftrace_output_rejects_garbage() -> None:
    with pytest.raises(InputError, match="unexpected line"):
        parse_bpftrace_output(b"I 1 2 3 W\nsegfault\n", DEV, "out.txt")
    assert parse_bpftrace_output(b"Attaching 3 probes...\n", DEV).table.num_rows == 0


# enum req_op and __REQ_PREFLUSH as Linux 6.x numbers them
OPS_6X = RequestOps(read=0, write=1, flush=2, discard=3, secure_erase=5, preflush_bit=18)
SYNC, FUA, PREFLUSH = 1 << 11, 1 << 17, 1 << 18


def test_bcc_event_records_decode() -> None:
    ev = np.zeros(2, dtype=EVENT_DTYPE)
    ev["t_ns"], ev["sector"], ev["bytes"] = [10, 20], [8, 16], [4096, 512]
    ev["lat"] = [1234, NO_LATENCY]
    ev["flags"] = [1 | SYNC, 0]
    t = events_to_table(ev.tobytes(), DEV, OPS_6X)
    assert EVENT_DTYPE.itemsize == 32
    assert t.column("latency_ns").to_pylist() == [1234, None]
    assert t.column("op").to_pylist() == ["write", "read"]
    assert t.column("dev").to_pylist() == [DEV, DEV]
    BLOCK_TRACE.conform(t)


def test_request_flags_class_as_their_rwbs_would() -> None:
    # (cmd_flags, the rwbs blk_fill_rwbs writes for them)
    cases = [(1, "W"), (1 | SYNC, "WS"), (1 | PREFLUSH | SYNC, "FWS"), (1 | FUA | SYNC, "WFS"), (0, "R"),
             (3, "D"), (5, "DE"), (2, "F"), (2 | PREFLUSH, "FF"), (9, "N"), (34 | PREFLUSH, "FN")]
    flags = np.array([f for f, _ in cases], np.uint32)
    codes = OPS_6X.classify(flags)
    expect = classify_rwbs(pa.array([r for _, r in cases])).to_pylist()
    assert [OPS[c] for c in codes] == expect


def test_perf_buffer_sized_from_the_expected_rate() -> None:
    assert perf_pages(250_000) == 2048                    # 250 k/s × 32 B × 1 s = 7.6 MiB → 8 MiB
    assert perf_pages(10_000) == 128                      # 312 KiB → 512 KiB (a power of two)
    assert perf_pages(250_000, per_cpu_buffer_bytes=4096) == 1
    assert perf_pages(0) == 1


def test_fdinfo_misses() -> None:
    assert parse_fdinfo_misses("pos:\t0\nflags:\t02000002\nprog_type:\t5\nrecursion_misses:\t7\n") == 7
    assert parse_fdinfo_misses("pos:\t0\nflags:\t02\n") is None


# -- real capture -----------------------------------------------------------------------------

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="eBPF capture and loop devices need root")
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")


def plan_for(capacity: int, n: int, seed: int) -> pa.Table:
    """Writes and reads on distinct 16 KiB slots (4–16 KiB each) so no two requests share a
    sector: the block layer sees exactly one request per plan row (merges are off)."""
    rng = np.random.default_rng(seed)
    slots = rng.permutation(capacity // 16384)[:n]
    ops = np.where(rng.random(n) < 0.85, "write", "read")
    return BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(n) * 1e-5, "op": ops, "offset_bytes": slots * 16384,
        "length_bytes": rng.choice([4096, 8192, 16384], n), "obj_kind": ["full"] * n,
        "obj_id": np.arange(n)}))


def replay_with_capture(tmp_path: Path, tracer_name: str, plan: pa.Table) -> tuple[object, CaptureResult]:
    cap = 64 << 20
    with loop_device(tmp_path / "loop.img", cap, nomerges=True) as devpath:
        dev = FioDevice(DeviceSpec("block", devpath, options={"iodepth": 16}), tmp_path)
        tracer = open_tracer(tracer_name)
        try:
            tracer.start(kernel_dev_t(devpath), tmp_path / "trace.parquet")
        except TracerUnavailable as exc:
            pytest.fail(f"{tracer_name} cannot run as root here: {exc}")
        try:
            res = dev.replay(plan, tmp_path / "run")
        finally:
            cap_res = tracer.stop()
    return res, cap_res


def assert_three_way(plan: pa.Table, res: object, c: CaptureResult) -> None:
    """plan = fio-issued, exactly; plan = captured, exactly when no event was lost, and otherwise
    every request missing from the trace is a counted lost event. A skipped issue probe leaves
    the request's row to its completion (no latency, counted as unmatched), a skipped completion
    probe leaves it in flight at stop (no latency): only a request whose two probes were both
    skipped is missing, and `lost_events` bounds those from above (the kernel's miss counts also
    cover other devices' requests: the device filter runs inside the programs)."""
    wlens = fiolib.plan_lengths(plan, "write")
    rlens = fiolib.plan_lengths(plan, "read")
    assert (res.write_bytes, res.write_ios) == (int(wlens.sum()), wlens.size)     # type: ignore[attr-defined]
    assert (res.read_bytes, res.read_ios) == (int(rlens.sum()), rlens.size)       # type: ignore[attr-defined]
    t = read_table(BLOCK_TRACE, c.parquet_path)
    assert t.num_rows == c.events
    assert c.no_completion == t.column("latency_ns").null_count
    assert c.no_completion >= c.unmatched_completions
    seen = set((np.asarray(t.column("sector")) * 512).tolist())
    offs = plan.column("offset_bytes").to_numpy()
    lens = plan.column("length_bytes").to_numpy()
    ops = np.asarray(pc.cast(plan.column("op"), pa.string()))
    missing = np.array([o not in seen for o in offs.tolist()], dtype=bool)
    assert int(missing.sum()) <= c.lost_events
    assert len(seen) == t.num_rows                          # the trace holds no request twice
    for op in ("write", "read"):
        sel = ops == op
        assert c.bytes_by_op.get(op, 0) + int(lens[sel & missing].sum()) == int(lens[sel].sum())
        assert c.requests_by_op.get(op, 0) + int((sel & missing).sum()) == int(sel.sum())
    if c.lost_events == 0:
        assert c.write_bytes == res.write_bytes and c.write_requests == res.write_ios   # type: ignore[attr-defined]
        assert t.num_rows == plan.num_rows
    assert c.events > plan.num_rows // 2
    assert (t.column("latency_ns").drop_null().to_numpy() > 0).all()


@root_only
@needs_fio
@pytest.mark.parametrize("tracer_name", ["bcc", "bpftrace"])
def test_capture_counts_exactly_what_fio_issued(tmp_path: Path, tracer_name: str) -> None:
    plan = plan_for(64 << 20, 3000, seed=11)
    res, c = replay_with_capture(tmp_path, tracer_name, plan)
    assert c.tracer == tracer_name
    if tracer_name == "bpftrace":
        # Every CPU's barrier line reached the output before bpftrace was interrupted (bpftrace
        # drops the events it is still printing when SIGINT arrives).
        assert c.extra["flushed"] is True
    assert_three_way(plan, res, c)


@root_only
@needs_fio
@pytest.mark.parametrize("tracer_name", ["bcc", "bpftrace"])
def test_requests_in_flight_at_one_sector_are_each_counted_once(tmp_path: Path, tracer_name: str) -> None:
    """3,000 writes over 8 sectors at depth 16: several requests at one sector are in flight at
    once, and none may be counted twice or dropped (bpftrace keys its in-flight map by sector)."""
    n = 3000
    offs = np.random.default_rng(4).integers(0, 8, n) * 4096
    plan = BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(n) * 1e-6, "op": ["write"] * n, "offset_bytes": offs, "length_bytes": np.full(n, 4096),
        "obj_kind": ["full"] * n, "obj_id": np.arange(n)}))
    res, c = replay_with_capture(tmp_path, tracer_name, plan)
    assert res.write_bytes == n * 4096                                   # type: ignore[attr-defined]
    if c.lost_events == 0:
        assert (c.write_bytes, c.write_requests, c.events) == (n * 4096, n, n), c.extra
    else:
        assert c.write_bytes <= n * 4096 and n - c.write_requests <= c.lost_events


@root_only
@needs_fio
def test_deferred_trims_reach_the_device_as_discards(tmp_path: Path) -> None:
    """On a fio that drops iolog trims the backend issues them itself (BLKDISCARD): eBPF sees
    discard requests for exactly the trim bytes it issued, and the writes as before."""
    rng = np.random.default_rng(3)
    n = 600
    slots = rng.permutation((32 << 20) // 16384)[:n] * 16384
    ops = np.where(rng.random(n) < 0.3, "trim", "write")
    plan = BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(n) * 1e-5, "op": ops, "offset_bytes": slots, "length_bytes": np.full(n, 16384),
        "obj_kind": ["full"] * n, "obj_id": np.arange(n)}))
    with loop_device(tmp_path / "loop.img", 32 << 20, nomerges=True) as devpath:
        dev = FioDevice(DeviceSpec("block", devpath, options={"trim_segment_ops": 200}), tmp_path)
        if dev.fio_replays_trims:
            pytest.skip(f"{dev.fio_version} replays trims on a block device")
        tracer = open_tracer("bcc")
        tracer.start(kernel_dev_t(devpath), tmp_path / "trace.parquet")
        try:
            res = dev.replay(plan, tmp_path / "run")
        finally:
            c = tracer.stop()
    trims = int((ops == "trim").sum())
    assert res.trim_bytes == trims * 16384 and res.trims.superseded_bytes == 0   # distinct slots
    assert res.trims.mode == "deferred" and res.details["segments"] == 3
    assert res.write_bytes == (n - trims) * 16384
    # Exact unless the kernel skipped probe runs; then each skipped run hides at most one request.
    missed = (res.trim_bytes - c.bytes_by_op.get("discard", 0)) + (res.write_bytes - c.write_bytes)
    assert missed == 0 if c.lost_events == 0 else 0 <= missed <= c.lost_events * 16384, c.extra


def _replay_under_bpftrace(tmp_path: Path, plan: pa.Table, options: dict[str, object],
                           disturb: Callable[[Any], Callable[[], object]]) -> None:
    """Replay `plan` on a loop device under the bpftrace capture, `disturb(tracer)` applied right
    after it started (what it returns undoes it, before stop): the capture must still flush and
    agree three ways with the plan and the replay."""
    with loop_device(tmp_path / "loop.img", 64 << 20, nomerges=True) as devpath:
        dev = FioDevice(DeviceSpec("block", devpath, options=options), tmp_path)
        tracer = open_tracer("bpftrace")
        tracer.start(kernel_dev_t(devpath), tmp_path / "trace.parquet")
        undo = disturb(tracer)
        try:
            res = dev.replay(plan, tmp_path / "run")
        finally:
            undo()
            c = tracer.stop()
    assert c.extra["flushed"] is True
    assert_three_way(plan, res, c)


@root_only
@needs_fio
def test_bpftrace_stop_waits_for_its_backlog(tmp_path: Path) -> None:
    """bpftrace drops every event it has not printed yet when SIGINT arrives. Hold it stopped
    while fio runs, so the whole plan waits in its perf buffers, and stop the capture the moment
    it may run again: the flush barrier must still bring every request into the trace, but for
    the probe runs the kernel counted as skipped."""
    def hold(_tracer: Any) -> Callable[[], object]:
        (bt,) = [c for c in psutil.Process().children() if c.name() == "bpftrace"]
        bt.suspend()
        return bt.resume

    _replay_under_bpftrace(tmp_path, plan_for(64 << 20, 2000, seed=5), {"iodepth": 16}, hold)


@root_only
@needs_fio
def test_bpftrace_without_the_barrier_probe_waits_for_quiet_output(tmp_path: Path) -> None:
    """A kernel without syscall tracepoints gets no barrier probe: stop() then waits until the
    output has stopped growing. Forced here after start (which still used the probe to attach)."""
    def no_barrier(tracer: Any) -> Callable[[], object]:
        tracer._barrier = False
        return lambda: None

    _replay_under_bpftrace(tmp_path, plan_for(64 << 20, 500, seed=9), {}, no_barrier)


@root_only
@needs_fio
def test_auto_falls_back_to_bpftrace_when_bcc_cannot_compile(tmp_path: Path) -> None:
    broken = BccTracer(program="this is not C;")
    auto = AutoTracer(tracers={"bcc": broken})
    plan = plan_for(64 << 20, 500, seed=2)
    with loop_device(tmp_path / "loop.img", 64 << 20, nomerges=True) as devpath:
        dev = FioDevice(DeviceSpec("block", devpath), tmp_path)
        auto.start(kernel_dev_t(devpath), tmp_path / "trace.parquet")
        try:
            res = dev.replay(plan, tmp_path / "run")
        finally:
            c = auto.stop()
    assert c.tracer == "bpftrace"
    assert "bcc: the BPF program did not compile" in str(c.extra["fallback_reason"])
    assert_three_way(plan, res, c)


@root_only
def test_auto_says_what_is_missing_when_no_tracer_can_run(tmp_path: Path) -> None:
    class Missing:
        name = "bpftrace"

        def start(self, dev: int, out_path: Path) -> None:
            raise TracerUnavailable("bpftrace: `bpftrace` not found (Debian package bpftrace)")

        def stop(self) -> CaptureResult:
            raise AssertionError

    auto = AutoTracer(tracers={"bcc": BccTracer(program="nope"), "bpftrace": Missing()})
    with pytest.raises(TracerUnavailable, match=r"(?s)no block tracer can run.*bcc: .*bpftrace: `bpftrace` not"):
        auto.start(DEV, tmp_path / "t.parquet")


@root_only
def test_not_root_is_explained(tmp_path: Path) -> None:
    """Run as `nobody` (setpriv): every tracer refuses with what is missing, auto lists them all."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv not installed")
    os.chmod(tmp_path, 0o777)
    code = (
        "from pathlib import Path\n"
        "from kvwear.harness.capture import open_tracer, TracerUnavailable\n"
        "try:\n"
        f"    open_tracer('auto').start({DEV}, Path({str(tmp_path / 't.parquet')!r}))\n"
        "except TracerUnavailable as e:\n"
        "    print(e)\n"
    )
    import subprocess
    import sys
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c"]
    repo = str(Path(__file__).resolve().parents[2])
    probe = subprocess.run([*nobody, "import kvwear.harness.capture"], capture_output=True, text=True, cwd=repo,
                           timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"the venv's Python cannot run as nobody here: {probe.stderr.strip()[-200:]}")
    out = subprocess.run([*nobody, code], capture_output=True, text=True, cwd=repo, timeout=60)
    assert "no block tracer can run here" in out.stdout, out.stderr
    assert "bcc: eBPF tracing needs root" in out.stdout
    assert "bpftrace: eBPF tracing needs root" in out.stdout


@root_only
@needs_fio
def test_bpftrace_start_ignores_a_stale_output_of_an_interrupted_attempt(tmp_path: Path) -> None:
    """A resumed device stage finds the previous attempt's bpftrace output beside the trace: its
    'Attaching' line must not pass for the new process's, or the replay starts before the probes."""
    (tmp_path / "trace.bpftrace.txt").write_text("Attaching 3 probes...\n")
    plan = plan_for(64 << 20, 500, seed=5)
    res, c = replay_with_capture(tmp_path, "bpftrace", plan)
    assert_three_way(plan, res, c)
    assert c.events + c.lost_events >= plan.num_rows
