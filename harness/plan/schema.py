"""The block plan's table: `block_ops`, what the planner hands the device stage (also exported as a
fio iolog)."""

from __future__ import annotations

import pyarrow as pa

from kvwear.tables import CATEGORY, TableSpec

# version 2 adds placement_handle: the FDP placement handle of each write (kvwear.harness.plan.placement;
# 0 = the default handle, also what a version-1 plan means)
BLOCK_OPS = TableSpec(
    kind="block_ops",
    version=2,
    schema=pa.schema(
        [
            pa.field("t_s", pa.float64(), nullable=False),
            pa.field("op", CATEGORY, nullable=False),          # write, read, trim
            pa.field("offset_bytes", pa.int64(), nullable=False),
            pa.field("length_bytes", pa.int64(), nullable=False),
            pa.field("obj_kind", CATEGORY, nullable=False),
            pa.field("obj_id", pa.int64(), nullable=False),
            pa.field("placement_handle", pa.int8(), nullable=False),
        ]
    ),
    defaults=(("placement_handle", 0),),
)
