"""kvwear.harness.devices.deferred_trims: segments keep every read and write in order, and after each segment
the device holds exactly the trimmed/written state the plan in its own order leaves."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvwear.errors import KvwearError
from kvwear.harness.devices.deferred_trims import segment_plan
from kvwear.harness.plan.schema import BLOCK_OPS

U = 4096


def plan_of(rows: list[tuple[str, int, int]]) -> pa.Table:
    return BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(len(rows), dtype=float), "op": [r[0] for r in rows],
        "offset_bytes": [r[1] * U for r in rows], "length_bytes": [r[2] * U for r in rows],
        "obj_kind": ["full"] * len(rows), "obj_id": np.arange(len(rows))}))


def states_in_order(rows: list[tuple[str, int, int]]) -> dict[int, str]:
    state: dict[int, str] = {}
    for op, first, count in rows:
        if op != "read":
            for u in range(first, first + count):
                state[u] = op
    return state


def test_trim_rewritten_later_in_the_segment_is_not_issued() -> None:
    rows = [("write", 0, 4), ("trim", 0, 4), ("write", 1, 2), ("read", 1, 1), ("trim", 8, 2)]
    (seg,) = segment_plan(plan_of(rows))
    assert pa.compute.cast(seg.ops.column("op"), pa.string()).to_pylist() == ["write", "write", "read"]
    # Units 0 and 3 stay trimmed (1-2 were rewritten after the trim); 8-9 are trimmed.
    assert seg.trim_offsets.tolist() == [0, 3 * U, 8 * U]
    assert seg.trim_lengths.tolist() == [U, U, 2 * U]
    assert (seg.planned_trim_bytes, seg.issued_trim_bytes, seg.superseded_trim_bytes) == (6 * U, 4 * U, 2 * U)


def test_segments_respect_op_and_byte_limits() -> None:
    rows = [("write", i, 1) for i in range(10)] + [("trim", 0, 10)] + [("write", 20, 100)]
    segs = segment_plan(plan_of(rows), max_ops=4, max_bytes=8 * U)
    assert [(s.first_row, s.rows) for s in segs] == [(0, 4), (4, 4), (8, 2), (10, 1), (11, 1)]
    assert segs[3].ops.num_rows == 0 and segs[3].issued_trim_bytes == 10 * U
    assert segs[4].ops.num_rows == 1          # one row above max_bytes still forms a segment


def test_misaligned_plans_are_refused() -> None:
    bad = BLOCK_OPS.conform(pa.table({"t_s": [0.0], "op": ["trim"], "offset_bytes": [512], "length_bytes": [U],
                                      "obj_kind": ["full"], "obj_id": [0]}))
    with pytest.raises(KvwearError, match="row 1: offset 512"):
        segment_plan(bad)


op_rows = st.lists(st.tuples(st.sampled_from(["write", "write", "trim", "read"]), st.integers(0, 30),
                             st.integers(1, 6)), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(rows=op_rows, max_ops=st.integers(1, 25))
def test_each_segment_ends_in_the_plans_own_state(rows: list[tuple[str, int, int]], max_ops: int) -> None:
    segs = segment_plan(plan_of(rows), max_ops=max_ops)
    state: dict[int, str] = {}
    ops_seen: list[tuple[str, int, int]] = []
    for seg in segs:
        ops = list(zip(pa.compute.cast(seg.ops.column("op"), pa.string()).to_pylist(),
                       (seg.ops.column("offset_bytes").to_numpy() // U).tolist(),
                       (seg.ops.column("length_bytes").to_numpy() // U).tolist(), strict=True))
        ops_seen += ops
        for op, first, count in ops:                      # fio plays the reads and writes in order
            if op == "write":
                state.update(dict.fromkeys(range(first, first + count), "write"))
        for o, n in zip(seg.trim_offsets.tolist(), seg.trim_lengths.tolist(), strict=True):   # then the trims
            state.update(dict.fromkeys(range(o // U, (o + n) // U), "trim"))
        assert state == states_in_order(rows[: seg.first_row + seg.rows])
        assert seg.planned_trim_bytes == seg.issued_trim_bytes + seg.superseded_trim_bytes
        assert np.all(seg.trim_offsets[1:] > seg.trim_offsets[:-1] + seg.trim_lengths[:-1])   # sorted, apart
    assert ops_seen == [r for r in rows if r[0] != "trim"]
    assert sum(s.rows for s in segs) == len(rows)
