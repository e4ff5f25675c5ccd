"""The QEMU/FEMU guest: find the guest image, build the QEMU command line, boot it, talk to it.

The guest is a Debian kernel plus a busybox initramfs with fio, nvme-cli, smartctl and the mkfs
tools of ext4, xfs and f2fs (with their kernel modules), built by
`scripts/build-guest.sh` into `guest_dir()` ($KVWEAR_GUEST_DIR or ~/.cache/kvwear/guest). Its
/init is `emulator/guest_init.sh` (package data).

Protocol (one QEMU process per job; the guest runs the job once and powers off):

- IN: the job's files (`job.env`, `job.fio`, the fio iolog, optional `precondition.fio`) are packed
  as an uncompressed cpio "newc" archive (`newc_archive`) under /job and appended to the guest's
  compressed initramfs; the kernel unpacks concatenated archives one after another. No transfer
  disk, so the only NVMe controller in the guest is the drive under test (/dev/nvme0n1) and the
  driver modules load from the initramfs as they are. The job must fit in guest RAM
  (`GuestConfig.memory_mib` grows with the job's size).
- OUT: the guest writes to its second serial port (a file on the host) `KVWEAR-EVENT name value`
  lines and one frame per output file: `KVWEAR-BEGIN name length sha256`, base64 lines,
  `KVWEAR-END name`; the stream ends with the `done` event. `parse_result_stream` checks every
  frame's length and sha256 and that `done` came, so a truncated or garbled result is an error,
  never a short result. The first serial port is the kernel console (kept as `console.log`).
- Outputs: `id-ctrl.json`, `id-ns.json`, `smart-{before,after}.{json,bin}`,
  `smartctl-{before,after}.json`, `fio.json` (+ `precondition.json`), or `dw.json` when the job
  holds `dw.plan` for kvwear-dw (the directive-write tool, `emulator/kvwear_dw.c`, in the image as
  /bin/kvwear-dw), with an FDP drive (`FdpConfig`, job.env `KVWEAR_FDP=1`) also
  `fdp-stats-{before,after}.bin` and `ruh-status-{before,after}.bin`, or, when the job holds
  `fs.plan` for kvwear-fs (the file player, `emulator/kvwear_fs.c`, /bin/kvwear-fs), `fs.json`,
  `mkfs.txt`, `mkfs-version.txt` and the drive's block counters `stat-{mkfs-before,mkfs-after,
  before,after}.txt` (around mkfs, and before the mount and after the unmount); `dmesg.txt`,
  `rc.txt` (exit status of each command), stderr files. `require_tool` refuses an image without a
  tool a job needs, or whose stamp names another build of a tool kvwear compiles.

Failure is never silent: a boot that does not reach `ready` within `boot_timeout_s`, a job that
does not finish within `job_timeout_s`, QEMU exiting early, or NVMe I/O timeouts / controller
resets in the guest's kernel log (Debian's QEMU 7.2 NVMe controller can stall at iodepth > 1;
`nvme_core.io_timeout` makes that fail fast) raise `GuestError` subclasses. The QEMU process is
always reaped.

Accelerator: TCG by default. /dev/kvm on the machines this was built on cannot run a stock Debian
kernel (with `-cpu host` QEMU aborts at once, "failed to set MSR 0x10a"; with QEMU's default CPU
the guest hangs after "Probing EDD"; on 2026-12-04 with `-cpu host` too, until the probe's 20 s
timeout, spending them as system CPU), so `kvm` is used only when asked for, and `auto` uses it
only if the CPU offers hardware virtualisation (a vmx or svm flag; this machine's has neither,
though it has /dev/kvm) and a probe boot under KVM reaches `ready` (`kvm_works`).

This module launches processes and moves bytes; it does not interpret SMART or fio output
(kvwear.harness.wear, kvwear.harness.devices.fio_runner do) and never touches a disk it was not given.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kvwear.children import die_with_parent
from kvwear.errors import KvwearError
from kvwear.values import BadValue, read_fields

if TYPE_CHECKING:
    from kvwear.emulator.ftl import FtlConfig

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "scripts" / "build-guest.sh"
DW_SOURCE = Path(__file__).with_name("kvwear_dw.c")     # the directive-write tool (/bin/kvwear-dw)
FS_SOURCE = Path(__file__).with_name("kvwear_fs.c")     # the file player (/bin/kvwear-fs)
# The tools scripts/build-guest.sh compiles from this checkout's sources: the stamp names each by
# its source's hash, so an image built from other sources is refused, not run.
BUILT_TOOLS: dict[str, Path] = {"kvwear-dw": DW_SOURCE, "kvwear-fs": FS_SOURCE}
GUEST_DEVICE = "/dev/nvme0n1"          # the drive under test, seen from inside the guest
JOB_DIR = "job"                        # where the appended archive lands in the guest
# The largest NVMe command the guest sends for one read or write of the plan: its Linux 6.1 block
# layer splits fio's I/O at max_sectors_kb (1,280 KiB, the kernel's default under FEMU's 4 MiB
# MDTS; measured on FEMU: a 3.5 MiB row arrives as 1,280 + 1,280 + 1,024 KiB commands, an 896 KiB
# row whole); kvwear-dw maps its buffer page by page, so at most max_segments pages (127: 508 KiB).
GUEST_MAX_IO_BYTES = 1280 << 10
GUEST_DW_MAX_IO_BYTES = 127 << 12
SUBSYS_ID = "kvwear-subsys"            # the NVMe subsystem an FDP drive's controller joins

Accel = Literal["tcg", "kvm", "auto"]
CacheMode = Literal["none", "writeback"]


class GuestError(KvwearError):
    """The guest could not be found, built, booted, or did not return a valid result."""


class GuestNotBuiltError(GuestError):
    """No guest image in the guest folder; the message names the command that builds it."""


class GuestTimeoutError(GuestError):
    """The guest did not reach a protocol step in time. `phase` is 'boot' or 'job'."""

    def __init__(self, phase: str, timeout_s: float, detail: str) -> None:
        self.phase = phase
        self.timeout_s = timeout_s
        super().__init__(f"guest {phase} timeout: no {'ready' if phase == 'boot' else 'done'} marker "
                         f"within {timeout_s:g} s; {detail}")


class GuestProtocolError(GuestError):
    """The result stream is truncated or corrupted (missing end marker, bad length or sha256)."""


class GuestIOTimeoutError(GuestError):
    """The guest kernel logged NVMe I/O timeouts or controller resets: the run is not valid."""

    def __init__(self, lines: Sequence[str], run: GuestRun) -> None:
        self.lines = tuple(lines)
        self.run = run
        shown = "\n  ".join(self.lines[:5])
        super().__init__(f"NVMe I/O timeouts in the guest ({len(self.lines)} kernel log lines); the run is "
                         f"not valid (use iodepth 1 with QEMU's NVMe controller):\n  {shown}")


# ---------------------------------------------------------------------------------------------
# the guest image


@dataclass(frozen=True)
class GuestImage:
    kernel: Path
    initrd: Path
    stamp: str                 # package versions the image was built from (scripts/build-guest.sh)


def guest_dir() -> Path:
    """$KVWEAR_GUEST_DIR, else ~/.cache/kvwear/guest."""
    env = os.environ.get("KVWEAR_GUEST_DIR")
    return Path(env) if env else Path.home() / ".cache" / "kvwear" / "guest"


FDP_QEMU_SCRIPT = "scripts/fetch-qemu-fdp.sh"


def fdp_qemu_prefix() -> Path:
    """Where scripts/fetch-qemu-fdp.sh unpacks Debian's backports QEMU on Debian 12:
    $KVWEAR_QEMU_FDP_PREFIX, else ~/.cache/kvwear/qemu-fdp."""
    env = os.environ.get("KVWEAR_QEMU_FDP_PREFIX")
    return Path(env) if env else Path.home() / ".cache" / "kvwear" / "qemu-fdp"


def fdp_qemu_binary(preferred: str = "qemu-system-x86_64") -> str | None:
    """A stock QEMU with NVMe FDP: `preferred` if it has it, else the one fetch-qemu-fdp.sh
    unpacked, else None (Debian 12's QEMU 7.2 has none; Debian 13's QEMU 10 has it)."""
    private = fdp_qemu_prefix() / "usr" / "bin" / "qemu-system-x86_64"
    for binary in (preferred, str(private)):
        if (shutil.which(binary) or Path(binary).is_file()) and supports_fdp(binary, femu=False):
            return binary
    return None


def build_command(folder: Path | None = None) -> str:
    """The shell command that builds the guest into `folder`."""
    folder = folder or guest_dir()
    return f"bash {BUILD_SCRIPT} {folder}"


def find_guest(folder: Path | None = None) -> GuestImage:
    """The built guest in `folder` (default `guest_dir()`), or GuestNotBuiltError saying how to build it."""
    folder = Path(folder) if folder else guest_dir()
    # vmlinux: the kernel's ELF with its PVH entry, which QEMU boots directly; vmlinuz: the bzImage,
    # when the kernel has no PVH entry (scripts/build-guest.sh says which it wrote)
    kernel = next((k for k in (folder / "vmlinux", folder / "vmlinuz") if k.is_file()), folder / "vmlinux")
    initrd, stamp = folder / "initrd.img", folder / "stamp"
    missing = [p.name for p in (kernel, initrd, stamp) if not p.is_file()]
    if missing:
        raise GuestNotBuiltError(
            f"no kvwear guest in {folder} (missing {', '.join(missing)}); build it with: {build_command(folder)}")
    return GuestImage(kernel=kernel, initrd=initrd, stamp=stamp.read_text().strip())


def build_guest(folder: Path | None = None, *, timeout_s: float = 900) -> GuestImage:
    """Run scripts/build-guest.sh (idempotent: returns at once when the stamp is current)."""
    folder = Path(folder) if folder else guest_dir()
    proc = subprocess.run(["bash", str(BUILD_SCRIPT), str(folder)], capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise GuestError(f"{build_command(folder)} failed (exit {proc.returncode}): "
                         f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return find_guest(folder)


def tool_stamp_line(tool: str) -> str:
    """The stamp line of an image whose /bin/`tool` (one of BUILT_TOOLS) was built from this
    checkout's source (scripts/build-guest.sh writes it: the first 16 hex digits of its sha256)."""
    return f"{tool} {hashlib.sha256(BUILT_TOOLS[tool].read_bytes()).hexdigest()[:16]}"


def image_tools(image: GuestImage) -> tuple[str, ...]:
    """The optional tools the image holds (its stamp's `tools` line: the mkfs tools the build
    machine had)."""
    line = next((ln for ln in image.stamp.splitlines() if ln.startswith("tools")), "tools")
    return tuple(line.split()[1:])


def require_tool(image: GuestImage, tool: str) -> None:
    """Refuse, naming the fix, an image without `tool`: a tool kvwear compiles (BUILT_TOOLS) must
    be the current build of its source (not an older one, nor one built before the source
    changed); another (mkfs.ext4, mkfs.xfs, mkfs.f2fs) must be in the stamp's `tools` line."""
    folder = image.kernel.parent
    if tool in BUILT_TOOLS:
        want = tool_stamp_line(tool)
        have = next((ln for ln in image.stamp.splitlines() if ln.startswith(f"{tool} ")), None)
        if have != want:
            raise GuestError(f"the guest image in {folder} has {'a stale ' + repr(have) if have else 'no ' + tool} "
                             f"(this checkout's is {want!r}): rebuild it with: {build_command(folder)}")
        return
    tools = image_tools(image)
    if tool not in tools:
        raise GuestError(f"the guest image in {folder} has no {tool} (its tools: {', '.join(tools) or 'none'}): "
                         f"install it on this machine (scripts/install-system-deps.sh) and rebuild the image "
                         f"with: {build_command(folder)}")


@functools.cache
def emulator_version(binary: str) -> str:
    """'7.2.22' from `BINARY --version` (QEMU and FEMU print QEMU's version); '?' if it says none."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except OSError as exc:
        raise GuestError(f"{binary} --version failed: {exc}") from None
    m = re.search(r"version (\d+\.\d+(?:\.\d+)?)", out)
    return m.group(1) if m else "?"


@functools.cache
def supports_fdp(binary: str, femu: bool) -> bool:
    """Does the emulator's NVMe subsystem device take `fdp` (stock QEMU ≥ 8.0: nvme-subsys; FEMU
    HEAD: femu-subsys)? Asked from `-device <subsys>,help`, which boots nothing."""
    dev = "femu-subsys" if femu else "nvme-subsys"
    try:
        proc = subprocess.run([binary, "-device", f"{dev},help"], capture_output=True, text=True, timeout=30,
                              check=False)
    except OSError as exc:
        raise GuestError(f"{binary} -device {dev},help failed: {exc}") from None
    return re.search(r"^\s*fdp=", proc.stdout, re.MULTILINE) is not None


# ---------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class FemuGeometry:
    """FEMU black-box SSD parameters (`-device femu,femu_mode=1,...`). Latencies in ns; 0 = as fast
    as the emulator can go. Defaults: a 256 MiB raw / 192 MiB exposed drive, as in the recorded
    fixtures (shared/fixtures/femu-bbssd)."""

    devsz_mb: int = 192
    pgs_per_blk: int = 256
    blks_per_pl: int = 64
    luns_per_ch: int = 2
    nchs: int = 2
    pg_rd_lat_ns: int = 0
    pg_wr_lat_ns: int = 0
    blk_er_lat_ns: int = 0
    gc_thres_pcent: int = 75
    gc_thres_pcent_high: int = 95
    secsz: int = 512
    secs_per_pg: int = 8
    pls_per_lun: int = 1

    def __post_init__(self) -> None:
        for f in ("devsz_mb", "pgs_per_blk", "blks_per_pl", "luns_per_ch", "nchs", "secsz", "secs_per_pg",
                  "pls_per_lun"):
            if getattr(self, f) <= 0:
                raise KvwearError(f"FemuGeometry.{f} must be > 0, got {getattr(self, f)}")
        for f in ("pg_rd_lat_ns", "pg_wr_lat_ns", "blk_er_lat_ns"):
            if getattr(self, f) < 0:
                raise KvwearError(f"FemuGeometry.{f} must be ≥ 0, got {getattr(self, f)}")
        if not 0 < self.gc_thres_pcent <= self.gc_thres_pcent_high < 100:
            raise KvwearError(f"FemuGeometry: need 0 < gc_thres_pcent ({self.gc_thres_pcent}) ≤ "
                              f"gc_thres_pcent_high ({self.gc_thres_pcent_high}) < 100")
        if self.devsz_mb * 2**20 >= self.raw_bytes:
            raise KvwearError(f"FemuGeometry: devsz_mb={self.devsz_mb} leaves no spare in "
                              f"{self.raw_bytes // 2**20} MiB of raw NAND")

    @property
    def page_bytes(self) -> int:
        return self.secsz * self.secs_per_pg

    @property
    def raw_bytes(self) -> int:
        return (self.page_bytes * self.pgs_per_blk * self.blks_per_pl * self.pls_per_lun
                * self.luns_per_ch * self.nchs)

    @property
    def exposed_bytes(self) -> int:
        return self.devsz_mb * 2**20

    def device_arg(self) -> str:
        """The `-device` value, in the parameter order FEMU's documentation uses."""
        params = [
            ("devsz_mb", self.devsz_mb), ("namespaces", 1), ("femu_mode", 1), ("secsz", self.secsz),
            ("secs_per_pg", self.secs_per_pg), ("pgs_per_blk", self.pgs_per_blk),
            ("blks_per_pl", self.blks_per_pl), ("pls_per_lun", self.pls_per_lun),
            ("luns_per_ch", self.luns_per_ch), ("nchs", self.nchs), ("pg_rd_lat", self.pg_rd_lat_ns),
            ("pg_wr_lat", self.pg_wr_lat_ns), ("blk_er_lat", self.blk_er_lat_ns), ("ch_xfer_lat", 0),
            ("gc_thres_pcent", self.gc_thres_pcent), ("gc_thres_pcent_high", self.gc_thres_pcent_high),
        ]
        return "femu," + ",".join(f"{k}={v}" for k, v in params)

    def ftl_config(self) -> FtlConfig:
        """The embedded FTL emulator configured as this FEMU drive (for predicted-vs-measured WAF)."""
        from kvwear.emulator.ftl import FtlConfig  # late: numba import is heavy and only needed here

        return FtlConfig.femu(
            devsz_mb=self.devsz_mb, secsz=self.secsz, secs_per_pg=self.secs_per_pg, pgs_per_blk=self.pgs_per_blk,
            blks_per_pl=self.blks_per_pl, pls_per_lun=self.pls_per_lun, luns_per_ch=self.luns_per_ch,
            nchs=self.nchs, gc_thres_pcent=self.gc_thres_pcent, gc_thres_pcent_high=self.gc_thres_pcent_high)

    @classmethod
    def from_options(cls, options: Mapping[str, object], source: str = "device.options") -> FemuGeometry:
        """Build from a mapping of field names (unknown names are an error naming them)."""
        try:
            kwargs = read_fields(cls, options, kind="FEMU geometry setting")
        except BadValue as exc:
            raise KvwearError(f"{source}.{exc.field}: {exc.reason}") from None
        return cls(**kwargs)


@dataclass(frozen=True)
class FdpConfig:
    """NVMe Flexible Data Placement on the drive's subsystem (one reclaim group: kvwear-dw's
    placement identifier is then the placement handle itself, and FEMU implements only one).
    Stock QEMU ≥ 8.0: `nvme-subsys,fdp=on,fdp.nrg=1,fdp.nruh=…[,fdp.runs=…]` and the namespace's
    `fdp.ruhs` lists every handle; FEMU: `femu-subsys,fdp=on,fdp.nrg=1,fdp.nruh=…[,fdp.nru=…]`."""

    nruh: int = 2                        # reclaim unit handles = placement handles 0 … nruh−1
    runs_bytes: int | None = None        # stock QEMU's reclaim unit size (None: QEMU's 96 MiB)
    nru: int | None = None               # FEMU's reclaim units per group (None: FEMU's default)

    def __post_init__(self) -> None:
        if not 1 <= self.nruh <= 128:
            raise KvwearError(f"FDP nruh must be 1–128, got {self.nruh}")
        for f in ("runs_bytes", "nru"):
            v = getattr(self, f)
            if v is not None and v <= 0:
                raise KvwearError(f"FDP {f} must be > 0, got {v}")

    def subsys_arg(self, femu: bool) -> str:
        extra = (f",fdp.nru={self.nru}" if femu and self.nru else "") + \
                (f",fdp.runs={self.runs_bytes}" if not femu and self.runs_bytes else "")
        return (f"{'femu-subsys' if femu else 'nvme-subsys'},id={SUBSYS_ID},nqn={SUBSYS_ID},fdp=on,fdp.nrg=1,"
                f"fdp.nruh={self.nruh}{extra}")


@dataclass(frozen=True)
class DriveConfig:
    """The emulated NVMe drive. `image` is the raw file backing a stock QEMU drive (created by the
    caller); a FEMU drive keeps its data in FEMU's memory and has no image."""

    image: Path | None = None
    serial: str = "kvwear0001"
    cache: CacheMode = "none"            # none: O_DIRECT on the host; writeback: host page cache
    femu: FemuGeometry | None = None
    drive_options: str = ""              # extra QEMU -drive options, e.g. "throttling.bps-write=8388608"
    fdp: FdpConfig | None = None         # Flexible Data Placement on (stock QEMU ≥ 8.0 or FEMU)

    def __post_init__(self) -> None:
        if self.cache not in ("none", "writeback"):
            raise KvwearError(f"drive cache must be 'none' or 'writeback', got {self.cache!r}")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,20}", self.serial):
            raise KvwearError(f"drive serial {self.serial!r}: 1-20 characters of [A-Za-z0-9._-]")
        kv = r"[A-Za-z0-9._-]+=[A-Za-z0-9._-]+"
        if self.drive_options and not re.fullmatch(rf"{kv}(,{kv})*", self.drive_options):
            raise KvwearError(f"drive_options {self.drive_options!r}: expected key=value[,key=value...]")
        if (self.image is None) == (self.femu is None):
            raise KvwearError("a drive is either a stock QEMU drive with an image or a FEMU drive, not both/neither")


@dataclass(frozen=True)
class GuestConfig:
    drive: DriveConfig
    qemu_binary: str = "qemu-system-x86_64"
    accel: Accel = "tcg"
    cpus: int = 1
    memory_mib: int = 512                # base; run_guest adds room for the job archive
    boot_timeout_s: float = 120.0
    job_timeout_s: float = 600.0
    io_timeout_s: int = 15               # nvme_core.io_timeout: fail fast on a stalled controller
    guest_folder: Path | None = None     # default guest_dir()
    extra_args: tuple[str, ...] = ()     # appended to QEMU's argv (e.g. "-L", FEMU's pc-bios folder)

    def __post_init__(self) -> None:
        if self.accel not in ("tcg", "kvm", "auto"):
            raise KvwearError(f"accel must be tcg, kvm or auto, got {self.accel!r}")
        if self.cpus < 1 or self.memory_mib < 128:
            raise KvwearError(f"guest needs ≥ 1 CPU and ≥ 128 MiB (got {self.cpus}, {self.memory_mib})")
        if self.boot_timeout_s <= 0 or self.job_timeout_s <= 0 or self.io_timeout_s <= 0:
            raise KvwearError("guest timeouts must be > 0")


# ---------------------------------------------------------------------------------------------
# pure pieces: command line, job archive, result stream


def kernel_cmdline(cfg: GuestConfig) -> str:
    """Console on ttyS0, quiet (the result channel is ttyS1), reboot on panic (QEMU exits with
    -no-reboot), NVMe timeouts short and without retries so a stall fails fast and shows in dmesg."""
    return (f"console=ttyS0 quiet loglevel=4 panic=-1 rdinit=/init nvme_core.io_timeout={cfg.io_timeout_s} "
            f"nvme_core.admin_timeout={cfg.io_timeout_s} nvme_core.max_retries=0")


def _qemu_path(p: Path) -> str:
    """QEMU option values separate with commas; a comma in a path is written twice."""
    return str(p).replace(",", ",,")


def qemu_argv(cfg: GuestConfig, image: GuestImage, initrd: Path, console_log: Path, result_log: Path,
              memory_mib: int | None = None, accel: str | None = None) -> list[str]:
    """The full QEMU (or FEMU) command line. Pure: nothing is checked on disk."""
    accel = accel or ("tcg" if cfg.accel == "auto" else cfg.accel)
    argv = [
        cfg.qemu_binary, "-accel", accel, "-machine", "pc", "-cpu", "max" if accel == "tcg" else "host",
        "-smp", str(cfg.cpus), "-m", str(memory_mib or cfg.memory_mib),
        "-nographic", "-nodefaults", "-no-user-config", "-monitor", "none", "-no-reboot",
        "-kernel", str(image.kernel), "-initrd", str(initrd), "-append", kernel_cmdline(cfg),
        "-chardev", f"file,id=console,path={_qemu_path(console_log)}", "-serial", "chardev:console",
        "-chardev", f"file,id=result,path={_qemu_path(result_log)}", "-serial", "chardev:result",
    ]
    d = cfg.drive
    # With FDP the subsystem comes first: the controller names it (subsys=).
    if d.femu is not None:
        if d.fdp is not None:
            argv += ["-device", d.fdp.subsys_arg(femu=True), "-device", f"{d.femu.device_arg()},subsys={SUBSYS_ID}"]
        else:
            argv += ["-device", d.femu.device_arg()]
    else:
        assert d.image is not None
        argv += ["-drive", f"file={_qemu_path(d.image)},if=none,id=nvm,format=raw,cache={d.cache},aio=threads"
                 + (f",{d.drive_options}" if d.drive_options else "")]
        if d.fdp is not None:   # stock QEMU: the namespace is its own device, naming its handles
            ruhs = f"0-{d.fdp.nruh - 1}" if d.fdp.nruh > 1 else "0"
            argv += ["-device", d.fdp.subsys_arg(femu=False),
                     "-device", f"nvme,serial={d.serial},subsys={SUBSYS_ID}",
                     "-device", f"nvme-ns,drive=nvm,nsid=1,fdp.ruhs={ruhs}"]
        else:
            argv += ["-device", f"nvme,serial={d.serial},drive=nvm"]
    return argv + list(cfg.extra_args)


def newc_archive(files: Mapping[str, bytes], prefix: str = JOB_DIR) -> bytes:
    """An uncompressed cpio 'newc' archive holding `prefix/` and `prefix/<name>` for each file,
    as the kernel's initramfs unpacker reads it (appended after the compressed initramfs)."""
    out = bytearray()

    def entry(ino: int, name: str, mode: int, data: bytes) -> None:
        nb = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 2 if mode & 0o040000 else 1, 0, len(data), 0, 0, 0, 0, len(nb), 0)
        out.extend(b"070701" + b"".join(b"%08X" % v for v in fields) + nb)
        out.extend(b"\0" * (-len(out) % 4))
        out.extend(data)
        out.extend(b"\0" * (-len(out) % 4))

    entry(1, prefix, 0o040755, b"")
    for i, (name, data) in enumerate(sorted(files.items()), start=2):
        if "/" in name or not name or name in (".", ".."):
            raise KvwearError(f"job file name {name!r} must be a plain file name")
        entry(i, f"{prefix}/{name}", 0o100644, data)
    entry(0, "TRAILER!!!", 0, b"")
    out.extend(b"\0" * (-len(out) % 512))
    return bytes(out)


@dataclass(frozen=True)
class ResultStream:
    """A parsed, verified result stream: events in order (name → value, last one wins) and files."""

    events: Mapping[str, str]
    files: Mapping[str, bytes]


_BEGIN = re.compile(r"KVWEAR-BEGIN (\S+) (\d+) ([0-9a-f]{64})")


def parse_result_stream(data: bytes, source: str = "guest result stream", *, require_done: bool = True) -> ResultStream:
    """Verify and decode the guest's result stream (see the module docstring). Raises
    GuestProtocolError on a frame cut short, a wrong length or sha256, bad base64, an unexpected
    line, or (with `require_done`) a stream that ends before the `done` event."""
    text = data.decode("ascii", errors="replace").replace("\r", "")
    lines = text.split("\n")
    events: dict[str, str] = {}
    files: dict[str, bytes] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            continue
        if line.startswith("KVWEAR-EVENT "):
            parts = line.split(" ", 2)
            events[parts[1]] = parts[2] if len(parts) > 2 else ""
            continue
        m = _BEGIN.fullmatch(line)
        if not m:
            raise GuestProtocolError(f"{source}: line {i}: unexpected {line[:80]!r}")
        name, length, digest = m.group(1), int(m.group(2)), m.group(3)
        body: list[str] = []
        while i < len(lines) and lines[i] != f"KVWEAR-END {name}":
            if lines[i].startswith("KVWEAR-"):
                raise GuestProtocolError(f"{source}: line {i + 1}: frame {name!r} interrupted by {lines[i][:60]!r}")
            body.append(lines[i])
            i += 1
        if i >= len(lines):
            raise GuestProtocolError(f"{source}: frame {name!r} truncated (no end marker; stream cut short)")
        i += 1
        try:
            payload = base64.b64decode("".join(body), validate=True)
        except binascii.Error as exc:
            raise GuestProtocolError(f"{source}: frame {name!r}: corrupted base64 ({exc})") from None
        if len(payload) != length:
            raise GuestProtocolError(f"{source}: frame {name!r}: {len(payload)} bytes, the guest announced {length}")
        if hashlib.sha256(payload).hexdigest() != digest:
            raise GuestProtocolError(f"{source}: frame {name!r}: sha256 mismatch (corrupted in transit)")
        files[name] = payload
    if require_done and "done" not in events:
        raise GuestProtocolError(f"{source}: stream ends before the guest's 'done' marker (truncated)")
    return ResultStream(events=events, files=files)


_IO_TIMEOUT = re.compile(
    r"nvme\d*\S*: I/O \d+ \(?.*\)? ?QID \d+ timeout|nvme\d+: I/O \d+ QID \d+ timeout|"
    r"timeout, (?:aborting|reset controller)|resetting controller|controller is down|"
    r"nvme\d+n\d+: I/O Cmd.* failed|Abort status", re.IGNORECASE)


def find_io_timeouts(dmesg: str) -> list[str]:
    """Kernel log lines that show NVMe command timeouts, aborts or controller resets."""
    return [ln.strip() for ln in dmesg.splitlines() if _IO_TIMEOUT.search(ln)]


def parse_exit_codes(text: str) -> dict[str, int]:
    """rc.txt: 'name status' per line."""
    out: dict[str, int] = {}
    for n, ln in enumerate(text.splitlines(), 1):
        parts = ln.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise GuestProtocolError(f"rc.txt line {n}: expected 'name status', got {ln!r}")
        out[parts[0]] = int(parts[1])
    return out


# ---------------------------------------------------------------------------------------------
# running


@dataclass(frozen=True)
class GuestJob:
    """What the guest runs: files placed in /job (names → bytes). `job.fio` is run by fio with
    /job as its working directory; `precondition.fio`, if present, runs before the first SMART
    snapshot."""

    files: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return sum(len(v) for v in self.files.values())


@dataclass(frozen=True)
class GuestRun:
    """One completed guest run."""

    files: Mapping[str, bytes]
    events: Mapping[str, str]
    exit_codes: Mapping[str, int]
    boot_s: float                 # host wall time from QEMU start to the guest's 'ready'
    wall_s: float                 # host wall time from QEMU start to QEMU's exit
    guest_ready_s: float          # guest uptime at 'ready'
    fio_s: float | None           # guest uptime between fio start and end
    qemu_returncode: int
    accel: str
    argv: tuple[str, ...]
    console_log: Path
    result_log: Path

    def text(self, name: str) -> str:
        return self.files[name].decode(errors="replace")


def _tail(path: Path, n: int = 1500) -> str:
    try:
        data = path.read_bytes()[-n:]
    except OSError:
        return ""
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1bc", "", data.decode(errors="replace")).strip()


def run_guest(cfg: GuestConfig, job: GuestJob, workdir: Path, *, check_io_timeouts: bool = True,
              poll_s: float = 0.05) -> GuestRun:
    """Boot the guest with `job`, wait for its result, verify it, reap QEMU. Files kept in `workdir`:
    console.log, result.log, qemu.stderr (initrd-job.img only while QEMU runs). Raises GuestError
    subclasses."""
    image = find_guest(cfg.guest_folder)
    accel = cfg.accel
    if accel == "auto":
        accel = "kvm" if kvm_works(cfg.qemu_binary, image.kernel, image.initrd) else "tcg"
    if cfg.drive.image is not None and not cfg.drive.image.is_file():
        raise GuestError(f"drive image {cfg.drive.image} does not exist (the caller creates it)")
    if shutil.which(cfg.qemu_binary) is None and not Path(cfg.qemu_binary).is_file():
        raise GuestError(f"{cfg.qemu_binary} not found (Debian package qemu-system-x86, or give the FEMU binary)")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    initrd = workdir / "initrd-job.img"
    with open(initrd, "wb") as out, open(image.initrd, "rb") as base:
        shutil.copyfileobj(base, out)
        out.write(b"\0" * (-out.tell() % 512))
        out.write(newc_archive(job.files))
    console, result, stderr_path = workdir / "console.log", workdir / "result.log", workdir / "qemu.stderr"
    for p in (console, result):
        p.write_bytes(b"")
    # Room for the job twice (archive + unpacked copy) besides the base footprint.
    memory = cfg.memory_mib + 2 * (-(-job.size_bytes // 2**20))
    argv = qemu_argv(cfg, image, initrd, console, result, memory_mib=memory, accel=accel)
    t0 = time.monotonic()
    boot_s: float | None = None
    # QEMU runs in its own session (a Ctrl-C meant for kvwear reaches it through the cleanup
    # below, not twice), so it must die with us when we are killed outright: setpriv (util-linux)
    # sets the parent-death signal and execs QEMU (kvwear.children).
    launch = die_with_parent(argv)
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(launch, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
        try:
            while True:
                rc = proc.poll()
                now = time.monotonic() - t0
                data = result.read_bytes()
                if boot_s is None and b"KVWEAR-EVENT ready " in data:
                    boot_s = now
                if rc is not None:
                    break
                if boot_s is None and now > cfg.boot_timeout_s:
                    raise GuestTimeoutError("boot", cfg.boot_timeout_s,
                                            f"accel {accel}; console tail:\n{_tail(console)}")
                if boot_s is not None and now - boot_s > cfg.job_timeout_s:
                    raise GuestTimeoutError("job", cfg.job_timeout_s,
                                            f"console tail:\n{_tail(console)}\nresult tail:\n{_tail(result, 400)}")
                time.sleep(poll_s)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            initrd.unlink(missing_ok=True)     # a 30+ MB derived copy; the job's files are kept by callers
    wall = time.monotonic() - t0
    data = result.read_bytes()
    if b"KVWEAR-EVENT done " not in data:
        raise GuestError(f"QEMU exited with status {proc.returncode} before the guest finished; "
                         f"qemu stderr: {_tail(stderr_path, 800) or '(empty)'}; console tail:\n{_tail(console)}")
    stream = parse_result_stream(data, str(result))
    if "error" in stream.events:
        raise GuestError(f"guest reported error {stream.events['error']!r}; console tail:\n{_tail(console)}")
    codes = parse_exit_codes(stream.files.get("rc.txt", b"").decode())
    ev = stream.events
    fio_s = float(ev["fio-end"]) - float(ev["fio-start"]) if "fio-end" in ev and "fio-start" in ev else None
    run = GuestRun(files=stream.files, events=ev, exit_codes=codes, boot_s=boot_s if boot_s is not None else wall,
                   wall_s=wall, guest_ready_s=float(ev.get("ready", "nan")), fio_s=fio_s,
                   qemu_returncode=proc.returncode, accel=accel, argv=tuple(argv), console_log=console,
                   result_log=result)
    if check_io_timeouts:
        hits = find_io_timeouts(run.text("dmesg.txt")) if "dmesg.txt" in run.files else []
        if hits:
            raise GuestIOTimeoutError(hits, run)
    return run


def cpu_virtualises(cpuinfo: str) -> bool:
    """Does /proc/cpuinfo's text name a hardware virtualisation flag (Intel vmx, AMD svm) on every
    processor it lists? Without one, KVM cannot run a guest whatever /dev/kvm says."""
    flags = [set(line.split(":", 1)[1].split()) for line in cpuinfo.splitlines()
             if line.startswith("flags") and ":" in line]
    return bool(flags) and all(f & {"vmx", "svm"} for f in flags)


@functools.cache
def kvm_works(qemu_binary: str, kernel: Path, initrd: Path, timeout_s: float = 20.0) -> bool:
    """Does a guest boot under KVM reach 'ready' within `timeout_s`? (Probed once per process, and
    only where /dev/kvm is usable and the CPU virtualises: a probe that hangs costs its timeout.)"""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    try:
        if not cpu_virtualises(Path("/proc/cpuinfo").read_text()):
            return False
    except OSError:
        return False
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kvwear-kvm-probe-") as tmp:
        img = Path(tmp) / "probe.img"
        img.write_bytes(b"")
        os.truncate(img, 16 * 2**20)
        cfg = GuestConfig(drive=DriveConfig(image=img), qemu_binary=qemu_binary, accel="kvm",
                          boot_timeout_s=timeout_s, guest_folder=kernel.parent)
        try:
            run_guest(replace(cfg, job_timeout_s=timeout_s), GuestJob(), Path(tmp) / "run")
        except GuestError:
            return False
    return True
