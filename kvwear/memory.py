"""Return the memory a finished stage freed to the operating system.

A run keeps its stages in one process, one after the other; each stage's peak is its own, but
what the one before it freed stays in the process's RSS unless the allocators give it back:
glibc keeps freed heap chunks (`malloc_trim` returns the whole pages among them) and pyarrow's
memory pool keeps freed buffers (`release_unused`). Measured after `kvwear simulate --policy lru`
of the 1× scale corpus (bench/scale.py): 289 MiB RSS, 192 MiB after both.

A full garbage collection is not part of that by default: it walks every object the process
tracks, not the garbage, and the objects freed at a stage's end are freed by their reference
counts already. Measured on the default `kvwear run` (22 stages, ~230 k tracked objects): 0.11 s
per collection, 2.5 of the run's 25 CPU s, and at most 7 MiB of RSS handed back beyond what the
two trims give (0 MiB after 19 of the 22 stages). It runs only when memory is short: the machine's
available memory below `SHORT_OF_MEMORY_FRACTION` of its total, where a few MiB of cyclic garbage
can be the difference.

Must not: free anything still referenced (it only hands back memory no object holds), or fail a
run where the C library has no `malloc_trim` (musl, macOS): it is then a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable

import psutil
import pyarrow as pa

#: a full collection runs when available memory is below this fraction of the machine's total
SHORT_OF_MEMORY_FRACTION = 0.25


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def short_of_memory(available_bytes: int, total_bytes: int) -> bool:
    """Whether the machine is short of memory: less than SHORT_OF_MEMORY_FRACTION of it available."""
    return available_bytes < SHORT_OF_MEMORY_FRACTION * total_bytes


def _trim() -> None:
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def release_freed_memory(full_collect: bool | None = None) -> bool:
    """Hand the freed pages of pyarrow's pool and of the C heap back to the operating system, after
    a full garbage collection when `full_collect` (None: when the machine is short of memory, see
    the module docstring). Returns whether it collected."""
    if full_collect is None:
        vm = psutil.virtual_memory()
        full_collect = short_of_memory(vm.available, vm.total)
    if full_collect:
        gc.collect()
    _trim()
    return full_collect
