"""The sim device streams its plan (issue #16): `SimDevice.replay` of a block_ops Parquet, read in
batches, counts exactly what the replay of the whole table counts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa

from harness.devices.base import DeviceSpec
from harness.devices.sim import SimDevice
from harness.schema import BLOCK_OPS
from kvwear.tables import write_table

U = 4096


def test_sim_streams_a_plan_file_in_batches_with_the_table_replay_s_result(tmp_path: Path) -> None:
    """FTL counters, intervals, FDP bytes per handle and the no-placement twin, batch by batch."""
    rng = np.random.default_rng(5)
    n, pages = 150_000, 4096                    # > two 65,536-row batches; a 16 MiB drive
    op = np.where(rng.random(n) < 0.85, 0, np.where(rng.random(n) < 0.5, 1, 2)).astype(np.int8)
    first = rng.integers(0, pages - 4, n)
    npg = rng.integers(1, 4, n)
    plan = BLOCK_OPS.conform(pa.table({
        "t_s": np.arange(n, dtype=np.float64),
        "op": pa.DictionaryArray.from_arrays(pa.array(op), pa.array(["write", "read", "trim"])),
        "offset_bytes": first * U, "length_bytes": npg * U,
        "obj_kind": pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 2, n).astype(np.int8)),
                                                   pa.array(["full", "linear"])),
        "obj_id": np.arange(n, dtype=np.int64),
        "placement_handle": pa.array(np.where(op == 0, rng.integers(0, 2, n), 0).astype(np.int8)),
    }))
    path = write_table(BLOCK_OPS, plan, tmp_path / "block_ops.parquet")
    spec = DeviceSpec("sim", "", pages * U, {"op_ratio": 0.2, "ruh": 2})
    ticks: list[tuple[int, int]] = []
    streamed = SimDevice(spec, tmp_path / "a").replay(path, tmp_path / "a", progress=lambda d, t: ticks.append((d, t)))
    whole = SimDevice(spec, tmp_path / "b").replay(plan, tmp_path / "b")
    assert len(ticks) >= 3 and ticks[-1] == (n, n)                  # batch by batch
    a, b = dataclasses.asdict(streamed), dataclasses.asdict(whole)
    for r in (a, b):
        for k in ("wall_s", "tool_output_path", "intervals_path"):
            r.pop(k)
    assert a == b
    assert a["extra"]["counters"]["gc_pages"] > 0                   # the drive collected garbage
    assert a["extra"]["no_placement"]["host_pages"] > 0 and a["extra"]["fdp"]["ruh"] == 2
