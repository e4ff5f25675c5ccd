"""Benchmark: the fs layout's planner (kvwear.harness.plan.files, a Python loop over a dict of live
objects) against the extent layout's (one numba kernel) on the same ssd_ops stream, interleaved
(bench/_interleave.py), and the file plan's rate in ssd_ops per CPU second — to check the fs
planner's docstring claim that planning costs far less than playing.

The stream: `--ops` ssd_ops over objects of 432 KiB (a Kimi-K3 KV chunk), written in turn, the
oldest evicted while the live bytes exceed 80 % of a 64 GiB device, a read of a recent object every
tenth write. The player beside it makes a create, `write()` calls, an fsync and a close per write
(tests/harness/test_fs_player.py plays 600 objects in a few seconds on a loop device).

Run: .venv/bin/python bench/fs_layout.py [--ops 300000] [--rounds 5]
"""

from __future__ import annotations

import argparse

import numpy as np
import pyarrow as pa
from _interleave import add_round_options, interleave, rounds_of

from kvwear.harness.plan.files import plan_file_ops
from kvwear.harness.plan.planner import ReplayConfig, plan_block_ops
from kvwear.policies.schema import SSD_OPS

OBJECT_BYTES = 442_368
DEVICE_BYTES = 64 << 30


def stream(n_ops: int) -> pa.Table:
    """Writes in turn, FIFO evictions under 80 % of the device, a read every tenth write."""
    live_max = int(0.8 * DEVICE_BYTES) // OBJECT_BYTES
    ops: list[str] = []
    ids: list[int] = []
    oldest = nxt = 0
    while len(ops) < n_ops:
        if nxt - oldest >= live_max:
            ops.append("evict")
            ids.append(oldest)
            oldest += 1
        ops.append("write")
        ids.append(nxt)
        nxt += 1
        if nxt % 10 == 0:
            ops.append("read")
            ids.append(nxt - 2)
    n = len(ops)
    return SSD_OPS.conform(pa.table({
        "t_s": np.arange(n, dtype=np.float64), "op": ops, "obj_id": pa.array(ids, pa.int64()),
        "obj_kind": ["full"] * n, "bytes": pa.array(np.full(n, OBJECT_BYTES), pa.int64()),
        "session_id": pa.nulls(n, pa.string()), "cause": ["bench"] * n}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=300_000)
    add_round_options(ap)
    a = ap.parse_args()
    ops = stream(a.ops)
    res = interleave({
        "fs (files)": lambda: plan_file_ops(ops, ReplayConfig(capacity_bytes=DEVICE_BYTES, layout="fs")),
        "extent (blocks)": lambda: plan_block_ops(ops, ReplayConfig(capacity_bytes=DEVICE_BYTES, layout="extent")),
    }, **rounds_of(a))
    print(f"{ops.num_rows:,} ssd_ops, objects of {OBJECT_BYTES:,} bytes, device {DEVICE_BYTES >> 30} GiB")
    print("\n".join(res.table("extent (blocks)", work={k: ops.num_rows for k in res.times}, unit="ops")))


if __name__ == "__main__":
    main()
