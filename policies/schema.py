"""The `ssd_ops` table: what the SSD tier must do, at object granularity (policies → replayer).

One row per SSD object: `obj_kind` full is one full-attention KV block (a prefix-tree segment
of n blocks gives n rows with consecutive `obj_id`s), linear is one linear-attention /
sliding-window state checkpoint. `op` is write, read or evict; `cause` says why
(`kvwear.policies.metrics.CAUSES`: insert, dram_evict, hit, capacity, promote). Rows are in time order.
"""

from __future__ import annotations

import pyarrow as pa

from kvwear.tables import CATEGORY, TableSpec

OPS = ("write", "read", "evict")
OBJ_KINDS = ("full", "linear")

SSD_OPS = TableSpec(
    kind="ssd_ops",
    version=1,
    schema=pa.schema(
        [
            pa.field("t_s", pa.float64(), nullable=False),
            pa.field("op", CATEGORY, nullable=False),
            pa.field("obj_id", pa.int64(), nullable=False),
            pa.field("obj_kind", CATEGORY, nullable=False),
            pa.field("bytes", pa.int64(), nullable=False),
            pa.field("session_id", pa.string()),
            pa.field("cause", CATEGORY, nullable=False),
        ]
    ),
)
