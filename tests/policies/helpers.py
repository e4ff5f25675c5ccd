"""Building small `requests` tables and inspecting a simulator's tree, for the policy tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from kvwear.policies.sim import Simulator
from kvwear.policies.tree import Obj, Segment, State
from kvwear.workloads.schema import REQUESTS


def requests_table(rows: Sequence[tuple[float, list[int]]], block_tokens: int = 16,
                   partial: Sequence[int] | None = None, session: Sequence[str | None] | None = None,
                   ns: int = 0) -> pa.Table:
    """One request per (arrival_s, hash_ids); `partial[i]` tokens missing from row i's last block."""
    n = len(rows)
    hashed = []
    for i, (_, ids) in enumerate(rows):
        miss = partial[i] if partial is not None else 0
        hashed.append(max(len(ids) * block_tokens - (miss if ids else 0), 0))
    cols = {
        "request_id": pa.array(range(n), pa.int64()),
        "session_id": pa.array(list(session) if session is not None else [None] * n, pa.string()),
        "parent_id": pa.nulls(n, pa.int64()),
        "stream_id": pa.array(["main"] * n),
        "turn": pa.nulls(n, pa.int32()),
        "arrival_s": pa.array([float(r[0]) for r in rows], pa.float64()),
        "input_tokens": pa.array([h + 10 for h in hashed], pa.int64()),
        "output_tokens": pa.array([1] * n, pa.int64()),
        "category": pa.array(["text"] * n),
        "model": pa.nulls(n, pa.string()),
        "block_tokens": pa.array([block_tokens] * n, pa.int32()),
        "hash_ns": pa.array([ns] * n, pa.int32()),
        "hash_ids": pa.array([list(r[1]) for r in rows], pa.list_(pa.int64())),
        "hashed_tokens": pa.array(hashed, pa.int64()),
    }
    return REQUESTS.conform(pa.table(cols))


def segments(sim: Simulator) -> Iterator[Segment]:
    """Every non-root segment of every namespace tree."""
    for root in sim.roots.values():
        stack = list(root.children.values())
        while stack:
            s = stack.pop()
            yield s
            stack.extend(s.children.values())


def objects(sim: Simulator) -> Iterator[Obj]:
    for s in segments(sim):
        yield s
        if s.state is not None:
            yield s.state


def block_residency(sim: Simulator) -> tuple[dict[int, int], dict[int, int]]:
    """(block key → tier mask, key of the last block before a state → the state's tier mask)."""
    blocks: dict[int, int] = {}
    states: dict[int, int] = {}
    for s in segments(sim):
        for k in s.keys:
            blocks[k] = s.tiers
        st: State | None = s.state
        if st is not None:
            states[s.keys[-1]] = st.tiers
    return blocks, states
