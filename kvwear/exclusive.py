"""Exclusive use: one kvwear at a time writes to a device, and one at a time works in a run
directory.

A lock is an `flock` on a lock file; the file holds who took it (pid, command line, start time)
so that a refused run can say who holds it. Devices are keyed by identity, not by path: a block
device by its serial (for a loop device, its backing file's identity) or its dev_t, a file or a
guest image by (st_dev, inode); their lock files live in `$KVWEAR_LOCK_DIR`
(default /tmp/kvwear-locks). A run directory (a sweep point is one) is locked by `RUN/.lock`.
A block device is also held open with O_EXCL, so that the kernel refuses a mount or another
exclusive opener while kvwear writes to it.

The locks are held by open file descriptions: they are released when the last process holding
them ends, whatever the signal. `inherited_fds()` lists them so that children (fio, tracers) are
started holding them too: a resumed run is refused while a child of the previous one still runs.
This module takes and releases locks; it must not decide whether a device is safe to write
(kvwear.harness.devices.safety does).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from kvwear.errors import KvwearError

_HELD: set[int] = set()


class BusyError(KvwearError):
    """The device or run directory is in use by another kvwear (or another program)."""


def lock_dir() -> Path:
    d = Path(os.environ.get("KVWEAR_LOCK_DIR", "/tmp/kvwear-locks"))
    if not d.is_dir():
        d.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):    # shared by every user, like /tmp (the umask would narrow it)
            d.chmod(0o1777)
    return d


def inherited_fds() -> tuple[int, ...]:
    """The descriptors of every lock this process holds (for `pass_fds` of a child)."""
    return tuple(sorted(_HELD))


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info.get("since", 0))))
    return f"kvwear pid {info.get('pid')} ({' '.join(info.get('argv', []))}) since {since}"


@contextlib.contextmanager
def locked(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on `path` for the block; BusyError (naming the holder) if taken.
    The lock file is removed on release (while still locked), so lock files do not pile up."""
    fd, writable = _lock_fd(path, what)
    try:
        if writable:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "argv": ["kvwear", *sys.argv[1:]],
                                      "since": time.time()}).encode(), 0)
        _HELD.add(fd)
        try:
            yield
        finally:
            _HELD.discard(fd)
            if writable:
                with contextlib.suppress(OSError):
                    path.unlink()
    finally:
        os.close(fd)


def _lock_fd(path: Path, what: str) -> tuple[int, bool]:
    """An open, flocked descriptor of the file now at `path` (and whether it is writable). A
    releasing holder may unlink the file between our open and our flock: then the lock we got is
    on a file nobody else can find, so it is taken again on the file now at the path."""
    while True:
        try:
            fd, writable = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666), True
        except PermissionError:      # another user's lock file: flock works on a read-only descriptor
            fd, writable = os.open(path, os.O_RDONLY | os.O_CLOEXEC), False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BusyError(f"{what} is in use by {_holder(path)}; wait for it to finish "
                            f"(lock {path})") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, writable
        os.close(fd)


def device_lock_path(kind: str, identity: str) -> Path:
    """The lock file of a device known by `identity` (a serial, a dev_t, or dev:inode)."""
    digest = hashlib.sha256(identity.encode()).hexdigest()[:24]
    return lock_dir() / f"{kind}-{digest}.lock"


def block_identity(serial: str | None, dev: tuple[int, int]) -> str:
    return serial or f"dev:{dev[0]}:{dev[1]}"


def file_identity(path: str) -> str:
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"


@contextlib.contextmanager
def exclusive_block_device(path: str) -> Iterator[None]:
    """Hold `path` open with O_EXCL for the block (inherited by children like the locks)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            raise BusyError(f"{path} is in use: mounted, or held exclusively by another program "
                            "(a filesystem, a RAID or device-mapper member, another kvwear)") from None
        raise KvwearError(f"{path}: cannot open exclusively: {exc.strerror}") from None
    _HELD.add(fd)
    try:
        yield
    finally:
        _HELD.discard(fd)
        os.close(fd)


@contextlib.contextmanager
def claim_block_device(path: str, serial: str | None, dev: tuple[int, int]) -> Iterator[None]:
    """A block device for the block: its identity's lock (names a kvwear holder), then O_EXCL
    (refuses any other exclusive holder)."""
    ident = block_identity(serial, dev)
    with locked(device_lock_path("block", ident), f"{path} ({ident})"), exclusive_block_device(path):
        yield


def claim_file(path: str) -> contextlib.AbstractContextManager[None]:
    """A file (or a guest image) for the block, keyed by its filesystem and inode."""
    ident = file_identity(path)
    return locked(device_lock_path("file", ident), f"{path} (file {ident})")


def check_free(path: Path, what: str) -> None:
    """Refuse now (before any work) when `path`'s lock is held; takes and releases it."""
    if not path.exists():
        return
    with locked(path, what):
        pass
