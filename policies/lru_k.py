"""`lru-k`: write-aware LRU. A DRAM victim is written to SSD only if it was referenced at least K
times (its insertion counts as the first reference; counts restart when an object leaves every
tier); otherwise it is dropped. Placement and eviction order: LRU, as `lru`. K = 1 is `lru`.
Sweep: K 1–10 (the Gandalf paper's range).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.base import POLICIES, Policy, PolicyParams, param
from policies.tree import Obj


@dataclass(frozen=True)
class LruKParams(PolicyParams):
    k: int = param(2, sweep=(1, 10), help="references needed before a DRAM victim is written to SSD")

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")


@POLICIES.register("lru-k")
class LruKPolicy(Policy):
    """LRU; write a DRAM victim to SSD only if referenced ≥ K times."""

    Params = LruKParams

    def admit_to_ssd(self, obj: Obj) -> bool:
        return obj.refs >= self.params.k  # type: ignore[attr-defined]
