"""Return the memory a finished stage freed to the operating system.

A run keeps its stages in one process, one after the other; each stage's peak is its own, but
what the one before it freed stays in the process's RSS unless the allocators give it back:
glibc keeps freed heap chunks (`malloc_trim` returns the whole pages among them) and pyarrow's
memory pool keeps freed buffers (`release_unused`). Measured after `kvwear simulate --policy lru`
of the 1× scale corpus (bench/scale.py): 289 MiB RSS, 192 MiB after both.

Must not: free anything still referenced (it only hands back memory no object holds), or fail a
run where the C library has no `malloc_trim` (musl, macOS): it is then a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable

import pyarrow as pa


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> None:
    """Collect garbage cycles, then hand the freed pages of pyarrow's pool and of the C heap back
    to the operating system."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
