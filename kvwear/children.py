"""Child processes that die with kvwear.

A SIGKILLed kvwear runs no `finally` and no atexit handler, so a child must be tied to it by the
kernel: the parent-death signal (PR_SET_PDEATHSIG). `die_with_parent(argv)` prefixes a command
with util-linux's `setpriv --pdeathsig KILL`, which sets it and execs the command (Popen's
preexec_fn could too, but it is unsafe in a process with threads). `set_pdeathsig()` does the same
from inside a Python child (a process-pool worker's initializer). The kernel sends the signal when
the *thread* that started the child ends, so children are started from long-lived threads.

`find_program(name)` and `system_argv(argv)` find a program on PATH, then in /usr/sbin and /sbin:
Debian keeps the administration tools kvwear drives (blkid, wipefs, mkfs.*, smartctl, nvme) there
and off an unprivileged user's PATH, so a user who has them installed would otherwise be told to
install them.

This module only decorates commands and sets the signal; it must not start processes itself.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1
SYSTEM_DIRS = "/usr/sbin:/sbin"


def find_program(name: str) -> str | None:
    """`name`'s path on PATH, else in /usr/sbin or /sbin; None where neither has it."""
    return shutil.which(name) or shutil.which(name, path=SYSTEM_DIRS)


def system_argv(argv: Sequence[str]) -> list[str]:
    """`argv` with its program found by `find_program` (unchanged when it is nowhere, so that
    running it fails with the program's own name)."""
    return [find_program(argv[0]) or argv[0], *argv[1:]]


def die_with_parent(argv: Sequence[str]) -> list[str]:
    """`argv` run so that the kernel SIGKILLs it when kvwear dies (unchanged without setpriv)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


def set_pdeathsig(parent_pid: int | None = None) -> None:
    """In a child process: be SIGKILLed when the parent dies; if the parent `parent_pid` is
    already gone (it died before this ran), die now."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
