"""The `requests` table: one row per model call, the contract between workloads and policies.

Block keys are `(hash_ns, hash_id)`. `hash_ids` are prefix-chained within a namespace: a given
id always has the same predecessors (loaders verify or derive this). `block_tokens` is the
source block size B; `hashed_tokens` is how many input tokens the hash ids cover (Mooncake's
last block may be partial; Weka hashes only full blocks).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from kvwear.errors import InputError
from kvwear.tables import TableError, TableSpec
from kvwear.workloads.bounds import SpanCheck, check_requests


def _requests_check() -> Callable[[str, int, pa.RecordBatch], None]:
    """Every row of a requests file read back inside kvwear.workloads.bounds (one span over the file)."""
    span = SpanCheck()

    def check(path: str, first_row: int, batch: pa.RecordBatch) -> None:
        try:
            check_requests(batch, path, first_row, span)
        except InputError as exc:
            raise TableError(str(exc)) from None
    return check


REQUESTS = TableSpec(
    kind="requests",
    version=1,
    schema=pa.schema(
        [
            pa.field("request_id", pa.int64(), nullable=False),
            pa.field("session_id", pa.string()),          # null: the format has no sessions
            pa.field("parent_id", pa.int64()),            # request this one continues, if known
            pa.field("stream_id", pa.string(), nullable=False),  # "main" or a subagent id
            pa.field("turn", pa.int32()),
            pa.field("arrival_s", pa.float64(), nullable=False),
            pa.field("input_tokens", pa.int64(), nullable=False),
            pa.field("output_tokens", pa.int64(), nullable=False),
            pa.field("category", pa.string(), nullable=False),
            pa.field("model", pa.string()),
            pa.field("block_tokens", pa.int32(), nullable=False),
            pa.field("hash_ns", pa.int32(), nullable=False),
            pa.field("hash_ids", pa.list_(pa.int64()), nullable=False),
            pa.field("hashed_tokens", pa.int64(), nullable=False),
        ]
    ),
    rows_check=_requests_check,
)


def list_parts(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0, flat int64 values) of a list<int64> column such as `hash_ids`: the one
    way every stage flattens it, without a Python list per row."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    values = np.asarray(arr.values.to_numpy(zero_copy_only=False), dtype=np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    return offsets - start, values[start:end]
