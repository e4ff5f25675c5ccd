"""The oracle (`belady`) as a bound: its streamed f_x is the count the paper's rule needs, and
the hindsight dead-write filter never costs a hit (issues 11 and 16)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import belady
from policies.base import RequestInfo
from policies.sim import SimConfig, simulate
from policies.tree import Obj, Segment, State
from workloads.schema import REQUESTS

BLOCK = 16


def prefix_table(reqs: list[tuple[int, int]]) -> pa.Table:
    """Requests as (conversation, length in blocks): conversation c's ids are c·1000 + i, so ids
    are prefix-chained (an id always has the same predecessors), as in the shared traces."""
    rows = [dict(request_id=i, session_id=str(c), parent_id=None, stream_id="main", turn=None,
                 arrival_s=float(i), input_tokens=n * BLOCK, output_tokens=1, category="default",
                 model=None, block_tokens=BLOCK, hash_ns=0, hash_ids=[c * 1000 + j for j in range(n)],
                 hashed_tokens=n * BLOCK) for i, (c, n) in enumerate(reqs)]
    return REQUESTS.conform(pa.Table.from_pylist(rows))


workload = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8)), min_size=1, max_size=40)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(reqs=workload, dram=st.integers(1, 12), ssd=st.integers(0, 24),
       spec=st.sampled_from(["belady:gamma=0", "belady:gamma=4,ssd_evict=fewest", "belady:gamma=64"]))
def test_streamed_future_hits_count_the_later_requests(reqs: list[tuple[int, int]], dram: int, ssd: int,
                                                       spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the start of every request, the f_x of every resident object (`ctx.future_refs`, kept
    from the last request that referenced it) is the number of later requests referencing its
    first block (a state: its position) — what a sort of the whole table gave before issue 16 —
    states passed over by a deeper hit included."""
    t = prefix_table(reqs)
    later: dict[int, list[int]] = {}
    for row, (c, n) in enumerate(reqs):
        for j in range(n):
            later.setdefault(c * 1000 + j, []).append(row)
    seen: list[tuple[int, int]] = []

    def check(self: belady.BeladyPolicy, req: RequestInfo) -> None:
        for h in self.heaps.values():
            for obj in list(h._live):
                key = obj.keys[0] if isinstance(obj, Segment) else as_state(obj).seg.keys[-1]
                seen.append((self.future_hits(obj), sum(r > self.ctx.seq for r in later[key])))

    monkeypatch.setattr(belady.BeladyPolicy, "begin_request", check)
    cfg = SimConfig(dram_bytes=dram * BLOCK * 8, ssd_bytes=ssd * BLOCK * 8, kv_bytes_per_token=8,
                    state_bytes=3 * BLOCK * 8, chunk_tokens=BLOCK)
    simulate(t, cfg, spec)
    assert all(g == tr for g, tr in seen), [p for p in seen if p[0] != p[1]][:5]


def as_state(obj: Obj) -> State:
    assert isinstance(obj, State)
    return obj
