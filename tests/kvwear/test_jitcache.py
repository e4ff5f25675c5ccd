"""Numba's kernel cache under processes that save at once (kvwear.jitcache)."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from numba.core.caching import IndexDataCacheFile

from kvwear import jitcache

PROCESSES = 4
KEYS_EACH = 25


def _saver(folder: str, who: int, start: mp.synchronize.Barrier) -> None:
    jitcache.install()
    cache = IndexDataCacheFile(cache_path=folder, filename_base="kernel-1.py311", source_stamp=(1.0, 2))
    start.wait()
    for k in range(KEYS_EACH):
        cache.save(("signature", who, k), ("code of", who, k))


def test_concurrent_saves_keep_every_signature_with_its_own_code(tmp_path: Path) -> None:
    # Four processes save 25 signatures each of one kernel, all at once: with numba's own save,
    # which picks a data file's number from an index read without a lock, signatures are lost
    # from the index or an entry names a file holding another signature's code.
    ctx = mp.get_context("fork")
    start = ctx.Barrier(PROCESSES)
    procs = [ctx.Process(target=_saver, args=(str(tmp_path), who, start)) for who in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    jitcache.install()
    cache = IndexDataCacheFile(cache_path=str(tmp_path), filename_base="kernel-1.py311", source_stamp=(1.0, 2))
    for who in range(PROCESSES):
        for k in range(KEYS_EACH):
            assert cache.load(("signature", who, k)) == ("code of", who, k)
    assert len(list(tmp_path.glob("*.nbc"))) == PROCESSES * KEYS_EACH
    assert not list(tmp_path.glob("*.tmp.*"))


KERNEL = textwrap.dedent("""
    import sys
    import numba
    import numpy as np
    from kvwear import jitcache
    jitcache.install()

    @numba.njit(cache=True)
    def twice(x):
        return x + x

    kind = sys.argv[1]
    value = {"i8": np.int64(21), "f8": np.float64(10.5), "i4": np.int32(-4), "f4": np.float32(0.25),
             "u8": np.uint64(7), "b": np.bool_(True)}[kind]
    print(kind, twice(value), len(twice.stats.cache_hits) > 0)
""")


def test_kernels_compiled_in_parallel_load_back_right(tmp_path: Path) -> None:
    # The real thing: processes compile six signatures of one cached kernel at once into a fresh
    # cache; then processes that find them all cached must load each signature's own code.
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    kinds = ["i8", "f8", "i4", "f4", "u8", "b"]
    expected = {"i8": "42", "f8": "21.0", "i4": "-8", "f4": "0.5", "u8": "14", "b": "2"}
    for round_ in ("compile", "load"):
        procs = [subprocess.Popen([sys.executable, str(script), k], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in kinds]
        for kind, p in zip(kinds, procs, strict=True):
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            got_kind, value, hit = out.split()
            assert (got_kind, value) == (kind, expected[kind])
            if round_ == "load":
                assert hit == "True", f"{kind} was compiled again, not loaded from the cache"
