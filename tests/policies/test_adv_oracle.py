"""The offline oracle (`belady`) against the online policies, on small random workloads.

Property (hypothesis): the hit-maximizing oracle (`belady:gamma=0`, which writes to SSD only
objects accessed again), given as its SSD write budget the bytes an online policy wrote, hits
at least as many tokens as that policy. It holds where MIN's premise holds: one block per
request, so no hit depends on another block being cached. Under the prefix-tree hit rule it
does not hold in general (`test_oracle_dominates_lru_on_a_prefix_workload`, strict xfail, with
the measured failure rates).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.sim import SimConfig, simulate
from workloads.schema import REQUESTS

BLOCK = 16
ONLINE = ["lru", "wa", "marconi", "meritkv", "gandalf:budget=fixed,gamma=0", "gandalf:budget=fixed",
          "fifo", "write-through", "belady:mode=min"]


def table(reqs: list[list[int]]) -> pa.Table:
    rows = [dict(request_id=i, session_id=None, parent_id=None, stream_id="main", turn=None,
                 arrival_s=float(i), input_tokens=len(ids) * BLOCK, output_tokens=1,
                 category="default", model=None, block_tokens=BLOCK, hash_ns=0, hash_ids=ids,
                 hashed_tokens=len(ids) * BLOCK) for i, ids in enumerate(reqs)]
    return REQUESTS.conform(pa.Table.from_pylist(rows))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.lists(st.integers(0, 9), min_size=1, max_size=60), dram_blocks=st.integers(1, 4),
       ssd_blocks=st.integers(0, 6))
def test_oracle_hits_at_least_online_at_no_more_writes(keys: list[int], dram_blocks: int,
                                                        ssd_blocks: int) -> None:
    """One block per request (no prefix dependency), dense model: for every online policy, the
    oracle given that policy's SSD bytes as its write budget hits at least as much."""
    cfg = SimConfig(dram_bytes=dram_blocks * BLOCK, ssd_bytes=ssd_blocks * BLOCK, kv_bytes_per_token=1,
                    chunk_tokens=BLOCK)
    t = table([[k] for k in keys])
    for spec in ONLINE:
        s = simulate(t, cfg, spec).summary
        oracle = simulate(t, cfg, f"belady:gamma=0,max_write_bytes={s.ssd_write_bytes}").summary
        assert oracle.ssd_write_bytes <= s.ssd_write_bytes, (spec, oracle.ssd_write_bytes, s.ssd_write_bytes)
        assert oracle.hit_tokens >= s.hit_tokens, (spec, oracle.hit_tokens, s.hit_tokens)


@pytest.mark.xfail(strict=True, reason=(
    "known limit of the per-object MIN oracle under the prefix-tree hit rule: a block counts as "
    "a hit only if its whole prefix is cached and SSD hits are staged into DRAM (duplicated), so "
    "MIN's per-object choices can leave a path with a hole. On random small prefix workloads "
    "(300 draws, oracle budget = the online policy's bytes) the oracle hit fewer tokens than LRU "
    "in 62/300 dense cases and in 85/300 hybrid ones (39/300 with supersede=false); worst: 25% "
    "(dense) and 35% (hybrid) of the hashed tokens"))
def test_oracle_dominates_lru_on_a_prefix_workload() -> None:
    # the smallest case found: 1 block of DRAM, 2 of SSD; a path read, cut back, then extended
    reqs = [[1000, 1], [1000], [1000, 1, 8], [1000, 1, 8]]
    cfg = SimConfig(dram_bytes=BLOCK, ssd_bytes=2 * BLOCK, kv_bytes_per_token=1, chunk_tokens=BLOCK)
    lru = simulate(table(reqs), cfg, "lru").summary
    oracle = simulate(table(reqs), cfg, f"belady:gamma=0,max_write_bytes={lru.ssd_write_bytes}").summary
    assert oracle.hit_tokens >= lru.hit_tokens  # measured: oracle 80, LRU 96
