"""`dynamo`: NVIDIA Dynamo KVBM's frequency filter in front of a write-through SSD tier.

Every *offload request* of an object — its insertion, and every later reference while it has no
SSD copy — updates a per-block count: 1 on the first request, doubled on each repeat. The object
is written to SSD (write-through: at insertion, cause `insert`, or on the re-use, cause
`promote`) iff its count is ≥ `min_frequency` (default 2: the second request within the decay
horizon). Every `decay_s` seconds of simulated time all counts drop by 1 (zeros are forgotten, so
memory stays bounded). Counts are kept per block key and survive eviction; a segment passes iff
all its blocks pass (the least frequent block decides). DRAM victims are never written (a
write-through tier does not write on eviction). LRU per tier.

Defaults are KVBM's (2 and 600 s). Sweep ranges (our choice: the seed papers run Dynamo at its
defaults only): min_frequency 1–8, decay_s 60–3600 s.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwear.policies.base import POLICIES, YEAR_S, Policy, PolicyParams, RequestInfo, SimContext, obj_keys, param
from kvwear.policies.tree import DRAM, SSD, Obj


@dataclass(frozen=True)
class DynamoParams(PolicyParams):
    min_frequency: int = param(2, sweep=(1, 8), help="offload to SSD iff the count reaches this", valid=(1, 10**6))
    decay_s: float = param(600.0, sweep=(60.0, 3600.0), help="all counts drop by 1 this often",
                           valid=(0.0, YEAR_S), above=True)

    def __post_init__(self) -> None:
        if self.min_frequency < 1 or self.decay_s <= 0:
            raise ValueError("min_frequency must be >= 1 and decay_s > 0")


@POLICIES.register("dynamo")
class DynamoPolicy(Policy[DynamoParams]):
    """KVBM frequency filter (1, doubled on repeat, offload iff ≥ 2, −1 every 600 s); write-through."""

    def __init__(self, params: DynamoParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        self.counts: dict[tuple[int, int], int] = {}
        self.next_decay_s: float | None = None

    def begin_request(self, req: RequestInfo) -> None:
        if self.next_decay_s is None:
            self.next_decay_s = req.arrival_s + self.p.decay_s
        while req.arrival_s >= self.next_decay_s:
            self.counts = {k: c - 1 for k, c in self.counts.items() if c > 1}
            self.next_decay_s += self.p.decay_s

    def offload_request(self, obj: Obj) -> bool:
        """Count one offload request of `obj`; True iff it may go to SSD."""
        counts = self.counts
        lowest = None
        for k in obj_keys(obj):
            c = counts.get(k)
            c = 1 if c is None else c * 2
            counts[k] = c
            if lowest is None or c < lowest:
                lowest = c
        return lowest is not None and lowest >= self.p.min_frequency

    def count(self, key: tuple[int, int]) -> int:
        return self.counts.get(key, 0)

    def place(self, obj: Obj) -> int:
        return DRAM | SSD if self.offload_request(obj) else DRAM

    def touched(self, obj: Obj) -> None:
        super().touched(obj)
        if not obj.tiers & SSD and self.offload_request(obj):
            self.ctx.write_to_ssd(obj)

    def admit_to_ssd(self, obj: Obj) -> bool:
        return False
