"""kvwear.harness.capture: pure parts (rwbs classes, dev_t, bpftrace line matching, bcc record decoding,
fdinfo misses) and, as root, the real thing: a BLOCK_OPS plan replayed by the block backend on a
loop device this test creates, with bcc and with bpftrace capturing; plan write bytes = fio-issued
write bytes = eBPF-observed write bytes, and the same for request counts."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kvwear.errors import InputError
from kvwear.harness.capture import TRACERS, TracerUnavailable, kernel_dev_t, open_tracer
from kvwear.harness.capture.auto import AutoTracer
from kvwear.harness.capture.base import CaptureResult, classify_rwbs, parse_fdinfo_misses
from kvwear.harness.capture.bcc import EVENT_DTYPE, NO_LATENCY, BccTracer, events_to_table
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


def test_parse_bpftrace_output_matches_issues_and_completions() -> None:
    text = b"\n".join([
        b"Attaching 3 probes...",
        b"I 100 8 4096 WS",
        b"I 105 16 8192 W",
        b"C 160 16 0 -",          # completion lines of different CPUs may come out of order
        b"C 150 8 0 -",
        b"C 170 999 0 -",         # issued before the capture started: unmatched
        b"I 200 24 4096 R",
        b"Q 210 24 0 -",          # requeued: dropped, the re-issue counts
        b"I 220 24 4096 R",
        b"C 300 24 0 -",
        b"I 400 8 4096 FWS",
        b"I 410 8 4096 W",        # same sector still in flight: the first keeps no latency
        b"C 450 8 0 -",
        b"Lost 5 events",
        b"I 500 32 0 FN",         # empty flush, never completed in this capture
        b"S 600 0 0 -",           # stop()'s flush barrier, one line per CPU: not a request
        b"S 601 1 0 -",
        b"",
    ])
    p = parse_bpftrace_output(text, DEV)
    t = p.table
    assert t.schema.equals(BLOCK_TRACE.schema, check_metadata=False) or set(t.column_names) == set(
        BLOCK_TRACE.schema.names)
    assert t.column("t_ns").to_pylist() == [100, 105, 220, 400, 410, 500]
    assert t.column("sector").to_pylist() == [8, 16, 24, 8, 8, 32]
    assert t.column("bytes").to_pylist() == [4096, 8192, 4096, 4096, 4096, 0]
    assert t.column("op").to_pylist() == ["write", "write", "read", "write", "write", "flush"]
    assert t.column("latency_ns").to_pylist() == [50, 55, 80, None, 40, None]
    assert set(t.column("dev").to_pylist()) == {DEV}
    assert (p.lost_events, p.unmatched_completions, p.requeues) == (5, 1, 1)
    BLOCK_TRACE.conform(t)


def test_parse_bpftrace_output_rejects_garbage() -> None:
    with pytest.raises(InputError, match="unexpected line"):
        parse_bpftrace_output(b"I 1 2 3 W\nsegfault\n", DEV, "out.txt")
    assert parse_bpftrace_output(b"Attaching 3 probes...\n", DEV).table.num_rows == 0


def test_bcc_event_records_decode() -> None:
    ev = np.zeros(2, dtype=EVENT_DTYPE)
    ev["t_ns"], ev["sector"], ev["bytes"], ev["dev"] = [10, 20], [8, 16], [4096, 512], DEV
    ev["lat"] = [1234, NO_LATENCY]
    ev["rwbs"] = [b"WS", b"R"]
    t = events_to_table(ev.tobytes())
    assert EVENT_DTYPE.itemsize == 40
    assert t.column("latency_ns").to_pylist() == [1234, None]
    assert t.column("op").to_pylist() == ["write", "read"]
    assert t.column("dev").to_pylist() == [DEV, DEV]


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
    every difference is a counted lost event (the kernel skips a tracepoint program that would
    nest in another BPF program on the same CPU — any tracing program, including other users')."""
    wlens = fiolib.plan_lengths(plan, "write")
    rlens = fiolib.plan_lengths(plan, "read")
    assert (res.write_bytes, res.write_ios) == (int(wlens.sum()), wlens.size)     # type: ignore[attr-defined]
    assert (res.read_bytes, res.read_ios) == (int(rlens.sum()), rlens.size)       # type: ignore[attr-defined]
    t = read_table(BLOCK_TRACE, c.parquet_path)
    assert t.num_rows == c.events
    # A skipped completion probe leaves its request without latency; a skipped issue probe loses
    # the request (its completion is then unmatched, unless that probe was skipped too). With
    # mi issue and mc completion probes skipped, b of them for the same request (no collisions,
    # no requeues in this plan): lost = mi + mc, no_completion = mc - b, unmatched = mi - b,
    # requests missing from the trace = mi. The kernel's miss count also covers skipped runs for
    # other devices' requests (the device filter runs inside the program): an upper bound.
    assert c.no_completion == t.column("latency_ns").null_count
    seen = set((np.asarray(t.column("sector")) * 512).tolist())
    offs = plan.column("offset_bytes").to_numpy()
    lens = plan.column("length_bytes").to_numpy()
    ops = np.asarray(pc.cast(plan.column("op"), pa.string()))
    missing = np.array([o not in seen for o in offs.tolist()], dtype=bool)
    both = int(missing.sum()) - c.unmatched_completions
    assert both >= 0 and c.lost_events >= c.no_completion + c.unmatched_completions + 2 * both
    assert len(seen) == t.num_rows                          # the trace holds no request twice
    for op in ("write", "read"):
        sel = ops == op
        assert c.bytes_by_op.get(op, 0) + int(lens[sel & missing].sum()) == int(lens[sel].sum())
        assert c.requests_by_op.get(op, 0) + int((sel & missing).sum()) == int(sel.sum())
    if c.lost_events == 0:
        assert c.write_bytes == res.write_bytes and c.write_requests == res.write_ios   # type: ignore[attr-defined]
        assert t.num_rows == plan.num_rows and c.no_completion == 0
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
        if fiolib.fio_replays_trim(dev.fio_version):
            pytest.skip(f"{dev.fio_version} replays trims")
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


@root_only
@needs_fio
def test_bpftrace_stop_waits_for_its_backlog(tmp_path: Path) -> None:
    """bpftrace drops every event it has not printed yet when SIGINT arrives. Hold it stopped
    while fio runs, so the whole plan waits in its perf buffers, and stop the capture the moment
    it may run again: the flush barrier must still bring every request into the trace, but for
    the probe runs the kernel counted as skipped."""
    plan = plan_for(64 << 20, 2000, seed=5)
    with loop_device(tmp_path / "loop.img", 64 << 20, nomerges=True) as devpath:
        dev = FioDevice(DeviceSpec("block", devpath, options={"iodepth": 16}), tmp_path)
        tracer = open_tracer("bpftrace")
        tracer.start(kernel_dev_t(devpath), tmp_path / "trace.parquet")
        (bt,) = [c for c in psutil.Process().children() if c.name() == "bpftrace"]
        bt.suspend()
        try:
            res = dev.replay(plan, tmp_path / "run")
        finally:
            bt.resume()
            c = tracer.stop()
    assert c.extra["flushed"] is True
    assert_three_way(plan, res, c)


@root_only
@needs_fio
def test_bpftrace_without_the_barrier_probe_waits_for_quiet_output(tmp_path: Path) -> None:
    """A kernel without syscall tracepoints gets no barrier probe: stop() then waits until the
    output has stopped growing. Forced here after start (which still used the probe to attach)."""
    plan = plan_for(64 << 20, 500, seed=9)
    with loop_device(tmp_path / "loop.img", 64 << 20, nomerges=True) as devpath:
        dev = FioDevice(DeviceSpec("block", devpath), tmp_path)
        tracer = open_tracer("bpftrace")
        tracer.start(kernel_dev_t(devpath), tmp_path / "trace.parquet")
        tracer._barrier = False  # type: ignore[attr-defined]
        try:
            res = dev.replay(plan, tmp_path / "run")
        finally:
            c = tracer.stop()
    assert c.extra["flushed"] is True
    assert_three_way(plan, res, c)


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
