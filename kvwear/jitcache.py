"""Numba's on-disk kernel cache made safe for processes that compile at once.

kvwear compiles its kernels with `cache=True`, so a process reads what an earlier one compiled.
Numba (0.5x–0.6x) writes an entry in two steps without a lock (`IndexDataCacheFile.save`): it
reads the function's index, takes the first free data-file number, writes the index naming it,
then the data file. Two processes that save two signatures of one kernel at the same moment can
both take number 1: the index then names one signature and the file holds the other's machine
code, and the next process that loads it jumps into the wrong code (numba issue #4807; a CI run
of ours lost a `kvwear run` to SIGSEGV that way, with two test workers compiling in one checkout).
That is a sweep's situation too: a process pool or Dask workers on a fresh install compile the
same kernels in parallel.

`install()` replaces that save with one that holds an exclusive `flock` on a lock file beside the
index while it reads the index, writes the data file, and only then writes the index. Data and
index are each replaced atomically (numba writes a temporary file and renames it), so a reader,
which takes no lock, sees an index whose every entry names a complete file of that signature.
Loading is unchanged.

This module patches numba's cache and nothing else; it must not compile or configure kernels.
Every module that defines cached kernels calls `install()` before it defines them.
"""

from __future__ import annotations

import fcntl
import itertools
import os
from typing import Any

from numba.core import caching

_INSTALLED = False


def _locked_save(self: Any, key: Any, data: Any) -> None:
    # `self` is numba's IndexDataCacheFile; its private helpers are what its own save uses.
    lock_path = self._index_path + ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        overloads = self._load_index()
        data_name = overloads.get(key)
        if data_name is None:
            taken = set(overloads.values())
            data_name = next(name for name in (self._data_name(i) for i in itertools.count(1))
                             if name not in taken)
            overloads[key] = data_name
        # Data first: an index entry must never name a file that does not yet hold its code.
        self._save_data(data_name, data)
        self._save_index(overloads)
    finally:
        os.close(fd)          # closing the only descriptor releases the flock


def install() -> None:
    """Make numba's cache saves exclusive per kernel (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    caching.IndexDataCacheFile.save = _locked_save  # type: ignore[method-assign]  # numba offers no hook
    _INSTALLED = True
