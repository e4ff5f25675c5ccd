"""`type-aware`: place by object kind — linear/sliding states in DRAM, full-attention KV on SSD.

New full-attention segments are written straight to SSD (cause `insert`); states live in DRAM
only and are dropped when DRAM evicts them (never written to SSD). SSD hits of full KV stage
through DRAM as always; such a DRAM copy is dropped on eviction if the SSD still has it, else
written back. LRU per tier. No parameters.
"""

from __future__ import annotations

from kvwear.policies.base import POLICIES, Policy, PolicyParams
from kvwear.policies.tree import DRAM, FULL, SSD, Obj


@POLICIES.register("type-aware")
class TypeAwarePolicy(Policy[PolicyParams]):
    """Linear states → DRAM, full-attention KV → SSD; LRU per tier."""

    def place(self, obj: Obj) -> int:
        return SSD if obj.kind == FULL else DRAM

    def admit_to_ssd(self, obj: Obj) -> bool:
        return obj.kind == FULL
