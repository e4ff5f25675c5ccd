"""kvwear.emulator.guest: the QEMU/FEMU command line, the job archive, the framed result stream, and real
guest boots under TCG (marked `guest`; the guest image is built by scripts/build-guest.sh when
missing, which needs Debian's package mirror the first time)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kvwear.emulator.guest import (
    DriveConfig,
    FemuGeometry,
    GuestConfig,
    GuestError,
    GuestImage,
    GuestIOTimeoutError,
    GuestJob,
    GuestNotBuiltError,
    GuestProtocolError,
    GuestTimeoutError,
    build_guest,
    cpu_virtualises,
    find_guest,
    find_io_timeouts,
    kernel_cmdline,
    newc_archive,
    parse_result_stream,
    qemu_argv,
    run_guest,
)
from kvwear.errors import KvwearError

FAKE_IMAGE = GuestImage(kernel=Path("/g/vmlinuz"), initrd=Path("/g/initrd.img"), stamp="")



def test_build_guest_swaps_the_image_without_its_stamp() -> None:
    """find_guest trusts a folder with a stamp: an interrupted rebuild must not leave the old stamp
    beside a new kernel and an old initrd (whose modules the new kernel refuses)."""
    from kvwear.emulator.guest import BUILD_SCRIPT

    lines = [ln.strip() for ln in BUILD_SCRIPT.read_text().splitlines()]
    drop = lines.index('rm -f "$out/stamp"')
    moves = [i for i, ln in enumerate(lines) if ln.startswith('mv "$work/') and '"$out/' in ln]
    write = lines.index('echo "$stamp" > "$out/stamp"')
    assert len(moves) == 2 and drop < min(moves) and max(moves) < write

def test_cpu_virtualises_reads_the_flags_of_every_processor() -> None:
    """The KVM probe is skipped where the CPU has no vmx/svm flag (a hanging probe costs 20 s)."""
    intel = "processor\t: 0\nflags\t\t: fpu vme vmx sse2\n\nprocessor\t: 1\nflags\t\t: fpu vmx\n"
    assert cpu_virtualises(intel) and cpu_virtualises("flags : svm lm\n")
    assert not cpu_virtualises("flags\t\t: fpu vme sse2 hypervisor\n")
    assert not cpu_virtualises(intel + "processor\t: 2\nflags\t\t: fpu\n")      # every processor
    assert not cpu_virtualises("") and not cpu_virtualises("vmx\n")                # no flags line
    here = Path("/proc/cpuinfo").read_text()
    assert cpu_virtualises(here) == ((" vmx" in here or " svm" in here) and "flags" in here)


# ---------------------------------------------------------------------------------------------
# command line


def test_femu_device_arg_matches_the_recorded_femu_command(fixtures_dir: Path) -> None:
    # The fixtures were recorded with this exact -device string; the same geometry must rebuild it.
    readme = (fixtures_dir / "README.md").read_text()
    recorded = re.search(r"-device (femu,[^`\s]+)", readme)
    assert recorded
    geo = FemuGeometry(devsz_mb=192, pgs_per_blk=256, blks_per_pl=64, luns_per_ch=2, nchs=2,
                       gc_thres_pcent=75, gc_thres_pcent_high=95)
    mine = dict(kv.split("=") for kv in geo.device_arg().removeprefix("femu,").split(","))
    theirs = dict(kv.split("=") for kv in recorded.group(1).removeprefix("femu,").split(","))
    assert mine == theirs
    assert geo.raw_bytes == 256 * 2**20 and geo.exposed_bytes == 192 * 2**20


def test_femu_geometry_latencies_and_ftl_config() -> None:
    geo = FemuGeometry(devsz_mb=96, pgs_per_blk=128, blks_per_pl=64, luns_per_ch=2, nchs=2,
                       pg_rd_lat_ns=40000, pg_wr_lat_ns=200000, blk_er_lat_ns=2000000,
                       gc_thres_pcent=80, gc_thres_pcent_high=90)
    arg = geo.device_arg()
    for part in ("femu_mode=1", "secsz=512", "secs_per_pg=8", "pgs_per_blk=128", "blks_per_pl=64",
                 "pls_per_lun=1", "luns_per_ch=2", "nchs=2", "pg_rd_lat=40000", "pg_wr_lat=200000",
                 "blk_er_lat=2000000", "ch_xfer_lat=0", "gc_thres_pcent=80", "gc_thres_pcent_high=90"):
        assert f",{part}," in f"{arg},"
    ftl = geo.ftl_config()
    assert ftl.raw_bytes == geo.raw_bytes and ftl.exposed_bytes == geo.exposed_bytes
    assert ftl.page_bytes == 4096 and ftl.lines == 64 and ftl.blocks_per_line == 4


@pytest.mark.parametrize("bad, msg", [
    ({"devsz_mb": 256}, "no spare"),
    ({"gc_thres_pcent": 96}, "gc_thres_pcent"),
    ({"nchs": 0}, "nchs"),
    ({"pg_wr_lat_ns": -1}, "pg_wr_lat_ns"),
])
def test_femu_geometry_rejects(bad: dict[str, int], msg: str) -> None:
    with pytest.raises(KvwearError, match=msg):
        FemuGeometry(**bad)


def test_femu_geometry_from_options_names_unknown_fields() -> None:
    assert FemuGeometry.from_options({"devsz_mb": "96", "blks_per_pl": 32}).blks_per_pl == 32
    with pytest.raises(KvwearError, match=r"device.options.channels: unknown FEMU geometry setting; valid: .*nchs"):
        FemuGeometry.from_options({"channels": 4})


def test_qemu_argv_femu_and_stock() -> None:
    geo = FemuGeometry()
    femu = GuestConfig(drive=DriveConfig(femu=geo), qemu_binary="/opt/femu/qemu-system-x86_64",
                       extra_args=("-L", "/opt/femu/pc-bios"))
    argv = qemu_argv(femu, FAKE_IMAGE, Path("/w/initrd"), Path("/w/console.log"), Path("/w/result.log"))
    assert argv[0] == "/opt/femu/qemu-system-x86_64" and argv[-2:] == ["-L", "/opt/femu/pc-bios"]
    assert argv[argv.index("-device") + 1] == geo.device_arg()
    assert "-drive" not in argv and argv[argv.index("-accel") + 1] == "tcg"
    assert argv[argv.index("-append") + 1] == kernel_cmdline(femu)

    stock = GuestConfig(drive=DriveConfig(image=Path("/w/a,b.img"), serial="sn42", cache="writeback"))
    argv = qemu_argv(stock, FAKE_IMAGE, Path("/w/initrd"), Path("/w/c.log"), Path("/w/r.log"))
    drive = argv[argv.index("-drive") + 1]
    assert drive.startswith("file=/w/a,,b.img,")          # QEMU's comma escape
    assert "cache=writeback" in drive and "format=raw" in drive
    assert argv[argv.index("-device") + 1] == "nvme,serial=sn42,drive=nvm"
    assert argv.count("-serial") == 2 and "-nographic" in argv and "-no-reboot" in argv
    assert "nvme_core.io_timeout=15" in kernel_cmdline(stock)
    throttled = GuestConfig(drive=DriveConfig(image=Path("/w/d.img"), drive_options="throttling.iops-write=100"))
    argv = qemu_argv(throttled, FAKE_IMAGE, Path("/w/initrd"), Path("/w/c.log"), Path("/w/r.log"))
    assert argv[argv.index("-drive") + 1].endswith(",aio=threads,throttling.iops-write=100")


def test_drive_config_rejects() -> None:
    with pytest.raises(KvwearError, match="cache"):
        DriveConfig(image=Path("x"), cache="unsafe")  # type: ignore[arg-type]
    with pytest.raises(KvwearError, match="serial"):
        DriveConfig(image=Path("x"), serial="has space")
    with pytest.raises(KvwearError, match="drive_options"):
        DriveConfig(image=Path("x"), drive_options="a=1,file=/etc/passwd b")
    with pytest.raises(KvwearError, match="either"):
        DriveConfig(image=Path("x"), femu=FemuGeometry())


def test_find_guest_names_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(GuestNotBuiltError) as e:
        find_guest(tmp_path / "none")
    assert "scripts/build-guest.sh" in str(e.value) and str(tmp_path / "none") in str(e.value)


# ---------------------------------------------------------------------------------------------
# job archive: read back by busybox's cpio, the same implementation family the kernel's format follows


def test_newc_archive_reads_back_with_cpio(tmp_path: Path) -> None:
    files = {"job.fio": b"[w]\nrw=write\n", "replay.iolog": bytes(range(256)) * 37, "empty": b""}
    arc = newc_archive(files)
    assert len(arc) % 512 == 0
    out = tmp_path / "x"
    out.mkdir()
    listing = subprocess.run(["busybox", "cpio", "-t"], input=arc, capture_output=True, check=True).stdout
    assert listing.decode().split() == ["job", "job/empty", "job/job.fio", "job/replay.iolog"]
    subprocess.run(["busybox", "cpio", "-i", "-d"], input=arc, cwd=out, capture_output=True, check=True)
    for name, data in files.items():
        assert (out / "job" / name).read_bytes() == data
    with pytest.raises(KvwearError, match="plain file name"):
        newc_archive({"../etc/passwd": b""})


# The kernel's own timeout line: "I/O 644 … QID 1 timeout" (6.1), "I/O tag 1 (1001) … QID 1 timeout" (6.12).
NVME_TIMEOUT_LINE = r"nvme nvme0: I/O (?:tag )?\d+ .*QID \d+ timeout"


def test_find_io_timeouts_kernel_messages() -> None:
    # As Linux 6.1's drivers/nvme/host/pci.c (nvme_timeout) printed them in the guest.
    log = "\n".join([
        "[    5.1] nvme nvme0: 1/0/0 default/read/poll queues",
        "[   11.553424] nvme nvme0: I/O 644 (I/O Cmd) QID 1 timeout, aborting",
        "[   11.553745] nvme nvme0: Abort status: 0x0",
        "[   13.760974] nvme nvme0: I/O 644 QID 1 timeout, reset controller",
    ])
    hits = find_io_timeouts(log)
    assert len(hits) == 3 and sum("timeout" in h for h in hits) == 2
    assert find_io_timeouts("[ 1.0] nvme nvme0: pci function 0000:00:02.0\n") == []
    # Linux 6.12 (Debian 13's guest kernel) names the tag, the command id and the opcode.
    new = ("[    9.3] nvme nvme0: I/O tag 1 (1001) opcode 0x1 (Write) QID 1 timeout, aborting "
           "req_op:WRITE(1) size:65536")
    assert find_io_timeouts(new) == [new.strip()] and re.search(NVME_TIMEOUT_LINE, new)
    assert all(re.search(NVME_TIMEOUT_LINE, h) for h in hits if "QID" in h)


# ---------------------------------------------------------------------------------------------
# real guest boots


@pytest.fixture(scope="module")
def guest_image() -> GuestImage:
    return build_guest()        # idempotent; builds from Debian packages on a fresh machine


@pytest.fixture(scope="module")
def io_timeout(guest_image: GuestImage, tmp_path_factory: pytest.TempPathFactory) -> GuestIOTimeoutError:
    """A real NVMe timeout: QEMU throttles the drive's writes to 16 KiB/s, so fio's second 64 KiB
    write takes ~4 s against the guest's 1 s nvme_core.io_timeout (the first passes on the
    throttle's burst allowance). The guest still returns a complete result stream."""
    d = tmp_path_factory.mktemp("guest")
    img = d / "drive.img"
    with open(img, "wb") as fh:
        fh.truncate(32 * 2**20)
    job = "[w]\nfilename=/dev/nvme0n1\ndirect=1\nioengine=libaio\niodepth=1\nrw=write\nbs=64k\nsize=128k\n"
    cfg = GuestConfig(drive=DriveConfig(image=img, serial="kvwtest7", drive_options="throttling.bps-write=16384"),
                      io_timeout_s=1, boot_timeout_s=180, job_timeout_s=180)
    with pytest.raises(GuestIOTimeoutError) as e:
        run_guest(cfg, GuestJob({"job.fio": job.encode()}), d / "run")
    return e.value


@pytest.mark.guest
def test_nvme_io_timeout_invalidates_the_run(io_timeout: GuestIOTimeoutError) -> None:
    r = io_timeout.run
    assert any(re.search(NVME_TIMEOUT_LINE, ln) for ln in io_timeout.lines), io_timeout.lines
    assert "not valid" in str(io_timeout)
    # The guest applied the kernel command line's NVMe options to the modules it insmod-ed.
    assert r.events["nvme-params"] == "io_timeout=1"
    assert r.events["serial"] == "kvwtest7" and r.accel == "tcg"
    assert r.qemu_returncode == 0 and r.boot_s < r.wall_s
    assert all(v == 0 for k, v in r.exit_codes.items() if k.startswith("insmod")), r.exit_codes
    assert r.exit_codes["smart-binary-before"] == 0 and len(r.files["smart-before.bin"]) == 512
    assert json.loads(r.files["id-ctrl.json"])["sn"].strip() == "kvwtest7"
    assert "fio.json" in r.files and "-drive" in r.argv
    # The stream on disk is what the guest sent; re-parsing it gives the same files.
    assert parse_result_stream(r.result_log.read_bytes()).files == r.files


@pytest.mark.guest
def test_truncated_or_corrupted_result_is_detected(io_timeout: GuestIOTimeoutError) -> None:
    data = io_timeout.run.result_log.read_bytes()
    # Cut inside the fio.json frame: the frame has no end marker.
    begin = data.index(b"KVWEAR-BEGIN fio.json ")
    with pytest.raises(GuestProtocolError, match=r"fio\.json.*truncated"):
        parse_result_stream(data[: begin + 200])
    # Cut after a complete frame but before 'done'.
    end = data.index(b"KVWEAR-END fio.json\n") + len(b"KVWEAR-END fio.json\n")
    with pytest.raises(GuestProtocolError, match="before the guest's 'done'"):
        parse_result_stream(data[:end])
    # One base64 character changed (still valid base64): the sha256 catches it.
    body = begin + data[begin:].index(b"\n") + 1
    flipped = b"A" if data[body + 10:body + 11] != b"A" else b"B"
    with pytest.raises(GuestProtocolError, match="sha256 mismatch"):
        parse_result_stream(data[: body + 10] + flipped + data[body + 11:])
    # A dropped line: the length no longer matches.
    line_end = data.index(b"\n", body)
    with pytest.raises(GuestProtocolError, match=r"fio\.json"):
        parse_result_stream(data[:body] + data[line_end + 1:])
    # Control: the whole stream passes and the fio frame matches its announced sha256.
    frame = re.search(rb"KVWEAR-BEGIN fio.json (\d+) ([0-9a-f]{64})\n(.*?)KVWEAR-END", data, re.S)
    assert frame
    payload = base64.b64decode(frame.group(3))
    assert hashlib.sha256(payload).hexdigest().encode() == frame.group(2)
    assert parse_result_stream(data).files["fio.json"] == payload


@pytest.mark.guest
def test_boot_timeout_is_reported_and_qemu_reaped(guest_image: GuestImage, tmp_path: Path) -> None:
    img = tmp_path / "drive.img"
    with open(img, "wb") as fh:
        fh.truncate(16 * 2**20)
    cfg = GuestConfig(drive=DriveConfig(image=img), boot_timeout_s=1.0)
    with pytest.raises(GuestTimeoutError) as e:
        run_guest(cfg, GuestJob(), tmp_path / "run")
    assert e.value.phase == "boot"
    assert "guest boot timeout: no ready marker within 1 s" in str(e.value)
    assert "accel tcg" in str(e.value)
    # No QEMU process of this run survives.
    mine = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert mine == []


@pytest.mark.guest
def test_femu_command_line_on_stock_qemu_fails_clearly(guest_image: GuestImage, tmp_path: Path) -> None:
    # Debian's QEMU parses the whole FEMU command line and stops only at the femu device model,
    # which it lacks; the error carries QEMU's own message and QEMU is gone afterwards.
    cfg = GuestConfig(drive=DriveConfig(femu=FemuGeometry()), boot_timeout_s=60)
    with pytest.raises(GuestError, match=r"QEMU exited with status 1 before the guest finished.*'femu'"):
        run_guest(cfg, GuestJob(), tmp_path / "run")
    mine = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert mine == []


@pytest.mark.guest
def test_qemu_dies_with_a_killed_kvwear(guest_image: GuestImage, tmp_path: Path) -> None:
    # A kvwear process killed outright (SIGKILL: no cleanup runs) must not leave its QEMU behind.
    img = tmp_path / "drive.img"
    with open(img, "wb") as fh:
        fh.truncate(16 * 2**20)
    code = ("import sys; from pathlib import Path; from kvwear.emulator.guest import *; "
            "run_guest(GuestConfig(drive=DriveConfig(image=Path(sys.argv[1])), boot_timeout_s=300), "
            "GuestJob(), Path(sys.argv[2]))")
    parent = subprocess.Popen([sys.executable, "-c", code, str(img), str(tmp_path / "run")])

    def qemus() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline", "name"])
                if str(tmp_path) in " ".join(p.info["cmdline"] or []) and "qemu" in (p.info["name"] or "")]

    try:
        deadline = time.monotonic() + 60
        while not qemus() and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.05)
        (qemu,) = qemus()
        parent.kill()
        parent.wait()
        qemu.wait(timeout=10)         # raises psutil.TimeoutExpired if QEMU outlives its parent
    finally:
        for q in qemus():
            q.kill()
    assert qemus() == []
