"""The fs layout's planner: one file per object, LMCache-shaped names, the accounting, errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from kvwear.errors import InputError, KvwearError
from kvwear.harness.plan.files import (
    FILE_OPS,
    FsLayoutConfig,
    file_name,
    plan_file_ops,
    planned_write_bytes,
)
from kvwear.harness.plan.planner import ReplayConfig, plan_block_ops
from kvwear.tables import TableWriter, read_table
from tests.harness.test_plan import ssd_ops

MiB = 1 << 20


def test_each_object_is_a_file_written_read_and_unlinked() -> None:
    rows = [("write", 1, 3 * MiB + 5), ("write", 2, 10), ("read", 1, 0), ("evict", 1, 0),
            ("read", 1, 0), ("evict", 9, 0), ("write", 2, 4096), ("write", 3, 0)]
    table, c = plan_file_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=64 * MiB, layout="fs"),
                             fs=FsLayoutConfig(model="org/m", write_bytes=MiB))
    assert table.schema.equals(FILE_OPS.schema)
    assert table.column("op").to_pylist() == ["write", "write", "read", "unlink", "write", "write"]
    names = table.column("name").to_pylist()
    assert names[0] == names[2] == names[3] == file_name("org/m", 1, "full")
    assert names[0] == "kvwear@org-m@1@0@0000000000000001@full.pt"      # LMCache's '/' → '-'
    assert names[4] == names[1]                                          # a rewrite keeps the file
    assert table.column("length_bytes").to_pylist() == [3 * MiB + 5, 10, 3 * MiB + 5, 3 * MiB + 5, 4096, 0]
    assert c.object_write_bytes == 3 * MiB + 5 + 10 + 4096
    assert (c.writes, c.creates, c.rewrites, c.empty_writes) == (4, 3, 1, 1)
    assert (c.reads, c.read_bytes, c.read_misses, c.evict_misses) == (1, 3 * MiB + 5, 1, 1)
    assert (c.unlinks, c.unlink_bytes, c.rewrite_bytes) == (1, 3 * MiB + 5, 10)
    assert c.write_calls == 4 + 1 + 1                                    # ⌈size / write_bytes⌉ each
    assert (c.peak_live_bytes, c.peak_files) == (3 * MiB + 15, 2)
    assert (c.end_live_bytes, c.end_files) == (4096, 2)
    # the identity the player is checked against: writes − unlinks − truncated copies = what is left
    assert c.object_write_bytes - c.unlink_bytes - c.rewrite_bytes == c.end_live_bytes


def test_live_bytes_beyond_the_device_name_the_row() -> None:
    rows = [("write", 1, 3 * MiB), ("write", 2, 2 * MiB)]
    with pytest.raises(InputError, match=r"ops:2.*1048576 bytes short"):
        plan_file_ops(ssd_ops(rows), ReplayConfig(capacity_bytes=4 * MiB, layout="fs"), source="ops")


def test_block_planner_refuses_the_fs_layout_and_vice_versa() -> None:
    ops = ssd_ops([("write", 1, 4096)])
    with pytest.raises(KvwearError, match="places files, not blocks"):
        plan_block_ops(ops, ReplayConfig(capacity_bytes=MiB, layout="fs"))
    with pytest.raises(KvwearError, match="plans the fs layout"):
        plan_file_ops(ops, ReplayConfig(capacity_bytes=MiB, layout="extent"))
    with pytest.raises(KvwearError, match="valid: log, slab, extent, fs"):
        ReplayConfig(capacity_bytes=MiB, layout="files")  # type: ignore[arg-type]


def test_time_modes_and_batches() -> None:
    rows = [("write", i, 4096) for i in range(5)] + [("evict", i, 0) for i in range(5)]
    t = [10.0 + 2 * i for i in range(10)]
    whole, _ = plan_file_ops(ssd_ops(rows, t), ReplayConfig(capacity_bytes=MiB, layout="fs",
                                                             time_mode="compressed", time_compression=2.0))
    assert whole.column("t_s").to_pylist() == [float(i) for i in range(10)]
    afap, _ = plan_file_ops(ssd_ops(rows, t), ReplayConfig(capacity_bytes=MiB, layout="fs", time_mode="afap"))
    assert afap.column("t_s").to_pylist() == [float(i) for i in range(10)]
    # three modes, three distinct answers (at compression 2 `compressed` equals `afap`'s row index):
    # original keeps the 2 s spacing, compressed ×4 makes it 0.5 s, afap counts rows
    for mode, step in [("original", 2.0), ("compressed", 0.5), ("afap", 1.0)]:
        got, _ = plan_file_ops(ssd_ops(rows, t), ReplayConfig(capacity_bytes=MiB, layout="fs", time_mode=mode,  # type: ignore[arg-type]
                                                              time_compression=4.0))
        assert got.column("t_s").to_pylist() == [step * i for i in range(10)], mode
    # batched input (a callable giving record batches) plans the same rows
    src = ssd_ops(rows, t)
    batched, c = plan_file_ops(lambda: src.to_batches(max_chunksize=3),
                               ReplayConfig(capacity_bytes=MiB, layout="fs", time_mode="afap"))
    assert batched.equals(pa.Table.from_batches(afap.to_batches(), FILE_OPS.schema))
    assert c.unlinks == 5 and c.end_files == 0


def test_the_plan_carries_its_write_size(tmp_path: Path) -> None:
    """The write size the plan counted its write calls at travels with it (the player reads it)."""
    fs = FsLayoutConfig(write_bytes=64 << 10)
    table, c = plan_file_ops(ssd_ops([("write", 1, MiB)]), ReplayConfig(capacity_bytes=4 * MiB, layout="fs"), fs=fs)
    assert planned_write_bytes(table, "plan") == 64 << 10 and c.write_calls == 16
    path = tmp_path / "file_ops.parquet"
    with TableWriter(FILE_OPS, path, metadata=fs.metadata()) as out:
        out.write(table)
    assert planned_write_bytes(read_table(FILE_OPS, path), str(path)) == 64 << 10
    with pytest.raises(KvwearError, match="without its write size"):
        planned_write_bytes(FILE_OPS.conform(table), "plan")
