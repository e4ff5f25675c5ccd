"""`lru`: write-back LRU, the baseline. New objects go to DRAM; every DRAM victim without an SSD
copy is written to SSD; each tier evicts its least recently used (or least recently entered)
object. No parameters. All the behaviour is the `Policy` base class's default.
"""

from __future__ import annotations

from kvwear.policies.base import POLICIES, Policy, PolicyParams


@POLICIES.register("lru")
class LruPolicy(Policy[PolicyParams]):
    """LRU write-back: every DRAM eviction is written to SSD."""
