"""Property tests of the tiered simulator over random prefix-sharing workloads, every simple policy.

After every request: no tier holds more than its capacity and each tier's byte count equals the
bytes of the objects resident in it; the hit equals the hit rule computed from scratch on the
block residency (longest resident prefix, and for hybrid models with a resident state at its end;
tokens attributed to the fastest tier holding each block). At the end: replaying ssd_ops as a
device would (write a new id, read/evict a resident id with the written size) never fails nor
exceeds the SSD capacity, and its byte totals equal the summary's.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvwear.policies.config import SimConfig
from kvwear.policies.sim import Simulator
from kvwear.policies.tree import DRAM, HBM, SSD
from tests.policies.helpers import block_residency, objects, requests_table

SIMPLE = ["lru", "write-through", "fifo", "type-aware", "lru-k", "lru-k:k=1", "dynamo",
          "dynamo:decay_s=5", "hotprefix", "hotprefix:theta=1"]


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[tuple[float, list[int]]], list[int], int]:
    n = draw(st.integers(1, 30))
    B = draw(st.sampled_from([16, 32]))
    rows: list[tuple[float, list[int]]] = []
    partial: list[int] = []
    reusable: list[list[int]] = []
    next_key = 1
    t = 0.0
    for _ in range(n):
        t += draw(st.sampled_from([0.0, 0.5, 3.0, 20.0]))
        keys: list[int] = []
        if reusable and draw(st.booleans()):
            base = draw(st.sampled_from(reusable))
            keys = base[: draw(st.integers(0, len(base)))]
        extra = draw(st.integers(0 if keys else 1, 5))
        keys = keys + list(range(next_key, next_key + extra))
        next_key += extra
        miss = draw(st.integers(1, B - 1)) if extra and draw(st.booleans()) else 0
        rows.append((t, keys))
        partial.append(miss)
        reusable.append(keys[:-1] if miss else keys)  # a partial last block is never extended
    return rows, partial, B


def expected_hit(keys: list[int], hashed: int, B: int, blocks: dict[int, int],
                 states: dict[int, int], hybrid: bool) -> tuple[int, dict[int, int]]:
    p = 0
    for j, k in enumerate(keys):
        if not blocks.get(k, 0):
            break
        if not hybrid or states.get(k, 0):
            p = j + 1
    per_tier = {HBM: 0, DRAM: 0, SSD: 0}
    tokens = 0
    for j in range(p):
        tok = min(B, hashed - j * B)
        tiers = blocks[keys[j]]
        top = HBM if tiers & HBM else DRAM if tiers & DRAM else SSD
        per_tier[top] += tok
        tokens += tok
    return tokens, per_tier


def check_ops(ops, ssd_capacity: int) -> tuple[int, int]:
    resident: dict[int, int] = {}
    used = 0
    written = read = 0
    last_t = -1.0
    for t, op, oid, nbytes in zip(ops.column("t_s").to_pylist(), ops.column("op").to_pylist(),
                                  ops.column("obj_id").to_pylist(), ops.column("bytes").to_pylist(),
                                  strict=True):
        assert t >= last_t
        last_t = t
        if op == "write":
            assert oid not in resident, f"object {oid} written twice without an evict"
            resident[oid] = nbytes
            used += nbytes
            written += nbytes
            assert used <= ssd_capacity
        elif op == "read":
            assert resident.get(oid) == nbytes, f"read of non-resident object {oid}"
            read += nbytes
        else:
            assert resident.pop(oid) == nbytes, f"evict of non-resident object {oid}"
            used -= nbytes
    return written, read


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wl=workloads(), policy=st.sampled_from(SIMPLE), state=st.sampled_from([0, 24, 100]),
       dram=st.integers(0, 300), ssd=st.integers(0, 600), hbm=st.sampled_from([0, 0, 40, 150]))
def test_invariants(wl, policy, state, dram, ssd, hbm) -> None:
    rows, partial, B = wl
    table = requests_table(rows, block_tokens=B, partial=partial)
    cfg = SimConfig(dram_bytes=dram, ssd_bytes=ssd, hbm_bytes=hbm, kv_bytes_per_token=1,
                    state_bytes=state, chunk_tokens=16, interval_s=10.0)
    sim = Simulator(cfg, policy)
    hashed_col = table.column("hashed_tokens").to_pylist()
    for i in range(table.num_rows):
        blocks, states = block_residency(sim)
        keys = rows[i][1]
        exp, per_tier = expected_hit(keys, hashed_col[i], B, blocks, states, state > 0)
        sim.run_batch(table.slice(i, 1), i)
        c, last = sim.acc.cols, sim.acc.chunk_rows - 1     # the row this request just filled
        assert c["hit_tokens"][last] == exp, (i, keys)
        assert (c["hbm_hit_tokens"][last], c["dram_hit_tokens"][last], c["ssd_hit_tokens"][last]) == (
            per_tier[HBM], per_tier[DRAM], per_tier[SSD])
        for tier in (HBM, DRAM, SSD):
            assert sim.used_bytes[tier] <= sim.capacity_bytes[tier]
            assert sim.used_bytes[tier] == sum(o.nbytes for o in objects(sim) if o.tiers & tier)
    res = sim.finish()
    written, read = check_ops(res.ssd_ops, ssd)
    s = res.summary
    ops = res.ssd_ops
    is_write = pc.equal(ops.column("op").cast(pa.string()), "write")
    assert written == s.ssd_write_bytes == (pc.sum(ops.filter(is_write).column("bytes")).as_py() or 0)
    assert read == s.ssd_read_bytes
    assert s.ssd_write_bytes_full + s.ssd_write_bytes_linear == s.ssd_write_bytes
    assert s.hit_tokens == sum(res.requests.column("hit_tokens").to_pylist())
    assert s.hit_tokens == s.hbm_hit_tokens + s.dram_hit_tokens + s.ssd_hit_tokens
    tl = res.timeline
    assert sum(tl.column("requests").to_pylist()) == s.requests == table.num_rows
    assert sum(tl.column("hit_tokens").to_pylist()) == s.hit_tokens
    assert (sum(tl.column("ssd_write_bytes_full").to_pylist())
            + sum(tl.column("ssd_write_bytes_linear").to_pylist())) == s.ssd_write_bytes
    # each interval holds its own requests' SSD traffic (per-request records grouped by interval)
    per_iv: dict[float, list[int]] = {}
    rq = res.requests
    for t, w, r in zip(rq.column("arrival_s").to_pylist(), rq.column("ssd_write_bytes").to_pylist(),
                       rq.column("ssd_read_bytes").to_pylist(), strict=True):
        acc = per_iv.setdefault((t // 10.0) * 10.0, [0, 0])
        acc[0] += w
        acc[1] += r
    assert per_iv == {start: [wf + wl, r] for start, wf, wl, r in zip(
        tl.column("interval_start_s").to_pylist(), tl.column("ssd_write_bytes_full").to_pylist(),
        tl.column("ssd_write_bytes_linear").to_pylist(), tl.column("ssd_read_bytes").to_pylist(),
        strict=True)}
    if policy == "type-aware":
        assert s.ssd_write_bytes_linear == 0
    if policy in ("write-through", "dynamo", "dynamo:decay_s=5"):  # never write on eviction
        assert "dram_evict" not in ops.column("cause").cast(pa.string()).to_pylist()
