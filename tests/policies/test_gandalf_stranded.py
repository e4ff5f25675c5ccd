"""Gandalf's `stranded` reading (issue #29): what lies below a prefix gap, kept exactly.

A segment that leaves every tier while objects below it stay resident leaves a gap: no hit can
reach them until a request recreates it. Under `stranded="zero"` the policy keeps that set
(`GandalfPolicy.stranded`, its SSD part and their bytes) incrementally; here it is checked,
before every request, against a walk of the whole tree, on a generated workload whose bounded
SSD makes gaps (the walk asks, per resident object, whether a segment above it is resident
nowhere: `gandalf._gap_above`, a plain walk to the root). Under the default ("priced") the
set stays empty and nothing changes.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvwear.policies.base import Policy, RequestInfo
from kvwear.policies.gandalf import GandalfPolicy, _gap_above
from kvwear.policies.sim import simulate
from kvwear.policies.tree import SSD
from tests.policies.helpers import objects
from tests.policies.test_gandalf_gamma import bounded_tiers


@pytest.mark.parametrize("stranded", ["zero", "priced"])
def test_stranded_set_is_what_lies_below_a_gap(stranded: str) -> None:
    table, cfg = bounded_tiers("qwen3.5-27b")
    seen = {"checks": 0, "most": 0}

    def setup(policy: Policy[Any]) -> None:
        assert isinstance(policy, GandalfPolicy)
        begin = policy.begin_request

        def check(req: RequestInfo) -> None:
            expect = {o for o in objects(policy.ctx) if o.tiers and _gap_above(o)}  # type: ignore[arg-type]
            seen["checks"] += 1
            seen["most"] = max(seen["most"], len(expect))
            if stranded == "zero":
                assert set(policy.stranded) == expect, req.seq
                assert set(policy.stranded_ssd) == {o for o in expect if o.tiers & SSD}, req.seq
                assert policy.stranded_ssd_bytes == sum(o.nbytes for o in policy.stranded_ssd), req.seq
            else:
                assert not policy.stranded and not policy.stranded_ssd and policy.stranded_ssd_bytes == 0
            begin(req)

        policy.begin_request = check  # type: ignore[method-assign]

    simulate(table, cfg, f"gandalf:gamma=1,stranded={stranded}", setup=setup)
    assert seen["checks"] == table.num_rows
    assert seen["most"] > 0  # the tiers do make gaps
