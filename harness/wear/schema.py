"""The wear-counter snapshots' table: `wear`, one row per reader per phase (before, after, interval)."""

from __future__ import annotations

import pyarrow as pa

from kvwear.tables import CATEGORY, TableSpec

WEAR = TableSpec(
    kind="wear",
    version=1,
    schema=pa.schema(
        [
            pa.field("t_s", pa.float64(), nullable=False),
            pa.field("phase", CATEGORY, nullable=False),       # before, after, interval
            pa.field("policy", pa.string()),
            pa.field("source", pa.string(), nullable=False),  # reader name, e.g. nvme-smart-json
            pa.field("host_bytes_written", pa.int64()),
            pa.field("nand_bytes_written", pa.int64()),
            pa.field("percentage_used", pa.float64()),
            pa.field("data_units_written", pa.int64()),
            pa.field("raw", pa.string()),                   # the tool's own output, verbatim
        ]
    ),
)
