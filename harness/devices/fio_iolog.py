"""Streaming export of a BLOCK_OPS plan to fio's iolog version 3.

Format (fio(1), "Trace file format v3", fio ≥ 3.31): the first line is `fio version 3 iolog`; then
`timestamp filename action` lines for file management (add, open, close) and
`timestamp filename action offset length` lines for I/O (read, write, trim), offsets and lengths in
bytes. Timestamps are relative to the start of the run; fio 3.33 writes and honours them in
microseconds (measured: entries 500,000 apart replay 0.5 s apart). Replay with
`--read_iolog=LOG --replay_redirect=TARGET` (the log's filename is then only a token) and
`--replay_no_stall=1` to ignore the timestamps. Version 3 has no `wait` action.

Placement handles (block_ops' `placement_handle`) are not exported: an iolog line has no field
for them, and fio's FDP options (fio ≥ 3.34, `fdp=1`, `fdp_pli=`) choose a job's placement ID
by their own rule, not per logged I/O.

fio 3.33 drops an iolog's trim lines ('bad ddir: 2'; see kvwear.harness.devices.fio_runner.fio_replays_trim), so
callers replaying on such a fio pass `include_trims=False`.

The writer streams record batches: memory stays bounded by `batch_rows` whatever the plan size.
It shares `IologStats` and the header with kvwear.harness.devices.fio_runner; it is the one iolog writer of kvwear
(the fio and qemu device backends both use it). This module must not run fio.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from kvwear.errors import InputError
from kvwear.harness.devices.fio_runner import IOLOG_V3_HEADER, IologStats
from kvwear.tables import atomic_write

_DIRS = ("write", "read", "trim")


def export_iolog_v3(
    plan: pa.Table,
    path: str | Path,
    *,
    filename: str = "kvwear-target",
    include_trims: bool = True,
    batch_rows: int = 1 << 18,
) -> IologStats:
    """Write BLOCK_OPS rows (in order) as a fio iolog v3 at `path`, atomically.

    Timestamps are µs since the plan's first t_s, rounded to integers. Returns what the log holds
    per op (after leaving out trims if `include_trims` is False)."""
    if any(c.isspace() for c in filename) or not filename:
        raise InputError(str(path), None, "filename", f"an iolog filename token cannot hold spaces: {filename!r}")
    path = Path(path)
    t_col = plan.column("t_s")
    t0 = float(pc.min(t_col).as_py()) if plan.num_rows else 0.0
    counts = dict.fromkeys(_DIRS, 0)
    nbytes = dict.fromkeys(_DIRS, 0)
    last_us = 0
    row0 = 0
    # Lines are written by Arrow's CSV writer (space-delimited, unquoted): no Python string per
    # line, which is what keeps the export a small fraction of fio's own replay time.
    schema = pa.schema([("t", pa.int64()), ("f", pa.string()), ("op", pa.string()), ("off", pa.int64()),
                        ("len", pa.int64())])
    opts = pacsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    with atomic_write(path) as tmp, pa.OSFile(str(tmp), "wb") as sink:
        sink.write(f"{IOLOG_V3_HEADER}\n0 {filename} add\n0 {filename} open\n".encode())
        writer = pacsv.CSVWriter(sink, schema, write_options=opts)
        for batch in plan.select(["t_s", "op", "offset_bytes", "length_bytes"]).to_batches(batch_rows):
            ops = pc.cast(batch.column(1), pa.string())
            known = pc.is_in(ops, value_set=pa.array(_DIRS))
            if not pc.all(known).as_py():
                i = int(np.flatnonzero(~known.to_numpy(zero_copy_only=False))[0])
                raise InputError("block_ops", row0 + i + 1, "op",
                                 f"unknown op {ops[i].as_py()!r}; valid: {', '.join(_DIRS)}")
            t = batch.column(0).to_numpy(zero_copy_only=False)
            us = np.round((t - t0) * 1e6).astype(np.int64)
            off = batch.column(2)
            ln = batch.column(3)
            if not include_trims:
                keep = pc.not_equal(ops, "trim")
                us = us[keep.to_numpy(zero_copy_only=False)]
                ops, off, ln = ops.filter(keep), off.filter(keep), ln.filter(keep)
            row0 += batch.num_rows
            if len(ops) == 0:
                continue
            writer.write_table(pa.table([pa.array(us), pa.repeat(filename, len(ops)), ops,
                                         off.cast(pa.int64()), ln.cast(pa.int64())], schema=schema))
            last_us = max(last_us, int(us.max()))
            op_np = ops.to_numpy(zero_copy_only=False)
            ln_np = ln.to_numpy(zero_copy_only=False)
            for d in _DIRS:
                m = op_np == d
                counts[d] += int(m.sum())
                nbytes[d] += int(ln_np[m].sum())
        writer.close()
        sink.write(f"{last_us} {filename} close\n".encode())
    return IologStats(path, counts["write"], nbytes["write"], counts["read"], nbytes["read"],
                      counts["trim"], nbytes["trim"])
