"""Gandalf's written-out pricing equals its reference: `GandalfPolicy._vd_new` writes `value()`
(with `ReuseHistogram.p_reuse` and the tree walks it calls) out for the default model, for speed
(docs/results/2026-12-03-simulator-speed.md, 2026-12-05). Here every (value, D) it computes, on
generated workloads whose bounded tiers make Gandalf drop, move and displace, is compared bit
for bit with `value()` and D = value / (max(s, 1) · w) computed the reference way at the same
moment, so a change to either side that the other does not follow fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvwear.policies.base import Policy
from kvwear.policies.config import SimConfig
from kvwear.policies.gandalf import ClassKey, GandalfPolicy
from kvwear.policies.sim import simulate
from kvwear.policies.tree import Obj
from kvwear.workloads.models import get_profile
from kvwear.workloads.synthetic import generate
from tests.policies.test_gandalf_gamma import _footprint

HYBRID = ["gandalf", "gandalf:gamma=1", "gandalf:superseded_weight=0.5"]


# a dense model (no states) under the default γ = 8 moves nothing on these tiers and prices no
# drop beyond its clean copies: smaller γ make it price
@pytest.mark.parametrize(("model", "spec"), [*[("qwen3.5-27b", s) for s in HYBRID], *[("kimi-k3", s) for s in HYBRID],
                                             ("llama3-70b", "gandalf:gamma=1"), ("llama3-70b", "gandalf:gamma=0")])
def test_written_out_value_is_value(model: str, spec: str) -> None:
    table = generate("multi-round", seed=13, sessions=30, turns=6)
    prof = get_profile(model)
    fp = _footprint(table, model)
    cfg = SimConfig(dram_bytes=fp // 100, ssd_bytes=fp // 10, kv_bytes_per_token=prof.kv_bytes_per_token,
                    state_bytes=prof.state_bytes, record_requests=False, model=model)
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
