"""Block keys: whole-prefix hashing and block-size conversion of a `requests` table.

A trace hashes its prompts in source blocks of B tokens (`block_tokens`); the simulator caches
blocks of S tokens. `convert_block_size` rewrites `hash_ids`, `hashed_tokens` and
`block_tokens` for S, vectorized with numpy over the flattened list arrays (no Python loop per
id). This module must not read or write files and knows nothing about tiers or devices.

Two ways, and where each is exact:

* **Split**, S = B/k: every source id x becomes k derived keys (x·k + j, j = 0..k-1, or a 64-bit
  mix of (x, j) when x is negative or x·k could overflow; decided per id, so batch-independent).
  A source id determines its whole prefix (the table is prefix-chained: loaders guarantee it),
  so each derived key does too: chaining stays exact and
  an infinite cache hits exactly k times as many blocks. A source block that is only partly
  covered (Mooncake's last block; `hashed_tokens` not a multiple of B) yields only
  ⌈covered/S⌉ keys, so `hashed_tokens` is unchanged. Reuse is still only known at granularity B:
  a shared prefix that ends inside a source block is not seen.
* **Group**, S = k·B: k consecutive source blocks become one key derived from the whole prefix
  up to the group's end (so chaining holds even if the source were not chained). Only full
  groups are hashed: a request keeps ⌊hashed_tokens/S⌋ groups (never more than ⌊len/k⌋) and
  `hashed_tokens` becomes groups·S; a trailing partial group is dropped, as vLLM drops a
  partial block. Exact (hits = source hits / k) when every request's hashed length is a multiple
  of S and reused prefixes end on group boundaries; otherwise a request whose reused prefix
  covers h source blocks (of those kept) hits ⌊h/k⌋ groups, and trailing tokens are unhashed.

Whole-prefix keys (`prefix_keys`) are a polynomial hash over mixed ids modulo 2^64, computed
with cumulative sums (the base is odd, hence invertible mod 2^64), then mixed again
(splitmix64). Distinct prefixes collide with probability about n²/2^65 for n distinct prefixes
(~3e-4 for 10^8 prefixes), which is below any effect on hit ratios.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kvwear.workloads.schema import REQUESTS, list_parts

_U = np.uint64
_BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2^64
_BASE_INV = pow(_BASE, -1, 2**64)
_MIX_POS = _U(0xD6E8FEB86659FD93)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer over a uint64 array (wrapping arithmetic)."""
    z = np.asarray(x, dtype=_U) + _U(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U(30))) * _U(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U(27))) * _U(0x94D049BB133111EB)
    return z ^ (z >> _U(31))


def _powers(base: int, n: int) -> np.ndarray:
    arr = np.full(max(n, 1), base, dtype=_U)
    arr[0] = 1
    return np.cumprod(arr, dtype=_U)


def positions(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row index, position within the row) for every flat value of a list array."""
    lengths = np.diff(offsets)
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    pos = np.arange(int(offsets[-1]) - int(offsets[0]), dtype=np.int64) - (
        np.repeat(offsets[:-1], lengths) - offsets[0]
    )
    return rows, pos


def prefix_keys(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each position i of each list, an int64 key of the list's prefix [0..i]."""
    offsets = np.asarray(offsets, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    rows, pos = positions(offsets)
    maxlen = int(pos.max()) + 1
    m = splitmix64(values.view(_U))
    t = m * _powers(_BASE_INV, maxlen)[pos]
    c = np.cumsum(t, dtype=_U)
    # prefix sums restarted at each list: subtract the running sum before the list began
    starts = offsets[:-1] - offsets[0]
    before = np.zeros(len(starts), dtype=_U)
    nz = starts > 0
    before[nz] = c[starts[nz] - 1]
    s = c - before[rows]
    h = s * _powers(_BASE, maxlen)[pos]
    return splitmix64(h ^ ((pos.astype(_U) + _U(1)) * _MIX_POS)).view(np.int64)


def _make_list(lengths: np.ndarray, values: np.ndarray) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    otype = np.int32 if offsets[-1] < 2**31 else np.int64
    cls = pa.ListArray if otype is np.int32 else pa.LargeListArray
    arr = cls.from_arrays(pa.array(offsets.astype(otype)), pa.array(values.astype(np.int64)))
    return arr.cast(pa.list_(pa.int64()))


def group_keys(
    offsets: np.ndarray, values: np.ndarray, hashed_tokens: np.ndarray, k: int, s_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Group k source blocks per key: (new lengths, new flat keys)."""
    lengths = np.diff(offsets)
    n_groups = np.minimum(np.asarray(hashed_tokens, dtype=np.int64) // s_tokens, lengths // k)
    if len(values) == 0:
        return n_groups, np.zeros(0, dtype=np.int64)
    keys = prefix_keys(offsets, values)
    rows, pos = positions(offsets)
    end = pos + 1
    keep = (end % k == 0) & (end // k <= n_groups[rows])
    return n_groups, keys[keep]


def split_keys(
    offsets: np.ndarray, values: np.ndarray, hashed_tokens: np.ndarray, k: int, s_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Split each source block into k derived keys: (new lengths, new flat keys)."""
    lengths = np.diff(offsets)
    ceil_cov = -(-np.asarray(hashed_tokens, dtype=np.int64) // s_tokens)
    new_len = np.minimum(lengths * k, ceil_cov)
    if len(values) == 0:
        return new_len, np.zeros(0, dtype=np.int64)
    rows, _ = positions(offsets)
    j = np.tile(np.arange(k, dtype=np.int64), len(values))
    x = np.repeat(values, k)
    exp_rows = np.repeat(rows, k)
    exp_pos = np.arange(len(x), dtype=np.int64) - np.repeat(offsets[:-1] * k, lengths * k)
    keep = exp_pos < new_len[exp_rows]
    x, j = x[keep], j[keep]
    # Small ids stay small and readable (x·k + j); the others are mixed. Chosen per id, never per
    # table, so a given (id, j) gets the same key in every batch a stream is converted in.
    small = (x >= 0) & (x <= (2**63 - 1 - (k - 1)) // k)
    keys = np.where(small, x * k + j, splitmix64(splitmix64(x.view(_U)) + j.astype(_U)).view(np.int64))
    return new_len, keys


def convert_block_size(table: pa.Table | pa.RecordBatch, block_tokens: int) -> pa.Table:
    """Rewrite a REQUESTS table's blocks from each row's `block_tokens` B to `block_tokens` S.

    S must divide B or be a multiple of it (per row); see the module docstring for exactness.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    s = int(block_tokens)
    if s <= 0:
        raise ValueError(f"block size must be positive, got {block_tokens}")
    if table.num_rows == 0:
        return REQUESTS.conform(table)
    b_col = np.asarray(table.column("block_tokens").to_numpy(), dtype=np.int64)
    parts = []
    order = []
    for b in np.unique(b_col):
        idx = np.flatnonzero(b_col == b)
        sub = table.take(pa.array(idx)) if len(idx) != table.num_rows else table
        parts.append(_convert_uniform(sub, int(b), s))
        order.append(idx)
    if len(parts) == 1:
        return parts[0]
    merged = pa.concat_tables(parts)
    inverse = np.empty(table.num_rows, dtype=np.int64)
    inverse[np.concatenate(order)] = np.arange(table.num_rows)
    return merged.take(pa.array(inverse))


def _convert_uniform(table: pa.Table, b: int, s: int) -> pa.Table:
    if s == b:
        return REQUESTS.conform(table)
    offsets, values = list_parts(table.column("hash_ids"))
    hashed = np.asarray(table.column("hashed_tokens").to_numpy(), dtype=np.int64)
    if s % b == 0:
        k = s // b
        lengths, keys = group_keys(offsets, values, hashed, k, s)
        new_hashed = lengths * s
    elif b % s == 0:
        k = b // s
        lengths, keys = split_keys(offsets, values, hashed, k, s)
        new_hashed = hashed
    else:
        raise ValueError(
            f"cannot convert {b}-token blocks to {s}-token blocks: one must divide the other"
        )
    cols = {name: table.column(name) for name in table.column_names}
    cols["hash_ids"] = pa.chunked_array([_make_list(lengths, keys)])
    cols["hashed_tokens"] = pa.chunked_array([pa.array(new_hashed, pa.int64())])
    cols["block_tokens"] = pa.chunked_array([pa.array(np.full(table.num_rows, s, np.int32))])
    return REQUESTS.conform(pa.table(cols))
