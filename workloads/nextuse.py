"""The next-use and future-reference columns of a requests Parquet, in one backward pass, for
offline (oracle) policies.

For every hash id of every request (row order, ids in list order) the next-use value is the
index of the next row that holds the same block key `(hash_ns, hash_id)` again, or `NEVER`
(= `policies.tree.NEVER`, 2^62), and the future-references value is how many later accesses
(ids of later rows, or later in the same row) hold that key — exactly `policies.sim.next_use(…,
refs=True)` of the whole table, which the in-memory path computes with one sort over every
access. The oracle's total future hits f_x (`belady`'s wear mode) is the second column, read at
the access that last touched the object, so it streams like the next use.

Here the file is read row group by row group from the end: a group's accesses are resolved
among themselves with one sort, and a key's last access in the group takes the first row of a
later group holding the key, and the count of the key's accesses in later groups, from a map
of the keys seen so far (sorted arrays, updated per group). Memory is one row group plus the map
— 24 bytes per distinct block key — never the trace's accesses. The columns are written to their
own Parquet file, one row per request, `next_use: list<int64>` and `future_refs: list<int64>`
aligned with the requests' `hash_ids`, in the same row groups, so a forward reader zips the two
files batch by batch (`iter_with_next_use`).

The map needs one sortable int64 per key: (namespace index, id) are packed when the ids fit
beside the namespace bits (every loader's source ids do; a single namespace always does). When
they do not, `write_next_use` returns False and the caller keeps the in-memory path.

This module reads and writes requests-derived files only; it must not know about tiers or
policies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kvwear.tables import BATCH_VALUES, TableSpec, TableWriter, check_kind, iter_table_batches
from workloads.schema import REQUESTS, list_parts

NEVER = 1 << 62  # policies.tree.NEVER (workloads must not import policies)

# v2: + future_refs (the oracle's f_x, issue 16)
NEXT_USE = TableSpec("next_use", 2, pa.schema([pa.field("next_use", pa.list_(pa.int64())),
                                               pa.field("future_refs", pa.list_(pa.int64()))]))


def _pack(ns: np.ndarray, ids: np.ndarray, namespaces: np.ndarray, bits: int) -> np.ndarray:
    if len(namespaces) <= 1:
        return ids
    return (np.searchsorted(namespaces, ns).astype(np.int64) << bits) | ids


def _packing(path: Path) -> tuple[np.ndarray, int] | None:
    """(sorted namespaces, id bits) when every key packs into one int64, else None."""
    pf = pq.ParquetFile(path)
    namespaces: set[int] = set()
    lo, hi = 0, 0
    for g in range(pf.metadata.num_row_groups):
        t = pf.read_row_group(g, columns=["hash_ns", "hash_ids"])
        namespaces.update(np.unique(np.asarray(t.column("hash_ns").to_numpy(), dtype=np.int64)).tolist())
        _, vals = list_parts(t.column("hash_ids"))
        if len(vals):
            lo, hi = min(lo, int(vals.min())), max(hi, int(vals.max()))
    ordered = np.asarray(sorted(namespaces), dtype=np.int64)
    if len(ordered) <= 1:
        return ordered, 63
    bits = 63 - (len(ordered) - 1).bit_length()
    if lo < 0 or hi >= 1 << bits:
        return None
    return ordered, bits


def _resolve(keys: np.ndarray, rows: np.ndarray, map_keys: np.ndarray, map_rows: np.ndarray,
             map_refs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Next use and future references of each access of one slice (rows ascending), given the
    map of every later slice's keys → their first row and their number of accesses; returns
    both and the map updated with this slice."""
    order = np.lexsort((rows, keys))
    nxt = np.full(len(keys), NEVER, dtype=np.int64)
    refs = np.zeros(len(keys), dtype=np.int64)
    if not len(order):
        return nxt, refs, map_keys, map_rows, map_refs
    a, b = order[:-1], order[1:]
    same = keys[a] == keys[b]
    nxt[a[same]] = rows[b[same]]
    # a key's last access in this slice: its first row in a later slice, if any
    last = np.ones(len(order), dtype=bool)
    last[:-1] = ~same
    la = order[last]                     # one per key, ascending by key
    last_pos = np.flatnonzero(last)
    counts = np.diff(last_pos, prepend=-1)   # accesses per key in this slice
    pos = np.searchsorted(map_keys, keys[la])
    known = pos < len(map_keys)
    known[known] = map_keys[pos[known]] == keys[la[known]]
    nxt[la[known]] = map_rows[pos[known]]
    # future references: the key's later accesses in this slice (the distance to its last
    # position in sorted order) plus every access of it in later slices
    later = np.zeros(len(la), dtype=np.int64)
    later[known] = map_refs[pos[known]]
    refs[order] = np.repeat(last_pos + later, counts) - np.arange(len(order))
    # this slice's first access of each key replaces the map's (later) row
    first = np.ones(len(order), dtype=bool)
    first[1:] = ~same
    fa = order[first]                    # the same keys, in the same order
    map_rows[pos[known]] = rows[fa[known]]
    map_refs[pos[known]] += counts[known]
    map_keys = np.insert(map_keys, pos[~known], keys[fa[~known]])
    map_rows = np.insert(map_rows, pos[~known], rows[fa[~known]])
    map_refs = np.insert(map_refs, pos[~known], counts[~known])
    return nxt, refs, map_keys, map_rows, map_refs


def write_next_use(requests: str | Path, out: str | Path, chunk_tokens: int,
                   max_values: int = BATCH_VALUES) -> bool:
    """Write the next-use column of the requests Parquet `requests` to `out` (backward pass).
    Returns False, writing nothing, where it cannot stand in for the in-memory pre-pass: keys
    that do not pack into int64, or rows whose blocks are finer than `chunk_tokens` (the
    simulator regroups those first, which changes the ids)."""
    path = Path(requests)
    check_kind(REQUESTS, path)
    pf = pq.ParquetFile(path)
    meta = pf.metadata
    for g in range(meta.num_row_groups):
        bt = np.asarray(pf.read_row_group(g, columns=["block_tokens"]).column(0).to_numpy(), dtype=np.int64)
        if (bt < chunk_tokens).any():
            return False
    packing = _packing(path)
    if packing is None:
        return False
    namespaces, bits = packing
    starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
    map_keys = np.zeros(0, dtype=np.int64)   # sorted keys seen in later slices
    map_rows = np.zeros(0, dtype=np.int64)   # the first row of a later slice holding each
    map_refs = np.zeros(0, dtype=np.int64)   # and how many accesses of it later slices hold
    with TableWriter(NEXT_USE, out) as w:
        for g in range(meta.num_row_groups - 1, -1, -1):
            t = pf.read_row_group(g, columns=["hash_ns", "hash_ids"])
            offs, vals = list_parts(t.column("hash_ids"))
            ns_rows = np.asarray(t.column("hash_ns").to_numpy(), dtype=np.int64)
            # the group's rows in slices of about max_values ids, last first: the sort's
            # temporaries stay at a slice's size, whatever the row group's
            cuts = sorted({0, *(np.flatnonzero(np.diff(offs // max_values)) + 1).tolist(), len(ns_rows)})
            pieces: list[np.ndarray] = []
            ref_pieces: list[np.ndarray] = []
            for lo, hi in zip(cuts[-2::-1], cuts[:0:-1], strict=True):
                lengths = np.diff(offs[lo:hi + 1])
                rows = np.repeat(np.arange(starts[g] + lo, starts[g] + hi, dtype=np.int64), lengths)
                keys = _pack(np.repeat(ns_rows[lo:hi], lengths), vals[offs[lo]:offs[hi]], namespaces, bits)
                nxt, refs, map_keys, map_rows, map_refs = _resolve(keys, rows, map_keys, map_rows, map_refs)
                pieces.append(nxt)
                ref_pieces.append(refs)
            nxt_all = np.concatenate(pieces[::-1]) if pieces else np.zeros(0, dtype=np.int64)
            refs_all = np.concatenate(ref_pieces[::-1]) if ref_pieces else np.zeros(0, dtype=np.int64)
            del pieces, ref_pieces
            # one row group per input group, stored last first (the order they are resolved in),
            # so nothing is held or copied to turn them around
            offsets = pa.array(np.asarray(offs, dtype=np.int32))
            w.write(pa.table({"next_use": pa.ListArray.from_arrays(offsets, pa.array(nxt_all)),
                              "future_refs": pa.ListArray.from_arrays(offsets, pa.array(refs_all))}),
                    one_row_group=True)
    return True


def iter_with_next_use(requests: str | Path, next_use: str | Path,
                       max_values: int = BATCH_VALUES) -> Iterator[pa.RecordBatch]:
    """The requests file's record batches (`kvwear.tables.iter_table_batches`), each with its
    `next_use` and `future_refs` columns appended; `next_use` is what `write_next_use` wrote for
    `requests`, read one row group at a time (they are stored last first)."""
    check_kind(NEXT_USE, next_use)
    pf = pq.ParquetFile(next_use)
    n_rows = pq.ParquetFile(requests).metadata.num_rows
    if pf.metadata.num_rows != n_rows:
        raise ValueError(f"{next_use}: {pf.metadata.num_rows} rows, but {requests} has {n_rows}")
    groups = iter(range(pf.metadata.num_row_groups - 1, -1, -1))
    buf = NEXT_USE.empty()
    for batch in iter_table_batches(REQUESTS, requests, max_values=max_values):
        while buf.num_rows < batch.num_rows:
            buf = pa.concat_tables([buf, pf.read_row_group(next(groups)).select(buf.column_names)])
        cols = buf.slice(0, batch.num_rows)
        buf = buf.slice(batch.num_rows)
        for name in cols.column_names:
            batch = batch.append_column(name, cols.column(name).combine_chunks())
        yield batch


@contextmanager
def next_use_file(requests: str | Path, out: str | Path, chunk_tokens: int) -> Iterator[Path | None]:
    """`write_next_use` for the duration of a `with` block: yields the file, or None where the
    in-memory pre-pass must be used instead (see `write_next_use`); removes the file after."""
    path = Path(out)
    try:
        yield path if write_next_use(requests, path, chunk_tokens) else None
    finally:
        path.unlink(missing_ok=True)
