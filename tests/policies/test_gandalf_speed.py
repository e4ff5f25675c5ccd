"""Gandalf's written-out pricing equals its reference: `GandalfPolicy._vd_new` writes `value()`
(the tree walks it calls; `ReuseHistogram.p_reuse` is called, not copied) out for the default model, for speed
(docs/results/2026-12-03-simulator-speed.md, 2026-12-05). Here every (value, D) it computes, on
generated workloads whose bounded tiers make Gandalf drop, move and displace, is compared bit
for bit with `value()` and D = value / (max(s, 1) · w) computed the reference way at the same
moment, so a change to either side that the other does not follow fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvwear.policies.base import Policy
from kvwear.policies.gandalf import ClassKey, GandalfPolicy
from kvwear.policies.sim import simulate
from kvwear.policies.tree import Obj
from tests.policies.test_gandalf_gamma import bounded_tiers

HYBRID = ["gandalf", "gandalf:gamma=1", "gandalf:superseded_weight=0.5"]


# a dense model (no states) under the default γ = 8 moves nothing on these tiers and prices no
# drop beyond its clean copies: smaller γ make it price
@pytest.mark.parametrize(("model", "spec"), [*[("qwen3.5-27b", s) for s in HYBRID], *[("kimi-k3", s) for s in HYBRID],
                                             ("llama3-70b", "gandalf:gamma=1"), ("llama3-70b", "gandalf:gamma=0")])
def test_written_out_value_is_value(model: str, spec: str) -> None:
    table, cfg = bounded_tiers(model)
    seen = {"calls": 0, "zero": 0}

    def setup(policy: Policy[Any]) -> None:
        assert isinstance(policy, GandalfPolicy)
        assert policy._value_inline
        fast = policy._vd_new

        def check(obj: Obj, key: ClassKey) -> tuple[float, float]:
            # the reference first: value() creates a missing class histogram as _vd_new would
            v = policy.value(obj, key)
            d = v / (max(obj.nbytes, 1) * policy._idle_s(obj))
            got = fast(obj, key)
            assert (got[0].hex(), got[1].hex()) == (v.hex(), d.hex()), (obj, key)
            seen["calls"] += 1
            seen["zero"] += v == 0.0
            return got

        policy._vd_new = check  # type: ignore[method-assign]

    simulate(table, cfg, spec, setup=setup)
    assert seen["calls"] > 100 and seen["calls"] > seen["zero"]  # priced, and not only worthless objects
