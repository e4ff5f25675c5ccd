"""The `ssd_ops` table: what the SSD tier must do, at object granularity (policies → replayer).

`op` is write, read or evict; `obj_kind` is full (a run of full-attention KV chunks) or linear
(a linear-attention / sliding-window state checkpoint). `cause` says why (e.g. dram_evict,
write_through, promote, stage). Rows are in time order.
"""

from __future__ import annotations

import pyarrow as pa

from kvwear.tables import TableSpec

OPS = ("write", "read", "evict")
OBJ_KINDS = ("full", "linear")

SSD_OPS = TableSpec(
    kind="ssd_ops",
    version=1,
    schema=pa.schema(
        [
            pa.field("t_s", pa.float64(), nullable=False),
            pa.field("op", pa.dictionary(pa.int8(), pa.string()), nullable=False),
            pa.field("obj_id", pa.int64(), nullable=False),
            pa.field("obj_kind", pa.dictionary(pa.int8(), pa.string()), nullable=False),
            pa.field("bytes", pa.int64(), nullable=False),
            pa.field("session_id", pa.string()),
            pa.field("cause", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        ]
    ),
)
