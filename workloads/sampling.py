"""Sampling a workload: keep whole sessions (or, for a trace without sessions, whole root-prefix
groups) with a given probability, stably (the choice depends only on the group and the seed).

Scaling (docs/design/replay-and-devices.md): a run samples sessions and scales its tiers by the
same fraction. This module chooses rows; it must not know tiers or devices (the run scales those).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvwear.errors import KvwearError
from kvwear.tables import iter_table_batches
from kvwear.workloads.blocks import splitmix64
from kvwear.workloads.schema import REQUESTS, list_parts

# Prefix groups (sampling a trace without sessions): the first block position where no single id
# is shared by more than GROUP_SHARED_SHARE of requests, searched over the first GROUP_MAX_DEPTH.
GROUP_SHARED_SHARE = 0.05


GROUP_MAX_DEPTH = 8


def sample_groups(table: pa.Table, fraction: float, seed: int) -> pa.Table:
    """Keep whole sessions (or whole root-prefix groups when a row has no session) with
    probability `fraction`; the choice depends only on the group and the seed (stable hashes,
    not Python's per-process string hash). The in-memory form of what the workload stage does
    in batches (`sampled_batches`)."""
    check_fraction(fraction)
    if fraction >= 1.0:
        return table
    lengths, heads = _head_ids(table.column("hash_ids"))
    block = _group_block(lengths, heads, _group_depth(lengths, heads))
    return table.filter(pa.array(_keep_mask(table, block, fraction, seed)))


def check_fraction(fraction: float) -> None:
    if not 0.0 < fraction <= 1.0:
        raise KvwearError(f"workload.sample_fraction must be in (0, 1], got {fraction}")


def _head_ids(ids: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Per request, its number of block ids and its first GROUP_MAX_DEPTH ids (-1 past its end):
    all the prefix grouping reads, 72 bytes a request however long the request is."""
    offsets, values = list_parts(ids)
    lengths = np.diff(offsets)
    heads = np.full((len(lengths), GROUP_MAX_DEPTH), -1, dtype=np.int64)
    for d in range(GROUP_MAX_DEPTH):
        has = lengths > d
        heads[has, d] = values[offsets[:-1][has] + d]
    return lengths, heads


def _group_depth(lengths: np.ndarray, heads: np.ndarray) -> int:
    """The block position that names a request's prefix group when the trace has no sessions: the
    first where no single id is shared by more than GROUP_SHARED_SHARE of all requests (position 0
    is a system prompt in Mooncake, common to every request). Requests of one conversation share
    that block, so they stay together."""
    depth = 0
    for d in range(GROUP_MAX_DEPTH):
        has = lengths > d
        if not has.any():
            break
        top = np.unique(heads[has, d], return_counts=True)[1].max()
        depth = d
        if top <= GROUP_SHARED_SHARE * len(lengths):
            break
    return depth


def _group_block(lengths: np.ndarray, heads: np.ndarray, depth: int) -> np.ndarray:
    """Per request, its block at `depth` clipped to its length (a request without blocks: one group)."""
    pos = np.minimum(depth, np.maximum(lengths - 1, 0))
    out = np.full(len(lengths), np.iinfo(np.int64).max, dtype=np.int64)
    nz = lengths > 0
    out[nz] = heads[nz, pos[nz]]
    return out.astype(np.uint64)


def _keep_mask(rows: pa.Table | pa.RecordBatch, group_block: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Which of `rows` a sample keeps: a stable hash of the session (or of the prefix group's
    block and namespace, for a row without a session) below `fraction`."""
    sess = pc.dictionary_encode(rows.column("session_id"))
    if isinstance(sess, pa.ChunkedArray):
        sess = sess.combine_chunks()
    names = sess.dictionary.to_pylist()
    name_keys = np.array([int.from_bytes(hashlib.blake2b(f"{seed}/{n}".encode(), digest_size=8).digest(), "little")
                          for n in names], dtype=np.uint64)
    idx = sess.indices.to_numpy(zero_copy_only=False)
    has_session = ~np.asarray(pc.is_null(sess.indices).to_numpy(zero_copy_only=False))
    ns = rows.column("hash_ns").to_numpy().astype(np.uint64)
    prefix_keys = splitmix64(splitmix64(group_block ^ np.uint64(seed & 0xFFFFFFFF)) ^ ns)
    keys = np.where(has_session, name_keys[np.where(has_session, idx, 0).astype(np.int64)] if names else 0,
                    prefix_keys)
    return np.asarray((keys >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction)


def sampled_batches(path: Path, fraction: float, seed: int) -> Iterator[pa.RecordBatch]:
    """`sample_groups` over a requests Parquet in bounded batches: one pass reads the first ids of
    every request (`_head_ids`, for the prefix groups' depth over the whole trace), a second
    yields each batch's kept rows."""
    parts = [_head_ids(b.column(0)) for b in iter_table_batches(REQUESTS, path, columns=["hash_ids"])]
    lengths = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.int64)])
    heads = np.concatenate([p[1] for p in parts] or [np.zeros((0, GROUP_MAX_DEPTH), np.int64)])
    del parts
    block = _group_block(lengths, heads, _group_depth(lengths, heads))
    start = 0
    for batch in iter_table_batches(REQUESTS, path):
        keep = _keep_mask(batch, block[start:start + batch.num_rows], fraction, seed)
        start += batch.num_rows
        yield batch.filter(pa.array(keep))
