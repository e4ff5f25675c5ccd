"""The seed finding: under LRU write-back, linear-state checkpoints are most of the SSD bytes
written for a hybrid model (Kimi-K3: one 428.6 MiB state per request vs 27 KiB of KV per token),
on a synthetic multi-round chat workload and on the Mooncake conversation trace."""

from __future__ import annotations

from kvwear.policies.config import SimConfig
from kvwear.policies.sim import simulate
from kvwear.workloads.loaders import load_requests
from kvwear.workloads.models import get_profile
from kvwear.workloads.synthetic import MultiRoundConfig, generate_multi_round


def kimi(dram: float, ssd: float) -> SimConfig:
    p = get_profile("kimi-k3")
    return SimConfig(dram_bytes=int(dram), ssd_bytes=int(ssd), kv_bytes_per_token=p.kv_bytes_per_token,
                     state_bytes=p.state_bytes)


def test_linear_states_dominate_ssd_writes_multi_round() -> None:
    table = generate_multi_round(MultiRoundConfig(sessions=60, turns=12, seed=3))
    s = simulate(table, kimi(20e9, 500e9), "lru").summary
    assert s.ssd_write_bytes > 0 and s.hit_tokens > 0
    assert s.linear_share_of_ssd_write_bytes > 0.5, s
    # and a type-aware policy, which keeps states off the SSD, removes them from the writes
    ta = simulate(table, kimi(20e9, 500e9), "type-aware").summary
    assert ta.ssd_write_bytes_linear == 0


def test_linear_states_dominate_ssd_writes_mooncake(mooncake_path) -> None:
    table = load_requests(mooncake_path).table
    s = simulate(table, kimi(100e9, 1e12), "lru").summary
    assert s.hit_tokens > 0
    assert s.linear_share_of_ssd_write_bytes > 0.5, s
