"""Flat validation mode: every chunk an independent object, one tier, fixed chunk size.

This is the mode in which kvwear's hit counts can be checked against a reference cache
simulator (libCacheSim): the requests are flattened into the sequence of chunk keys they cover,
in request order and root → leaf within a request, and `lru`, `fifo` and `belady` (plain MIN)
replay it over a cache of `capacity` chunks. Semantics match libCacheSim's with unit object
sizes: a miss evicts (if full) before inserting, so the missed chunk is always admitted; MIN
evicts the cached chunk whose next access is farthest (never-again first).

- `flatten_chunks(table, chunk_tokens)`: the chunk-id sequence (dense int64 ids), vectorized;
  a source block of B > S tokens becomes its k = B/S derived chunk keys (kvwear.workloads.blocks).
- `next_access(ids)`: index of each access's next access of the same id, or -1.
- `oracle_general(ids)`: the same sequence as libCacheSim `oracleGeneral` binary records (the
  caller writes `records.tofile(path)`; this module does no I/O).
- `simulate_flat(ids, capacity_chunks, policy) -> FlatResult`.

Must not do I/O; the tiered simulator (kvwear.policies.sim) is the real model, this mode only validates.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kvwear.errors import KvwearError
from kvwear.workloads.schema import list_parts

FLAT_POLICIES = ("lru", "fifo", "belady")

ORACLE_GENERAL_DTYPE = np.dtype(
    [("clock_time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")]
)


@dataclass(frozen=True)
class FlatResult:
    policy: str
    capacity_chunks: int
    accesses: int
    hits: int

    @property
    def miss_ratio(self) -> float:
        return 1.0 - self.hits / self.accesses if self.accesses else 0.0


def flatten_chunks(table: pa.Table, chunk_tokens: int = 16) -> np.ndarray:
    """Chunk keys covered by each request, concatenated in request order (dense int64 ids)."""
    from kvwear.workloads.blocks import convert_block_size

    conv = convert_block_size(table, chunk_tokens)
    offs, vals = list_parts(conv.column("hash_ids"))
    ns = np.repeat(np.asarray(conv.column("hash_ns").to_numpy(), dtype=np.int64), np.diff(offs))
    if len(vals) == 0:
        return vals
    pairs = np.stack([ns, vals], axis=1)
    _, inverse = np.unique(pairs, axis=0, return_inverse=True)
    return np.asarray(inverse, dtype=np.int64).reshape(-1)


def next_access(ids: np.ndarray) -> np.ndarray:
    """For each position i, the next position j > i with ids[j] == ids[i], else -1."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    out = np.full(n, -1, dtype=np.int64)
    if n > 1:
        order = np.lexsort((np.arange(n), ids))
        a, b = order[:-1], order[1:]
        same = ids[a] == ids[b]
        out[a[same]] = b[same]
    return out


def oracle_general(ids: np.ndarray, obj_size: int = 1) -> np.ndarray:
    """libCacheSim oracleGeneral records (clock = position, next access or -1)."""
    ids = np.asarray(ids, dtype=np.int64)
    rec = np.zeros(len(ids), dtype=ORACLE_GENERAL_DTYPE)
    rec["clock_time"] = np.arange(len(ids), dtype=np.uint32)
    rec["obj_id"] = ids.astype(np.uint64)
    rec["obj_size"] = obj_size
    rec["next_access_vtime"] = next_access(ids)
    return rec


def _queue(ids: list[int], cap: int, refresh: bool) -> int:
    """Hits of an insertion-ordered queue that evicts its oldest entry: LRU when a hit moves the
    entry to the young end (`refresh`), FIFO when it does not."""
    od: OrderedDict[int, None] = OrderedDict()
    hits = 0
    move = od.move_to_end
    pop = od.popitem
    for x in ids:
        if x in od:
            if refresh:
                move(x)
            hits += 1
        else:
            if len(od) >= cap:
                pop(last=False)
            od[x] = None
    return hits


def _belady(ids: list[int], nxt: list[int], cap: int) -> int:
    never = len(ids) + 1
    cached: dict[int, int] = {}
    heap: list[tuple[int, int]] = []  # (−next access, id), lazily invalidated
    hits = 0
    push = heapq.heappush
    pop = heapq.heappop
    for x, nx in zip(ids, nxt, strict=True):
        if nx < 0:
            nx = never
        if x in cached:
            hits += 1
        elif len(cached) >= cap:
            while True:
                key, y = pop(heap)
                if cached.get(y) == -key:
                    del cached[y]
                    break
        cached[x] = nx
        push(heap, (-nx, x))
        if len(heap) > 4 * cap + 64:
            heap = [(-v, y) for y, v in cached.items()]
            heapq.heapify(heap)
    return hits


def simulate_flat(ids: np.ndarray, capacity_chunks: int, policy: str = "lru") -> FlatResult:
    """Replay the flat chunk sequence `ids` through a single cache of `capacity_chunks`."""
    if capacity_chunks < 1:
        raise KvwearError(f"flat mode: capacity must be >= 1 chunk, got {capacity_chunks}")
    seq = np.asarray(ids, dtype=np.int64).tolist()
    if policy == "lru":
        hits = _queue(seq, capacity_chunks, refresh=True)
    elif policy == "fifo":
        hits = _queue(seq, capacity_chunks, refresh=False)
    elif policy == "belady":
        hits = _belady(seq, next_access(np.asarray(ids)).tolist(), capacity_chunks)
    else:
        raise KvwearError(f"flat mode: unknown policy {policy!r}; valid: {', '.join(FLAT_POLICIES)}")
    return FlatResult(policy, capacity_chunks, len(seq), hits)
