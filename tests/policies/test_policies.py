"""Each simple policy's defining behaviour, and the simulator's staging, on hand-made traces.

Bytes: kv_bytes_per_token = 1 and 16-token blocks, so one block = 16 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pytest

from kvwear.errors import KvwearError
from kvwear.policies.base import POLICIES, Policy, PolicyParams, PolicySpecError, resolve_spec
from kvwear.policies.config import SimConfig
from kvwear.policies.lru import LruPolicy
from kvwear.policies.sim import Simulator, next_use, simulate
from kvwear.policies.tree import DRAM, SSD, Segment
from tests.policies.helpers import requests_table, segments


def cfg(dram: int, ssd: int, state: int = 0, hbm: int = 0) -> SimConfig:
    return SimConfig(dram_bytes=dram, ssd_bytes=ssd, hbm_bytes=hbm, kv_bytes_per_token=1,
                     state_bytes=state, chunk_tokens=16)


def ops_list(res, col: str = "op") -> list:
    return res.ssd_ops.column(col).cast(pa.string() if col in ("op", "cause", "obj_kind")
                                        else res.ssd_ops.schema.field(col).type).to_pylist()


def seg_of(sim: Simulator, key: int) -> Segment:
    for s in segments(sim):
        if key in s.keys:
            return s
    raise AssertionError(f"key {key} not in the tree")


def run(sim: Simulator, table: pa.Table) -> None:
    for i in range(table.num_rows):
        sim.run_batch(table.slice(i, 1), i)


def test_ssd_hit_is_read_and_staged_through_dram() -> None:
    table = requests_table([(0, [1, 2, 3]), (1, [9]), (2, [1, 2, 3])])
    sim = Simulator(cfg(dram=48, ssd=1000), "lru")
    run(sim, table.slice(0, 2))
    # LRU evicted only the leaf-side block of the oldest segment, and wrote it (write-back)
    assert seg_of(sim, 3).tiers == SSD and seg_of(sim, 1).tiers == DRAM
    run_one = table.slice(2, 1)
    sim.run_batch(run_one, 2)
    assert seg_of(sim, 3).tiers == DRAM | SSD  # staged, SSD copy kept
    res = sim.finish()
    assert ops_list(res) == ["write", "read", "write"]
    assert ops_list(res, "cause") == ["dram_evict", "hit", "dram_evict"]
    r = res.requests
    assert r.column("dram_hit_tokens").to_pylist()[2] == 32
    assert r.column("ssd_hit_tokens").to_pylist()[2] == 16
    assert r.column("ssd_read_bytes").to_pylist()[2] == 16
    # evicting the staged copy later costs no write: it is clean
    assert res.summary.ssd_write_bytes == 32


def test_lru_writes_every_dram_victim_and_lru_k_only_rereferenced_ones() -> None:
    once = requests_table([(i, [10 * i + 1, 10 * i + 2]) for i in range(20)])
    lru = simulate(once, cfg(dram=64, ssd=10_000), "lru").summary
    assert lru.ssd_write_bytes == 20 * 32 - 64  # all but what DRAM still holds
    lruk = simulate(once, cfg(dram=64, ssd=10_000), "lru-k").summary
    assert lruk.ssd_write_bytes == 0 and lruk.dropped_bytes_full == 20 * 32 - 64
    twice = requests_table([(i, [10 * (i // 2) + 1, 10 * (i // 2) + 2]) for i in range(20)])
    lruk2 = simulate(twice, cfg(dram=64, ssd=10_000), "lru-k:k=2").summary
    assert lruk2.ssd_write_bytes == 10 * 32 - 64
    assert simulate(twice, cfg(dram=64, ssd=10_000), "lru-k:k=3").summary.ssd_write_bytes == 0


def test_write_through_writes_every_insert() -> None:
    rows = [(i, [1, 2, 100 + i]) for i in range(10)]
    res = simulate(requests_table(rows), cfg(dram=1000, ssd=100_000, state=7), "write-through")
    # inserted: blocks 1, 2 once, one new block per request, one state per request
    assert res.summary.ssd_write_bytes == 16 * (2 + 10) + 7 * 10
    assert set(ops_list(res, "cause")) == {"insert"}


def test_type_aware_places_full_on_ssd_and_never_writes_states() -> None:
    rows = [(i, [1, 2, 100 + i]) for i in range(30)]
    res = simulate(requests_table(rows), cfg(dram=40, ssd=100_000, state=20), "type-aware")
    s = res.summary
    assert s.ssd_write_bytes_linear == 0 and s.dropped_bytes_linear > 0
    assert s.ssd_write_bytes_full == 16 * (2 + 30)
    assert set(ops_list(res, "cause")) <= {"insert", "hit"}


def test_fifo_does_not_refresh_on_hit_lru_does() -> None:
    table = requests_table([(0, [1]), (1, [2]), (2, [1]), (3, [3])])
    fifo = simulate(table, cfg(dram=32, ssd=1000), "fifo")
    lru = simulate(table, cfg(dram=32, ssd=1000), "lru")
    # object ids: key 1 → 0, key 2 → 1; FIFO evicts the first in (1), LRU the least recent (2)
    assert ops_list(fifo, "obj_id") == [0]
    assert ops_list(lru, "obj_id") == [1]


def test_dynamo_frequency_filter_and_decay() -> None:
    big = cfg(dram=10_000, ssd=10_000)
    soon = simulate(requests_table([(0, [1]), (100, [1])]), big, "dynamo")
    assert ops_list(soon) == ["write"] and ops_list(soon, "cause") == ["promote"]
    # after 600 s the count 1 decays to 0 (forgotten): the re-use counts as a first request
    late = Simulator(big, "dynamo")
    run(late, requests_table([(0, [1]), (700, [1])]))
    assert late.finish().summary.ssd_write_bytes == 0
    assert late.policy.count((0, 1)) == 1  # type: ignore[attr-defined]
    # 1 then doubled to 2 (written); once on SSD a re-use is no offload request; decay: 2 → 1
    sim = Simulator(big, "dynamo:decay_s=600")
    run(sim, requests_table([(0, [1]), (1, [1]), (2, [1]), (650, [1])]))
    assert sim.policy.count((0, 1)) == 1  # type: ignore[attr-defined]
    assert sim.finish().summary.ssd_write_objects_full == 1
    # three offload requests in a row (DRAM too small to keep it, SSD refusing nothing): 1, 2, 4
    tiny = Simulator(cfg(dram=0, ssd=0), "dynamo")
    run(tiny, requests_table([(0, [1]), (1, [1]), (2, [1])]))
    assert tiny.policy.count((0, 1)) == 4  # type: ignore[attr-defined]


def test_hotprefix_drops_refused_prefixes() -> None:
    # DRAM holds nothing: every object is a DRAM victim at once, and θ decides at the SSD door
    sim = Simulator(cfg(dram=0, ssd=10_000), "hotprefix:theta=2")
    run(sim, requests_table([(0, [1, 2])]))
    assert sim.used_bytes[SSD] == 0  # hotness 1 < θ: refused, i.e. dropped
    assert sim.policy.refused == 1  # type: ignore[attr-defined]
    run(sim, requests_table([(1, [1, 2])]))
    assert seg_of(sim, 1).tiers == SSD  # second reference: written
    # many once-referenced prefixes through a small DRAM: nothing is ever written
    once = requests_table([(i, [10 * i + 1, 10 * i + 2]) for i in range(30)])
    res = simulate(once, cfg(dram=64, ssd=10_000), "hotprefix:theta=2")
    assert res.summary.ssd_write_bytes == 0 and res.ssd_ops.num_rows == 0


def test_hybrid_hit_needs_a_state_at_the_prefix_end() -> None:
    big = cfg(dram=10_000, ssd=10_000, state=5)
    # request 2 shares [1, 2] with request 1 but request 1's state sits after block 3
    res = simulate(requests_table([(0, [1, 2, 3]), (1, [1, 2, 7]), (2, [1, 2, 3, 8])]), big, "lru")
    assert res.requests.column("hit_tokens").to_pylist() == [0, 0, 48]
    dense = simulate(requests_table([(0, [1, 2, 3]), (1, [1, 2, 7]), (2, [1, 2, 3, 8])]),
                     cfg(dram=10_000, ssd=10_000), "lru")
    assert dense.requests.column("hit_tokens").to_pylist() == [0, 32, 48]


def test_state_sits_after_the_last_full_block() -> None:
    big = cfg(dram=10_000, ssd=10_000, state=5)
    # request 0's last block is partial (6 tokens short): its state is after block 2
    table = requests_table([(0, [1, 2, 3]), (1, [1, 2, 4, 5])], partial=[6, 0])
    res = simulate(table, big, "lru")
    assert res.requests.column("hit_tokens").to_pylist() == [0, 32]


def test_streamed_batches_equal_whole_table(mooncake_path) -> None:
    from kvwear.workloads.loaders import load_requests

    table = load_requests(mooncake_path).table.slice(0, 600)
    c = SimConfig(dram_bytes=20 * 10**9, ssd_bytes=200 * 10**9, kv_bytes_per_token=27_648,
                  state_bytes=449_445_888)
    whole = simulate(table, c, "lru")
    streamed = simulate(iter(table.to_batches(max_chunksize=77)), c, "lru")
    assert whole.summary == streamed.summary
    assert whole.ssd_ops.equals(streamed.ssd_ops)
    # one 512-token block = one object of 32 chunks: chunk counts follow the hashed tokens
    hashed = table.column("hashed_tokens").to_pylist()
    assert whole.summary.chunks == sum(-(-h // 16) for h in hashed)


def test_next_use_prepass() -> None:
    t = requests_table([(0, [1, 2]), (1, [1, 3]), (2, [2]), (3, [1])])
    assert next_use(t).tolist() == [1, 2, 3, 1 << 62, 1 << 62, 1 << 62]


def test_policy_specs() -> None:
    spec = resolve_spec("lru-k:k=3")
    assert spec.params.k == 3 and spec.label == "lru-k,k=3"  # type: ignore[attr-defined]
    assert resolve_spec("lru-k").label == "lru-k"
    assert resolve_spec("dynamo:decay_s=60").params.decay_s == 60.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(("spec", "error", "says"), [
    ("lru-k:q=3", PolicySpecError, "unknown parameter 'q'; valid: k"),
    ("lru-k:k=2.5", PolicySpecError, "expected an integer, got .2.5."),
    ("lru-k:k=0", PolicySpecError, r"'k': must be in \[1, 1,000\], got 0"),
    ("lru-k:k", PolicySpecError, "not key=value"),
    ("nosuch", KeyError, r"valid: .*lru-k"),
    ("gandalf:gama=8", PolicySpecError, "valid: gamma"),
    ("wa:key=user", PolicySpecError, "must be one of"),
    ("gandalf:gamma=-1", PolicySpecError, r"'gamma': must be in \[0, 1,000,000\], got -1"),
])
def test_bad_policy_specs_are_refused(spec: str, error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        resolve_spec(spec)


class _OracleLru(LruPolicy):
    """LRU that asks for the future: exercises the next-access pre-pass."""

    needs_future = True


def test_oracle_next_access_is_the_truth() -> None:
    from kvwear.workloads.synthetic import MultiRoundConfig, generate_multi_round

    if "test-oracle-lru" not in POLICIES:
        POLICIES.add("test-oracle-lru", _OracleLru)
    table = generate_multi_round(MultiRoundConfig(sessions=6, turns=5, seed=2, system_prompts=2))
    keys = table.column("hash_ids").to_pylist()
    sim = Simulator(cfg(dram=3000, ssd=6000, state=50), "test-oracle-lru")
    sim.set_future(table)

    def truth(key: int, after: int) -> int:
        return next((r for r in range(after + 1, len(keys)) if key in keys[r]), 1 << 62)

    checked = 0
    for i in range(table.num_rows):
        sim.run_batch(table.slice(i, 1), i)
        for s in segments(sim):
            if s.last_seq == i and s.tiers:
                assert s.next_seq == truth(s.keys[0], i)
                assert sim.next_seqs(s) == [truth(k, i) for k in s.keys]
                checked += 1
            st = s.state
            if st is not None and st.last_seq == i and st.tiers:
                assert st.next_seq == truth(s.keys[-1], i)
    assert checked > 50


def test_ops_sink_streams_the_same_rows() -> None:
    rows = [(i, [1, 2, 100 + i]) for i in range(40)]
    table = requests_table(rows)
    kept = simulate(table, cfg(dram=64, ssd=200, state=9), "lru")
    got: list[pa.Table] = []
    streamed = simulate(iter(table.to_batches(max_chunksize=7)), cfg(dram=64, ssd=200, state=9), "lru",
                        ops_sink=got.append)
    assert streamed.ssd_ops.num_rows == 0 and len(got) > 1
    assert pa.concat_tables(got).equals(kept.ssd_ops)


def test_bad_requests_are_named() -> None:
    from kvwear.errors import KvwearError

    unsorted = requests_table([(5, [1]), (1, [2])])
    with pytest.raises(KvwearError, match=r"request 1: arrival_s 1\.0 is before"):
        simulate(unsorted, cfg(100, 100), "lru")
    odd = requests_table([(0, [1, 2])], block_tokens=24)
    with pytest.raises(KvwearError, match="request 0: block_tokens 24 is not a multiple"):
        simulate(odd, cfg(100, 100), "lru")
    with pytest.raises(KvwearError, match="dram_bytes must be >= 0"):
        cfg(-1, 100)


def test_blocks_smaller_than_the_chunk_are_grouped() -> None:
    # 8-token source blocks at 16-token chunks: two source blocks make one simulator block
    table = requests_table([(0, [1, 2, 3, 4]), (1, [1, 2, 3, 4, 5, 6])], block_tokens=8)
    res = simulate(table, cfg(10_000, 10_000), "lru")
    assert res.requests.column("hit_tokens").to_pylist() == [0, 32]
    assert res.summary.chunks == 2 + 3


def test_timeline_counts_each_requests_ssd_traffic_in_its_own_interval() -> None:
    # write-through writes every new block at insert: 1 block at t=0, 2 blocks at t=10
    table = requests_table([(0.0, [1]), (10.0, [2, 3])])
    config = SimConfig(dram_bytes=10**6, ssd_bytes=10**6, kv_bytes_per_token=1, interval_s=5.0)
    tl = simulate(table, config, "write-through").timeline
    assert tl.column("interval_start_s").to_pylist() == [0.0, 10.0]
    assert tl.column("requests").to_pylist() == [1, 1]
    assert tl.column("ssd_write_bytes_full").to_pylist() == [16, 32]
    assert tl.column("ssd_used_bytes").to_pylist() == [16, 48]


def test_hit_chunks_are_capped_like_hit_tokens() -> None:
    # a cached full 32-token block hit by a request that hashes only 8 tokens of it: the hit is
    # all 3 chunks the request has (2 + 1 partial), not the cached blocks' 4
    table = requests_table([(0.0, [1, 2]), (1.0, [1, 2])], block_tokens=32, partial=[0, 24])
    res = simulate(table, SimConfig(dram_bytes=10**6, ssd_bytes=0, kv_bytes_per_token=1), "lru")
    s = res.summary
    assert (s.chunks, s.hit_chunks, s.hit_tokens) == (4 + 3, 3, 40)
    assert 0.0 <= s.chunk_miss_ratio <= 1.0


def test_objects_too_big_for_dram_count_as_dropped_unless_written() -> None:
    # DRAM of 0 bytes: every new block is a DRAM victim at once; lru-k (k=2) drops blocks seen
    # once, lru writes them, and with no room on the SSD either, lru drops them too
    once = requests_table([(i, [10 * i + 1, 10 * i + 2]) for i in range(5)])
    lruk = simulate(once, cfg(dram=0, ssd=10_000), "lru-k").summary
    assert lruk.ssd_write_bytes == 0 and lruk.dropped_bytes_full == 5 * 32
    lru = simulate(once, cfg(dram=0, ssd=10_000), "lru").summary
    assert lru.ssd_write_bytes == 5 * 32 and lru.dropped_bytes_full == 0
    assert simulate(once, cfg(dram=0, ssd=0), "lru").summary.dropped_bytes_full == 5 * 32


@pytest.mark.parametrize(("field", "value"), [("gpu_usd_per_hour", 0.0), ("gpu_usd_per_hour", -1.0),
                                              ("ssd_usd_per_tb_written", -0.01)])
def test_prices_are_checked(field: str, value: float) -> None:
    # a free GPU made meritkv divide by zero; negative prices gave negative costs
    with pytest.raises(KvwearError, match=field):
        SimConfig(dram_bytes=1, ssd_bytes=1, kv_bytes_per_token=1, **{field: value})
    SimConfig(dram_bytes=1, ssd_bytes=1, kv_bytes_per_token=1, ssd_usd_per_tb_written=0.0)


def test_ids_beyond_the_hashed_tokens_are_ignored() -> None:
    # AIPerf/Qwen rows may list more ids than their input has blocks (hashed_tokens =
    # min(input, B·ids)): the extra ids cover nothing, as in kvwear.workloads.blocks (was: an error)
    table = requests_table([(0.0, [1, 2, 3, 4]), (1.0, [1, 2, 3, 4])])
    hashed = pa.array([32, 40], pa.int64())  # blocks 1, 2; then 1, 2 and 8 tokens of 3
    table = table.set_column(table.schema.get_field_index("hashed_tokens"), "hashed_tokens", hashed)
    for state in (0, 7):
        res = simulate(table, cfg(dram=10_000, ssd=0, state=state), "lru")
        assert res.requests.column("hit_tokens").to_pylist() == [0, 32]
        assert res.summary.chunks == 2 + 3
        # blocks 1-3 and one state after block 2 (both requests end their full blocks there);
        # block 4 never cached
        assert res.summary.dram_used_bytes_end == 3 * 16 + state


def test_policy_params_come_from_the_generic_argument() -> None:
    from kvwear.policies.lru_k import LruKParams

    assert POLICIES.get("lru-k").Params is LruKParams
    assert POLICIES.get("lru").Params is PolicyParams

    @dataclass(frozen=True)
    class OtherParams(PolicyParams):
        x: int = 1

    with pytest.raises(TypeError, match="Params = PolicyParams but the class is Policy\\[OtherParams\\]"):
        class _Mismatched(Policy[OtherParams]):
            Params = PolicyParams
