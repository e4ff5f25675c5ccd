"""Tables the harness writes: block_ops (planner → device), block_trace (eBPF capture),
wear (counter snapshots) and results (one row per run × policy)."""

from __future__ import annotations

import pyarrow as pa

from kvwear.tables import TableSpec

_DICT = pa.dictionary(pa.int8(), pa.string())

# version 2 adds placement_handle: the FDP placement handle of each write (harness.placement;
# 0 = the default handle, also what a version-1 plan means)
BLOCK_OPS = TableSpec(
    kind="block_ops",
    version=2,
    schema=pa.schema(
        [
            pa.field("t_s", pa.float64(), nullable=False),
            pa.field("op", _DICT, nullable=False),          # write, read, trim
            pa.field("offset_bytes", pa.int64(), nullable=False),
            pa.field("length_bytes", pa.int64(), nullable=False),
            pa.field("obj_kind", _DICT, nullable=False),
            pa.field("obj_id", pa.int64(), nullable=False),
            pa.field("placement_handle", pa.int8(), nullable=False),
        ]
    ),
    defaults=(("placement_handle", 0),),
)

BLOCK_TRACE = TableSpec(
    kind="block_trace",
    version=1,
    schema=pa.schema(
        [
            pa.field("t_ns", pa.int64(), nullable=False),
            pa.field("dev", pa.int64(), nullable=False),    # kernel dev_t (major << 20 | minor)
            pa.field("op", _DICT, nullable=False),          # write, read, discard, flush, other
            pa.field("sector", pa.int64(), nullable=False),
            pa.field("bytes", pa.int64(), nullable=False),
            pa.field("latency_ns", pa.int64()),             # null if completion was not seen
        ]
    ),
)

WEAR = TableSpec(
    kind="wear",
    version=1,
    schema=pa.schema(
        [
            pa.field("t_s", pa.float64(), nullable=False),
            pa.field("phase", _DICT, nullable=False),       # before, after, interval
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
