"""The offline oracle (`belady`) against the online policies, on small random workloads.

Property (hypothesis): the hit-maximizing oracle (`belady:gamma=0`, which writes to SSD only
objects accessed again) hits at least as many tokens as every online policy where MIN's premise
holds: one block per request, so no hit depends on another block being cached. Given an online
policy's SSD bytes as its write budget it never writes more, but it does not always hit as much
(`test_budgeted_oracle_dominates_gandalf`, strict xfail); under the prefix-tree hit rule the
hit property does not hold in general either (`test_oracle_dominates_lru_on_a_prefix_workload`,
strict xfail, with the measured failure rates).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvwear.policies.config import SimConfig
from kvwear.policies.sim import simulate
from kvwear.workloads.schema import REQUESTS

BLOCK = 16
ONLINE = ["lru", "wa", "marconi:active_params=1e9,attn_flops_per_token=1e6",
          "meritkv", "gandalf:budget=fixed,gamma=0", "gandalf:budget=fixed",
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
def test_oracle_hits_at_least_every_online_policy(keys: list[int], dram_blocks: int, ssd_blocks: int) -> None:
    """One block per request (no prefix dependency), dense model: the hit-maximizing oracle
    (gamma=0, no write budget) hits at least as many tokens as every online policy. (Checked on
    2,000 draws when written; it needs the oracle to treat an SSD copy of a DRAM-resident object
    as the SSD's first victim.)"""
    cfg = SimConfig(dram_bytes=dram_blocks * BLOCK, ssd_bytes=ssd_blocks * BLOCK, kv_bytes_per_token=1,
                    chunk_tokens=BLOCK)
    t = table([[k] for k in keys])
    oracle = simulate(t, cfg, "belady:gamma=0,dram_copy=first").summary
    for spec in ONLINE:
        s = simulate(t, cfg, spec).summary
        assert oracle.hit_tokens >= s.hit_tokens, (spec, oracle.hit_tokens, s.hit_tokens)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.lists(st.integers(0, 9), min_size=1, max_size=60), dram_blocks=st.integers(1, 4),
       ssd_blocks=st.integers(0, 6))
def test_oracle_write_budget_is_kept(keys: list[int], dram_blocks: int, ssd_blocks: int) -> None:
    """Given an online policy's SSD bytes as its budget, the oracle never writes more."""
    cfg = SimConfig(dram_bytes=dram_blocks * BLOCK, ssd_bytes=ssd_blocks * BLOCK, kv_bytes_per_token=1,
                    chunk_tokens=BLOCK)
    t = table([[k] for k in keys])
    for spec in ("lru", "gandalf:budget=fixed,gamma=0"):
        s = simulate(t, cfg, spec).summary
        oracle = simulate(t, cfg, f"belady:gamma=0,max_write_bytes={s.ssd_write_bytes}").summary
        assert oracle.ssd_write_bytes <= s.ssd_write_bytes


@pytest.mark.xfail(strict=True, reason=(
    "known limit of MIN under a write budget: with DRAM 1 block and SSD 1 block, requests "
    "0,1,0,1,1,0 and a budget of one write, MIN evicts (and writes) the block needed furthest (1), "
    "which then needs a second write; writing 0 instead serves 4 hits with one write. Choosing "
    "which objects to write under a budget is a knapsack-like problem that per-object MIN does not solve"))
def test_budgeted_oracle_dominates_gandalf() -> None:
    cfg = SimConfig(dram_bytes=BLOCK, ssd_bytes=BLOCK, kv_bytes_per_token=1, chunk_tokens=BLOCK)
    t = table([[k] for k in [0, 1, 0, 1, 1, 0]])
    g = simulate(t, cfg, "gandalf:budget=fixed,gamma=0").summary
    oracle = simulate(t, cfg, f"belady:gamma=0,max_write_bytes={g.ssd_write_bytes}").summary
    assert oracle.hit_tokens >= g.hit_tokens  # measured: oracle 48, gandalf 64


@pytest.mark.xfail(strict=True, reason=(
    "known limit of the per-object MIN oracle under the prefix-tree hit rule: a block counts as "
    "a hit only if its whole prefix is cached, so MIN's per-object choices can leave a path with a "
    "hole. On 300 random small prefix workloads per model kind (oracle budget = LRU's bytes) the "
    "oracle hit fewer tokens than LRU in 1 dense case (by 2.9% of the hashed tokens) and in no "
    "hybrid one; before SSD copies of DRAM-resident objects were made the SSD's first victims, "
    "62/300 and 85/300"))
def test_oracle_dominates_lru_on_a_prefix_workload() -> None:
    # a case found by hypothesis: DRAM 3 blocks, SSD 1; two paths alternate, then the first returns
    reqs = [[1000, 1, 2], [1000, 3], [1000, 4], [1000, 3], [1000, 4], [1000, 1, 2]]
    cfg = SimConfig(dram_bytes=3 * BLOCK, ssd_bytes=BLOCK, kv_bytes_per_token=1, chunk_tokens=BLOCK)
    lru = simulate(table(reqs), cfg, "lru").summary
    oracle = simulate(table(reqs), cfg, "belady:gamma=0,dram_copy=first").summary
    assert oracle.hit_tokens >= lru.hit_tokens  # measured: oracle 112, LRU 128
