"""Flat validation mode equals libCacheSim (LRU, FIFO, Belady) on the flattened Mooncake trace.

The first 1,500 Mooncake conversation requests at 16-token chunks (1.3 M chunk accesses, 958 k
distinct chunks) are written as a libCacheSim oracleGeneral trace and replayed by libCacheSim's C
simulator and by `kvwear.policies.flat` at several capacities; hit counts must be identical.
"""

from __future__ import annotations

import libcachesim as lcs
import numpy as np
import pytest

from kvwear.policies.flat import flatten_chunks, next_access, oracle_general, simulate_flat
from kvwear.workloads.loaders import load_requests

LCS = {"lru": lcs.LRU, "fifo": lcs.FIFO, "belady": lcs.Belady}


@pytest.fixture(scope="module")
def mooncake_flat(mooncake_path, tmp_path_factory) -> tuple[np.ndarray, str]:
    table = load_requests(mooncake_path).table.slice(0, 1500)
    ids = flatten_chunks(table, 16)
    path = tmp_path_factory.mktemp("lcs") / "mooncake.oracleGeneral.bin"
    oracle_general(ids).tofile(path)
    return ids, str(path)


def lcs_hits(path: str, policy: str, capacity: int, n: int) -> int:
    reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = LCS[policy](capacity).process_trace(reader)
    return n - round(miss_ratio * n)


@pytest.mark.parametrize("policy", ["lru", "fifo", "belady"])
@pytest.mark.parametrize("capacity", [500, 20_000, 300_000])
def test_flat_equals_libcachesim(mooncake_flat, policy: str, capacity: int) -> None:
    ids, path = mooncake_flat
    ours = simulate_flat(ids, capacity, policy)
    assert ours.accesses == len(ids)
    assert ours.hits == lcs_hits(path, policy, capacity, len(ids))
    assert ours.hits > 0


def test_flatten_counts_chunks(mooncake_path) -> None:
    table = load_requests(mooncake_path).table.slice(0, 50)
    ids = flatten_chunks(table, 16)
    hashed = table.column("hashed_tokens").to_pylist()
    assert len(ids) == sum(-(-h // 16) for h in hashed)
    # the shared first 512-token block (hash id 0) is the same 32 chunks in every request
    assert len(set(ids[:32].tolist()) & set(ids[-(-hashed[0] // 16):][:32].tolist())) == 32


def test_next_access_and_min_beats_lru() -> None:
    ids = np.array([1, 2, 3, 1, 2, 4, 1, 3])
    assert next_access(ids).tolist() == [3, 4, 7, 6, -1, -1, -1, -1]
    for cap in (1, 2, 3):
        assert simulate_flat(ids, cap, "belady").hits >= simulate_flat(ids, cap, "lru").hits
