"""release_freed_memory hands freed heap pages back: RSS falls after a fragmented free."""

from __future__ import annotations

import ctypes.util
import sys

import pytest

from kvwear.memory import _malloc_trim, release_freed_memory


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None
                    or _malloc_trim() is None, reason="needs Linux's /proc and glibc's malloc_trim")
def test_freed_heap_pages_go_back_to_the_system() -> None:
    # 240 MiB of 4 KiB heap blocks (above pymalloc's 512 B, below glibc's mmap threshold), every
    # 64th kept: the heap's top never becomes free, so only malloc_trim can return the pages between
    blocks = [bytearray(4096) for _ in range(60_000)]
    for b in blocks:
        b[::512] = b"\x01" * 8                      # touch every page
    kept = blocks[::64]
    del blocks
    before = _rss_mib()
    release_freed_memory()
    after = _rss_mib()
    assert before - after > 150, (before, after)
    assert all(b[0] == 1 for b in kept)            # what is still referenced is untouched
