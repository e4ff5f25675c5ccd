"""`write-through`: every newly computed object goes to DRAM and SSD at once.

DRAM evictions never write (the SSD already has the copy, or SSD evicted it earlier and it is
then dropped, as a write-through cache does not write on eviction). LRU per tier. No parameters.
"""

from __future__ import annotations

from kvwear.policies.base import POLICIES, Policy, PolicyParams
from kvwear.policies.tree import DRAM, SSD, Obj


@POLICIES.register("write-through")
class WriteThroughPolicy(Policy[PolicyParams]):
    """Write-through: every insert is written to SSD as well as placed in DRAM."""

    def place(self, obj: Obj) -> int:
        return DRAM | SSD

    def admit_to_ssd(self, obj: Obj) -> bool:
        return False
