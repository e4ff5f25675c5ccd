"""The next-use and future-reference columns of a requests Parquet, in one backward pass, for
offline (oracle) policies.

For every hash id of every request (row order, ids in list order) the next-use value is the
index of the next row that holds the same block key `(hash_ns, hash_id)` again, or `NEVER`
(= `kvwear.policies.tree.NEVER`, 2^62), and the future-references value is how many later accesses
(ids of later rows, or later in the same row) hold that key — exactly `kvwear.policies.sim.next_use(…,
refs=True)` of the whole table, which the in-memory path computes with one sort over every
access. The oracle's total future hits f_x (`belady`'s wear mode) is the second column, read at
the access that last touched the object, so it streams like the next use.

Here the file is read row group by row group from the end: a slice of accesses is resolved
among themselves with one sort, and a key's last access in the slice takes the first row of a
later slice holding the key, and the count of the key's accesses in later slices, from a map
of the keys seen so far (sorted arrays, updated per slice). Memory is one row group plus the map
— 24 bytes per distinct block key — never the trace's accesses. Where the map could outgrow a
budget (`MEMORY_BYTES`; distinct keys are bounded by accesses), the keys are hash-partitioned
into buckets, each resolved by its own backward pass and spilled to a temporary file beside the
output, and a final pass zips the buckets' values back into request order: a key's values
depend only on its own accesses, so the file is the same byte for byte, and memory is one
bucket's map (external memory; `write_next_use`). The columns are written to their own Parquet
file, one row per request, `next_use: list<int64>` and `future_refs: list<int64>` aligned with
the requests' `hash_ids`, in the same row groups, so a forward reader zips the two files batch
by batch (`iter_with_next_use`).

The map needs one sortable int64 per key: (namespace index, id) are packed when the ids fit
beside the namespace bits (every loader's source ids do; a single namespace always does). When
they do not, `write_next_use` returns False and the caller keeps the in-memory path.

This module reads and writes requests-derived files only; it must not know about tiers or
policies.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kvwear.errors import KvwearError
from kvwear.tables import BATCH_VALUES, TableSpec, TableWriter, check_kind, iter_table_batches
from kvwear.workloads.schema import REQUESTS, list_parts

NEVER = 1 << 62  # kvwear.policies.tree.NEVER (workloads must not import policies)

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


#: The backward pass's memory budget for its map of keys: with more possible keys than fit, the
#: keys are hash-partitioned into buckets resolved one pass each (`write_next_use`).
MEMORY_BYTES = 1 << 30
#: Map bytes per key: 3 int64 (key, first later row, later accesses), twice while `np.insert`
#: builds the grown arrays beside the old ones.
_MAP_BYTES_PER_KEY = 48
#: Bytes written per access, at most: the output's two int64 columns, and as much again for the
#: buckets' spill while the final pass reads it (zstd makes both smaller; the guard takes the bound).
BYTES_PER_ACCESS = 16


def _accesses(meta: pq.FileMetaData) -> int:
    """The requests file's hash-id accesses (from the footer: the `hash_ids` leaf's values)."""
    col = [meta.row_group(0).column(j).path_in_schema for j in range(meta.num_columns)].index(
        "hash_ids.list.element") if meta.num_row_groups else 0
    return sum(meta.row_group(g).column(col).num_values for g in range(meta.num_row_groups))


def buckets_for(accesses: int, memory_bytes: int = MEMORY_BYTES) -> int:
    """How many key buckets keep the map within `memory_bytes`: the distinct keys are bounded by
    the accesses (no cheaper exact bound exists before the pass), so P = ⌈accesses × 48 B /
    budget⌉, 1 on small traces."""
    return max(1, -(-accesses * _MAP_BYTES_PER_KEY // max(memory_bytes, 1)))


def spill_bytes(requests: str | Path, memory_bytes: int = MEMORY_BYTES) -> int:
    """An upper bound of the bytes `write_next_use` has on disk at once: the output, plus the
    buckets' spill when the keys need more than one bucket."""
    n = _accesses(pq.ParquetFile(requests).metadata)
    return BYTES_PER_ACCESS * n * (1 if buckets_for(n, memory_bytes) == 1 else 2)


def _bucket(keys: np.ndarray, buckets: int) -> np.ndarray:
    """Each key's bucket: the top 32 bits of a multiplicative hash (Fibonacci hashing, so that a
    namespace's consecutive ids spread evenly) scaled to [0, buckets) by a multiply and a shift
    (Lemire's range reduction: no modulo)."""
    h = (keys.view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
    return ((h * np.uint64(buckets)) >> np.uint64(32)).astype(np.int64)


def _group_keys(pf: pq.ParquetFile, g: int, namespaces: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Row group `g`'s list offsets and the packed key of each of its accesses."""
    t = pf.read_row_group(g, columns=["hash_ns", "hash_ids"])
    offs, vals = list_parts(t.column("hash_ids"))
    ns_rows = np.asarray(t.column("hash_ns").to_numpy(), dtype=np.int64)
    return offs, _pack(np.repeat(ns_rows, np.diff(offs)), vals, namespaces, bits)


def _backward(pf: pq.ParquetFile, namespaces: np.ndarray, bits: int, bucket: int, buckets: int,
              max_values: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The backward pass over one bucket's keys: for each row group, last first, its list offsets
    and the (2, n) next use and future references of its accesses of keys in `bucket` (in access
    order).

    Row groups are gathered, last first, until they hold `max_values` of the bucket's accesses
    and then resolved in slices of at most `max_values`, last slice first, each against the map
    of the later ones (a slice may end mid-row: `_resolve` counts the rest of the row as later)."""
    meta = pf.metadata
    starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
    map_keys = np.zeros(0, dtype=np.int64)   # sorted keys seen in later slices
    map_rows = np.zeros(0, dtype=np.int64)   # the first row of a later slice holding each
    map_refs = np.zeros(0, dtype=np.int64)   # and how many accesses of it later slices hold
    # (offsets, keys, rows) of the groups not resolved yet, last first
    held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    n_held = 0
    for g in range(meta.num_row_groups - 1, -2, -1):
        if g >= 0:
            offs, keys = _group_keys(pf, g, namespaces, bits)
            if buckets > 1:   # the row of each of the bucket's accesses only
                mine = np.flatnonzero(_bucket(keys, buckets) == bucket)
                keys = keys[mine]
                rows = starts[g] - 1 + np.searchsorted(offs, mine, side="right")
            else:
                rows = np.repeat(np.arange(starts[g], starts[g + 1], dtype=np.int64), np.diff(offs))
            held.append((offs, keys, rows))
            n_held += len(keys)
            if n_held < max_values:
                continue
        if not held:
            break
        keys = np.concatenate([k for _, k, _ in held[::-1]])
        rows = np.concatenate([r for _, _, r in held[::-1]])
        out = np.empty((2, len(keys)), dtype=np.int64)
        for hi in range(len(keys), 0, -max_values):
            lo = max(hi - max_values, 0)
            out[0, lo:hi], out[1, lo:hi], map_keys, map_rows, map_refs = _resolve(
                keys[lo:hi], rows[lo:hi], map_keys, map_rows, map_refs)
        hi = len(keys)
        for offs, k, _ in held:              # back into groups, last first
            yield offs, out[:, hi - len(k):hi]
            hi -= len(k)
        held, n_held = [], 0


_SPILL = pa.schema([pa.field("next_use", pa.int64()), pa.field("future_refs", pa.int64())])


def write_next_use(requests: str | Path, out: str | Path, chunk_tokens: int,
                   max_values: int = BATCH_VALUES, memory_bytes: int = MEMORY_BYTES) -> bool:
    """Write the next-use column of the requests Parquet `requests` to `out` (backward pass).
    Returns False, writing nothing, where it cannot stand in for the in-memory pre-pass: keys
    that do not pack into int64, or rows whose blocks are finer than `chunk_tokens` (the
    simulator regroups those first, which changes the ids).

    External memory: a key's next use and future references depend only on its own accesses, so
    when the map could outgrow `memory_bytes` (`buckets_for`) the keys are hash-partitioned into
    P buckets; pass p runs the backward pass for bucket p's keys alone and spills their values
    (only its accesses, per row group, last group first) to a zstd Arrow stream in a temporary
    folder beside `out`; a final pass over the row groups, in the same order, takes each group's
    values from the P streams and writes the same file as one pass would. Memory: one row group,
    one bucket's map (24 B per distinct key of the bucket) and the P streams' current batches;
    disk: about the output again (`spill_bytes`), removed on success and on failure."""
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
    buckets = buckets_for(_accesses(meta), memory_bytes)
    out = Path(out)
    with TableWriter(NEXT_USE, out) as w:
        def emit(offs: np.ndarray, vals: np.ndarray) -> None:
            # one row group per input group, stored last first (the order they are resolved
            # in), so nothing is held or copied to turn them around
            offsets = pa.array(np.asarray(offs, dtype=np.int32))
            w.write(pa.table({"next_use": pa.ListArray.from_arrays(offsets, pa.array(vals[0])),
                              "future_refs": pa.ListArray.from_arrays(offsets, pa.array(vals[1]))}),
                    one_row_group=True)

        if buckets == 1:
            for offs, vals in _backward(pf, namespaces, bits, 0, 1, max_values):
                emit(offs, vals)
            return True
        with tempfile.TemporaryDirectory(prefix=f".{out.name.lstrip('.')}.spill-", dir=out.parent) as tmp:
            options = pa.ipc.IpcWriteOptions(compression="zstd")
            for b in range(buckets):
                with pa.ipc.new_stream(Path(tmp) / f"{b}.arrows", _SPILL, options=options) as sink:
                    for _, vals in _backward(pf, namespaces, bits, b, buckets, max_values):
                        if vals.shape[1]:        # the final pass reads a bucket's batch only where it has accesses
                            sink.write_batch(pa.record_batch([pa.array(vals[0]), pa.array(vals[1])], schema=_SPILL))
            # from open files, not paths: given a path pyarrow memory-maps the stream, and every
            # page the pass has read stays resident until the map closes — the whole spill (about
            # the output's size) by the pass's end: belady's growth from the 1x to the 4x corpus
            files = [pa.OSFile(str(Path(tmp) / f"{b}.arrows"), "rb") for b in range(buckets)]
            streams = [pa.ipc.open_stream(f) for f in files]
            try:
                for g in range(meta.num_row_groups - 1, -1, -1):
                    offs, keys = _group_keys(pf, g, namespaces, bits)
                    which = _bucket(keys, buckets)
                    counts = np.bincount(which, minlength=buckets)
                    parts = []
                    for k in np.flatnonzero(counts).tolist():
                        batch = streams[k].read_next_batch()
                        if batch.num_rows != counts[k]:
                            raise KvwearError(f"internal error: {out}: bucket {k}'s spill is out of step "
                                              f"with {path}'s row group {g}")
                        parts.append(np.stack([np.asarray(c.to_numpy(), dtype=np.int64) for c in batch.columns]))
                    vals = np.empty((2, len(keys)), dtype=np.int64)
                    if parts:
                        vals[:, np.argsort(which, kind="stable")] = np.concatenate(parts, axis=1)
                    emit(offs, vals)
            finally:
                for s in streams:
                    s.close()
                for f in files:
                    f.close()
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
