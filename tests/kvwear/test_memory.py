"""release_freed_memory hands freed heap pages back: RSS falls after a fragmented free; a full
collection runs when asked or when memory is short, and only then frees cyclic garbage."""

from __future__ import annotations

import ctypes.util
import gc
import sys
import weakref

import pytest

from kvwear.memory import SHORT_OF_MEMORY_FRACTION, _malloc_trim, release_freed_memory, short_of_memory

needs_trim = pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None
                                or _malloc_trim() is None, reason="needs Linux's /proc and glibc's malloc_trim")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


@needs_trim
def test_freed_heap_pages_go_back_to_the_system_without_a_collection() -> None:
    # 240 MiB of 4 KiB heap blocks (above pymalloc's 512 B, below glibc's mmap threshold), every
    # 64th kept: the heap's top never becomes free, so only malloc_trim can return the pages between
    blocks = [bytearray(4096) for _ in range(60_000)]
    for b in blocks:
        b[::512] = b"\x01" * 8                      # touch every page
    kept = blocks[::64]
    del blocks
    before = _rss_mib()
    assert release_freed_memory(full_collect=False) is False
    after = _rss_mib()
    assert before - after > 150, (before, after)
    assert all(b[0] == 1 for b in kept)            # what is still referenced is untouched


class _Node:
    def __init__(self) -> None:
        self.me = self                               # a cycle: reference counts never free it
        self.payload = [bytearray(4096) for _ in range(25_000)]   # ~100 MiB of heap blocks


@needs_trim
def test_cyclic_garbage_is_freed_only_by_a_full_collection() -> None:
    gc.disable()                                     # no automatic collection in between
    try:
        node = _Node()
        ref = weakref.ref(node)
        del node
        release_freed_memory(full_collect=False)
        assert ref() is not None                     # the cycle holds its 100 MiB
        before = _rss_mib()
        assert release_freed_memory(full_collect=True) is True
        assert ref() is None
        assert before - _rss_mib() > 60, before
    finally:
        gc.enable()


def test_short_of_memory_rule() -> None:
    total = 24 << 30
    assert short_of_memory(int(total * SHORT_OF_MEMORY_FRACTION) - 1, total)
    assert not short_of_memory(int(total * SHORT_OF_MEMORY_FRACTION), total)
    assert not short_of_memory(total // 2, total)
