"""Faults, for real: a file kvwear did not create is not overwritten; a device (a file, a loop
device) has one writer at a time; SIGKILL of `kvwear run` mid-replay and of `kvwear sweep`
mid-sweep leaves no process behind after 5 s and a resume equals an uninterrupted run, each point
stored once; a lost sweep worker is a retried point, not an abort; a failed byte-accounting check
(a capture that really loses events: one-page perf buffers and bpftrace held stopped while fio
writes) exits 3. Loop devices are small
(MBs), made over files in the test's folder and detached on teardown."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from kvwear.errors import SafetyError
from kvwear.exclusive import BusyError
from kvwear.harness.devices.base import DeviceSpec
from kvwear.harness.devices.fio import FioDevice, loop_device
from kvwear.harness.devices.safety import backup_gpt_at_end, check_block_device
from kvwear.harness.pipeline.run import accounting_faults
from kvwear.harness.pipeline.sweep import ResultsStore, SweepProgress, load_sweep, plan_sweep, run_sweep

REPO = Path(__file__).resolve().parents[2]
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("fio") is None or shutil.which("losetup") is None,
                                reason="needs root, fio and losetup")
# a run that replays long enough to be caught with fio running (the demo workload, smaller)
RUN_ARGS = ["--policy", "lru", "--param", "sessions=12", "--param", "turns=6", "--dram", "200MB", "--ssd", "200MB",
            "--no-report", "--trim"]


def kvwear(*args: str, env: dict[str, str] | None = None, **kw: object) -> subprocess.Popen[bytes]:
    """`kvwear ARGS` as its own process (the console entry point, from this checkout)."""
    e = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "kvwear.harness.cli.main", *args], env=e, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)  # type: ignore[call-overload]


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def replaying(p: psutil.Process) -> bool:
    """fio playing a job (not `fio --version`)."""
    try:
        return p.name() == "fio" and "--output-format=json" in p.cmdline()
    except psutil.NoSuchProcess:
        return False


def wait_for_children(pid: int, *names: str, timeout_s: float = 120.0) -> list[psutil.Process]:
    """Poll until a replaying fio and a descendant of each other name run at once; returns every
    descendant seen then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        kids = [k for k in descendants(pid) if _alive(k)]
        if any(replaying(k) for k in kids) and all(any(k.name() == n for k in kids) for n in names):
            return kids
        time.sleep(0.02)
    raise AssertionError(f"no replaying fio (and {names}) under {pid} within {timeout_s} s")


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_all_gone(procs: list[psutil.Process], within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(_alive(p) for p in procs):
        time.sleep(0.1)
    left = [f"{p.pid} {p.name()}" for p in procs if _alive(p)]
    assert not left, f"still running {within_s} s after kvwear was killed: {left}"


def finish(proc: subprocess.Popen[bytes], timeout_s: float = 600) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout_s)
    return proc.returncode, err.decode(errors="replace")


RESULT_COLUMNS = ("policy", "requests", "miss_ratio_tokens", "ssd_write_bytes", "plan_write_bytes",
                  "device_write_bytes", "ebpf_write_bytes", "accounting_checks_passed", "accounting_checks_total")


def results(run_dir: Path) -> list[dict[str, object]]:
    t = pq.read_table(run_dir / "results.parquet")
    return [{k: r[k] for k in RESULT_COLUMNS if k in r} for r in t.to_pylist()]


# -- files ------------------------------------------------------------------------------------

@needs_fio
def test_a_file_kvwear_did_not_create_is_refused_unless_confirmed(tmp_path: Path) -> None:
    img = tmp_path / "precious.img"
    img.write_bytes(b"a thesis, the only copy\n" * 100)
    before = img.read_bytes()
    with pytest.raises(SafetyError, match=r"did not create.*--confirm-overwrite"):
        FioDevice(DeviceSpec("file", str(img), capacity_bytes=1 << 20), tmp_path)
    assert img.read_bytes() == before                    # untouched, not even grown
    FioDevice(DeviceSpec("file", str(img), capacity_bytes=1 << 20, options={"confirm_overwrite": str(img)}),
              tmp_path).close()
    # A file kvwear created (and marked), kept after the device closed, is reused without a confirmation.
    new = tmp_path / "new.img"
    FioDevice(DeviceSpec("file", str(new), capacity_bytes=1 << 20, options={"keep_image": True}), tmp_path).close()
    new.write_bytes(b"x" * 4096)       # written to (its data is kvwear's own)
    FioDevice(DeviceSpec("file", str(new), capacity_bytes=1 << 20), tmp_path).close()


@needs_fio
def test_a_file_device_has_one_writer_at_a_time(tmp_path: Path) -> None:
    img = tmp_path / "d.img"
    first = FioDevice(DeviceSpec("file", str(img), capacity_bytes=1 << 20), tmp_path)
    try:
        with pytest.raises(BusyError, match=rf"in use by kvwear pid {os.getpid()}"):
            FioDevice(DeviceSpec("file", str(img), capacity_bytes=1 << 20), tmp_path)
    finally:
        first.close()
    FioDevice(DeviceSpec("file", str(img), capacity_bytes=1 << 20), tmp_path).close()   # free again


HOLD = """
import sys, time
from pathlib import Path
from kvwear.exclusive import locked
with locked(Path(sys.argv[1]), "test"):
    print("held", flush=True)
    time.sleep(120)
"""


def test_resume_is_refused_while_another_process_holds_the_run(tmp_path: Path) -> None:
    """What a child of a killed run that still lived would do: hold the run directory's lock."""
    out = tmp_path / "r"
    args = ("run", "-o", str(out), "--policy", "lru", "--param", "sessions=2", "--param", "turns=2",
            "--no-replay", "--no-report")
    rc, err = finish(kvwear(*args))
    assert rc == 0, err
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out / ".lock")], stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        rc, err = finish(kvwear(*args, "--resume"))
        assert rc == 2 and f"run directory {out} is in use by kvwear pid {holder.pid}" in err, err
    finally:
        holder.kill()
        holder.wait()
    rc, err = finish(kvwear(*args, "--resume"))
    assert rc == 0, err


# -- backup GPT -------------------------------------------------------------------------------

def backup_gpt_header(size_bytes: int, lbs: int = 512) -> bytes:
    """A GPT backup header (UEFI 2.x layout, CRC filled in) for the last block of a device."""
    last = size_bytes // lbs - 1
    hdr = bytearray(lbs)
    struct.pack_into("<8sIII4xQQQQ16sQIII", hdr, 0, b"EFI PART", 0x00010000, 92, 0, last, 1, 34, last - 33,
                     b"\x11" * 16, last - 32, 128, 128, 0)
    struct.pack_into("<I", hdr, 16, zlib.crc32(bytes(hdr[:92])))
    return bytes(hdr)


def test_backup_gpt_is_found_at_the_end() -> None:
    size = 16 << 20
    assert backup_gpt_at_end(backup_gpt_header(size), size) == ["backup GPT header in the last 512-byte block"]
    assert backup_gpt_at_end(bytes(4096), size) == []
    # the signature alone, naming another block as its own, is not a backup header
    assert backup_gpt_at_end(backup_gpt_header(size * 2), size) == []


@pytest.mark.root
@needs_root
def test_a_device_with_only_its_backup_gpt_is_refused(tmp_path: Path) -> None:
    img = tmp_path / "wiped.img"
    size = 16 << 20
    with open(img, "wb") as fh:
        fh.truncate(size)
        fh.seek(size - 512)
        fh.write(backup_gpt_header(size))      # the primary (LBA 0-33) was wiped: zeros
    with loop_device(img) as dev, pytest.raises(SafetyError, match="backup GPT header"):
        check_block_device(dev)


# -- loop devices: two writers, SIGKILL mid-replay, an accounting fault -----------------------

@pytest.mark.root
@needs_root
def test_a_second_run_on_a_busy_loop_device_is_refused(tmp_path: Path) -> None:
    with loop_device(tmp_path / "drive.img", "256MiB") as dev:
        first = kvwear("run", "-o", str(tmp_path / "a"), "--device", f"block:{dev}", *RUN_ARGS)
        try:
            wait_for_children(first.pid)
            second = kvwear("run", "-o", str(tmp_path / "b"), "--device", f"block:{dev}", *RUN_ARGS)
            rc, err = finish(second, 120)
            assert rc == 2, err
            assert f"in use by kvwear pid {first.pid}" in err, err
            assert not (tmp_path / "b").exists()          # refused before its first stage
        finally:
            rc, err = finish(first)
        assert rc == 0, err


@pytest.mark.root
@needs_root
@pytest.mark.slow
def test_sigkill_mid_replay_leaves_no_child_and_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    # bcc where it imports (it lost 0 events in every measured run); bpftrace's probes are skipped
    # under load (9 events lost at load 8 here) and a capture that lost events fails the byte check
    bcc = importlib.util.find_spec("bcc") is not None
    tracer = ["--tracer", "bcc"] if bcc else ["--tracer", "bpftrace"] if shutil.which("bpftrace") else []
    with loop_device(tmp_path / "clean.img", "256MiB") as dev:
        rc, err = finish(kvwear("run", "-o", str(tmp_path / "clean"), "--device", f"block:{dev}", *RUN_ARGS, *tracer))
        assert rc == 0, err
    with loop_device(tmp_path / "killed.img", "256MiB") as dev:
        out = tmp_path / "killed"
        proc = kvwear("run", "-o", str(out), "--device", f"block:{dev}", *RUN_ARGS, *tracer)
        kids = wait_for_children(proc.pid, *(["bpftrace"] if tracer and not bcc else []))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert_all_gone(kids)
        assert not (out / "results.parquet").exists()
        rc, err = finish(kvwear("run", "-o", str(out), "--device", f"block:{dev}", *RUN_ARGS, *tracer, "--resume"))
        assert rc == 0, err
    assert results(out) == results(tmp_path / "clean")


@pytest.mark.root
@needs_root
def test_a_capture_that_loses_events_fails_the_byte_check_and_exits_3_after_the_report(tmp_path: Path) -> None:
    """Loss for real: bpftrace gets one page of perf buffer per CPU and is held stopped while the
    replay's fio runs, so the kernel drops the lines it cannot hold and bpftrace reports them."""
    if shutil.which("bpftrace") is None:
        pytest.skip("needs bpftrace")
    out = tmp_path / "run"
    cfg = tmp_path / "small-buffers.toml"
    cfg.write_text('[capture]\ntracer = "bpftrace"\nper_cpu_buffer_bytes = "4KiB"\n')
    with loop_device(tmp_path / "drive.img", "64MiB") as dev:
        proc = kvwear("run", str(cfg), "-o", str(out), "--device", f"block:{dev}", "--policy", "lru",
                      "--param", "sessions=3", "--param", "turns=3", "--dram", "100MB", "--ssd", "50MB")
        kids = wait_for_children(proc.pid, "bpftrace")
        (bt,) = [k for k in kids if k.name() == "bpftrace"]
        bt.suspend()
        try:
            while any(replaying(k) and _alive(k) for k in descendants(proc.pid)):
                time.sleep(0.05)
        finally:
            bt.resume()
        rc, err = finish(proc)
    assert rc == 3, err
    assert "kvwear: error: byte accounting failed (lru: " in err, err
    assert (out / "report" / "report.html").exists()          # written first
    capture = json.loads((out / "device" / "lru" / "capture.json").read_text())
    assert capture["lost_events"] > 0, capture
    row = pq.read_table(out / "results.parquet").to_pylist()[0]
    assert row["accounting_checks_passed"] < row["accounting_checks_total"]


# -- sweeps -----------------------------------------------------------------------------------

SWEEP = """\
[base]
name = "k"
model = "kimi-k3"
[base.workload]
generator = "multi-round"
params = {sessions = 6, turns = 4}
[base.tiers]
dram = "1GB"
ssd = "8GB"
[base.device]
# the bare drive (subprocesses do not get tests/conftest.py's): what is under test is the sweep
options = {preset = "tiny-blocks", precondition = "none"}
[grid]
policies = ["lru", "fifo", "type-aware", "lru-k:k=1..5"]
[sweep]
replay = true
"""


def stored(root: Path) -> dict[str, dict[str, object]]:
    """point key → its stored row (the deterministic columns), checking each is stored once."""
    files = sorted((root / "results").glob("*.parquet"))
    rows = {}
    for f in files:
        r = pq.read_table(f).to_pylist()
        assert len(r) == 1 and r[0]["point_key"] == f.stem
        rows[f.stem] = {k: r[0][k] for k in ("point_key", "policy", "ssd_write_bytes", "device_write_bytes",
                                             "miss_ratio_tokens", "waf_measured")}
    assert not list((root / "results").glob(".*"))          # no partial files
    return rows


def test_sigkill_mid_sweep_leaves_no_worker_and_resume_stores_each_point_once(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(SWEEP)
    n = len(load_sweep(spec).points)
    rc, err = finish(kvwear("sweep", str(spec), "-o", str(tmp_path / "clean"), "--jobs", "2"))
    assert rc == 0, err
    out = tmp_path / "killed"
    proc = kvwear("sweep", str(spec), "-o", str(out), "--jobs", "2")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list((out / "results").glob("*.parquet"))) < 2:
        time.sleep(0.05)
    kids = descendants(proc.pid)
    assert kids, "no pool workers"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert_all_gone(kids)
    partial = len(list((out / "results").glob("*.parquet")))
    assert 2 <= partial < n
    rc, err = finish(kvwear("sweep", str(spec), "-o", str(out), "--jobs", "2"))
    assert rc == 0, err
    assert stored(out) == stored(tmp_path / "clean") and len(stored(out)) == n


def test_a_lost_pool_worker_is_a_retried_point_not_an_abort(tmp_path: Path) -> None:
    data = {"base": {"name": "w", "model": "kimi-k3",
                     "workload": {"generator": "multi-round", "params": {"sessions": 6, "turns": 4}},
                     "tiers": {"dram": "1GB", "ssd": "8GB"}},
            "grid": {"policies": ["lru", "fifo", "lru-k:k=1..4"]}}
    plan = plan_sweep(data)
    killed: list[int] = []

    def kill_one_worker(p: SweepProgress) -> None:     # progress callback: SIGKILL a pool worker, once
        if not killed and p.done >= 1:
            workers = [k for k in psutil.Process().children() if _alive(k)]
            os.kill(workers[0].pid, signal.SIGKILL)
            killed.append(workers[0].pid)

    prog = run_sweep(plan, tmp_path, jobs=2, on_progress=kill_one_worker)
    assert killed and prog.lost_workers >= 1
    assert prog.done == len(plan.points) and prog.failed == 0
    assert len(ResultsStore(tmp_path).read()) == len(plan.points) and not ResultsStore(tmp_path).read_errors()


def test_accounting_faults_reads_run_and_sweep_rows() -> None:
    nan = float("nan")       # a sweep table: points without a replay have no checks
    rows = [{"policy": "a", "accounting_checks_total": 4, "accounting_checks_passed": 4},
            {"policy": "b", "accounting_checks_total": 4, "accounting_checks_passed": 3},
            {"policy": "c", "accounting_checks_total": nan, "accounting_checks_passed": nan}, {"policy": "d"}]
    assert accounting_faults(rows) == ["b: 1 of 4 checks failed"]
