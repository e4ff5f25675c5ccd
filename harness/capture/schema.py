"""The eBPF capture's table: `block_trace`, one row per block request the kernel issued."""

from __future__ import annotations

import pyarrow as pa

from kvwear.tables import CATEGORY, TableSpec

BLOCK_TRACE = TableSpec(
    kind="block_trace",
    version=1,
    schema=pa.schema(
        [
            pa.field("t_ns", pa.int64(), nullable=False),
            pa.field("dev", pa.int64(), nullable=False),    # kernel dev_t (major << 20 | minor)
            pa.field("op", CATEGORY, nullable=False),          # write, read, discard, flush, other
            pa.field("sector", pa.int64(), nullable=False),
            pa.field("bytes", pa.int64(), nullable=False),
            pa.field("latency_ns", pa.int64()),             # null if completion was not seen
        ]
    ),
)
