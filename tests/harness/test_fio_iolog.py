"""fio iolog v3 export: the text format, streaming in batches, and a replay by the real fio."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kvwear.errors import InputError
from kvwear.harness.devices.fio_iolog import export_iolog_v3
from kvwear.harness.devices.fio_runner import parse_fio_json
from kvwear.harness.plan.planner import ReplayConfig, plan_block_ops
from kvwear.harness.plan.schema import BLOCK_OPS
from kvwear.policies.schema import SSD_OPS

FIO = shutil.which("fio") or "/usr/bin/fio"


def _ssd_ops(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 3 << 20, 300)          # up to 3 MiB: split into ≤ 1 MiB I/Os
    rows = []
    live: list[int] = []
    for _ in range(n):
        if rng.random() < 0.6 or not live:
            o = int(rng.integers(0, 300))
            rows.append(("write", o))
            live.append(o)
        elif rng.random() < 0.7:
            rows.append(("read", live[int(rng.integers(0, len(live)))]))
        else:
            rows.append(("evict", live.pop(int(rng.integers(0, len(live))))))
    return SSD_OPS.conform(pa.table({
        "t_s": np.arange(n, dtype=np.float64) * 0.01,
        "op": [r[0] for r in rows],
        "obj_id": [r[1] for r in rows],
        "obj_kind": ["full"] * n,
        "bytes": [int(sizes[r[1]]) for r in rows],
        "session_id": pa.nulls(n, pa.string()),
        "cause": ["test"] * n,
    }))


def test_format_and_batches_agree(tmp_path: Path) -> None:
    plan = plan_block_ops(_ssd_ops(300, 1), ReplayConfig(capacity_bytes=256 << 20, layout="extent"))
    a = export_iolog_v3(plan.table, tmp_path / "a.iolog", filename="dev0")
    b = export_iolog_v3(plan.table, tmp_path / "b.iolog", filename="dev0", batch_rows=7)
    text = (tmp_path / "a.iolog").read_text()
    assert text == (tmp_path / "b.iolog").read_text()
    lines = text.splitlines()
    assert lines[:3] == ["fio version 3 iolog", "0 dev0 add", "0 dev0 open"]
    assert lines[-1].endswith(" dev0 close")
    body = [ln.split() for ln in lines[3:-1]]
    assert len(body) == plan.table.num_rows
    t = plan.table.to_pydict()
    first = body[0]
    assert first == ["0", "dev0", t["op"][0], str(t["offset_bytes"][0]), str(t["length_bytes"][0])]
    us = [int(x[0]) for x in body]
    assert us == sorted(us)
    assert us[-1] == round((t["t_s"][-1] - t["t_s"][0]) * 1e6)     # microseconds
    assert (a.write_bytes, a.read_bytes, a.trim_bytes) == (plan.aligned_write_bytes, plan.read_bytes,
                                                           plan.trim_bytes)
    assert (a.write_ios, a.read_ios, a.trim_ios) == (b.write_ios, b.read_ios, b.trim_ios)
    no_trim = export_iolog_v3(plan.table, tmp_path / "c.iolog", include_trims=False)
    assert no_trim.trim_ios == 0 and " trim " not in (tmp_path / "c.iolog").read_text()
    assert no_trim.write_bytes == a.write_bytes


def test_bad_op_and_filename(tmp_path: Path) -> None:
    bad = BLOCK_OPS.conform(pa.table({
        "t_s": [0.0, 1.0], "op": ["write", "flush"], "offset_bytes": [0, 0], "length_bytes": [4096, 4096],
        "obj_kind": ["full", "full"], "obj_id": [1, 1]}))
    with pytest.raises(InputError, match=r"block_ops:2: field 'op': unknown op 'flush'"):
        export_iolog_v3(bad, tmp_path / "x.iolog")
    assert not (tmp_path / "x.iolog").exists()
    with pytest.raises(InputError, match="spaces"):
        export_iolog_v3(bad, tmp_path / "y.iolog", filename="a b")


@pytest.mark.skipif(not Path(FIO).exists(), reason="fio not installed (Debian package fio)")
def test_real_fio_replays_exactly_the_planned_bytes(tmp_path: Path) -> None:
    cap = 128 << 20
    # the random stream rewrites live objects past the device's size: the head evicts what it meets
    plan = plan_block_ops(_ssd_ops(400, 2), ReplayConfig(capacity_bytes=cap, layout="log", log_full="evict"))
    assert plan.write_ios > 100 and plan.read_ios > 20
    log = export_iolog_v3(plan.table, tmp_path / "plan.iolog", include_trims=False)  # fio 3.33 drops trims
    target = tmp_path / "target.img"
    with open(target, "wb") as fh:       # a file this test made, sized to the plan's device
        fh.truncate(cap)
    out = subprocess.run(
        [FIO, "--name=replay", f"--read_iolog={log.path}", f"--replay_redirect={target}",
         "--replay_no_stall=1", "--direct=1", "--ioengine=psync", "--iodepth=1", "--output-format=json"],
        capture_output=True, check=True, timeout=300).stdout
    summary = parse_fio_json(out)
    assert not summary.errors
    assert summary.write.io_bytes == plan.aligned_write_bytes == log.write_bytes
    assert summary.write.total_ios == plan.write_ios
    assert summary.read.io_bytes == plan.read_bytes
    assert summary.read.total_ios == plan.read_ios
    assert json.loads(out[out.index(b"{"):])["jobs"][0]["job options"]["replay_redirect"] == str(target)
