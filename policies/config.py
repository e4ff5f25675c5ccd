"""The simulation's configuration record: tier capacities, model sizes, speeds and prices.

Policies read it through their context, the metrics price misses and writes with it, the simulator
is built from it; it imports none of them. It must hold no behaviour beyond validating its values.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwear.errors import KvwearError


@dataclass(frozen=True)
class SimConfig:
    """Tier capacities, model sizes, speeds and prices of one simulation."""

    dram_bytes: int
    ssd_bytes: int
    kv_bytes_per_token: int
    state_bytes: int = 0                 # one linear/sliding checkpoint; 0 = dense model
    hbm_bytes: int = 0                   # 0 = no HBM tier
    chunk_tokens: int = 16               # S
    ssd_read_bytes_per_s: float = 10e9
    dram_to_hbm_bytes_per_s: float = 50e9
    recompute_tokens_per_s: float = 60_000.0
    # the GPUs doing the recompute: an 8-GPU node at $2.5 per GPU-hour, whose prefill runs at
    # recompute_tokens_per_s (60k tokens/s ≈ 7.5k per GPU for a ~30B-active model). With the wear
    # price below, one Kimi-K3 token costs 67× more to recompute than to write (Qwen3.5-27B: 28×),
    # so Gandalf's γ spans 0..64 (README "Gandalf"); one GPU at $2.5 made γ > 8 write nothing
    gpu_usd_per_hour: float = 20.0
    ssd_usd_per_tb_written: float = 0.05  # drive price / TBW: $700 / (7.68 TB·1 DWPD·365·5)
    interval_s: float = 600.0            # timeline interval
    record_requests: bool = True
    model: str = ""                      # label only
    # the model profile's prefill compute (kvwear.workloads.models; 0 = unknown): marconi's FLOPs model
    active_params: float = 0.0
    attn_flops_per_token: float = 0.0

    @property
    def gpu_usd_per_s(self) -> float:
        return self.gpu_usd_per_hour / 3600.0

    @property
    def usd_per_recomputed_token(self) -> float:
        """GPU dollars to recompute one token's KV (the price of a miss)."""
        return self.gpu_usd_per_s / self.recompute_tokens_per_s

    @property
    def ssd_usd_per_byte_written(self) -> float:
        """SSD wear dollars per byte written (the price of a write)."""
        return self.ssd_usd_per_tb_written / 1e12

    def __post_init__(self) -> None:
        for name in ("dram_bytes", "ssd_bytes", "hbm_bytes", "state_bytes"):
            if getattr(self, name) < 0:
                raise KvwearError(f"SimConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.kv_bytes_per_token <= 0 or self.chunk_tokens <= 0:
            raise KvwearError("SimConfig: kv_bytes_per_token and chunk_tokens must be > 0")
        # prices: a GPU second must cost something (meritkv and gandalf convert wear dollars
        # into GPU time); wear may be free, never negative
        for name in ("ssd_read_bytes_per_s", "dram_to_hbm_bytes_per_s", "recompute_tokens_per_s",
                     "interval_s", "gpu_usd_per_hour"):
            if not getattr(self, name) > 0:
                raise KvwearError(f"SimConfig.{name} must be > 0, got {getattr(self, name)}")
        if not self.ssd_usd_per_tb_written >= 0:
            raise KvwearError(f"SimConfig.ssd_usd_per_tb_written must be >= 0, got {self.ssd_usd_per_tb_written}")
