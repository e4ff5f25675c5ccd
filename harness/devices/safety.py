"""Device safety: decide whether kvwear may write raw I/O to a block device or a file.

A device is refused when it is mounted (itself, a partition, or anything stacked on it: dm, md,
a loop over it), has partitions, carries a filesystem / RAID / partition-table signature
(`blkid -p`), or a backup GPT header in its last logical block (blkid looks for the backup only
behind a valid protective MBR, so a disk whose first sectors were wiped passes it), or backs the
running system (root filesystem, swap, any holder chain) — unless the caller passes
`confirm_serial` equal to the device's serial. For a loop device the serial is the identity of
its backing file: `loop:<major>:<minor>:<inode>` (the filesystem device holding the file and the
file's inode, from LOOP_GET_STATUS64), so the confirmation names one file, not a reusable
/dev/loopN slot.

Files (`file:PATH`): an existing non-empty file is refused unless kvwear created it (it marks the
files it creates with the extended attribute `user.kvwear.target`) or the caller confirms the
path (`--confirm-overwrite PATH`): `check_file_target`.

Pure parts: `parse_mountinfo`, `parse_swaps`, `parse_blkid_export`, `backup_gpt_at_end`, `assess`.
`inspect_block_device` gathers the facts from /proc, /sys, an ioctl, the device's last 4 KiB and
`blkid -p` (through an injected runner). This module only reads: it never opens a device for
writing and never writes a file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvwear.children import system_argv
from kvwear.errors import InputError, SafetyError

# A probe runner returns (exit code, stdout, stderr); blkid -p exits 2 both when it finds nothing
# and when it cannot open the device (then it says so on stderr).
ProbeRunner = Callable[[Sequence[str]], tuple[int, bytes, bytes]]

LOOP_GET_STATUS64 = 0x4C05
FILE_MARKER_XATTR = "user.kvwear.target"    # set on the files kvwear creates (kvwear.harness.devices.fio)
GPT_SIGNATURE = b"EFI PART"
SYS_BLOCK = Path("/sys/class/block")


def run_probe(argv: Sequence[str]) -> tuple[int, bytes, bytes]:
    try:
        proc = subprocess.run(system_argv(argv), capture_output=True, timeout=60, check=False)
    except FileNotFoundError:
        raise SafetyError(f"{argv[0]} not found (install util-linux); cannot check the device") from None
    return proc.returncode, proc.stdout, proc.stderr


# ---------------------------------------------------------------------------------------------
# pure parsers


@dataclass(frozen=True)
class MountEntry:
    dev: tuple[int, int]       # major, minor of the mounted filesystem
    mount_point: str
    fstype: str
    source: str


def _unescape(s: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str, source: str = "/proc/self/mountinfo") -> list[MountEntry]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            sep = parts.index("-")
            major, minor = (int(x) for x in parts[2].split(":"))
            out.append(MountEntry((major, minor), _unescape(parts[4]), parts[sep + 1], _unescape(parts[sep + 2])))
        except (ValueError, IndexError):
            raise InputError(source, n, None, f"not a mountinfo line: {line[:100]!r}") from None
    return out


def parse_swaps(text: str) -> list[str]:
    """/proc/swaps: the swap device or file paths (first column after the header)."""
    lines = text.splitlines()
    return [_unescape(line.split()[0]) for line in lines[1:] if line.strip()]


def parse_blkid_export(text: str) -> dict[str, str]:
    """`blkid -p -o export DEV`: KEY=VALUE lines (TYPE, USAGE, PTTYPE, UUID, ...)."""
    out = {}
    for line in text.splitlines():
        key, eq, val = line.partition("=")
        if eq:
            out[key.strip()] = val.strip()
    return out


def signatures_from_blkid(probe: dict[str, str]) -> list[str]:
    sigs = []
    if probe.get("PTTYPE"):
        sigs.append(f"{probe['PTTYPE']} partition table")
    if probe.get("TYPE"):
        sigs.append(f"{probe['TYPE']} {probe.get('USAGE') or 'signature'}")
    return sigs


def backup_gpt_at_end(tail: bytes, size_bytes: int) -> list[str]:
    """GPT headers in `tail` (the last bytes of a device of `size_bytes`): the backup header sits
    in the last logical block and names that block as its own LBA (`MyLBA`, offset 24). Tried for
    512 B and 4 KiB blocks (an image may carry a table written for either)."""
    found = []
    for lbs in (512, 4096):
        if len(tail) < lbs or size_bytes < 2 * lbs:
            continue
        hdr = tail[len(tail) - lbs:]
        if hdr[:8] == GPT_SIGNATURE and struct.unpack_from("<Q", hdr, 24)[0] == size_bytes // lbs - 1:
            found.append(f"backup GPT header in the last {lbs}-byte block")
    return found


def check_file_target(path: str, confirm_overwrite: str | None = None) -> None:
    """Refuse (SafetyError) an existing non-empty file kvwear did not create, unless
    `confirm_overwrite` names it (module docstring). A missing or empty file is fine."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SafetyError(f"{path}: cannot stat: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SafetyError(f"{path}: the file: backend needs a regular file (use block: for devices)")
    if st.st_size == 0:
        return
    try:
        ours = os.getxattr(path, FILE_MARKER_XATTR) == b"1"
    except OSError:
        ours = False
    if ours:
        return
    if confirm_overwrite and os.path.realpath(confirm_overwrite) == os.path.realpath(path):
        return
    raise SafetyError(f"refusing to write to {path}: an existing file of {st.st_size:,} bytes that kvwear did "
                      f"not create; the replay would destroy its contents. If you mean that, pass "
                      f"--confirm-overwrite {path}")


# ---------------------------------------------------------------------------------------------
# facts and verdict


@dataclass(frozen=True)
class DeviceFacts:
    """What kvwear found about a block device before writing to it."""

    path: str
    name: str                                # kernel name, e.g. loop3, nvme0n1
    dev: tuple[int, int]
    serial: str | None
    partitions: tuple[str, ...] = ()
    mounted: tuple[str, ...] = ()            # "loop3p1 on /mnt (ext4)"
    signatures: tuple[str, ...] = ()         # "ext4 filesystem", "dos partition table"
    system_use: tuple[str, ...] = ()         # "root filesystem", "swap", "holder dm-0", ...

    @property
    def problems(self) -> list[str]:
        out = []
        if self.mounted:
            out.append("mounted: " + "; ".join(self.mounted))
        if self.partitions:
            out.append("has partitions: " + ", ".join(self.partitions))
        if self.signatures:
            out.append("carries a signature: " + ", ".join(self.signatures))
        if self.system_use:
            out.append("backs the running system: " + "; ".join(self.system_use))
        return out


def assess(facts: DeviceFacts, confirm_serial: str | None = None) -> DeviceFacts:
    """Raise SafetyError unless the device is blank and unused, or `confirm_serial` names it."""
    problems = facts.problems
    if confirm_serial is not None and (facts.serial is None or confirm_serial != facts.serial):
        found = repr(facts.serial) if facts.serial else "no serial (cannot be confirmed)"
        raise SafetyError(f"{facts.path}: --confirm-serial {confirm_serial!r} does not match the "
                          f"device's serial: it reports {found}")
    if not problems or confirm_serial is not None:
        return facts
    how = (f"if you really mean to destroy its contents, pass --confirm-serial {facts.serial}"
           if facts.serial else "the device reports no serial, so kvwear cannot be told to override")
    raise SafetyError(f"refusing to write to {facts.path} ({facts.name}, {facts.dev[0]}:{facts.dev[1]}): "
                      + "; ".join(problems) + f". {how}")


# ---------------------------------------------------------------------------------------------
# gathering facts


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def _name_of(dev: tuple[int, int]) -> str | None:
    p = Path(f"/sys/dev/block/{dev[0]}:{dev[1]}")
    return p.resolve().name if p.exists() else None


def _dev_of(name: str) -> tuple[int, int] | None:
    text = _read(SYS_BLOCK / name / "dev")
    if not text:
        return None
    major, minor = text.split(":")
    return int(major), int(minor)


def _partitions(name: str) -> list[str]:
    base = SYS_BLOCK / name
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / "partition").exists())


def _holders(name: str) -> list[str]:
    d = SYS_BLOCK / name / "holders"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def _loops_backed_by(dev: tuple[int, int]) -> list[str]:
    """Loop devices whose backing file is the block device `dev` itself (losetup /dev/loopX /dev/sdb)."""
    out = []
    for p in SYS_BLOCK.glob("loop*"):
        back = _read(p / "loop" / "backing_file")
        if not back:
            continue
        try:
            st = os.stat(back)
        except OSError:
            continue
        if stat.S_ISBLK(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == dev:
            out.append(p.name)
    return out


def stacked_on(name: str) -> list[str]:
    """The device, its partitions and everything stacked on any of them (holders: dm, md, bcache;
    loops over the raw device), transitively."""
    seen: list[str] = []
    todo = [name]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.append(n)
        todo += _partitions(n) + _holders(n)
        d = _dev_of(n)
        if d is not None:
            todo += _loops_backed_by(d)
    return seen


def loop_serial(path: str) -> str | None:
    """`loop:<major>:<minor>:<inode>` of a loop device's backing file, None if not a bound loop."""
    try:
        with open(path, "rb") as fh:
            buf = fcntl.ioctl(fh.fileno(), LOOP_GET_STATUS64, b"\0" * 232)
    except OSError:
        return None
    lo_device, lo_inode = struct.unpack_from("<QQ", buf, 0)
    return f"loop:{os.major(lo_device)}:{os.minor(lo_device)}:{lo_inode}"


def device_serial(path: str, name: str) -> str | None:
    """The serial the kernel reports (NVMe/SCSI `device/serial`, else `device/wwid`); for a loop
    device, its backing file's identity (see the module docstring)."""
    if name.startswith("loop"):
        return loop_serial(path)
    base = SYS_BLOCK / name
    parent = base.resolve().parent   # a partition: its disk holds device/
    for d in (base, parent):
        for f in ("device/serial", "device/wwid", "serial"):
            v = _read(d / f)
            if v:
                return v
    return None


def check_block_path(path: str, *, open_it: bool = True) -> os.stat_result:
    """`path` as a `block:` target: it exists, is a block device with a medium and this user may open
    it (`open_it`: read-only, the preflight asks for write access); otherwise InputError, one line
    saying what to do. Returns its stat."""
    where = f"block:{path}"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(where, None, None, "no such device; list the block devices with `lsblk -p` "
                         "and give one of them (or file:PATH to write into a regular file)") from None
    except PermissionError:
        raise InputError(where, None, None, "permission denied looking it up; run kvwear as root "
                         "(or as a user who may read its folder)") from None
    except OSError as exc:
        raise InputError(where, None, None, f"cannot look it up: {exc.strerror}") from None
    if not stat.S_ISBLK(st.st_mode):
        kind = ("a regular file: use file:" + path + " to replay into a file" if stat.S_ISREG(st.st_mode)
                else "a folder" if stat.S_ISDIR(st.st_mode) else "not a block device")
        raise InputError(where, None, None, f"not a block device ({kind}); `lsblk -p` lists the block devices")
    if not open_it:
        return st
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except PermissionError:
        if os.geteuid() == 0:
            raise InputError(where, None, None, "permission denied opening it although kvwear runs as root "
                             "(a container's device rules or a security module forbid it); give the "
                             "container or the policy access to the device") from None
        raise InputError(where, None, None, "permission denied opening it; run "
                         "kvwear as root, or give your user read-write access to the device "
                         "(e.g. the `disk` group)") from None
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV):
            raise InputError(where, None, None, "no medium behind this device node (an unattached loop "
                             "device? attach a backing file with `losetup`)") from None
        if exc.errno == errno.EBUSY:
            return st      # held open exclusively by another user: the exclusive claim reports who
        raise InputError(where, None, None, f"cannot open it: {exc.strerror}") from None
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)
    if size <= 0:
        raise InputError(where, None, None, "the device has 0 bytes (an unattached loop device? attach a "
                         "backing file with `losetup --find --show FILE`)")
    return st


def inspect_block_device(path: str, runner: ProbeRunner = run_probe) -> DeviceFacts:
    """Gather the facts `assess` judges. Raises InputError if `path` is not a usable block device
    (`check_block_path`; not opened here: what cannot be read is judged by `assess`)."""
    st = check_block_path(path, open_it=False)
    dev = (os.major(st.st_rdev), os.minor(st.st_rdev))
    name = _name_of(dev) or Path(path).name
    family = stacked_on(name)
    fam_devs: dict[tuple[int, int], str] = {}
    for n in family:
        d = _dev_of(n)
        if d is not None:
            fam_devs[d] = n

    mounted, system = [], []
    for m in parse_mountinfo(Path("/proc/self/mountinfo").read_text()):
        owner = fam_devs.get(m.dev)
        if owner is None and m.source.startswith("/dev/"):
            try:
                sst = os.stat(m.source)
                if stat.S_ISBLK(sst.st_mode):
                    owner = fam_devs.get((os.major(sst.st_rdev), os.minor(sst.st_rdev)))
            except OSError:
                pass
        if owner is not None:
            mounted.append(f"{owner} on {m.mount_point} ({m.fstype})")
            if m.mount_point == "/":
                system.append(f"root filesystem is on {owner}")
    for sw in parse_swaps(_read(Path("/proc/swaps")) or ""):
        try:
            sst = os.stat(sw)
        except OSError:
            continue
        d = (os.major(sst.st_rdev), os.minor(sst.st_rdev)) if stat.S_ISBLK(sst.st_mode) else (
            os.major(sst.st_dev), os.minor(sst.st_dev))
        if d in fam_devs:
            system.append(f"swap {sw} on {fam_devs[d]}")
    root = os.stat("/").st_dev
    owner = fam_devs.get((os.major(root), os.minor(root)))
    if owner is not None and not any(s.startswith("root filesystem") for s in system):
        system.append(f"root filesystem is on {owner}")
    system += [f"holder {n}" for n in family if n != name and n not in _partitions(name)]

    rc, out, err = runner(["blkid", "-p", "-o", "export", path])
    if rc not in (0, 2) or err.strip():   # 2 with a silent stderr: nothing found
        # Not knowing is treated like finding one: kvwear does not write blind.
        msg = err.decode(errors="replace").strip() or f"exit {rc}"
        sigs = [f"unknown (blkid -p could not probe it: {msg})"]
    else:
        sigs = signatures_from_blkid(parse_blkid_export(out.decode(errors="replace"))) if rc == 0 else []
    if not any("partition table" in s for s in sigs):
        sigs += _backup_gpt(path)

    return DeviceFacts(
        path=path, name=name, dev=dev, serial=device_serial(path, name),
        partitions=tuple(_partitions(name)), mounted=tuple(mounted), signatures=tuple(sigs),
        system_use=tuple(system),
    )


def _backup_gpt(path: str) -> list[str]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return [f"unknown (cannot read its last blocks: {exc.strerror})"]
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        tail = os.pread(fd, min(4096, size), max(0, size - 4096))
    except OSError as exc:
        return [f"unknown (cannot read its last blocks: {exc.strerror})"]
    finally:
        os.close(fd)
    return backup_gpt_at_end(tail, size)


def check_block_device(path: str, confirm_serial: str | None = None,
                       runner: ProbeRunner = run_probe) -> DeviceFacts:
    """Inspect and assess `path`; returns the facts when writing is allowed, else SafetyError."""
    return assess(inspect_block_device(path, runner), confirm_serial)
